"""The shipped LIBERO model inputs equal what openpi's and LeRobot's own LIBERO pipelines
compute from the same simulator state, value for value.

References, computed with the installed code of those stacks from LIBERO's raw
observation (robosuite's ``robot0_eef_pos``, ``robot0_eef_quat``, ``robot0_gripper_qpos``
and the bottom-up render, of which the contract's upright image is the top-down flip):

* openpi ``examples/libero/main.py``: ``image_tools.resize_with_pad(raw[::-1, ::-1], 224,
  224)`` then ``convert_to_uint8``; state ``concatenate(eef_pos, quat2axisangle(eef_quat),
  gripper_qpos)`` with robosuite's ``quat2axisangle`` (the example's copy of it);
* LeRobot ``LiberoProcessorStep`` (``lerobot/processor/env_processor.py``) on the
  observation as ``LiberoEnv`` and ``preprocess_observation`` hand it over.

Ours: the contract's messages as the robot node publishes them (robot_state and the world
frame on /tf_static) through the action-model node's composition and :class:`ModelIO`.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from geometry_msgs.msg import TransformStamped
from tf2_msgs.msg import TFMessage

from rpent_am.model_io import SHIPPED
from rpent_am.observation import state_from_robot_state
from rpent_am.policy import PolicyObservation
from rpent_contract.geometry import WORLD_FRAME, pose_to_msg
from rpent_contract.tf_tree import TfTree
from rpent_interfaces.msg import RobotState

# The stacks are imported inside the tests: torch, LeRobot and robosuite take seconds that
# every pytest process (each xdist worker too) would pay while collecting.
pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None
        for m in ("libero", "torch", "lerobot", "openpi_client")),
    reason="needs LIBERO and the models extra (scripts/setup.sh --extras models)")

CAMERAS = ("agentview", "robot0_eye_in_hand")
# Arm motions that turn the hand about every axis, then close the gripper.
ACTIONS = [np.array(a, dtype=float) for a in (
    [0.3, -0.4, 0.2, 0.2, -0.3, 0.5, -1.0], [-0.2, 0.3, -0.1, -0.4, 0.3, -0.6, -1.0],
    [0.0, 0.0, -0.3, 0.5, 0.5, 0.5, 1.0])]


@pytest.fixture(scope="module")
def sim():
    from rpent_env_sim.libero_sim import LiberoSim

    with LiberoSim("libero_spatial", 0, cameras=CAMERAS, image_height=256,
                   image_width=256) as s:
        yield s


def states(sim):
    """(contract observation, LIBERO's raw robot observation) along an episode."""
    obs = sim.reset()
    yield obs
    for action in ACTIONS:
        for _ in range(12):
            obs = sim.step(action)
        yield obs


def contract_observation(obs, names) -> PolicyObservation:
    """What the action-model node composes from the robot node's messages."""
    from rpent_env_sim.libero_sim import LiberoSim

    msg = RobotState()
    msg.header.frame_id = "base_link"
    pose_to_msg(obs.ee_position, obs.ee_orientation, msg.ee_pose)
    msg.joint_names = LiberoSim.ARM_JOINT_NAMES + LiberoSim.GRIPPER_JOINT_NAMES
    msg.joint_positions = [float(v) for v in np.concatenate([obs.arm_joint_positions,
                                                              obs.gripper_joint_positions])]
    world = TransformStamped()
    world.header.frame_id, world.child_frame_id = WORLD_FRAME, "base_link"
    position, orientation = obs.base_in_world
    t, r = world.transform.translation, world.transform.rotation
    t.x, t.y, t.z = (float(v) for v in position)
    r.x, r.y, r.z, r.w = (float(v) for v in orientation)
    frames = TfTree()
    frames.add_static(TFMessage(transforms=[world]))
    return PolicyObservation({n: f.rgb for n, f in obs.images.items()},
                             state_from_robot_state(msg, names, frames), names)


def raw_robot(sim) -> dict:
    raw = sim.env.env._get_observations(force_update=True)
    return {k: np.array(raw[f"robot0_{k}"], dtype=np.float64)
            for k in ("eef_pos", "eef_quat", "gripper_qpos")}


def test_pi05_libero_inputs_are_openpis_libero_example(sim):
    from openpi_client import image_tools
    from robosuite.utils import transform_utils

    io = SHIPPED["pi05_libero"]
    for obs in states(sim):
        ours = io.inputs(contract_observation(obs, io.entries()))
        raw = raw_robot(sim)
        state = np.concatenate((raw["eef_pos"], transform_utils.quat2axisangle(
            raw["eef_quat"].copy()), raw["gripper_qpos"]))
        np.testing.assert_allclose(ours["observation/state"], state, atol=1e-9)
        for camera, key in zip(CAMERAS, ("observation/image", "observation/wrist_image")):
            raw_image = obs.images[camera].rgb[::-1]  # as LIBERO renders it: bottom-up
            expected = image_tools.convert_to_uint8(image_tools.resize_with_pad(
                np.ascontiguousarray(raw_image[::-1, ::-1]), 224, 224))
            np.testing.assert_array_equal(ours[key], expected)


def test_lerobot_libero_inputs_are_lerobots_libero_processor(sim):
    import torch
    from lerobot.processor.env_processor import LiberoProcessorStep

    io = SHIPPED["lerobot_libero"]
    step = LiberoProcessorStep()
    for obs in states(sim):
        ours = io.inputs(contract_observation(obs, io.entries()))
        raw = raw_robot(sim)
        batch = {f"observation.images.{key}": torch.from_numpy(
            np.ascontiguousarray(obs.images[camera].rgb[::-1])).permute(2, 0, 1)[None].float()
            / 255.0 for camera, key in zip(CAMERAS, ("image", "image2"))}
        batch["observation.robot_state"] = {
            "eef": {"pos": torch.from_numpy(raw["eef_pos"])[None],
                    "quat": torch.from_numpy(raw["eef_quat"])[None]},
            "gripper": {"qpos": torch.from_numpy(raw["gripper_qpos"])[None]}}
        reference = step.observation(batch)
        np.testing.assert_allclose(ours["observation.state"],
                                   reference["observation.state"][0].numpy(), atol=2e-6)
        for key in ("observation.images.image", "observation.images.image2"):
            image = torch.from_numpy(ours[key]).permute(2, 0, 1)[None].float() / 255.0
            assert torch.equal(image, reference[key])
