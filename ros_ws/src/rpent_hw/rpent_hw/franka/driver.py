"""The FR3 through franky: streamed chunks, move_to, the gripper, reset and recovery
(what :mod:`rpent_hw.franka` describes). Plain Python: the node gives it its settings."""
from __future__ import annotations

import threading
import time
from typing import Callable, NamedTuple, Optional

import numpy as np

from rpent_contract.driver import GripperOutcome, Motion, RobotDescription, RobotSnapshot
from rpent_contract.validation import GoalRejected

from ..arm_driver import ArmDriver, RobotFault, connect_within
from .settings import (
    ARM_JOINTS,
    FINGER_JOINTS,
    GRIPPER_MAX_FORCE,
    GRIPPER_MAX_WIDTH,
    GRIPPER_TOLERANCE,
    JOINT_LOWER,
    JOINT_UPPER,
    LATE_STREAM_ERRORS,
    RECONNECT_PERIOD,
    RECOVERY_STATE_WAIT,
    FrankaSettings,
)


class _Row(NamedTuple):
    """One row of a chunk as franky takes it."""
    command: Callable  # () -> the franky motion to the row's target
    joints: Optional[np.ndarray]  # the row's joint target (rad), None for a Cartesian row
    gripper: float  # -1 opens, +1 closes, 0 keeps


