"""RobotClient motion timeouts: a motion that keeps reporting progress runs to its end
however slowly the machine steps it; a robot that stops answering fails the call after the
timeout, with a message that says what to check."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from action_msgs.msg import GoalStatus

from rpent_contract.client import ContractTimeout, RobotClient
from rpent_interfaces.action import MoveTo

# Progress within 1.5 s, a timeout noticed within 5 s: wall-clock bounds, run alone.
pytestmark = [pytest.mark.slow, pytest.mark.serial]


@pytest.fixture(scope="module")
def robot(rclpy_context, node_factory):
    proc = node_factory("rpent_env_sim", "libero_node", {"real_time": True},
                        name="libero_timeouts")
    client = RobotClient(node_name="timeouts_client")
    client.wait_ready(180)
    yield proc, client
    client.close()


def start_pose(client):
    status, result = client.move_to([0.45, 0.0, 0.35], timeout=30)
    assert status == GoalStatus.STATUS_SUCCEEDED, result.message
    return result


def test_a_motion_longer_than_the_timeout_completes_while_it_reports_progress(robot):
    _, client = robot
    start_pose(client)
    started = time.monotonic()
    # 0.3 m at 5 mm per step, paced at 20 Hz (real_time): 3 s at least on any machine.
    status, result = client.move_to([0.45, 0.0, 0.05], timeout=1.5,
                                    max_translation_step=0.005)
    assert time.monotonic() - started > 1.5
    assert status == GoalStatus.STATUS_SUCCEEDED and result.reached, result.message


def test_a_robot_that_stops_answering_fails_the_call_after_the_timeout(robot):
    proc, client = robot
    start_pose(client)
    moving = threading.Event()
    goal = MoveTo.Goal(position_only=True)
    goal.target.pose.position.x, goal.target.pose.position.z = 0.45, 0.05
    goal.target.pose.orientation.w = 1.0
    run = client.send("move_to", goal, feedback=lambda _fb: moving.set())
    assert moving.wait(30), "no feedback from the moving robot"
    os.kill(proc.proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(ContractTimeout, match="no progress for 1 s.*ros2 node list"):
            run.result_while_progressing(1.0)
        assert time.monotonic() - started < 5
    finally:
        os.kill(proc.proc.pid, signal.SIGCONT)
    client.stop()


def test_a_client_made_for_some_actions_hears_no_feedback_of_the_others(robot):
    """Every client of an action receives the feedback of every goal sent to it (one
    message per executed step for execute_chunk): a harness that only watches names none."""
    _, client = robot
    topic = "/execute_chunk/_action/feedback"
    before = client.node.count_subscribers(topic)
    mover = RobotClient(node_name="move_only_client", actions=("move_to",))
    try:
        assert mover.wait_ready(30).embodiment
        status, result = mover.move_to([0.45, 0.0, 0.35], timeout=30)
        assert status == GoalStatus.STATUS_SUCCEEDED, result.message
        assert client.node.count_subscribers("/move_to/_action/feedback") >= 2
        assert client.node.count_subscribers(topic) == before
        with pytest.raises(ValueError, match="without the 'execute_chunk' action"):
            mover.execute_chunk([[0.0] * 7], "ee_delta")
    finally:
        mover.close()
    with pytest.raises(ValueError, match="unknown robot action"):
        RobotClient(node_name="bad_client", actions=("teleport",))
