"""Franka FR3 robot node: the robot contract served through franky (libfranka 0.21).

    ros2 run rpent_hw franka_node --ros-args --params-file config/franka.yaml

Control spaces (every row is one control period, 1 / control_rate s):

* ``ee_delta`` (default, relative): dx, dy, dz in m and a rotation vector drx, dry, drz in
  rad, all in the base frame (rotations about the end effector), then a gripper command
  (-1 open, +1 close, 0 keep). Each row moves the commanded pose target.
* ``joint_position`` (absolute): the seven FR3 joint targets in rad, then the same
  gripper command.

``execute_chunk`` streams one target per control period as an asynchronous franky
motion: each new target preempts the previous one, so the arm follows the stream without
stopping in between. Cancel, ``stop``, a preempting goal and the safety watchdog halt the
arm with franky's stop motion for the active control signal, within one control period.
Every motion passes the safety layer (:mod:`rpent_hw.safety`) before anything moves.

A controller PC that misses the arm's 1 kHz deadlines (a loaded machine without a real-time
kernel) makes the arm abort a valid stream: a ``communication_constraints_violation`` or
discontinuity reflex, or franky's planner failing ("Motion planner failed with error code
-111"). A chunk recovers from such an error and sends its row again, ``reflex_retries``
times, with a warning in ``robot_state.errors``. Any other reflex / control exception (a
collision, a limit) fails the running goal with franky's message, shows in
``robot_state.errors`` and triggers ``recover_from_errors`` once; if that fails the node
refuses motions until ``reset`` succeeds in recovering. A lost connection (robot powered
off, network cut, franky-sim stopped) is reported the same way and retried every second.
"""
from __future__ import annotations

import importlib.util
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from rpent_contract import params
from rpent_contract.control_space import ControlSpaceSpec
from rpent_contract.extras import require
from rpent_contract.driver import (
    ChunkOutcome,
    GripperOutcome,
    Motion,
    MoveOutcome,
    ResetRequest,
    RobotDescription,
    RobotDriver,
    RobotSnapshot,
)
from rpent_contract.geometry import rotation_angle
from rpent_contract.robot_node import spin_robot_node
from rpent_contract.validation import GoalRejected

from .arm_driver import ArmDriver, ArmSettings, connect_within, ee_delta_space
from .arm_node import ArmNode
from .cameras import declare_camera_mounts, declare_cameras
from .safety import SafetyLayer, declare_approval_gate

ARM_JOINTS = tuple(f"fr3_joint{i}" for i in range(1, 8))
FINGER_JOINTS = ("fr3_finger_joint1", "fr3_finger_joint2")
# FR3 joint limits (Franka's datasheet), rad.
JOINT_LOWER = (-2.7437, -1.7837, -2.9007, -3.0421, -2.8065, 0.5445, -3.0159)
JOINT_UPPER = (2.7437, 1.7837, 2.9007, -0.1518, 2.8065, 4.5169, 3.0159)
GRIPPER_MAX_WIDTH = 0.08  # m, Franka Hand
GRIPPER_MAX_FORCE = 70.0  # N, Franka Hand continuous force
GRIPPER_TOLERANCE = 0.004  # m
RECONNECT_PERIOD = 1.0  # s
RECOVERY_STATE_WAIT = 0.05  # s for the arm's state to show a recovery (50 of its cycles)
# What franky raises when the commands reached the arm late: nothing about the motion
# itself is wrong, so after recovery the same target can be sent again.
LATE_STREAM_ERRORS = ("communication_constraints_violation", "motion_generator_velocity_"
                      "discontinuity", "motion_generator_acceleration_discontinuity",
                      "Motion planner failed")


class RobotFault(RuntimeError):
    """The robot failed during a motion; the message says what happened and what next."""


