"""Evaluation statistics, results files and reports, from hand-made episode records."""
from __future__ import annotations

import json

import pytest

from rpent.eval.cli import bringup_args
from rpent.eval.report import compare, compare_markdown, write_report
from rpent.eval.results import EvalFolder, load_records
from rpent.eval.robots import LiberoSuites, TwinSuites, parse_indices, suites_for
from rpent.eval.stats import tables, wilson


def rec(suite, task, index, outcome, turns=4, tokens=(0, 0), wall=10.0):
    return {"episode": f"{suite}/{task}/{index}/0", "suite": suite, "task_id": task,
            "init_state_index": index, "seed": 0, "task_name": f"task {task}",
            "outcome": outcome, "turns": turns, "tool_calls": turns,
            "input_tokens": tokens[0], "output_tokens": tokens[1], "wall_time_s": wall,
            "steps": 100}


@pytest.mark.parametrize("k, n, low, high", [
    # Published 95% Wilson intervals (e.g. Newcombe 1998, Table I; any statistics package).
    (0, 10, 0.0, 0.2775), (5, 10, 0.2366, 0.7634), (10, 10, 0.7225, 1.0),
    (81, 263, 0.2553, 0.3662), (1, 1, 0.2065, 1.0),
])
def test_wilson_intervals_match_published_values(k, n, low, high):
    lo, hi = wilson(k, n)
    assert lo == pytest.approx(low, abs=1e-4) and hi == pytest.approx(high, abs=1e-4)


