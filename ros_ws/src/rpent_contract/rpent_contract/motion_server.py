"""The robot's motions: the ``execute_chunk``, ``move_to``, ``gripper_command`` and
``reset_episode`` action servers and the ``stop`` and ``reset`` services.

Every goal is validated before the driver sees it, and one motion runs at a time
(:class:`~rpent_contract.motion.MotionArbiter`): a new goal preempts the running one after
the step in flight; ``stop`` and cancel hold the arm within one control period.

Goals that fail validation are accepted and immediately aborted with a result whose
message says what was wrong: an rclpy goal *rejection* cannot carry a reason, and an
invalid goal must not preempt the motion already running.

A chunk conditioned on an observation (``observation_stamp``) starts at the action for the
step the robot takes next: the steps it executed after that observation, while the model
thought and the chunk travelled, are in the past. The robot counts them when the chunk
begins, so steps taken while the goal was on its way count too (a client counting from
feedback would miss those and repeat their actions).
"""
from __future__ import annotations

import contextlib
import threading
import traceback
from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy as np
from geometry_msgs.msg import Point
from rclpy.action import CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from std_msgs.msg import ColorRGBA
from std_srvs.srv import Trigger
from visualization_msgs.msg import Marker

from rpent_interfaces.action import ExecuteChunk, GripperCommand, MoveTo
from rpent_interfaces.action import ResetEpisode as ResetEpisodeAction
from rpent_interfaces.msg import ExecutedAction, RobotState
from rpent_interfaces.srv import ResetEpisode

from .control_space import chunk_to_array, stale_prefix
from .driver import (ChunkOutcome, Motion, ResetRequest, RobotDescription, RobotDriver,
                     RobotSnapshot)
from .geometry import pose_from_msg, pose_to_msg, stamp_to_ns
from .motion import Holder, MotionArbiter
from .names import (
    EXECUTE_CHUNK_ACTION,
    EXECUTED_ACTIONS_TOPIC,
    GRIPPER_COMMAND_ACTION,
    INTENDED_PATH_TOPIC,
    MOVE_TO_ACTION,
    RESET_EPISODE_ACTION,
    RESET_SERVICE,
    STOP_SERVICE,
)
from .qos import EXECUTED_QOS
from .serving import action_server, service
from .state_publisher import StatePublisher
from .validation import (
    GoalRejected,
    Workspace,
    check_chunk,
    check_pose_target,
    check_positive,
    check_step_period,
    check_timeout,
    commanded_path,
)


# Cancels remembered for goals not yet running (a late cancel of a goal that already ended
# leaves one behind, so the oldest are forgotten).
MAX_EARLY_CANCELS = 1000
# Longest a motion waits for the holds of earlier stops: a real arm's halt (a stop motion, then
# settling) takes well under this.
HOLD_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class MotionLimits:
    """The robot's own limits on every goal, from the contract's parameters."""
    workspace: Workspace
    max_translation_step: float  # m per control step
    max_rotation_step: float  # rad per control step
    move_to_timeout: float  # s of robot time, when a goal gives none


