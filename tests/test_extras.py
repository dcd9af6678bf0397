"""An installation without an optional part (a pyproject extra): the node that needs it
stops at once, saying which command installs it, instead of a traceback."""
from __future__ import annotations

import subprocess
import sys

import pytest

from rpent_contract.extras import EXTRAS, MissingExtra, require


@pytest.mark.parametrize("module,executable,extra", [
    ("franky", "rpent_hw.franka.node", "franka"),
    ("lerobot", "rpent_hw.so101.node", "so101"),
])
def test_a_node_without_its_extra_names_the_command_that_installs_it(module, executable, extra):
    # ``None`` in sys.modules makes every import of the package fail as if it were absent.
    code = (f"import sys; sys.modules[{module!r}] = None; "
            f"from {executable} import main; main()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"needs the '{extra}' extra" in proc.stderr, proc.stderr
    assert f"scripts/setup.sh --extras {extra}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def test_require_returns_the_module_or_the_way_to_install_it():
    assert require("models", "json parsing", "json").dumps([1]) == "[1]"
    with pytest.raises(MissingExtra, match=r"scripts/setup.sh --extras models"):
        require("models", "the lerobot backend", "rpent_no_such_module")
    with pytest.raises(KeyError):
        require("gpu", "anything", "json")


def test_every_extra_is_in_pyproject_and_in_all():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    declared = {line.split("=", 1)[0].strip() for line in section.splitlines()
                if line and not line.startswith((" ", "#", "]"))}
    assert set(EXTRAS) | {"test", "all"} <= declared, declared
    everything = next(line for line in section.splitlines() if line.startswith("all ="))
    assert all(name in everything for name in [*EXTRAS, "test"]), everything


def test_the_main_job_needs_no_torch():
    """`make run` installs no 'models' extra (torch alone is 6.6 GB of CUDA wheels): the
    LIBERO robot, the scripted model, the agent, the recorder and the starter must run
    without it, so none of them may import it, even lazily on the way to a first step."""
    code = """if True:
        import sys
        sys.modules["torch"] = None
        import rpent.start, rpent_agent.agent_node, rpent_am.am_node, rpent_bag.record_node
        import rpent_am.backends.scripted, rpent_env_sim.libero_node
        import numpy as np
        from rpent_env_sim.libero_sim import LiberoSim
        with LiberoSim("libero_object", 0, init_state_index=0, cameras=()) as sim:
            sim.step(np.zeros(7), render=False)
        """
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_what_the_workspace_builds_on_is_not_replaced_by_the_python_dependencies():
    """scripts/setup.sh builds ros_ws while pip installs pyproject.toml's dependencies: each
    package the ROS wheels' requirements pin that this environment holds must still be at
    that version, or pip replaced it (numpy's headers, setuptools) under a running build."""
    import os
    import re
    from importlib.metadata import PackageNotFoundError, version
    from pathlib import Path

    if os.environ.get("RPENT_PYPI_ROS") != "1":
        pytest.skip("a sourced ROS distro: the ROS wheels' requirements were not installed")
    pins = Path(__file__).resolve().parents[1] / "scripts/ros-jazzy-requirements.txt"
    wrong = {}
    for line in pins.read_text().splitlines():
        pinned = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)", line.strip())
        if not pinned:
            continue
        try:
            installed = version(pinned[1])
        except PackageNotFoundError:
            continue
        if installed != pinned[2]:
            wrong[pinned[1]] = f"{pinned[2]} pinned, {installed} installed"
    assert not wrong, wrong
