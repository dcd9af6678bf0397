"""What only a simulator can answer: ``sim/get_object_poses`` (where every object is) and
``sim/segment`` (masks from the renderer's segmentation). A driver lists the ones it has in
``RobotDescription.sim_services``; a real robot has neither."""
from __future__ import annotations

from geometry_msgs.msg import PoseStamped
from rclpy.callback_groups import ReentrantCallbackGroup
from std_msgs.msg import Header

from rpent_interfaces.srv import GetObjectPoses, Segment

from .driver import RobotDescription, RobotDriver
from .geometry import pose_to_msg
from .names import OBJECT_POSES_SERVICE, SEGMENT_SERVICE, optical_frame
from .perception import fill_segment_response
from .serving import service


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
