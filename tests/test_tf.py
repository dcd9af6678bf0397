"""tf and the robot model of the real arms: the Franka against franky-sim (namespaced) and
the SO-101 against the emulated servo bus (not namespaced), each with a camera on tf.

What a viewer or a perception node relies on: ``robot_description`` is the robot's URDF
naming the joints ``joint_states`` publishes; /tf and /tf_static form one tree from the
base to the end effector and to every camera's optical frame; the end effector on tf is
where ``ee_pose`` says, and so is the model's link chain up to it; a namespaced robot's
frames carry its prefix.
"""
from __future__ import annotations

import contextlib
import threading
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pytest
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from tf2_msgs.msg import TFMessage

from rpent_common.processes import wait_until
from rpent_contract.description import RobotModel
from rpent_contract.geometry import matrix_to_quaternion, quaternion_to_matrix, rotation_angle
from rpent_contract.qos import IMAGE_QOS, LATCHED_QOS, STATE_QOS, TF_QOS, TF_STATIC_QOS
from rpent_testkit.processes import NodeProcess

CONFIG = Path(__file__).resolve().parents[1] / "config"
# A camera's calibration as ROS camera_calibration writes it (96 x 72 px).
CALIBRATION = """image_width: 96
image_height: 72
camera_name: cam
camera_matrix: {rows: 3, cols: 3, data: [80.5, 0.0, 47.0, 0.0, 81.5, 35.0, 0.0, 0.0, 1.0]}
distortion_model: plumb_bob
distortion_coefficients: {rows: 1, cols: 5, data: [-0.12, 0.05, 0.001, -0.002, 0.0]}
rectification_matrix: {rows: 3, cols: 3, data: [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]}
projection_matrix: {rows: 3, cols: 4,
                    data: [76.0, 0.0, 46.5, 0.0, 0.0, 78.0, 35.5, 0.0, 0.0, 0.0, 1.0, 0.0]}
"""
# Franka: a wrist camera on the hand, looking along the hand's z axis.
WRIST = "fr3_hand 0.05 0.0 0.04 0.0 0.0 0.7071068 0.7071068"
# SO-101: a scene camera fixed in front of the robot, looking back at it.
SCENE = "base_link 0.6 0.0 0.3 0.5 -0.5 0.5 -0.5"

# The emulated SO-101 bus answers its start-up ping within LeRobot's packet timeout only
# on an otherwise idle machine: run alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial]


def _ns(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def _matrix(position, orientation) -> np.ndarray:
    m = np.eye(4)
    m[:3, :3], m[:3, 3] = quaternion_to_matrix(orientation), position
    return m


def _tf_matrix(tf) -> np.ndarray:
    t, r = tf.transform.translation, tf.transform.rotation
    return _matrix([t.x, t.y, t.z], [r.x, r.y, r.z, r.w])


def _chain(tree: dict, target: str, source: str):
    """Pose of ``source`` in ``target`` through ``tree`` (child -> (parent, 4x4)), or None
    when ``target`` is not above ``source``."""
    m, frame = np.eye(4), source
    for _ in range(64):
        if frame == target:
            return m
        if frame not in tree:
            return None
        parent, local = tree[frame]
        m, frame = local @ m, parent
    return None


@dataclass
class Listener:
    """What a viewer of one robot receives: tf, its description, state and images."""
    statics: dict = field(default_factory=dict)  # child -> (parent, 4x4)
    dynamic: list = field(default_factory=list)  # TFMessages from /tf
    poses: dict = field(default_factory=dict)  # stamp ns -> PoseStamped (ee_pose)
    joints: list = field(default_factory=list)
    images: dict = field(default_factory=dict)  # camera -> newest Image
    description: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def subscribe(self, node, cameras) -> None:
        node.create_subscription(TFMessage, "/tf", self._on_tf, TF_QOS)
        node.create_subscription(TFMessage, "/tf_static", self._on_static, TF_STATIC_QOS)
        node.create_subscription(String, "robot_description", self.description.append,
                                 LATCHED_QOS)
        node.create_subscription(PoseStamped, "ee_pose", self._on_pose, STATE_QOS)
        node.create_subscription(JointState, "joint_states", self.joints.append, STATE_QOS)
        for cam in cameras:
            node.create_subscription(Image, f"camera/{cam}/image_raw",
                                     lambda m, c=cam: self.images.__setitem__(c, m), IMAGE_QOS)

    def _on_tf(self, msg) -> None:
        with self.lock:
            self.dynamic.append(msg)

    def _on_static(self, msg) -> None:
        with self.lock:
            for tf in msg.transforms:
                self.statics[tf.child_frame_id] = (tf.header.frame_id, _tf_matrix(tf))

    def _on_pose(self, msg) -> None:
        with self.lock:
            self.poses[_ns(msg.header.stamp)] = msg

    def tree(self, msg: TFMessage) -> dict:
        """The static frames and one /tf message's frames (one measurement)."""
        with self.lock:
            tree = dict(self.statics)
        tree.update({tf.child_frame_id: (tf.header.frame_id, _tf_matrix(tf))
                     for tf in msg.transforms})
        return tree

    def measurement(self):
        """(tree, ee_pose) of the newest /tf message whose ee_pose has arrived, or None."""
        with self.lock:
            for msg in reversed(self.dynamic):
                pose = self.poses.get(_ns(msg.transforms[0].header.stamp))
                if pose is not None:
                    break
            else:
                return None
        return self.tree(msg), pose


@dataclass
class Robot:
    client: object
    info: object
    listener: Listener
    prefix: str
    base_link: str
    ee_link: str
    cameras: tuple
    bus: object  # the SO-101's emulated servo bus; None for the others


def _video(path: Path) -> str:
    import cv2

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 20.0, (96, 72))
    for i in range(10):
        img = np.zeros((72, 96, 3), np.uint8)
        img[:, i * 8:i * 8 + 16] = (40, 180, 250)
        writer.write(img)
    writer.release()
    return str(path)


