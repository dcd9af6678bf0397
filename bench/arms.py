"""What the real-arm benchmarks share: each arm's node against its stand-in (the Franka on
franky-sim, the SO-101 on the emulated Feetech bus), run one arm after another in a ROS
graph of their own."""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rpent_testkit.processes import NodeProcess, isolate_ros_graph

ROOT = Path(__file__).resolve().parents[1]
SO101_START = {"shoulder_lift": -30.0, "elbow_flex": 30.0, "wrist_flex": 60.0}


@dataclass
class Arm:
    node: NodeProcess
    silence: Callable[[], None]  # the robot stops answering (franky-sim killed, servos mute)
    restore: Callable[[], None]  # and answers again
    stop_backend: Callable[[], None]

    def stop(self) -> None:
        self.node.stop()
        self.stop_backend()


def start_arm(arm: str, logs: Path, parameters: dict = None) -> Arm:
    """The arm's node (extra ``parameters``) and its stand-in, logs under ``logs``."""
    if arm == "franka":
        from rpent_twins.franky_sim import SIM_PARAMETERS, FrankySimProcess

        sim = FrankySimProcess(logs).start()
        node = NodeProcess("rpent_hw", "franka_node",
                           {**SIM_PARAMETERS, "robot_ip": sim.host, **(parameters or {})},
                           logs, name="bench_franka", params_file=ROOT / "config/franka.yaml")
        return Arm(node, sim.kill, sim.start, sim.stop)
    if arm != "so101":
        raise SystemExit(f"unknown arm '{arm}': use franka or so101")
    from rpent_twins.feetech_emulator import (FeetechBusProcess, so101_calibration,
                                           write_calibration_file)

    calibration = so101_calibration()
    write_calibration_file(logs, "arm", calibration)
    bus = FeetechBusProcess(calibration, SO101_START)
    node = NodeProcess("rpent_hw", "so101_node",
                       {"port": bus.port, "calibration_dir": str(logs), "robot_id": "arm",
                        **(parameters or {})},
                       logs, name="bench_so101", params_file=ROOT / "config/so101.yaml")
    return Arm(node, bus.silence, bus.restore, bus.stop)


def for_each_arm(arms, run: Callable[[str, Path], object]) -> list:
    """``run(arm, logs folder)`` for each arm name, with rclpy up; their results in order."""
    isolate_ros_graph()

    import rclpy

    rclpy.init()
    try:
        with tempfile.TemporaryDirectory() as logs:
            results = []
            for arm in arms:
                arm_logs = Path(logs) / arm
                arm_logs.mkdir()
                results.append(run(arm, arm_logs))
            return results
    finally:
        rclpy.try_shutdown()
