"""What only a simulator can answer: ``sim/get_object_poses`` (where every object is) and
``sim/segment`` (masks from the renderer's segmentation), which a driver lists in
``RobotDescription.sim_services`` (privileged runs only for the poses); and, for viewers,
``sim/scene_markers`` (the scene's objects and table as labelled boxes) and ``sim/tasks``
(the tasks a reset can choose from). A real robot has none of them.

The scene markers are the simulator's truth whatever ``privileged`` says: they are drawn
for the people watching, and no tool of the agent reads them.
"""
from __future__ import annotations

import numpy as np
from geometry_msgs.msg import PoseStamped, Quaternion, Vector3
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from std_msgs.msg import ColorRGBA, Header
from visualization_msgs.msg import Marker, MarkerArray

from rpent_interfaces.msg import TaskList
from rpent_interfaces.srv import GetObjectPoses, Segment

from .driver import RobotDescription, RobotDriver
from .geometry import pose_to_msg, quaternion_to_matrix
from .markers import label, marker, wipe
from .names import (
    OBJECT_POSES_SERVICE,
    SCENE_MARKERS_TOPIC,
    SEGMENT_SERVICE,
    TASKS_TOPIC,
    optical_frame,
)
from .perception import fill_segment_response
from .qos import LATCHED_QOS
from .serving import service

# s between looks at what viewers see of the simulator (its tasks, its scene): a viewer
# sees an object moved within this; what has not changed is not published again.
SCENE_PERIOD_S = 0.5
SCENE_MOVED_M = 0.002  # an object moved less than this (or turned less) is not redrawn
OBJECT = ColorRGBA(r=0.35, g=0.6, b=0.9, a=0.45)
TABLE = ColorRGBA(r=0.55, g=0.45, b=0.35, a=0.5)


class SimServices:
    """Serves the simulator services ``description`` lists; poses are in ``base_frame``."""

    def __init__(self, node, driver: RobotDriver, description: RobotDescription, *,
                 frame_prefix: str, base_frame: str):
        self._node, self._driver, self._description = node, driver, description
        self._prefix, self._base_frame = frame_prefix, base_frame
        group = ReentrantCallbackGroup()
        if OBJECT_POSES_SERVICE in description.sim_services:
            service(node, GetObjectPoses, OBJECT_POSES_SERVICE, self._object_poses,
                    callback_group=group)
        if SEGMENT_SERVICE in description.sim_services:
            service(node, Segment, SEGMENT_SERVICE, self._segment, callback_group=group)
        self._scene_pub = node.create_publisher(MarkerArray, SCENE_MARKERS_TOPIC, LATCHED_QOS)
        self._scene_drawn = None  # name -> pose vector of the scene last published
        self._tasks_pub = node.create_publisher(TaskList, TASKS_TOPIC, LATCHED_QOS)
        self._tasks_suite = None  # the suite whose tasks were published last
        self._lacks: set = set()  # what the driver has not got, not asked again
        # One look at a time: a look waits on the simulator (behind a running chunk's
        # steps; the first reads the suite's files), and looks the timer started every
        # 0.5 s beside it held every executor thread, so a stop waited seconds for one.
        node.create_timer(SCENE_PERIOD_S, self._look,
                          callback_group=MutuallyExclusiveCallbackGroup())

    def _look(self) -> None:
        """What viewers see of the simulator, each published again when it changed."""
        self._show_tasks()
        if self._scene_pub.get_subscription_count():
            self._show_scene()

    def _ask(self, what: str, call):
        """The driver's answer for viewers; None when it has none (then never asked again)
        or cannot give it now (a simulator switching tasks: asked at the next look)."""
        if what in self._lacks:
            return None
        try:
            return call()
        except NotImplementedError:
            self._lacks.add(what)
        except Exception as err:  # noqa: BLE001 - viewers wait; the robot goes on
            self._node.get_logger().warning(f"no {what} for viewers this time: {err}",
                                            throttle_duration_sec=30.0)
        return None

    def _show_tasks(self) -> None:
        """The tasks a reset can choose from, again whenever the suite changed."""
        answer = self._ask("task list", self._driver.task_list)
        if answer is None or answer[0] == self._tasks_suite:
            return
        suite, tasks, suites = answer
        dimensions = [d for _, _, d in tasks]
        msg = TaskList(suite=suite, instructions=[i for i, _, _ in tasks],
                       init_states=[int(n) for _, n, _ in tasks], suites=list(suites),
                       dimensions=dimensions if any(dimensions) else [])
        msg.header.stamp = self._node.get_clock().now().to_msg()
        self._tasks_pub.publish(msg)
        self._tasks_suite = suite

    def _show_scene(self) -> None:
        """The scene, whenever it has changed (latched: a viewer that comes later gets the
        newest at once)."""
        scene = self._ask("scene", self._driver.scene_objects)
        if scene is None:
            return
        poses = {name: np.r_[position, quat] for name, (position, quat, *_) in scene.items()}
        drawn = self._scene_drawn
        if drawn is not None and drawn.keys() == poses.keys() and all(
                np.max(np.abs(poses[n] - drawn[n])) < SCENE_MOVED_M for n in poses):
            return
        self._scene_drawn = poses
        self._scene_pub.publish(self._scene_markers(scene))

    def _scene_markers(self, scene: dict) -> MarkerArray:
        """Each object a translucent box where it is, with its name above it."""
        stamp, frame = self._node.get_clock().now().to_msg(), self._base_frame
        markers = [wipe(frame, stamp)]
        for i, (name, (position, quat, centre, half)) in enumerate(sorted(scene.items())):
            rotation = quaternion_to_matrix(quat)
            middle = np.asarray(position) + rotation @ np.asarray(centre)
            x, y, z, w = (float(v) for v in quat)
            markers.append(marker(frame, stamp, "scene_objects", i, Marker.CUBE, middle,
                                  Vector3(**{k: max(2.0 * float(v), 0.005)
                                             for k, v in zip("xyz", half)}),
                                  TABLE if name == "table" else OBJECT,
                                  Quaternion(x=x, y=y, z=z, w=w)))
            if name != "table":
                # Above the box's highest corner however the object is turned.
                top = float(np.abs(rotation[2]) @ np.asarray(half))
                markers.append(label(frame, stamp, "scene_labels", i, middle, name,
                                     above=top + 0.02))
        return MarkerArray(markers=markers)

    def _segment(self, request, response):
        cameras = self._description.camera_names
        if request.camera not in cameras:
            response.message = (f"unknown camera '{request.camera}'; cameras: "
                                f"{', '.join(cameras)}")
            return response
        header = Header()
        header.stamp = self._node.get_clock().now().to_msg()
        header.frame_id = self._prefix + optical_frame(request.camera)
        try:
            detections = self._driver.segment(request.camera, request.query)
        except ValueError as err:
            response.message = str(err)
            return response
        fill_segment_response(response, detections, header)
        response.message = (f"{len(detections)} detection(s) of '{request.query}'" if detections
                            else f"nothing in view of {request.camera} matches "
                                 f"'{request.query}'")
        return response

    def _object_poses(self, _request, response):
        stamp = self._node.get_clock().now().to_msg()
        for name, (position, quat) in sorted(self._driver.object_poses().items()):
            pose = PoseStamped()
            pose.header.stamp, pose.header.frame_id = stamp, self._base_frame
            pose_to_msg(position, quat, pose.pose)
            response.names.append(name)
            response.poses.append(pose)
        return response
