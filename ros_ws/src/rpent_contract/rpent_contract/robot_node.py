"""RobotContractNode: the ROS side of every robot node (sim or real).

Owns the contract's parameters, publishers, action servers and services (see
ARCHITECTURE.md, "The robot contract"), validates every goal before anything moves and
runs one motion at a time. The embodiment is a :class:`~rpent_contract.driver.RobotDriver`
that a subclass builds in :meth:`RobotContractNode.create_driver`.

Goals that fail validation are accepted and immediately aborted with a result whose
message says what was wrong: an rclpy goal *rejection* cannot carry a reason, and an
invalid goal must not preempt the motion already running.
"""
from __future__ import annotations

import contextlib
import threading
import time
import traceback
from typing import Callable, Optional

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped, TransformStamped
from rclpy.action import CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Empty, Header, String
from std_srvs.srv import Trigger
from tf2_msgs.msg import TFMessage

from rpent_interfaces.action import (
    ExecuteChunk,
    GripperCommand,
    MoveTo,
    RequestOperatorVerdict,
    RequestSceneReset,
)
from rpent_interfaces.action import ResetEpisode as ResetEpisodeAction
from rpent_interfaces.msg import (ExecutedAction, OperatorRequest, OperatorRequests,
                                  RobotState, TaskStatus)
from rpent_interfaces.srv import (
    AnswerOperator,
    GetObjectPoses,
    GetRobotInfo,
    ResetEpisode,
    Segment,
)

from . import params
from .control_space import chunk_to_array
from .description import RobotModel
from .driver import FrameDemand, Motion, ResetRequest, RobotDriver, RobotSnapshot
from .geometry import WORLD_FRAME, pose_from_msg, pose_to_msg
from .images import numpy_to_image
from .motion import MotionArbiter
from .names import (
    ANSWER_SERVICE,
    CAMERA_TRIGGER_TOPIC,
    EE_POSE_TOPIC,
    EXECUTE_CHUNK_ACTION,
    EXECUTED_ACTIONS_TOPIC,
    GET_ROBOT_INFO_SERVICE,
    GRIPPER_COMMAND_ACTION,
    JOINT_STATES_TOPIC,
    MOVE_TO_ACTION,
    OBJECT_POSES_SERVICE,
    REQUESTS_TOPIC,
    RESET_EPISODE_ACTION,
    RESET_SERVICE,
    ROBOT_DESCRIPTION_TOPIC,
    ROBOT_STATE_TOPIC,
    SCENE_RESET_ACTION,
    SEGMENT_SERVICE,
    STOP_SERVICE,
    TASK_STATUS_TOPIC,
    VERDICT_ACTION,
    camera_topic,
    optical_frame,
)
from .node_main import run_node
from .operator import SCENE_RESET, VERDICT, Answer, OperatorDesk
from .perception import fill_segment_response
from .qos import EXECUTED_QOS, IMAGE_QOS, LATCHED_QOS, STATE_QOS, TF_QOS, TRIGGER_QOS
from .serving import action_server, service
from .validation import (
    GoalRejected,
    Workspace,
    check_chunk,
    check_pose_target,
    check_positive,
    check_step_period,
    check_timeout,
)

# Longest a stepping simulator's unchanged state goes unpublished, in s: watchers call a
# robot silent after 2 s, and a step normally takes far less, so repeats are rare.
HEARTBEAT_S = 0.5


def default_frame_prefix(namespace: str) -> str:
    """'<namespace>/' for a namespaced node, '' otherwise (tf2 frame ids have no leading
    slash)."""
    namespace = namespace.strip("/")
    return f"{namespace}/" if namespace else ""


def camera_info(frame, header) -> CameraInfo:
    """CameraInfo of a ``CameraImage``: its calibration's distortion where it has one,
    else an undistorted pinhole camera."""
    info = CameraInfo()
    info.header = header
    info.height, info.width = int(frame.rgb.shape[0]), int(frame.rgb.shape[1])
    info.k = [frame.fx, 0.0, frame.cx, 0.0, frame.fy, frame.cy, 0.0, 0.0, 1.0]
    lens = frame.lens
    if lens is None:
        info.distortion_model = "plumb_bob"
        info.d = [0.0] * 5
        info.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
        info.p = [frame.fx, 0.0, frame.cx, 0.0, 0.0, frame.fy, frame.cy, 0.0, 0.0, 0.0, 1.0,
                  0.0]
    else:
        info.distortion_model = lens.model
        info.d, info.r, info.p = list(lens.d), list(lens.r), list(lens.p)
    return info