def test_no_episodes_is_an_uninformative_interval():
    assert wilson(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize("n", range(1, 60))
def test_intervals_contain_their_estimate_exactly_at_the_ends(n):
    assert wilson(0, n)[0] == 0.0 and wilson(n, n)[1] == 1.0
    for k in range(n + 1):
        low, high = wilson(k, n)
        assert low <= k / n <= high


def test_a_plot_of_all_failures_and_all_successes(tmp_path):
    records = [rec("s", 0, i, "failure") for i in range(3)] + \
        [rec("s", 1, i, "success") for i in range(7)]
    write_report(records, tmp_path, "ends")
    assert (tmp_path / "success_per_task.png").stat().st_size > 0


@pytest.mark.parametrize("spec, expect", [("all", [0, 1, 2, 3]), ("2", [2]), ("0-2", [0, 1, 2]),
                                          ("3,0-1", [0, 1, 3])])
def test_selections(spec, expect):
    assert parse_indices(spec, 4, "--tasks") == expect


@pytest.mark.parametrize("spec", ["4", "x", "1-", "-1"])
def test_bad_selections_name_the_valid_range(spec):
    with pytest.raises(ValueError, match="--tasks"):
        parse_indices(spec, 4, "--tasks")


def test_bringup_arguments_are_the_bringups_and_harness_ones_are_refused():
    args = bringup_args(["planner:=scripted", "privileged:=false"], LiberoSuites())
    assert args["planner"] == "scripted" and args["privileged"] == "false"
    assert args["am_backend"] == "scripted" and "suite" not in args
    with pytest.raises(ValueError, match="--suites"):
        bringup_args(["suite:=libero_goal"], LiberoSuites())
    with pytest.raises(ValueError, match="unknown argument"):
        bringup_args(["planer:=scripted"], LiberoSuites())


def test_a_twin_suite_evaluates_on_its_arms_bringup_with_the_twin_owned_by_the_harness():
    suites = suites_for(["so101_tabletop"])
    assert isinstance(suites, TwinSuites) and suites.bringup == "so101"
    args = bringup_args(["planner:=scripted", "twin_camera_rate:=4.0"], suites)
    assert args["twin_camera_rate"] == "4.0" and args["port"] == "/dev/ttyACM0"
    assert "privileged" not in args and "twin_task" not in args
    for owned, flag in (("twin_task:=cube_in_bowl", "--tasks"),
                        ("twin_seed:=3", "--init-states"), ("twin:=false", "always true")):
        with pytest.raises(ValueError, match=flag):
            bringup_args([owned], suites)
    with pytest.raises(ValueError, match="unknown argument"):
        bringup_args(["privileged:=false"], suites)  # LIBERO's, not an arm's


def test_twin_episodes_are_tasks_by_placement_seeds_and_one_robot_per_evaluation():
    suites = suites_for(["franka_tabletop"])
    episodes = suites.select(["franka_tabletop"], "0,6", "2-3", "0")
    assert [(e.task_id, e.init_state_index, e.seed) for e in episodes] == \
        [(0, 2, 0), (0, 3, 0), (6, 2, 0), (6, 3, 0)]
    assert len(suites.select(["franka_tabletop"], "1", "all", "0")) == 50
    assert episodes[0].folder == "franka_tabletop-t00-i02-s0"
    with pytest.raises(ValueError, match="placement seeds"):
        suites.select(["franka_tabletop"], "0", "0", "1")
    with pytest.raises(ValueError, match=r"--tasks of franka_tabletop \[7\] out of range"):
        suites.select(["franka_tabletop"], "7", "0", "0")
    with pytest.raises(ValueError, match="one robot"):
        suites_for(["franka_tabletop", "libero_object"])
    with pytest.raises(ValueError, match="different arms"):
        suites_for(["franka_tabletop", "so101_tabletop"])
    assert isinstance(suites_for(["libero_object", "libero_goal"]), LiberoSuites)


def test_the_list_names_each_twin_task_by_its_index(capsys):
    from rpent.eval.cli import main

    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    assert "franka_tabletop" in out and "so101_tabletop" in out
    assert "    0: cube_in_bowl (put the red cube in the bowl)" in out


def test_tables_count_errors_apart_and_average_judged_episodes():
    records = [rec("s", 0, 0, "success", turns=2, tokens=(100, 10)),
               rec("s", 0, 1, "failure", turns=4, tokens=(300, 30)),
               rec("s", 0, 2, "error", turns=99), rec("s", 1, 0, "success"),
               rec("t", 0, 0, "failure")]
    t = tables(records)
    task0 = t["tasks"][0]
    assert (task0["episodes"], task0["successes"], task0["errors"]) == (2, 1, 1)
    assert task0["success_rate"] == 0.5 and task0["mean_turns"] == 3
    assert task0["mean_input_tokens"] == 200 and task0["ci95"] == list(wilson(1, 2))
    assert [(s["suite"], s["episodes"], s["successes"]) for s in t["suites"]] == \
        [("s", 3, 2), ("t", 1, 0)]
    assert t["overall"]["episodes"] == 4 and t["overall"]["errors"] == 1


def test_results_file_keeps_the_last_record_of_each_episode_and_survives_a_cut_line(tmp_path):
    folder = EvalFolder(tmp_path / "ev")
    folder.open({"planner": "scripted"}, {})
    folder.append(rec("s", 0, 0, "error"))
    folder.append(rec("s", 0, 1, "success"))
    folder.append(rec("s", 0, 0, "failure"))  # a --retry-errors rerun
    with open(folder.results_path, "a") as f:
        f.write('{"episode": "s/0/2/0", "outc')  # killed mid-write
    records = {r["episode"]: r["outcome"] for r in load_records(folder.path)}
    assert records == {"s/0/0/0": "failure", "s/0/1/0": "success"}


def test_a_damaged_line_inside_the_file_is_an_error_not_a_lost_episode(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"episode": "a"\n' + json.dumps(rec("s", 0, 0, "success")) + "\n")
    with pytest.raises(ValueError, match="results.jsonl:1"):
        load_records(path)


def test_a_folder_of_another_configuration_is_refused_naming_the_difference(tmp_path):
    EvalFolder(tmp_path).open({"planner": "scripted", "model": ""}, {})
    EvalFolder(tmp_path).open({"planner": "scripted", "model": ""}, {})  # same: resumes
    with pytest.raises(ValueError, match="differs in: model"):
        EvalFolder(tmp_path).open({"planner": "scripted", "model": "openai:gpt-5"}, {})


def test_report_files(tmp_path):
    records = [rec("s", 0, 0, "success"), rec("s", 0, 1, "failure"), rec("s", 1, 0, "success")]
    report = write_report(records, tmp_path, "title")
    assert json.loads((tmp_path / "report.json").read_text()) == report
    md = (tmp_path / "report.md").read_text()
    assert "| s 0: task 0 | 1/2 | 50.0% | [9.5, 90.5] | 0 |" in md
    assert "| **all** | 2/3 | 66.7% |" in md
    png = (tmp_path / "success_per_task.png").read_bytes()
    assert png.startswith(b"\x89PNG")


def test_comparison_of_two_evaluations():
    a = [rec("s", 0, i, "success" if i < 2 else "failure") for i in range(10)] + \
        [rec("s", 1, i, "success") for i in range(10)] + [rec("s", 2, 0, "success")]
    b = [rec("s", 0, i, "success" if i < 9 else "failure") for i in range(10)] + \
        [rec("s", 1, i, "success") for i in range(10)] + [rec("s", 3, 0, "failure")]
    rows = compare(a, b)
    t0, t1 = rows["tasks"]
    assert t0["difference"] == pytest.approx(0.7) and not t0["intervals_overlap"]
    assert t1["difference"] == 0 and t1["intervals_overlap"]
    # The suite row counts only tasks both ran: 12/20 vs 19/20.
    suite = rows["suites"][0]
    assert (suite["a"]["successes"], suite["a"]["episodes"]) == (12, 20)
    assert (suite["b"]["successes"], suite["b"]["episodes"]) == (19, 20)
    assert rows["only_in_a"] == ["s 2"] and rows["only_in_b"] == ["s 3"]
    md = compare_markdown(rows, "base", "new")
    assert "| s 0: task 0 | 20.0% (2/10) | [5.7, 51.0] | 90.0% (9/10) | [59.6, 98.2] | " \
           "+70.0 pp | **no** |" in md
    assert "Only in A (not compared): s 2" in md


def test_compare_command_writes_the_table_and_its_json(tmp_path, capsys):
    from rpent.eval.cli import main

    for name, outcomes in (("base", "sff"), ("new", "ssf")):
        folder = EvalFolder(tmp_path / name)
        folder.open({}, {})
        for i, o in enumerate(outcomes):
            folder.append(rec("s", 0, i, {"s": "success", "f": "failure"}[o]))
    out = tmp_path / "cmp.md"
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "new" / "results.jsonl"),
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed == out.read_text()
    assert "| s 0: task 0 | 33.3% (1/3) |" in printed and "+33.3 pp | yes |" in printed
    rows = json.loads(out.with_suffix(".json").read_text())
    assert rows["overall"]["difference"] == pytest.approx(1 / 3)


def test_report_command_on_a_missing_folder_says_what_to_give(tmp_path, capsys):
    from rpent.eval.cli import main

    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "give an evaluation folder" in capsys.readouterr().err


def test_a_cluster_node_running_other_code_is_named_with_each_difference():
    from rpent.eval.cluster import differences, identity

    here = identity()
    assert differences(here, identity()) == []
    other = {**here, "git_commit": "0123abc",
             "packages": {**here["packages"], "mujoco": "0.1", "ray": "1.0"}}
    found = differences(here, other)
    assert f"git_commit: 0123abc here, {here['git_commit']} on the driver" in found
    assert f"mujoco 0.1 here, {here['packages']['mujoco']} on the driver" in found
    assert "ray 1.0 here, None on the driver" in found


@pytest.mark.parametrize("argv, says", [
    (["--cluster", "auto", "action_model:=/m"], "give am_backend:="),
    (["--cluster", "auto", "--cell-cpus", "0"], "--cell-cpus must be above 0"),
])
def test_cluster_flags_that_cannot_work_are_refused_before_joining(argv, says, capsys):
    from rpent.eval.cli import main

    assert main(["--tasks", "0", "--init-states", "0", *argv]) == 2
    assert says in capsys.readouterr().err