class FrankaDriver(ArmDriver):
    """An FR3 (or franky-sim) through franky; a thread keeps the latest state. A Cartesian
    chunk's hand-over target is (position, quaternion); a joint chunk continues from the
    last joint target sent (``_joint_target``)."""

    embodiment = "franka_fr3"
    motion_errors = (Exception,)  # franky's, libfranka's and a lost connection's
    reset_does = "it recovers from errors and moves the arm to home_joints"

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
        self.home_text = f"home_joints {np.round(self._home, 3).tolist()}"
        self._settle_velocity = settings.settle_velocity
        self._reflex_retries = settings.reflex_retries
        self._gripper_speed, self._gripper_force = settings.gripper_speed, settings.gripper_force
        self._description = RobotDescription(
            embodiment=self.embodiment, simulated=False,
            joint_names=list(ARM_JOINTS) + (list(FINGER_JOINTS) if settings.gripper else []),
            camera_names=list(settings.cameras), control_spaces=list(settings.spaces),
            control_rate=settings.control_rate,
            gripper_max_width=GRIPPER_MAX_WIDTH if settings.gripper else 0.0)

        self._sample = threading.Condition(self._lock)
        self._robot = self._gripper = None
        self._motion_robot = None  # the robot the running motion commands
        self._retries = 0  # late-stream recoveries the running chunk may still make
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

    def _next_sample(self, timeout: float = 1.0) -> RobotSnapshot:
        with self._sample:
            before = self._latest
            self._sample.wait_for(lambda: self._latest is not before, timeout)
            return self._latest

    # --- RobotDriver ---------------------------------------------------------------------
    def state_in_space(self, space_name: str) -> Optional[np.ndarray]:
        if space_name == "joint_position":
            with self._lock:
                target = self._joint_target
            q = target if target is not None else self.snapshot().joint_positions[:7]
            return np.append(q, 0.0)
        return None

    # --- the motion hooks ----------------------------------------------------------------
    def _begin(self, motion: Motion):
        """The robot for a new motion, or a refusal saying why there is none."""
        fault, robot = self._claim(motion), self._robot
        if robot is None:
            raise GoalRejected(fault or f"not connected to the Franka at {self._host}")
        if fault:
            raise GoalRejected(f"{fault}")
        self._motion_robot = robot
        return robot

    def _chunk_rows(self, space, actions, robot, handover) -> tuple:
        franky, dynamics = self._franky, self._dynamics
        snap = self.snapshot()
        self._retries = self._reflex_retries
        if space.name == "ee_delta":
            with self._lock:
                self._joint_target = None
            start = handover or (snap.ee_position, snap.ee_orientation)
            positions, quats = self.safety.integrate_deltas(*start, actions[:, :6])
            rows = [_Row(lambda p=p, q=q: franky.CartesianMotion(
                franky.Affine(p, q), franky.ReferenceType.Absolute,
                relative_dynamics_factor=dynamics), None, g)
                for p, q, g in zip(positions, quats, actions[:, -1])]
            return rows, list(zip(positions, quats))
        with self._lock:
            joint_target = self._joint_target
        start_q = joint_target if joint_target is not None else snap.joint_positions[:7]
        self.safety.check_joint_path(start_q, actions[:, :7], JOINT_LOWER,
                                     JOINT_UPPER, np.asarray(space.max_step_change[:7]))
        rows = [_Row(lambda q=q: franky.JointMotion(q, franky.ReferenceType.Absolute,
                                                    relative_dynamics_factor=dynamics),
                     q.copy(), g) for q, g in zip(actions[:, :7], actions[:, -1])]
        return rows, None

    def _handover_position(self, handover) -> np.ndarray:
        return handover[0]

    def _pull_handover(self, handover, share: float):
        hand = self.snapshot().ee_position
        return hand + share * (np.asarray(handover[0]) - hand), handover[1]

    def _send_row(self, row: _Row, motion: Motion) -> bool:
        """A late-stream error is recovered from and the row sent again while the chunk's
        ``reflex_retries`` last; any other failure of the motion raises."""
        robot, franky = self._motion_robot, self._franky
        while True:
            try:
                self._halt_other_signal(robot, franky.ControlSignalType.CartesianPose
                                        if row.joints is None
                                        else franky.ControlSignalType.JointPositions)
                with self._cmd_lock:
                    if motion.stopped:
                        return False
                    robot.move(row.command(), asynchronous=True)
                    if row.joints is not None:
                        with self._lock:
                            self._joint_target = row.joints
                    self._gripper_action(row.gripper)
                self._tick(motion)
                robot.poll_motion()  # raises the reflex / control error of a failed motion
                return True
            except Exception as err:
                if self._retries <= 0 or motion.stopped or \
                        not any(e in str(err) for e in LATE_STREAM_ERRORS):
                    raise
                self._retries -= 1
                self._resume_after(robot, err)
                self._t_next = time.monotonic()

    def _after_stream(self, motion: Motion) -> None:
        """The last target is still being approached: a chunk that takes over now continues
        from it, otherwise the arm comes to rest there."""
        deadline = time.monotonic() + max(1.0, self._settle_timeout)
        while not motion.stopped and _moving(self._motion_robot) and \
                time.monotonic() < deadline:
            motion.wait(self._period / 4)

    def _move_toward(self, waypoint, new, position_only) -> bool:
        robot, franky = self._motion_robot, self._franky
        self._halt_other_signal(robot, franky.ControlSignalType.CartesianPose)
        if new:
            robot.move(franky.CartesianMotion(
                franky.Affine(*waypoint), franky.ReferenceType.Absolute,
                relative_dynamics_factor=self._dynamics), asynchronous=True)
        return True  # franky plans the way to each target itself

    def _wait_period(self, motion: Motion) -> None:
        self._tick(motion)
        self._motion_robot.poll_motion()  # raises the error of a motion that failed

    def _at_rest(self, snap: RobotSnapshot) -> bool:
        return not _moving(self._motion_robot)

    def _recover(self) -> None:
        robot = self._robot
        if robot is None:
            raise RobotFault(self._fault or "not connected to the robot")
        if self._fault or robot.has_errors:
            if not robot.recover_from_errors():
                raise RobotFault("recover_from_errors failed: clear the cause (e-stop, "
                                 "collision, joint limit) in Desk and call reset again")
        with self._lock:
            self._fault = ""

    def _home_rows(self, robot):
        return self._home  # franky plans the joint motion there

    def _go_home(self, home, motion: Motion) -> None:
        robot = self._motion_robot
        # A chunk's last Cartesian target may still be approached, and franky refuses to
        # switch control signal while a motion runs.
        self._halt(robot)
        with self._cmd_lock:
            if motion.stopped:
                return
            robot.move(self._franky.JointMotion(home, relative_dynamics_factor=self._dynamics),
                       asynchronous=True)
        # Asynchronous, and the command lock is not held meanwhile: stop, cancel and a
        # newer goal halt the arm on the way within a control period.
        step, self._t_next = 0, time.monotonic()
        while _moving(robot) and not motion.stopped:
            self._tick(motion)
            motion.feedback(self.snapshot(), step)
            step += 1

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
            steps, self._t_next = 0, time.monotonic()
            while not future.wait(0):
                if motion.stopped:
                    gripper.stop()
                    break
                self._tick()
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

    def close(self) -> None:
        super().close()
        with self._lock:
            self._robot = self._gripper = None

    # --- motion helpers ------------------------------------------------------------------
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
