"""The SO-101 through LeRobot: one thread owns the servo bus; streamed chunks, move_to,
the gripper and reset set its targets (what :mod:`rpent_hw.so101` describes). Plain
Python: the node gives it its settings."""
from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Optional

import numpy as np

from rpent_contract.driver import GripperOutcome, Motion, RobotDescription, RobotSnapshot
from rpent_contract.validation import GoalRejected

from ..arm_driver import ArmDriver, RobotFault, connect_within
from ..safety import SafetyRejected
from .kinematics import ARM_JOINTS, SO101Kinematics
from .settings import (
    ACTION_KEYS,
    GRIPPER_TOLERANCE,
    MOTORS,
    STEPS_PER_DEGREE,
    SO101Settings,
    make_control_spaces,
)


def calibration_command(port: str, robot_id: str, calibration_dir: str) -> str:
    cmd = (f"lerobot-calibrate --robot.type=so101_follower --robot.port={port} "
           f"--robot.id={robot_id}")
    return cmd + (f" --robot.calibration_dir={calibration_dir}" if calibration_dir else "")


# A servo at rest takes a few bus cycles to start moving after a new goal; a gripper that
# has not moved by then has not yet had the chance to, and is not stalled.
GRIPPER_START_S = 0.25
# Each read is retried this often within a cycle (scservo_sdk's own retry) before the
# cycle counts as missed.
READ_RETRIES = 2
# Missed cycles for this long after the last answer pause a motion; a bus silent longer is
# a fault. A cycle that misses takes about 0.1 s (its retries), so a fault is found within
# 0.3 s, before a motion's watchdog (0.5 s by default) would stop it for the same cause.
BUS_SILENCE_S = 0.2


class BusNotReachable(ValueError):
    """The port is missing or its servos do not answer: worth trying again while the arm
    (or its twin) comes up; any other ValueError of :func:`connect_follower` is final."""


def connect_follower(port: str, robot_id: str, calibration_dir: str, max_relative_target):
    """A connected LeRobot SO101Follower, or ValueError saying what to do; never prompts.

    The calibration is compared before ``connect`` configures the servos, so a mismatch
    leaves them untouched (LeRobot's own connect would ask on stdin instead)."""
    from lerobot.robots.so_follower import SO101Follower, SO101FollowerConfig

    if not Path(port).exists():
        raise BusNotReachable(f"serial port {port} does not exist: check the USB cable "
                              "(lerobot-find-port lists the ports)")

    robot = SO101Follower(SO101FollowerConfig(
        port=port, id=robot_id, use_degrees=True, max_relative_target=max_relative_target,
        calibration_dir=Path(calibration_dir).expanduser() if calibration_dir else None))
    fix = calibration_command(port, robot_id, calibration_dir)
    if not robot.calibration:
        raise ValueError(f"no calibration for robot_id '{robot_id}': {robot.calibration_fpath} "
                         f"does not exist. Calibrate the arm once with `{fix}` (or point "
                         "calibration_dir / robot_id at its existing file) and start again")
    try:
        robot.bus.connect()
    except Exception as err:
        raise BusNotReachable(f"cannot talk to the SO-101 servos on {port}: {err}. Check the "
                              "port (lerobot-find-port), the USB cable and the 12 V supply") \
            from None
    try:
        on_servos = robot.bus.read_calibration()
    except ConnectionError as err:
        raise BusNotReachable(f"reading the calibration from the servos on {port} failed: "
                              f"{err}. Check the USB cable and the 12 V supply") from None
    finally:
        robot.bus.disconnect(disable_torque=False)
    differ = [f"{m} (file {c.homing_offset}/{c.range_min}-{c.range_max}, servo "
              f"{on_servos[m].homing_offset}/{on_servos[m].range_min}-{on_servos[m].range_max})"
              for m, c in robot.calibration.items()
              if m in on_servos and (c.homing_offset, c.range_min, c.range_max)
              != (on_servos[m].homing_offset, on_servos[m].range_min, on_servos[m].range_max)]
    if differ or set(on_servos) != set(robot.calibration):
        raise ValueError(
            f"calibration file {robot.calibration_fpath} does not match the servos on {port} "
            f"(homing offset/range: {'; '.join(differ) or 'different motors'}). It belongs to "
            f"another arm or the arm was recalibrated: set robot_id to this arm's file, or run "
            f"`{fix}` (it offers to write the file to the servos or to recalibrate). "
            "Nothing was moved or written")
    try:
        robot.connect(calibrate=False)
    except Exception as err:
        if robot.bus.is_connected:
            robot.bus.disconnect(disable_torque=False)
        # A status packet lost while configuring the servos: worth another try.
        raise BusNotReachable(f"connecting the SO-101 on {port} failed: {err}") from None
    return robot


