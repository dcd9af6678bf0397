"""The perception node's tf lookups place a camera where it was when its image was taken."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from geometry_msgs.msg import TransformStamped
from tf2_msgs.msg import TFMessage

from rpent_perception.perception_node import TfTree


def tf(stamp_ns: int, parent: str, child: str, x: float) -> TFMessage:
    t = TransformStamped()
    t.header.stamp.sec, t.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
    t.header.frame_id, t.child_frame_id = parent, child
    t.transform.translation.x = x
    t.transform.rotation.w = 1.0
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
