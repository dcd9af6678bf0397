"""What the project's action servers and clients guarantee beyond rclpy's defaults: a goal
whose server-side code raises still gets an answer that says why (rclpy alone would abort
it with an empty result), and a client busy for a while loses none of a goal's feedback."""
from __future__ import annotations

import threading

import rclpy
from action_msgs.msg import GoalStatus
from rclpy.executors import MultiThreadedExecutor, SingleThreadedExecutor

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


def test_a_busy_client_loses_no_feedback(rclpy_context):
    """Streamed chunks arrive as feedback: a client busy while many arrive (twenty predict
    streams at once did it) must still get each one, which rclpy's keep-last-10 did not."""
    burst = 60
    server, client = rclpy.create_node("feedback_server"), rclpy.create_node("feedback_client")
    server_executor, client_executor = SingleThreadedExecutor(), SingleThreadedExecutor()
    server_executor.add_node(server)
    client_executor.add_node(client)
    all_sent, seen = threading.Event(), []

    def execute(goal_handle):
        for step in range(burst):
            goal_handle.publish_feedback(MoveTo.Feedback(steps=step))
        all_sent.set()
        goal_handle.succeed()
        return MoveTo.Result(reached=True)

    def on_feedback(message):
        seen.append(message.feedback.steps)
        if len(seen) == 1:  # busy until every message is out
            assert all_sent.wait(10), "the server did not publish its feedback"

    action_server(server, MoveTo, "move_to", execute_callback=execute)
    actions = ActionClient(client, MoveTo, "/move_to")
    spinners = [threading.Thread(target=e.spin, daemon=True)
                for e in (server_executor, client_executor)]
    for spinner in spinners:
        spinner.start()
    try:
        assert actions.wait_for_server(10)
        handle = wait_future(actions.send_goal_async(MoveTo.Goal(), feedback_callback=on_feedback),
                             10, "move_to goal")
        wait_future(handle.get_result_async(), 10, "move_to result")
        # rclpy drops feedback that is taken after the result: the client took the result
        # only once its busy feedback callback had returned, so every message is in.
        assert seen == list(range(burst))
    finally:
        for executor in (server_executor, client_executor):
            executor.shutdown()
        for spinner in spinners:
            spinner.join(5)
        actions.destroy()
        server.destroy_node()
        client.destroy_node()
