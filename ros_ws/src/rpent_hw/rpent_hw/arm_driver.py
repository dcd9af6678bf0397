"""What the real arms' drivers share, below their ROS nodes: settings, cameras, faults,
operator approval, the chunk watchdog, the hand-over between streamed chunks, episodes and
shutdown. A driver adds how it talks to its arm (franky, a Feetech bus) and its kinematics.
"""
from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from abc import abstractmethod
from dataclasses import dataclass
from typing import Callable, Optional

from rpent_contract.control_space import ControlSpaceSpec
from rpent_contract.driver import (
    Motion,
    ResetRequest,
    RobotDescription,
    RobotDriver,
    RobotSnapshot,
    TaskInfo,
)

from .cameras import OpenCVCamera
from .safety import ApprovalGate, SafetyLayer, Watchdog


@dataclass(frozen=True)
class ArmSettings:
    """What every real arm is configured with (from its node's parameters)."""

    control_rate: float  # Hz: chunk steps and state cycles
    safety: SafetyLayer
    approval: ApprovalGate
    cameras: dict  # name -> (source, width, height, (fx, fy, cx, cy), lens), from declare_cameras
    instruction: str  # published on task_status
    settle_timeout: float  # s: longest wait for the arm to come to rest after a motion


def connect_within(connect, timeout: float, log, what: str, retry=Exception):
    """``connect()``, tried again every half second for ``timeout`` s while it fails with
    ``retry``: at start-up the arm (or its twin) may come up after its node. The last
    failure is raised."""
    deadline, said = time.monotonic() + timeout, False
    while True:
        try:
            return connect()
        except retry as err:
            if time.monotonic() >= deadline:
                raise
            if not said:
                log.info(f"{what} not reachable yet ({err}); trying again for up to "
                         f"{timeout:g} s (connect_timeout)")
                said = True
            time.sleep(0.5)


def ee_delta_space(max_translation_step: float, max_rotation_step: float, frame_id: str,
                   note: str = "") -> ControlSpaceSpec:
    """The end-effector delta space both arms offer: per control step, a translation (m) and
    a rotation vector (rad, about the end effector) in the base frame, then the gripper."""
    t, r = max_translation_step, max_rotation_step
    return ControlSpaceSpec(
        name="ee_delta", relative=True, frame_id=frame_id,
        labels=("dx", "dy", "dz", "drx", "dry", "drz", "gripper"),
        units=("m", "m", "m", "rad", "rad", "rad", "1"),
        lower=(-t, -t, -t, -r, -r, -r, -1.0), upper=(t, t, t, r, r, r, 1.0),
        step_scale=(1.0,) * 6,
        description="End-effector pose delta per control step in the base frame: translation "
                    f"in m, then a rotation vector in rad about the end effector{note}. Last "
                    "column: gripper, -1 opens, +1 closes (grasps), 0 keeps.")


