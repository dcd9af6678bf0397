"""The twin's cameras as their drivers publish them, and its SAM3 server.

    ros2 run rpent_twins camera_node --ros-args -p scene:=franka -p twin_port:=8767

A process of its own, as ``realsense2_camera`` is on a bench: it renders each camera of
the twin's scene from the twin's newest physics state (``rendering.SceneRenderer``) and
publishes, per camera ``<name>``, RealSense's topics with its encodings and QoS:

* ``<name>/color/image_raw`` (rgb8) and ``<name>/color/camera_info``;
* ``<name>/aligned_depth_to_color/image_raw`` (16UC1, millimetres, 0 = no measurement) and
  ``<name>/aligned_depth_to_color/camera_info``;

images best effort (the sensor-data QoS), stamped with the time of the state they show,
in frame ``<frame_prefix><name>_optical_frame``, which the robot node places on tf from its
``camera_extrinsics``. The bring-up remaps them onto the robot's ``camera/<name>/...`` and
names the cameras in ``external_cameras``, as a user does with a RealSense.

With ``sam3_port`` set it also serves the original SAM3 server's ``segment`` over HTTP
(``rpent_perception``'s ``sam3_http`` backend is its client) and answers from ground
truth: the pixels of the item the prompt names in the published frame the request
carries. An image it did not publish is refused.
"""
from __future__ import annotations

import os
import queue
import threading
import time

import numpy as np
import rclpy
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo, Image

from rpent_contract import params
from rpent_contract.driver import CameraImage
from rpent_contract.images import numpy_to_image
from rpent_contract.names import optical_frame
from rpent_contract.node_main import run_node
from rpent_contract.robot_node import default_frame_prefix
from rpent_contract.sam3_wire import Sam3Server
from rpent_contract.state_publisher import camera_info

from .rendering import FrameMemory, SceneRenderer, depth_to_millimetres, matching_items
from .scene import SceneError, load_scene
from .settings import CameraSettings
from .twin_port import TwinPortError, wait_for_twin

# How much lower the render thread's CPU priority is than the rest of the bench's.
RENDER_NICENESS = 5
# A ground-truth mask is certain; a real SAM3 scores below 1.
GROUND_TRUTH_SCORE = 0.99


