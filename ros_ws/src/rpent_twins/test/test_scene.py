"""The twins' tabletop scenes without ROS: placement from a seed, success checks on the
physics, the scene files' errors, the twin port, and what the cameras render."""
from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from rpent_twins.scene import CLEARANCE, SceneError, SceneState, add_to_mjcf, load_scene

mujoco = pytest.importorskip("mujoco")


def tabletop(arm_or_file: str):
    """A scene on a bare table (no arm; the hand a free-standing body): scene, model,
    data, scene state, MJCF."""
    import xml.etree.ElementTree as ET

    scene = load_scene(arm_or_file)
    root = ET.Element("mujoco")
    ET.SubElement(root, "option", timestep="0.002")
    worldbody = ET.SubElement(root, "worldbody")
    hand = ET.SubElement(worldbody, "body", name="hand", pos="0.3 0 0.5")
    add_to_mjcf(scene, worldbody, hand, {"friction": "1.5 0.02 0.0002", "condim": "4"})
    xml = ET.tostring(root, encoding="unicode")
    model = mujoco.MjModel.from_xml_string(xml)
    data = mujoco.MjData(model)
    return scene, model, data, SceneState(scene, model, data), xml


def settle(model, data, seconds: float = 1.0) -> None:
    mujoco.mj_step(model, data, nstep=int(seconds / model.opt.timestep))


@pytest.mark.parametrize("arm", ["franka", "so101"])
def test_a_seed_places_every_item_in_its_ranges_apart_and_the_same_way_each_time(arm):
    scene, model, data, items, _ = tabletop(arm)
    first = items.place(7)
    again = items.place(7)
    other = items.place(8)
    for name in first:
        np.testing.assert_array_equal(first[name][0], again[name][0])
    assert any(np.linalg.norm(first[n][0] - other[n][0]) > 1e-3 for n in first)
    for seed in range(40):
        poses = items.place(seed)
        for item in scene.items:
            x, y, z = poses[item.name][0]
            assert item.x[0] <= x <= item.x[1] and item.y[0] <= y <= item.y[1], (seed, item)
            assert z == pytest.approx(scene.table_top + item.origin_height)
        for a, b in itertools.combinations(scene.items, 2):
            gap = np.linalg.norm(poses[a.name][0][:2] - poses[b.name][0][:2])
            assert gap > a.footprint + b.footprint + CLEARANCE - 1e-9, (seed, a.name, b.name)
    # Placed at rest on the table: a second of physics moves nothing.
    before = items.place(3)
    settle(model, data)
    for name, (position, _) in items.poses().items():
        assert np.linalg.norm(position - before[name][0]) < 0.003, name


def _put(items, name, position, yaw=0.0):
    a = items._qpos[name]
    items.data.qpos[a:a + 3] = position
    items.data.qpos[a + 3:a + 7] = [math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)]
    items.data.qvel[items._qvel[name]:items._qvel[name] + 6] = 0


def test_the_success_check_follows_where_the_physics_leaves_the_items():
    scene, model, data, items, _ = tabletop("franka")
    poses = items.place(0)
    task = scene.task("cube_in_bowl")
    achieved, why = items.judge(task)
    assert not achieved and "red cube" in why and "from the bowl's centre" in why
    bowl = poses["bowl"][0]
    # Dropped into the bowl from above: it falls, lands inside, and then counts.
    _put(items, "red_cube", bowl + [0.0, 0.0, 0.12])
    mujoco.mj_forward(model, data)
    assert not items.judge(task)[0]  # in the air above it
    settle(model, data)
    achieved, why = items.judge(task)
    assert achieved, why
    # On the plate, and one task of two objects needs both.
    plate = poses["plate"][0]
    _put(items, "green_cylinder", plate + [0.0, 0.0, 0.06])
    settle(model, data)
    assert items.judge(scene.task("cylinder_on_plate"))[0]
    both = scene.task("cube_and_cylinder_in_bowl")
    achieved, why = items.judge(both)
    assert not achieved and "the red cube is in the bowl" in why, why
    # Relational: beside the bowl on its left (+y, seen from the robot), not on its right.
    _put(items, "blue_bar", bowl + [0.0, 0.15, 0.02])
    settle(model, data)
    assert items.judge(scene.task("bar_left_of_bowl"))[0]
    _put(items, "blue_bar", bowl + [0.0, -0.15, 0.02])
    settle(model, data)
    assert not items.judge(scene.task("bar_left_of_bowl"))[0]


@pytest.mark.parametrize("edit,expected", [
    (lambda t: t.replace('["on", green_cylinder, plate]', '[on, green_cylinder, plate]'),
     "YAML reads a bare on as true"),
    (lambda t: t.replace('["in", red_cube, bowl]]}', '["in", red_ball, bowl]]}', 1),
     "no item 'red_ball'"),
    (lambda t: t.replace("x: [0.38, 0.66], y: [-0.28, 0.28], yaw: [-0.4, 0.4]}",
                         "x: [0.66, 0.38], y: [-0.28, 0.28], yaw: [-0.4, 0.4]}", 1),
     "item red_cube x: 0.66 > 0.38"),
    (lambda t: t.replace("mount: hand", "mount: elbow"), "mount must be base or hand"),
])
def test_a_scene_file_with_a_mistake_is_refused_saying_where(tmp_path, edit, expected):
    from rpent_twins.scene import SCENES_DIR

    text = (SCENES_DIR / "franka_tabletop.yaml").read_text()
    bad = tmp_path / "scene.yaml"
    bad.write_text(edit(text))
    with pytest.raises(SceneError) as err:
        load_scene(str(bad))
    assert expected in str(err.value) or (expected.startswith("YAML")
                                          and "relation 'True'" in str(err.value))


