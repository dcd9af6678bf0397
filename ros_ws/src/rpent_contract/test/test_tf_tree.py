"""tf lookups: a camera placed where it was when its image was taken (perception), a robot's
base in its world (the model node), poses composed through rotated frames."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from geometry_msgs.msg import TransformStamped
from tf2_msgs.msg import TFMessage

from rpent_contract.tf_tree import TfTree


def tf(stamp_ns: int, parent: str, child: str, x: float, yaw: float = 0.0) -> TFMessage:
    t = TransformStamped()
    t.header.stamp.sec, t.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
    t.header.frame_id, t.child_frame_id = parent, child
    t.transform.translation.x = x
    t.transform.rotation.z, t.transform.rotation.w = np.sin(yaw / 2), np.cos(yaw / 2)
    return TFMessage(transforms=[t])


def test_a_lookup_uses_the_transforms_of_the_images_time_not_the_newest():
    tree = TfTree()
    tree.add_static(tf(0, "hand", "camera", 0.1))
    for i in range(5):  # the hand moves 1 m per tick
        tree.add(tf(1000 + i, "base", "hand", float(i)))
    position, _ = tree.lookup("base", "camera", at_ns=1002, timeout=0.1)
    assert np.allclose(position, [2.1, 0.0, 0.0])


def test_a_lookup_waits_for_the_transform_measured_with_the_image():
    """After a reset the image can arrive before the tf measured with it: the lookup waits
    for that tf rather than placing the camera where it was before."""
    tree = TfTree()
    tree.add(tf(1000, "base", "camera", 0.0))
    late = threading.Timer(0.2, lambda: tree.add(tf(2000, "base", "camera", 5.0)))
    late.start()
    position, _ = tree.lookup("base", "camera", at_ns=2000, timeout=5.0)
    late.join()
    assert np.allclose(position, [5.0, 0.0, 0.0])


def test_a_lookup_without_a_chain_or_a_recent_transform_says_so():
    tree = TfTree()
    tree.add(tf(1000, "base", "camera", 0.0))
    with pytest.raises(LookupError, match="no tf chain from 'camera' up to 'base'"):
        tree.lookup("base", "camera", at_ns=2000, timeout=0.05)
    with pytest.raises(LookupError, match="up to 'world'"):
        tree.lookup("world", "camera", at_ns=1000, timeout=0.05)


def test_poses_compose_through_rotated_frames():
    """world -> base (1 m along x, turned 90 deg about z) -> hand (0.5 m along the base's
    x): the hand is at (1, 0.5) in the world, turned the base's 90 deg plus its own 90."""
    tree = TfTree()
    tree.add_static(tf(0, "world", "base", 1.0, yaw=np.pi / 2))
    tree.add(tf(1000, "base", "hand", 0.5, yaw=np.pi / 2))
    position, orientation = tree.lookup("world", "hand")
    assert np.allclose(position, [1.0, 0.5, 0.0])
    assert np.allclose(np.abs(orientation), [0.0, 0.0, 1.0, 0.0], atol=1e-9)


def test_the_world_above_a_namespaced_base_is_found_once_it_is_published():
    """The model node's case: a robot's latched /tf_static may arrive after its first
    robot_state, so the lookup waits for it; a frame named world in the robot's namespace
    counts, a frame that merely ends in 'world' does not."""
    tree = TfTree()
    tree.add_static(tf(0, "robot1/underworld", "robot1/base_link", 9.0))
    with pytest.raises(LookupError, match="up to 'world'"):
        tree.lookup_above("world", "robot1/base_link", timeout=0.05)
    tree = TfTree()
    late = threading.Timer(0.2, lambda: tree.add_static(tf(0, "robot1/world",
                                                           "robot1/base_link", -0.6)))
    late.start()
    position, _ = tree.lookup_above("world", "robot1/base_link", timeout=5.0)
    late.join()
    assert np.allclose(position, [-0.6, 0.0, 0.0])
