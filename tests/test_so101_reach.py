"""The SO-101 twin's scene against its robot node's limits: the streamed expert's whole
pick-and-place, for an object and a container at the far corners of the scene's ranges, is
never refused.

The robot node runs with the scene's robot parameters (workspace, home, tool centre point)
on the emulated Feetech bus (the unmodified LeRobot SO101Follower), and the scripted expert
is built as the twin's bring-up configures it (``am_backend:=scripted``), knowing where the
two things are as perception would tell it. No physics: the bus follows every command, so
what is checked is the path the expert asks for, step by step, through the node's safety
layer (4 degrees per joint and step). Near full stretch a lift asks the elbow for more, so
a scene whose ranges reach too far fails here before a twin episode is refused.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from action_msgs.msg import GoalStatus

from rpent_contract.client import next_message
from rpent_contract.qos import STATE_QOS
from rpent_interfaces.msg import RobotState

pytestmark = [pytest.mark.slow, pytest.mark.serial]

# Chunks one pick-and-place may take: about 40 at the SO-101's 5 mm a step.
MAX_CHUNKS = 120


@pytest.fixture(scope="module")
def scene_arm(rclpy_context, node_factory, tmp_path_factory):
    """The SO-101 node with the twin scene's robot parameters on an emulated bus, and a
    client; yields (client, scene)."""
    from rpent_contract.client import RobotClient
    from rpent_twins.feetech_emulator import (FeetechBusProcess, so101_calibration,
                                           write_calibration_file)
    from rpent_hw.so101.settings import MOTORS
    from rpent_twins.scene import load_scene

    scene = load_scene("so101")
    cal_dir = tmp_path_factory.mktemp("so101_cal")
    calibration = so101_calibration()
    write_calibration_file(cal_dir, "arm", calibration)
    bus = FeetechBusProcess(calibration, dict(zip(MOTORS, scene.robot_parameters["home"])))
    client = None
    try:
        node_factory("rpent_hw", "so101_node",
                     {**scene.robot_parameters, "port": bus.port,
                      "calibration_dir": str(cal_dir), "robot_id": "arm"}, name="so101")
        client = RobotClient()
        client.wait_ready(60)
        yield client, scene
    finally:
        if client is not None:
            client.close()
        bus.stop()


def far_corner(items, side: float) -> np.ndarray:
    """The point of the items' ranges on ``side`` (+1 left, -1 right) farthest from the
    base, at the height the expert is told (an object's centre, a container's bottom)."""
    corners = [np.array([max(i.x), max(i.y) if side > 0 else min(i.y), i.origin_height])
               for i in items]
    return max(corners, key=lambda p: math.hypot(p[0], p[1]))


@pytest.mark.parametrize("side", [1.0, -1.0], ids=["object_left", "object_right"])
def test_the_streamed_expert_is_never_refused_at_the_far_corners_of_the_scene(scene_arm,
                                                                              side):
    from rpent.bringup import arm_model_parameters
    from rpent_am.backends import make_backend
    from rpent_am.backends.scripted import STATE_NAMES
    from rpent_am.observation import state_from_robot_state
    from rpent_am.policy import PolicyObservation
    from rpent_am.settings import ScriptedSettings
    from rpent_contract.control_space import ControlSpaceSpec
    from rpent_contract.geometry import stamp_to_ns

    client, scene = scene_arm
    obj = far_corner([i for i in scene.items if not i.container], side)
    # The carry crosses the table: the container on the other side.
    target = far_corner([i for i in scene.items if i.container], -side)
    assert client.reset().success
    info = client.info()
    space = next(ControlSpaceSpec.from_msg(s) for s in info.control_spaces
                 if s.name == "ee_delta")
    expert = make_backend("scripted",
                          ScriptedSettings(**arm_model_parameters("so101",
                                                                  {"am_backend": "scripted"})),
                          space, info, {"perception": lambda robot, instruction: (obj, target)})
    closest_to_object, released_above_target = math.inf, False
    for _ in range(MAX_CHUNKS):
        state = next_message(client.node, RobotState, "robot_state", STATE_QOS, 10)
        here = state_from_robot_state(state, STATE_NAMES)
        closest_to_object = min(closest_to_object, float(np.linalg.norm(here[:3] - obj)))
        rows = expert.predict(PolicyObservation({}, here, STATE_NAMES,
                                                stamp_to_ns(state.header.stamp)),
                              "put the red cube in the bowl", "reach")
        status, result = client.execute_chunk(rows, "ee_delta", timeout=30)
        assert status == GoalStatus.STATUS_SUCCEEDED, (obj, target, result.message)
        # The release: the hand still, opening, over the container, once it has been at the
        # object.
        if (closest_to_object < 0.015 and not rows[:, :3].any() and rows[0, 6] < 0
                and np.linalg.norm(here[:2] - target[:2]) < 0.02):
            released_above_target = True
            break
    assert closest_to_object < 0.015, (obj, closest_to_object)
    assert released_above_target, (target, here)
