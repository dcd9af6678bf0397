"""A model-free expert: pick-and-place chunks towards objects found once per session.

It closes the loop the way a policy does: every ``predict`` looks at the current
end-effector pose and gripper width, decides which phase of the shared pick-and-place
plan (rpent_am.pick_place) it is in, and returns a chunk that drives towards that
phase's goal in the robot's relative Cartesian control space (one with ``step_scale``,
such as LIBERO's ``libero_osc_delta`` or the arms' ``ee_delta``). Where the objects are
comes from ``find`` when a session starts: the simulator's object poses, or the robot's
perception (its cameras' depth, camera_info and tf), which is how it works on an arm. Each
session (client) keeps its own phase, so concurrent clients do not disturb one another;
``reset`` forgets it.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from rpent_contract.control_space import ControlSpaceSpec
from rpent_contract.geometry import limit_norm, rotation_error, rpy_to_quaternion

from ..pick_place import PLAN, hand_orientation, waypoint
from ..policy import BackendError, ModelMeta, PolicyBackend, PolicyObservation

STATE_NAMES = ("ee_x", "ee_y", "ee_z", "ee_qx", "ee_qy", "ee_qz", "ee_qw", "gripper_width")
GRIPPER_OPEN, GRIPPER_CLOSE = -1.0, 1.0
# Share of the fully open width above which the fingers count as open, and the change
# below which (over SETTLE_S of robot time) closing fingers count as settled on the object.
OPEN_SHARE, SETTLE_WIDTH_CHANGE, SETTLE_S = 0.875, 5e-4, 0.3
# Fraction of a commanded delta an impedance-controlled arm (LIBERO's OSC) covers within
# one step; the open-loop chunk predicts its own progress with it so later rows keep
# pulling. LIBERO's OSC (kp 150, critically damped, 20 Hz) covers about 0.27 of a steady
# delta once moving and 0.13 from rest. A model that expects more shrinks its later rows
# faster than the arm closes in, and the rows left once a streamed chunk's stale prefix is
# dropped crawl. An arm whose deltas move a streamed target (the arms' ee_delta) covers 1.0.
REALIZED = 0.3

# m the summed deltas of a chunk stay inside the robot's workspace: the robot checks the
# rows it runs from where the hand is when the chunk starts, not where it was observed.
WORKSPACE_MARGIN = 0.01
# m a goal on or beyond a side of the box is aimed inside it: with the hand on the side
# itself, the robot (checking from a hand measured a hair farther on) refuses every chunk.
SIDE_CLEARANCE = 0.003

# (robot namespace, instruction) -> (object position, where to place it), base frame, m
Find = Callable[[str, str], tuple]


@dataclass(frozen=True)
class ArmGeometry:
    """What the expert needs to know of the arm it drives, from its get_robot_info."""
    gripper_max_width: float = 0.08  # m, fully open
    height_scale: float = 1.0  # the plan's heights times this (pick_place.height_scale)
    arm_joints: int = 6  # five: the hand's yaw follows the base (pick_place.hand_orientation)
    realized: float = REALIZED
    # m: within this distance of a goal a step shrinks in proportion (0: never). An arm that
    # follows a streamed target lags it, and each chunk's deltas start from that target:
    # slowing down keeps the lag, and the overshoot it makes, small.
    slow_within: float = 0.0
    # m, base frame: the box the robot keeps its hand in. It refuses a chunk whose deltas,
    # summed from where the hand is, would leave it, however little of them the arm covers.
    workspace_min: tuple = (-math.inf,) * 3
    workspace_max: tuple = (math.inf,) * 3


@dataclass
class _Session:
    instruction: str
    object_position: np.ndarray
    target_position: np.ndarray
    orientation: Callable  # position -> the hand's quaternion there, as it started
    phase: int = 0
    here: Optional[np.ndarray] = None
    grip_samples: list = field(default_factory=list)  # (stamp_ns, width) in a gripper phase


class ScriptedPickPlace(PolicyBackend):
    # Its batch is a loop: nothing to gain per goal, but goals asking together are answered
    # together, as from a model that batches.
    batching = True

    def __init__(self, action_space: ControlSpaceSpec, find: Find, *,
                 arm: ArmGeometry = ArmGeometry(), chunk_size: int = 10,
                 max_translation_step: float = 0.04, max_rotation_step: float = 0.1,
                 control_rate: float = 20.0, source: str = "the simulator's object poses"):
        if not (action_space.relative and action_space.step_scale and action_space.dim == 7):
            raise ValueError(
                f"the scripted expert drives a 7-D relative Cartesian space with step_scale "
                f"(like libero_osc_delta); '{action_space.name}' is not one")
        self._space = action_space
        self._find, self._arm = find, arm
        self._open_width = OPEN_SHARE * arm.gripper_max_width
        self._chunk_size = chunk_size
        self._scale_t = np.asarray(action_space.step_scale[:3])
        self._scale_r = np.asarray(action_space.step_scale[3:])
        # A step no longer than one axis of the space may take: an arm's safety layer bounds
        # the length of a step, not each axis (LIBERO's space takes the defaults whole).
        upper = np.asarray(action_space.upper)
        self._max_trans = min(max_translation_step, float(np.min(upper[:3] * self._scale_t)))
        self._max_rot = min(max_rotation_step, float(np.min(upper[3:6] * self._scale_r)))
        self._box_lo = np.asarray(arm.workspace_min, dtype=float) + WORKSPACE_MARGIN
        self._box_hi = np.asarray(arm.workspace_max, dtype=float) - WORKSPACE_MARGIN
        self._side_lo = np.asarray(arm.workspace_min, dtype=float) + SIDE_CLEARANCE
        self._side_hi = np.asarray(arm.workspace_max, dtype=float) - SIDE_CLEARANCE
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()
        self._meta = ModelMeta(
            backend="scripted", checkpoint=f"rpent_am.pick_place.PLAN, objects from "
                                           f"{source}",
            checkpoint_id="scripted-pick-place-v1", action_space=action_space,
            chunk_size=chunk_size, state_names=STATE_NAMES, control_rate=control_rate,
            default_timeout=10.0)

    @property
    def meta(self) -> ModelMeta:
        return self._meta

    def reset(self, session: Optional[str] = None) -> None:
        with self._lock:
            if session is None:
                self._sessions.clear()
            else:
                self._sessions.pop(session, None)

    def predict(self, observation: PolicyObservation, instruction: str,
                session: str) -> np.ndarray:
        position = np.array([observation.value(n) for n in STATE_NAMES[:3]])
        quat = np.array([observation.value(n) for n in STATE_NAMES[3:7]])
        width = observation.value("gripper_width")
        with self._lock:
            s = self._sessions.get(session)
            if s is None or s.instruction != instruction:
                s = self._sessions[session] = self._start(instruction, position, quat,
                                                          observation.robot)
            return self._chunk(s, position, quat, width, observation.stamp_ns)

    def _start(self, instruction: str, position, quat, robot: str) -> _Session:
        try:
            obj, target = self._find(robot, instruction)
        except ValueError as err:
            raise BackendError(str(err)) from None
        rpy = hand_orientation(position, quat, self._arm.arm_joints)
        return _Session(instruction, np.asarray(obj, dtype=float),
                        np.asarray(target, dtype=float),
                        lambda at: rpy_to_quaternion(*rpy(at)))

    def _chunk(self, s: _Session, position, quat, width, stamp_ns) -> np.ndarray:
        # Advance through every phase whose goal is already met.
        while s.phase < len(PLAN):
            phase = PLAN[s.phase]
            if phase.anchor is None:
                if not self._gripper_done(s, phase.closed, width, stamp_ns):
                    return self._rows(position, quat, position, phase.closed)
            else:
                goal = waypoint(phase, s.object_position, s.target_position,
                                s.here if s.here is not None else position,
                                self._arm.height_scale)
                if np.linalg.norm(goal - position) > phase.tolerance:
                    return self._rows(position, quat, goal, phase.closed, s.orientation(goal))
            s.here = position.copy()
            s.grip_samples = []
            s.phase += 1
        return self._rows(position, quat, position, closed=False)  # done: hold, open

    def _gripper_done(self, s: _Session, close: bool, width: float, stamp_ns: int) -> bool:
        if not close:
            return width >= self._open_width
        s.grip_samples.append((stamp_ns, width))
        settled = [w for t, w in s.grip_samples if stamp_ns - t >= SETTLE_S * 1e9]
        return width < self._open_width and bool(settled) and \
            abs(settled[-1] - width) < SETTLE_WIDTH_CHANGE

    def _rows(self, position, quat, goal, closed: bool, orientation=None) -> np.ndarray:
        """Open-loop chunk towards ``goal``; the next chunk corrects whatever it got wrong."""
        rows = np.zeros((self._chunk_size, 7))
        rows[:, 6] = GRIPPER_CLOSE if closed else GRIPPER_OPEN
        if orientation is not None:
            rows[0, 3:6] = limit_norm(rotation_error(quat, orientation),
                                      self._max_rot) / self._scale_r
        p = np.asarray(position, dtype=float).copy()
        commanded = p.copy()  # where the summed deltas go: what the robot checks
        # A goal inside the box but nearer its side than the margin stays reachable (to within
        # SIDE_CLEARANCE of the side).
        lo = np.minimum(self._box_lo, np.maximum(goal, self._side_lo))
        hi = np.maximum(self._box_hi, np.minimum(goal, self._side_hi))
        slow = self._arm.slow_within
        for row in rows:
            step = limit_norm(goal - p, self._max_trans if slow <= 0 else self._max_trans * min(
                1.0, float(np.linalg.norm(goal - p)) / slow))
            step = np.clip(commanded + step, lo, hi) - commanded
            commanded += step
            row[:3] = step / self._scale_t
            p += self._arm.realized * step
        return np.clip(rows, self._space.lower, self._space.upper)
