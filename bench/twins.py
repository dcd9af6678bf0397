"""The arms' twins doing their tasks: success of the scripted planner (perception only,
the twin's operator judging) on each twin's task suite, with 95 % Wilson intervals, the
time per episode, and how well each twin's physics kept up with the wall clock.

    source scripts/env.sh && python bench/twins.py [--arms franka so101] [--seeds 0-9]

Every episode is a whole bring-up from launch arguments alone, as a user starts one:
``python -m rpent.start <arm> twin:=true twin_task:=T twin_seed:=S`` (the twin, its
cameras and SAM3 server, its operator, the unchanged robot node, perception and the agent),
in a ROS domain of its own. Figures per episode: the verdict in result.json, the wall time
from start to exit, and the twin's own report at exit (real-time factor, and the share of
the wall time spent stepping the physics). Episodes run one at a time: two twins on two
cores would measure the machine, not the twins.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rpent.eval.robots import parse_indices
from rpent.eval.stats import wilson
from rpent_common.processes import free_port_pair
from rpent_testkit.processes import isolate_ros_graph
from rpent_twins.scene import load_scene

REPORT = re.compile(r"real-time factor ([0-9.]+); stepping took ([0-9]+) %")


def episode(arm: str, task: str, seed: int, folder: Path, timeout: float) -> dict:
    run_dir = folder / f"{arm}-{task}-{seed}"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "rpent.start", arm, "twin:=true", f"twin_task:={task}",
         f"twin_seed:={seed}", f"twin_port:={free_port_pair()}", f"run_dir:={run_dir}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    wall = time.monotonic() - started
    result = run_dir / "result.json"
    success = json.loads(result.read_text()).get("task_success") if result.is_file() else None
    report = REPORT.findall(proc.stdout)
    record = {"arm": arm, "task": task, "seed": seed, "success": bool(success),
              "completed": success is not None, "seconds": wall, "exit": proc.returncode,
              "rtf": float(report[-1][0]) if report else None,
              "stepping": float(report[-1][1]) / 100 if report else None}
    if success is None:
        (folder / f"{arm}-{task}-{seed}.log").write_text(proc.stdout)
    return record


def table(records: list, arm: str) -> None:
    tasks = sorted({r["task"] for r in records}, key=[r["task"] for r in records].index)
    print(f"\n{arm}: {len(records)} episodes")
    print(f"  {'task':<28} {'success':>9}  {'95 % Wilson':>15}")
    for task in tasks + ["all"]:
        rows = [r for r in records if task in ("all", r["task"])]
        k = sum(r["success"] for r in rows)
        lo, hi = wilson(k, len(rows))
        print(f"  {task:<28} {k:>3}/{len(rows):<3} {100 * k / len(rows):5.1f} %  "
              f"[{100 * lo:4.1f}, {100 * hi:4.1f}]")
    rtf = [r["rtf"] for r in records if r["rtf"] is not None]
    steps = [r["stepping"] for r in records if r["stepping"] is not None]
    seconds = [r["seconds"] for r in records]
    stepping = 100 * sum(steps) / max(1, len(steps))
    print(f"  time per episode {sum(seconds) / len(seconds):.1f} s (start-up included); "
          f"real-time factor mean {sum(rtf) / max(1, len(rtf)):.2f} (min "
          f"{min(rtf, default=float('nan')):.2f}); stepping {stepping:.0f} % of the wall "
          f"time; {sum(not r['completed'] for r in records)} episode(s) ended without a "
          "result.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="+", default=["franka", "so101"])
    parser.add_argument("--seeds", default="0-9", help="seeds per task, e.g. 0-9 or 0,3")
    parser.add_argument("--tasks", default="", help="task names (comma-separated); "
                                                   "default: every task of the arm's scene")
    parser.add_argument("--timeout", type=float, default=300.0, help="s per episode")
    parser.add_argument("--out", default="", help="keep run folders and results.jsonl here")
    parser.add_argument("--tables", nargs="+", default=[], metavar="RESULTS_JSONL",
                        help="only print the tables of earlier runs' results.jsonl files; an "
                        "episode run again (same arm, task, seed) counts as its last run")
    args = parser.parse_args()
    if args.tables:
        latest = {}
        for path in args.tables:
            for line in Path(path).read_text().splitlines():
                r = json.loads(line)
                latest[(r["arm"], r["task"], r["seed"])] = r
        for arm in dict.fromkeys(k[0] for k in latest):
            table([r for k, r in latest.items() if k[0] == arm], arm)
        return
    isolate_ros_graph()
    folder = Path(args.out or tempfile.mkdtemp(prefix="bench-twins-"))
    folder.mkdir(parents=True, exist_ok=True)
    seeds = parse_indices(args.seeds, 10 ** 6, "seeds")
    results = folder / "results.jsonl"
    for arm in args.arms:
        scene = load_scene(arm)
        tasks = args.tasks.split(",") if args.tasks else [t.name for t in scene.tasks]
        records, total = [], len(tasks) * len(seeds)
        for task in tasks:
            for seed in seeds:
                record = episode(arm, task, seed, folder, args.timeout)
                records.append(record)
                with results.open("a") as f:
                    f.write(json.dumps(record) + "\n")
                done = len(records)
                print(f"[{arm} {done}/{total}] {task} seed {seed}: "
                      f"{'success' if record['success'] else 'failure'} in "
                      f"{record['seconds']:.0f} s (rtf {record['rtf']})", flush=True)
        table(records, arm)
    print(f"\nrun folders and results.jsonl: {folder}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