class SO101Driver(ArmDriver):
    """An SO-101 through LeRobot; one thread does every bus transfer at the control rate. A
    chunk's hand-over target is its last row in LeRobot units."""

    embodiment = "so101_follower"
    keeps_orientation = False  # five joints: a position-only target leaves it to the IK

    def __init__(self, settings: SO101Settings, log):
        super().__init__(settings, log)
        self._port = settings.port
        self._max_joint_step = math.radians(settings.max_joint_step)
        self._ik_tolerance = settings.ik_tolerance
        self._gripper_max_width = settings.gripper_max_width
        self.kin = SO101Kinematics(tcp_offset=settings.tcp_offset)
        self._robot = connect_within(
            lambda: connect_follower(settings.port, settings.robot_id, settings.calibration_dir,
                                     settings.max_relative_target or None),
            settings.connect_timeout, log, f"the SO-101 on {settings.port}",
            retry=BusNotReachable)
        self._robot.config.disable_torque_on_disconnect = settings.disable_torque_on_exit
        # Joint limits: the model's, narrowed to what the calibration lets the servos reach.
        cal = self._robot.calibration
        cal_lo = np.array([(cal[m].range_min - cal[m].range_max) / 2 / STEPS_PER_DEGREE
                           for m in ARM_JOINTS])
        self.kin.lower = np.maximum(self.kin.lower, np.radians(cal_lo))
        self.kin.upper = np.minimum(self.kin.upper, np.radians(-cal_lo))
        self._home = np.asarray(settings.home, float)
        self.home_text = f"home {self._home.tolist()}"
        home_q = np.radians(self._home[:5])
        if np.any(home_q < self.kin.lower) or np.any(home_q > self.kin.upper):
            self._robot.disconnect()
            raise ValueError(f"home {self._home[:5].tolist()} deg is outside the joint limits "
                             f"{np.degrees(self.kin.lower).round(1).tolist()} .. "
                             f"{np.degrees(self.kin.upper).round(1).tolist()} deg")
        self.spaces = make_control_spaces(
            settings.max_translation_step, settings.max_rotation_step,
            settings.max_joint_step, np.degrees(self.kin.lower), np.degrees(self.kin.upper),
            settings.frame_id)
        self._description = RobotDescription(
            embodiment=self.embodiment, simulated=False, joint_names=list(MOTORS),
            camera_names=list(settings.cameras), control_spaces=self.spaces,
            control_rate=settings.control_rate, gripper_max_width=settings.gripper_max_width)

        self._cycle = threading.Condition(self._lock)
        self._cycles = 0
        self._target: Optional[np.ndarray] = None  # LeRobot units; None = write nothing
        self._hold_here = False  # next cycle: the target becomes what that cycle reads
        # A move_to's joint command, the joint solution of its waypoint (rad) and the gripper
        # it keeps (LeRobot units).
        self._q_cmd = self._q_way = np.zeros(5)
        self._move_gripper = 0.0
        self.cycle_times: list[float] = []  # s per read+write cycle, for the bench
        try:
            self._open_cameras()
            self._present = self._read_present()
            self._present_ns = time.time_ns()  # when _present was read
        except Exception:
            self.close()
            raise
        self._latest = self._make_snapshot(self._present, np.zeros(6), self._present_ns)
        # Joint chunks are held to the Cartesian limits through forward kinematics; ee_delta
        # paths were checked as Cartesian targets before the IK and only need the joint
        # checks (their poses differ from the targets by the IK residual or, for
        # orientations a 5-joint arm cannot take, by more).
        self.safety.forward_kinematics = self.kin.forward
        self._last_answer = time.monotonic()  # of the last bus cycle the servos answered
        self._start(self._bus_loop, "so101-bus")

    # --- the bus thread ----------------------------------------------------------------------
    def _read_present(self) -> np.ndarray:
        values = self._robot.bus.sync_read("Present_Position", num_retry=READ_RETRIES)
        return np.array([values[m] for m in MOTORS], dtype=np.float64)

    def _bus_loop(self) -> None:
        t_next = time.monotonic()
        while not self._closed.is_set():
            started = time.monotonic()
            try:
                self._bus_cycle()
            except Exception as err:  # the thread must outlive any one bad cycle
                self._log.error(f"SO-101 bus cycle failed: {err!r}")
            self.cycle_times.append(time.monotonic() - started)
            del self.cycle_times[:-1000]
            t_next += self._period
            if t_next < time.monotonic():  # overran (a fault's timeouts): do not burst
                t_next = time.monotonic()
            self._closed.wait(max(0.0, t_next - time.monotonic()))

    def _bus_cycle(self) -> None:
        try:
            present = self._read_present()
            measured_ns = time.time_ns()
            with self._lock:
                if self._hold_here:
                    self._target, self._hold_here = present.copy(), False
                target = self._target
                if self._fault:
                    # Answering again: hold here rather than resume a stale target.
                    self._target, target = present.copy(), present.copy()
                    self._notice, self._fault = (f"servos answer again on {self._port} after: "
                                                 f"{self._fault}"), ""
                    self._log.warning(self._notice)
            if target is not None:
                self._robot.send_action(dict(zip(ACTION_KEYS, target.tolist())))
        except Exception as err:
            self._bus_failed(err)
            return
        self._last_answer = time.monotonic()
        velocity = np.zeros(6)
        # Over the time since the last reading, which a missed cycle makes longer.
        elapsed = max(1e-3, (measured_ns - self._present_ns) * 1e-9)
        velocity[:5] = np.radians(present[:5] - self._present[:5]) / elapsed
        self._present, self._present_ns = present, measured_ns
        snap = self._make_snapshot(present, velocity, measured_ns)
        with self._cycle:
            self._latest = snap
            self._cycles += 1
            self._cycle.notify_all()

    def _bus_failed(self, err: Exception) -> None:
        with self._lock:
            known = self._fault
        if not known and time.monotonic() - self._last_answer < BUS_SILENCE_S:
            # A status packet lost or late (a busy host, a noisy cable): no new measurement
            # this cycle, so a motion waits for the next one instead of stepping blind. The
            # pause is the driver's own, not a chunk's commands coming late.
            self.watchdog.feed()
            return
        if not known:
            silent = [m for m in MOTORS if not self._answers(m)]
            who = (f"servo(s) {', '.join(f'{m} (id {self._robot.bus.motors[m].id})' for m in silent)}"
                   if silent else "the servo bus")
            message = (f"{who} stopped answering on {self._port} ({err}). Check the servo "
                       "cables and the 12 V supply; motions are refused until every servo "
                       "answers again (retried every control period)")
            self._log.error(message)
            with self._lock:
                self._fault = message  # the running motion fails on its next cycle
        # The last reading keeps its time: the node reports it as old, not as current.
        snap = self._make_snapshot(self._present, np.zeros(6), self._present_ns)
        with self._cycle:
            self._latest = snap
            self._cycles += 1
            self._cycle.notify_all()

    def _answers(self, motor: str) -> bool:
        try:
            return self._robot.bus.ping(motor) is not None
        except Exception:  # scservo_sdk trips over a truncated reply
            return False

    def _make_snapshot(self, present: np.ndarray, velocity: np.ndarray,
                       stamp_ns: int) -> RobotSnapshot:
        q = np.radians(present[:5])
        lo, hi = self.kin.gripper_range
        gripper_q = lo + np.clip(present[5], 0.0, 100.0) / 100.0 * (hi - lo)
        position, quat = self.kin.forward(q)
        errors, images, step, task = self._status([])
        return RobotSnapshot(
            joint_names=list(MOTORS), joint_positions=np.append(q, gripper_q),
            joint_velocities=velocity, ee_position=position, ee_orientation=quat,
            gripper_width=float(np.clip(present[5], 0, 100) / 100.0 * self._gripper_max_width),
            episode_step=step, errors=errors, images=images, task=task, stamp_ns=stamp_ns)

    def _next_cycle(self) -> RobotSnapshot:
        """Wait for the next bus cycle (bounded) and count it as an episode step."""
        with self._cycle:
            seen = self._cycles
            if not self._cycle.wait_for(lambda: self._cycles > seen, 10 * self._period + 1.0):
                raise RobotFault(f"the SO-101 bus thread on {self._port} stopped cycling")
            self._episode_step += 1
            if self._fault:
                raise RobotFault(self._fault)
            return self._latest

    def _command(self, target_deg: np.ndarray) -> None:
        with self._lock:
            self._target = np.asarray(target_deg, float).copy()
            self._hold_here = False

    # --- RobotDriver -----------------------------------------------------------------------
    def state_in_space(self, space_name: str) -> Optional[np.ndarray]:
        if space_name == "joint_position":
            with self._lock:
                return self._present.copy()
        return None

    # --- the motion hooks ----------------------------------------------------------------
    def _begin(self, motion: Motion) -> np.ndarray:
        """Present LeRobot readings for a new motion, or a refusal saying why not."""
        fault = self._claim(motion)
        if fault:
            raise GoalRejected(fault)
        with self._lock:
            return self._present.copy()

    def _chunk_rows(self, space, actions, present, handover) -> tuple:
        snap = self.snapshot()
        start = (self.kin.forward(np.radians(handover[:5])) if handover is not None
                 else (snap.ee_position, snap.ee_orientation))
        if handover is not None:
            present = handover
        if space.name == "ee_delta":
            positions, quats = self.safety.integrate_deltas(*start, actions[:, :6])
            q_path = self._solve_path(positions, quats, np.radians(present[:5]))
            gripper = self._gripper_column(actions[:, 6], present[5])
            layer = self._joint_safety
        else:
            q_path, gripper, layer = np.radians(actions[:, :5]), actions[:, 5], self.safety
        layer.check_joint_path(np.radians(present[:5]), q_path, self.kin.lower, self.kin.upper,
                               [self._max_joint_step] * 5)
        targets = np.column_stack([np.degrees(q_path), gripper])
        return targets, targets

    def _handover_position(self, handover) -> np.ndarray:
        return self.kin.forward(np.radians(handover[:5]))[0]

    def _pull_handover(self, handover, share: float):
        with self._lock:
            present = self._present.copy()
        pulled = np.array(handover, dtype=float)
        pulled[:5] = present[:5] + share * (pulled[:5] - present[:5])  # the gripper's kept
        return pulled

    def _send_row(self, row: np.ndarray, motion: Motion) -> bool:
        with self._cmd_lock:
            if motion.stopped:
                return False
            self._command(row)
        self._next_cycle()
        return True

    def _check_move(self, present, position, orientation, position_only,
                    orientation_tolerance) -> None:
        seed = np.radians(present[:5])
        _, pos_err, rot_err = self.kin.inverse(position, orientation, seed,
                                               position_only=position_only)
        if pos_err > self._ik_tolerance:
            raise SafetyRejected(
                f"the SO-101 cannot reach {np.round(position, 3).tolist()} m (closest "
                f"{pos_err * 1000:.1f} mm away); choose a target within its reach")
        if not position_only and rot_err > orientation_tolerance:
            raise SafetyRejected(
                f"the 5-joint SO-101 cannot take that orientation at that position (closest "
                f"is {rot_err:.3f} rad away, orientation_tolerance {orientation_tolerance:g}); "
                "send position_only, or an orientation it can reach there")
        self._q_cmd = self._q_way = seed
        self._move_gripper = present[5]

    def _move_toward(self, waypoint, new, position_only) -> bool:
        """Each waypoint's joint solution is approached at most max_joint_step per period
        on every joint."""
        if new:
            self._q_way, _, _ = self.kin.inverse(*waypoint, self._q_cmd,
                                                 position_only=position_only)
        delta = self._q_way - self._q_cmd
        self._q_cmd = self._q_cmd + delta * min(1.0, self._max_joint_step / max(
            float(np.abs(delta).max()), 1e-12))
        self._command(np.append(np.degrees(self._q_cmd), self._move_gripper))
        return bool(np.allclose(self._q_cmd, self._q_way))

    def _wait_period(self, motion: Motion) -> None:
        self._next_cycle()

    def _at_rest(self, snap: RobotSnapshot) -> bool:
        return bool(np.max(np.abs(snap.joint_velocities)) < math.radians(1.0))

    def _home_rows(self, present) -> np.ndarray:
        """Joint-space interpolation, at most max_joint_step per period on every joint,
        held to the joint limits and step size."""
        span = np.abs(np.radians(self._home[:5] - present[:5])).max()
        n = max(1, int(math.ceil(span / self._max_joint_step)))
        path = np.array([present + (self._home - present) * i / n for i in range(1, n + 1)])
        self._joint_safety.check_joint_path(np.radians(present[:5]), np.radians(path[:, :5]),
                                            self.kin.lower, self.kin.upper,
                                            [self._max_joint_step] * 5)
        return path

    def _go_home(self, rows, motion: Motion) -> None:
        _done, err = self._stream(rows, motion)
        if err is not None:
            raise err

    def gripper(self, width, max_effort, motion) -> GripperOutcome:
        # The STS3215 has no force control: max_effort cannot be honoured and is ignored.
        present = self._begin(motion)
        goal = float(width) / self._gripper_max_width * 100.0
        closing = goal < present[5] - GRIPPER_TOLERANCE
        self._approve(f"gripper to {width:.3f} m", motion)
        with self._lock:
            held = self._target is None or self._hold_here
            arm = (present if held else self._target)[:5]
        self._command(np.append(arm, goal))
        commanded = time.monotonic()
        steps, still, deadline = 0, 0, commanded + self._settle_timeout
        try:
            while not motion.stopped and time.monotonic() < deadline:
                snap = self._next_cycle()
                motion.feedback(snap, steps)
                steps += 1
                with self._lock:
                    now = self._present[5]
                if abs(now - goal) <= GRIPPER_TOLERANCE:
                    break
                still = still + 1 if abs(now - present[5]) < 0.2 else 0
                present = present.copy()
                present[5] = now
                # Stopped short of its goal (on an object, or blocked), once it has had the
                # time a servo takes to start moving.
                if still >= 3 and time.monotonic() - commanded >= GRIPPER_START_S:
                    break
        except RobotFault as err:
            snap = self.snapshot()
            return GripperOutcome(snap.gripper_width, False, False, snap,
                                  message=f"gripper_command: {err}")
        snap = self.snapshot()
        reached = bool(abs(self._present[5] - goal) <= GRIPPER_TOLERANCE)
        stalled = bool(closing and not reached and not motion.stopped)
        if motion.stopped:
            self.hold()
        message = (f"gripper stalled at {snap.gripper_width:.4f} m closing to {width:.4f} m: "
                   "holding an object" if stalled else
                   f"gripper at {snap.gripper_width:.4f} m"
                   + ("" if reached else f"; did not reach {width:.4f} m"))
        return GripperOutcome(snap.gripper_width, reached, stalled, snap, message=message)

    def hold(self) -> None:
        with self._cmd_lock, self._lock:
            self._handover = None
            # Where the servos are at the next read, not at the last one: moving, they are
            # up to a control step past that, and holding there would send them back.
            self._hold_here = self._target is not None

    def close(self) -> None:
        super().close()
        try:
            self._robot.disconnect()
        except Exception as err:  # servos gone: the port still closes
            self._log.warning(f"disconnecting the SO-101: {err}")
            self._robot.bus.port_handler.closePort()

    # --- helpers -------------------------------------------------------------------------------
    def _solve_path(self, positions, quats, seed) -> np.ndarray:
        """Joint angles (rad) for each waypoint, refusing the first the arm cannot reach."""
        path, q = [], seed
        for step, (p, o) in enumerate(zip(positions, quats)):
            q, pos_err, _ = self.kin.inverse(p, o, q)
            if pos_err > self._ik_tolerance:
                raise SafetyRejected(
                    f"step {step}: the SO-101 cannot reach {np.round(p, 3).tolist()} m "
                    f"(closest {pos_err * 1000:.1f} mm away, ik_position_tolerance "
                    f"{self._ik_tolerance * 1000:g} mm); keep targets within its reach")
            path.append(q)
        return np.array(path)

    def _gripper_column(self, column: np.ndarray, start: float) -> np.ndarray:
        """-1 / +1 / 0 per step -> gripper targets 100 (open) / 0 (closed) / keep."""
        out, value = [], start
        for c in column:
            if abs(c) >= 0.5:
                value = 0.0 if c > 0 else 100.0
            out.append(value)
        return np.array(out)

    def _settle(self, motion: Optional[Motion] = None) -> None:
        """At rest: no joint moved for two bus cycles (the first cycle after a write still
        reads the position from before it)."""
        deadline, still = time.monotonic() + self._settle_timeout, 0
        while time.monotonic() < deadline and still < 2 and \
                not (motion is not None and motion.handed_over):
            snap = self._next_sample()
            still = still + 1 if not np.any(snap.joint_velocities) else 0

    def _next_sample(self) -> RobotSnapshot:
        with self._cycle:
            seen = self._cycles
            self._cycle.wait_for(lambda: self._cycles > seen, 10 * self._period + 1.0)
            if self._fault:
                raise RobotFault(self._fault)
            return self._latest