def make_control_spaces(max_translation_step: float, max_rotation_step: float,
                        max_joint_step: float, frame_id: str) -> list[ControlSpaceSpec]:
    return [
        ee_delta_space(max_translation_step, max_rotation_step, frame_id),
        ControlSpaceSpec(
            name="joint_position", relative=False,
            labels=tuple(f"q{i}" for i in range(1, 8)) + ("gripper",),
            units=("rad",) * 7 + ("1",),
            lower=JOINT_LOWER + (-1.0,), upper=JOINT_UPPER + (1.0,),
            max_step_change=(max_joint_step,) * 7 + (2.0,),
            description="Absolute FR3 joint position targets in rad. Last column: gripper, "
                        "-1 opens, +1 closes (grasps), 0 keeps."),
    ]


@dataclass(frozen=True)
class FrankaSettings(ArmSettings):
    host: str  # FCI address
    gripper: bool  # a Franka Hand is fitted
    realtime: str  # "enforce" (PREEMPT_RT kernel) or "ignore"
    dynamics_factor: float  # franky relative dynamics of every motion, (0, 1]
    state_rate: float  # Hz the state is read at
    spaces: tuple  # ControlSpaceSpecs
    home_joints: tuple  # rad, where reset goes
    settle_velocity: float  # rad/s below which a motion has ended
    gripper_speed: float  # m/s
    gripper_force: float  # N when a goal gives none
    connect_timeout: float  # s to keep trying to reach the arm at start-up
    reflex_retries: int  # times per chunk a late-stream error is recovered from


