"""The control loop's real latency, per chunk: observation measured -> chunk produced by the
model -> received by the robot -> its first step applied.

    source scripts/env.sh && python bench/closed_loop_latency.py [--steps 200] \
        [--robots libero,franka,so101] [--inference-ms 30]

A policy streams through the model node and ``ChunkExecutor`` as a user runs one:
* LIBERO (paced at its 20 Hz control rate): the scripted expert (no cameras: nothing is
  rendered), then a camera-fed policy (agentview 128x128, rendered on demand for each
  prediction) that answers after a fixed inference time;
* the Franka on franky-sim and the SO-101 on the emulated Feetech bus: a policy that moves
  the hand back and forth along y in ee_delta, after the same inference time.
The stamps come from the robot's executed_actions, as ``rpent latency BAG`` reads them from a
recording, and each chunk's inference time from the model's predict feedback. Target: the
first step applied within the inference time plus one control period of the observation.
"""
from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time
from pathlib import Path

import numpy as np

from rpent_am.policy import ModelMeta, PolicyBackend
from rpent_bag.latency import Step, chunk_latencies, stamp_ns, summary
from rpent_testkit.processes import NodeProcess, isolate_ros_graph

SOUP = "pick the alphabet soup and place it in the basket"


class Sweep(PolicyBackend):
    """Moves the hand along y towards the far side of where it started, after ``delay_s``
    of 'inference': a chunk of ``horizon`` steps of ``dy`` per step."""

    def __init__(self, space, rate: float, dy: float, delay_s: float, cameras=(),
                 horizon: int = 20):
        self._meta = ModelMeta("sweep", "none", "sweep", space, horizon,
                               required_cameras=tuple(cameras), state_names=("ee_y",),
                               control_rate=rate)
        self.dy, self.delay_s, self.horizon = dy, delay_s, horizon
        self.start: dict = {}

    @property
    def meta(self) -> ModelMeta:
        return self._meta

    def predict(self, observation, instruction, session):
        time.sleep(self.delay_s)
        y = float(observation.state[0])
        y0 = self.start.setdefault(session, y)
        row = np.zeros(len(self._meta.action_space.labels))
        row[1] = self.dy if y <= y0 else -self.dy  # back and forth about where it started
        return np.tile(row, (self.horizon, 1))


def _serve(backend):
    from rpent_am.am_node import main

    main(args=["--ros-args", "--log-level", "warn", "-r", "__node:=action_model"],
         backend=backend)


def stream(robot_params: dict, backend_of, steps: int, logs: Path, arm: str = "") -> str:
    """Start the robot, then a model node serving ``backend_of(robot info)``, stream
    ``steps`` steps through ChunkExecutor and return the latency summary."""
    from rclpy.qos import QoSProfile

    from rpent_am.chunk_executor import ChunkExecutor
    from rpent_am.client import ActionModelClient
    from rpent_contract.client import RobotClient
    from rpent_contract.control_space import ControlSpaceSpec
    from rpent_contract.qos import EXECUTED_QOS
    from rpent_interfaces.action import Predict
    from rpent_interfaces.msg import ExecutedAction

    if arm:
        from arms import start_arm

        robot_proc = start_arm(arm, logs, robot_params)
    else:
        robot_proc = NodeProcess("rpent_env_sim", "libero_node", robot_params, logs,
                                 name="bench_robot")
    model_proc = None
    robot = RobotClient(actions=["execute_chunk"])
    try:
        info = robot.wait_ready(180)
        reset = robot.reset()
        if not reset.success:
            raise SystemExit(f"reset failed: {reset.message}")
        backend = backend_of(info, {s.name: ControlSpaceSpec.from_msg(s)
                                    for s in info.control_spaces})
        if backend is None:
            model_proc = NodeProcess("rpent_am", "am_node", {"backend": "scripted"}, logs,
                                     name="action_model")
        else:
            model_proc = multiprocessing.get_context("spawn").Process(
                target=_serve, args=(backend,), daemon=True)
            model_proc.start()
        executed, inference = [], {}
        robot.node.create_subscription(
            ExecutedAction, "executed_actions", lambda m: executed.append(Step(
                stamp_ns(m.header.stamp), stamp_ns(m.observation_stamp),
                stamp_ns(m.chunk_stamp), stamp_ns(m.chunk_received))), EXECUTED_QOS)
        robot.node.create_subscription(
            Predict.Impl.FeedbackMessage, "action_model/predict/_action/feedback",
            lambda m: inference.__setitem__(stamp_ns(m.feedback.chunk.header.stamp),
                                            float(m.feedback.chunk.inference_ms)),
            QoSProfile(depth=100))
        model = ActionModelClient(robot.node)
        model.connect(info, timeout=120)
        report = ChunkExecutor(robot, model).run(
            SOUP, max_steps=steps, stop_on_success=False,
            timeout=steps / info.control_rate * 3 + 30)
        if report.steps_executed < steps:
            raise SystemExit(f"the stream ended after {report.steps_executed} steps: "
                             f"{report.outcome}: {report.message}")
        time.sleep(0.5)  # the last executed_actions in flight
        return summary(chunk_latencies(executed, inference), 1.0 / info.control_rate)
    finally:
        robot.close()
        if model_proc is not None:
            if isinstance(model_proc, NodeProcess):
                model_proc.stop()
            else:
                model_proc.terminate()
                model_proc.join(10)
        robot_proc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--robots", default="libero,franka,so101")
    parser.add_argument("--inference-ms", type=float, default=30.0,
                        help="the sweep policy's inference time")
    args = parser.parse_args()
    isolate_ros_graph()
    import rclpy

    delay = args.inference_ms / 1e3
    libero = {"cameras": ["agentview"], "image_height": 128, "image_width": 128,
              "real_time": True, "max_episode_steps": args.steps + 100}
    runs = []
    if "libero" in args.robots:
        runs += [
            ("LIBERO, scripted expert (no camera)", libero, lambda info, spaces: None, ""),
            (f"LIBERO, camera-fed sweep ({args.inference_ms:g} ms)", libero,
             lambda info, spaces: Sweep(spaces["libero_osc_delta"], info.control_rate, 0.1,
                                        delay, cameras=("agentview",)), ""),
        ]
    for arm, dy, params in (("franka", 0.002, {"publish_rate": 100.0}), ("so101", 0.001, {})):
        if arm in args.robots:
            runs.append((f"{arm}, ee_delta sweep ({args.inference_ms:g} ms)", params,
                         lambda info, spaces, dy=dy: Sweep(spaces["ee_delta"],
                                                           info.control_rate, dy, delay), arm))
    rclpy.init()
    try:
        for label, params, backend_of, arm in runs:
            print(f"{label} ...", flush=True)
            with tempfile.TemporaryDirectory() as logs:
                print(stream(params, backend_of, args.steps, Path(logs), arm), flush=True)
            print()
    finally:
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
