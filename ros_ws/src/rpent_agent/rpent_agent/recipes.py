"""Recipes: what a run did and how it ended, written to its memory folder when it ends and
shown to the next runs of a similar task.

A recipe is one JSON file under ``<memory folder>/recipes/``, named after the time and the
run, so parallel runs sharing a folder never write the same file. It holds the task (its
instruction, and the suite and task id where the robot has them), the outcome, and every tool
call in order with its arguments and whether it worked: the sequence that worked, or where it
went wrong.

A run is shown the best matching recipes of its folder: those of the same suite and task id
first, then those whose instruction shares most of its words; among equal matches, successes
before failures and newer before older.

    rpent memory list [--dir DIR | --robot R --suite S]   the folders, or one folder's recipes
    rpent memory show NAME [--json] ...                   one recipe
    rpent memory prune [--failures] [--older-than DAYS] [--keep N] [--dry-run] ...
    rpent memory export --out FILE ...                    every recipe, one JSON per line
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from .memory import RECIPE_FOLDER, MemoryDir, data_folder, lasting_folder

SHOWN = 3  # recipes a run's opening shows
SHOWN_CALLS = 24  # of each recipe's calls the opening lists (the first, the last 4, a failure)
MIN_MATCH = 0.5  # share of instruction words in common below which a recipe is not shown
ARGUMENT_CHARS = 300  # of each call's arguments (as JSON) a recipe keeps
RESULT_CHARS = 160  # of each call's result text
# Tools whose calls say nothing about how the task was done.
UNRECORDED = ("memory_list", "memory_read", "memory_write")


@dataclass
class Recipe:
    instruction: str
    robot: str
    status: str  # the agent's: success, failure, stuck, max_turns, error
    task_success: bool  # the robot's or operator's verdict
    calls: list  # [{"tool", "arguments", "ok", "result"}] in the order they ended
    suite: str = ""
    task_id: int = -1
    run_id: str = ""
    written: str = ""  # ISO 8601, UTC
    turns: int = 0
    steps: int = 0
    name: str = field(default="", compare=False)  # its file name, when read back

    @property
    def failed_at(self) -> Optional[int]:
        """Index of the first call that did not work, or None."""
        return next((i for i, c in enumerate(self.calls) if not c["ok"]), None)

    def render(self, limit: Optional[int] = None) -> str:
        """Short text for a model's prompt and for ``rpent memory show``; with ``limit``,
        a long run's calls are cut to the first ones, the first failure and the last 4."""
        verdict = "task achieved" if self.task_success else "task NOT achieved"
        head = (f"{self.name or 'recipe'} ({self.written[:16].replace('T', ' ')}): "
                f"'{self.instruction}' - agent {self.status}, {verdict}, {len(self.calls)} "
                f"tool calls, {self.steps} steps")
        lines, shown = [head], range(len(self.calls))
        if limit is not None and len(self.calls) > limit:
            tail = min(4, limit // 2)
            count = len(self.calls)
            shown = set(range(limit - tail - 1)) | set(range(count - tail, count))
            if self.failed_at is not None:
                shown.add(self.failed_at)
        previous = -1
        for i in sorted(shown):
            if i > previous + 1:
                lines.append(f"  ... {i - previous - 1} calls left out (memory_read opens the "
                             "recipe)")
            previous = i
            call = self.calls[i]
            mark = "" if call["ok"] else "  <- FAILED"
            lines.append(f"  {i + 1}. {call['tool']}({call['arguments']}){mark}")
            if not call["ok"] and call["result"]:
                lines.append(f"     {call['result']}")
        return "\n".join(lines)


def from_calls(history: list, *, instruction: str, robot: str, status: str,
               task_success: bool, suite: str = "", task_id: int = -1, run_id: str = "",
               turns: int = 0, steps: int = 0) -> Recipe:
    """A recipe of a run's tool calls (``Toolkit.history``)."""
    calls = [{"tool": c["tool"],
              "arguments": _clip(json.dumps(c["arguments"], sort_keys=True), ARGUMENT_CHARS),
              "ok": bool(c["ok"]),
              "result": _clip(" ".join(str(c["result"]).split()), RESULT_CHARS)}
             for c in history if c["tool"] not in UNRECORDED]
    return Recipe(instruction=instruction, robot=robot, status=status,
                  task_success=task_success, calls=calls, suite=suite, task_id=task_id,
                  run_id=run_id, turns=turns, steps=steps,
                  written=datetime.now(timezone.utc).isoformat(timespec="seconds"))


def write(memory: MemoryDir, recipe: Recipe) -> str:
    """Write the recipe into the memory folder; returns its name."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    name = f"{stamp}_{recipe.run_id or os.getpid()}.json"
    body = {k: v for k, v in asdict(recipe).items() if k != "name"}
    memory.write(f"{RECIPE_FOLDER}/{name}", json.dumps(body, indent=1))
    return name


def read_all(root: Path) -> tuple[list[Recipe], list[str]]:
    """The folder's recipes, and a line for each file that is not one."""
    recipes, bad = [], []
    folder = Path(root) / RECIPE_FOLDER
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            body = json.loads(path.read_text())
            recipes.append(Recipe(**body, name=path.name))
        except (OSError, ValueError, TypeError) as err:
            bad.append(f"{path.name}: not a recipe ({err})")
    return recipes, bad


def _words(text: str) -> set:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def match(recipe: Recipe, instruction: str, suite: str = "", task_id: int = -1) -> float:
    """1 for the same suite and task; else the share of words the instructions have in
    common (Jaccard)."""
    if suite and task_id >= 0 and recipe.suite == suite and recipe.task_id == task_id:
        return 1.0
    a, b = _words(recipe.instruction), _words(instruction)
    return len(a & b) / len(a | b) if a | b else 0.0


def best(recipes: list, instruction: str, suite: str = "", task_id: int = -1,
         count: int = SHOWN) -> list:
    """The recipes worth showing a run of this task, best first."""
    scored = [(match(r, instruction, suite, task_id), r) for r in recipes]
    scored = [(s, r) for s, r in scored if s >= MIN_MATCH]
    scored.sort(key=lambda sr: (sr[0], sr[1].task_success, sr[1].status == "success",
                                sr[1].written), reverse=True)
    return [r for _, r in scored[:count]]


def opening_section(recipes: list) -> str:
    """What a run's first message says about its recipes ('' for none)."""
    if not recipes:
        return ""
    return ("Recipes from earlier runs of similar tasks (best match first; each lists the "
            "tool calls in order; memory_read opens recipes/<name>):\n"
            + "\n".join(r.render(SHOWN_CALLS) for r in recipes))


# --- rpent memory ------------------------------------------------------------------------
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="rpent memory", description="The recipes runs leave in their memory folders: "
        "what each run did and how it ended, shown to the next runs of a similar task.")
    sub = parser.add_subparsers(dest="command", required=True)

    def folder_options(p):
        p.add_argument("--dir", type=Path, help="the memory folder (a bring-up's memory_dir)")
        p.add_argument("--robot", help="with --suite: the lasting folder of this robot "
                       "(its embodiment, e.g. libero_panda)")
        p.add_argument("--suite", default="", help="with --robot: the task suite")

    listing = sub.add_parser("list", help="the lasting memory folders, or one folder's recipes")
    folder_options(listing)
    show = sub.add_parser("show", help="one recipe")
    folder_options(show)
    show.add_argument("name", help="a recipe's file name (rpent memory list)")
    show.add_argument("--json", action="store_true", help="the file as written")
    prune = sub.add_parser("prune", help="delete recipes (newest kept)")
    folder_options(prune)
    prune.add_argument("--failures", action="store_true",
                       help="those whose task was not achieved")
    prune.add_argument("--older-than", type=float, metavar="DAYS",
                       help="those written more than DAYS ago")
    prune.add_argument("--keep", type=int, metavar="N",
                       help="all but the newest N of each instruction")
    prune.add_argument("--dry-run", action="store_true", help="say what would go; delete nothing")
    export = sub.add_parser("export", help="every recipe, one JSON object per line")
    folder_options(export)
    export.add_argument("--out", type=Path, required=True, help="the JSON Lines file to write")
    args = parser.parse_args(argv)

    if args.command == "list" and args.dir is None and args.robot is None:
        return _list_folders()
    try:
        root = _folder(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    recipes, bad = read_all(root)
    for line in bad:
        print(f"warning: {line}", file=sys.stderr)
    if args.command == "list":
        if not recipes:
            print(f"no recipes in {root}")
        for r in recipes:
            print(f"{r.name}  {'success' if r.task_success else 'failure':7}  "
                  f"{len(r.calls):3} calls  {r.instruction}")
        return 0
    if args.command == "show":
        chosen = [r for r in recipes if r.name in (args.name, args.name + ".json")]
        if not chosen:
            print(f"error: no recipe '{args.name}' in {root}; rpent memory list --dir {root} "
                  "names them", file=sys.stderr)
            return 1
        print((root / RECIPE_FOLDER / chosen[0].name).read_text() if args.json
              else chosen[0].render())
        return 0
    if args.command == "prune":
        if not (args.failures or args.older_than is not None or args.keep is not None):
            print("error: say what to prune: --failures, --older-than DAYS and/or --keep N",
                  file=sys.stderr)
            return 2
        doomed = _to_prune(recipes, args.failures, args.older_than, args.keep)
        for r in doomed:
            if not args.dry_run:
                (root / RECIPE_FOLDER / r.name).unlink(missing_ok=True)
        print(f"{'would delete' if args.dry_run else 'deleted'} {len(doomed)} of "
              f"{len(recipes)} recipes in {root}")
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as out:
        for r in recipes:
            out.write(json.dumps(asdict(r)) + "\n")
    print(f"wrote {len(recipes)} recipes to {args.out}")
    return 0


def _folder(args) -> Path:
    if args.dir is not None:
        if not args.dir.is_dir():
            raise ValueError(f"no memory folder {args.dir}")
        return args.dir
    if args.robot:
        return lasting_folder(args.robot, args.suite)
    raise ValueError("name the memory folder: --dir DIR, or --robot ROBOT --suite SUITE for "
                     "a lasting one (rpent memory list shows them)")


def _list_folders() -> int:
    root = data_folder() / "memory"
    folders = sorted(p for p in root.glob("*/*") if p.is_dir()) if root.is_dir() else []
    if not folders:
        print(f"no lasting memory folders under {root} (a bring-up with memory_dir:=auto "
              "makes one per robot and task suite)")
    for folder in folders:
        recipes, _ = read_all(folder)
        notes = len(MemoryDir(folder).list()) - len(recipes)
        print(f"{folder}  --robot {folder.parent.name} --suite {folder.name}: "
              f"{len(recipes)} recipes, {notes} other files")
    return 0


def _to_prune(recipes: list, failures: bool, older_than: Optional[float],
              keep: Optional[int]) -> list:
    doomed = []
    now = time.time()
    newest_first = sorted(recipes, key=lambda r: r.written, reverse=True)
    kept_per_task: dict = {}
    for r in newest_first:
        age_days = (now - datetime.fromisoformat(r.written).timestamp()) / 86400.0
        kept_per_task[r.instruction] = kept_per_task.get(r.instruction, 0) + 1
        if (failures and not r.task_success) \
                or (older_than is not None and age_days > older_than) \
                or (keep is not None and kept_per_task[r.instruction] > keep):
            doomed.append(r)
    return doomed


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