class FrankaDriver(ArmDriver):
    """An FR3 (or franky-sim) through franky; a thread keeps the latest state. A chunk's
    hand-over target is (position, quaternion)."""

    embodiment = "franka_fr3"

    def __init__(self, settings: FrankaSettings, log):
        import franky

        super().__init__(settings, log)
        self._franky = franky
        self._host = settings.host
        self._use_gripper = settings.gripper
        self._realtime = (franky.RealtimeConfig.Enforce if settings.realtime == "enforce"
                          else franky.RealtimeConfig.Ignore)
        self._dynamics = self.safety.dynamics_factor(settings.dynamics_factor)
        self._state_period = 1.0 / settings.state_rate
        self._home = np.asarray(settings.home_joints, dtype=np.float64)
        self._settle_velocity = settings.settle_velocity
        self._reflex_retries = settings.reflex_retries
        self._gripper_speed, self._gripper_force = settings.gripper_speed, settings.gripper_force
        self._description = RobotDescription(
            embodiment=self.embodiment, simulated=False,
            joint_names=list(ARM_JOINTS) + (list(FINGER_JOINTS) if settings.gripper else []),
            camera_names=list(settings.cameras), control_spaces=list(settings.spaces),
            control_rate=settings.control_rate,
            gripper_max_width=GRIPPER_MAX_WIDTH if settings.gripper else 0.0)

        self._cmd_lock = threading.RLock()  # one command to the arm at a time
        self._sample = threading.Condition(self._lock)
        self._robot = self._gripper = None
        self._gripper_closed: Optional[bool] = None
        # The last joint target a joint chunk sent while the arm may still be on its way
        # there (it trails the stream by a few steps): the next joint chunk continues from
        # it, and its first row is checked against it rather than the measured joints.
        self._joint_target: Optional[np.ndarray] = None
        try:
            connect_within(self._connect, settings.connect_timeout, log,
                           f"the Franka at {self._host}")
        except Exception as err:
            raise ValueError(f"cannot reach the Franka at {self._host}: {err}. Check robot_ip, "
                             "that FCI is enabled in Desk (or franky-sim is running), and that "
                             "no other client holds the robot") from None
        try:
            self._open_cameras()
        except ValueError:
            self.close()
            raise
        self._latest = self._read_state()
        # Joint-space chunks are held to the same Cartesian limits via franky's kinematics.
        self.safety.forward_kinematics = self.forward_kinematics
        home_position, _ = self.forward_kinematics(self._home)
        why = self.safety.limits.workspace.violation(home_position)
        if why:
            self.close()
            raise ValueError(f"home_joints put the end effector at "
                             f"{np.round(home_position, 3).tolist()} m, {why}: choose a home "
                             "pose inside workspace_min/workspace_max")
        self._start(self._read_loop, "franka-state")

    # --- connection and state ----------------------------------------------------------
    def _connect(self) -> None:
        franky = self._franky
        robot = franky.Robot(self._host, realtime_config=self._realtime,
                             relative_dynamics_factor=self._dynamics)
        gripper = franky.Gripper(self._host) if self._use_gripper else None
        with self._lock:
            self._robot, self._gripper = robot, gripper

    def forward_kinematics(self, q) -> tuple:
        robot = self._robot
        if robot is None:
            raise GoalRejected(self._fault or f"not connected to the Franka at {self._host}")
        s = robot.state
        pose = robot.model.pose(self._franky.Frame.EndEffector, np.asarray(q, float),
                                s.F_T_EE, s.EE_T_K)
        return pose.translation, pose.quaternion

    def _lost(self, err: Exception) -> str:
        message = (f"connection to the Franka at {self._host} lost ({err}); reconnecting every "
                   f"{RECONNECT_PERIOD:g} s - check the robot is powered, FCI enabled and the "
                   "network up")
        with self._lock:
            self._robot = self._gripper = None
            self._fault = message
        return message

    def _read_state(self) -> RobotSnapshot:
        robot, gripper = self._robot, self._gripper
        s = robot.state
        measured_ns = time.time_ns()
        pose = s.O_T_EE
        width = float(gripper.width) if gripper is not None else 0.0
        q = np.asarray(s.q, dtype=np.float64)
        errors = [f"robot error: {e}" for e in _active_errors(s.current_errors)]
        if s.robot_mode not in (self._franky.RobotMode.Idle, self._franky.RobotMode.Move):
            errors.append(f"robot mode {s.robot_mode.name}")
        return self._snapshot(q, np.asarray(s.dq, dtype=np.float64), pose.translation,
                              pose.quaternion, width, errors, measured_ns)

    def _snapshot(self, q, dq, position, quat, width, errors, stamp_ns: int) -> RobotSnapshot:
        fingers = [width / 2.0, width / 2.0] if self._use_gripper else []
        errors, images, step, task = self._status(errors)
        return RobotSnapshot(
            joint_names=self._description.joint_names,
            joint_positions=np.concatenate([q, fingers]),
            joint_velocities=np.concatenate([dq, [0.0] * len(fingers)]),
            ee_position=np.asarray(position, float), ee_orientation=np.asarray(quat, float),
            gripper_width=width, episode_step=step, errors=errors, images=images,
            task=task, stamp_ns=stamp_ns)

    def _read_loop(self) -> None:
        """Keep the latest state at the control rate; reconnect while the robot is lost."""
        next_try = 0.0
        while not self._closed.wait(self._state_period):
            if self._robot is None:
                if time.monotonic() < next_try:
                    self._refresh_stale()
                    continue
                next_try = time.monotonic() + RECONNECT_PERIOD
                try:
                    self._connect()
                except Exception:
                    self._refresh_stale()
                    continue
                with self._lock:
                    self._fault = ""
                self._log.info(f"reconnected to the Franka at {self._host}")
            try:
                snap = self._read_state()
            except Exception as err:
                self._log.error(self._lost(err))
                self._refresh_stale()
                continue
            with self._sample:
                self._latest = snap
                self._sample.notify_all()

    def _refresh_stale(self) -> None:
        """While disconnected: the current errors, on the last measurement and its time
        (the node reports it as old instead of publishing it as the present state)."""
        last = self._latest
        snap = self._snapshot(last.joint_positions[:7], np.zeros(7), last.ee_position,
                              last.ee_orientation, last.gripper_width, [], last.stamp_ns)
        with self._sample:
            self._latest = snap
            self._sample.notify_all()

    def _next_sample(self, timeout: float) -> RobotSnapshot:
        with self._sample:
            before = self._latest
            self._sample.wait_for(lambda: self._latest is not before, timeout)
            return self._latest

    # --- RobotDriver ---------------------------------------------------------------------
    @property
    def description(self) -> RobotDescription:
        return self._description

    def snapshot(self) -> RobotSnapshot:
        with self._lock:
            return self._latest

    def state_in_space(self, space_name: str) -> Optional[np.ndarray]:
        if space_name == "joint_position":
            with self._lock:
                target = self._joint_target
            q = target if target is not None else self.snapshot().joint_positions[:7]
            return np.append(q, 0.0)
        return None

    def execute_chunk(self, space, actions, motion, stop_on_success) -> ChunkOutcome:
        handover, joint_target = self._handover, self._joint_target
        robot = self._begin(motion)
        snap = self.snapshot()
        franky = self._franky
        positions = quats = None
        if space.name == "ee_delta":
            self._joint_target = None
            start = handover or (snap.ee_position, snap.ee_orientation)
            positions, quats = self.safety.integrate_deltas(*start, actions[:, :6])

            def command(i):
                return franky.CartesianMotion(
                    franky.Affine(positions[i], quats[i]), franky.ReferenceType.Absolute,
                    relative_dynamics_factor=self._dynamics)
        else:
            start_q = joint_target if joint_target is not None else snap.joint_positions[:7]
            self.safety.check_joint_path(start_q, actions[:, :7], JOINT_LOWER,
                                         JOINT_UPPER, np.asarray(space.max_step_change[:7]))

            def command(i):
                return franky.JointMotion(actions[i, :7], franky.ReferenceType.Absolute,
                                          relative_dynamics_factor=self._dynamics)
        self._approve(f"execute_chunk: {len(actions)} steps in {space.name}", motion)
        done, retries = 0, [self._reflex_retries]
        try:
            self._halt_other_signal(robot, franky.ControlSignalType.CartesianPose
                                    if positions is not None
                                    else franky.ControlSignalType.JointPositions)
            self.watchdog.arm()
            try:
                t_next = time.monotonic()
                for i in range(len(actions)):
                    t_next = self._stream_row(robot, lambda: command(i), actions[i],
                                              positions is None, motion, t_next, retries)
                    if t_next is None:
                        break
                    done += 1
                    motion.feedback(self._counted(self.snapshot()), i)
            finally:
                self.watchdog.disarm()
            # The last target is still being approached: a chunk that takes over now
            # continues from it, otherwise the arm comes to rest there.
            if done and positions is not None:
                with self._lock:
                    self._handover = (positions[done - 1], quats[done - 1])
            deadline = time.monotonic() + max(1.0, self._settle_timeout)
            while not motion.stopped and _moving(robot) and time.monotonic() < deadline:
                motion.wait(self._period / 4)
        except Exception as err:
            return ChunkOutcome(done, self.snapshot(), fault=self._on_fault(err, "execute_chunk"))
        return ChunkOutcome(done, self._finish(motion))

    def move_to(self, position, orientation, *, position_only, max_translation_step,
                max_rotation_step, position_tolerance, orientation_tolerance, max_steps,
                motion) -> MoveOutcome:
        robot = self._begin(motion)
        snap = self.snapshot()
        target_q = snap.ee_orientation.copy() if position_only else orientation
        self.safety.check_goal_target(snap.ee_position, snap.ee_orientation, position, target_q)
        self._approve(f"move_to {np.round(position, 3).tolist()}", motion)
        franky = self._franky
        cmd_p, cmd_q = snap.ee_position, snap.ee_orientation
        steps, reached = 0, False
        pos_err = rot_err = float("inf")
        try:
            self._halt_other_signal(robot, franky.ControlSignalType.CartesianPose)
            t_next = time.monotonic()
            while steps < max_steps:
                with self._cmd_lock:
                    if motion.stopped:
                        break
                    if not (np.allclose(cmd_p, position) and np.allclose(cmd_q, target_q)):
                        # Each target at most one safety step beyond the last one.
                        cmd_p, cmd_q = self.safety.clip_step(cmd_p, cmd_q, position, target_q,
                                                             max_translation_step,
                                                             max_rotation_step)
                        robot.move(franky.CartesianMotion(
                            franky.Affine(cmd_p, cmd_q), franky.ReferenceType.Absolute,
                            relative_dynamics_factor=self._dynamics), asynchronous=True)
                t_next = self._tick(t_next)
                moving = _moving(robot)
                snap = self.snapshot()
                motion.feedback(snap, steps)
                steps += 1
                pos_err = float(np.linalg.norm(snap.ee_position - position))
                rot_err = rotation_angle(snap.ee_orientation, target_q)
                if pos_err <= position_tolerance and rot_err <= orientation_tolerance \
                        and not moving:
                    reached = True
                    break
        except Exception as err:
            return MoveOutcome(False, self.snapshot(), pos_err, rot_err, steps,
                               self._on_fault(err, "move_to"))
        snap = self._finish(motion)
        pos_err = float(np.linalg.norm(snap.ee_position - position))
        rot_err = rotation_angle(snap.ee_orientation, target_q)
        reached = reached or (pos_err <= position_tolerance and rot_err <= orientation_tolerance)
        return MoveOutcome(reached, snap, pos_err, rot_err, steps)

    def gripper(self, width, max_effort, motion) -> GripperOutcome:
        self._begin(motion)
        gripper = self._gripper
        if gripper is None:
            raise GoalRejected("this Franka runs without a gripper (parameter gripper: false)")
        force = min(max_effort or self._gripper_force, GRIPPER_MAX_FORCE)
        start = float(gripper.width)
        closing = width < start - GRIPPER_TOLERANCE
        self._approve(f"gripper to {width:.3f} m", motion)
        try:
            if closing:
                # Success anywhere between the target and the start: whatever stops the
                # fingers in that range is the object being held.
                future = gripper.grasp_async(width, self._gripper_speed, force,
                                             epsilon_inner=GRIPPER_TOLERANCE,
                                             epsilon_outer=max(start - width, GRIPPER_TOLERANCE))
            else:
                future = gripper.move_async(width, self._gripper_speed)
            steps, t_next = 0, time.monotonic()
            while not future.wait(0):
                if motion.stopped:
                    gripper.stop()
                    break
                t_next = self._tick(t_next)
                motion.feedback(self.snapshot(), steps)
                steps += 1
            ok = bool(future.get()) if not motion.stopped else False
            reached_width = float(gripper.width)
        except Exception as err:
            snap = self.snapshot()
            return GripperOutcome(snap.gripper_width, False, False, snap,
                                  message=self._on_fault(err, "gripper_command"))
        with self._lock:
            self._gripper_closed = closing
        reached = abs(reached_width - width) <= GRIPPER_TOLERANCE
        grasped = closing and ok and not reached
        snap = self._next_sample(1.0)
        message = (f"grasped an object at {reached_width:.4f} m (target {width:.4f} m, "
                   f"{force:g} N)" if grasped else f"gripper at {reached_width:.4f} m"
                   + ("" if reached or ok else f"; did not reach {width:.4f} m"))
        return GripperOutcome(reached_width, reached, grasped, snap, effort=force if grasped
                              else 0.0, message=message)

    def hold(self) -> None:
        robot = self._robot
        if robot is not None:
            self._halt(robot)

    def reset(self, request: ResetRequest, motion: Motion) -> Optional[RobotSnapshot]:
        self._refuse_task_fields(request, "it recovers from errors and moves the arm to "
                                          "home_joints")
        if self._robot is None:
            raise RobotFault(self._fault or "not connected to the robot")
        robot = self._robot
        if self._fault or robot.has_errors:
            if not robot.recover_from_errors():
                raise RobotFault("recover_from_errors failed: clear the cause (e-stop, "
                                 "collision, joint limit) in Desk and call reset again")
        with self._lock:
            self._fault = self._notice = ""
            self._active_motion = motion  # the watchdog and stop reach it like any motion
        self._approve(f"reset: move to home_joints {np.round(self._home, 3).tolist()}", motion)
        # A chunk's last Cartesian target may still be approached, and franky refuses to
        # switch control signal while a motion runs.
        self._halt(robot)
        with self._cmd_lock:
            if motion.stopped:
                return None
            robot.move(self._franky.JointMotion(self._home, relative_dynamics_factor=self._dynamics),
                       asynchronous=True)
        # Asynchronous, and the command lock is not held meanwhile: stop, cancel and a
        # newer goal halt the arm on the way within a control period.
        step, t_next = 0, time.monotonic()
        while _moving(robot) and not motion.stopped:
            t_next = self._tick(t_next, motion)
            motion.feedback(self.snapshot(), step)
            step += 1
        if motion.stopped:
            self._halt(robot)
            self._settle()  # the result says "halted": at rest, not still decelerating
            return None
        self._settle(motion)
        self._new_episode()
        return self._next_sample(1.0)

    def close(self) -> None:
        super().close()
        with self._lock:
            self._robot = self._gripper = None

    # --- motion helpers ------------------------------------------------------------------
    def _begin(self, motion: Motion):
        """The robot for a new motion, or a refusal saying why there is none."""
        fault, robot = self._claim(motion), self._robot
        if robot is None:
            raise GoalRejected(fault or f"not connected to the Franka at {self._host}")
        if fault:
            raise GoalRejected(f"{fault}")
        return robot

    def _stream_row(self, robot, command, row, joint_row: bool, motion: Motion, t_next: float,
                    retries: list) -> Optional[float]:
        """Send a chunk's row and wait out its control period; the next period's deadline,
        or None when the motion was stopped before the row was sent. A late-stream error is
        recovered from and the row sent again while ``retries[0]`` lasts; any other failure
        of the motion raises."""
        while True:
            try:
                with self._cmd_lock:
                    if motion.stopped:
                        return None
                    robot.move(command(), asynchronous=True)
                    if joint_row:
                        with self._lock:
                            self._joint_target = row[:7].copy()
                    self._gripper_action(row[-1])
                self.watchdog.feed()
                t_next = self._tick(t_next, motion)
                robot.poll_motion()  # raises the reflex / control error of a failed motion
                return t_next
            except Exception as err:
                if retries[0] <= 0 or motion.stopped or \
                        not any(e in str(err) for e in LATE_STREAM_ERRORS):
                    raise
                retries[0] -= 1
                self._resume_after(robot, err)
                t_next = time.monotonic()

    def _resume_after(self, robot, err: Exception) -> None:
        """Recover from a late-stream error (raising it again if recovery fails) and say so
        in robot_state.errors until the next goal."""
        if robot.has_errors and not robot.recover_from_errors() and \
                not _errors_clear_within(robot, RECOVERY_STATE_WAIT):
            raise err
        what = " ".join(str(err).split())  # libfranka's message spans lines
        message = (f"execute_chunk: {what}; recovered and resumed the chunk. The controller "
                   "missed the arm's 1 kHz deadlines: run it on a PREEMPT_RT kernel "
                   "(realtime_mode: enforce) without other load")
        self._log.warning(message)
        with self._lock:
            self._notice = message

    def _tick(self, t_next: float, motion: Optional[Motion] = None) -> float:
        """Wait out the control period (less when ``motion`` is stopped meanwhile: a
        chunk taking over must not leave the arm to reach its last target and dwell
        there); count it as an episode step."""
        t_next += self._period
        if motion is None:
            time.sleep(max(0.0, t_next - time.monotonic()))
        else:
            motion.wait(max(0.0, t_next - time.monotonic()))
        with self._lock:
            self._episode_step += 1
        return t_next

    def _gripper_action(self, value: float) -> None:
        """Chunk gripper column: start a grasp / open when the command flips."""
        if self._gripper is None or abs(value) < 0.5:
            return
        close = value > 0
        with self._lock:
            if self._gripper_closed == close:
                return
            self._gripper_closed = close
        if close:
            self._gripper.grasp_async(0.0, self._gripper_speed, self._gripper_force,
                                      epsilon_inner=GRIPPER_TOLERANCE,
                                      epsilon_outer=GRIPPER_MAX_WIDTH)
        else:
            self._gripper.move_async(GRIPPER_MAX_WIDTH, self._gripper_speed)

    def _halt(self, robot) -> None:
        """Decelerate to rest with franky's stop motion for the running control signal."""
        franky = self._franky
        with self._lock:
            self._handover = self._joint_target = None
        with self._cmd_lock:
            try:
                if not _moving(robot):
                    return
                signal = robot.current_control_signal_type
                stop = (franky.JointStopMotion() if signal == franky.ControlSignalType.JointPositions
                        else franky.CartesianStopMotion())
                try:
                    robot.move(stop, asynchronous=True)
                    settled = robot.join_motion(2.0)
                except self._franky.ControlException:
                    return  # the motion being stopped ended with "preempted"
                except (self._franky.Exception, RuntimeError):
                    # franky cannot plan a stop from every state (a burst of stop calls hit
                    # "Motion planner failed with error code -111" mid-deceleration).
                    settled = False
                if not settled:
                    robot.stop()  # the stop motion failed or stalled: preempt outright
            except self._franky.ControlException:
                pass  # the motion being stopped ended with "preempted"

    def _halt_other_signal(self, robot, signal) -> None:
        """franky cannot switch control signal mid-motion: bring a motion of the other kind
        (a Cartesian chunk still being approached before a joint chunk) to rest first."""
        if _moving(robot) and robot.current_control_signal_type != signal:
            self._halt(robot)

    def _forget_targets(self) -> None:
        self._handover = self._joint_target = None

    def _settle(self, motion: Optional[Motion] = None) -> None:
        """At rest: the joints move slower than settle_velocity."""
        deadline, prev, quiet = time.monotonic() + self._settle_timeout, self.snapshot(), 0
        while time.monotonic() < deadline and quiet < 2 and \
                not (motion is not None and motion.handed_over):
            snap = self._next_sample(2 * self._state_period)
            speed = np.max(np.abs(snap.joint_positions[:7] - prev.joint_positions[:7])) / \
                self._state_period
            quiet = quiet + 1 if speed < self._settle_velocity else 0
            prev = snap

    def _on_fault(self, err: Exception, label: str) -> str:
        """Report a failure during a motion; recover automatically once."""
        franky = self._franky
        if isinstance(err, (franky.NetworkException, franky.ProtocolException)):
            message = self._lost(err)
            self._log.error(f"{label}: {message}")
            return message
        message = f"{label} stopped by the robot: {err}"
        robot = self._robot
        try:
            recovered = robot is not None and robot.recover_from_errors()
        except Exception as rec_err:
            recovered, err = False, rec_err
        if recovered:
            message += "; recovered automatically (recover_from_errors), new goals may run"
            with self._lock:
                self._notice = message
        else:
            message += ("; automatic recovery failed: clear the cause (e-stop, collision, "
                        "joint limit) and call reset, which retries recovery")
            with self._lock:
                self._fault = message
        self._log.error(message)
        return message