class MotionServer:
    """Runs the goals and services that move the robot; ``mode`` and ``active_goal`` are
    what robot_state reports."""

    def __init__(self, node, driver: RobotDriver, description: RobotDescription,
                 publisher: StatePublisher, limits: MotionLimits, base_frame: str):
        self._node, self._driver, self._description = node, driver, description
        self._publisher, self._limits, self._base_frame = publisher, limits, base_frame
        self._arbiter = MotionArbiter()
        self.mode = RobotState.MODE_IDLE
        self.active_goal = ""
        self._goal_motions: dict[bytes, Motion] = {}
        self._goal_tickets: dict[bytes, int] = {}  # each accepted goal's, until it returns
        self._early_cancels: dict[bytes, None] = {}  # canceled before they ran, oldest first
        self._goal_lock = threading.Lock()
        self._holder = Holder(driver.hold, node.get_logger())
        # Every step an execute_chunk goal carries out, reliably: a recording must hold
        # each one for a dataset to pair it with its observation.
        self._executed_pub = node.create_publisher(ExecutedAction, EXECUTED_ACTIONS_TOPIC,
                                                   EXECUTED_QOS)
        # The stamps of the latest steps published there, enough to count the steps after
        # an observation up to a whole chunk (more would make every action stale anyway).
        self._step_stamps: deque = deque(maxlen=description.max_chunk_steps)
        self._step_stamps_lock = threading.Lock()
        self._path_pub = node.create_publisher(Marker, INTENDED_PATH_TOPIC, 10)
        self._paths = 0  # execute_chunk goals accepted to run: the newest one's path is up
        self._path_up = False  # a viewer now sees a path
        self._paths_lock = threading.Lock()
        motions = ReentrantCallbackGroup()
        self._servers = [
            action_server(node, action_type, name, execute_callback=self._ticketed(execute),
                          goal_callback=lambda _goal: GoalResponse.ACCEPT,
                          handle_accepted_callback=self._accepted,
                          cancel_callback=self._cancel, callback_group=motions)
            for action_type, name, execute in (
                (ExecuteChunk, EXECUTE_CHUNK_ACTION, self._execute_chunk),
                (MoveTo, MOVE_TO_ACTION, self._move_to),
                (GripperCommand, GRIPPER_COMMAND_ACTION, self._gripper_command),
                (ResetEpisodeAction, RESET_EPISODE_ACTION, self._reset_goal))
        ]
        services = ReentrantCallbackGroup()
        service(node, ResetEpisode, RESET_SERVICE, self._reset, callback_group=services)
        service(node, Trigger, STOP_SERVICE, self._stop, callback_group=services,
                coalesce=True)

    def interrupt(self, reason: str) -> None:
        """Stop whatever motion runs (the node is going away)."""
        self._arbiter.interrupt(reason)
        self._holder.close()

    # --- motion plumbing ---------------------------------------------------------------
    def _accepted(self, goal_handle) -> None:
        """A goal's place among the robot's requests is when it arrived, not when its
        execution gets a thread: a goal accepted before a reset must not take over from it."""
        with self._goal_lock:
            self._goal_tickets[bytes(goal_handle.goal_id.uuid)] = self._arbiter.arrive()
        goal_handle.execute()

    def _ticketed(self, execute):
        """``execute``, after which the goal no longer outranks older requests (it ran, was
        refused or canceled)."""
        def run(goal_handle):
            try:
                return execute(goal_handle)
            finally:
                with self._goal_lock:
                    ticket = self._goal_tickets.pop(bytes(goal_handle.goal_id.uuid), None)
                if ticket is not None:
                    self._arbiter.withdraw(ticket)
        return run

    def _cancel(self, goal_handle) -> CancelResponse:
        uuid = bytes(goal_handle.goal_id.uuid)
        with self._goal_lock:
            motion = self._goal_motions.get(uuid)
            ticket = self._goal_tickets.get(uuid)
            if motion is None:
                # Accepted, not yet running: rclpy marks the goal canceling only after this
                # returns, so the motion, once registered, could not tell it was canceled.
                self._early_cancels[uuid] = None
                while len(self._early_cancels) > MAX_EARLY_CANCELS:
                    self._early_cancels.pop(next(iter(self._early_cancels)))
        if motion is not None:
            motion.stop("canceled by the client")
        elif ticket is not None:
            self._arbiter.withdraw(ticket)  # a canceled goal does not void what came before
        return CancelResponse.ACCEPT

    def _run_motion(self, goal_handle, label: str, feedback, body):
        """Run ``body(motion)`` for a goal as the only motion; return (outcome, stop reason
        or None)."""
        if self._description.frames_on_demand:
            step_feedback = feedback

            def feedback(s: RobotSnapshot, step: int):
                # A rendered step goes out at once: the timer publishes only the newest
                # state, which may be a later step without frames.
                if s.images:
                    self._publisher.publish_step(s)
                step_feedback(s, step)
        motion = Motion(feedback, continuous=label == "execute_chunk")
        with self._goal_lock:
            ticket = self._goal_tickets.get(bytes(goal_handle.goal_id.uuid))
        with self._cancellable(goal_handle, motion):
            outcome = self._exclusive(motion, label, body, ticket)
        # The state the motion ended in goes out before its result: a client that reads
        # robot_state once answered sees where the arm is, not a step of the way (a
        # simulator steps faster than the state timer ticks). Frames follow on the timer.
        self._publisher.publish(render=False)
        return outcome

    @contextlib.contextmanager
    def _cancellable(self, goal_handle, motion: Motion):
        """While inside, the client canceling ``goal_handle`` stops ``motion``."""
        uuid = bytes(goal_handle.goal_id.uuid)
        with self._goal_lock:
            self._goal_motions[uuid] = motion
            canceled = uuid in self._early_cancels
            self._early_cancels.pop(uuid, None)
        try:
            if canceled or goal_handle.is_cancel_requested:
                motion.stop("canceled by the client")
            yield
        finally:
            with self._goal_lock:
                self._goal_motions.pop(uuid, None)

    def _exclusive(self, motion: Motion, label: str, body, ticket: Optional[int] = None):
        """Run ``body(motion)`` as the only motion (it preempts the running one, and
        ``stop`` or a newer motion stop it); return (outcome, stop reason or None), with
        outcome None when it was stopped before it began. ``ticket``: the request's, from
        when it arrived (a service request, without one, arrives now)."""
        if ticket is None:
            ticket = self._arbiter.arrive()
        # A stop answered before this goal came must not halt it once it runs.
        if not self._holder.wait(HOLD_TIMEOUT_S):
            motion.stop(f"the robot did not finish holding position within {HOLD_TIMEOUT_S:g} s "
                        "of the last stop; check the robot (its log says more) and call reset")
        if motion.stopped or not self._arbiter.begin(motion, label, ticket):
            self._arbiter.withdraw(ticket)
            return None, motion.reason
        self.mode, self.active_goal = RobotState.MODE_MOVING, label
        try:
            return body(motion), (motion.reason if motion.stopped else None)
        finally:
            if self.active_goal == label:
                self.mode = (RobotState.MODE_STOPPED if motion.stopped
                              else RobotState.MODE_IDLE)
                self.active_goal = ""
            self._arbiter.end(motion)

    def _finish(self, goal_handle, result, stopped: Optional[str], ok: bool = True):
        """Set the goal's terminal state: canceled when the client asked, else by outcome."""
        if stopped and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        elif stopped or not ok:
            goal_handle.abort()
        else:
            goal_handle.succeed()
        return result

    def _refuse(self, goal_handle, result, why: str, label: str):
        self._node.get_logger().warning(f"{label} goal refused: {why}")
        result.message = f"goal refused, nothing moved: {why}"
        if isinstance(result, ExecuteChunk.Result):
            result.outcome = ExecuteChunk.Result.OUTCOME_REFUSED
        goal_handle.abort()
        return result

    # --- execute_chunk -----------------------------------------------------------------
    def _execute_chunk(self, goal_handle):
        received = self._node.get_clock().now().to_msg()
        goal, result = goal_handle.request, ExecuteChunk.Result()
        try:
            actions = chunk_to_array(goal.chunk)
        except ValueError as err:
            return self._refuse(goal_handle, result, str(err), "execute_chunk")
        # The steps already in the past leave the chunk before it is checked: a wholly stale
        # chunk does nothing (it must not preempt the motion running), and the rest is
        # checked from where the arm is now. Beginning, it drops those taken since.
        stale = self._steps_since(goal.chunk.observation_stamp)
        if stale >= len(actions) > 0:
            result.outcome = ExecuteChunk.Result.OUTCOME_COMPLETED
            result.steps_skipped = len(actions)
            result.message = (f"nothing to execute: the robot took all {len(actions)} steps "
                              "of the chunk after its observation")
            result.task_success = bool(self._driver.snapshot().task.success)
            goal_handle.succeed()
            return result
        snap = self._driver.snapshot()
        try:
            check_step_period(goal.chunk.step_period, 1.0 / self._description.control_rate)
            space = check_chunk(
                actions[stale:], goal.chunk.control_space, self._description.control_spaces,
                max_horizon=self._description.max_chunk_steps, ee_position=snap.ee_position,
                workspace=self._limits.workspace,
                current=self._driver.state_in_space(goal.chunk.control_space),
            )
        except GoalRejected as err:
            return self._refuse(goal_handle, result, str(err), "execute_chunk")
        # What runs once the chunk begins: its actions from the step the robot takes next,
        # and their path (numbered now, in the order the chunks came).
        running = {"actions": actions, "skipped": 0, "path": (self._number_path(), None)}

        def begin(motion: Motion):
            skipped = self._steps_since(goal.chunk.observation_stamp)
            rows = actions[skipped:]
            running.update(actions=rows, skipped=skipped)
            if not len(rows):
                return ChunkOutcome(0, self._driver.snapshot())
            running["path"] = (running["path"][0],
                               self._path_points(space, rows, self._driver.snapshot()))
            return self._driver.execute_chunk(space, rows, motion, goal.stop_on_success)

        def feedback(s: RobotSnapshot, step: int):
            if step == 0:
                self._draw_path(*running["path"])
            now = self._node.get_clock().now().to_msg()
            with self._step_stamps_lock:
                self._step_stamps.append(stamp_to_ns(now))
            rows = running["actions"]
            # ``s`` is the state after the step: it was applied at the step before.
            done = ExecutedAction(episode_id=s.task.episode_id,
                                  episode_step=max(0, int(s.episode_step) - 1),
                                  control_space=space.name,
                                  action=[float(v) for v in rows[step]],
                                  observation_stamp=goal.chunk.observation_stamp,
                                  chunk_stamp=goal.chunk.header.stamp, chunk_received=received)
            done.header.stamp, done.header.frame_id = now, space.frame_id
            self._executed_pub.publish(done)
            fb = ExecuteChunk.Feedback()
            fb.stamp = now
            fb.step, fb.steps_total = step, rows.shape[0]
            pose_to_msg(s.ee_position, s.ee_orientation, fb.ee_pose)
            fb.gripper_width, fb.task_success = float(s.gripper_width), bool(s.task.success)
            goal_handle.publish_feedback(fb)

        try:
            outcome, stopped = self._run_motion(goal_handle, "execute_chunk", feedback, begin)
        except Exception as err:  # the driver failed: report, hold, keep serving
            return self.driver_failure(goal_handle, result, err, "execute_chunk")
        finally:
            self._erase_path(running["path"][0])
        if outcome is None:
            result.outcome, result.message = ExecuteChunk.Result.OUTCOME_CANCELED, stopped
            return self._finish(goal_handle, result, stopped)
        result.steps_executed, result.steps_skipped = outcome.steps_executed, running["skipped"]
        result.task_success = bool(outcome.snapshot.task.success)
        pose_to_msg(outcome.snapshot.ee_position, outcome.snapshot.ee_orientation,
                    result.final_ee_pose)
        if stopped:
            result.outcome = ExecuteChunk.Result.OUTCOME_CANCELED
            result.message = f"stopped after {outcome.steps_executed} steps: {stopped}"
        elif outcome.fault:
            result.outcome, result.message = ExecuteChunk.Result.OUTCOME_FAULT, outcome.fault
        elif outcome.stopped_on_success:
            result.outcome = ExecuteChunk.Result.OUTCOME_TASK_SUCCESS
            result.message = f"task succeeded after {outcome.steps_executed} steps"
        elif outcome.episode_end:
            result.outcome = ExecuteChunk.Result.OUTCOME_EPISODE_END
            result.message = (f"episode step cap reached after {outcome.steps_executed} steps; "
                              "call reset to start a new episode")
        else:
            result.outcome = ExecuteChunk.Result.OUTCOME_COMPLETED
            result.message = f"executed {outcome.steps_executed} steps"
        if running["skipped"]:
            result.message += (f" (skipped the first {running['skipped']} of "
                               f"{len(actions)}: the robot took those steps after the "
                               "chunk's observation)")
        return self._finish(goal_handle, result, stopped, ok=not outcome.fault)

    def _steps_since(self, stamp) -> int:
        """How many chunk steps the robot executed after ``stamp`` (none for a zero stamp:
        a chunk no model conditioned on an observation)."""
        since = stamp_to_ns(stamp)
        if since <= 0:
            return 0
        with self._step_stamps_lock:
            return stale_prefix(since, self._step_stamps)

    def _number_path(self) -> int:
        """The number of a chunk just received, for :meth:`_draw_path` and
        :meth:`_erase_path`: the newest chunk's number is the one whose path is up, so a
        preempted chunk never draws over or takes down the path of the chunk that preempted
        it."""
        with self._paths_lock:
            self._paths += 1
            return self._paths

    @staticmethod
    def _path_points(space, actions: np.ndarray, snap: RobotSnapshot) -> Optional[np.ndarray]:
        """Where the chunk about to run takes the end effector, for viewers: its commanded
        path from where the hand is now, in the base frame (relative Cartesian spaces; a
        joint-space chunk has no path without the arm's kinematics)."""
        path = commanded_path(space, actions, snap.ee_position)
        return None if path is None else np.vstack([snap.ee_position, path])

    def _draw_path(self, number: int, points: Optional[np.ndarray]) -> None:
        """Once the chunk's first step is under way: drawing never delays a chunk's start.
        A chunk without a path takes down the path of the chunk it preempted."""
        if points is None:
            self._erase_path(number)
            return
        marker = Marker(ns="intended_path", id=0, type=Marker.LINE_STRIP, action=Marker.ADD)
        marker.header.frame_id = self._base_frame
        marker.pose.orientation.w = 1.0
        marker.scale.x = 0.004  # m, the line's width
        marker.color = ColorRGBA(r=1.0, g=0.55, b=0.0, a=0.9)
        marker.points = [Point(x=float(x), y=float(y), z=float(z)) for x, y, z in points]
        with self._paths_lock:
            if number != self._paths:
                return
            marker.header.stamp = self._node.get_clock().now().to_msg()
            self._path_pub.publish(marker)
            self._path_up = True

    def _erase_path(self, number: int) -> None:
        """Take down the path a viewer sees, unless a newer chunk than ``number`` (a
        stream's next) has taken over."""
        with self._paths_lock:
            if number == self._paths:
                self._take_down_path()

    def _take_down_path(self) -> None:
        if self._path_up:
            marker = Marker(ns="intended_path", id=0, action=Marker.DELETE)
            marker.header.stamp = self._node.get_clock().now().to_msg()
            marker.header.frame_id = self._base_frame
            self._path_pub.publish(marker)
            self._path_up = False

    # --- move_to -------------------------------------------------------------------------
    def _move_to(self, goal_handle):
        goal, result = goal_handle.request, MoveTo.Result()
        frame = goal.target.header.frame_id
        position, orientation = pose_from_msg(goal.target.pose)
        try:
            if frame not in ("", self._base_frame):
                raise GoalRejected(
                    f"target frame '{frame}' is not the robot base frame '{self._base_frame}'; "
                    "express the target in the base frame (no TF lookup here)")
            quat = check_pose_target(position, orientation, workspace=self._limits.workspace,
                                     position_only=goal.position_only)
            for value, what in ((goal.max_translation_step, "max_translation_step"),
                                (goal.max_rotation_step, "max_rotation_step"),
                                (goal.position_tolerance, "position_tolerance"),
                                (goal.orientation_tolerance, "orientation_tolerance")):
                check_positive(value, what)
            check_timeout(goal.timeout)
        except GoalRejected as err:
            return self._refuse(goal_handle, result, str(err), "move_to")
        # Step limits are clipped to the robot's, never raised above them.
        limits = self._limits
        trans = min(goal.max_translation_step or limits.max_translation_step,
                    limits.max_translation_step)
        rot = min(goal.max_rotation_step or limits.max_rotation_step, limits.max_rotation_step)
        timeout = goal.timeout or self._limits.move_to_timeout
        max_steps = max(1, int(round(timeout * self._description.control_rate)))

        def feedback(s: RobotSnapshot, step: int):
            fb = MoveTo.Feedback()
            pose_to_msg(s.ee_position, s.ee_orientation, fb.current_pose)
            fb.position_error = float(np.linalg.norm(position - s.ee_position))
            fb.steps = step + 1
            goal_handle.publish_feedback(fb)

        try:
            outcome, stopped = self._run_motion(
                goal_handle, "move_to", feedback,
                lambda m: self._driver.move_to(
                    position, quat, position_only=goal.position_only,
                    max_translation_step=trans, max_rotation_step=rot,
                    position_tolerance=goal.position_tolerance or 0.01,
                    orientation_tolerance=goal.orientation_tolerance or 0.05,
                    max_steps=max_steps, motion=m))
        except Exception as err:
            return self.driver_failure(goal_handle, result, err, "move_to")
        if outcome is None:
            result.message = stopped
            return self._finish(goal_handle, result, stopped)
        result.reached = outcome.reached
        pose_to_msg(outcome.snapshot.ee_position, outcome.snapshot.ee_orientation,
                    result.final_pose)
        result.position_error = float(outcome.position_error)
        result.orientation_error = float(outcome.orientation_error)
        result.steps = outcome.steps
        result.message = (f"stopped: {stopped}" if stopped else outcome.message or (
            "reached the target" if outcome.reached else
            f"did not reach the target within {outcome.steps} steps "
            f"(position error {outcome.position_error:.3f} m)"))
        return self._finish(goal_handle, result, stopped, ok=outcome.reached)

    # --- gripper_command ---------------------------------------------------------------------
    def _gripper_command(self, goal_handle):
        goal, result = goal_handle.request, GripperCommand.Result()
        max_width = self._description.gripper_max_width
        try:
            if not np.isfinite(goal.position) or not 0.0 <= goal.position <= max_width:
                raise GoalRejected(
                    f"position {goal.position} m is outside [0, {max_width}] m "
                    "(0 = closed, get_robot_info.gripper_max_width = open)")
            check_positive(goal.max_effort, "max_effort")
        except GoalRejected as err:
            return self._refuse(goal_handle, result, str(err), "gripper_command")

        def feedback(s: RobotSnapshot, step: int):
            fb = GripperCommand.Feedback()
            fb.position = float(s.gripper_width)
            goal_handle.publish_feedback(fb)

        try:
            outcome, stopped = self._run_motion(
                goal_handle, "gripper_command", feedback,
                lambda m: self._driver.gripper(goal.position, goal.max_effort, m))
        except Exception as err:
            return self.driver_failure(goal_handle, result, err, "gripper_command")
        if outcome is None:
            result.message = stopped
            return self._finish(goal_handle, result, stopped)
        result.position, result.effort = float(outcome.width), float(outcome.effort)
        result.stalled, result.reached_goal = outcome.stalled, outcome.reached
        result.message = f"stopped: {stopped}" if stopped else outcome.message
        # A stall (an object between the fingers) is a successful grasp, not a failure.
        return self._finish(goal_handle, result, stopped, ok=outcome.reached or outcome.stalled)

    def driver_failure(self, goal_handle, result, err: Exception, label: str):
        if not self._node.context.ok():
            raise err  # ROS shut down under the motion (Ctrl-C): its feedback failed, not the robot
        # A driver's own checks (a safety layer, a faulted robot) refuse before moving.
        if isinstance(err, GoalRejected):
            return self._refuse(goal_handle, result, str(err), label)
        self._node.get_logger().error(
            f"{label} failed in the driver: {err}\n{traceback.format_exc()}")
        try:
            self._driver.hold()
        except Exception as hold_err:
            self._node.get_logger().error(f"hold after failure also failed: {hold_err}")
        result.message = f"{label} failed: {err}; the robot was told to hold position"
        if isinstance(result, ExecuteChunk.Result):
            result.outcome = ExecuteChunk.Result.OUTCOME_FAULT
        goal_handle.abort()
        return result

    # --- services ------------------------------------------------------------------------
    def _stop(self, _request, response):
        self._arbiter.interrupt("stopped by the stop service")
        self.mode = RobotState.MODE_STOPPED
        failed = self._holder.request()
        if failed:
            response.success = False
            response.message = (f"the motion is stopped, but the robot's last hold failed "
                                f"({failed}); it is tried again now - check the robot")
        else:
            response.success = True
            response.message = "stopped: the motion is interrupted and the robot holds position"
        return response

    def _reset(self, request, response):
        snap, response.message = self.reset_episode(ResetRequest(
            suite=request.suite, task_id=request.task_id, seed=request.seed,
            init_state_index=request.init_state_index))
        response.success = snap is not None
        if snap is not None:
            response.instruction = snap.task.instruction
            response.episode_id = snap.task.episode_id
        return response

    def _reset_goal(self, goal_handle):
        """The reset as a goal: feedback on the way home, cancel halts the arm."""
        goal, result = goal_handle.request, ResetEpisodeAction.Result()

        def feedback(s: RobotSnapshot, step: int):
            fb = ResetEpisodeAction.Feedback()
            fb.stamp, fb.step = self._node.get_clock().now().to_msg(), step
            pose_to_msg(s.ee_position, s.ee_orientation, fb.ee_pose)
            goal_handle.publish_feedback(fb)

        motion = Motion(feedback)
        with self._cancellable(goal_handle, motion):
            snap, result.message = self.reset_episode(ResetRequest(
                suite=goal.suite, task_id=goal.task_id, seed=goal.seed,
                init_state_index=goal.init_state_index), motion)
        result.success = snap is not None
        if snap is not None:
            result.instruction, result.episode_id = snap.task.instruction, snap.task.episode_id
        return self._finish(goal_handle, result, None if snap else motion.reason,
                            ok=result.success)

    def reset_episode(self, request: ResetRequest, motion: Optional[Motion] = None):
        """(snapshot of the new episode or None, message). ``motion`` lets a caller stop
        it (a canceled goal); ``stop`` and any newer goal stop it too."""
        motion = motion or Motion()
        try:
            snap, _ = self._exclusive(motion, "reset",
                                      lambda m: self._driver.reset(request, m))
        except (ValueError, GoalRejected) as err:
            return None, f"reset refused: {err}"
        except Exception as err:
            self._node.get_logger().error(f"reset failed: {err}\n{traceback.format_exc()}")
            return None, f"reset failed: {err}"
        if snap is None:
            return None, f"reset stopped before the new episode: {motion.reason}"
        self._publisher.publish_task(snap)
        return snap, "episode reset"
