"""Robot implementations the contract suite runs against.

Adding a robot node to the suite is adding a RobotUnderTest here (and starting whatever
emulator it needs in ``start``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np


@dataclass
class RobotUnderTest:
    id: str
    package: str
    executable: str
    parameters: dict = field(default_factory=dict)
    params_file: Optional[Path] = None
    startup_timeout: float = 180.0

    def wiggle(self, info, steps: int) -> tuple[str, np.ndarray]:
        """A chunk in the default space that moves the arm back and forth around where it is.

        Rows alternate in sign so the chunk's net displacement is zero and it never
        approaches the workspace limits, however long it runs.
        """
        space = next(s for s in info.control_spaces if s.name == info.default_control_space)
        if not space.relative:
            raise NotImplementedError(f"{self.id}: define a wiggle for absolute space {space.name}")
        rows = np.zeros((steps, space.dim))
        rows[:, 0] = 0.3 * space.upper[0] * np.where(np.arange(steps) % 2 == 0, 1.0, -1.0)
        return space.name, rows


ROBOTS = [
    RobotUnderTest(
        id="libero",
        package="rpent_env_sim",
        executable="libero_node",
        # The shipped config, so the suite also proves it loads and is coherent.
        params_file=Path(__file__).resolve().parents[2] / "config" / "libero_sim.yaml",
    ),
]