def _home_check(value):
    """home_joints: 7 finite angles inside the FR3's joint limits."""
    why = params.vector(7)(value)
    if why:
        return why
    outside = [f"joint {i + 1}: {v:g} not in [{lo:g}, {hi:g}]"
               for i, (v, lo, hi) in enumerate(zip(value, JOINT_LOWER, JOINT_UPPER))
               if not lo <= v <= hi]
    return f"outside the FR3 joint limits ({'; '.join(outside)})" if outside else None


def _moving(robot) -> bool:
    """Whether a motion is running; raises the error of a motion that failed.

    franky 2.0's ``poll_motion`` returns whether the motion has *finished* (True with no
    motion at all), whatever its docstring says; ``is_in_control`` is True exactly while
    its control loop runs a motion.
    """
    robot.poll_motion()
    return bool(robot.is_in_control)


def _errors_clear_within(robot, timeout: float) -> bool:
    """Whether the robot reports no error within ``timeout``: franky's recover_from_errors
    answers from the newest state it has, which may have left the arm just before the
    recovery took effect."""
    deadline = time.monotonic() + timeout
    while robot.has_errors:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def _active_errors(errors) -> list[str]:
    return [name for name in dir(errors) if not name.startswith("_")
            and isinstance(getattr(errors, name), bool) and getattr(errors, name)]