class TwinCameraNode(Node):
    def __init__(self):
        super().__init__("twin_cameras")
        settings = params.declare_settings(
            self, CameraSettings,
            defaults={"frame_prefix": default_frame_prefix(self.get_namespace())})
        self.rate, self.exposure = settings.rate, settings.exposure
        self.depth_range, self.prefix = settings.depth_max, settings.frame_prefix
        try:
            self.scene = load_scene(settings.scene)
        except SceneError as err:
            raise params.ParameterError(f"scene: {err}") from None
        self.twin = wait_for_twin(settings.twin_host, settings.twin_port,
                                  settings.startup_timeout)
        self._xml = self.twin.call("model")["xml"]
        self._size = (settings.width, settings.height)
        self.memory = FrameMemory()
        # An EGL context works only in the thread that made it: the renderer lives in the
        # render thread, which also serves the SAM3 server's segmentations.
        self._segmentations: "queue.Queue" = queue.Queue()
        self._ready = threading.Event()
        self.renderer = None
        self._pubs = {}
        for cam in self.scene.cameras:
            n = cam.name
            self._pubs[n] = (
                self.create_publisher(Image, f"{n}/color/image_raw", qos_profile_sensor_data),
                self.create_publisher(CameraInfo, f"{n}/color/camera_info", 10),
                self.create_publisher(Image, f"{n}/aligned_depth_to_color/image_raw",
                                      qos_profile_sensor_data),
                self.create_publisher(CameraInfo, f"{n}/aligned_depth_to_color/camera_info",
                                      10))
        self.sam3 = None
        sam3_port = settings.sam3_port
        if sam3_port:
            self.sam3 = Sam3Server(self._segment, port=sam3_port).start()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="twin-cameras", daemon=True)
        self._thread.start()
        self._ready.wait(60.0)
        if self.renderer is None:
            self.shutdown()
            raise ValueError("the cameras' renderer did not start (its error is above); check "
                             "MUJOCO_GL (egl or osmesa)")
        self.get_logger().info(
            f"twin cameras {[c.name for c in self.scene.cameras]} at {self.rate:g} Hz, "
            f"{settings.width}x{settings.height}, from the twin on "
            f"{settings.twin_host}:{settings.twin_port}"
            + (f"; SAM3 (ground truth) on http://127.0.0.1:{sam3_port}" if sam3_port else ""))

    def _run(self) -> None:
        # A real camera's work is not on the robot's computer; here rendering shares the CPU
        # with the physics and the robot's bus, so it yields to them (Linux: per thread).
        os.nice(RENDER_NICENESS)
        try:
            self.renderer = SceneRenderer(self._xml, self.scene, *self._size)
        finally:
            self._ready.set()
        try:
            self._render_loop()
        finally:
            self.renderer.close()

    def _render_loop(self) -> None:
        period = 1.0 / self.rate
        next_frame = time.monotonic()
        while not self._stop.is_set():
            try:
                qpos, camera, done, out = self._segmentations.get(
                    timeout=max(0.0, next_frame - time.monotonic()))
            except queue.Empty:
                pass
            else:
                self.renderer.set_state(qpos)
                out.append(self.renderer.item_masks(camera))
                done.set()
                continue
            next_frame = max(next_frame + period, time.monotonic())
            try:
                self._publish_frames()
            except TwinPortError as err:
                self.get_logger().error(f"{err}; retrying", throttle_duration_sec=5.0)
            except _rclpy.RCLError:
                if rclpy.ok():
                    raise
                return  # Ctrl-C shut ROS down before the node's clean-up stopped us

    def _publish_frames(self) -> None:
        state = self.twin.call("state")
        # The frames show the physics as of now: the state is at most a few ms old.
        stamp = self.get_clock().now().to_msg()
        qpos = np.asarray(state["qpos"])
        self.renderer.set_state(qpos)
        for cam in self.scene.cameras:
            rgb = self.renderer.colour(cam.name, self.exposure)
            depth = depth_to_millimetres(self.renderer.depth(cam.name), self.depth_range)
            self.memory.remember(rgb, cam.name, qpos)
            colour_pub, colour_info_pub, depth_pub, depth_info_pub = self._pubs[cam.name]
            img = numpy_to_image(rgb, "rgb8")
            img.header.stamp = stamp
            img.header.frame_id = self.prefix + optical_frame(cam.name)
            dimg = numpy_to_image(depth, "16UC1")
            dimg.header = img.header
            intr = self.renderer.intrinsics[cam.name]
            info = camera_info(CameraImage(rgb, intr.fx, intr.fy, intr.cx, intr.cy), img.header)
            colour_pub.publish(img)
            colour_info_pub.publish(info)
            depth_pub.publish(dimg)
            depth_info_pub.publish(info)

    def _segment(self, image: np.ndarray, text: str) -> list:
        seen = self.memory.recall(image)
        if seen is None:
            raise ValueError("this SAM3 server is the twin's ground truth: it segments only "
                             "frames its cameras published (send one of them unchanged)")
        camera, qpos = seen
        names = matching_items(self.scene, text)
        if not names:
            return []
        done, out = threading.Event(), []
        self._segmentations.put((qpos, camera, done, out))
        if not done.wait(10.0):
            raise ValueError("the twin's renderer did not segment the frame within 10 s")
        masks = out[0]
        return [(masks[n], GROUND_TRUTH_SCORE) for n in names if n in masks]

    def shutdown(self) -> None:
        self._stop.set()
        self._thread.join(5.0)
        if self.sam3 is not None:
            self.sam3.close()
        self.twin.close()


def main(args=None):
    raise SystemExit(run_node(TwinCameraNode, name="twin_cameras", args=args, num_threads=1,
                              close=TwinCameraNode.shutdown,
                              startup_errors=(ValueError, TwinPortError)))


if __name__ == "__main__":
    main()
