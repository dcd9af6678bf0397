"""Recipes: written when a run ends, chosen for the next run of a similar task, and kept by
``rpent memory``."""
from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor

import pytest

from rpent.cli import main as rpent
from rpent_agent import recipes
from rpent_agent.memory import MemoryDir, lasting_folder

SOUP = "pick the alphabet soup and place it in the basket"
HISTORY = [
    {"tool": "get_object_poses", "arguments": {}, "ok": True, "result": "soup: position ..."},
    {"tool": "memory_read", "arguments": {"path": "notes.md"}, "ok": True, "result": "notes"},
    {"tool": "move_to", "arguments": {"x": 0.1, "y": -0.2, "z": 0.05}, "ok": True,
     "result": "reached"},
    {"tool": "gripper", "arguments": {"action": "close"}, "ok": False,
     "result": "gripper closed on nothing:\n  width 0.000 m"},
]


def recipe(instruction=SOUP, success=True, suite="libero_object", task_id=0, run_id="r",
           written="2026-12-06T10:00:00+00:00", history=HISTORY):
    made = recipes.from_calls(history, instruction=instruction, robot="libero_panda",
                              status="success" if success else "failure",
                              task_success=success, suite=suite, task_id=task_id,
                              run_id=run_id, turns=4, steps=80)
    made.written = written
    return made


def test_a_recipe_keeps_the_calls_in_order_and_marks_where_the_run_went_wrong(tmp_path):
    memory = MemoryDir(tmp_path / "mem")
    name = recipes.write(memory, recipe(success=False))
    [back], bad = recipes.read_all(memory.root)
    assert bad == [] and back.name == name
    # Reading memory says nothing about the task; the rest is kept, in order.
    assert [c["tool"] for c in back.calls] == ["get_object_poses", "move_to", "gripper"]
    assert back.failed_at == 2 and not back.task_success and back.suite == "libero_object"
    assert json.loads(back.calls[1]["arguments"]) == {"x": 0.1, "y": -0.2, "z": 0.05}
    text = back.render()
    assert f"'{SOUP}' - agent failure, task NOT achieved, 3 tool calls, 80 steps" in text
    assert '3. gripper({"action": "close"})  <- FAILED' in text
    assert "gripper closed on nothing: width 0.000 m" in text
    # The memory index counts recipes; a run is shown the matching ones instead.
    memory.write("notes.md", "soup is left of the basket")
    assert memory.index().splitlines() == ["- notes.md: soup is left of the basket",
                                           "- recipes/: 1 recipes of earlier runs"]


def test_a_run_is_shown_the_best_matching_recipes_first():
    same_task_failed = recipe(success=False, run_id="a", written="2026-12-06T12:00:00+00:00")
    same_task_old = recipe(run_id="b", written="2026-12-01T10:00:00+00:00")
    same_task_new = recipe(run_id="c", written="2026-12-05T10:00:00+00:00")
    similar = recipe("pick the alphabet soup and place it in the tray", suite="", task_id=-1,
                     run_id="d")
    other = recipe("open the top drawer of the cabinet", suite="libero_goal", task_id=3,
                   run_id="e")
    known = [other, similar, same_task_failed, same_task_old, same_task_new]
    chosen = recipes.best(known, SOUP, "libero_object", 0, count=4)
    assert [r.run_id for r in chosen] == ["c", "b", "a", "d"]
    # Without suite and task (a real arm), the instruction's words decide.
    assert [r.run_id for r in recipes.best(known, "pick up the alphabet soup", count=5)] \
        == []  # too few words in common with any
    assert recipes.best(known, "open the top drawer of the cabinet")[0].run_id == "e"
    section = recipes.opening_section(chosen[:1])
    assert section.startswith("Recipes from earlier runs of similar tasks")
    assert "1. get_object_poses({})" in section and recipes.opening_section([]) == ""


