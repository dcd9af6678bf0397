"""The layer rules of ARCHITECTURE.md, read from the source: which package may import
which, and which modules stay free of rclpy. Static (ast), no ROS graph, a second."""
from __future__ import annotations

import ast
from collections import deque
from pathlib import Path
from typing import Optional

import pytest

SRC = Path(__file__).resolve().parents[1] / "ros_ws" / "src"

# ARCHITECTURE.md, "Floors": the project's packages each package may import.
MAY_IMPORT = {
    "rpent_common": set(),
    "rpent_contract": {"rpent_common"},
    "rpent_env_sim": {"rpent_common", "rpent_contract"},
    "rpent_hw": {"rpent_common", "rpent_contract"},
    "rpent_twins": {"rpent_common", "rpent_contract"},
    "rpent_am": {"rpent_common", "rpent_contract"},
    "rpent_perception": {"rpent_common", "rpent_contract"},
    "rpent_bag": {"rpent_common", "rpent_contract"},
    "rpent_foxglove": {"rpent_common", "rpent_contract", "rpent_bag"},
    "rpent_agent": {"rpent_common", "rpent_contract", "rpent_am", "rpent_perception",
                    "rpent_bag"},
    "rpent": {"rpent_common", "rpent_contract", "rpent_env_sim", "rpent_hw", "rpent_twins",
              "rpent_am", "rpent_perception", "rpent_bag", "rpent_foxglove", "rpent_agent"},
    # Beside the floors: tests and benchmarks use it, no product package may.
    "rpent_testkit": {"rpent_common", "rpent_contract", "rpent_env_sim", "rpent_hw",
                      "rpent_twins", "rpent_am", "rpent_perception", "rpent_bag",
                      "rpent_foxglove", "rpent_agent", "rpent"},
}

# ARCHITECTURE.md, "Plain-Python cores": modules that import no rclpy, not even lazily.
PLAIN_CORES = (
    "rpent_contract.names", "rpent_contract.driver", "rpent_contract.validation",
    "rpent_contract.control_space",
    "rpent_contract.motion", "rpent_contract.geometry", "rpent_contract.description",
    "rpent_contract.images", "rpent_contract.operator", "rpent_contract.perception",
    "rpent_contract.tf_tree", "rpent_contract.contributions", "rpent_contract.markers",
    "rpent_contract.spelling", "rpent_contract.settings", "rpent_contract.robot_settings",
    "rpent_common.processes", "rpent_common.http_json", "rpent_am.pick_place",
    "rpent_env_sim.libero_sim", "rpent_env_sim.cartesian_controller", "rpent_env_sim.mjcf_urdf",
    "rpent_hw.so101.kinematics", "rpent_hw.arm_driver", "rpent_hw.safety", "rpent_hw.cameras",
    "rpent_hw.arm_settings", "rpent_hw.franka.settings", "rpent_hw.franka.driver",
    "rpent_hw.so101.settings", "rpent_hw.so101.driver", "rpent_env_sim.settings",
    "rpent_am.settings", "rpent_am.backends", "rpent_agent.settings", "rpent_bag.settings",
    "rpent_foxglove.settings", "rpent_perception.settings", "rpent_twins.settings",
    "rpent_twins.scene", "rpent_twins.rendering", "rpent_twins.twin_port",
    "rpent_twins.twin_host", "rpent_twins.so101_twin", "rpent_twins.franky_sim",
    "rpent_twins.feetech_emulator", "rpent_contract.sam3_wire", "rpent_contract.rpc",
    "rpent_am.policy", "rpent_am.model_io", "rpent_am.observation",
    "rpent_am.backends.scripted", "rpent_am.backends.rpent_http", "rpent_am.rpc_backend",
    "rpent_perception.geometry", "rpent_perception.backends",
    "rpent_bag.recorder", "rpent_bag.definitions", "rpent_bag.latency", "rpent_bag.video",
    "rpent_bag.recover", "rpent_bag.check", "rpent_bag.embed",
    "rpent_agent.code_policy", "rpent_agent.code_sandbox", "rpent_agent.memory",
    "rpent_agent.recipes", "rpent_agent.prompts", "rpent_agent.skills",
    "rpent_agent.transcript", "rpent_agent.planners.api",
    "rpent.eval.stats", "rpent.eval.results", "rpent.eval.report", "rpent.export_dataset",
    "rpent_foxglove.layout",
)


