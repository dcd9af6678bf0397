"""End to end: a LIBERO task reaches native success through the robot contract only.

The test is the "agent": it reads the sim-only object poses, then drives the node with
move_to and gripper_command goals (the shared pick-and-place plan) and watches
task_status for the simulator's own success verdict. A non-privileged robot offers
neither: the test then takes the poses from its own simulator of the same episode, and
the verdict must reach only ``native_success``, which evaluations read.
"""
from __future__ import annotations

import numpy as np
import pytest
from action_msgs.msg import GoalStatus

from rpent_common.processes import wait_until
from rpent_contract.client import ContractTimeout, RobotClient
from rpent_am.pick_place import pick_and_place
from rpent_contract.qos import LATCHED_QOS
from rpent_interfaces.msg import RobotState, TaskStatus

SUITE, TASK, OBJECT, TARGET = "libero_object", 0, "alphabet_soup_1", "basket_1"


def poses_of_the_same_episode(init_state_index: int) -> dict:
    from rpent_env_sim.libero_sim import LiberoSim

    with LiberoSim(SUITE, TASK, init_state_index=init_state_index, cameras=()) as sim:
        return sim.object_poses()


@pytest.mark.slow
@pytest.mark.parametrize("init_state_index, privileged", [(0, True), (7, False)])
def test_scripted_pick_and_place_reaches_native_success(rclpy_context, node_factory,
                                                        init_state_index, privileged):
    proc = node_factory("rpent_env_sim", "libero_node",
                        {"suite": SUITE, "task_id": TASK, "init_state_index": init_state_index,
                         "privileged": privileged},
                        name=f"libero_e2e_{init_state_index}")
    client = RobotClient()
    try:
        info = client.wait_ready(180)
        statuses = []
        client.node.create_subscription(TaskStatus, "task_status", statuses.append, LATCHED_QOS)
        states = []
        client.node.create_subscription(RobotState, "robot_state", states.append, 10)
        wait_until(lambda: statuses and states, 10, what="task_status and robot_state")
        assert "alphabet soup" in statuses[-1].instruction
        assert not statuses[-1].success

        if privileged:
            poses = client.object_poses()
        else:
            assert "sim/get_object_poses" not in info.sim_services
            with pytest.raises(ContractTimeout):
                client.object_poses(timeout=2.0)
            poses = poses_of_the_same_episode(init_state_index)
        down = np.array([states[-1].ee_pose.orientation.x, states[-1].ee_pose.orientation.y,
                         states[-1].ee_pose.orientation.z, states[-1].ee_pose.orientation.w])

        def move(phase, position, tolerance):
            status, result = client.move_to(position, down, position_tolerance=tolerance,
                                            orientation_tolerance=0.1, timeout=120)
            assert status == GoalStatus.STATUS_SUCCEEDED and result.reached, \
                f"{phase}: {result.message}"
            p = result.final_pose.position
            return np.array([p.x, p.y, p.z])

        def grip(phase, close):
            status, result = client.gripper(0.0 if close else info.gripper_max_width)
            assert status == GoalStatus.STATUS_SUCCEEDED, f"{phase}: {result.message}"
            if close:
                assert result.stalled and 0.01 < result.position < info.gripper_max_width - 0.01, \
                    f"{phase}: the fingers did not close on the object ({result.message})"
            p = states[-1].ee_pose.position
            return np.array([p.x, p.y, p.z])

        pick_and_place(poses[OBJECT][0], poses[TARGET][0], move, grip)
        final = wait_until(lambda: statuses[-1].native_success and statuses[-1], 10,
                           what="task_status reporting native success")
        if privileged:
            assert final.success and final.done
            assert final.success_source == TaskStatus.SOURCE_NATIVE
        else:  # the agent's verdict is left to an operator; the episode goes on
            assert not final.success and not final.done
            assert final.success_source == TaskStatus.SOURCE_NONE
    finally:
        client.close()
        assert proc.alive(), proc.log_tail()
        proc.stop()