def test_a_long_run_is_shown_cut_to_its_start_its_failure_and_its_end():
    history = [{"tool": "move_to", "arguments": {"x": i}, "ok": i != 40, "result": f"r{i}"}
               for i in range(60)]
    lines = recipes.opening_section([recipe(history=history, success=False)]).splitlines()[2:]
    assert lines[0] == '  1. move_to({"x": 0})' and lines[18] == '  19. move_to({"x": 18})'
    assert lines[19].startswith("  ... 21 calls left out")
    assert lines[20:22] == ['  41. move_to({"x": 40})  <- FAILED', "     r40"]
    assert lines[22].startswith("  ... 15 calls left out")
    assert lines[23:] == [f'  {i + 1}. move_to({{"x": {i}}})' for i in range(56, 60)]
    assert len(recipe(history=history).render().splitlines()) == 1 + 60 + 1  # all of it


def _write_recipes(root, worker: int, count: int) -> None:
    memory = MemoryDir(root)
    for i in range(count):
        recipes.write(memory, recipe(run_id=f"w{worker}-{i}"))


def test_two_workers_writing_recipes_into_one_folder_lose_none(tmp_path):
    with ProcessPoolExecutor(2) as pool:
        for done in [pool.submit(_write_recipes, tmp_path / "mem", w, 40) for w in (0, 1)]:
            done.result(timeout=60)
    known, bad = recipes.read_all(tmp_path / "mem")
    assert bad == []
    assert sorted(r.run_id for r in known) == sorted(f"w{w}-{i}" for w in (0, 1)
                                                     for i in range(40))


def test_rpent_memory_lists_shows_prunes_and_exports(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    folder = lasting_folder("libero_panda", "libero_object")
    memory = MemoryDir(folder)
    names = [recipes.write(memory, recipe(success=ok, run_id=run, written=when))
             for ok, run, when in [(True, "old", "2026-01-01T10:00:00+00:00"),
                                   (False, "bad", "2026-12-05T10:00:00+00:00"),
                                   (True, "new", "2026-12-06T10:00:00+00:00")]]
    memory.write("notes.md", "note")

    assert rpent(["memory", "list"]) == 0
    assert "--robot libero_panda --suite libero_object: 3 recipes, 1 other files" in \
        capsys.readouterr().out
    assert rpent(["memory", "list", "--robot", "libero_panda", "--suite", "libero_object"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == sorted(names)
    assert rpent(["memory", "show", names[1], "--dir", str(folder)]) == 0
    assert "<- FAILED" in capsys.readouterr().out
    assert rpent(["memory", "show", "nothing", "--dir", str(folder)]) == 1
    assert "rpent memory list --dir" in capsys.readouterr().err
    assert rpent(["memory", "show", names[0]]) == 2
    assert "--robot ROBOT --suite SUITE" in capsys.readouterr().err

    assert rpent(["memory", "prune", "--dir", str(folder), "--failures", "--dry-run"]) == 0
    assert "would delete 1 of 3" in capsys.readouterr().out
    assert len(recipes.read_all(folder)[0]) == 3
    assert rpent(["memory", "prune", "--dir", str(folder), "--failures"]) == 0
    assert {r.run_id for r in recipes.read_all(folder)[0]} == {"old", "new"}
    assert rpent(["memory", "prune", "--dir", str(folder), "--keep", "1"]) == 0
    assert {r.run_id for r in recipes.read_all(folder)[0]} == {"new"}
    assert memory.read("notes.md") == "note"  # pruning touches recipes only

    out = tmp_path / "export" / "recipes.jsonl"
    assert rpent(["memory", "export", "--dir", str(folder), "--out", str(out)]) == 0
    [line] = out.read_text().splitlines()
    assert recipes.Recipe(**json.loads(line)).run_id == "new"


@pytest.mark.parametrize("argv", [["prune", "--dir", "."], ["list", "--dir", "/nonexistent"]])
def test_rpent_memory_says_what_is_missing(argv, capsys):
    assert rpent(["memory"] + argv) == 2
    assert capsys.readouterr().err.startswith("error: ")
