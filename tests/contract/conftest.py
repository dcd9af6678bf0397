"""Fixtures of the contract suite: one robot node process per robot implementation."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest

from robots import ROBOTS, RobotUnderTest

from rpent_contract.client import spin_in_thread


@dataclass
class RobotSession:
    spec: RobotUnderTest
    process: object
    client: object
    info: object


@pytest.fixture(scope="module", params=ROBOTS, ids=[r.id for r in ROBOTS])
def robot(request, rclpy_context, node_factory, tmp_path_factory):
    from rpent_contract.client import ContractTimeout, RobotClient

    spec: RobotUnderTest = request.param
    emulator = spec.emulator(tmp_path_factory.mktemp(f"{spec.id}_emulator")) \
        if spec.emulator else None
    proc = None
    try:
        parameters = {**spec.parameters, **(emulator.parameters if emulator else {})}
        proc = node_factory(spec.package, spec.executable, parameters, name=spec.id,
                            params_file=spec.params_file)
        client = RobotClient()
        try:
            info = client.wait_ready(spec.startup_timeout)
        except ContractTimeout as err:
            client.close()
            pytest.fail(f"{spec.id} node did not come up: {err}\n--- node log ---\n"
                        f"{proc.log_tail()}")
        yield RobotSession(spec, proc, client, info)
        client.close()
        assert proc.alive(), f"{spec.id} node died during the suite:\n{proc.log_tail()}"
    finally:
        if proc is not None:
            proc.stop()  # the next robot of the suite serves the same names
        if emulator is not None:
            emulator.stop()


class TopicProbe:
    """Subscribes to a topic and records arrival times and the latest message."""

    def __init__(self, node, msg_type, topic, qos):
        self.times: list[float] = []
        self.latest = None
        self._lock = threading.Lock()
        self.sub = node.create_subscription(msg_type, topic, self._on_msg, qos)

    def _on_msg(self, msg):
        with self._lock:
            self.times.append(time.monotonic())
            self.latest = msg

    def rate(self) -> float:
        with self._lock:
            t = list(self.times)
        return (len(t) - 1) / (t[-1] - t[0]) if len(t) > 2 else 0.0

    def clear(self):
        with self._lock:
            self.times.clear()
            self.latest = None


@pytest.fixture(scope="module")
def probe_node(robot):
    """A node of its own for subscriptions, so that measuring rates does not compete with
    the client's action and service traffic in one executor."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    node = rclpy.create_node("contract_probe")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    thread = spin_in_thread(executor, "contract-probe")
    yield node
    executor.shutdown()
    thread.join(5)
    node.destroy_node()


@pytest.fixture
def probe(probe_node):
    """Make TopicProbes; their subscriptions are destroyed after the test."""
    made = []

    def make(msg_type, topic, qos):
        p = TopicProbe(probe_node, msg_type, topic, qos)
        made.append(p)
        return p

    yield make
    for p in made:
        probe_node.destroy_subscription(p.sub)