def test_a_seed_that_cannot_fit_the_items_is_refused(tmp_path):
    from rpent_twins.scene import SCENES_DIR

    text = (SCENES_DIR / "franka_tabletop.yaml").read_text()
    crowded = tmp_path / "crowded.yaml"
    # The bowl and the plate both pinned to one spot cannot be placed apart.
    crowded.write_text(text.replace("x: [0.42, 0.64], y: [-0.3, 0.3]}",
                                    "x: [0.5, 0.5], y: [0.0, 0.0]}"))
    *_, items, _ = tabletop(str(crowded))
    with pytest.raises(SceneError, match="do not fit in their ranges"):
        items.place(0)


def test_the_twin_port_answers_each_method_and_refuses_what_it_does_not_serve():
    from rpent_twins.twin_port import TwinPort, TwinPortError, TwinPortServer

    server = TwinPortServer({"echo": lambda **p: p, "fail": lambda: int("x")}, port=0).start()
    try:
        with TwinPort(server.host, server.port) as port:
            assert port.call("echo", a=1, b=[2, 3]) == {"a": 1, "b": [2, 3]}
            with pytest.raises(TwinPortError, match="unknown method 'nope'.*echo, fail"):
                port.call("nope")
            with pytest.raises(TwinPortError, match="fail: invalid literal"):
                port.call("fail")
    finally:
        server.close()
    with pytest.raises(TwinPortError, match="no twin answers on 127.0.0.1"):
        TwinPort("127.0.0.1", server.port, timeout=1.0)


@pytest.fixture(scope="module")
def franka_view():
    """The Franka scene rendered as its cameras see it (no arm: the hand is a bare body)."""
    from rpent_twins.rendering import SceneRenderer

    scene, model, data, items, xml = tabletop("franka")
    items.place(0)
    renderer = SceneRenderer(xml, scene, 320, 240)
    renderer.set_state(data.qpos)
    yield scene, items, renderer
    renderer.close()


def test_depth_and_masks_put_each_item_where_the_physics_has_it(franka_view):
    """Back-projecting each item's pixels through the depth image and the intrinsics the
    camera_info carries lands within 2 cm of the item's centre (its visible surface)."""
    from rpent_contract.geometry import quaternion_to_matrix

    scene, items, renderer = franka_view
    camera = scene.camera("scene")
    intr = renderer.intrinsics["scene"]
    depth = renderer.depth("scene")
    masks = renderer.item_masks("scene")
    rotation = quaternion_to_matrix(camera.quaternion)
    for item in scene.items:
        v, u = np.nonzero(masks[item.name])
        z = depth[v, u]
        points = np.stack([(u - intr.cx) / intr.fx * z, (v - intr.cy) / intr.fy * z, z], 1)
        in_base = points @ rotation.T + camera.position
        centre = items.poses()[item.name][0] + [0, 0, item.height / 2 - item.origin_height]
        seen = in_base.mean(axis=0)
        # The visible surface faces the camera: within the item's own size of its centre.
        assert np.linalg.norm(seen[:2] - centre[:2]) < max(0.02, item.footprint), item.name
        assert in_base[:, 2].max() == pytest.approx(centre[2] + item.height / 2, abs=0.01)


def test_the_ground_truth_segmenter_answers_only_for_frames_it_published(franka_view):
    from rpent_twins.rendering import FrameMemory, matching_items

    scene, _, renderer = franka_view
    rgb = renderer.colour("scene")
    memory = FrameMemory(size=2)
    memory.remember(rgb, "scene", np.zeros(3))
    assert memory.recall(rgb.copy())[0] == "scene"
    assert memory.recall(np.ascontiguousarray(rgb[::-1])) is None
    for i in range(2):
        memory.remember(np.full_like(rgb, i), "wrist", np.zeros(3))
    assert memory.recall(rgb) is None  # only the newest frames are kept
    assert matching_items(scene, "the red cube") == ["red_cube"]
    assert matching_items(scene, "cube") == ["red_cube"]
    assert matching_items(scene, "a green cup") == []


def test_exposure_scales_the_colour_image(franka_view):
    _, _, renderer = franka_view
    plain = renderer.colour("scene").astype(int)
    dark = renderer.colour("scene", exposure=0.5).astype(int)
    assert np.abs(dark - plain // 2).max() <= 1


def test_depth_is_published_as_realsense_millimetres():
    from rpent_twins.rendering import depth_to_millimetres

    mm = depth_to_millimetres(np.array([[0.5, 1.2345], [0.0, 12.0]], dtype=np.float32), 10.0)
    assert mm.dtype == np.uint16
    assert mm.tolist() == [[500, 1234], [0, 0]]


def test_shipped_scenes_have_six_tasks_with_two_object_and_relational_ones():
    for arm in ("franka", "so101"):
        scene = load_scene(arm)
        assert len(scene.tasks) >= 6
        assert any(len(t.goals) >= 2 for t in scene.tasks), arm
        assert any(g.relation in ("left_of", "right_of") for t in scene.tasks
                   for g in t.goals), arm
        assert len([i for i in scene.items if not i.container]) >= 4, arm
        assert {i.shape for i in scene.items} >= {"box", "cylinder", "bowl", "plate"}, arm
        assert Path(scene.source).is_file()