class RobotContractNode(Node):
    """Base class of robot nodes; subclasses implement :meth:`create_driver`."""

    def __init__(self, node_name: str, *, default_workspace=((-1.0, -1.0, 0.0), (1.0, 1.0, 1.5)),
                 default_frames=("base_link", "ee_link"), **kwargs):
        super().__init__(node_name, **kwargs)
        d = lambda *a, **k: params.declare(self, *a, **k)  # noqa: E731
        self.frame_prefix = d(
            "frame_prefix", default_frame_prefix(self.get_namespace()),
            "Prefix of every frame this robot publishes, so several robots share one tf tree; "
            "default '<namespace>/' for a namespaced node, '' otherwise",
            lambda v: "must not start with '/': tf2 frame ids have no leading slash"
            if v.startswith("/") else None)
        self._base_link = d("base_frame", default_frames[0],
                            "Frame of ee_pose, workspace and goals (frame_prefix is added)")
        self._ee_link = d("ee_frame", default_frames[1],
                          "End-effector frame (frame_prefix is added)")
        self.base_frame = self.frame_prefix + self._base_link
        self.ee_frame = self.frame_prefix + self._ee_link
        lo = d("workspace_min", [float(v) for v in default_workspace[0]], "Workspace box lower corner (x, y, z) in m",
               params.vector(3))
        hi = d("workspace_max", [float(v) for v in default_workspace[1]], "Workspace box upper corner (x, y, z) in m",
               params.vector(3))
        try:
            self.workspace = Workspace(lo, hi)
        except ValueError as err:
            raise params.ParameterError(f"workspace_min/workspace_max: {err}") from None
        self.max_translation_step = d(
            "max_translation_step", 0.02, "Largest move_to translation per control step, m",
            params.positive)
        self.max_rotation_step = d(
            "max_rotation_step", 0.1, "Largest move_to rotation per control step, rad",
            params.positive)
        self.move_to_timeout = d(
            "move_to_timeout", 30.0, "Default move_to budget in seconds of robot time",
            params.positive)
        self.external_cameras = [n for n in d(
            "external_cameras", [""],
            "Cameras another driver publishes (realsense2_camera, usb_cam ...), its topics "
            "remapped onto camera/<name>/image_raw and camera_info: listed in get_robot_info "
            "so the agent and models use them; [''] = none") if n]
        self.publish_rate = d(
            "publish_rate", 0.0, "Rate of state and camera topics in Hz; 0 = the control rate",
            params.non_negative)
        self.state_timeout = d(
            "state_timeout", 0.5,
            "A measurement older than this (a robot that stopped answering) makes robot_state "
            "report an error, and pauses joint_states, ee_pose, tf and the cameras until a "
            "new one arrives, s", params.positive)
        self.model = self._load_model(d(
            "robot_description_file", self.default_robot_description_file(),
            "URDF published on robot_description; its links go on tf at the measured joint "
            "positions. '' = none"))
        # Cameras fixed to the robot or the room: name -> (frame it is mounted on, position,
        # quaternion x, y, z, w of its optical frame there); create_driver fills it in.
        self.camera_mounts: dict = {}

        self.driver: RobotDriver = self.create_driver()
        desc = self.driver.description
        self.description = desc
        try:
            self._check_frames(desc)
        except params.ParameterError:
            self.driver.close()
            raise
        self.operator = d(
            "operator", "auto" if desc.simulated else "human",
            "Who answers operator requests: 'human' (rpent operator, the Foxglove layout's "
            "operator panel) or, in simulation, 'auto' (verdict = the simulator's success "
            "check, scene reset = simulator reset)",
            lambda v: None if v == "human" or (v == "auto" and desc.simulated) else (
                "must be 'human' on a real robot: nothing but a person can judge its task or "
                "put its scene back" if v == "auto" else "must be 'auto' or 'human'"))
        self.operator_timeout = d(
            "operator_timeout", 600.0, "Default wait for an operator's answer, s",
            params.positive)
        self._verdict: Optional[tuple] = None  # (episode id, success) from the operator
        self._arbiter = MotionArbiter()
        self._mode = RobotState.MODE_IDLE
        self._active_goal = ""
        self._goal_motions: dict[bytes, Motion] = {}
        self._goal_lock = threading.Lock()

        self._joint_pub = self.create_publisher(JointState, JOINT_STATES_TOPIC, STATE_QOS)
        self._pose_pub = self.create_publisher(PoseStamped, EE_POSE_TOPIC, STATE_QOS)
        self._state_pub = self.create_publisher(RobotState, ROBOT_STATE_TOPIC, STATE_QOS)
        self._task_pub = self.create_publisher(TaskStatus, TASK_STATUS_TOPIC, LATCHED_QOS)
        # Every step an execute_chunk goal carries out, reliably: a recording must hold
        # each one for a dataset to pair it with its observation.
        self._executed_pub = self.create_publisher(ExecutedAction, EXECUTED_ACTIONS_TOPIC,
                                                   EXECUTED_QOS)
        self._last_task: Optional[tuple] = None
        self._task_lock = threading.Lock()  # the timer and the reset service both publish
        self._image_pubs = {
            name: (self.create_publisher(Image, camera_topic(name), IMAGE_QOS),
                   self.create_publisher(CameraInfo, camera_topic(name, "camera_info"), IMAGE_QOS))
            for name in desc.camera_names
        }
        # Aligned depth as camera drivers publish it (REP-118: 32FC1 in m, 0/NaN unknown),
        # with its own camera_info so depth-only consumers need nothing else.
        self._depth_pubs = {
            name: (self.create_publisher(Image, camera_topic(name, "depth/image_raw"), IMAGE_QOS),
                   self.create_publisher(CameraInfo, camera_topic(name, "depth/camera_info"),
                                         IMAGE_QOS))
            for name in desc.depth_camera_names
        }
        self._camera_topics = [self.resolve_topic_name(pub.topic_name) for pubs in (
            *self._image_pubs.values(), *self._depth_pubs.values()) for pub in pubs]
        self._frames_asked = threading.Event()
        if desc.frames_on_demand:
            self.create_subscription(Empty, CAMERA_TRIGGER_TOPIC,
                                     lambda _msg: self._frames_asked.set(), TRIGGER_QOS)
            self.driver.on_frame_demand(self._frame_demand)
        self._tf_pub = self.create_publisher(TFMessage, "/tf", TF_QOS)
        self._published_ns: Optional[int] = None  # measurement last sent on /tf
        self._published_step: Optional[tuple] = None  # a simulator's last: (step, when)
        # The timer and a motion's rendered steps both publish measurements.
        self._publish_lock = threading.Lock()
        self._stale = False
        # Latched like tf2's static broadcaster and robot_state_publisher's description.
        self._tf_static_pub = self.create_publisher(TFMessage, "/tf_static", LATCHED_QOS)
        if self.model is not None:
            self._description_pub = self.create_publisher(String, ROBOT_DESCRIPTION_TOPIC,
                                                          LATCHED_QOS)
            self._description_pub.publish(String(data=self.model.urdf))
        self._world: Optional[tuple] = None  # base_in_world last sent on /tf_static
        self._publish_static_frames()
        self._requests_pub = self.create_publisher(OperatorRequests, REQUESTS_TOPIC,
                                                   LATCHED_QOS)
        self._desk = OperatorDesk(self._publish_requests)
        self._publish_requests([])

        motions = ReentrantCallbackGroup()
        self._action_servers = [
            action_server(
                self, action_type, name, execute_callback=execute,
                goal_callback=lambda _goal: GoalResponse.ACCEPT,
                cancel_callback=self._cancel, callback_group=motions,
            )
            for action_type, name, execute in (
            (ExecuteChunk, EXECUTE_CHUNK_ACTION, self._execute_chunk),
            (MoveTo, MOVE_TO_ACTION, self._move_to),
            (GripperCommand, GRIPPER_COMMAND_ACTION, self._gripper_command),
            (ResetEpisodeAction, RESET_EPISODE_ACTION, self._reset_goal),
            )
        ]
        # Waiting for a person takes minutes: a group of its own keeps motions and services
        # answering meanwhile (one request of each kind waits at a time).
        operator = ReentrantCallbackGroup()
        self._action_servers += [
            action_server(self, action_type, name, execute_callback=execute,
                          goal_callback=lambda _goal: GoalResponse.ACCEPT,
                          cancel_callback=lambda _goal: CancelResponse.ACCEPT,
                          callback_group=operator)
            for action_type, name, execute in (
                (RequestOperatorVerdict, VERDICT_ACTION, self._request_verdict),
                (RequestSceneReset, SCENE_RESET_ACTION, self._request_scene_reset))
        ]
        services = ReentrantCallbackGroup()
        service(self, ResetEpisode, RESET_SERVICE, self._reset, callback_group=services)
        service(self, GetRobotInfo, GET_ROBOT_INFO_SERVICE, self._get_robot_info,
                callback_group=services)
        service(self, Trigger, STOP_SERVICE, self._stop, callback_group=services)
        service(self, AnswerOperator, ANSWER_SERVICE, self._answer_operator,
                callback_group=services)
        if OBJECT_POSES_SERVICE in desc.sim_services:
            service(self, GetObjectPoses, OBJECT_POSES_SERVICE, self._object_poses,
                    callback_group=services)
        if SEGMENT_SERVICE in desc.sim_services:
            service(self, Segment, SEGMENT_SERVICE, self._segment, callback_group=services)

        rate = self.publish_rate or desc.control_rate
        self.create_timer(1.0 / rate, self._publish_state,
                          callback_group=MutuallyExclusiveCallbackGroup())
        self.get_logger().info(
            f"{desc.embodiment} ready: control spaces "
            f"{[s.name for s in desc.control_spaces]}, cameras {list(desc.camera_names)}, "
            f"{desc.control_rate:g} Hz")

    # --- subclass hook -----------------------------------------------------------------
    def create_driver(self) -> RobotDriver:
        """Declare embodiment parameters and build the driver."""
        raise NotImplementedError

    def default_robot_description_file(self) -> str:
        """URDF of this embodiment that an installed package ships, '' if none."""
        return ""

    # --- robot model and frames ------------------------------------------------------------
    def _load_model(self, path: str) -> Optional[RobotModel]:
        if not path:
            self.get_logger().info("robot_description_file is '': no robot_description, and "
                                   "only the end effector and cameras on tf")
            return None
        try:
            model = RobotModel.from_file(path)
        except ValueError as err:
            raise params.ParameterError(f"robot_description_file: {err}") from None
        if self._base_link not in model.links:
            raise params.ParameterError(
                f"base_frame '{self._base_link}' is not a link of {path} (links: "
                f"{', '.join(model.links)}): set base_frame to the model's base link, or "
                "robot_description_file to '' to publish no model")
        return model

    def _check_frames(self, desc) -> None:
        """The model and the camera mounts fit this robot, or say which parameter to fix."""
        model = self.model
        if model is not None:
            missing = [j for j in desc.joint_names if j not in model.joint_names]
            if missing:
                raise params.ParameterError(
                    f"robot_description_file {model.source} has no moving joint(s) "
                    f"{', '.join(missing)}, which joint_states publishes: point it at this "
                    "robot's URDF, or set it to '' to publish no model")
        frames = {self._base_link, self._ee_link} | set(model.links if model else ())
        for name, (mount, _, _) in self.camera_mounts.items():
            if mount not in frames:
                raise params.ParameterError(
                    f"camera_extrinsics: camera '{name}' is mounted on '{mount}', which is not "
                    f"a frame of this robot; use one of {', '.join(sorted(frames))}")

    def _publish_static_frames(self) -> None:
        """The model's fixed joints, the camera mounts and the world frame on /tf_static:
        all of them each time, as latched (depth 1) tf_static publishers must."""
        stamp = self.get_clock().now().to_msg()
        p = self.frame_prefix
        transforms = [
            self._transform(stamp, p + t.parent, p + t.child, t.position, t.orientation)
            for t in (self.model.fixed_transforms() if self.model else ())
            # The end effector hangs off the base at its measured pose (a tool the model
            # does not know moves it), so the model must not give it a second parent.
            if t.child != self._ee_link]
        transforms += [self._transform(stamp, p + mount, p + optical_frame(name), position,
                                       orientation)
                       for name, (mount, position, orientation) in self.camera_mounts.items()]
        if self._world is not None:
            transforms.append(self._transform(stamp, p + WORLD_FRAME, self.base_frame,
                                              *self._world))
        if transforms:
            self._tf_static_pub.publish(TFMessage(transforms=transforms))

    # --- publishing ----------------------------------------------------------------------
    def _publish_state(self, render: bool = True) -> None:
        try:
            self._publish_measurement(render=render)
        except Exception:
            if self.context.ok():
                raise
            # Shut down (Ctrl-C) under a tick: its publishers are gone, nothing is lost.

    def _watched(self) -> bool:
        return any(self.count_subscribers(topic) for topic in self._camera_topics)

    def _frame_demand(self) -> FrameDemand:
        if self._frames_asked.is_set():
            self._frames_asked.clear()
            return FrameDemand.REQUESTED
        return FrameDemand.WATCHED if self._watched() else FrameDemand.NONE

    def _publish_measurement(self, snap: Optional[RobotSnapshot] = None,
                             render: bool = True) -> None:
        """Everything stamped with the time the state was measured (the driver's newest, or
        ``snap``, a step a motion rendered). A measurement older than state_timeout is not
        republished as if it were current: robot_state says so (keeping that time) and the
        other topics wait for a new one. ``render``: at rest, render the frames watchers
        miss (a simulator that renders on demand)."""
        with self._publish_lock:
            self._publish_locked(snap, render)

    def _publish_locked(self, rendered: Optional[RobotSnapshot], render: bool) -> None:
        # Read the clock before the state: a simulator's state is stamped "now", and a step it
        # takes in between must count as after the observation (a streamed chunk drops it as
        # executed), never as before it (the chunk would repeat it).
        now_ns = self.get_clock().now().nanoseconds
        snap = rendered if rendered is not None else self.driver.snapshot()
        mode = self._mode
        watched = self._watched()
        if self.description.frames_on_demand and rendered is None and render and \
                mode != RobotState.MODE_MOVING and not snap.images and (
                    watched or self._frames_asked.is_set()):
            # At rest nothing renders in a step: the state holds, so its frames are made now.
            self._frames_asked.clear()
            snap = self.driver.render()
        if rendered is not None:
            step = (snap.task.episode_id, snap.episode_step)
            if self._published_step is not None and self._published_step[0] == step:
                return  # the timer was first
            self._published_step = (step, time.monotonic())
        elif snap.stamp_ns is None:
            # A simulator between steps: while a motion steps it, the next step is the next
            # measurement, and sending the same one again under a newer stamp only costs the
            # stepping thread time and every subscriber (a model predicts once per state it
            # is sent). It still goes out every HEARTBEAT_S, so that watchers can tell a
            # slow step from a dead node. Paused, its state holds now: sent at the rate.
            step, sent = (snap.task.episode_id, snap.episode_step), time.monotonic()
            last = self._published_step
            if last is not None and step == last[0] and sent - last[1] < HEARTBEAT_S and \
                    mode == RobotState.MODE_MOVING:
                return
            self._published_step = (step, sent)
        measured_ns = now_ns if snap.stamp_ns is None else int(snap.stamp_ns)
        stamp = _stamp_ns(measured_ns)
        age = (now_ns - measured_ns) / 1e9
        errors = list(snap.errors)
        stale = age > self.state_timeout
        if stale:
            errors.append(
                f"no new state from the robot for {age:.1f} s (state_timeout "
                f"{self.state_timeout:g} s): joint_states, ee_pose, tf and camera images are "
                "paused until it reports again, and robot_state keeps the time of its last "
                "measurement - check the robot's connection")
        if stale != self._stale:
            self._stale = stale
            if stale:
                self.get_logger().error(errors[-1])
            else:
                self.get_logger().info("the robot reports its state again")

        js = JointState()
        js.header.stamp = stamp
        js.name = list(snap.joint_names)
        js.position = [float(v) for v in snap.joint_positions]
        if snap.joint_velocities is not None:
            js.velocity = [float(v) for v in snap.joint_velocities]
        pose = PoseStamped()
        pose.header.stamp, pose.header.frame_id = stamp, self.base_frame
        pose_to_msg(snap.ee_position, snap.ee_orientation, pose.pose)
        if not stale:
            self._joint_pub.publish(js)
            self._pose_pub.publish(pose)

        state = RobotState()
        state.header = pose.header
        state.mode = RobotState.MODE_ERROR if errors else mode
        state.ee_pose = pose.pose
        state.gripper_width = float(snap.gripper_width)
        state.joint_names, state.joint_positions = js.name, js.position
        state.joint_velocities = js.velocity
        state.active_goal = self._active_goal
        state.errors = errors
        state.episode_step = int(snap.episode_step)
        if snap.base_in_world is not None and (
                self._world is None or not all(np.array_equal(a, b) for a, b in
                                               zip(snap.base_in_world, self._world))):
            # Before the state: a consumer that composes both finds the new world frame
            # (a reset to another scene moves it) no later than the state it belongs to.
            self._world = tuple(np.asarray(v, dtype=float) for v in snap.base_in_world)
            self._publish_static_frames()
        self._state_pub.publish(state)
        self._publish_task(snap)
        if stale:
            return

        transforms = [self._transform(stamp, self.base_frame, self.ee_frame, snap.ee_position,
                                      snap.ee_orientation)]
        if self.model is not None:
            positions = dict(zip(snap.joint_names, (float(v) for v in snap.joint_positions)))
            p = self.frame_prefix
            transforms += [
                self._transform(stamp, p + t.parent, p + t.child, t.position, t.orientation)
                for t in self.model.moving_transforms(positions) if t.child != self._ee_link]
        for name, frame in (snap.images if watched else {}).items():
            pubs = self._image_pubs.get(name)
            if pubs is None:
                continue
            img = numpy_to_image(frame.rgb, "rgb8")
            img.header.stamp = stamp
            img.header.frame_id = self.frame_prefix + optical_frame(name)
            pubs[0].publish(img)
            info = camera_info(frame, img.header)
            pubs[1].publish(info)
            depth_pubs = self._depth_pubs.get(name)
            if depth_pubs is not None and frame.depth is not None:
                depth = numpy_to_image(frame.depth.astype(np.float32, copy=False), "32FC1")
                depth.header = img.header
                depth_pubs[0].publish(depth)
                depth_pubs[1].publish(info)
            if frame.position is not None:
                transforms.append(self._transform(stamp, self.base_frame, img.header.frame_id,
                                                  frame.position, frame.orientation))
        # Same stamp as the images: a consumer pairs a frame with the camera pose it was
        # taken from. tf2 drops (and warns about) a repeated stamp, so a measurement goes
        # on /tf once however often the state is published.
        if measured_ns != self._published_ns:
            self._published_ns = measured_ns
            self._tf_pub.publish(TFMessage(transforms=transforms))

    def _transform(self, stamp, parent: str, child: str, position,
                   orientation) -> TransformStamped:
        tf = TransformStamped()
        tf.header.stamp, tf.header.frame_id, tf.child_frame_id = stamp, parent, child
        t = tf.transform.translation
        t.x, t.y, t.z = (float(v) for v in position)
        r = tf.transform.rotation
        r.x, r.y, r.z, r.w = (float(v) for v in orientation)
        return tf

    def _publish_task(self, snap: RobotSnapshot) -> None:
        t = snap.task
        verdict = self._verdict[1] if self._verdict and self._verdict[0] == t.episode_id \
            else None
        key = (t.instruction, t.suite, t.task_name, t.task_id, t.episode_id, t.max_steps,
               t.success, t.success_is_native, t.done, t.native_success,
               int(snap.episode_step), verdict)
        with self._task_lock:
            if key == self._last_task:
                return
            self._last_task = key
        msg = TaskStatus()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = self.base_frame
        msg.instruction, msg.suite, msg.task_name = t.instruction, t.suite, t.task_name
        msg.task_id, msg.episode_id = int(t.task_id), t.episode_id
        msg.step, msg.max_steps = int(snap.episode_step), int(t.max_steps)
        msg.success, msg.done = bool(t.success), bool(t.done)
        msg.native_success = bool(t.native_success)
        if t.success_is_native:
            if t.success or t.done:
                msg.success_source = TaskStatus.SOURCE_NATIVE
        elif verdict is not None:
            msg.success, msg.success_source = verdict, TaskStatus.SOURCE_OPERATOR
            msg.done = msg.done or verdict
        self._task_pub.publish(msg)

    # --- motion plumbing -------------------------------------------------------------------
    def _cancel(self, goal_handle) -> CancelResponse:
        with self._goal_lock:
            motion = self._goal_motions.get(bytes(goal_handle.goal_id.uuid))
        if motion is not None:
            motion.stop("canceled by the client")
        return CancelResponse.ACCEPT

    def _run_motion(self, goal_handle, label: str, feedback, body):
        """Run ``body(motion)`` for a goal as the only motion; return (outcome, stop reason
        or None)."""
        if self.description.frames_on_demand:
            step_feedback = feedback

            def feedback(s: RobotSnapshot, step: int):
                # A rendered step goes out at once: the timer publishes only the newest
                # state, which may be a later step without frames.
                if s.images:
                    self._publish_measurement(s)
                step_feedback(s, step)
        motion = Motion(feedback, continuous=label == "execute_chunk")
        with self._cancellable(goal_handle, motion):
            outcome = self._exclusive(motion, label, body)
        # The state the motion ended in goes out before its result: a client that reads
        # robot_state once answered sees where the arm is, not a step of the way (a
        # simulator steps faster than the state timer ticks). Frames follow on the timer.
        self._publish_state(render=False)
        return outcome

    @contextlib.contextmanager
    def _cancellable(self, goal_handle, motion: Motion):
        """While inside, the client canceling ``goal_handle`` stops ``motion``."""
        uuid = bytes(goal_handle.goal_id.uuid)
        with self._goal_lock:
            self._goal_motions[uuid] = motion
        try:
            if goal_handle.is_cancel_requested:
                motion.stop("canceled by the client")
            yield
        finally:
            with self._goal_lock:
                self._goal_motions.pop(uuid, None)

    def _exclusive(self, motion: Motion, label: str, body):
        """Run ``body(motion)`` as the only motion (it preempts the running one, and
        ``stop`` or a newer motion stop it); return (outcome, stop reason or None), with
        outcome None when it was stopped before it began."""
        if motion.stopped or not self._arbiter.begin(motion, label):
            return None, motion.reason
        self._mode, self._active_goal = RobotState.MODE_MOVING, label
        try:
            return body(motion), (motion.reason if motion.stopped else None)
        finally:
            if self._active_goal == label:
                self._mode = (RobotState.MODE_STOPPED if motion.stopped
                              else RobotState.MODE_IDLE)
                self._active_goal = ""
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
        self.get_logger().warning(f"{label} goal refused: {why}")
        result.message = f"goal refused, nothing moved: {why}"
        if isinstance(result, ExecuteChunk.Result):
            result.outcome = ExecuteChunk.Result.OUTCOME_REFUSED
        goal_handle.abort()
        return result

    # --- execute_chunk -----------------------------------------------------------------
    def _execute_chunk(self, goal_handle):
        received = self.get_clock().now().to_msg()
        goal, result = goal_handle.request, ExecuteChunk.Result()
        try:
            actions = chunk_to_array(goal.chunk)
        except ValueError as err:
            return self._refuse(goal_handle, result, str(err), "execute_chunk")
        snap = self.driver.snapshot()
        try:
            check_step_period(goal.chunk.step_period, 1.0 / self.description.control_rate)
            space = check_chunk(
                actions, goal.chunk.control_space, self.description.control_spaces,
                max_horizon=self.description.max_chunk_steps, ee_position=snap.ee_position,
                workspace=self.workspace,
                current=self.driver.state_in_space(goal.chunk.control_space),
            )
        except GoalRejected as err:
            return self._refuse(goal_handle, result, str(err), "execute_chunk")

        def feedback(s: RobotSnapshot, step: int):
            now = self.get_clock().now().to_msg()
            # ``s`` is the state after the step: it was applied at the step before.
            done = ExecutedAction(episode_id=s.task.episode_id,
                                  episode_step=max(0, int(s.episode_step) - 1),
                                  control_space=space.name,
                                  action=[float(v) for v in actions[step]],
                                  observation_stamp=goal.chunk.observation_stamp,
                                  chunk_stamp=goal.chunk.header.stamp, chunk_received=received)
            done.header.stamp, done.header.frame_id = now, space.frame_id
            self._executed_pub.publish(done)
            fb = ExecuteChunk.Feedback()
            fb.stamp = now
            fb.step, fb.steps_total = step, actions.shape[0]
            pose_to_msg(s.ee_position, s.ee_orientation, fb.ee_pose)
            fb.gripper_width, fb.task_success = float(s.gripper_width), bool(s.task.success)
            goal_handle.publish_feedback(fb)

        try:
            outcome, stopped = self._run_motion(
                goal_handle, "execute_chunk", feedback,
                lambda m: self.driver.execute_chunk(space, actions, m, goal.stop_on_success))
        except Exception as err:  # the driver failed: report, hold, keep serving
            return self._driver_failure(goal_handle, result, err, "execute_chunk")
        if outcome is None:
            result.outcome, result.message = ExecuteChunk.Result.OUTCOME_CANCELED, stopped
            return self._finish(goal_handle, result, stopped)
        result.steps_executed = outcome.steps_executed
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
        return self._finish(goal_handle, result, stopped, ok=not outcome.fault)

    # --- move_to -------------------------------------------------------------------------
    def _move_to(self, goal_handle):
        goal, result = goal_handle.request, MoveTo.Result()
        frame = goal.target.header.frame_id
        position, orientation = pose_from_msg(goal.target.pose)
        try:
            if frame not in ("", self.base_frame):
                raise GoalRejected(
                    f"target frame '{frame}' is not the robot base frame '{self.base_frame}'; "
                    "express the target in the base frame (no TF lookup here)")
            quat = check_pose_target(position, orientation, workspace=self.workspace,
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
        trans = min(goal.max_translation_step or self.max_translation_step,
                    self.max_translation_step)
        rot = min(goal.max_rotation_step or self.max_rotation_step, self.max_rotation_step)
        timeout = goal.timeout or self.move_to_timeout
        max_steps = max(1, int(round(timeout * self.description.control_rate)))

        def feedback(s: RobotSnapshot, step: int):
            fb = MoveTo.Feedback()
            pose_to_msg(s.ee_position, s.ee_orientation, fb.current_pose)
            fb.position_error = float(np.linalg.norm(position - s.ee_position))
            fb.steps = step + 1
            goal_handle.publish_feedback(fb)

        try:
            outcome, stopped = self._run_motion(
                goal_handle, "move_to", feedback,
                lambda m: self.driver.move_to(
                    position, quat, position_only=goal.position_only,
                    max_translation_step=trans, max_rotation_step=rot,
                    position_tolerance=goal.position_tolerance or 0.01,
                    orientation_tolerance=goal.orientation_tolerance or 0.05,
                    max_steps=max_steps, motion=m))
        except Exception as err:
            return self._driver_failure(goal_handle, result, err, "move_to")
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
        max_width = self.description.gripper_max_width
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
                lambda m: self.driver.gripper(goal.position, goal.max_effort, m))
        except Exception as err:
            return self._driver_failure(goal_handle, result, err, "gripper_command")
        if outcome is None:
            result.message = stopped
            return self._finish(goal_handle, result, stopped)
        result.position, result.effort = float(outcome.width), float(outcome.effort)
        result.stalled, result.reached_goal = outcome.stalled, outcome.reached
        result.message = f"stopped: {stopped}" if stopped else outcome.message
        # A stall (an object between the fingers) is a successful grasp, not a failure.
        return self._finish(goal_handle, result, stopped, ok=outcome.reached or outcome.stalled)

    def _driver_failure(self, goal_handle, result, err: Exception, label: str):
        if not self.context.ok():
            raise err  # ROS shut down under the motion (Ctrl-C): its feedback failed, not the robot
        # A driver's own checks (a safety layer, a faulted robot) refuse before moving.
        if isinstance(err, GoalRejected):
            return self._refuse(goal_handle, result, str(err), label)
        self.get_logger().error(f"{label} failed in the driver: {err}\n{traceback.format_exc()}")
        try:
            self.driver.hold()
        except Exception as hold_err:
            self.get_logger().error(f"hold after failure also failed: {hold_err}")
        result.message = f"{label} failed: {err}; the robot was told to hold position"
        if isinstance(result, ExecuteChunk.Result):
            result.outcome = ExecuteChunk.Result.OUTCOME_FAULT
        goal_handle.abort()
        return result

    # --- services ------------------------------------------------------------------------
    def _stop(self, _request, response):
        self._arbiter.interrupt("stopped by the stop service")
        try:
            self.driver.hold()
        except Exception as err:
            response.success, response.message = False, f"hold failed: {err}"
            return response
        self._mode = RobotState.MODE_STOPPED
        response.success, response.message = True, "stopped; holding position"
        return response

    def _reset(self, request, response):
        snap, response.message = self._reset_episode(ResetRequest(
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
            fb.stamp, fb.step = self.get_clock().now().to_msg(), step
            pose_to_msg(s.ee_position, s.ee_orientation, fb.ee_pose)
            goal_handle.publish_feedback(fb)

        motion = Motion(feedback)
        with self._cancellable(goal_handle, motion):
            snap, result.message = self._reset_episode(ResetRequest(
                suite=goal.suite, task_id=goal.task_id, seed=goal.seed,
                init_state_index=goal.init_state_index), motion)
        result.success = snap is not None
        if snap is not None:
            result.instruction, result.episode_id = snap.task.instruction, snap.task.episode_id
        return self._finish(goal_handle, result, None if snap else motion.reason,
                            ok=result.success)

    def _reset_episode(self, request: ResetRequest, motion: Optional[Motion] = None):
        """(snapshot of the new episode or None, message). ``motion`` lets a caller stop
        it (a canceled goal); ``stop`` and any newer goal stop it too."""
        motion = motion or Motion()
        try:
            snap, _ = self._exclusive(motion, "reset",
                                      lambda m: self.driver.reset(request, m))
        except (ValueError, GoalRejected) as err:
            return None, f"reset refused: {err}"
        except Exception as err:
            self.get_logger().error(f"reset failed: {err}\n{traceback.format_exc()}")
            return None, f"reset failed: {err}"
        if snap is None:
            return None, f"reset stopped before the new episode: {motion.reason}"
        self._publish_task(snap)
        return snap, "episode reset"

    # --- operator requests -----------------------------------------------------------------
    def _publish_requests(self, pending: list) -> None:
        msg = OperatorRequests()
        msg.header.stamp = self.get_clock().now().to_msg()
        for r in pending:
            item = OperatorRequest(request_id=r.request_id, text=r.text, episode_id=r.episode_id)
            item.kind = (OperatorRequest.KIND_VERDICT if r.kind == VERDICT
                         else OperatorRequest.KIND_SCENE_RESET)
            item.stamp, item.deadline = _stamp(r.asked_at), _stamp(r.deadline)
            msg.pending.append(item)
        self._requests_pub.publish(msg)

    def _wait_operator(self, goal_handle, kind: str, text: str, timeout: float, feedback_type,
                       auto: Callable[[], Answer]):
        """(the operator's Answer, "") or (None, why not); ``auto()`` answers in simulation
        with operator:=auto."""
        if self.operator == "auto":
            return auto(), ""
        if not np.isfinite(timeout) or timeout < 0:
            return None, f"timeout must be a finite number of seconds >= 0, not {timeout}"
        episode = self.driver.snapshot().task.episode_id
        try:
            request = self._desk.ask(kind, text, episode, timeout or self.operator_timeout)
        except ValueError as err:
            return None, str(err)
        self.get_logger().warning(
            f"waiting for the operator ({kind.replace('_', ' ')} {request.request_id}): {text!r}; "
            f"answer with: rpent operator answer {'yes|no' if kind == VERDICT else 'done'}")

        def tick(waited: float) -> None:
            fb = feedback_type()
            fb.request_id, fb.waited = request.request_id, float(waited)
            goal_handle.publish_feedback(fb)

        tick(0.0)
        answer = self._desk.wait(request, lambda: goal_handle.is_cancel_requested, tick)
        if answer is not None:
            return answer, ""
        if goal_handle.is_cancel_requested:
            return None, "canceled before the operator answered"
        return None, (f"no operator answered within {timeout or self.operator_timeout:g} s; "
                      "answer with 'rpent operator' (or the Foxglove layout's operator panel) "
                      "while the request waits, or give a longer timeout")

    def _end_request(self, goal_handle, result, answered: bool):
        if not answered and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        elif answered:
            goal_handle.succeed()
        else:
            goal_handle.abort()
        return result

    def _request_verdict(self, goal_handle):
        goal, result = goal_handle.request, RequestOperatorVerdict.Result()
        answer, result.message = self._wait_operator(
            goal_handle, VERDICT, goal.question, goal.timeout, RequestOperatorVerdict.Feedback,
            lambda: Answer(bool(self.driver.snapshot().task.native_success),
                           "the simulator's success check", "simulation"))
        if answer is None:
            return self._end_request(goal_handle, result, False)
        snap = self.driver.snapshot()
        result.answered, result.success = True, answer.success
        result.comment, result.answered_by = answer.comment, answer.answered_by
        result.episode_id = snap.task.episode_id
        verdict = "achieved" if answer.success else "not achieved"
        if snap.task.success_is_native:
            result.message = (f"{answer.answered_by}: task {verdict}; this robot judges "
                              "success itself, so task_status keeps its own verdict")
        else:
            self._verdict = (snap.task.episode_id, answer.success)
            self._publish_task(snap)
            result.message = f"{answer.answered_by}: task {verdict}"
        if answer.comment:
            result.message += f" ({answer.comment})"
        self.get_logger().info(f"operator verdict: {result.message}")
        return self._end_request(goal_handle, result, True)

    def _request_scene_reset(self, goal_handle):
        goal, result = goal_handle.request, RequestSceneReset.Result()
        answer, result.message = self._wait_operator(
            goal_handle, SCENE_RESET, goal.note, goal.timeout, RequestSceneReset.Feedback,
            lambda: Answer(True, "the simulator put the scene back", "simulation"))
        if answer is None:
            return self._end_request(goal_handle, result, False)
        result.comment, result.answered_by = answer.comment, answer.answered_by
        if not answer.success:
            result.message = (f"the operator did not put the scene back"
                              f"{': ' + answer.comment if answer.comment else ''}")
            return self._end_request(goal_handle, result, True)
        snap, message = self._reset_episode(ResetRequest())
        result.done = snap is not None
        if snap is None:
            result.message = f"the scene was put back, but the robot's {message}"
        else:
            result.episode_id = snap.task.episode_id
            result.message = f"scene reset by the {answer.answered_by}; new episode started"
        return self._end_request(goal_handle, result, True)

    def _answer_operator(self, request, response):
        try:
            answered = self._desk.answer(request.request_id,
                                         Answer(bool(request.success), request.comment))
        except ValueError as err:
            response.accepted, response.message = False, str(err)
            return response
        response.accepted = True
        response.message = (f"{answered.kind.replace('_', ' ')} {answered.request_id} answered "
                            f"{'yes' if request.success else 'no'}")
        return response

    def _get_robot_info(self, _request, response):
        desc = self.description
        response.embodiment, response.simulated = desc.embodiment, desc.simulated
        response.base_frame, response.ee_frame = self.base_frame, self.ee_frame
        response.control_spaces = [s.to_msg() for s in desc.control_spaces]
        response.default_control_space = desc.control_spaces[0].name
        response.joint_names = list(desc.joint_names)
        response.camera_names = list(desc.camera_names) + [
            n for n in self.external_cameras if n not in desc.camera_names]
        (response.workspace_min.x, response.workspace_min.y,
         response.workspace_min.z) = (float(v) for v in self.workspace.lower)
        (response.workspace_max.x, response.workspace_max.y,
         response.workspace_max.z) = (float(v) for v in self.workspace.upper)
        response.control_rate = float(desc.control_rate)
        response.max_translation_step = float(self.max_translation_step)
        response.max_rotation_step = float(self.max_rotation_step)
        response.gripper_max_width = float(desc.gripper_max_width)
        response.sim_services = list(desc.sim_services)
        return response

    def shutdown(self) -> None:
        """Stop any motion and release the robot (before the node is destroyed)."""
        self._arbiter.interrupt("node shutting down")
        self.driver.close()

    def _segment(self, request, response):
        if request.camera not in self.description.camera_names:
            response.message = (f"unknown camera '{request.camera}'; cameras: "
                                f"{', '.join(self.description.camera_names)}")
            return response
        header = Header()
        header.stamp = self.get_clock().now().to_msg()
        header.frame_id = self.frame_prefix + optical_frame(request.camera)
        try:
            detections = self.driver.segment(request.camera, request.query)
        except ValueError as err:
            response.message = str(err)
            return response
        fill_segment_response(response, detections, header)
        response.message = (f"{len(detections)} detection(s) of '{request.query}'" if detections
                            else f"nothing in view of {request.camera} matches "
                                 f"'{request.query}'")
        return response

    def _object_poses(self, _request, response):
        stamp = self.get_clock().now().to_msg()
        for name, (position, quat) in sorted(self.driver.object_poses().items()):
            pose = PoseStamped()
            pose.header.stamp, pose.header.frame_id = stamp, self.base_frame
            pose_to_msg(position, quat, pose.pose)
            response.names.append(name)
            response.poses.append(pose)
        return response


def _stamp_ns(nanoseconds: int) -> Time:
    return Time(sec=nanoseconds // 1_000_000_000, nanosec=nanoseconds % 1_000_000_000)


def _stamp(seconds: float) -> Time:
    whole = int(seconds)
    return Time(sec=whole, nanosec=int((seconds - whole) * 1e9))


def spin_robot_node(node_class, args=None, num_threads: int = 6) -> int:
    """Run a robot node until Ctrl-C / shutdown; start-up errors exit 2 with the reason."""
    return run_node(node_class, name=node_class.__name__, args=args, num_threads=num_threads,
                    close=node_class.shutdown)
