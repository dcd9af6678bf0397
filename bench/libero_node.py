"""LIBERO node step rate through execute_chunk vs raw LiberoSim stepping, in one run.

    source scripts/env.sh && python bench/libero_node.py [--steps 200]

Raw stepping with 0, 1 and 2 cameras (128x128, the same render quality); the node with
nobody looking at its cameras (it renders nothing), with a subscriber to both cameras at
every step (camera_rate 0) and at camera_rate 10 and 5 Hz. Reports steps/s for each and
the ratio to raw stepping with as many renders, the interval between execute_chunk
feedback messages (per-step latency as a client sees it), the time from sending a goal
to its first feedback, and the reset service round trip.
"""
from __future__ import annotations

import argparse
import tempfile
import threading
import time

import numpy as np
from sensor_msgs.msg import Image

from libero_raw import _ACTION, raw_step_rate
from rpent_common.processes import wait_until
from rpent_testkit.processes import NodeProcess, isolate_ros_graph

SUITE, TASK, CAMERAS, SIZE, QUALITY = "libero_object", 0, ["agentview", "robot0_eye_in_hand"], 128, "low"


def percentiles(values_s) -> str:
    ms = np.asarray(values_s) * 1e3
    return f"p50 {np.percentile(ms, 50):6.1f} ms  p99 {np.percentile(ms, 99):6.1f} ms"


def node_figures(steps: int, camera_rate: float, watched: bool) -> dict:
    import rclpy

    from rpent_contract.client import RobotClient
    from rpent_contract.qos import IMAGE_QOS

    params = {"suite": SUITE, "task_id": TASK, "cameras": CAMERAS, "image_height": SIZE,
              "image_width": SIZE, "render_quality": QUALITY, "max_episode_steps": steps + 50,
              "camera_rate": camera_rate}
    with tempfile.TemporaryDirectory() as logs:
        node = NodeProcess("rpent_env_sim", "libero_node", params, logs, name="bench_libero")
        rclpy.init()
        client = RobotClient()
        try:
            print("  waiting for the node ...", flush=True)
            client.wait_ready(180)
            frames = []
            if watched:
                for camera in CAMERAS:
                    client.node.create_subscription(
                        Image, f"camera/{camera}/image_raw", frames.append, IMAGE_QOS)
                # Until the node sees the subscribers and sends frames.
                wait_until(lambda: frames, 10, what="a camera frame")
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
                "frames": len(frames),
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
    print(f"{SUITE} task {TASK}: cameras {SIZE}x{SIZE}, render quality '{QUALITY}', "
          f"{args.steps} steps")
    raw = {}
    for n in (0, 1, 2):
        print(f"raw LiberoSim.step, {n} camera(s) ...", flush=True)
        raw[n] = raw_step_rate(SUITE, TASK, CAMERAS[:n], SIZE, SIZE, QUALITY, args.steps)
    print()
    for n, figures in raw.items():
        print(f"raw stepping, {n} camera(s)        {figures['steps_per_s']:6.1f} steps/s "
              f"(p50 {figures['ms_per_step_p50']:.1f} ms, p99 {figures['ms_per_step_p99']:.1f} ms)",
              flush=True)
    # (label, camera_rate, watched, raw stepping to compare with: renders per step)
    for label, rate, watched, renders in (
            ("nobody looks", 0.0, False, 0.0), ("watched, every step", 0.0, True, 1.0),
            ("watched, camera_rate 10", 10.0, True, 0.5),
            ("watched, camera_rate 5", 5.0, True, 0.25)):
        print(f"libero_node execute_chunk, {label} ...", flush=True)
        node = node_figures(args.steps, rate, watched)
        # Raw stepping with that share of steps rendered (both cameras), from the figures.
        per_step = (1 - renders) / raw[0]["steps_per_s"] + renders / raw[2]["steps_per_s"]
        print(f"  node execute_chunk    {node['steps_per_s']:6.1f} steps/s, "
              f"{node['frames']} frames received; ratio to raw stepping with as many "
              f"renders {node['steps_per_s'] * per_step:5.2f}")
        print(f"  feedback interval     {percentiles(node['feedback_interval'])}")
        print(f"  goal -> 1st feedback  {node['first_feedback_s'] * 1e3:6.1f} ms")
        print(f"  reset round trip      {percentiles(node['reset_s'])}", flush=True)


if __name__ == "__main__":
    main()
