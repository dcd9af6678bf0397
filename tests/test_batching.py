"""Dynamic batching in the action-model node, over a real ROS graph: concurrent predict goals
share forward passes and each still gets the chunk it would get alone.

The node runs in this process with its backend handed in (no robot needed: every goal
carries its observation), so a test model can hold a batch at will.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest
import rclpy
from action_msgs.msg import GoalStatus
from rclpy.executors import MultiThreadedExecutor

from rpent_am.am_node import ActionModelNode
from rpent_am.client import ActionModelClient
from rpent_am.observation import to_msg
from rpent_am.policy import ModelMeta, PolicyBackend, PolicyObservation
from rpent_common.processes import wait_until
from rpent_contract.control_space import chunk_to_array
from rpent_contract.qos import STATE_QOS
from rpent_env_sim.libero_node import LIBERO_OSC_DELTA
from rpent_interfaces.action import Predict
from rpent_interfaces.msg import RobotState

WAIT = 60.0  # s: every wait below ends on an event long before this
STATE = ("ee_x", "ee_y", "ee_z", "ee_qx", "ee_qy", "ee_qz", "ee_qw", "gripper_width")


class Served:
    """``backend`` behind an ActionModelNode named ``name``, and a client node, spun here."""

    def __init__(self, backend: PolicyBackend, name: str, **parameters):
        args = ["--ros-args", "-r", f"__node:={name}"]
        for key, value in parameters.items():
            args += ["-p", f"{key}:={value}"]
        self.server = ActionModelNode(backend, cli_args=args)
        self.client_node = rclpy.create_node(f"{name}_client")
        self.executor = MultiThreadedExecutor(num_threads=24)
        for node in (self.server, self.client_node):
            self.executor.add_node(node)
        self.spinner = threading.Thread(target=self.executor.spin, daemon=True)
        self.spinner.start()
        self.model = ActionModelClient(self.client_node, model=f"/{name}")

    def close(self):
        self.server.close()
        self.executor.shutdown()
        self.spinner.join(5)
        self.server.destroy_node()
        self.client_node.destroy_node()


def goal(obs: PolicyObservation, instruction: str, client: str) -> Predict.Goal:
    return Predict.Goal(instruction=instruction, mode=Predict.Goal.MODE_SINGLE,
                        observation=to_msg(obs), client_id=client, timeout=WAIT)


def observation(seed: int, cameras, size: int) -> PolicyObservation:
    rng = np.random.default_rng(seed)
    return PolicyObservation({c: rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
                              for c in cameras}, rng.normal(size=len(STATE)), STATE)


@pytest.mark.slow
def test_eight_concurrent_clients_get_their_own_chunks_from_shared_forward_passes(
        rclpy_context, tmp_path):
    from rpent_am.backends.lerobot_backend import LeRobotBackend
    from rpent_am.model_io import ModelIO
    from rpent_testkit import tiny_act

    folder = tiny_act.build(tmp_path / "act", image_size=64)
    backend = LeRobotBackend(str(folder), action_space=LIBERO_OSC_DELTA,
                             io=ModelIO.simple("test", tiny_act.CAMERAS, STATE))
    served = Served(backend, "batched_act", max_batch=8, max_batch_wait_ms=200.0)
    try:
        assert served.model.meta(WAIT).max_batch == 8
        goals = [goal(observation(i, tiny_act.CAMERAS, 64), f"task {i}", f"client{i}")
                 for i in range(8)]
        alone = []
        for g in goals:
            status, result = served.model.send(g).result(WAIT)
            assert status == GoalStatus.STATUS_SUCCEEDED, result.message
            assert result.max_batch_size == 1
            alone.append(chunk_to_array(result.last_chunk))
        runs = [served.model.send(g) for g in goals]
        together = [run.result(WAIT) for run in runs]
        assert all(status == GoalStatus.STATUS_SUCCEEDED for status, _ in together), \
            [r.message for _, r in together]
        # Goals sent back to back reach the node within the 200 ms window: the backend saw
        # batches, not eight forward passes.
        sizes = [r.max_batch_size for _, r in together]
        assert max(sizes) > 1, sizes
        for one, (_, result) in zip(alone, together):
            # A forward pass over several observations may sum in another order.
            np.testing.assert_allclose(chunk_to_array(result.last_chunk), one,
                                       rtol=1e-5, atol=1e-6)
        assert not np.allclose(alone[0], alone[1])
    finally:
        served.close()


class Gate(PolicyBackend):
    """Chunks of each goal's first state value / 100; records the size of every batch and
    holds it until a pass is released (``open`` releases them all)."""

    batching = True
    meta = ModelMeta("gate", "test", "gate-v1", LIBERO_OSC_DELTA, 4, state_names=("ee_x",))

    def __init__(self):
        self.passes, self.batches = threading.Semaphore(0), []

    def open(self):
        self.passes.release(1000)

    def predict(self, observation, instruction, session):
        return np.full((4, 7), observation.state[0] / 100.0)

    def predict_batch(self, requests):
        self.batches.append(len(requests))
        assert self.passes.acquire(timeout=WAIT)
        return super().predict_batch(requests)


def ee_x(value: float) -> PolicyObservation:
    return PolicyObservation({}, np.array([value]), ["ee_x"])


def test_a_goal_canceled_mid_batch_ends_at_once_and_the_others_get_their_chunks(
        rclpy_context):
    backend = Gate()
    served = Served(backend, "gate_model", max_batch=4, max_batch_wait_ms=1000.0)
    try:
        # A goal alone holds the model while four more arrive, so those four leave as one
        # batch when it is let through.
        plug = served.model.send(goal(ee_x(9.0), "go", "plug"))
        wait_until(lambda: backend.batches == [1], WAIT, what="the first batch")
        runs = [served.model.send(goal(ee_x(i), "go", f"c{i}")) for i in range(4)]
        backend.passes.release()
        assert plug.result(WAIT)[0] == GoalStatus.STATUS_SUCCEEDED
        wait_until(lambda: len(backend.batches) == 2, WAIT, what="the second batch")
        assert backend.batches == [1, 4]
        runs[1].cancel()
        status, result = runs[1].result(WAIT)  # its batch is still held
        assert status == GoalStatus.STATUS_CANCELED, result.message
        assert not any(run.done() for i, run in enumerate(runs) if i != 1)
        backend.open()
        for i in (0, 2, 3):
            status, result = runs[i].result(WAIT)
            assert status == GoalStatus.STATUS_SUCCEEDED, result.message
            assert result.max_batch_size == 4
            np.testing.assert_allclose(chunk_to_array(result.last_chunk), i / 100.0)
    finally:
        backend.open()
        served.close()


def test_stream_feedback_names_the_batch_each_chunk_came_from(rclpy_context):
    """Two streams on one robot wake on the same robot_state and share each forward pass."""
    backend = Gate()
    backend.open()
    served = Served(backend, "fed_model", max_batch=4, max_batch_wait_ms=1000.0)
    node = served.client_node
    publisher = node.create_publisher(RobotState, "/fed_bot/robot_state", STATE_QOS)

    def publish():
        msg = RobotState()
        msg.header.stamp = node.get_clock().now().to_msg()
        msg.ee_pose.position.x = 2.0
        publisher.publish(msg)

    timer = None
    try:
        feedback = {i: [] for i in range(2)}
        runs = [served.model.send(
            Predict.Goal(instruction="go", mode=Predict.Goal.MODE_STREAM, max_chunks=3,
                         client_id=f"s{i}", timeout=WAIT, robot_namespace="fed_bot"),
            feedback=lambda fb, i=i: feedback[i].append(fb.feedback)) for i in range(2)]
        timer = node.create_timer(0.05, publish)  # both goals wait for the first state
        for run in runs:
            status, result = run.result(WAIT)
            assert status == GoalStatus.STATUS_SUCCEEDED, result.message
            assert result.max_batch_size == 2
        for fed in feedback.values():
            assert [f.chunk.sequence for f in fed] == [0, 1, 2]
            assert [f.batch_size for f in fed] == [2, 2, 2]
            np.testing.assert_allclose(chunk_to_array(fed[0].chunk), 0.02)
        assert backend.batches == [2, 2, 2]
    finally:
        if timer is not None:
            node.destroy_timer(timer)
        served.close()


def test_a_node_with_max_batch_1_predicts_one_goal_at_a_time(rclpy_context):
    backend = Gate()
    backend.open()
    served = Served(backend, "single_model", max_batch=1)
    try:
        assert served.model.meta(WAIT).max_batch == 1
        status, result = served.model.send(
            goal(ee_x(3.0), "go", "c")).result(WAIT)
        assert status == GoalStatus.STATUS_SUCCEEDED, result.message
        assert result.max_batch_size == 1 and backend.batches == []  # predict, not a batch
    finally:
        served.close()
