"""An installation without an optional part (a pyproject extra): the node that needs it
stops at once, saying which command installs it, instead of a traceback."""
from __future__ import annotations

import subprocess
import sys

import pytest

from rpent_contract.extras import EXTRAS, MissingExtra, require


@pytest.mark.parametrize("module,executable,extra", [
    ("franky", "rpent_hw.franka_node", "franka"),
    ("lerobot", "rpent_hw.so101_node", "so101"),
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
