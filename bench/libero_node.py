"""LIBERO node step rate through execute_chunk vs raw LiberoSim stepping, in one run.

    source scripts/env.sh && python bench/libero_node.py [--steps 200]

Both sides render the same two 128x128 cameras at the same quality. Reports steps/s for
each and their ratio, the interval between execute_chunk feedback messages (per-step
latency as a client sees it), the time from sending a goal to its first feedback, and
the reset service round trip.
"""
from __future__ import annotations

import argparse
import tempfile
import threading
import time

import numpy as np

from libero_raw import _ACTION, raw_step_rate
from rpent_contract.processes import NodeProcess, isolate_ros_graph

SUITE, TASK, CAMERAS, SIZE, QUALITY = "libero_object", 0, ["agentview", "robot0_eye_in_hand"], 128, "low"


def percentiles(values_s) -> str:
    ms = np.asarray(values_s) * 1e3
    return f"p50 {np.percentile(ms, 50):6.1f} ms  p99 {np.percentile(ms, 99):6.1f} ms"


def node_figures(steps: int) -> dict:
    import rclpy

    from rpent_contract.client import RobotClient

    params = {"suite": SUITE, "task_id": TASK, "cameras": CAMERAS, "image_height": SIZE,
              "image_width": SIZE, "render_quality": QUALITY, "max_episode_steps": steps + 50}
    with tempfile.TemporaryDirectory() as logs:
        node = NodeProcess("rpent_env_sim", "libero_node", params, logs, name="bench_libero")
        rclpy.init()
        client = RobotClient()
        try:
            print("  waiting for the node ...", flush=True)
            client.wait_ready(180)
            resets = []
            for _ in range(5):
                t0 = time.perf_counter()
                assert client.reset().success
                resets.append(time.perf_counter() - t0)

            arrivals, first = [], threading.Event()

            def on_feedback(_fb):
                arrivals.append(time.perf_counter())
                first.set()

            rows = np.tile(_ACTION, (steps, 1))
            print(f"  executing a {steps}-step chunk ...", flush=True)
            t0 = time.perf_counter()
            status, result = client.execute_chunk(rows, "libero_osc_delta",
                                                  feedback=on_feedback, timeout=600)
            total = time.perf_counter() - t0
            assert result.steps_executed == steps, result.message
            return {
                "steps_per_s": steps / total,
                "feedback_interval": np.diff(arrivals),
                "first_feedback_s": arrivals[0] - t0,
                "reset_s": resets,
            }
        finally:
            client.close()
            rclpy.try_shutdown()
            node.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    isolate_ros_graph()
    print(f"{SUITE} task {TASK}: 2 cameras {SIZE}x{SIZE}, render quality '{QUALITY}', "
          f"{args.steps} steps")
    print("raw LiberoSim.step ...", flush=True)
    raw = raw_step_rate(SUITE, TASK, CAMERAS, SIZE, SIZE, QUALITY, args.steps)
    print("libero_node execute_chunk ...", flush=True)
    node = node_figures(args.steps)
    print()
    print(f"raw stepping          {raw['steps_per_s']:6.1f} steps/s "
          f"(p50 {raw['ms_per_step_p50']:.1f} ms, p99 {raw['ms_per_step_p99']:.1f} ms)")
    print(f"node execute_chunk    {node['steps_per_s']:6.1f} steps/s")
    print(f"ratio node / raw      {node['steps_per_s'] / raw['steps_per_s']:6.2f}  (goal >= 0.9)")
    print(f"feedback interval     {percentiles(node['feedback_interval'])}")
    print(f"goal -> 1st feedback  {node['first_feedback_s'] * 1e3:6.1f} ms")
    print(f"reset round trip      {percentiles(node['reset_s'])}")


if __name__ == "__main__":
    main()
