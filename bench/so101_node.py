"""SO-101 node against the emulated Feetech bus: bus cycle time and achieved chunk step rate.

    source scripts/env.sh && python bench/so101_node.py [--runs 10] [--seconds 5]

1. The node's driver core (no ROS) at the configured control rate for --seconds: the time
   of one bus cycle (LeRobot sync_read of Present_Position + send_action's sync_write
   through the pty), as the node's bus thread measures it, and the rate it achieves.
2. The node process over ROS: --runs 50-step ee_delta chunks (1 mm per step along y, then
   back); time from goal to first feedback, and the step rate the feedback shows against
   the declared control rate.

The emulator runs in a process of its own (rpent_twins.feetech_emulator.FeetechBusProcess),
so its reply latency is a process switch plus Python, not a 1 Mbaud wire.
"""
from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from rpent_testkit.processes import NodeProcess, isolate_ros_graph

CONFIG = Path(__file__).resolve().parents[1] / "config" / "so101.yaml"
STEPS = 50
START = {"shoulder_lift": -30.0, "elbow_flex": 30.0, "wrist_flex": 60.0}


def percentiles(values_s) -> str:
    ms = np.asarray(values_s) * 1e3
    return f"p50 {np.percentile(ms, 50):6.2f} ms  p90 {np.percentile(ms, 90):6.2f} ms  " \
           f"max {ms.max():6.2f} ms"


def driver_cycles(port: str, cal_dir: str, seconds: float, rate: float):
    from rpent_contract.validation import Workspace
    from rpent_hw.safety import ApprovalGate, SafetyLayer, SafetyLimits
    from rpent_hw.so101.driver import SO101Driver
    from rpent_hw.so101.settings import SO101Settings

    limits = SafetyLimits(Workspace((0.1, -0.3, 0.02), (0.42, 0.3, 0.35)), 0.01, 0.15, 0.3, 1.6)
    driver = SO101Driver(SO101Settings(
        port=port, robot_id="bench", calibration_dir=cal_dir, control_rate=rate,
        max_relative_target=0.0, max_translation_step=0.01, max_rotation_step=0.15,
        frame_id="base_link", safety=SafetyLayer(limits), approval=ApprovalGate(False, 1.0),
        home=(0.0, -30.0, 30.0, 60.0, 0.0, 50.0), max_joint_step=4.0, ik_tolerance=0.005,
        gripper_max_width=0.07, settle_timeout=3.0, max_target_lead=0.01,
        max_target_lag=1.0,
        disable_torque_on_exit=True,
        instruction="", connect_timeout=0.0, tcp_offset=(0.0, 0.0, 0.0), cameras={}),
        logging.getLogger("so101"))
    try:
        driver.hold()
        driver._command(np.array([0.0, -30.0, 30.0, 60.0, 0.0, 50.0]))  # writes every cycle
        driver.cycle_times.clear()
        t0 = time.monotonic()
        time.sleep(seconds)
        cycles = list(driver.cycle_times)
        return cycles, len(cycles) / (time.monotonic() - t0)
    finally:
        driver.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    isolate_ros_graph()

    import rclpy

    from rpent_contract.client import RobotClient
    from rpent_contract.control_space import array_to_chunk
    from rpent_twins.feetech_emulator import (FeetechBusProcess, so101_calibration,
                                           write_calibration_file)
    from rpent_interfaces.action import ExecuteChunk

    rate = yaml.safe_load(CONFIG.read_text())["/**"]["ros__parameters"]["control_rate"]
    cal = so101_calibration()
    with tempfile.TemporaryDirectory() as logs:
        write_calibration_file(Path(logs), "bench", cal)
        with FeetechBusProcess(cal, START) as bus:
            cycles, achieved = driver_cycles(bus.port, logs, args.seconds, rate)
        with FeetechBusProcess(cal, START) as bus:
            node = NodeProcess("rpent_hw", "so101_node",
                               {"port": bus.port, "calibration_dir": logs, "robot_id": "bench"},
                               logs, name="bench_so101", params_file=CONFIG)
            rclpy.init()
            client = RobotClient()
            try:
                info = client.wait_ready(60)
                rows = np.zeros((STEPS, 7))
                rows[: STEPS // 2, 1], rows[STEPS // 2:, 1] = 0.001, -0.001
                first_feedback, rates = [], []
                for _ in range(args.runs):
                    time.sleep(0.3)
                    feedback = []
                    goal = ExecuteChunk.Goal()
                    array_to_chunk(rows, "ee_delta", goal.chunk)
                    sent = time.monotonic()
                    _status, result = client.send(
                        "execute_chunk", goal,
                        feedback=lambda fb: feedback.append(time.monotonic())).result(60)
                    if result.steps_executed != STEPS:
                        raise SystemExit(f"chunk failed: {result.message}\n{node.log_tail()}")
                    first_feedback.append(feedback[0] - sent)
                    rates.append((len(feedback) - 1) / (feedback[-1] - feedback[0]))
            finally:
                client.close()
                rclpy.try_shutdown()
                node.stop()
    print(f"so101_node on the emulated Feetech bus (pty), control rate {rate:g} Hz")
    print(f"  bus cycle (sync_read + sync_write), {len(cycles)} cycles: {percentiles(cycles)}")
    print(f"  bus cycles achieved                 : {achieved:.2f} Hz (configured {rate:g} Hz)")
    print(f"  {args.runs} x {STEPS}-step ee_delta chunk:")
    print(f"    goal -> first feedback (step 0)   : {percentiles(first_feedback)}")
    print(f"    achieved step rate                : mean {np.mean(rates):.2f} Hz, "
          f"min {np.min(rates):.2f} Hz (declared {info.control_rate:g} Hz)")


if __name__ == "__main__":
    main()
