"""The perception node ``perception``: ``~/segment`` and ``~/locate`` for one robot.

    ros2 run rpent_perception perception_node --ros-args -p backend:=sim
    ros2 run rpent_perception perception_node --ros-args -p backend:=sam3_http \
        -p sam3_endpoint:=http://gpu-host:8114

Runs in the robot's namespace. It keeps each camera's newest colour image, aligned depth
image and camera_info, and the robot's tf, and answers:

* ``~/segment`` (rpent_interfaces/Segment): the backend's masks for a text query in one
  camera's newest image;
* ``~/locate`` (rpent_interfaces/Locate): every camera's detections back-projected through
  depth, camera_info and tf into the robot base frame, one point per object (the view that
  sees it whole and best wins);
* ``~/back_project`` (rpent_interfaces/BackProject): the base-frame point one camera sees at
  a pixel of its image.

Backends: ``sim`` (the simulator's own segmentation through ``sim/segment``: ground
truth, for LIBERO) and ``sam3_http`` (the original RPent's SAM3 server, on either of
its transports); ``main(backend=...)`` serves any
other :class:`~rpent_perception.backends.SegmentationBackend`.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np
from geometry_msgs.msg import PointStamped, Vector3
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image
from std_msgs.msg import Header
from tf2_msgs.msg import TFMessage

from rpent_contract import params
from rpent_contract.client import RobotClient
from rpent_contract.geometry import stamp_to_ns
from rpent_contract.images import image_to_numpy, to_rgb
from rpent_contract.names import SEGMENT_SERVICE, camera_topic
from rpent_contract.node_main import run_node
from rpent_contract.perception import fill_segment_response
from rpent_contract.qos import TF_QOS, TF_STATIC_QOS, camera_sub_qos
from rpent_contract.serving import service
from rpent_contract.tf_tree import TfTree
from rpent_interfaces.srv import BackProject, Locate, Segment

from .backends import SegmentationBackend, SegmentationError
from .geometry import Intrinsics, Located, back_project, locate_mask
from .settings import PerceptionSettings

# Detections of one label closer than this (or than half the object's size) are the same
# object seen by two cameras.
SAME_OBJECT_M = 0.05


@dataclass
class View:
    """One camera's newest data, and how many messages of each kind have arrived."""
    rgb: Optional[Image] = None
    depth: Optional[Image] = None
    info: Optional[CameraInfo] = None
    received: dict = field(default_factory=lambda: {"rgb": 0, "depth": 0, "info": 0})


