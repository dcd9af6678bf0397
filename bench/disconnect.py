"""How soon a real-arm node says its robot fell silent.

    source scripts/env.sh && python bench/disconnect.py [--runs 5] [--arms franka,so101]

For each run the robot goes silent while the node idles (the Franka: franky-sim is
killed; the SO-101: the emulated servos stop answering) and comes back afterwards.
Reports the time from going silent to the first ``robot_state`` that reports it (MODE_ERROR,
"no new state from the robot") reaching a subscriber (p50 / max), against the one-second
promise, with the node's default ``state_timeout`` (0.5 s).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from arms import for_each_arm, start_arm

STALE = "no new state from the robot"  # what robot_state says of a robot fallen silent


def run_arm(arm: str, runs: int, logs: Path) -> np.ndarray:
    from rpent_contract.client import RobotClient
    from rpent_common.processes import wait_until
    from rpent_contract.qos import STATE_QOS
    from rpent_interfaces.msg import RobotState

    robot = start_arm(arm, logs)
    client = RobotClient()
    states = []  # (arrival, message)
    client.node.create_subscription(RobotState, "robot_state",
                                    lambda m: states.append((time.monotonic(), m)), STATE_QOS)

    def stale(msg) -> bool:
        return msg.mode == RobotState.MODE_ERROR and any(STALE in e for e in msg.errors)

    latencies = []
    try:
        client.wait_ready(60)
        for run in range(runs):
            # Back from the last run: fresh state again (the recovery notice may remain).
            wait_until(lambda: states and not stale(states[-1][1]), 30,
                       what=f"{arm}: fresh robot_state before run {run + 1}")
            robot.silence()
            silent_at = time.monotonic()
            arrival = wait_until(lambda: next((t for t, m in list(states)
                                               if t > silent_at and stale(m)), None),
                                 10, what=f"{arm}: robot_state reporting the silent robot")
            latencies.append(arrival - silent_at)
            print(f"  {arm} run {run + 1}/{runs}: reported after "
                  f"{latencies[-1] * 1e3:.0f} ms", flush=True)
            robot.restore()
    finally:
        client.close()
        robot.stop()
    return np.array(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", default="franka,so101")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    arms = args.arms.split(",")
    results = for_each_arm(arms, lambda arm, logs: run_arm(arm, args.runs, logs))
    print("arm      runs  silent -> robot_state error  p50 ms  max ms  within 1 s")
    for arm, latencies in zip(arms, results):
        print(f"{arm:8s}{len(latencies):6d}{'':29s}{np.median(latencies) * 1e3:6.0f}  "
              f"{latencies.max() * 1e3:6.0f}  {int((latencies <= 1.0).sum())}/{len(latencies)}")


if __name__ == "__main__":
    main()
