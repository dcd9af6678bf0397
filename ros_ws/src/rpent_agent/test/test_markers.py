"""The agent's 3D markers as a viewer reads them: each message is the whole scene, wiped
first, in the robot's base frame."""
import math

import numpy as np
from builtin_interfaces.msg import Time
from visualization_msgs.msg import Marker

from rpent_agent.markers import SceneMarkers
from rpent_contract.perception import LocatedObject

STAMP = Time(sec=12, nanosec=5)


def _drawn(array):
    """(namespace, type, position, text) of every marker after the leading wipe."""
    wipe, *rest = array.markers
    assert wipe.action == Marker.DELETEALL
    return [(m.ns, m.type, (m.pose.position.x, m.pose.position.y, m.pose.position.z), m.text)
            for m in rest]


def _located(label, position, extent):
    return LocatedObject(label=label, score=0.9, position=np.array(position),
                         extent=np.array(extent), camera="agentview", partial=False)


def test_a_move_to_target_is_a_cube_with_the_commanded_orientation_and_a_label():
    scene = SceneMarkers("robot0_base")
    array = scene.update_target(STAMP, {"x": 0.5, "y": -0.1, "z": 0.3,
                                        "rpy": [math.pi, 0.0, 0.0]})
    assert {m.header.frame_id for m in array.markers} == {"robot0_base"}
    assert all(m.header.stamp == STAMP for m in array.markers)
    drawn = _drawn(array)
    assert [(ns, kind) for ns, kind, _, _ in drawn] == [
        ("target", Marker.CUBE), ("target", Marker.TEXT_VIEW_FACING)]
    assert drawn[0][2] == (0.5, -0.1, 0.3) and drawn[1][3] == "move_to"
    q = array.markers[1].pose.orientation
    assert np.allclose([q.x, q.y, q.z, q.w], [1.0, 0.0, 0.0, 0.0], atol=1e-9)
    assert array.markers[2].pose.position.z > 0.3, "the label sits above the target"


def test_arguments_a_robot_would_refuse_draw_nothing_and_keep_the_scene():
    scene = SceneMarkers("base_link")
    scene.update_target(STAMP, {"x": 0.4, "y": 0.0, "z": 0.2})
    for bad in ({"x": float("nan"), "y": 0, "z": 0}, {"x": 0.1, "y": 0.2}, {"x": "a", "y": 0,
                "z": 0}, {"x": 0, "y": 0, "z": 0, "rpy": [0, 0]}, None, [1, 2, 3]):
        assert scene.update_target(STAMP, bad) is None, bad
    (target, _label) = _drawn(scene.update_known(STAMP, {}))
    assert target[2] == (0.4, 0.0, 0.2)


def test_each_message_is_the_whole_scene_and_locates_add_up_until_cleared():
    scene = SceneMarkers("base_link")
    scene.update_target(STAMP, {"x": 0.4, "y": 0.0, "z": 0.2})
    first = scene.update_located(STAMP, [_located("ketchup", [0.5, 0.1, 0.05], [0.04, 0.04, 0.1]),
                                         _located("basket", [0.3, -0.2, 0.0], [0.2, 0.15, 0.0])])
    drawn = _drawn(first)
    assert [ns for ns, *_ in drawn].count("target") == 2
    boxes = [m for m in first.markers if m.ns == "located" and m.type == Marker.CUBE]
    assert [(m.scale.x, m.scale.y, m.scale.z) for m in boxes] == [(0.04, 0.04, 0.1),
                                                                  (0.2, 0.15, 0.01)]
    assert {t for *_, t in drawn if t} == {"move_to", "ketchup 0.90", "basket 0.90"}
    # Found again elsewhere: the newest place; the basket found earlier stays with its label.
    second = _drawn(scene.update_located(STAMP, [_located("ketchup", [0.6, 0.0, 0.05],
                                                          [0.04, 0.04, 0.1])]))
    assert [(p, t) for ns, kind, p, t in second if ns == "located" and t] == [
        ((0.3, -0.2, 0.0 + 0.0 / 2 + 0.04), "basket 0.90"),
        ((0.6, 0.0, 0.05 + 0.1 / 2 + 0.04), "ketchup 0.90")]
    assert _drawn(scene.update_located(STAMP, [])) == second
    assert _drawn(scene.clear(STAMP)) == []


def test_simulator_object_positions_are_labelled_spheres():
    scene = SceneMarkers("base_link")
    array = scene.update_known(STAMP, {"basket_1": ([0.3, -0.2, 0.0], [0, 0, 0, 1]),
                                       "alphabet_soup_1": ([0.5, 0.1, 0.05], [0, 0, 0, 1])})
    drawn = _drawn(array)
    assert [(kind, text) for _, kind, _, text in drawn] == [
        (Marker.SPHERE, ""), (Marker.TEXT_VIEW_FACING, "alphabet_soup_1"),
        (Marker.SPHERE, ""), (Marker.TEXT_VIEW_FACING, "basket_1")]
    ids = [(m.ns, m.id) for m in array.markers[1:]]
    assert len(set(ids)) == len(ids), "ids unique within a namespace, or markers replace others"
