"""Perception figures: the time of a ``locate`` (and a ``segment``) call on a non-privileged
LIBERO robot, and the scripted planner's success on libero_object with the simulator's
object poses versus perception only.

    source scripts/env.sh && python bench/perception.py [--calls 20]
    source scripts/env.sh && python bench/perception.py --success --init-states 0-4 \
        --out evals/perception-bench

Timing: a libero_object task 0 robot (privileged:=false, two 128x128 cameras with depth)
and a perception node (backend sim) in a domain of their own; every call is a service
round trip from this process, for each object of the scene, cameras all (locate) or the
front one (segment).

Success (--success, about an hour per 50 episodes on a 2-core CPU): two ``rpent eval``
runs over every libero_object task and the given initial states, the scripted planner's
pick-and-place heuristic (am_backend:=none) with perception only (privileged:=false
perception:=sim: locate, then the operator's verdict, which the simulator gives) and with
the simulator's object poses, reported with 95% Wilson intervals.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rpent_testkit.processes import NodeProcess, isolate_ros_graph

QUERIES = ("alphabet soup", "basket", "salad dressing", "cream cheese", "milk",
           "tomato sauce", "butter")


def call_times(calls: int) -> dict:
    import rclpy

    from rpent_contract.client import RobotClient, wait_future
    from rpent_interfaces.srv import Locate, Segment

    isolate_ros_graph()
    rclpy.init()
    with tempfile.TemporaryDirectory() as logs:
        robot = NodeProcess("rpent_env_sim", "libero_node",
                            {"suite": "libero_object", "task_id": 0, "privileged": False},
                            Path(logs))
        eyes = NodeProcess("rpent_perception", "perception_node", {"backend": "sim"},
                           Path(logs))
        client = RobotClient()
        try:
            client.wait_ready(180)
            services = {"locate": client.node.create_client(Locate, "perception/locate"),
                        "segment": client.node.create_client(Segment, "perception/segment")}
            for service in services.values():
                if not service.wait_for_service(timeout_sec=120):
                    sys.exit(f"perception node did not come up:\n{eyes.log_tail()}")
            times = {"locate": [], "segment": []}
            for i in range(calls):
                query = QUERIES[i % len(QUERIES)]
                for kind, request in (("locate", Locate.Request(query=query)),
                                      ("segment", Segment.Request(camera="agentview",
                                                                  query=query))):
                    started = time.perf_counter()
                    answer = wait_future(services[kind].call_async(request), 30, kind)
                    times[kind].append(time.perf_counter() - started)
                    if not answer.success:
                        sys.exit(f"{kind} '{query}' failed: {answer.message}")
                print(f"\r{i + 1}/{calls} calls", end="", file=sys.stderr, flush=True)
            print(file=sys.stderr)
            return times
        finally:
            client.close()
            eyes.stop()
            robot.stop()
            rclpy.try_shutdown()


def success_rates(init_states: str, out_dir: str) -> None:
    # The heuristic alone on both sides (no action model first): the difference is what
    # perception costs against the simulator's poses. Perception first: it is the new figure.
    modes = (("perception only", ("privileged:=false", "perception:=sim", "am_backend:=none")),
             ("object poses (privileged)", ("am_backend:=none",)))
    print("| agent sees | episodes | successes | rate | 95% Wilson |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for (label, extra), folder in zip(modes, ("perception", "privileged")):
            # A kept folder makes a rerun resume, and its reports stay to read.
            out = Path(out_dir or tmp) / folder
            proc = subprocess.run(
                [sys.executable, "-m", "rpent.eval", "--suites", "libero_object", "--tasks",
                 "all", "--init-states", init_states, "--out", str(out), "--keep", "none",
                 "planner:=scripted", *extra])
            if proc.returncode not in (0, 1):
                sys.exit(f"rpent eval failed ({proc.returncode})")
            records = [json.loads(line) for line in
                       (out / "results.jsonl").read_text().splitlines()]
            report(label, records)


def report(label: str, records: list) -> None:
    from rpent.eval.stats import wilson

    done = [r for r in records if r["outcome"] != "error"]
    wins = sum(r["outcome"] == "success" for r in done)
    lo, hi = wilson(wins, len(done))
    print(f"| {label} | {len(done)} | {wins} | {100 * wins / max(1, len(done)):.1f}% | "
          f"[{100 * lo:.1f}, {100 * hi:.1f}] |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=20, help="timed calls of each kind; 0 = none")
    p.add_argument("--success", action="store_true", help="also run the success comparison")
    p.add_argument("--init-states", default="0-4")
    p.add_argument("--out", default="", help="keep the two evaluations here (default: a "
                   "temporary folder)")
    opts = p.parse_args()
    for kind, values in (call_times(opts.calls) if opts.calls else {}).items():
        ms = np.asarray(values) * 1e3
        print(f"{kind:8s} {len(ms)} calls: p50 {np.percentile(ms, 50):6.1f} ms  p95 "
              f"{np.percentile(ms, 95):6.1f} ms  max {ms.max():6.1f} ms")
    if opts.success:
        success_rates(opts.init_states, opts.out)


if __name__ == "__main__":
    main()
