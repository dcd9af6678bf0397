"""Replay republishes a bag on its topics with its types, QoS and (scaled) pace; a camera
topic exports to a playable MP4 at the recorded frame rate."""
from __future__ import annotations

import subprocess
import time

import cv2
import numpy as np
import pytest
from rclpy.serialization import serialize_message

from rpent_bag.recorder import BagRecorder
from rpent_common.processes import node_executable
from rpent_contract.images import numpy_to_image
from rpent_contract.qos import LATCHED_QOS


def _write_bag(path, seconds=2.0, hz=20):
    """A small run: joint_states and a camera at ``hz``, agent events, a latched task_status."""
    from rpent_interfaces.msg import AgentEvent, TaskStatus
    from sensor_msgs.msg import JointState

    from rosbags.interfaces import (Qos, QosDurability, QosHistory, QosLiveliness,
                                    QosReliability, QosTime)

    inf = QosTime(2147483647, 4294967295)
    def qos(durability):
        return [Qos(QosHistory.KEEP_LAST, 10, QosReliability.RELIABLE, durability, inf, inf,
                    QosLiveliness.AUTOMATIC, inf, False)]
    rec = BagRecorder(path)
    rec.add_topic("/joint_states", "sensor_msgs/msg/JointState", qos(QosDurability.VOLATILE))
    rec.add_topic("/camera/agentview/image_raw", "sensor_msgs/msg/Image", qos(QosDurability.VOLATILE))
    rec.add_topic("/agent/events", "rpent_interfaces/msg/AgentEvent", qos(QosDurability.VOLATILE))
    rec.add_topic("/task_status", "rpent_interfaces/msg/TaskStatus", qos(QosDurability.TRANSIENT_LOCAL))
    t0, n = 1_700_000_000 * 10**9, int(seconds * hz)
    rec.write("/task_status", t0, serialize_message(TaskStatus(instruction="pick up the soup")))
    for i in range(n):
        t = t0 + i * 10**9 // hz
        rec.write("/joint_states", t, serialize_message(JointState(name=["j1"], position=[i * 0.01])))
        frame = np.zeros((64, 96, 3), np.uint8)
        frame[20:40, i * 4 % 80:(i * 4 % 80) + 16] = (255, 64, 0)   # a moving block
        rec.write("/camera/agentview/image_raw", t, serialize_message(numpy_to_image(frame)))
        if i % 10 == 0:
            rec.write("/agent/events", t, serialize_message(AgentEvent(turn=i, text=f"step {i}")))
    stats = rec.close()
    assert stats.dropped == 0 and not stats.errors
    return n


@pytest.mark.slow
@pytest.mark.serial  # the measured pace within 30 %
@pytest.mark.parametrize("rate", [1.0, 2.0])
def test_replay_republishes_types_counts_and_pace(rclpy_context, tmp_path, rate):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rpent_interfaces.msg import AgentEvent, TaskStatus
    from sensor_msgs.msg import Image, JointState

    n = _write_bag(tmp_path / "bag")
    node = rclpy.create_node(f"replay_probe_{int(rate)}")
    got = {"js": [], "img": [], "ev": [], "task": []}
    node.create_subscription(JointState, "joint_states", lambda m: got["js"].append(time.monotonic()), 50)
    node.create_subscription(Image, "camera/agentview/image_raw", lambda m: got["img"].append(m), 50)
    node.create_subscription(AgentEvent, "agent/events", lambda m: got["ev"].append(m), 50)
    node.create_subscription(TaskStatus, "task_status", lambda m: got["task"].append(m), LATCHED_QOS)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    proc = subprocess.Popen([node_executable("rpent_bag", "replay"), str(tmp_path / "bag"),
                             "--rate", str(rate), "--start-delay", "30", "--subscribers", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.01)
        for _ in range(50):
            executor.spin_once(timeout_sec=0.01)
        out = proc.communicate(timeout=10)[0]
        assert proc.returncode == 0, out
    finally:
        if proc.poll() is None:
            proc.kill()
        node.destroy_node()
    assert len(got["js"]) == n and len(got["img"]) == n and len(got["ev"]) == n // 10, out
    assert got["task"][-1].instruction == "pick up the soup"
    assert got["img"][0].width == 96 and got["img"][0].encoding == "rgb8"
    measured = (len(got["js"]) - 1) / (got["js"][-1] - got["js"][0])
    assert 0.7 * 20 * rate < measured < 1.3 * 20 * rate, f"{measured:.1f} Hz at rate {rate}"


def test_replay_refuses_what_is_not_a_bag(tmp_path):
    proc = subprocess.run([node_executable("rpent_bag", "replay"), str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not a rosbag2 directory" in proc.stderr


def test_export_camera_topic_to_mp4(tmp_path):
    n = _write_bag(tmp_path / "bag")
    out = tmp_path / "agentview.mp4"
    proc = subprocess.run([node_executable("rpent_bag", "export_video"), str(tmp_path / "bag"),
                           "--topic", "/camera/agentview/image_raw", "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    cap = cv2.VideoCapture(str(out))
    try:
        # H.264, what browsers play (OpenCV's own writer could only do MPEG-4 Part 2, 'FMP4').
        assert int(cap.get(cv2.CAP_PROP_FOURCC)).to_bytes(4, "little") == b"h264"
        assert cap.get(cv2.CAP_PROP_FPS) == pytest.approx(20, rel=0.01)
        frames = []
        while (ok := cap.read())[0]:
            frames.append(ok[1])
    finally:
        cap.release()
    assert len(frames) == n and frames[0].shape == (64, 96, 3)
    # The block moved: first and fifth frame differ where it was; colour survives (BGR).
    assert np.abs(frames[0].astype(int) - frames[4].astype(int)).mean() > 2
    assert frames[0][30, 8, 0] < 80 and frames[0][30, 8, 2] > 180

    bad = subprocess.run([node_executable("rpent_bag", "export_video"), str(tmp_path / "bag"),
                          "--topic", "/joint_states", "-o", str(tmp_path / "x.mp4")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "pick a camera topic" in bad.stderr