ARMS = pytest.mark.parametrize("robot", ["franka", "so101"], indirect=True)


@pytest.fixture(scope="module", params=["franka", "so101", "libero"])
def robot(request, rclpy_context, tmp_path_factory):
    from rpent_contract.client import RobotClient

    tmp = tmp_path_factory.mktemp(f"tf_{request.param}")
    (tmp / "calibration.yaml").write_text(CALIBRATION)
    camera = {"camera_sources": [_video(tmp / "camera.avi")], "camera_width": 96,
              "camera_height": 72, "camera_calibration_files": [str(tmp / "calibration.yaml")],
              "external_cameras": ["ext"]}
    with contextlib.ExitStack() as stack:
        if request.param == "franka":
            from rpent_twins.franky_sim import SIM_PARAMETERS, FrankySimProcess

            sim = FrankySimProcess(tmp).start()
            stack.callback(sim.stop)
            node = NodeProcess("rpent_hw", "franka_node",
                               {**SIM_PARAMETERS, "robot_ip": sim.host, "cameras": ["wrist"],
                                "camera_extrinsics": [WRIST], **camera},
                               tmp, namespace="arm1", name="tf_franka",
                               params_file=str(CONFIG / "franka.yaml"))
            spec = ("arm1", "arm1/", "fr3_link0", "fr3_hand_tcp", ("wrist",), None)
        elif request.param == "libero":
            node = NodeProcess("rpent_env_sim", "libero_node",
                               {"suite": "libero_object", "image_height": 64,
                                "image_width": 64, "cameras": ["agentview",
                                                               "robot0_eye_in_hand"]},
                               tmp, namespace="sim1", name="tf_libero")
            spec = ("sim1", "sim1/", "base_link", "ee_link",
                    ("agentview", "robot0_eye_in_hand"), None)
        else:
            from rpent_twins.feetech_emulator import (FeetechBusProcess, so101_calibration,
                                                   write_calibration_file)

            calibration = so101_calibration()
            write_calibration_file(tmp, "tf_arm", calibration)
            bus = FeetechBusProcess(calibration, {"shoulder_lift": -30.0, "elbow_flex": 30.0,
                                                  "wrist_flex": 60.0})
            stack.callback(bus.stop)
            node = NodeProcess("rpent_hw", "so101_node",
                               {"port": bus.port, "calibration_dir": str(tmp),
                                "robot_id": "tf_arm", "cameras": ["scene"],
                                "camera_extrinsics": [SCENE], **camera},
                               tmp, name="tf_so101", params_file=str(CONFIG / "so101.yaml"))
            spec = ("", "", "base_link", "gripper_frame_link", ("scene",), bus)
        stack.callback(node.stop)
        namespace, prefix, base_link, ee_link, cameras, bus = spec
        client = RobotClient(namespace=namespace)
        stack.callback(client.close)
        try:
            info = client.wait_ready(60)
        except Exception:
            pytest.fail(f"{request.param} node did not come up:\n{node.log_tail()}")
        listener = Listener()
        listener.subscribe(client.node, cameras)
        wait_until(lambda: listener.description and listener.joints and listener.measurement()
                   and len(listener.images) == len(cameras), 30,
                   what="robot_description, joint_states, ee_pose with its /tf, and images")
        yield Robot(client, info, listener, prefix, base_link, ee_link, cameras, bus)
        assert node.alive(), node.log_tail()


