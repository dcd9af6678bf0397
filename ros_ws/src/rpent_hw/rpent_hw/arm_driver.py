"""What the real arms' drivers share, below their ROS nodes: the motion loops (streamed
chunks, move_to, reset, the end of every motion at rest), settings, cameras, faults,
operator approval, the chunk watchdog, the hand-over between streamed chunks, episodes and
shutdown. A driver adds how it talks to its arm (franky, a Feetech bus) and its kinematics,
through the hooks :class:`ArmDriver` lists.
"""
from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from abc import abstractmethod
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from rpent_contract.control_space import ControlSpaceSpec
from rpent_contract.driver import (
    ChunkOutcome,
    Motion,
    MoveOutcome,
    ResetRequest,
    RobotDescription,
    RobotDriver,
    RobotSnapshot,
    TaskInfo,
)
from rpent_contract.geometry import rotation_angle

from .cameras import OpenCVCamera
from .safety import ApprovalGate, SafetyLayer, Watchdog


class RobotFault(RuntimeError):
    """The arm failed during a motion; the message says what happened and what next."""


@dataclass(frozen=True)
class ArmSettings:
    """What every real arm is configured with (from its node's parameters)."""

    control_rate: float  # Hz: chunk steps and state cycles
    safety: SafetyLayer
    approval: ApprovalGate
    cameras: dict  # name -> (source, width, height, (fx, fy, cx, cy), lens): cameras.camera_specs
    instruction: str  # published on task_status
    settle_timeout: float  # s: longest wait for the arm to come to rest after a motion
    max_target_lead: float  # m a target a chunk continues from may lead the hand
    max_target_lag: float  # s of the stream it may lead it by where that is farther


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
    """Base of the real-arm drivers: it runs every motion (a streamed chunk, move_to, reset)
    through the safety layer and the approval gate, and the arm's driver supplies the
    hardware through these hooks:

    * ``_begin(motion)``: the arm's present state for a new motion, or GoalRejected;
    * ``_chunk_rows(space, actions, present, handover)``: a chunk as the rows the arm is
      sent, checked by the safety layer, and where each row leaves the arm's target;
    * ``_handover_position(handover)`` / ``_pull_handover(handover, share)``: where a
      handover leaves the hand's target (m), and the handover moved toward the measured state;
    * ``_send_row(row, motion)``: send one row, then wait out its control period;
    * ``_move_toward(waypoint, new, position_only)``: command the next move_to waypoint;
      True once the command has reached it;
    * ``_wait_period(motion)``: wait out a control period (and count it);
    * ``_at_rest(snapshot)``: whether a move_to within tolerance has come to rest;
    * ``_home_rows(present)`` / ``_go_home(rows, motion)``: reset's checked way home;
    * ``hold()``, ``_settle(motion)``, ``_next_sample()``, ``_on_fault(err, label)``.

    Subclasses set ``embodiment``, open their arm, then call :meth:`_open_cameras` and
    :meth:`_start` with the loop that reads (and writes) it."""

    embodiment = ""
    # What a failing motion raises that _on_fault reports; anything else is a bug.
    motion_errors: tuple = (RobotFault,)
    # A position-only move_to keeps the orientation it starts with (False: the arm's IK
    # leaves it free, and no orientation error is reported).
    keeps_orientation = True
    # What reset does and where it goes, for the refusal of task fields and the approval.
    reset_does = "it moves the arm to its home pose"
    home_text = "home"

    def __init__(self, settings: ArmSettings, log):
        self.settings, self._log = settings, log
        self.safety, self.approval = settings.safety, settings.approval
        # Joint limits and step sizes only, no workspace box: for the way home from a pose
        # outside it (when a reset is needed most) and for joint paths solved from
        # Cartesian targets the safety layer already checked.
        self._joint_safety = SafetyLayer(settings.safety.limits)
        self._period = 1.0 / settings.control_rate
        self._settle_timeout = settings.settle_timeout
        self._lock = threading.Lock()  # the fields below and the subclass's state
        # One command to the arm at a time: a stop's hold is never followed by a command
        # of the motion it stopped.
        self._cmd_lock = threading.RLock()
        self._fault = ""  # motions are refused until it clears (reset, reconnect, servos back)
        self._notice = ""  # the last failure, shown until the next goal starts
        self._episode_id, self._episode_step = uuid.uuid4().hex[:12], 0
        self._active_motion: Optional[Motion] = None
        # Where a chunk that handed over left its target (the driver's own form): the next
        # chunk continues from there rather than from the lagging measured state.
        self._handover = None
        self._handover_pace = 0.0  # m a control period its chunk moved the target at the end
        self._t_next = 0.0  # monotonic deadline of the running motion's control period
        self._cameras: dict[str, OpenCVCamera] = {}

    @property
    def description(self) -> RobotDescription:
        return self._description

    def snapshot(self) -> RobotSnapshot:
        """The newest state the arm's thread has read (``_latest``)."""
        with self._lock:
            return self._latest

    # --- the motion loops ------------------------------------------------------------------
    def execute_chunk(self, space, actions, motion, stop_on_success) -> ChunkOutcome:
        # Read first: _begin clears them, so a refused chunk leaves none.
        handover, pace = self._handover, self._handover_pace
        present = self._begin(motion)
        if space.relative and handover is not None:
            handover = self._within_lag(handover, pace)
        start = (self.snapshot().ee_position if handover is None
                 else self._handover_position(handover))
        rows, handovers = self._chunk_rows(space, actions, present, handover)
        self._approve(f"execute_chunk: {len(actions)} steps in {space.name}", motion)
        done, err = self._stream(rows, motion)
        if err is None:
            if done and handovers is not None:
                last = [start] + [self._handover_position(h) for h in handovers[:done][-2:]]
                with self._lock:
                    self._handover = handovers[done - 1]
                    self._handover_pace = float(np.linalg.norm(np.subtract(last[-1], last[-2])))
            try:
                self._after_stream(motion)
            except self.motion_errors as after_err:
                err = after_err
        if err is not None:
            return ChunkOutcome(done, self.snapshot(), fault=self._failed(err, "execute_chunk"))
        return ChunkOutcome(done, self._finish(motion))

    def _within_lag(self, handover, pace: float):
        """``handover`` (which the chunk before moved ``pace`` m a period), pulled back toward
        the measured hand to lead it by at most ``max_target_lead``, or what the stream moves
        it in ``max_target_lag`` where that is farther. Relative rows added to a target the
        hand has not reached (held up by contact, or a twin whose physics runs slower than the
        clock) pile up, and a policy that sees only the hand cannot take them back. The bound
        in time lets a fast stream run as far ahead as tracking needs while a slowing one (a
        policy closing in on a goal) cannot leave its target beyond it; the one in metres
        leaves an arm that holds a little off its target (sagging under a load) where it is.
        Pulled back along the lead, the target keeps the hand moving the way it was going."""
        hand = self.snapshot().ee_position
        lead = float(np.linalg.norm(np.asarray(self._handover_position(handover)) - hand))
        settings = self.settings
        limit = max(settings.max_target_lead,
                    settings.max_target_lag * settings.control_rate * pace)
        return handover if lead <= limit else self._pull_handover(handover, limit / lead)

    def move_to(self, position, orientation, *, position_only, max_translation_step,
                max_rotation_step, position_tolerance, orientation_tolerance, max_steps,
                motion) -> MoveOutcome:
        present = self._begin(motion)
        snap = self.snapshot()
        target_q = snap.ee_orientation.copy() if position_only else orientation
        self.safety.check_goal_target(snap.ee_position, snap.ee_orientation, position, target_q)
        self._check_move(present, position, target_q, position_only, orientation_tolerance)
        self._approve(f"move_to {np.round(position, 3).tolist()}", motion)

        def errors(s: RobotSnapshot) -> tuple:
            pos_err = float(np.linalg.norm(s.ee_position - position))
            free = position_only and not self.keeps_orientation
            rot_err = 0.0 if free else rotation_angle(s.ee_orientation, target_q)
            return pos_err, rot_err, pos_err <= position_tolerance and \
                rot_err <= orientation_tolerance

        # Waypoints at most one safety step apart, each commanded until the arm's command
        # has reached it.
        way, arrived, steps, reached = (snap.ee_position, snap.ee_orientation), True, 0, False
        pos_err = rot_err = float("inf")
        self._t_next = time.monotonic()
        try:
            while steps < max_steps:
                with self._cmd_lock:
                    if motion.stopped:
                        break
                    new = arrived and not (np.allclose(way[0], position)
                                           and np.allclose(way[1], target_q))
                    if new:
                        way = self.safety.clip_step(*way, position, target_q,
                                                    max_translation_step, max_rotation_step)
                    arrived = self._move_toward(way, new, position_only)
                self._wait_period(motion)
                snap = self.snapshot()
                motion.feedback(snap, steps)
                steps += 1
                pos_err, rot_err, within = errors(snap)
                if within and self._at_rest(snap):
                    reached = True
                    break
        except self.motion_errors as err:
            return MoveOutcome(False, self.snapshot(), pos_err, rot_err, steps,
                               self._failed(err, "move_to"))
        snap = self._finish(motion)
        pos_err, rot_err, within = errors(snap)
        return MoveOutcome(bool(reached or within), snap, pos_err, rot_err, steps)

    def reset(self, request: ResetRequest, motion: Motion) -> Optional[RobotSnapshot]:
        if request.names_a_task():
            raise ValueError(f"a real {self.embodiment} has no task list, suite, seed or "
                             f"recorded initial states: call reset with no arguments "
                             f"({self.reset_does})")
        self._recover()
        rows = self._home_rows(self._begin(motion))
        self._approve(f"reset: move to {self.home_text}", motion)
        try:
            self._go_home(rows, motion)
        except self.motion_errors as err:
            raise RobotFault(self._failed(err, "reset")) from None
        if not motion.stopped:
            self._settle(motion)
        if motion.stopped:
            self.hold()
            self._settle()  # the result says "halted": at rest, not still decelerating
            return None
        with self._lock:
            self._forget_targets()
        self._new_episode()
        return self._next_sample()

    def _stream(self, rows: Sequence, motion: Motion) -> tuple:
        """Send ``rows`` one per control period under the chunk watchdog, with feedback for
        each; (the number sent, the motion error that ended the stream or None)."""
        done = 0
        self._t_next = time.monotonic()
        self.watchdog.arm()
        try:
            for i, row in enumerate(rows):
                if not self._send_row(row, motion):
                    break
                self.watchdog.feed()
                done += 1
                motion.feedback(self._counted(self.snapshot()), i)
        except self.motion_errors as err:
            return done, err
        finally:
            self.watchdog.disarm()
        return done, None

    def _failed(self, err: Exception, label: str) -> str:
        """A motion that failed: its targets are forgotten (the next starts from what is
        measured, not from where this one meant to go); what to report."""
        with self._lock:
            self._forget_targets()
        return self._on_fault(err, label)

    def _tick(self, motion: Optional[Motion] = None) -> None:
        """Wait out the control period by the clock (less when ``motion`` is stopped
        meanwhile: a chunk taking over must not leave the arm to reach its last target and
        dwell there); count it as an episode step."""
        self._t_next += self._period
        if motion is None:
            time.sleep(max(0.0, self._t_next - time.monotonic()))
        else:
            motion.wait(max(0.0, self._t_next - time.monotonic()))
        with self._lock:
            self._episode_step += 1

    # --- hooks with a default ------------------------------------------------------------
    def _check_move(self, present, position, orientation, position_only: bool,
                    orientation_tolerance: float) -> None:
        """Refuse (SafetyRejected) a move_to target the arm cannot take, before it moves."""

    def _after_stream(self, motion: Motion) -> None:
        """After a chunk's last row was sent: what the arm still does before it counts as
        done (inside the motion's fault handling)."""

    def _recover(self) -> None:
        """Before a reset: clear what the arm can recover from, or raise RobotFault."""

    def _on_fault(self, err: Exception, label: str) -> str:
        return f"{label} stopped: {err}"

    # --- the hardware hooks --------------------------------------------------------------
    @abstractmethod
    def _begin(self, motion: Motion):
        """The arm's present state for ``motion`` (after :meth:`_claim`), or GoalRejected."""

    @abstractmethod
    def _chunk_rows(self, space: ControlSpaceSpec, actions: np.ndarray, present,
                    handover) -> tuple:
        """(the rows :meth:`_send_row` takes, where each leaves the arm's target or None),
        checked by the safety layer; ``handover`` is where the chunk before left it."""

    @abstractmethod
    def _handover_position(self, handover) -> np.ndarray:
        """Where ``handover`` (an item of what ``_chunk_rows`` returns) leaves the hand's
        target: base frame, m."""

    @abstractmethod
    def _pull_handover(self, handover, share: float):
        """``handover`` moved toward the arm's measured state, keeping ``share`` (0-1) of the
        way from it."""

    @abstractmethod
    def _send_row(self, row, motion: Motion) -> bool:
        """Send ``row`` and wait out its control period; False when ``motion`` was stopped
        before it was sent."""

    @abstractmethod
    def _move_toward(self, waypoint: tuple, new: bool, position_only: bool) -> bool:
        """Command the arm toward ``waypoint`` (position, quaternion; ``new`` the first
        time); True once the command has reached it. Called holding ``_cmd_lock``."""

    @abstractmethod
    def _wait_period(self, motion: Motion) -> None:
        """Wait out one control period of a move_to and count it as an episode step."""

    @abstractmethod
    def _at_rest(self, snap: RobotSnapshot) -> bool:
        """Whether a move_to that is within tolerance has come to rest."""

    @abstractmethod
    def _home_rows(self, present):
        """Reset's way home from ``present``, checked by the safety layer."""

    @abstractmethod
    def _go_home(self, rows, motion: Motion) -> None:
        """Move along :meth:`_home_rows` with feedback, until home or ``motion`` stops."""

    @abstractmethod
    def _next_sample(self) -> RobotSnapshot:
        """The next state the arm's thread reads."""

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

    def _approve(self, what: str, motion: Motion) -> None:
        self.approval.request(what, lambda: motion.stopped)

    def _counted(self, snap: RobotSnapshot) -> RobotSnapshot:
        """``snap`` with the episode's step count as of now: the state loop built it before
        the step that just ran was counted, and a chunk's feedback must say that it ran
        (the node publishes each executed step with the step it was applied at)."""
        with self._lock:
            return dataclasses.replace(snap, episode_step=self._episode_step)

    def _new_episode(self) -> None:
        with self._lock:
            self._episode_id, self._episode_step = uuid.uuid4().hex[:12], 0

    def _finish(self, motion: Motion) -> RobotSnapshot:
        """End a motion at rest: held where it is when stopped, else at its last target; a
        chunk taken over by the next one ends at once, the arm still moving."""
        if motion.handed_over:
            return self.snapshot()
        if motion.stopped:
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
