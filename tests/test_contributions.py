"""Packages contribute bring-ups, tools and prompts through entry points: the example package
installed with pip, and packages whose contribution is broken."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from distributions import install
from rpent.bringup import bringups, describe
from rpent_contract.contributions import ContributionError


def rpent_start_list(*site: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(s) for s in site] + [os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "rpent.start", "--list"], env=env,
                          capture_output=True, text=True, timeout=60)


def test_an_installed_package_adds_its_bring_up(example_package, monkeypatch):
    assert "libero_soup" not in rpent_start_list().stdout
    listed = rpent_start_list(example_package)
    assert listed.returncode == 0, listed.stderr
    assert "libero_soup: LIBERO's alphabet soup into the basket (the rpent_example package)" \
        in listed.stdout

    monkeypatch.syspath_prepend(str(example_package))
    assert "libero_soup" in bringups() and "libero_sim" in bringups()
    robot, *_ = describe("libero_soup", {"run_dir": "/tmp/soup"})
    assert (robot.executable, robot.parameters["suite"], robot.parameters["task_id"]) == \
        ("libero_node", "libero_object", 0)
    with pytest.raises(ValueError, match=r"unknown argument\(s\) task_id"):
        describe("libero_soup", {"task_id": "3"})  # the package pins its task


BRINGUP_NAMED_LIKE_OURS = """
from rpent.bringup import BUILT_IN, Bringup
CLASH = Bringup("libero_sim", "another libero_sim", (), lambda args: [])
"""


@pytest.mark.parametrize("entry, modules, expected", [
    ("rpent_not_installed_module:BRINGUP", {},
     "'mine' (rpent_not_installed_module:BRINGUP) of package rpent-broken, in rpent.bringups "
     "does not load: ModuleNotFoundError"),
    ("os:sep", {}, "is a str, not a rpent.bringup.Bringup; fix rpent-broken's entry point"),
    ("rpent_clashing_bringup:CLASH", {"rpent_clashing_bringup": BRINGUP_NAMED_LIKE_OURS},
     "registers a bring-up named 'libero_sim', which exists already: rename it"),
])
def test_a_broken_contribution_names_the_package_to_fix(tmp_path, monkeypatch, entry, modules,
                                                       expected):
    site = install(tmp_path / "site", "rpent-broken", "rpent.bringups", {"mine": entry}, modules)
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(ContributionError) as err:
        bringups()
    assert expected in str(err.value)
    listed = rpent_start_list(site)
    assert listed.returncode == 2 and expected in listed.stderr, listed
