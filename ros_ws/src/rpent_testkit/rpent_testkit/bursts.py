"""Long chunks to interrupt, and bursts of ``stop`` and cancel requests from several clients
at once, as a panicking operator, a watchdog and a dashboard send them together; each
answer's latency is kept, and when it came.

Used by the contract suite (every request answered) and ``bench/stop_burst.py`` (how fast).
"""
from __future__ import annotations

import threading
import time
import uuid

import numpy as np
from action_msgs.msg import GoalInfo
from action_msgs.srv import CancelGoal
from std_srvs.srv import Trigger
from unique_identifier_msgs.msg import UUID

from rpent_contract.client import spin_in_thread
from rpent_contract.names import EXECUTE_CHUNK_ACTION, STOP_SERVICE
from rpent_contract.qos import REQUEST_QOS


def wiggle(info, steps: int) -> tuple:
    """A chunk in the robot's default space that moves the arm back and forth around where it
    is: (space name, rows). Rows alternate in sign, so the chunk's net displacement is zero
    and it never approaches the workspace limits, however long it runs."""
    space = next(s for s in info.control_spaces if s.name == info.default_control_space)
    if not space.relative:
        raise NotImplementedError(f"{info.embodiment}: define a wiggle for absolute space "
                                  f"{space.name}")
    rows = np.zeros((steps, len(space.lower)))
    rows[:, 0] = 0.3 * space.upper[0] * np.where(np.arange(steps) % 2 == 0, 1.0, -1.0)
    return space.name, rows


class Burst:
    """``clients`` nodes, each with a stop and an execute_chunk cancel client, spun on a
    thread of their own (inside an initialised rclpy context)."""

    def __init__(self, clients: int = 3, namespace: str = "", timeout: float = 30.0):
        self._clients, self._namespace, self._timeout = clients, namespace, timeout
        self.latencies: dict[str, list[float]] = {"stop": [], "cancel": []}
        # When each answer of the last burst came, on the clock ROS stamps with (time.time):
        # what the robot did after it can be read off its own stamps.
        self.answered_at: list[float] = []

    def __enter__(self) -> "Burst":
        import rclpy
        from rclpy.executors import MultiThreadedExecutor

        prefix = f"/{self._namespace.strip('/')}/" if self._namespace.strip("/") else ""
        self._nodes = [rclpy.create_node(f"burst_client_{i}_{uuid.uuid4().hex[:6]}")
                       for i in range(self._clients)]
        self._stop = [n.create_client(Trigger, prefix + STOP_SERVICE, qos_profile=REQUEST_QOS)
                      for n in self._nodes]
        self._cancel = [n.create_client(CancelGoal,
                                        f"{prefix}{EXECUTE_CHUNK_ACTION}/_action/cancel_goal",
                                        qos_profile=REQUEST_QOS) for n in self._nodes]
        self._executor = MultiThreadedExecutor(num_threads=self._clients)
        for node in self._nodes:
            self._executor.add_node(node)
        self._thread = spin_in_thread(self._executor, "burst-clients")
        for client in self._stop + self._cancel:
            if not client.wait_for_service(timeout_sec=self._timeout):
                self.__exit__()
                raise TimeoutError(f"{client.srv_name} not available after {self._timeout:g} "
                                   "s; is the robot node running in this ROS domain?")
        return self

    def __exit__(self, *_exc) -> None:
        self._executor.shutdown()
        self._thread.join(5)
        for node in self._nodes:
            node.destroy_node()

    def stop(self, count: int) -> list:
        """``count`` stop calls spread over the clients; their answers, in sending order."""
        return self._send("stop", [(self._stop[i % self._clients], Trigger.Request())
                                   for i in range(count)])

    def cancel(self, goal_id, count: int) -> list:
        """Cancel ``goal_id`` (a unique_identifier_msgs/UUID), then ``count - 1`` goals that
        do not exist, spread over the clients; the answers, in sending order."""
        ids = [goal_id] + [UUID(uuid=list(uuid.uuid4().bytes)) for _ in range(count - 1)]
        return self._send("cancel", [
            (self._cancel[i % self._clients], CancelGoal.Request(goal_info=GoalInfo(goal_id=g)))
            for i, g in enumerate(ids)])

    def _send(self, kind: str, calls: list) -> list:
        done = threading.Event()
        answered, answered_at = [None] * len(calls), [None] * len(calls)
        left = [len(calls)]
        lock = threading.Lock()

        def on_answer(i: int, sent: float):
            def record(_future):
                with lock:
                    answered[i], answered_at[i] = time.monotonic() - sent, time.time()
                    left[0] -= 1
                    if left[0] == 0:
                        done.set()
            return record

        futures = []
        for i, (client, request) in enumerate(calls):
            future = client.call_async(request)
            future.add_done_callback(on_answer(i, time.monotonic()))
            futures.append(future)
        if not done.wait(self._timeout):
            raise TimeoutError(f"{left[0]} of {len(calls)} {kind} requests got no answer "
                               f"within {self._timeout:g} s")
        self.latencies[kind] += answered
        self.answered_at = answered_at
        return [f.result() for f in futures]
