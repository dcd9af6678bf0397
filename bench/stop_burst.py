"""How fast every robot answers a burst of stop and cancel requests while a chunk runs.

    source scripts/env.sh && python bench/stop_burst.py [--robots libero,franka,so101]
        [--rounds 3] [--requests 50] [--clients 3]

``floor`` is a bare rclpy server of the same two services in a process of its own: what
answering a burst costs in rclpy on this machine, with nothing else to do. Each client has
one answered call first, so DDS discovering it is not counted. Per round on a
robot: a long back-and-forth chunk starts; once it runs, ``--requests`` stop calls go
out at once from ``--clients`` client nodes; then a new chunk, and as many cancels (the
running goal's first, then goals that do not exist). Reports each robot's control period
and the answer latencies (p50 / p99 / max, from sending to the answer), against the promise
that a stop or cancel is answered within one control period, and how many chunk steps the
robot carried out after the answer came (by its own stamps on executed_actions: 1 is the step
in flight).
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


# The floor: the same services answering at once, nothing else in the process (the same
# executor as a robot node, the same QoS), so the table shows what rclpy itself costs.
FLOOR_SERVER = """
import rclpy
from action_msgs.srv import CancelGoal
from rclpy.callback_groups import ReentrantCallbackGroup
from rpent_contract.executors import MultiThreadedExecutor
from std_srvs.srv import Trigger
from rpent_contract.names import EXECUTE_CHUNK_ACTION, STOP_SERVICE
from rpent_contract.qos import REQUEST_QOS
rclpy.init()
node = rclpy.create_node("stop_burst_floor")
group = ReentrantCallbackGroup()
node.create_service(Trigger, STOP_SERVICE, lambda q, r: r, qos_profile=REQUEST_QOS,
                    callback_group=group)
node.create_service(CancelGoal, EXECUTE_CHUNK_ACTION + "/_action/cancel_goal",
                    lambda q, r: r, qos_profile=REQUEST_QOS, callback_group=group)
executor = MultiThreadedExecutor(num_threads=6)
executor.add_node(node)
executor.spin()
"""


def floor(rounds: int, requests: int, clients: int, logs: Path) -> dict:
    import sys

    from rpent_common.processes import LoggedProcess
    from rpent_testkit.bursts import Burst
    from unique_identifier_msgs.msg import UUID

    server = LoggedProcess([sys.executable, "-c", FLOOR_SERVER], logs / "floor.log", "floor")
    try:
        with Burst(clients=clients) as burst:
            for _ in range(rounds):
                burst.stop(requests)
                burst.cancel(UUID(), requests)
            return {"period": float("nan"), "latencies": burst.latencies,
                    "after": {"stop": [0], "cancel": [0]}}
    finally:
        server.stop()


def start_robot(robot: str, logs: Path):
    """The robot's node and a function that stops it (and its stand-in)."""
    from rpent_testkit.processes import NodeProcess

    if robot == "libero":
        node = NodeProcess("rpent_env_sim", "libero_node", {}, logs, name="bench_libero",
                           params_file=ROOT / "config/libero_sim.yaml")
        return node.stop
    from arms import start_arm

    return start_arm(robot, logs).stop


def run_robot(robot: str, rounds: int, requests: int, clients: int, logs: Path) -> dict:
    from rpent_contract.client import RobotClient
    from rpent_contract.control_space import array_to_chunk
    from rpent_common.processes import wait_until
    from rpent_interfaces.action import ExecuteChunk
    from rpent_testkit.bursts import Burst, now_stamp, wiggle

    stop_robot = start_robot(robot, logs)
    client = RobotClient()
    after = {"stop": [], "cancel": []}
    try:
        info = client.wait_ready(180)
        space, rows = wiggle(info, 400)
        goal = ExecuteChunk.Goal()
        array_to_chunk(rows, space, goal.chunk)
        with Burst(clients=clients) as burst:
            burst.executed.wait_for_robot()
            for r in range(rounds):
                for kind in ("stop", "cancel"):
                    seen = []
                    goal.chunk.header.stamp = now_stamp()
                    run = client.send("execute_chunk", goal,
                                      feedback=lambda fb: seen.append(fb.feedback.step))
                    wait_until(lambda: len(seen) >= 3, 60, what=f"{robot}: the chunk to run")
                    if kind == "stop":
                        burst.stop(requests)
                        answered = min(burst.answered_at)
                    else:
                        burst.cancel(run.handle.goal_id, requests)
                        answered = burst.answered_at[0]  # the running goal's cancel
                    _, result = run.result(30)
                    after[kind].append(burst.executed.run_after(
                        goal.chunk.header.stamp, result.steps_executed, answered))
                    client.reset(timeout=120)
                print(f"  {robot} round {r + 1}/{rounds}: slowest stop "
                      f"{max(burst.latencies['stop'][-requests:]) * 1e3:.0f} ms, slowest "
                      f"cancel {max(burst.latencies['cancel'][-requests:]) * 1e3:.0f} ms",
                      flush=True)
            return {"period": 1.0 / info.control_rate, "latencies": burst.latencies,
                    "after": after}
    finally:
        client.close()
        stop_robot()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--robots", default="floor,libero,franka,so101",
                        help="floor: a bare rclpy server of the same services")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--clients", type=int, default=3)
    args = parser.parse_args()
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from rpent_testkit.processes import isolate_ros_graph

    isolate_ros_graph()
    import rclpy

    rclpy.init()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as logs:
            for robot in args.robots.split(","):
                print(f"{robot}: {args.rounds} rounds of {args.requests} stops and "
                      f"{args.requests} cancels from {args.clients} clients", flush=True)
                folder = Path(logs) / robot
                folder.mkdir()
                if robot == "floor":
                    result = floor(args.rounds, args.requests, args.clients, folder)
                else:
                    result = run_robot(robot, args.rounds, args.requests, args.clients, folder)
                rows.append((robot, result))
    finally:
        rclpy.try_shutdown()
    print("\n| robot | control period | request | answer p50 | p99 | max | within a period "
          "| steps after the answer (max) |")
    print("|---|---|---|---|---|---|---|---|")
    for robot, r in rows:
        for kind in ("stop", "cancel"):
            lat = np.array(r["latencies"][kind]) * 1e3
            period = "-" if robot == "floor" else f"{r['period'] * 1e3:.0f} ms"
            within = "-" if robot == "floor" else f"{np.mean(lat <= r['period'] * 1e3):.0%}"
            after = "-" if robot == "floor" else max(r["after"][kind])
            print(f"| {robot} | {period} | {kind} | {np.percentile(lat, 50):.1f} ms | "
                  f"{np.percentile(lat, 99):.1f} ms | {lat.max():.1f} ms | {within} | {after} |")


if __name__ == "__main__":
    main()
