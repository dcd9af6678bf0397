"""Safety layer shared by every real arm: plain Python, no rclpy, no robot library.

The robot node applies it below the agent, after the contract's goal validation and
before anything reaches the arm: a second line of defence with limits an operator sets
per robot and per site. Every rejection raises :class:`SafetyRejected` naming the limit
that was hit and its value, so the agent (or a person) can correct the request.

* workspace box, finite values and shapes of every commanded path;
* maximum translation / rotation per control step and per goal (distance from where
  the goal started);
* velocity scaling of every motion's dynamics (:meth:`SafetyLayer.dynamics_factor`);
* :class:`Watchdog`: stops the arm when commands stop arriving in the middle of a chunk;
* :class:`ApprovalGate`: optional operator approval of each motion (off in simulation;
  on real hardware set ``require_approval: true`` and answer on ``safety/approve``).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from rpent_contract.geometry import (
    normalize_quaternion,
    quaternion_multiply,
    rotation_angle,
    rotvec_to_quaternion,
    slerp,
)
from rpent_contract.validation import GoalRejected, Workspace, check_finite


class SafetyRejected(GoalRejected):
    """The safety layer refused a motion; nothing moved."""


def _check_finite(values, what: str) -> None:
    try:
        check_finite(np.asarray(values, dtype=np.float64), what)
    except GoalRejected as err:
        raise SafetyRejected(str(err)) from None


@dataclass(frozen=True)
class SafetyLimits:
    workspace: Workspace
    max_translation_step: float  # m per control step
    max_rotation_step: float  # rad per control step
    max_goal_translation: float  # m from where the goal started
    max_goal_rotation: float  # rad from where the goal started
    velocity_scale: float = 1.0  # multiplies every motion's dynamics factor, (0, 1]
    watchdog_timeout: float = 0.5  # s without a command mid-chunk before the arm is stopped

    def __post_init__(self):
        for name in ("max_translation_step", "max_rotation_step", "max_goal_translation",
                     "max_goal_rotation", "watchdog_timeout"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"safety limit {name} must be a finite number > 0, got {value}")
        if not 0.0 < self.velocity_scale <= 1.0:
            raise ValueError(f"safety velocity_scale must be in (0, 1], got {self.velocity_scale}")


class SafetyLayer:
    """Checks commanded paths against :class:`SafetyLimits` before the arm moves.

    ``forward_kinematics(q) -> (position, quaternion)`` lets joint-space paths be held to
    the same Cartesian workspace and goal limits as Cartesian ones.
    """

    def __init__(self, limits: SafetyLimits,
                 forward_kinematics: Optional[Callable[[np.ndarray], tuple]] = None):
        self.limits = limits
        self.forward_kinematics = forward_kinematics

    def dynamics_factor(self, requested: float) -> float:
        """The dynamics factor a motion runs with: the request scaled by velocity_scale."""
        return float(np.clip(requested, 1e-3, 1.0)) * self.limits.velocity_scale

    def integrate_deltas(self, position, orientation, deltas: np.ndarray) -> tuple:
        """End-effector delta rows (dx, dy, dz m; rotation vector rad, base frame) -> the
        absolute (positions, quaternions) they command, checked as one path."""
        deltas = np.asarray(deltas, dtype=np.float64)
        if deltas.ndim != 2 or deltas.shape[1] != 6:
            raise SafetyRejected(f"end-effector deltas must be (steps, 6), got {deltas.shape}")
        _check_finite(deltas, "end-effector deltas")
        positions = np.asarray(position, float) + np.cumsum(deltas[:, :3], axis=0)
        quats, q = [], normalize_quaternion(orientation)
        for row in deltas:
            # Rotations act about the base axes at the end effector (pre-multiplied).
            q = normalize_quaternion(quaternion_multiply(rotvec_to_quaternion(row[3:]), q))
            quats.append(q)
        quats = np.array(quats)
        self.check_cartesian_path(position, orientation, positions, quats)
        return positions, quats

    def check_cartesian_path(self, position, orientation, positions, quats) -> None:
        """Each waypoint: finite, inside the workspace, within one step of the previous and
        within the goal limits of the start (``position``, ``orientation``)."""
        lim = self.limits
        positions, quats = np.asarray(positions, float), np.asarray(quats, float)
        if positions.ndim != 2 or positions.shape[1] != 3 or quats.shape != (len(positions), 4):
            raise SafetyRejected(f"a Cartesian path needs (steps, 3) positions and (steps, 4) "
                                 f"quaternions, got {positions.shape} and {quats.shape}")
        _check_finite(positions, "path positions")
        _check_finite(quats, "path orientations")
        start_p, start_q = np.asarray(position, float), normalize_quaternion(orientation)
        prev_p, prev_q = start_p, start_q
        for step, (p, q) in enumerate(zip(positions, quats)):
            why = lim.workspace.violation(p, start=start_p)
            if why:
                raise SafetyRejected(f"step {step} leaves the workspace: {why}")
            self._check_limit(np.linalg.norm(p - prev_p), lim.max_translation_step,
                              f"step {step} translation", "m", "max_translation_step")
            self._check_limit(rotation_angle(prev_q, q), lim.max_rotation_step,
                              f"step {step} rotation", "rad", "max_rotation_step")
            self._check_limit(np.linalg.norm(p - start_p), lim.max_goal_translation,
                              f"step {step} is a translation from the goal's start of", "m",
                              "max_goal_translation")
            self._check_limit(rotation_angle(start_q, q), lim.max_goal_rotation,
                              f"step {step} is a rotation from the goal's start of", "rad",
                              "max_goal_rotation")
            prev_p, prev_q = p, q

    def check_joint_path(self, q0, targets, lower, upper, max_step) -> None:
        """Joint targets (rad): finite, inside the joint limits, at most ``max_step`` per
        joint per step, and (with forward kinematics) a Cartesian path the layer accepts."""
        targets = np.asarray(targets, dtype=np.float64)
        if targets.ndim != 2 or targets.shape[1] != len(lower):
            raise SafetyRejected(f"joint targets must be (steps, {len(lower)}), "
                                 f"got {targets.shape}")
        _check_finite(targets, "joint targets")
        lower, upper = np.asarray(lower, float), np.asarray(upper, float)
        out = np.argwhere((targets < lower) | (targets > upper))
        if out.size:
            step, j = (int(i) for i in out[0])
            raise SafetyRejected(f"step {step} joint {j + 1} = {targets[step, j]:.4f} rad is "
                                 f"outside its limits [{lower[j]:.4f}, {upper[j]:.4f}] rad")
        path = np.vstack([np.asarray(q0, float), targets])
        jumps = np.abs(np.diff(path, axis=0))
        bad = np.argwhere(jumps > np.asarray(max_step, float) * (1 + 1e-9))
        if bad.size:
            step, j = (int(i) for i in bad[0])
            raise SafetyRejected(f"step {step} moves joint {j + 1} by {jumps[step, j]:.4f} rad, "
                                 f"more than the limit of {np.asarray(max_step)[j]:.4f} rad per step")
        if self.forward_kinematics is not None:
            start = self.forward_kinematics(path[0])
            poses = [self.forward_kinematics(q) for q in targets]
            self.check_cartesian_path(start[0], start[1], np.array([p for p, _ in poses]),
                                      np.array([q for _, q in poses]))

    def check_goal_target(self, position, orientation, target_position, target_orientation,
                          max_translation: Optional[float] = None) -> None:
        """A move_to target: finite, in the workspace and within the per-goal limits."""
        lim = self.limits
        _check_finite(target_position, "target position")
        why = lim.workspace.violation(target_position)
        if why:
            raise SafetyRejected(f"target outside the workspace: {why}")
        self._check_limit(np.linalg.norm(np.asarray(target_position) - np.asarray(position)),
                          max_translation or lim.max_goal_translation,
                          "the target is a translation of", "m", "max_goal_translation")
        self._check_limit(rotation_angle(orientation, target_orientation), lim.max_goal_rotation,
                          "the target is a rotation of", "rad", "max_goal_rotation")

    def clip_step(self, position, orientation, target_position, target_orientation,
                  max_translation: float, max_rotation: float) -> tuple:
        """The next waypoint towards a target: at most one step (the tighter of the given
        and the layer's limits) in translation and in rotation."""
        max_translation = min(max_translation, self.limits.max_translation_step)
        max_rotation = min(max_rotation, self.limits.max_rotation_step)
        p, target_p = np.asarray(position, float), np.asarray(target_position, float)
        offset = target_p - p
        dist = float(np.linalg.norm(offset))
        next_p = target_p if dist <= max_translation else p + offset * (max_translation / dist)
        angle = rotation_angle(orientation, target_orientation)
        next_q = (normalize_quaternion(target_orientation) if angle <= max_rotation
                  else slerp(orientation, target_orientation, max_rotation / angle))
        return next_p, next_q

    @staticmethod
    def _check_limit(value: float, limit: float, what: str, unit: str, name: str) -> None:
        # A path at exactly the limit must pass despite floating-point rounding.
        if value > limit * (1 + 1e-9) + 1e-12:
            raise SafetyRejected(f"{what} {value:.4f} {unit} exceeds the safety limit "
                                 f"{name} = {limit:g} {unit}")


class Watchdog:
    """Calls ``on_expire(reason)`` once when armed and not fed for ``timeout`` seconds.

    The streaming loop feeds it after every command; if that loop stalls mid-chunk (a
    blocked thread, a starved process) the arm is stopped instead of coasting on.
    """

    def __init__(self, timeout: float, on_expire: Callable[[str], None]):
        self.timeout = timeout
        self._on_expire = on_expire
        self._cond = threading.Condition()
        self._deadline: Optional[float] = None
        self._closed = False
        self.expired = False
        self._thread = threading.Thread(target=self._run, name="safety-watchdog", daemon=True)
        self._thread.start()

    def arm(self) -> None:
        with self._cond:
            self.expired = False
            self._deadline = time.monotonic() + self.timeout
            self._cond.notify()

    def feed(self) -> None:
        with self._cond:
            if self._deadline is not None:
                self._deadline = time.monotonic() + self.timeout

    def disarm(self) -> None:
        with self._cond:
            self._deadline = None
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(2.0)

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._deadline, self.expired = None, True
                self._cond.release()
                try:
                    self._on_expire(f"safety watchdog: no command for {self.timeout:g} s "
                                    "in the middle of a chunk; the arm was stopped")
                finally:
                    self._cond.acquire()


class ApprovalGate:
    """Optional operator approval of motions.

    When enabled, :meth:`request` blocks a motion until an operator approves or denies it
    (``safety/approve``, std_srvs/SetBool), the motion is stopped, or the wait times out.
    Off by default in simulation; on real hardware enable it while a policy is untested.
    """

    def __init__(self, enabled: bool, timeout: float):
        self.enabled = enabled
        self.timeout = timeout
        self._cond = threading.Condition()
        self._pending: Optional[str] = None
        self._answer: Optional[bool] = None

    @property
    def pending(self) -> str:
        with self._cond:
            return self._pending or ""

    def request(self, description: str, stopped: Callable[[], bool]) -> None:
        """Return when approved; raise :class:`SafetyRejected` when denied or unanswered."""
        if not self.enabled:
            return
        deadline = time.monotonic() + self.timeout
        with self._cond:
            self._pending, self._answer = description, None
            try:
                while self._answer is None:
                    if stopped():
                        raise SafetyRejected("stopped while waiting for operator approval")
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise SafetyRejected(
                            f"no operator approval within {self.timeout:g} s; approve with the "
                            "safety/approve service (data: true) while the motion is pending")
                    self._cond.wait(min(left, 0.05))
                if not self._answer:
                    raise SafetyRejected("denied by the operator (safety/approve data: false)")
            finally:
                self._pending = None

    def answer(self, approve: bool) -> tuple[bool, str]:
        with self._cond:
            if self._pending is None:
                return False, "no motion is waiting for approval"
            self._answer = approve
            self._cond.notify_all()
            return True, f"{'approved' if approve else 'denied'}: {self._pending}"
