"""What installed packages contribute to rpent, found through Python entry points.

A robot or task package names its contributions in its packaging metadata, one group each,
and they are found as soon as the package is installed (pip, colcon) or on ``PYTHONPATH``;
no file of rpent is edited::

    [project.entry-points."rpent.bringups"]
    my_arm = "my_pkg.bringup:BRINGUP"       # an rpent.bringup.Bringup
    [project.entry-points."rpent.tools"]
    my_tools = "my_pkg.tools:tools"         # a function: Toolkit -> list of rpent_agent Tool
    [project.entry-points."rpent.prompts"]
    my_prompt = "my_pkg.prompts:PROMPT"     # an rpent_agent.prompts.PromptBundle

(with setuptools' ``setup.py``: ``entry_points={"rpent.tools": ["my_tools = my_pkg.tools:tools"]}``).
A contribution that cannot be loaded, or is not what its group takes, stops whatever loads
it with the package and entry point to fix: a silently missing tool or bring-up would
change what a run does without saying so.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Optional

BRINGUPS = "rpent.bringups"
TOOLS = "rpent.tools"
PROMPTS = "rpent.prompts"


class ContributionError(RuntimeError):
    """An installed package's contribution is broken; the message names it."""


@dataclass(frozen=True)
class Contribution:
    group: str
    name: str  # the entry point's name
    package: str  # the distribution that declares it
    target: str  # "module:attribute"
    value: object

    def __str__(self) -> str:
        return f"'{self.name}' ({self.target}) of package {self.package}"


def contributions(group: str, kind: Optional[type] = None) -> list:
    """Every installed package's contribution to ``group``, loaded, in a stable order;
    ``kind``: the type each must be."""
    found, seen = [], set()
    for point in sorted(entry_points(group=group), key=lambda p: (p.name, p.value)):
        if (point.name, point.value) in seen:  # one distribution seen on two path entries
            continue
        seen.add((point.name, point.value))
        package = point.dist.name if point.dist is not None else "?"
        where = f"'{point.name}' ({point.value}) of package {package}, in {group}"
        try:
            value = point.load()
        except Exception as err:  # noqa: BLE001 - any import failure of a third party's code
            raise ContributionError(f"{where} does not load: {type(err).__name__}: {err}; fix "
                                    f"or uninstall {package}") from err
        if kind is not None and not isinstance(value, kind):
            raise ContributionError(f"{where} is a {type(value).__name__}, not a "
                                    f"{kind.__module__}.{kind.__name__}; fix {package}'s "
                                    "entry point")
        found.append(Contribution(group, point.name, package, point.value, value))
    return found
