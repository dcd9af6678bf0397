"""A goal whose server-side code raises still gets an answer that says why (rclpy alone
would abort it with an empty result, and the client would never learn the reason)."""
from __future__ import annotations

import threading

import rclpy
from action_msgs.msg import GoalStatus
from rclpy.executors import MultiThreadedExecutor

from rpent_contract.client import ActionClient, wait_future
from rpent_contract.serving import action_server
from rpent_interfaces.action import MoveTo


def test_a_goal_whose_callback_raises_is_aborted_with_the_reason(rclpy_context):
    server, client = rclpy.create_node("serving_server"), rclpy.create_node("serving_client")
    executor = MultiThreadedExecutor()
    executor.add_node(server)
    executor.add_node(client)

    def execute(goal_handle):
        raise OverflowError("timeout 1e+308 s is too large")

    action_server(server, MoveTo, "move_to", execute_callback=execute)
    actions = ActionClient(client, MoveTo, "/move_to")
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        assert actions.wait_for_server(10)
        handle = wait_future(actions.send_goal_async(MoveTo.Goal()), 10, "move_to goal")
        assert handle.accepted
        answer = wait_future(handle.get_result_async(), 10, "move_to result")
        assert answer.status == GoalStatus.STATUS_ABORTED
        assert ("move_to failed inside /serving_server (OverflowError: timeout 1e+308 s is "
                "too large)") in answer.result.message, answer.result.message
    finally:
        executor.shutdown()
        spinner.join(5)
        actions.destroy()
        server.destroy_node()
        client.destroy_node()
