"""Repeatable service calls ask again when an answer does not come: a server may drop its
response before it has discovered the client (Fast DDS on a loaded machine), and a lost
answer must cost a retry, not the whole timeout."""
from __future__ import annotations

import threading

import pytest
import rclpy
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import MultiThreadedExecutor
from std_srvs.srv import Trigger

from rpent_common.processes import wait_until
from rpent_contract.client import ContractTimeout, ask


@pytest.fixture
def server(rclpy_context):
    """A Trigger service whose first ``hold`` calls block until released."""
    node = rclpy.create_node("retry_server")
    client_node = rclpy.create_node("retry_client")
    calls, finished, release = [], [], threading.Event()
    state = {"hold": 1}

    def answer(_request, response):
        calls.append(1)
        number = len(calls)
        if number <= state["hold"]:
            release.wait(30)
        response.success, response.message = True, f"call {number}"
        finished.append(number)
        return response

    node.create_service(Trigger, "retry_probe", answer, callback_group=ReentrantCallbackGroup())
    executor = MultiThreadedExecutor(num_threads=4)
    executor.add_node(node)
    executor.add_node(client_node)
    spin = threading.Thread(target=executor.spin, daemon=True)
    spin.start()
    client = client_node.create_client(Trigger, "retry_probe")
    assert client.wait_for_service(timeout_sec=10)
    yield client, calls, state
    release.set()
    # Held calls answer now; their responses must leave before the nodes are destroyed.
    wait_until(lambda: len(finished) == len(calls), 10, what="held calls to finish")
    executor.shutdown(timeout_sec=10)
    spin.join(5)
    node.destroy_node()
    client_node.destroy_node()


def test_a_lost_answer_is_asked_for_again(server):
    client, calls, _ = server
    response = ask(client, Trigger.Request(), 20, "retry_probe")
    assert response.message == "call 2" and len(calls) == 2


def test_no_answer_at_all_fails_after_the_whole_timeout(server):
    client, calls, state = server
    state["hold"] = 100
    with pytest.raises(ContractTimeout, match="retry_probe got no answer within 3 s"):
        ask(client, Trigger.Request(), 3, "retry_probe")
    assert len(calls) == 2  # 2 s, then the 1 s left