class PerceptionNode(Node):
    def __init__(self, backend: Optional[SegmentationBackend] = None):
        super().__init__("perception")
        self.settings = settings = params.declare_settings(self, PerceptionSettings)
        if backend is None and settings.backend == "sam3_http" and not settings.sam3_endpoint:
            raise params.ParameterError("backend sam3_http needs sam3_endpoint "
                                        "(http://HOST:PORT of the SAM3 server)")
        self.robot = RobotClient(namespace=self.get_namespace(),
                                 node_name="perception_robot_client", actions=())
        try:
            deadline = time.monotonic() + settings.startup_timeout
            self.info = self.robot.wait_ready(settings.startup_timeout)
            self.backend = backend or self._make_backend(settings.backend, deadline)
        except Exception:
            self.robot.close()
            raise
        self.base_frame = self.info.base_frame
        self.tf = TfTree()
        self._views = {name: View() for name in self.info.camera_names}
        self._arrived = threading.Condition()
        # Every callback on its own (they only store, under locks): in one mutually
        # exclusive group a busy stream of images starved /tf, and locate then found no
        # transform as of its image.
        data = ReentrantCallbackGroup()
        for name in self.info.camera_names:
            for kind, msg_type, stream in (("rgb", Image, "image_raw"),
                                           ("depth", Image, "depth/image_raw"),
                                           ("info", CameraInfo, "camera_info")):
                topic = camera_topic(name, stream)
                self.create_subscription(
                    msg_type, topic, lambda msg, n=name, k=kind: self._on_camera(n, k, msg),
                    camera_sub_qos(self, topic), callback_group=data)
        self.create_subscription(TFMessage, "/tf", self.tf.add, TF_QOS, callback_group=data)
        self.create_subscription(TFMessage, "/tf_static", self.tf.add_static, TF_STATIC_QOS,
                                 callback_group=data)
        group = ReentrantCallbackGroup()
        service(self, Segment, "~/segment", self._segment, callback_group=group)
        service(self, Locate, "~/locate", self._locate, callback_group=group)
        service(self, BackProject, "~/back_project", self._back_project, callback_group=group)
        self.get_logger().info(f"perception ready: backend {self.backend.name}, cameras "
                               f"{list(self.info.camera_names)}")

    def _make_backend(self, name: str, deadline: float) -> SegmentationBackend:
        if name == "sim":
            if SEGMENT_SERVICE not in self.info.sim_services:
                raise params.ParameterError(
                    f"backend sim needs a simulated robot serving {SEGMENT_SERVICE}; this "
                    f"robot ({self.info.embodiment}) does not: use backend sam3_http")
            from .backends.sim import SimSegmentation
            return SimSegmentation(
                lambda camera, query: self.robot.segment(camera, query,
                                                         timeout=self.settings.timeout))
        from .backends.sam3_http import Sam3HttpBackend

        # A server started with the robot (a twin's) may come up after this node.
        while True:
            try:
                return Sam3HttpBackend(self.settings.sam3_endpoint,
                                       timeout=self.settings.timeout,
                                       min_score=self.settings.min_score)
            except SegmentationError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    def _on_camera(self, name: str, kind: str, msg) -> None:
        with self._arrived:
            view = self._views[name]
            setattr(view, kind, msg)
            view.received[kind] += 1
            self._arrived.notify_all()

    # --- data ----------------------------------------------------------------------------
    def _fresh_view(self, camera: str, need_depth: bool) -> View:
        """The camera's data as it is after the request came in: images measured no earlier
        than the request, so that a locate asked right after a reset or a motion sees the
        scene after it. Stamps, not arrival counts, tell: on a loaded machine frames taken
        before the request can still be queued here when it comes."""
        if camera not in self._views:
            raise ValueError(f"unknown camera '{camera}'; cameras: "
                             f"{', '.join(self._views)}")
        after = self.get_clock().now().nanoseconds
        kinds = ("rgb", "depth") if need_depth else ("rgb",)
        view = self._views[camera]
        with self._arrived:
            stale = lambda: [k for k in kinds  # noqa: E731
                             if getattr(view, k) is None
                             or stamp_to_ns(getattr(view, k).header.stamp) < after] + \
                ([] if view.info is not None else ["info"])
            self._arrived.wait_for(lambda: not stale(), timeout=self.settings.max_age)
            missing, view = stale(), replace(view, received=dict(view.received))
        if missing:
            names = {"rgb": "image_raw", "info": "camera_info", "depth": "depth/image_raw"}
            raise ValueError(
                f"camera '{camera}' published no new {' / '.join(names[k] for k in missing)} "
                f"within max_age {self.settings.max_age:g} s: "
                + ("locate needs an aligned depth camera (camera/<name>/depth/image_raw)"
                   if missing == ["depth"] and not view.received["depth"]
                   else "the robot or its camera stopped publishing"))
        return view

    # --- services ------------------------------------------------------------------------
    def _segment(self, request, response):
        try:
            view = self._fresh_view(request.camera, need_depth=False)
            detections = self._detect(request.camera, view, request.query)
        except (ValueError, SegmentationError) as err:
            response.message = str(err)
            return response
        fill_segment_response(response, detections, view.rgb.header)
        response.message = _found(detections, request.query, request.camera)
        return response

    def _detect(self, camera: str, view: View, query: str) -> list:
        if not query.strip():
            raise ValueError("the query is empty: say what to find, e.g. 'red mug'")
        rgb = to_rgb(image_to_numpy(view.rgb), view.rgb.encoding)
        return [d for d in self.backend.segment(camera, rgb, query)
                if d.score >= self.settings.min_score]

    def _locate(self, request, response):
        cameras = [request.camera] if request.camera else self._depth_cameras()
        if not cameras:
            response.message = "no camera of this robot publishes a depth image; locate needs one"
            return response
        found, notes = [], []
        for camera in cameras:
            try:
                found += self._locate_in(camera, request.query)
            except (ValueError, LookupError, SegmentationError) as err:
                notes.append(f"{camera}: {err}")
        best = _merge(found)
        header = Header(frame_id=self.base_frame, stamp=self.get_clock().now().to_msg())
        for label, score, camera, located in best:
            point = PointStamped(header=header)
            point.point.x, point.point.y, point.point.z = (float(v) for v in located.center)
            response.points.append(point)
            response.extents.append(Vector3(x=float(located.extent[0]),
                                            y=float(located.extent[1]),
                                            z=float(located.extent[2])))
            response.scores.append(float(score))
            response.labels.append(label)
            response.cameras.append(camera)
            response.partial.append(located.cut_off)
        response.success = bool(best)
        summary = (f"{len(best)} object(s) match '{request.query}'" if best
                   else f"nothing matching '{request.query}' was found in "
                        f"{', '.join(cameras)}: look from elsewhere or rephrase the query")
        response.message = "; ".join([summary, *notes])
        return response

    def _depth_cameras(self) -> list:
        """Cameras that publish depth; right after start-up, the first to do so within
        max_age (none may have sent a frame yet)."""
        with self._arrived:
            self._arrived.wait_for(lambda: any(v.depth is not None
                                               for v in self._views.values()),
                                   timeout=self.settings.max_age)
            return [n for n, v in self._views.items() if v.depth is not None]

    def _locate_in(self, camera: str, query: str) -> list:
        view, depth, *pose = self._depth_view(camera)
        located = []
        for det in self._detect(camera, view, query):
            where = locate_mask(det.mask, depth, *pose)
            if where is not None:
                located.append((det.label, det.score, camera, where))
        return located

    def _depth_view(self, camera: str) -> tuple:
        """(view, depth in m, intrinsics, camera position, orientation in the base frame as
        of the depth image)."""
        view = self._fresh_view(camera, need_depth=True)
        depth = image_to_numpy(view.depth)
        if depth.dtype == np.uint16:  # 16UC1 depth is in millimetres (REP-118)
            depth = depth.astype(np.float32) / 1000.0
        position, orientation = self.tf.lookup(
            self.base_frame, view.depth.header.frame_id or view.rgb.header.frame_id,
            stamp_to_ns(view.depth.header.stamp), self.settings.max_age)
        return view, depth, Intrinsics.from_camera_info(view.info), position, orientation

    def _back_project(self, request, response):
        try:
            view, depth, intrinsics, position, orientation = self._depth_view(request.camera)
            point = back_project(request.u, request.v, depth, intrinsics, position,
                                 orientation)
        except (ValueError, LookupError) as err:
            response.message = f"{request.camera}: {err}"
            return response
        response.point.header = Header(frame_id=self.base_frame, stamp=view.depth.header.stamp)
        response.point.point.x, response.point.point.y, response.point.point.z = \
            (float(c) for c in point)
        response.depth = float(depth[int(round(request.v)), int(round(request.u))])
        response.success = True
        response.message = (f"{request.camera} sees ({request.u:g}, {request.v:g}) at "
                            f"{response.depth:.3f} m")
        return response

    def shutdown(self) -> None:
        self.backend.close()
        self.robot.close()


def _merge(found: list) -> list:
    """One entry per object: of the views of one label within SAME_OBJECT_M, keep the one
    that sees it whole, then the one with the most depth points; best score first."""
    def quality(entry):
        located: Located = entry[3]
        return (not located.cut_off, located.points)

    kept: list = []
    for entry in sorted(found, key=quality, reverse=True):
        if not any(k[0] == entry[0] and np.linalg.norm(k[3].center - entry[3].center)
                   < max(SAME_OBJECT_M, 0.5 * float(k[3].extent.max())) for k in kept):
            kept.append(entry)
    return sorted(kept, key=lambda e: -e[1])


def _found(detections: list, query: str, camera: str) -> str:
    if not detections:
        return f"nothing in {camera}'s view matches '{query}'"
    return f"{len(detections)} detection(s) of '{query}' in {camera}: " + ", ".join(
        f"{d.label} ({d.score:.2f})" for d in detections)


def main(args=None, backend: Optional[SegmentationBackend] = None):
    raise SystemExit(run_node(lambda: PerceptionNode(backend), name="perception", args=args,
                              num_threads=4, close=PerceptionNode.shutdown,
                              startup_errors=(ValueError, TimeoutError, SegmentationError)))


if __name__ == "__main__":
    main()
