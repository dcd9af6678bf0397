"""A third arm on :class:`rpent_hw.arm_driver.ArmDriver`, the README's guide worked through:
a three-axis gantry whose joints are the end effector's x, y, z (m), with a gripper.

Its "hardware" is a thread that moves each axis toward its target at most ``speed`` m/s, so
the gantry trails a fast stream as a real arm does. Everything that makes it an arm of the
project (the safety layer, approval, the chunk watchdog, hand-over between streamed
chunks, stop within a control period, reset, episodes) comes from the base.
"""
from __future__ import annotations

import threading
import time
from typing import Optional

import numpy as np

from rpent_contract.control_space import ControlSpaceSpec
from rpent_contract.driver import GripperOutcome, Motion, RobotDescription, RobotSnapshot
from rpent_contract.validation import GoalRejected, Workspace
from rpent_hw.arm_driver import ArmDriver, ArmSettings, RobotFault, ee_delta_space
from rpent_hw.safety import ApprovalGate, SafetyLayer, SafetyLimits, SafetyRejected

AXES = ("x", "y", "z")
LOWER, UPPER = np.array([0.0, -0.5, 0.0]), np.array([1.0, 0.5, 0.6])
UPRIGHT = np.array([0.0, 0.0, 0.0, 1.0])  # a gantry's tool never turns


def gantry_settings(rate: float = 50.0, max_step: float = 0.01) -> ArmSettings:
    limits = SafetyLimits(workspace=Workspace([0.1, -0.4, 0.05], [0.9, 0.4, 0.5]),
                          max_translation_step=max_step, max_rotation_step=0.05,
                          max_goal_translation=0.8, max_goal_rotation=1.0)
    return ArmSettings(control_rate=rate, safety=SafetyLayer(limits),
                       approval=ApprovalGate(enabled=False, timeout=1.0), cameras={},
                       instruction="", settle_timeout=2.0, max_target_lead=0.01,
                       max_target_lag=1.0)


