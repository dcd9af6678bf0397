"""Franka node against franky-sim: command latency and achieved chunk step rate.

    source scripts/env.sh && python bench/franka_node.py [--runs 10] [--publish-rate 200]

For each run a 50-step ee_delta chunk (1 mm per step along y, then back) goes through
execute_chunk. Reports the time from sending the goal to the first joint_states message
showing the arm moving (franky's state, read and published at --publish-rate, which
bounds the resolution), to the first feedback, and the per-step rate the feedback shows
against the declared control rate.
"""
from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from rpent_testkit.processes import NodeProcess, isolate_ros_graph

CONFIG = Path(__file__).resolve().parents[1] / "config" / "franka.yaml"
STEPS = 50
MOVING = 1e-4  # rad: well above franky-sim's noise at rest, well below one step's motion


def percentiles(values_s) -> str:
    ms = np.asarray(values_s) * 1e3
    return f"p50 {np.percentile(ms, 50):6.1f} ms  p90 {np.percentile(ms, 90):6.1f} ms  " \
           f"max {ms.max():6.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--publish-rate", type=float, default=200.0)
    args = parser.parse_args()
    isolate_ros_graph()

    import rclpy
    from sensor_msgs.msg import JointState

    from rpent_contract.client import RobotClient
    from rpent_contract.control_space import array_to_chunk
    from rpent_contract.qos import STATE_QOS
    from rpent_twins.franky_sim import SIM_PARAMETERS, FrankySimProcess
    from rpent_interfaces.action import ExecuteChunk

    with tempfile.TemporaryDirectory() as logs, FrankySimProcess(Path(logs)) as sim:
        node = NodeProcess("rpent_hw", "franka_node",
                           {**SIM_PARAMETERS, "robot_ip": sim.host,
                            "publish_rate": args.publish_rate}, logs,
                           name="bench_franka", params_file=CONFIG)
        rclpy.init()
        client = RobotClient()
        try:
            info = client.wait_ready(60)
            joints, lock = [], threading.Lock()

            def on_joints(msg):
                with lock:
                    joints.append((time.monotonic(), np.array(msg.position[:7])))

            client.node.create_subscription(JointState, "joint_states", on_joints, STATE_QOS)
            rows = np.zeros((STEPS, 7))
            rows[: STEPS // 2, 1], rows[STEPS // 2:, 1] = 0.001, -0.001
            first_motion, first_feedback, rates = [], [], []
            for _ in range(args.runs):
                time.sleep(0.5)
                with lock:
                    joints.clear()
                time.sleep(0.1)
                with lock:
                    rest = joints[-1][1]
                feedback = []
                goal = ExecuteChunk.Goal()
                array_to_chunk(rows, "ee_delta", goal.chunk)
                sent = time.monotonic()
                status, result = client.send(
                    "execute_chunk", goal,
                    feedback=lambda fb: feedback.append(time.monotonic())).result(60)
                if result.steps_executed != STEPS:
                    raise SystemExit(f"chunk failed: {result.message}")
                with lock:
                    moved = [t for t, q in joints if t > sent and np.abs(q - rest).max() > MOVING]
                first_motion.append(moved[0] - sent)
                first_feedback.append(feedback[0] - sent)
                rates.append((len(feedback) - 1) / (feedback[-1] - feedback[0]))
        finally:
            client.close()
            rclpy.try_shutdown()
            node.stop()
    print(f"franka_node on franky-sim, {args.runs} runs of a {STEPS}-step ee_delta chunk, "
          f"control rate {info.control_rate:g} Hz, state read/published at "
          f"{args.publish_rate:g} Hz")
    print(f"  goal -> first motion in joint_states : {percentiles(first_motion)}")
    print(f"  goal -> first feedback (step 0 done) : {percentiles(first_feedback)}")
    print(f"  achieved step rate                   : mean {np.mean(rates):.2f} Hz, "
          f"min {np.min(rates):.2f} Hz (declared {info.control_rate:g} Hz)")


if __name__ == "__main__":
    main()
