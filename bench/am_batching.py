"""``predict`` throughput and latency with concurrent clients, batched vs unbatched.

    source scripts/env.sh && python bench/am_batching.py [--seconds 20] [--clients 1 4 8]

The model node serves a tiny random-weight LeRobot ACT (rpent_testkit.tiny_act: two 128x128
cameras, ResNet-18 backbones) on the CPU, in a process of its own, once with
``max_batch:=1`` (every goal its own forward pass, as before batching) and once with
``max_batch:=8``. Each client is a thread that sends single-chunk goals carrying its own
observation back to back; the figures are chunks per second over all clients and the
latency of a goal, from sending it to its result.
"""
from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from rpent_testkit.processes import isolate_ros_graph

STATE = ("ee_x", "ee_y", "ee_z", "ee_qx", "ee_qy", "ee_qz", "ee_qw", "gripper_width")


def _serve(folder: str, max_batch: int, wait_ms: float) -> None:
    from rpent_am.am_node import main
    from rpent_am.backends.lerobot_backend import LeRobotBackend
    from rpent_am.model_io import ModelIO
    from rpent_env_sim.libero_node import LIBERO_OSC_DELTA
    from rpent_testkit import tiny_act

    backend = LeRobotBackend(folder, action_space=LIBERO_OSC_DELTA, device="cpu",
                             io=ModelIO.simple("tiny_act", tiny_act.CAMERAS, STATE))
    main(args=["--ros-args", "--log-level", "warn", "-p", f"max_batch:={max_batch}",
               "-p", f"max_batch_wait_ms:={wait_ms}"], backend=backend)


def _goal(seed: int):
    from rpent_am.observation import to_msg
    from rpent_am.policy import PolicyObservation
    from rpent_interfaces.action import Predict
    from rpent_testkit import tiny_act

    rng = np.random.default_rng(seed)
    obs = PolicyObservation({c: rng.integers(0, 255, (128, 128, 3), dtype=np.uint8)
                             for c in tiny_act.CAMERAS}, rng.normal(size=8) * 0.1, STATE)
    goal = Predict.Goal(instruction="pick", mode=Predict.Goal.MODE_SINGLE, timeout=60.0,
                        client_id=f"bench{seed}")
    to_msg(obs, goal.observation)
    return goal


def _load(model, clients: int, seconds: float) -> tuple:
    """Chunks/s, latencies (ms) and batch sizes of ``clients`` closed-loop clients."""
    from action_msgs.msg import GoalStatus

    goals = [_goal(i) for i in range(clients)]
    latencies: list = [[] for _ in goals]
    batches: list = [[] for _ in goals]
    errors: list = []
    stop = time.monotonic() + seconds

    def client(i: int) -> None:
        while time.monotonic() < stop and not errors:
            started = time.perf_counter()
            status, result = model.send(goals[i]).result(120)
            if status != GoalStatus.STATUS_SUCCEEDED:
                errors.append(result.message)
                return
            latencies[i].append((time.perf_counter() - started) * 1e3)
            batches[i].append(result.max_batch_size)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - started
    if errors:
        raise SystemExit(f"predict failed: {errors[0]}")
    done = sum(len(x) for x in latencies)
    return done / took, np.concatenate(latencies), np.concatenate(batches)


def run(seconds: float, counts: list, wait_ms: float) -> None:
    from action_model import model_in_process
    from rpent_testkit import tiny_act

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = str(tiny_act.build(Path(tmp) / "act"))
        for max_batch in (1, 8):
            with model_in_process(_serve, (folder, max_batch, wait_ms), "bench_batching") as \
                    (model, _):
                meta = model.meta(timeout=120)
                print(f"model node: {meta.backend} {meta.checkpoint_id}, max_batch "
                      f"{meta.max_batch}, max_batch_wait_ms {wait_ms:g}", flush=True)
                _load(model, max(counts), 3.0)  # warm-up: torch's first passes are slow
                for clients in counts:
                    rate, ms, sizes = _load(model, clients, seconds)
                    rows.append((max_batch, clients, rate, ms, sizes))
                    print(f"  {clients} client(s): {rate:6.1f} chunks/s, p50 "
                          f"{np.percentile(ms, 50):6.1f} ms, p95 {np.percentile(ms, 95):6.1f} "
                          f"ms, mean batch {sizes.mean():.2f}", flush=True)
    print("\n| clients | unbatched chunks/s | batched chunks/s | unbatched p95 | batched p95 "
          "| mean batch |\n|---|---|---|---|---|---|")
    for clients in counts:
        one = next(r for r in rows if r[:2] == (1, clients))
        many = next(r for r in rows if r[:2] == (8, clients))
        print(f"| {clients} | {one[2]:.1f} | {many[2]:.1f} | {np.percentile(one[3], 95):.1f} ms "
              f"| {np.percentile(many[3], 95):.1f} ms | {many[4].mean():.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="how long each client count runs")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--wait-ms", type=float, default=5.0,
                        help="the batched node's max_batch_wait_ms (its default: 5)")
    args = parser.parse_args()
    isolate_ros_graph()
    run(args.seconds, args.clients, args.wait_ms)


if __name__ == "__main__":
    main()