def test_robot_description_is_a_urdf_naming_the_published_joints(robot):
    root = ET.fromstring(robot.listener.description[-1].data)
    assert root.tag == "robot"
    moving = {j.get("name") for j in root.iter("joint") if j.get("type") != "fixed"}
    published = set(robot.listener.joints[-1].name)
    assert published and published <= moving, published - moving
    assert set(robot.info.joint_names) == published
    # Meshes as file:// URIs, so a viewer on this machine draws the arm.
    meshes = [m.get("filename") for m in root.iter("mesh")]
    assert meshes and all(m.startswith("file://") and Path(unquote(m[len("file://"):])).is_file()
                          for m in meshes), meshes


def test_tf_connects_the_base_to_the_end_effector_and_every_camera(robot):
    tree, _ = robot.listener.measurement()
    base = robot.info.base_frame
    assert _chain(tree, base, robot.info.ee_frame) is not None
    for cam in robot.cameras:
        frame = robot.listener.images[cam].header.frame_id
        assert frame == f"{robot.prefix}{cam}_optical_frame"
        assert _chain(tree, base, frame) is not None, f"no tf chain from {frame} to {base}"
    # Every link of the model hangs in the same tree, so a viewer can place every mesh.
    model = RobotModel(robot.listener.description[-1].data)
    root = robot.prefix + next(link for link in model.links
                               if all(j.child != link for j in model.joints))
    for link in model.links:
        assert _chain(tree, root, robot.prefix + link) is not None, f"link {link} is not on tf"
    assert _chain(tree, root, base) is not None


def test_end_effector_on_tf_is_where_ee_pose_says(robot):
    tree, pose = robot.listener.measurement()
    base = robot.info.base_frame
    assert pose.header.frame_id == base
    p, q = pose.pose.position, pose.pose.orientation
    measured = _matrix([p.x, p.y, p.z], [q.x, q.y, q.z, q.w])
    on_tf = _chain(tree, base, robot.info.ee_frame)
    assert np.linalg.norm(on_tf[:3, 3] - measured[:3, 3]) < 1e-3
    assert rotation_angle(matrix_to_quaternion(on_tf[:3, :3]),
                          matrix_to_quaternion(measured[:3, :3])) < 1e-3
    # The model's links, at the published joint positions, lead to the same place: the
    # link above the end effector plus the model's offset to it.
    model = RobotModel(robot.listener.description[-1].data)
    joint = next(j for j in model.joints if j.child == robot.ee_link)
    above = _chain(tree, base, robot.prefix + joint.parent)
    via_links = above @ model.pose(joint.parent, robot.ee_link, {})
    assert np.linalg.norm(via_links[:3, 3] - measured[:3, 3]) < 1e-3


def test_frames_carry_the_robot_prefix(robot):
    info, listener = robot.info, robot.listener
    assert info.base_frame == robot.prefix + robot.base_link
    assert info.ee_frame == robot.prefix + robot.ee_link
    tree, pose = listener.measurement()
    model = RobotModel(listener.description[-1].data)
    ours = {robot.prefix + link for link in model.links} | {info.ee_frame} | {
        f"{robot.prefix}{cam}_optical_frame" for cam in robot.cameras}
    if info.simulated:  # a simulator puts its base in its world, where its datasets are
        ours.add(robot.prefix + "world")
        assert listener.statics[info.base_frame][0] == robot.prefix + "world"
    frames = set(tree) | {parent for parent, _ in tree.values()}
    assert frames <= ours, frames - ours
    assert pose.header.frame_id == info.base_frame