class Source:
    """The Python modules of the packages under ``src`` (``<pkg>/<pkg>/**.py``), by dotted
    name, and the names each one imports, at any depth of its code."""

    def __init__(self, src: Path):
        self.files: dict[str, Path] = {}
        for path in sorted(src.glob("*/*/**/*.py")):
            rel = path.relative_to(src)
            if rel.parts[0] != rel.parts[1]:
                continue  # setup.py, resource files, a package's own test/ folder
            parts = list(rel.parts[1:])
            parts[-1] = parts[-1][:-3]
            if parts[-1] == "__init__":
                parts.pop()
            self.files[".".join(parts)] = path
        self._imports: dict[str, list[tuple[str, int]]] = {}

    def imports(self, module: str) -> list[tuple[str, int]]:
        """(imported name, line) for every import statement of ``module``."""
        if module not in self._imports:
            path = self.files[module]
            package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            found = []
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    found += [(alias.name, node.lineno) for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        anchor = ".".join(package[:len(package) - node.level + 1])
                        base = f"{anchor}.{base}" if base else anchor
                    found.append((base, node.lineno))
                    found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
            self._imports[module] = found
        return self._imports[module]

    def project_modules(self, name: str) -> list[str]:
        """The project's modules that importing ``name`` loads: it and its packages."""
        parts = name.split(".")
        return [m for m in (".".join(parts[:k]) for k in range(len(parts), 0, -1))
                if m in self.files]

    def forbidden_imports(self) -> list[str]:
        problems = []
        for module, path in self.files.items():
            owner = module.split(".")[0]
            allowed = MAY_IMPORT.get(owner)
            if allowed is None:
                problems.append(f"{path}: package {owner} has no row in ARCHITECTURE.md's "
                                "import table (MAY_IMPORT in this test)")
                continue
            for name, line in self.imports(module):
                target = name.split(".")[0]
                if target in MAY_IMPORT and target != owner and target not in allowed:
                    problems.append(f"{path}:{line}: {owner} imports {name}; it may import "
                                    f"only {sorted(allowed) or 'rpent_interfaces'} "
                                    "(ARCHITECTURE.md, Floors)")
        return problems

    def path_to(self, module: str, external: str) -> Optional[list[str]]:
        """The chain of imports by which ``module`` reaches the package ``external``."""
        came_from: dict[str, Optional[str]] = {module: None}
        queue = deque([module])
        while queue:
            current = queue.popleft()
            for name, line in self.imports(current):
                if name.split(".")[0] == external:
                    chain = [f"{current}:{line} imports {name}"]
                    while came_from[current] is not None:
                        current = came_from[current]
                        chain.append(current)
                    return list(reversed(chain))
                for loaded in self.project_modules(name):
                    if loaded not in came_from:
                        came_from[loaded] = current
                        queue.append(loaded)
        return None


@pytest.fixture(scope="module")
def source():
    return Source(SRC)


def test_every_package_imports_only_what_its_floor_allows(source):
    packages = {m.split(".")[0] for m in source.files}
    assert packages == set(MAY_IMPORT), "a package was added or removed: give it a row"
    assert source.forbidden_imports() == []


@pytest.mark.parametrize("module", PLAIN_CORES)
def test_plain_python_cores_import_no_rclpy(source, module):
    assert module in source.files, f"{module} moved: update ARCHITECTURE.md and this list"
    chain = source.path_to(module, "rclpy")
    assert chain is None, " -> ".join(chain)


def test_the_rules_catch_a_violation(tmp_path):
    """A perception module importing a robot package, and a core reaching rclpy through a
    helper, are both reported with the file and line."""
    for pkg, files in {
        "rpent_perception": {"__init__.py": "", "core.py": "from .helper import x\n",
                             "helper.py": "import numpy\n\ndef f():\n    import rclpy.node\n"},
        "rpent_hw": {"__init__.py": "", "arm.py": "from rpent_contract import driver\n"},
        "rpent_agent": {"__init__.py": "", "tool.py": "import rpent_hw.arm\n"},
        "rpent_contract": {"__init__.py": "", "driver.py": ""},
    }.items():
        root = tmp_path / pkg / pkg
        root.mkdir(parents=True)
        for name, text in files.items():
            (root / name).write_text(text)
    source = Source(tmp_path)
    problems = source.forbidden_imports()
    assert len(problems) == 1 and "tool.py:1: rpent_agent imports rpent_hw.arm" in problems[0]
    assert source.path_to("rpent_perception.core", "rclpy") == [
        "rpent_perception.core", "rpent_perception.helper:4 imports rclpy.node"]
    assert source.path_to("rpent_hw.arm", "rclpy") is None
