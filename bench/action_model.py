"""Action-model transport and streaming benchmarks.

    source scripts/env.sh && python bench/action_model.py [--rounds 200] [--steps 200]

1. ``predict`` round trip through the ROS action (goal carrying two 256x256 RGB images and
   an 8-value state, a 50x7 chunk back) vs calling the same trivial backend in-process,
   and the same payload to the original RPent's VLA server (``predict``, base64 PNG
   images) on both of its RPC transports.
2. Stream mode: the LIBERO node paced at its 20 Hz control rate executes chunks streamed
   by the scripted expert through the ChunkExecutor; reports the interval between
   consecutive executed steps inside chunks and across chunk boundaries.
"""
from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import tempfile
import threading
import time

import numpy as np

from rpent_am.policy import ModelMeta, PolicyBackend, PolicyObservation
from rpent_env_sim.libero_node import LIBERO_OSC_DELTA
from rpent_testkit.processes import NodeProcess, isolate_ros_graph

CAMERAS = ("agentview", "robot0_eye_in_hand")
STATE = ("ee_x", "ee_y", "ee_z", "ee_qx", "ee_qy", "ee_qz", "ee_qw", "gripper_width")


class Trivial(PolicyBackend):
    """Answers a constant 50x7 chunk at once: what is left to time is the transport."""

    meta = ModelMeta("trivial", "none", "trivial", LIBERO_OSC_DELTA, 50,
                     required_cameras=CAMERAS, state_names=STATE)

    def predict(self, observation, instruction, session):
        return np.zeros((50, 7))


def _serve_trivial():
    from rpent_am.am_node import main

    main(args=["--ros-args", "--log-level", "warn"], backend=Trivial())


def observation() -> PolicyObservation:
    rng = np.random.default_rng(0)
    images = {c: rng.integers(0, 255, (256, 256, 3), dtype=np.uint8) for c in CAMERAS}
    return PolicyObservation(images, rng.normal(size=len(STATE)), STATE, time.time_ns())


def stats(seconds) -> str:
    ms = np.asarray(seconds) * 1e3
    return f"p50 {np.percentile(ms, 50):7.3f} ms  p99 {np.percentile(ms, 99):7.3f} ms"


@contextlib.contextmanager
def model_in_process(target, args=(), node_name: str = "bench_client"):
    """A model node served by ``target(*args)`` in a spawned process, and a client of it
    on a spinning node of this process: yields (client, server process)."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from rpent_am.client import ActionModelClient

    server = multiprocessing.get_context("spawn").Process(target=target, args=args,
                                                          daemon=True)
    server.start()
    rclpy.init()
    node = rclpy.create_node(node_name)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    try:
        yield ActionModelClient(node), server
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
        server.terminate()
        server.join(10)


def ros_round_trips(target, args, obs: PolicyObservation, rounds: int) -> list:
    """Seconds of each ``predict`` goal carrying ``obs`` to a model node served by
    ``target(*args)`` in a process of its own, until its 50-step chunk is back."""
    from rpent_am.observation import to_msg
    from rpent_interfaces.action import Predict

    with model_in_process(target, args) as (model, _server):
        model.meta(timeout=60)
        goal = Predict.Goal(instruction="pick", mode=Predict.Goal.MODE_SINGLE)
        to_msg(obs, goal.observation)
        ros = []
        for i in range(rounds + 10):
            t0 = time.perf_counter()
            _status, result = model.send(goal).result(60)
            if i >= 10:  # the first rounds pay for discovery and allocations
                ros.append(time.perf_counter() - t0)
            assert result.last_chunk.horizon == 50, result.message
    return ros


def transport(rounds: int) -> None:
    from rpent_am.backends.rpent_http import RpentHttpBackend
    from rpent_am.model_io import ModelIO
    from rpent_testkit.vla_servers import Pi05Server

    obs = observation()
    backend = Trivial()
    local = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        backend.predict(obs, "pick", "bench")
        local.append(time.perf_counter() - t0)

    ros = ros_round_trips(_serve_trivial, (), obs, rounds)

    io = ModelIO.simple("bench", {"agentview": "main", "robot0_eye_in_hand": "wrist"}, STATE,
                        state_key="state", prompt_key="instruction")
    rpc = {}
    for wire in ("http", "socket"):
        with Pi05Server(Trivial(), transport=wire) as server:
            client = RpentHttpBackend(server.endpoint, action_space=LIBERO_OSC_DELTA, io=io)
            rpc[wire] = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                client.predict(obs, "pick", "bench")
                rpc[wire].append(time.perf_counter() - t0)
            client.close()

    overhead = np.median(ros) - np.median(local)
    print(f"predict, 2 x 256x256 RGB + 8 state in, 50x7 out, {rounds} rounds")
    print(f"  in-process backend      {stats(local)}")
    print(f"  ROS 2 action round trip {stats(ros)}   overhead p50 {overhead * 1e3:.3f} ms "
          "(goal <= 1 ms)")
    for wire, label in (("http", "RPent RPC, HTTP (PNG)  "),
                        ("socket", "RPent RPC, socket (PNG)")):
        print(f"  {label} {stats(rpc[wire])}   ratio to ROS p50 "
              f"{np.median(rpc[wire]) / np.median(ros):.1f}x")


def streaming(steps: int) -> None:
    import rclpy

    from rpent_am.chunk_executor import ChunkExecutor
    from rpent_am.client import ActionModelClient
    from rpent_contract.client import RobotClient

    with tempfile.TemporaryDirectory() as logs:
        robot_proc = NodeProcess(
            "rpent_env_sim", "libero_node",
            {"cameras": ["agentview"], "image_height": 64, "image_width": 64,
             "real_time": True, "max_episode_steps": steps + 100}, logs, name="bench_robot")
        model_proc = NodeProcess("rpent_am", "am_node", {"backend": "scripted"}, logs,
                                 name="bench_model")
        rclpy.init()
        robot = RobotClient()
        try:
            info = robot.wait_ready(180)
            model = ActionModelClient(robot.node)
            model.connect(info, timeout=120)
            report = ChunkExecutor(robot, model).run(
                "pick the alphabet soup and place it in the basket", max_steps=steps,
                stop_on_success=False, timeout=steps / info.control_rate * 3 + 30)
        finally:
            robot.close()
            rclpy.try_shutdown()
            model_proc.stop()
            robot_proc.stop()
    t = np.asarray(report.step_stamps_ns, dtype=np.int64) / 1e9
    intervals = np.diff(t)
    boundary = set(report.boundaries)
    inside = [d for i, d in enumerate(intervals, start=1) if i not in boundary]
    across = report.boundary_gaps_s()
    period = 1.0 / info.control_rate
    print(f"stream mode, LIBERO at {info.control_rate:g} Hz (period {period * 1e3:.0f} ms), "
          f"scripted expert: {report.steps_executed} steps from {report.chunks_executed} "
          f"chunks ({report.chunks_received} received, {report.chunks_stale} stale)")
    print(f"  step interval inside chunks   {stats(inside)}")
    print(f"  step interval at boundaries   {stats(across)}  max {across.max() * 1e3:.1f} ms"
          f"  = {np.percentile(across, 50) / period:.2f} x period at p50, "
          f"{across.max() / period:.2f} x at worst (goal <= 1.5)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    isolate_ros_graph()
    transport(args.rounds)
    streaming(args.steps)


if __name__ == "__main__":
    main()
