"""Cartesian move_to over the native OSC_POSE space: maths, then on the real sim."""

from pathlib import Path

import numpy as np
import pytest

from rpent_contract.geometry import quaternion_multiply


from rpent_env_sim.cartesian_controller import (
    GRIPPER_CLOSE,
    GRIPPER_OPEN,
    OSC_POSE_MAX_POS_DELTA,
    OSC_POSE_MAX_ROT_DELTA,
    move_to,
    pose_error,
    rotation_error,
    within_tolerance,
)


def quat_about(axis, angle):
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    return np.concatenate([axis * np.sin(angle / 2), [np.cos(angle / 2)]])


DOWN = np.array([1.0, 0.0, 0.0, 0.0])  # x, y, z, w: gripper pointing down
ORIGIN = np.zeros(3)


def test_scaling_matches_robosuite_osc_pose_config():
    import json

    import robosuite

    config = json.loads(
        (Path(robosuite.__file__).parent / "controllers/config/osc_pose.json").read_text()
    )
    assert config["control_delta"] is True
    assert config["input_max"] == 1 and config["input_min"] == -1
    assert config["output_max"] == [OSC_POSE_MAX_POS_DELTA] * 3 + [OSC_POSE_MAX_ROT_DELTA] * 3


def test_at_target_commands_nothing_and_passes_gripper_through():
    action = move_to(ORIGIN, DOWN, ORIGIN, DOWN, GRIPPER_CLOSE)
    assert action.shape == (7,)
    np.testing.assert_allclose(action[:6], 0.0, atol=1e-12)
    assert action[6] == GRIPPER_CLOSE


def test_small_errors_are_scaled_by_the_osc_output_range():
    action = move_to(ORIGIN, DOWN, [0.01, -0.02, 0.0], DOWN, GRIPPER_OPEN)
    np.testing.assert_allclose(action[:3], [0.2, -0.4, 0.0])
    target = quat_about([0, 0, 1], 0.1)
    current = quat_about([0, 0, 1], 0.0)
    action = move_to(ORIGIN, current, ORIGIN, target)
    np.testing.assert_allclose(action[3:6], [0.0, 0.0, 0.2], atol=1e-9)
    assert action[6] == GRIPPER_OPEN


def test_large_errors_saturate_along_the_error_direction():
    action = move_to(ORIGIN, DOWN, [0.3, 0.4, 0.0], DOWN)
    np.testing.assert_allclose(action[:3], [0.6, 0.8, 0.0])
    action = move_to(ORIGIN, DOWN, [0.3, 0.4, 0.0], DOWN, max_pos_step=0.01)
    np.testing.assert_allclose(np.linalg.norm(action[:3]), 0.2)
    action = move_to(ORIGIN, quat_about([1, 0, 0], 0.0), ORIGIN, quat_about([1, 0, 0], 2.0))
    np.testing.assert_allclose(action[3:6], [1.0, 0.0, 0.0])


def test_rotation_error_is_in_the_common_frame_and_takes_the_short_way():
    current = quat_about([0, 0, 1], np.pi / 2)
    target = quat_about([1, 0, 0], np.pi / 2)
    # R_err = R_target R_current^T; applying it to current must give target.
    err = rotation_error(current, target)
    angle = np.linalg.norm(err)
    composed = quaternion_multiply(quat_about(err, angle), current)
    assert np.isclose(abs(np.dot(composed, target)), 1.0)
    np.testing.assert_allclose(rotation_error(DOWN, -DOWN), 0.0, atol=1e-12)
    np.testing.assert_allclose(
        rotation_error(quat_about([0, 0, 1], 0), quat_about([0, 0, 1], 1.9 * np.pi)),
        [0, 0, -0.1 * np.pi],
        atol=1e-9,
    )


def test_tolerance_check():
    assert within_tolerance(ORIGIN, DOWN, [0.009, 0, 0], DOWN, pos_tol=0.01)
    assert not within_tolerance(ORIGIN, DOWN, [0.011, 0, 0], DOWN, pos_tol=0.01)
    tilted = quaternion_multiply(quat_about([0, 1, 0], 0.2), DOWN)
    assert not within_tolerance(ORIGIN, DOWN, ORIGIN, tilted, rot_tol=0.1)
    assert within_tolerance(ORIGIN, DOWN, ORIGIN, tilted, rot_tol=0.25)
    pos_err, rot_err = pose_error(ORIGIN, DOWN, [0, 0.03, 0.04], tilted)
    assert np.isclose(pos_err, 0.05) and np.isclose(rot_err, 0.2)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"target_pos": [0, 0]}, "target_pos"),
        ({"target_pos": [0, np.nan, 0]}, "target_pos"),
        ({"target_quat": [0, 0, 0, 0]}, "no orientation"),
        ({"gripper": np.inf}, "gripper"),
        ({"max_pos_step": 0.2}, "max_pos_step"),
        ({"max_rot_step": 0.0}, "max_rot_step"),
    ],
)
def test_invalid_inputs_raise(kwargs, message):
    args = {
        "current_pos": ORIGIN,
        "current_quat": DOWN,
        "target_pos": ORIGIN,
        "target_quat": DOWN,
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        move_to(**args)


# --- on the real simulator ---------------------------------------------------


@pytest.fixture(scope="module")
def sim():
    from rpent_env_sim.libero_sim import LiberoSim

    with LiberoSim("libero_object", 0, max_episode_steps=10_000) as sim:
        yield sim


def _drive(sim, target_pos, target_quat, pos_tol, rot_tol, max_steps):
    obs = sim.observe(render=False)
    for _ in range(max_steps):
        if within_tolerance(
            obs.ee_position, obs.ee_orientation, target_pos, target_quat, pos_tol, rot_tol
        ):
            return obs
        obs = sim.step(
            move_to(obs.ee_position, obs.ee_orientation, target_pos, target_quat), render=False
        )
    return obs


@pytest.mark.slow
@pytest.mark.parametrize(
    "offset",
    [[0.1, 0, 0], [-0.1, 0, 0], [0, 0.1, 0], [0, -0.1, 0], [0, 0, 0.1], [0.06, -0.06, 0.05]],
)
def test_reaches_a_point_10cm_away_within_1cm(sim, offset):
    start = sim.reset(init_state_index=0)
    target = start.ee_position + offset
    obs = _drive(sim, target, start.ee_orientation, 0.01, 0.1, max_steps=60)
    assert within_tolerance(
        obs.ee_position, obs.ee_orientation, target, start.ee_orientation, 0.01, 0.1
    ), f"ee {obs.ee_position} did not reach {target} in 60 steps"
    assert obs.step <= 40, f"took {obs.step} steps"
    # and it stays there
    for _ in range(20):
        obs = sim.step(
            move_to(obs.ee_position, obs.ee_orientation, target, start.ee_orientation), render=False
        )
    assert np.linalg.norm(obs.ee_position - target) < 0.01


@pytest.mark.slow
def test_reaches_a_rotated_pose(sim):
    start = sim.reset(init_state_index=0)
    target_quat = quaternion_multiply(quat_about([0, 0, 1], 0.5), start.ee_orientation)
    target_pos = start.ee_position + [0.05, 0.0, -0.05]
    obs = _drive(sim, target_pos, target_quat, 0.01, 0.05, max_steps=80)
    pos_err, rot_err = pose_error(obs.ee_position, obs.ee_orientation, target_pos, target_quat)
    assert pos_err <= 0.01 and rot_err <= 0.05, (pos_err, rot_err)