class GantryDriver(ArmDriver):
    embodiment = "gantry"
    reset_does = "it moves the gantry to home"

    def __init__(self, settings: ArmSettings, log, speed: float = 0.4,
                 home=(0.5, 0.0, 0.3)):
        super().__init__(settings, log)
        self._speed, self._home = speed, np.asarray(home, float)
        self.home_text = f"home {self._home.tolist()}"
        step = settings.safety.limits.max_translation_step
        self._max_step = step
        self._description = RobotDescription(
            embodiment=self.embodiment, simulated=False, joint_names=list(AXES),
            camera_names=[], control_rate=settings.control_rate, gripper_max_width=0.1,
            control_spaces=[
                ee_delta_space(step, settings.safety.limits.max_rotation_step, "base_link",
                               note=" (a gantry takes no rotation: keep them 0)"),
                ControlSpaceSpec(name="joint_position", relative=False, labels=AXES + ("gripper",),
                                 units=("m",) * 3 + ("1",), lower=tuple(LOWER) + (-1.0,),
                                 upper=tuple(UPPER) + (1.0,), max_step_change=(step,) * 3 + (2.0,),
                                 description="Absolute axis positions, m; then the gripper")])
        self.jammed = False  # the next cycle fails, as a stalled axis would
        self._present = self._target = self._home.copy()
        self._velocity, self._width, self._cycles = np.zeros(3), 0.1, 0
        self._cycle = threading.Condition(self._lock)
        self._latest = self._snapshot()
        self._start(self._loop, "gantry")

    # --- the hardware ---------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._closed.wait(self._period):
            with self._lock:
                step = np.clip(self._target - self._present, -self._speed * self._period,
                               self._speed * self._period)
                self._present = self._present + step
                self._velocity = step / self._period
            snap = self._snapshot()
            with self._cycle:
                self._latest = snap
                self._cycles += 1
                self._cycle.notify_all()

    def _snapshot(self) -> RobotSnapshot:
        errors, images, step, task = self._status([])
        with self._lock:
            present, velocity, width = self._present.copy(), self._velocity.copy(), self._width
        return RobotSnapshot(
            joint_names=list(AXES), joint_positions=present, joint_velocities=velocity,
            ee_position=present, ee_orientation=UPRIGHT.copy(), gripper_width=width,
            episode_step=step, errors=errors, images=images, task=task,
            stamp_ns=time.time_ns())

    def _next_sample(self) -> RobotSnapshot:
        with self._cycle:
            seen = self._cycles
            if not self._cycle.wait_for(lambda: self._cycles > seen, 1.0):
                raise RobotFault("the gantry's controller stopped answering")
            return self._latest

    def _wait_period(self, motion: Motion) -> None:
        self._next_sample()
        with self._lock:
            self._episode_step += 1
        if self.jammed:
            raise RobotFault("axis jammed: free it and call reset")

    # --- the motion hooks -----------------------------------------------------------------
    def _begin(self, motion: Motion) -> np.ndarray:
        fault = self._claim(motion)
        if fault:
            raise GoalRejected(fault)
        return self.snapshot().ee_position

    def _chunk_rows(self, space, actions, present, handover) -> tuple:
        start = present if handover is None else handover
        if space.name == "ee_delta":
            if np.any(actions[:, 3:6]):
                raise SafetyRejected("a gantry cannot rotate: send drx = dry = drz = 0")
            positions, _ = self.safety.integrate_deltas(start, UPRIGHT, actions[:, :6])
        else:
            positions = actions[:, :3]
            self.safety.check_joint_path(start, positions, LOWER, UPPER, [self._max_step] * 3)
            self.safety.check_cartesian_path(start, UPRIGHT, positions,
                                             np.tile(UPRIGHT, (len(positions), 1)))
        return positions, positions

    def _handover_position(self, handover) -> np.ndarray:
        return handover

    def _pull_handover(self, handover, share: float):
        present = self.snapshot().ee_position
        return present + share * (np.asarray(handover) - present)

    def _send_row(self, row, motion: Motion) -> bool:
        with self._cmd_lock:
            if motion.stopped:
                return False
            with self._lock:
                self._target = np.asarray(row, float).copy()
        self._wait_period(motion)
        return True

    def _check_move(self, present, position, orientation, position_only,
                    orientation_tolerance) -> None:
        if not position_only and not np.allclose(np.abs(orientation @ UPRIGHT), 1.0):
            raise SafetyRejected("a gantry keeps its tool upright: send position_only")

    def _move_toward(self, waypoint, new, position_only) -> bool:
        with self._lock:
            self._target = np.asarray(waypoint[0], float).copy()
        return True

    def _at_rest(self, snap: RobotSnapshot) -> bool:
        return not np.any(snap.joint_velocities)

    def _home_rows(self, present) -> np.ndarray:
        n = max(1, int(np.ceil(np.abs(self._home - present).max() / self._max_step)))
        path = present + (self._home - present) * (np.arange(1, n + 1)[:, None] / n)
        self._joint_safety.check_joint_path(present, path, LOWER, UPPER, [self._max_step] * 3)
        return path

    def _go_home(self, rows, motion: Motion) -> None:
        _done, err = self._stream(rows, motion)
        if err is not None:
            raise err

    def _settle(self, motion: Optional[Motion] = None) -> None:
        deadline, still = time.monotonic() + self._settle_timeout, 0
        while time.monotonic() < deadline and still < 2 and \
                not (motion is not None and motion.handed_over):
            still = still + 1 if self._at_rest(self._next_sample()) else 0

    def hold(self) -> None:
        with self._cmd_lock, self._lock:
            self._handover = None
            self._target = self._present.copy()

    def gripper(self, width, max_effort, motion) -> GripperOutcome:
        self._begin(motion)
        with self._lock:
            self._width = float(np.clip(width, 0.0, 0.1))
        snap = self._next_sample()
        return GripperOutcome(snap.gripper_width, True, False, snap)

    def state_in_space(self, space_name: str) -> Optional[np.ndarray]:
        return None
