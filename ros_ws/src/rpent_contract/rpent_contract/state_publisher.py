"""The robot's state going out: ``robot_state``, ``joint_states``, ``ee_pose``, ``/tf`` and
``/tf_static``, ``robot_description``, ``task_status`` and the cameras, every one under the
stamp of the measurement it carries.

The robot node's timer calls :meth:`StatePublisher.publish`; a motion that renders its steps
calls :meth:`StatePublisher.publish_step` for each one, so that frames are never paired with
a state of another step.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped, TransformStamped
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import Empty, String
from tf2_msgs.msg import TFMessage

from rpent_interfaces.msg import RobotState, TaskStatus

from .description import RobotModel
from .driver import FrameDemand, RobotDescription, RobotDriver, RobotSnapshot
from .geometry import WORLD_FRAME, pose_to_msg
from .images import numpy_to_image
from .names import (
    CAMERA_TRIGGER_TOPIC,
    EE_POSE_TOPIC,
    JOINT_STATES_TOPIC,
    ROBOT_DESCRIPTION_TOPIC,
    ROBOT_STATE_TOPIC,
    TASK_STATUS_TOPIC,
    camera_topic,
    optical_frame,
)
from .qos import (IMAGE_PUB_QOS, LATCHED_QOS, STATE_QOS, TASK_STATUS_QOS, TF_QOS,
                  TRIGGER_QOS)

# Longest a stepping simulator's unchanged state goes unpublished, in s: watchers call a
# robot silent after 2 s, and a step normally takes far less, so repeats are rare.
HEARTBEAT_S = 0.5


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


class StatePublisher:
    """Publishes what a robot node's driver measures, and its fixed frames.

    ``status()`` gives the motion server's (mode, active goal) for ``robot_state``.
    """

    def __init__(self, node, driver: RobotDriver, description: RobotDescription, *,
                 model: Optional[RobotModel], frame_prefix: str, base_link: str, ee_link: str,
                 camera_mounts: dict, state_timeout: float, rate: float,
                 status: Callable[[], tuple]):
        self._node, self._driver, self._description = node, driver, description
        self._model, self._prefix = model, frame_prefix
        self._ee_link = ee_link
        self.base_frame = frame_prefix + base_link
        self.ee_frame = frame_prefix + ee_link
        self._camera_mounts = camera_mounts
        self._state_timeout = state_timeout
        self._status = status
        self._verdict: Optional[tuple] = None  # (episode id, success) from the operator

        pub = node.create_publisher
        self._joint_pub = pub(JointState, JOINT_STATES_TOPIC, STATE_QOS)
        self._pose_pub = pub(PoseStamped, EE_POSE_TOPIC, STATE_QOS)
        self._state_pub = pub(RobotState, ROBOT_STATE_TOPIC, STATE_QOS)
        self._task_pub = pub(TaskStatus, TASK_STATUS_TOPIC, TASK_STATUS_QOS)
        self._last_task: Optional[tuple] = None
        self._task_lock = threading.Lock()  # the timer, motions and services all publish
        self._image_pubs = {
            name: (pub(Image, camera_topic(name), IMAGE_PUB_QOS),
                   pub(CameraInfo, camera_topic(name, "camera_info"), IMAGE_PUB_QOS))
            for name in description.camera_names
        }
        # Aligned depth as camera drivers publish it (REP-118: 32FC1 in m, 0/NaN unknown),
        # with its own camera_info so depth-only consumers need nothing else.
        self._depth_pubs = {
            name: (pub(Image, camera_topic(name, "depth/image_raw"), IMAGE_PUB_QOS),
                   pub(CameraInfo, camera_topic(name, "depth/camera_info"), IMAGE_PUB_QOS))
            for name in description.depth_camera_names
        }
        self._camera_topics = [node.resolve_topic_name(p.topic_name) for pubs in (
            *self._image_pubs.values(), *self._depth_pubs.values()) for p in pubs]
        self._frames_asked = threading.Event()
        if description.frames_on_demand:
            node.create_subscription(Empty, CAMERA_TRIGGER_TOPIC,
                                     lambda _msg: self._frames_asked.set(), TRIGGER_QOS)
            driver.on_frame_demand(self._frame_demand)
        self._tf_pub = pub(TFMessage, "/tf", TF_QOS)
        self._published_ns: Optional[int] = None  # measurement last sent on /tf
        self._published_step: Optional[tuple] = None  # a simulator's last: (step, when)
        # The timer and a motion's rendered steps both publish measurements.
        self._publish_lock = threading.Lock()
        self._stale = False
        # Latched like tf2's static broadcaster and robot_state_publisher's description.
        self._tf_static_pub = pub(TFMessage, "/tf_static", LATCHED_QOS)
        if model is not None:
            pub(String, ROBOT_DESCRIPTION_TOPIC, LATCHED_QOS).publish(String(data=model.urdf))
        self._world: Optional[tuple] = None  # base_in_world last sent on /tf_static
        self._publish_static_frames()
        node.create_timer(1.0 / rate, self.publish,
                          callback_group=MutuallyExclusiveCallbackGroup())

    def set_verdict(self, episode_id: str, success: bool, snap: RobotSnapshot) -> None:
        """An operator's verdict on ``episode_id``, reported on task_status from now on."""
        self._verdict = (episode_id, success)
        self.publish_task(snap)

    def publish(self, render: bool = True) -> None:
        """The driver's newest measurement. ``render``: at rest, render the frames watchers
        miss (a simulator that renders on demand)."""
        try:
            with self._publish_lock:
                self._publish(None, render)
        except Exception:
            if self._node.context.ok():
                raise
            # Shut down (Ctrl-C) under a tick: its publishers are gone, nothing is lost.

    def publish_step(self, snap: RobotSnapshot) -> None:
        """A step a motion rendered, with its frames, at once: the timer publishes only the
        newest state, which may be a later step without frames."""
        with self._publish_lock:
            self._publish(snap, True)

    # --- state -------------------------------------------------------------------------
    def _watched(self) -> bool:
        return any(self._node.count_subscribers(topic) for topic in self._camera_topics)

    def _frame_demand(self) -> FrameDemand:
        if self._frames_asked.is_set():
            self._frames_asked.clear()
            return FrameDemand.REQUESTED
        return FrameDemand.WATCHED if self._watched() else FrameDemand.NONE

    def _publish(self, rendered: Optional[RobotSnapshot], render: bool) -> None:
        """Everything stamped with the time the state was measured (the driver's newest, or
        ``rendered``). A measurement older than state_timeout is not republished as if it
        were current: robot_state says so (keeping that time) and the other topics wait for
        a new one."""
        # Read the clock before the state: a simulator's state is stamped "now", and a step it
        # takes in between must count as after the observation (a streamed chunk drops it as
        # executed), never as before it (the chunk would repeat it).
        now_ns = self._node.get_clock().now().nanoseconds
        snap = rendered if rendered is not None else self._driver.snapshot()
        mode, active_goal = self._status()
        watched = self._watched()
        if self._description.frames_on_demand and rendered is None and render and \
                mode != RobotState.MODE_MOVING and not snap.images and (
                    watched or self._frames_asked.is_set()):
            # At rest nothing renders in a step: the state holds, so its frames are made now.
            self._frames_asked.clear()
            snap = self._driver.render()
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
        stale = age > self._state_timeout
        if stale:
            errors.append(
                f"no new state from the robot for {age:.1f} s (state_timeout "
                f"{self._state_timeout:g} s): joint_states, ee_pose, tf and camera images are "
                "paused until it reports again, and robot_state keeps the time of its last "
                "measurement - check the robot's connection")
        if stale != self._stale:
            self._stale = stale
            if stale:
                self._node.get_logger().error(errors[-1])
            else:
                self._node.get_logger().info("the robot reports its state again")

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
        state.active_goal = active_goal
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
        self.publish_task(snap)
        if stale:
            return

        transforms = [_transform(stamp, self.base_frame, self.ee_frame, snap.ee_position,
                                 snap.ee_orientation)]
        if self._model is not None:
            positions = dict(zip(snap.joint_names, (float(v) for v in snap.joint_positions)))
            p = self._prefix
            transforms += [
                _transform(stamp, p + t.parent, p + t.child, t.position, t.orientation)
                for t in self._model.moving_transforms(positions) if t.child != self._ee_link]
        for name, frame in (snap.images if watched else {}).items():
            pubs = self._image_pubs.get(name)
            if pubs is None:
                continue
            img = numpy_to_image(frame.rgb, "rgb8")
            img.header.stamp = stamp
            img.header.frame_id = self._prefix + optical_frame(name)
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
                transforms.append(_transform(stamp, self.base_frame, img.header.frame_id,
                                             frame.position, frame.orientation))
        # Same stamp as the images: a consumer pairs a frame with the camera pose it was
        # taken from. tf2 drops (and warns about) a repeated stamp, so a measurement goes
        # on /tf once however often the state is published.
        if measured_ns != self._published_ns:
            self._published_ns = measured_ns
            self._tf_pub.publish(TFMessage(transforms=transforms))

    def publish_task(self, snap: RobotSnapshot) -> None:
        """task_status, when anything in it changed."""
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
        msg.header.stamp = self._node.get_clock().now().to_msg()
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

    # --- fixed frames ------------------------------------------------------------------
    def _publish_static_frames(self) -> None:
        """The model's fixed joints, the camera mounts and the world frame on /tf_static:
        all of them each time, as latched (depth 1) tf_static publishers must."""
        stamp = self._node.get_clock().now().to_msg()
        p = self._prefix
        transforms = [
            _transform(stamp, p + t.parent, p + t.child, t.position, t.orientation)
            for t in (self._model.fixed_transforms() if self._model else ())
            # The end effector hangs off the base at its measured pose (a tool the model
            # does not know moves it), so the model must not give it a second parent.
            if t.child != self._ee_link]
        transforms += [_transform(stamp, p + mount, p + optical_frame(name), position,
                                  orientation)
                       for name, (mount, position, orientation) in self._camera_mounts.items()]
        if self._world is not None:
            transforms.append(_transform(stamp, p + WORLD_FRAME, self.base_frame, *self._world))
        if transforms:
            self._tf_static_pub.publish(TFMessage(transforms=transforms))


def _transform(stamp, parent: str, child: str, position, orientation) -> TransformStamped:
    tf = TransformStamped()
    tf.header.stamp, tf.header.frame_id, tf.child_frame_id = stamp, parent, child
    t = tf.transform.translation
    t.x, t.y, t.z = (float(v) for v in position)
    r = tf.transform.rotation
    r.x, r.y, r.z, r.w = (float(v) for v in orientation)
    return tf


def _stamp_ns(nanoseconds: int) -> Time:
    return Time(sec=nanoseconds // 1_000_000_000, nanosec=nanoseconds % 1_000_000_000)

