"""Goal checks every robot node applies before anything moves.

Each check raises :class:`GoalRejected` whose message names the offending value and
the limit it broke, so an agent (or a person) can correct the request.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .control_space import ControlSpaceSpec, find_space
from .geometry import normalize_quaternion


class GoalRejected(ValueError):
    """A goal was refused before execution; nothing moved."""


class Workspace:
    """Axis-aligned box in the robot base frame the end effector must stay inside."""

    def __init__(self, lower: Sequence[float], upper: Sequence[float]):
        self.lower = np.asarray(lower, dtype=np.float64)
        self.upper = np.asarray(upper, dtype=np.float64)
        if self.lower.shape != (3,) or self.upper.shape != (3,):
            raise ValueError("workspace bounds need 3 values each (x, y, z in metres)")
        if not (np.all(np.isfinite(self.lower)) and np.all(np.isfinite(self.upper))):
            raise ValueError("workspace bounds must be finite")
        if np.any(self.lower >= self.upper):
            raise ValueError(
                f"workspace min {self.lower.tolist()} must be below max {self.upper.tolist()}"
            )

    def contains(self, position) -> bool:
        p = np.asarray(position, dtype=np.float64)
        return bool(np.all(p >= self.lower) and np.all(p <= self.upper))

    def violation(self, position, start=None) -> str | None:
        """Which bound a position breaks, as text, or None when inside. ``start``: where the
        path through it begins. A hand already beyond a side (an arm overshooting the floor
        it was sent to) may come back, never go farther: otherwise every relative chunk,
        which starts where the hand is, is refused, and a policy cannot bring it back."""
        p = np.asarray(position, dtype=np.float64)
        lower, upper = self.lower, self.upper
        if start is not None:
            lower = np.minimum(lower, np.asarray(start, dtype=np.float64))
            upper = np.maximum(upper, np.asarray(start, dtype=np.float64))
        for i, axis in enumerate("xyz"):
            if p[i] < lower[i]:
                return (f"{axis}={p[i]:.3f} m is below the workspace minimum "
                        f"{self.lower[i]:.3f} m" + _beyond(lower[i], self.lower[i]))
            if p[i] > upper[i]:
                return (f"{axis}={p[i]:.3f} m is above the workspace maximum "
                        f"{self.upper[i]:.3f} m" + _beyond(upper[i], self.upper[i]))
        return None


def _beyond(start: float, bound: float) -> str:
    return "" if start == bound else f" and farther out than the path's start ({start:.3f} m)"


def check_finite(values: np.ndarray, what: str) -> None:
    bad = np.argwhere(~np.isfinite(values))
    if bad.size:
        idx = tuple(int(i) for i in bad[0])
        raise GoalRejected(f"{what} contains a non-finite value ({values[idx]}) at index {idx}")


def check_chunk(
    actions: np.ndarray,
    control_space: str,
    spaces: Sequence[ControlSpaceSpec],
    *,
    max_horizon: int,
    ee_position=None,
    workspace: Workspace | None = None,
    current=None,
) -> ControlSpaceSpec:
    """Validate a (horizon, dim) chunk; return its control space.

    For relative Cartesian spaces with a known ``step_scale`` the chunk is integrated
    open-loop from ``ee_position``: a chunk whose commanded path leaves the workspace (or,
    from a hand already outside, goes farther out) is refused before the first step rather
    than stopped halfway. For absolute spaces with
    ``max_step_change``, ``current`` (the state in the space's columns) anchors step 0.
    """
    try:
        space = find_space(spaces, control_space)
    except KeyError:
        names = ", ".join(s.name for s in spaces)
        raise GoalRejected(
            f"unknown control space '{control_space}'; this robot accepts: {names}"
        ) from None
    if actions.ndim != 2 or actions.shape[0] == 0:
        raise GoalRejected(f"chunk must have at least one step, got shape {actions.shape}")
    if actions.shape[1] != space.dim:
        raise GoalRejected(
            f"control space '{space.name}' has {space.dim} values per step "
            f"({', '.join(space.labels)}), the chunk has {actions.shape[1]}"
        )
    if actions.shape[0] > max_horizon:
        raise GoalRejected(
            f"chunk has {actions.shape[0]} steps, more than this robot's limit of {max_horizon}"
        )
    check_finite(actions, "chunk")
    lower, upper = np.asarray(space.lower), np.asarray(space.upper)
    out = np.argwhere((actions < lower) | (actions > upper))
    if out.size:
        step, col = (int(i) for i in out[0])
        raise GoalRejected(
            f"step {step} '{space.labels[col]}' = {actions[step, col]:g} {space.units[col]} is "
            f"outside [{lower[col]:g}, {upper[col]:g}] of control space '{space.name}'"
        )
    if not space.relative and space.max_step_change:
        limit = np.asarray(space.max_step_change)
        path = actions if current is None else np.vstack([np.asarray(current, float), actions])
        # A ramp at exactly the limit must pass despite floating-point rounding.
        jumps = np.argwhere(np.abs(np.diff(path, axis=0)) > limit * (1 + 1e-9) + 1e-12)
        if jumps.size:
            row, col = (int(i) for i in jumps[0])
            step = row if current is not None else row + 1
            raise GoalRejected(
                f"step {step} changes '{space.labels[col]}' by "
                f"{abs(np.diff(path, axis=0)[row, col]):g} {space.units[col]}, more than the "
                f"limit of {limit[col]:g} per step in control space '{space.name}'"
            )
    path = commanded_path(space, actions, ee_position)
    if path is not None and workspace is not None:
        for step, p in enumerate(path):
            why = workspace.violation(p, start=ee_position)
            if why:
                raise GoalRejected(f"chunk would leave the workspace at step {step}: {why}")
    return space


def commanded_path(space: ControlSpaceSpec, actions: np.ndarray, ee_position):
    """The end-effector positions a chunk commands, integrated open-loop from
    ``ee_position``: (horizon, 3), in the space's frame; None where the space is not a
    relative Cartesian one with a known ``step_scale`` (or no position is given)."""
    if not (space.relative and space.step_scale) or ee_position is None:
        return None
    return np.asarray(ee_position, dtype=np.float64) + np.cumsum(
        actions[:, :3] * np.asarray(space.step_scale[:3]), axis=0
    )


def check_pose_target(
    position, orientation, *, workspace: Workspace, position_only: bool
) -> np.ndarray:
    """Validate a Cartesian target; return its normalised quaternion."""
    position = np.asarray(position, dtype=np.float64)
    check_finite(position, "target position")
    orientation = np.asarray(orientation, dtype=np.float64)
    if position_only:
        quat = np.array([0.0, 0.0, 0.0, 1.0])
    else:
        check_finite(orientation, "target orientation")
        try:
            quat = normalize_quaternion(orientation)
        except ValueError as err:
            raise GoalRejected(f"target orientation: {err}; send a unit quaternion") from None
    why = workspace.violation(position)
    if why:
        raise GoalRejected(f"target outside the workspace: {why}")
    return quat


def check_positive(value: float, what: str) -> None:
    if not np.isfinite(value) or value < 0:
        raise GoalRejected(f"{what} must be a finite number >= 0, got {value}")


# A goal that may run longer than this is a mistake (seconds given as milliseconds, 1e308):
# its step budget would overflow, and nobody waits an hour for one motion.
MAX_GOAL_TIMEOUT = 3600.0


def check_timeout(value: float, what: str = "timeout") -> None:
    check_positive(value, what)
    if value > MAX_GOAL_TIMEOUT:
        raise GoalRejected(
            f"{what} {value:g} s is longer than the {MAX_GOAL_TIMEOUT:g} s one goal may take; "
            "give seconds, or 0 for the robot's default")


def check_step_period(value: float, control_period: float) -> None:
    """A chunk's ``step_period`` (0 = the robot's control period) must be the robot's own:
    rows are executed one per control period, and running a chunk made for another rate
    would move the arm faster or slower than the model meant."""
    check_positive(value, "step_period")
    if value and abs(value - control_period) > 1e-3 * control_period:
        raise GoalRejected(
            f"step_period {value:g} s differs from this robot's control period "
            f"{control_period:g} s, and it executes one row per period; send step_period 0 "
            f"or {control_period:g}, or resample the chunk to that rate")
