"""back_project against LIBERO's ground truth: every object of libero_object task 0, seen
from both cameras, located from the simulator's own segmentation, rendered depth and camera
pose only, lands where the simulator says the object is.

"Where the object is" is the centre of the object's geometry (the box around all its geoms,
from MuJoCo): the point a grasp or a placement aims at. LIBERO's body origins are that
point for the grocery items but the bottom for containers such as the basket.
"""
from __future__ import annotations

import numpy as np
import pytest

from rpent_perception.geometry import Intrinsics, back_project, locate_mask

pytest.importorskip("libero")
from rpent_env_sim.libero_sim import LiberoSim  # noqa: E402


def geometry_centre(sim: LiberoSim, index: int) -> np.ndarray:
    env = sim.env.env
    model, data = env.sim.model, env.sim.data
    corners = []
    for geom in np.nonzero(sim._geom_object == index)[0]:
        centre, half = model.geom_aabb[geom][:3], model.geom_aabb[geom][3:]
        rotation, position = data.geom_xmat[geom].reshape(3, 3), data.geom_xpos[geom]
        for signs in np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).T.reshape(-1, 3):
            corners.append(position + rotation @ (centre + half * signs))
    corners = np.array(corners)
    base, _ = sim._base_pose_world()
    return (corners.min(axis=0) + corners.max(axis=0)) / 2.0 - base


@pytest.fixture(scope="module")
def sim():
    with LiberoSim("libero_object", 0, init_state_index=0) as s:
        yield s


def test_every_object_is_located_within_2_cm_from_each_camera_that_sees_it_whole(sim):
    obs = sim.observe()
    seen_whole = {camera: [] for camera in obs.images}
    for camera, frame in obs.images.items():
        labels, names = sim.segmentation(camera)
        intrinsics = Intrinsics(frame.fx, frame.fy, frame.cx, frame.cy)
        for index, name in enumerate(names):
            mask = labels == index
            located = locate_mask(mask, frame.depth, intrinsics, frame.position,
                                  frame.orientation)
            if located is None or located.cut_off:
                continue
            error = np.linalg.norm(located.center - geometry_centre(sim, index))
            assert error < 0.02, f"{name} from {camera}: {error * 100:.1f} cm off"
            seen_whole[camera].append(name)
    # The front camera sees every object of the scene whole; the wrist camera at least the
    # ones under the hand.
    labels, names = sim.segmentation("agentview")
    assert sorted(seen_whole["agentview"]) == sorted(
        n for i, n in enumerate(names) if (labels == i).any())
    assert len(seen_whole["agentview"]) >= 7
    assert len(seen_whole["robot0_eye_in_hand"]) >= 2


def test_back_project_of_a_pixel_is_on_the_surface_the_depth_image_shows(sim):
    frame = sim.observe().images["agentview"]
    intrinsics = Intrinsics(frame.fx, frame.fy, frame.cx, frame.cy)
    # The optical axis's pixel sees straight ahead, at the depth reading, from the camera.
    centre = back_project(frame.cx, frame.cy, frame.depth, intrinsics, frame.position,
                          frame.orientation)
    distance = np.linalg.norm(centre - frame.position)
    row, col = int(round(frame.cy)), int(round(frame.cx))
    assert distance == pytest.approx(frame.depth[row, col], rel=1e-3, abs=1e-3)


def test_back_project_lands_where_the_simulators_own_ray_through_the_pixel_hits(sim):
    """The point the simulator has at a pixel: MuJoCo's ray from the camera through that
    pixel, against the geoms the camera renders. Pixels on a depth edge are left out: there
    the ray and the depth sample may fall on different surfaces."""
    import mujoco

    from rpent_contract.geometry import quaternion_to_matrix, wxyz_to_xyzw

    env_sim = sim.env.env.sim
    model, data = env_sim.model._model, env_sim.data._data
    rendered = np.array(env_sim._render_context_offscreen.vopt.geomgroup, dtype=np.uint8)
    base_position, base_wxyz = sim._base_pose_world()
    base = quaternion_to_matrix(wxyz_to_xyzw(base_wxyz))
    for camera, frame in sim.observe().images.items():
        intrinsics = Intrinsics(frame.fx, frame.fy, frame.cx, frame.cy)
        origin = base_position + base @ frame.position
        to_world = base @ quaternion_to_matrix(frame.orientation)
        height, width = frame.depth.shape
        checked = 0
        for row in range(2, height - 2, 6):
            for col in range(2, width - 2, 6):
                around = frame.depth[row - 1:row + 2, col - 1:col + 2]
                if not np.all(np.isfinite(around)) or np.ptp(around) > 0.05:
                    continue
                ray = to_world @ [(col - frame.cx) / frame.fx, (row - frame.cy) / frame.fy, 1.0]
                ray /= np.linalg.norm(ray)
                hit = np.array([-1], np.int32)
                distance = mujoco.mj_ray(model, data, origin, ray, rendered, 1, -1, hit)
                assert hit[0] >= 0, f"{camera} ({col}, {row}): depth but no geom on the ray"
                truth = base.T @ (origin + distance * ray - base_position)
                point = back_project(col, row, frame.depth, intrinsics, frame.position,
                                     frame.orientation)
                error = np.linalg.norm(point - truth)
                assert error < 0.01, f"{camera} ({col}, {row}): {error * 100:.1f} cm off"
                checked += 1
        assert checked > 200, f"{camera}: only {checked} pixels off depth edges"


@pytest.mark.parametrize("u, v, why", [(-1, 5, "outside"), (5, 128, "outside"),
                                       (float("nan"), 3, "not finite")])
def test_pixels_outside_the_image_are_refused(sim, u, v, why):
    frame = sim.observe().images["agentview"]
    with pytest.raises(ValueError, match=why):
        back_project(u, v, frame.depth, Intrinsics(frame.fx, frame.fy, frame.cx, frame.cy),
                     frame.position, frame.orientation)


@pytest.mark.parametrize("reading", [0.0, float("nan"), float("inf")])
def test_a_pixel_without_a_depth_reading_is_refused(reading):
    depth = np.ones((4, 4), np.float32)
    depth[1, 2] = reading
    with pytest.raises(ValueError, match="no depth reading at pixel"):
        back_project(2, 1, depth, Intrinsics(2, 2, 1.5, 1.5), [0, 0, 0], [0, 0, 0, 1])
    assert locate_mask(depth != depth[0, 0], depth, Intrinsics(2, 2, 1.5, 1.5), [0, 0, 0],
                       [0, 0, 0, 1]) is None


def test_a_mask_of_another_size_than_the_depth_image_is_refused():
    with pytest.raises(ValueError, match="differ in size"):
        locate_mask(np.ones((4, 5), bool), np.ones((4, 4), np.float32),
                    Intrinsics(2, 2, 1.5, 1.5), [0, 0, 0], [0, 0, 0, 1])
