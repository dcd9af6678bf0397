"""Streamed chunks on the real-arm nodes: gaps and speed at chunk boundaries.

    source scripts/env.sh && python bench/chunk_boundaries.py [--arms franka,so101] [--runs 3]

For each arm (the Franka node on franky-sim, the SO-101 node on the emulated Feetech bus)
and control space, ``rpent_hw.stream_check`` streams 4 chunks of 20 steps along one line
(ee_delta: +y; joint_position: a ramp of the first joint), each sent after 10 steps of
the previous one, as a policy client does. Reports over all boundaries: the
gap between the last step of one chunk and the first of the next in control periods
(p50 / max) and the end effector's lowest speed across a boundary as a fraction of its
speed inside the chunks (min / median; 0 = the arm stopped).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from arms import for_each_arm, start_arm


def run_arm(arm: str, runs: int, logs: Path) -> list:
    from rpent_contract.client import RobotClient
    from rpent_hw.stream_check import constant_delta, joint_ramp, stream_chunks

    row, spaces = np.zeros(7), ("ee_delta", "joint_position")
    if arm == "franka":
        robot = start_arm(arm, logs, {"publish_rate": 100.0})
        row[1] = 0.002
        joint_step = np.array([0.005, 0, 0, 0, 0, 0, 0, 0])  # rad per step of joint 1

        def joint_start(state):  # the seven joints, gripper column 0 (keep)
            return np.append(state.joint_positions[:7], 0.0)
    else:
        robot = start_arm(arm, logs)
        row[1] = 0.001
        joint_step = np.array([0.5, 0, 0, 0, 0, 0])  # deg per step of shoulder_pan

        def joint_start(state):  # LeRobot units: degrees, gripper 0-100 kept at home's 50
            return np.append(np.degrees(state.joint_positions[:5]), 50.0)
    client = RobotClient()
    rows = []
    try:
        client.wait_ready(60)
        for space in spaces:
            gaps, ratios = [], []
            for run in range(runs):
                reset = client.reset()
                if not reset.success:
                    raise SystemExit(f"{arm}: reset failed: {reset.message}")
                sign = -1.0 if run % 2 else 1.0
                chunks = (constant_delta(sign * row) if space == "ee_delta" else
                          joint_ramp(joint_start(_state(client)), sign * joint_step))
                record = stream_chunks(client, chunks)
                bad = [r.message for _s, r in record.results
                       if r.outcome not in (r.OUTCOME_COMPLETED, r.OUTCOME_CANCELED)]
                if bad:
                    raise SystemExit(f"{arm} {space}: a chunk failed: {bad}")
                gaps.extend(record.boundary_gaps())
                ratios.extend(record.boundary_speed_ratios())
                print(f"  {arm} {space} run {run + 1}/{runs}: gaps "
                      f"{np.round(record.boundary_gaps(), 2)}, speed ratios "
                      f"{np.round(record.boundary_speed_ratios(), 2)}", flush=True)
            rows.append((f"{arm} {space}", np.array(gaps), np.array(ratios)))
    finally:
        client.close()
        robot.stop()
    return rows


def _state(client):
    from rpent_contract.client import next_message
    from rpent_contract.qos import STATE_QOS
    from rpent_interfaces.msg import RobotState

    return next_message(client.node, RobotState, "robot_state", STATE_QOS, 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", default="franka,so101")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = [row for arm_rows in for_each_arm(
        args.arms.split(","), lambda arm, logs: run_arm(arm, args.runs, logs))
        for row in arm_rows]
    print("arm, space            boundaries  gap p50  gap max  (control periods)  "
          "speed ratio min  median")
    for name, gaps, ratios in rows:
        print(f"{name:22s}{len(gaps):10d}  {np.median(gaps):7.2f}  {gaps.max():7.2f}"
              f"{'':20s}{ratios.min():5.2f}  {np.median(ratios):6.2f}")


if __name__ == "__main__":
    main()