class FrankaNode(ArmNode):
    def __init__(self):
        # Base frame fr3_link0; the default box keeps the hand above the table in front.
        super().__init__("franka", default_workspace=((0.25, -0.45, 0.05), (0.80, 0.45, 0.80)),
                         default_frames=("fr3_link0", "fr3_hand_tcp"))

    def default_robot_description_file(self) -> str:
        # franky-sim ships Franka's FR3 + Hand URDF (from franka_description); its joint and
        # link names are the ones this node publishes.
        spec = importlib.util.find_spec("franky_sim")
        if spec is None or not spec.submodule_search_locations:
            return ""
        path = Path(spec.submodule_search_locations[0]) / "assets" / "fr3.urdf"
        return str(path) if path.is_file() else ""

    def create_driver(self) -> RobotDriver:
        require("franka", "the Franka node", "franky")
        d = lambda *a, **k: params.declare(self, *a, **k)  # noqa: E731
        rate = d("control_rate", 20.0, "Chunk rate and state publish rate, Hz",
                 lambda v: None if 0 < v <= 200 else "must be in (0, 200] Hz")
        limits = self.declare_safety_limits(max_goal_translation=0.5, velocity_scale=True)
        approval = declare_approval_gate(d)
        cameras = declare_cameras(d)
        self.camera_mounts = declare_camera_mounts(d, cameras, self._base_link,
                                                   self.get_logger(), self.external_cameras)
        host = d("robot_ip", "172.16.0.2", "Franka control (FCI) address",
                 lambda v: None if v else "must not be empty")
        safety_layer = SafetyLayer(limits)
        driver = FrankaDriver(FrankaSettings(
            host=host,
            gripper=d("gripper", True, "Use the Franka Hand"),
            realtime=d("realtime_mode", "enforce",
                       "enforce: refuse to run without a realtime kernel (hardware); ignore: "
                       "run anyway (franky-sim, development)", params.one_of("enforce", "ignore")),
            dynamics_factor=d("relative_dynamics_factor", 0.2,
                              "franky relative dynamics factor of every motion",
                              lambda v: None if 0 < v <= 1 else "must be in (0, 1]"),
            control_rate=rate,
            # State is read as often as it is published (publish_rate 0 = the control rate).
            state_rate=max(rate, self.publish_rate),
            spaces=tuple(make_control_spaces(
                self.max_translation_step, self.max_rotation_step,
                d("max_joint_step", 0.05, "Largest joint change per step of joint_position, rad",
                  params.positive), self.base_frame)),
            safety=safety_layer, approval=approval,
            home_joints=tuple(d("home_joints", [0.0, 0.0, 0.0, -1.57, 0.0, 1.57, 0.785],
                                "Joint configuration reset moves to, rad", _home_check)),
            instruction=d("instruction", "", "Task instruction published on task_status"),
            settle_velocity=d("settle_velocity", 1e-3,
                              "A motion ends once every joint is slower than this, rad/s",
                              params.positive),
            settle_timeout=d("settle_timeout", 3.0, "Longest wait for the arm to come to rest, s",
                             params.positive),
            connect_timeout=d("connect_timeout", 15.0, "Keep trying to reach the arm for this "
                              "long at start-up (it may come up after the node), s",
                              params.non_negative),
            reflex_retries=d("reflex_retries", 2, "Times per chunk the arm's abort of a "
                             "late command stream (communication_constraints_violation, a "
                             "discontinuity, franky's planner failing) is recovered from and "
                             "the row sent again; 0 fails the chunk at once",
                             lambda v: None if v >= 0 else "must be >= 0"),
            gripper_speed=d("gripper_speed", 0.05, "Finger speed, m/s", params.positive),
            gripper_force=d("gripper_force", 20.0, "Grasp force when a goal gives none, N",
                            lambda v: None if 0 < v <= GRIPPER_MAX_FORCE
                            else f"must be in (0, {GRIPPER_MAX_FORCE:g}] N"),
            cameras=cameras), self.get_logger())
        return driver



def main(args=None):
    raise SystemExit(spin_robot_node(FrankaNode, args=args))


if __name__ == "__main__":
    main()
