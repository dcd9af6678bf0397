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
from builtin_interfaces.msg import Time
from std_srvs.srv import Trigger
from unique_identifier_msgs.msg import UUID

from rpent_common.processes import wait_until
from rpent_contract.client import shutdown_executor, spin_in_thread
from rpent_contract.executors import MultiThreadedExecutor
from rpent_contract.geometry import stamp_to_ns
from rpent_contract.names import EXECUTE_CHUNK_ACTION, EXECUTED_ACTIONS_TOPIC, STOP_SERVICE
from rpent_contract.qos import EXECUTED_QOS, REQUEST_QOS
from rpent_testkit.processes import answered_once


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


def now_stamp() -> Time:
    """The time now, as a stamp no other chunk of this process has: set as a chunk's
    ``header.stamp``, it names that chunk's steps on executed_actions."""
    now = time.time_ns()
    return Time(sec=now // 10**9, nanosec=now % 10**9)


class ExecutedSteps:
    """When the robot carried out each step of a chunk, by its own stamps on executed_actions
    (the system clock, as ``time.time()`` reads it), kept per chunk stamp."""

    def __init__(self, node, topic: str = EXECUTED_ACTIONS_TOPIC):
        from rpent_interfaces.msg import ExecutedAction

        self._lock = threading.Lock()
        self._stamps: dict[tuple, list] = {}
        self._node = node
        self.subscription = node.create_subscription(
            ExecutedAction, topic, self._on_step, EXECUTED_QOS)

    def wait_for_robot(self, timeout: float = 10.0) -> None:
        """Until the robot's publisher is matched: steps before that would be missed."""
        topic = self.subscription.topic_name
        wait_until(lambda: self._node.count_publishers(topic) > 0, timeout,
                   what=f"the robot's {topic} publisher")

    def _on_step(self, msg) -> None:
        key = (msg.chunk_stamp.sec, msg.chunk_stamp.nanosec)
        with self._lock:
            self._stamps.setdefault(key, []).append(stamp_to_ns(msg.header.stamp) * 1e-9)

    def run_after(self, chunk_stamp, steps: int, at: float, timeout: float = 10.0) -> int:
        """How many of the chunk's ``steps`` the robot carried out after ``at``
        (``time.time()``), once all of them have been received. After a stop or cancel
        answered at ``at`` only the step in flight may run: judged on the robot's stamps, not
        on how much feedback had reached the client, which a loaded machine delays by several
        steps of a simulator not held to real time."""
        key = (chunk_stamp.sec, chunk_stamp.nanosec)

        def received():
            with self._lock:
                stamps = list(self._stamps.get(key, ()))
            return stamps if len(stamps) >= steps else None

        stamps = wait_until(received, timeout, what=f"executed_actions of all {steps} steps")
        return sum(t > at for t in stamps)


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

        prefix = f"/{self._namespace.strip('/')}/" if self._namespace.strip("/") else ""
        self._nodes = [rclpy.create_node(f"burst_client_{i}_{uuid.uuid4().hex[:6]}")
                       for i in range(self._clients)]
        self._stop = [n.create_client(Trigger, prefix + STOP_SERVICE, qos_profile=REQUEST_QOS)
                      for n in self._nodes]
        self._cancel = [n.create_client(CancelGoal,
                                        f"{prefix}{EXECUTE_CHUNK_ACTION}/_action/cancel_goal",
                                        qos_profile=REQUEST_QOS) for n in self._nodes]
        # What the robot did, by its stamps, to compare with when the answers came.
        self.executed = ExecutedSteps(self._nodes[0], prefix + EXECUTED_ACTIONS_TOPIC)
        self._executor = MultiThreadedExecutor(num_threads=self._clients)
        for node in self._nodes:
            self._executor.add_node(node)
        self._thread = spin_in_thread(self._executor, "burst-clients")
        try:
            self._warm_up()
        except TimeoutError:
            self.__exit__()
            raise
        return self

    def _warm_up(self) -> None:
        for client in self._stop + self._cancel:
            if not client.wait_for_service(timeout_sec=self._timeout):
                raise TimeoutError(f"{client.srv_name} not available after {self._timeout:g} "
                                   "s; is the robot node running in this ROS domain?")
        # A server's first answers to a new client wait on DDS discovering it (or are lost
        # and sent again): one answered call per client first, so a burst times the robot.
        unknown_goal = CancelGoal.Request(goal_info=GoalInfo(goal_id=UUID(
            uuid=list(uuid.uuid4().bytes))))
        for client, request in [(c, Trigger.Request()) for c in self._stop] + \
                [(c, unknown_goal) for c in self._cancel]:
            answered_once(lambda c=client, r=request: c.call_async(r),
                          f"an answer from {client.srv_name}", timeout=self._timeout)

    def __exit__(self, *_exc) -> None:
        shutdown_executor(self._executor)
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