# The Franka losing its connection is tested in test_franka.py.
@pytest.mark.parametrize("robot", ["so101"], indirect=True)
def test_a_silent_arm_stops_at_its_last_measurement(robot):
    """Servos that stop answering: robot_state says so, stamped with the last reading, and
    nothing (joint_states, tf) is published as newer than that reading."""
    from rpent_interfaces.msg import RobotState

    listener, states = robot.listener, []
    sub = robot.client.node.create_subscription(RobotState, "robot_state", states.append,
                                                STATE_QOS)
    wait_until(lambda: states, 10, what="robot_state")
    robot.bus.silence()
    try:
        first = wait_until(lambda: next((m for m in list(states)
                                         if m.mode == RobotState.MODE_ERROR), None), 5,
                           what="robot_state reporting the silent servos")
        last_measured = _ns(first.header.stamp)
        seen = len(states)
        # Past state_timeout: joint_states and tf have stopped, robot_state goes on.
        wait_until(lambda: len(states) >= seen + 30, 10, what="a second of robot_state")
        after = list(states)[seen:]
        assert all(_ns(m.header.stamp) == last_measured and m.mode == RobotState.MODE_ERROR
                   for m in after)
        assert any("no new state from the robot" in e for e in after[-1].errors), \
            after[-1].errors
        assert max(_ns(m.header.stamp) for m in list(listener.joints)) <= last_measured
        with listener.lock:
            assert max(_ns(m.transforms[0].header.stamp) for m in listener.dynamic) \
                <= last_measured
    finally:
        robot.bus.restore()
    wait_until(lambda: _ns(listener.joints[-1].header.stamp) > last_measured, 10,
               what="joint_states again once the servos answer")
    robot.client.node.destroy_subscription(sub)


@pytest.mark.parametrize("parameters,expected", [
    ({"base_frame": "table"}, "base_frame 'table' is not a link of"),
    ({"robot_description_file": "/nonexistent/arm.urdf"}, "cannot read the robot description"),
    ({"cameras": ["scene"], "camera_sources": ["/dev/null"],
      "camera_extrinsics": ["base_link 0.6 0.0 0.3"]}, "write '<mount frame> x y z qx qy qz qw'"),
    ({"cameras": ["scene"], "camera_sources": ["/dev/null"],
      "camera_calibration_files": ["CALIBRATION"]}, "is for 96x72 images, the camera is "
                                                    "captured at 640x480"),
])
def test_a_model_or_camera_mount_that_does_not_fit_stops_the_node(tmp_path, parameters,
                                                                  expected):
    # Checked before the node opens its port: no servo bus needed.
    (tmp_path / "calibration.yaml").write_text(CALIBRATION)
    parameters = {k: [str(tmp_path / "calibration.yaml") if v == "CALIBRATION" else v
                      for v in value] if isinstance(value, list) else value
                  for k, value in parameters.items()}
    node = NodeProcess("rpent_hw", "so101_node", {"port": "/nonexistent/tty", **parameters},
                       tmp_path, name="tf_misfit", params_file=str(CONFIG / "so101.yaml"))
    try:
        node.proc.wait(60)
    finally:
        code = node.stop()
    log = node.log_path.read_text()
    assert code == 2 and expected in log, log


@ARMS
def test_camera_info_comes_from_the_calibration_file(robot):
    from sensor_msgs.msg import CameraInfo

    from rpent_contract.client import next_message

    info = next_message(robot.client.node, CameraInfo,
                        f"camera/{robot.cameras[0]}/camera_info", IMAGE_QOS, 10)
    assert (info.width, info.height) == (96, 72)
    np.testing.assert_allclose(info.k, [80.5, 0.0, 47.0, 0.0, 81.5, 35.0, 0.0, 0.0, 1.0])
    # The images are raw: their distortion and the rectified projection go with them, so
    # image_proc can rectify them.
    assert info.distortion_model == "plumb_bob"
    np.testing.assert_allclose(info.d, [-0.12, 0.05, 0.001, -0.002, 0.0])
    np.testing.assert_allclose(info.r, np.eye(3).ravel())
    np.testing.assert_allclose(info.p, [76.0, 0.0, 46.5, 0.0, 0.0, 78.0, 35.5, 0.0, 0.0, 0.0,
                                        1.0, 0.0])


@ARMS
def test_a_best_effort_camera_driver_remapped_in_reaches_the_agent(robot):
    """A camera another driver publishes (best effort, as camera drivers do) is named by
    the robot and seen by the agent's observer."""
    from rclpy.qos import qos_profile_sensor_data

    from rpent_agent.observer import RobotObserver
    from rpent_contract.images import numpy_to_image

    assert list(robot.info.camera_names) == [*robot.cameras, "ext"]
    node = robot.client.node
    publisher = node.create_publisher(Image, "camera/ext/image_raw", qos_profile_sensor_data)
    observer = RobotObserver(node, robot.info.camera_names)
    frame = np.zeros((24, 32, 3), np.uint8)
    frame[:, :8] = (200, 10, 10)
    try:
        def seen():
            publisher.publish(numpy_to_image(frame, "rgb8"))
            return "ext" in observer.frames()
        wait_until(seen, 10, interval=0.1, what="the external camera's frame")
        np.testing.assert_array_equal(observer.frames()["ext"], frame)
    finally:
        node.destroy_publisher(publisher)
