"""``rpent eval``: success rates of a planner and action model over LIBERO suites or an
arm's twin.

    rpent eval --suites libero_object --tasks 0-4 --init-states 0-9 planner:=scripted
    rpent eval --workers 2 --out evals/api model:=anthropic:claude-sonnet-5
    rpent eval --suites franka_tabletop --init-states 0-9    # the Franka twin's tasks
    rpent eval --cluster auto --workers 16 ...  # workers as Ray actors on a cluster
    rpent eval report evals/api                 # rewrite report.md / .json / .png
    rpent eval compare evals/base evals/new     # two evaluations side by side
    rpent eval --list                           # suites, tasks and initial states

Flags choose the episodes and run the harness; ``name:=value`` arguments are those of the
robot's bring-up (``libero_sim``, or on a twin suite ``franka`` / ``so101``): planner,
model, base_url, am_backend, am_checkpoint, am_endpoint, am_model_io, action_model,
privileged, max_turns, max_episode_steps, robots_file, twin_camera_rate, ..., with the same
defaults. A twin suite's initial states are placement seeds of its items. Rerunning the
same command resumes: finished episodes are skipped.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rpent.bringup import BUILT_IN

from .report import compare, compare_markdown, write_report
from .results import config_hash, load_records
from .robots import TWIN_WORKER_CORES, listing, suites_for
from .workers import EpisodeLimits

# Bring-up arguments the harness sets itself, per worker or per episode.
HARNESS_OWNED = {
    "suite": "--suites", "task_id": "--tasks", "init_state_index": "--init-states",
    "seed": "--seeds", "namespace": "(one per worker)", "output_dir": "--out",
    "run_dir": "--out", "dashboard": "(not during evaluations)", "record": "--record",
    "instruction": "(each task's own)",
}


def list_suites() -> int:
    print("\n".join(listing()))
    return 0


def bringup_args(items: list[str], suites) -> dict:
    """The bring-up arguments given, with the defaults of the robot's bring-up for the rest,
    less those the harness sets."""
    owned = {**HARNESS_OWNED, **suites.owned}
    given = {}
    for item in items:
        name, sep, value = item.partition(":=")
        if not sep:
            raise ValueError(f"arguments are name:=value (as with ros2 launch), got '{item}'")
        if name in owned:
            raise ValueError(f"'{name}' is set by the evaluation: use {owned[name]}")
        given[name] = value
    resolved = BUILT_IN[suites.bringup].resolve(given)
    return {k: v for k, v in resolved.items() if k not in owned}


def _run_parser() -> argparse.ArgumentParser:
    from .runner import default_workers

    p = argparse.ArgumentParser(
        prog="rpent eval", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--suites", default="libero_object",
                   help="comma-separated LIBERO / LIBERO-PRO / LIBERO-Plus (liberoplus_*) "
                        "suites (default libero_object), or one arm's twin suites "
                        "(franka_tabletop, so101_tabletop, a scene YAML)")
    p.add_argument("--tasks", default="all", help="task ids: all, 3, 0-9, 0,2,5-7")
    p.add_argument("--dimensions", default="all",
                   help="LIBERO-Plus suites: only the chosen tasks that perturb one of these "
                        "(comma-separated; --list names them), e.g. camera,language")
    p.add_argument("--init-states", default="all",
                   help="initial-state indices (default all: LIBERO records 50 per task; on "
                        "a twin, placement seeds 0-49)")
    p.add_argument("--seeds", default="0", help="simulator seeds (default 0; LIBERO only)")
    p.add_argument("--workers", type=int,
                   help="parallel robot + agent pairs (default: what this machine can run, "
                        f"here {default_workers(1)} on LIBERO, "
                        f"{default_workers(TWIN_WORKER_CORES)} on a twin)")
    p.add_argument("--out", help="evaluation folder (default evals/<suites>-<config hash>); "
                                 "an existing one is resumed")
    p.add_argument("--keep", choices=("failed", "all", "none"), default="failed",
                   help="keep videos and bags of these episodes (default failed)")
    p.add_argument("--record", action="store_true", help="record a bag of every episode")
    p.add_argument("--retry-errors", action="store_true",
                   help="rerun episodes recorded as errors when resuming")
    p.add_argument("--episode-timeout", type=float, default=1800.0,
                   help="s an episode may take before it counts as hung (default 1800)")
    p.add_argument("--startup-timeout", type=float, default=300.0,
                   help="s a worker may take to start (default 300)")
    p.add_argument("--cluster", metavar="ADDRESS",
                   help="run the workers as Ray actors on this cluster ('auto': the one "
                        "ray start runs here; host:port; ray://host:port); the workers of "
                        "one node share an action-model node there. Default: this machine")
    p.add_argument("--cell-cpus", type=float,
                   help="CPUs a worker asks of Ray (default: 1 on LIBERO, "
                        f"{TWIN_WORKER_CORES} on a twin)")
    p.add_argument("--model-gpus", type=float, default=0.0,
                   help="GPUs the action-model node of each Ray node asks of Ray (default 0)")
    p.add_argument("--list", action="store_true", help="list suites and tasks, then exit")
    p.add_argument("args", nargs="*", metavar="name:=value",
                   help="the robot's bring-up arguments (planner:=, model:=, am_backend:=, "
                        "...)")
    return p


def run_main(argv: list[str]) -> int:
    from .runner import EvalConfig, Evaluation, default_workers

    opts = _run_parser().parse_args(argv)
    if opts.list:
        return list_suites()
    try:
        names = [s for s in opts.suites.split(",") if s]
        suites = suites_for(names)
        args = bringup_args(opts.args, suites)
        episodes = suites.select(names, opts.tasks, opts.init_states, opts.seeds,
                                 opts.dimensions)
        limits = EpisodeLimits(int(args["max_turns"]), int(args["max_episode_steps"]),
                               opts.episode_timeout)
        resources, model_resources = {}, {}
        if opts.cluster:
            if args["action_model"]:
                raise ValueError("--cluster: every Ray node runs its own action-model node "
                                 "(its ROS graph stays on its host), so give am_backend:= "
                                 "(and its settings), not action_model:=")
            from .cluster import connect

            resources = {"num_cpus": suites.worker_cores if opts.cell_cpus is None
                         else opts.cell_cpus}
            # The model node's CPUs are the cells' (they wait on it); no CPU is held for it,
            # so a node whose CPUs the cells hold still takes its model.
            model_resources = {"num_cpus": 0, "num_gpus": opts.model_gpus}
            if resources["num_cpus"] <= 0 or opts.model_gpus < 0:
                raise ValueError("--cell-cpus must be above 0 and --model-gpus at least 0")
            total = connect(opts.cluster)
            workers = opts.workers if opts.workers is not None else \
                max(1, int(total.get("CPU", 0) // resources["num_cpus"]))
        else:
            workers = default_workers(suites.worker_cores) if opts.workers is None \
                else opts.workers
        if workers < 1:
            raise ValueError("--workers must be at least 1")
    except ValueError as err:
        print(f"[eval] {err}", file=sys.stderr)
        return 2
    config = EvalConfig(folder=Path("."), episodes=episodes, bringup_args=args, suites=suites,
                        workers=workers, limits=limits, keep=opts.keep,
                        record=opts.record, startup_timeout=opts.startup_timeout,
                        retry_errors=opts.retry_errors, cluster=opts.cluster or "",
                        cell_resources=resources, model_resources=model_resources)
    config.folder = Path(opts.out) if opts.out else \
        Path("evals") / f"{'+'.join(Path(n).stem for n in names)}-" \
                        f"{config_hash(config.settings())[:8]}"
    try:
        return Evaluation(config).run()
    except ValueError as err:
        print(f"[eval] {err}", file=sys.stderr)
        return 2


def report_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="rpent eval report",
                                description="Rewrite an evaluation's report files.")
    p.add_argument("results", help="evaluation folder or its results.jsonl")
    p.add_argument("--title", default="", help="report title")
    opts = p.parse_args(argv)
    path = Path(opts.results)
    folder = path if path.is_dir() else path.parent
    records = load_records(path)
    write_report(records, folder, opts.title or f"RPent evaluation: {folder.name}")
    print((folder / "report.md").read_text(), end="")
    return 0


def compare_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="rpent eval compare",
                                description="Two evaluations side by side, per task and suite.")
    p.add_argument("a", help="evaluation A: folder or results.jsonl")
    p.add_argument("b", help="evaluation B: folder or results.jsonl")
    p.add_argument("--labels", nargs=2, metavar=("A", "B"), help="names in the table")
    p.add_argument("--out", help="also write the comparison here (.md, and .json beside it)")
    opts = p.parse_args(argv)
    labels = opts.labels or [Path(opts.a).name, Path(opts.b).name]
    rows = compare(load_records(opts.a), load_records(opts.b))
    text = compare_markdown(rows, *labels)
    if opts.out:
        out = Path(opts.out)
        out.write_text(text)
        out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    print(text, end="")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    commands = {"report": report_main, "compare": compare_main}
    try:
        if argv and argv[0] in commands:
            return commands[argv[0]](argv[1:])
        return run_main(argv)
    except FileNotFoundError as err:
        print(f"[eval] {err}", file=sys.stderr)
        return 2
