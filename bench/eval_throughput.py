"""Evaluation throughput: episodes per hour with 1 and 2 workers, and the harness's steps
per second against raw LIBERO stepping with the same render settings (goal >= 0.9).

    source scripts/env.sh && python bench/eval_throughput.py [--workers 1 2] [--init-states 0-2]
    python bench/eval_throughput.py --ray --workers 2   # also as Ray cells on 2 Ray nodes here

Each run is a fresh ``rpent eval`` (scripted planner, the default cameras at 128x128,
render quality low) into a temporary folder: with the scripted action model for each
worker count, then with no model (the planner's move_to / gripper calls only). Figures:
- episodes/hour: episodes over the whole command's wall time, worker start-up included;
- steps/s per worker: simulator steps over the time workers spent in episodes (reset,
  agent run, verdict, files), and its ratio to raw stepping;
- harness share: the part of an episode's time outside the agent's own run (reset, goal
  round trips, waiting for the verdict, pruning files), i.e. what the harness adds.

``--ray`` adds, for each worker count, the same evaluation with ``--cluster`` on a Ray test
cluster of that many nodes on this machine (each node as many CPUs as a worker asks, one
cell per node): on the same cores, the difference is what Ray's engine costs.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from libero_raw import raw_step_rate


def run_eval(workers: int, tasks: str, init_states: str, *extra: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ev"
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "rpent.eval", "--suites", "libero_object", "--tasks", tasks,
             "--init-states", init_states, "--workers", str(workers), "--out", str(out),
             "--keep", "none", "planner:=scripted", *extra], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            sys.exit(f"rpent eval failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
        records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        agent = sum(json.loads((Path(r["run_dir"]) / "transcript.json").read_text())
                    ["duration_s"] for r in records)
    steps = sum(r["steps"] for r in records)
    busy = sum(r["wall_time_s"] for r in records)
    return {"workers": workers, "episodes": len(records), "wall_s": wall,
            "episodes_per_hour": len(records) / wall * 3600,
            "successes": sum(r["outcome"] == "success" for r in records),
            "steps": steps, "steps_per_s_per_worker": steps / busy,
            "steps_per_s_total": steps / wall, "harness_share": 1 - agent / busy}


def on_ray(workers: int, tasks: str, init_states: str) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        for _ in range(workers - 1):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        return run_eval(workers, tasks, init_states, "--cluster", cluster.address)
    finally:
        ray.shutdown()
        cluster.shutdown()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--tasks", default="0-1")
    p.add_argument("--init-states", default="0-2")
    p.add_argument("--ray", action="store_true",
                   help="also run each worker count as Ray cells, one Ray node each")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip the model-free run (am_backend:=none)")
    opts = p.parse_args()
    raw = raw_step_rate("libero_object", 0, ("agentview", "robot0_eye_in_hand"), 128, 128,
                        "low", 200)
    print(f"raw LiberoSim.step, 2 cameras 128x128, low quality: {raw['steps_per_s']:.1f} "
          "steps/s", flush=True)
    print("| model | workers | episodes | successes | wall s | episodes/hour | steps/s per "
          "worker | ratio to raw | steps/s all workers | harness share |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    runs = [("scripted", n, ()) for n in opts.workers]
    runs += [("scripted, Ray", n, None) for n in opts.workers if opts.ray]
    runs += [] if opts.no_baseline else [("none", 1, ("am_backend:=none",))]
    for model, n, extra in runs:
        r = on_ray(n, opts.tasks, opts.init_states) if extra is None else \
            run_eval(n, opts.tasks, opts.init_states, *extra)
        print(f"| {model} | {n} | {r['episodes']} | {r['successes']} | {r['wall_s']:.0f} | "
              f"{r['episodes_per_hour']:.0f} | {r['steps_per_s_per_worker']:.1f} | "
              f"{r['steps_per_s_per_worker'] / raw['steps_per_s']:.2f} | "
              f"{r['steps_per_s_total']:.1f} | {100 * r['harness_share']:.1f}% |", flush=True)


if __name__ == "__main__":
    main()