class ArmDriver(RobotDriver):
    """Base of the real-arm drivers. Subclasses set ``embodiment``, open their arm, then call
    :meth:`_open_cameras` and :meth:`_start` with the loop that reads (and writes) it."""

    embodiment = ""

    def __init__(self, settings: ArmSettings, log):
        self.settings, self._log = settings, log
        self.safety, self.approval = settings.safety, settings.approval
        self._period = 1.0 / settings.control_rate
        self._settle_timeout = settings.settle_timeout
        self._lock = threading.Lock()  # the fields below and the subclass's state
        self._fault = ""  # motions are refused until it clears (reset, reconnect, servos back)
        self._notice = ""  # the last failure, shown until the next goal starts
        self._episode_id, self._episode_step = uuid.uuid4().hex[:12], 0
        self._active_motion: Optional[Motion] = None
        # Where a chunk that handed over left its target (the driver's own form): the next
        # chunk continues from there rather than from the lagging measured state.
        self._handover = None
        self._cameras: dict[str, OpenCVCamera] = {}

    @property
    def description(self) -> RobotDescription:
        return self._description

    def snapshot(self) -> RobotSnapshot:
        """The newest state the arm's thread has read (``_latest``)."""
        with self._lock:
            return self._latest

    def _open_cameras(self) -> None:
        for name, (source, width, height, intrinsics, lens) in self.settings.cameras.items():
            self._cameras[name] = OpenCVCamera(name, source, width, height, intrinsics,
                                               self.settings.control_rate, lens)

    def _start(self, loop: Callable[[], None], name: str) -> None:
        """Arm the chunk watchdog and start the thread that keeps the arm's state."""
        self.watchdog = Watchdog(self.safety.limits.watchdog_timeout, self._watchdog_expired)
        self._closed = threading.Event()
        self._worker = threading.Thread(target=loop, name=name, daemon=True)
        self._worker.start()

    def _status(self, errors) -> tuple:
        """(errors with the fault, notice and camera problems; newest camera frames; episode
        step; task) for a snapshot."""
        with self._lock:
            errors = list(errors) + [e for e in (self._fault, self._notice) if e]
            step, episode = self._episode_step, self._episode_id
        images = {}
        for name, cam in self._cameras.items():
            frame = cam.latest()
            if frame is not None:
                images[name] = frame
            if cam.error:
                errors.append(cam.error)
        task = TaskInfo(instruction=self.settings.instruction, episode_id=episode,
                        task_name=self.embodiment)
        return errors, images, step, task

    def _claim(self, motion: Motion) -> str:
        """Make ``motion`` the running one; return the fault that refuses it, if any."""
        with self._lock:
            self._notice = ""
            self._active_motion = motion
            self._handover = None
            return self._fault

    def _move_target(self, position, orientation, position_only: bool) -> tuple:
        """(the arm's state, the orientation a move_to aims at: the present one when
        ``position_only``), once the safety layer has allowed the target."""
        snap = self.snapshot()
        target_q = snap.ee_orientation.copy() if position_only else orientation
        self.safety.check_goal_target(snap.ee_position, snap.ee_orientation, position, target_q)
        return snap, target_q

    def _approve(self, what: str, motion: Motion) -> None:
        self.approval.request(what, lambda: motion.stopped)

    def _refuse_task_fields(self, request: ResetRequest, what_reset_does: str) -> None:
        if request.names_a_task():
            raise ValueError(f"a real {self.embodiment} has no task list, suite, seed or "
                             "recorded initial states: call reset with no arguments "
                             f"({what_reset_does})")

    def _counted(self, snap: RobotSnapshot) -> RobotSnapshot:
        """``snap`` with the episode's step count as of now: the state loop built it before
        the step that just ran was counted, and a chunk's feedback must say that it ran
        (the node publishes each executed step with the step it was applied at)."""
        with self._lock:
            return dataclasses.replace(snap, episode_step=self._episode_step)

    def _new_episode(self) -> None:
        with self._lock:
            self._episode_id, self._episode_step = uuid.uuid4().hex[:12], 0

    def _finish(self, motion: Motion, hold: bool = False) -> RobotSnapshot:
        """End a motion at rest: held where it is when stopped (or asked), else at its last
        target; a chunk taken over by the next one ends at once, the arm still moving."""
        if motion.handed_over:
            return self.snapshot()
        if hold or motion.stopped:
            self.hold()
        self._settle(motion)
        if not motion.handed_over:
            with self._lock:  # at rest: the next chunk starts from what is measured
                self._forget_targets()
        return self.snapshot()

    def _forget_targets(self) -> None:
        """Drop the targets streamed chunks continue from (called holding the lock)."""
        self._handover = None

    @abstractmethod
    def _settle(self, motion: Optional[Motion] = None) -> None:
        """Wait (bounded by settle_timeout) until the arm is at rest, so a goal's result
        and the next goal start from a still arm, unless the next chunk takes over
        (``motion.handed_over``) meanwhile."""

    def _watchdog_expired(self, reason: str) -> None:
        with self._lock:
            motion = self._active_motion
            self._notice = reason
        self._log.error(reason)
        if motion is not None:
            motion.stop(reason)
        self.hold()

    def close(self) -> None:
        if hasattr(self, "_worker"):
            self._closed.set()
            self._worker.join(2.0)
            self.watchdog.close()
        for cam in self._cameras.values():
            cam.close()
