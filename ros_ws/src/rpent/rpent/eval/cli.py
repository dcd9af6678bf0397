"""``rpent eval``: success rates of a planner and action model over LIBERO suites.

    rpent eval --suites libero_object --tasks 0-4 --init-states 0-9 planner:=scripted
    rpent eval --workers 2 --out evals/api model:=anthropic:claude-sonnet-5
    rpent eval report evals/api                 # rewrite report.md / .json / .png
    rpent eval compare evals/base evals/new     # two evaluations side by side
    rpent eval --list                           # suites, tasks and initial states

Flags choose the episodes and run the harness; ``name:=value`` arguments are the
``libero_sim`` bring-up's own (planner, model, base_url, am_backend, am_checkpoint,
am_endpoint, am_model_io, action_model, privileged, max_turns, max_episode_steps,
robots_file), with
the same defaults. Rerunning the same command resumes: finished episodes are skipped.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import warnings
from pathlib import Path

from rpent.bringup import BRINGUPS

from .report import compare, compare_markdown, write_report
from .results import config_hash, load_records
from .workers import Episode, EpisodeLimits

# Bring-up arguments the harness sets itself, per worker or per episode.
HARNESS_OWNED = {
    "suite": "--suites", "task_id": "--tasks", "init_state_index": "--init-states",
    "seed": "--seeds", "namespace": "(one per worker)", "output_dir": "--out",
    "run_dir": "--out", "dashboard": "(not during evaluations)", "record": "--record",
    "instruction": "(each task's own)",
}


def parse_indices(spec: str, count: int, what: str) -> list[int]:
    """``all``, ``3``, ``0-9`` or ``0,2,5-7`` -> sorted indices, each below ``count``."""
    if spec == "all":
        return list(range(count))
    chosen = set()
    for part in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if not match:
            raise ValueError(f"{what} '{spec}' is not a selection like all, 3, 0-9 or 0,2,5-7")
        low = int(match[1])
        chosen.update(range(low, int(match[2] or low) + 1))
    bad = sorted(i for i in chosen if not 0 <= i < count)
    if bad:
        raise ValueError(f"{what} {bad} out of range: valid 0..{count - 1}")
    return sorted(chosen)


def _libero():
    from rpent_env_sim import libero_sim

    # LIBERO's task parser (lark) warns about deprecated modules while the suites load.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        libero_sim.LiberoSim.available_suites()
    return libero_sim


def select(suites: list[str], tasks: str, init_states: str, seeds: str) -> list[Episode]:
    suite_tasks = _libero().suite_tasks

    episodes = []
    seed_values = parse_indices(seeds, 10**6, "--seeds")
    for suite in suites:
        catalog = suite_tasks(suite)
        for task_id in parse_indices(tasks, len(catalog), f"--tasks of {suite}"):
            task = catalog[task_id]
            if task.problems:
                raise ValueError(
                    f"{suite} task {task_id} cannot run here, the installed benchmark lacks "
                    f"{'; '.join(task.problems)}; choose other --tasks (rpent eval --list "
                    "shows which are complete)")
            for index in parse_indices(init_states, task.n_init_states,
                                       f"--init-states of {suite} task {task_id}"):
                episodes += [Episode(suite, task_id, index, s) for s in seed_values]
    return episodes


def list_suites() -> int:
    libero_sim = _libero()
    for suite in libero_sim.LiberoSim.available_suites():
        tasks = libero_sim.suite_tasks(suite)
        runnable = [t for t in tasks if not t.problems]
        states = sorted({t.n_init_states for t in runnable})
        note = "" if len(runnable) == len(tasks) else \
            f" ({len(tasks) - len(runnable)} incomplete upstream)"
        print(f"{suite:<28} {len(runnable):>3} tasks{note}, initial states per task: "
              f"{', '.join(map(str, states)) or '-'}")
    return 0


def bringup_args(items: list[str]) -> dict:
    given = {}
    for item in items:
        name, sep, value = item.partition(":=")
        if not sep:
            raise ValueError(f"arguments are name:=value (as with ros2 launch), got '{item}'")
        if name in HARNESS_OWNED:
            raise ValueError(f"'{name}' is set by the evaluation: use {HARNESS_OWNED[name]}")
        given[name] = value
    resolved = BRINGUPS["libero_sim"].resolve(given)
    return {k: v for k, v in resolved.items() if k not in HARNESS_OWNED}


def _run_parser() -> argparse.ArgumentParser:
    from .runner import default_workers

    p = argparse.ArgumentParser(
        prog="rpent eval", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--suites", default="libero_object",
                   help="comma-separated LIBERO / LIBERO-PRO suites (default libero_object)")
    p.add_argument("--tasks", default="all", help="task ids: all, 3, 0-9, 0,2,5-7")
    p.add_argument("--init-states", default="all",
                   help="initial-state indices (default all: LIBERO records 50 per task)")
    p.add_argument("--seeds", default="0", help="simulator seeds (default 0)")
    p.add_argument("--workers", type=int, default=default_workers(),
                   help="parallel robot + agent pairs (default: what this machine can run, "
                        f"here {default_workers()})")
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
    p.add_argument("--list", action="store_true", help="list suites and tasks, then exit")
    p.add_argument("args", nargs="*", metavar="name:=value",
                   help="libero_sim bring-up arguments (planner:=, model:=, am_backend:=, ...)")
    return p


def run_main(argv: list[str]) -> int:
    from .runner import EvalConfig, Evaluation

    opts = _run_parser().parse_args(argv)
    if opts.list:
        return list_suites()
    try:
        args = bringup_args(opts.args)
        suites = [s for s in opts.suites.split(",") if s]
        episodes = select(suites, opts.tasks, opts.init_states, opts.seeds)
        limits = EpisodeLimits(int(args["max_turns"]), int(args["max_episode_steps"]),
                               opts.episode_timeout)
        if opts.workers < 1:
            raise ValueError("--workers must be at least 1")
    except ValueError as err:
        print(f"[eval] {err}", file=sys.stderr)
        return 2
    config = EvalConfig(folder=Path("."), episodes=episodes, bringup_args=args,
                        workers=opts.workers, limits=limits, keep=opts.keep,
                        record=opts.record, startup_timeout=opts.startup_timeout,
                        retry_errors=opts.retry_errors)
    config.folder = Path(opts.out) if opts.out else \
        Path("evals") / f"{'+'.join(suites)}-{config_hash(config.settings())[:8]}"
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
