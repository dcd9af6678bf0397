"""Code as policy: snippets run in the sandbox process, reach the robot only through the
tool calls the runner answers, and are held to their time and call budgets.

The runner's ``call`` here is a counter standing in for the toolkit (the toolkit's own
tools are tested against LIBERO in tests/test_agent_toolkit.py)."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest

from rpent_agent.code_policy import CodeRunner
from rpent_agent.toolkit import ToolResult


class Desk:
    def __init__(self):
        self.calls, self.finished = [], False

    def call(self, tool, arguments):
        self.calls.append((tool, arguments))
        if tool == "finish":
            self.finished = True
            return ToolResult("run finished: success")
        if tool == "observe":
            return ToolResult("hand at [0.1, 0.2, 0.3]",
                              data={"position": np.array([0.1, 0.2, 0.3])})
        return ToolResult(f"{tool} done")


@pytest.fixture
def desk(tmp_path):
    desk = Desk()
    runner = CodeRunner(desk.call, ["observe", "move_to", "finish"], tmp_path / "code_policy",
                        lambda: desk.finished, timeout=2.0, max_calls=5)
    yield desk, runner
    runner.close()


def test_snippets_share_variables_and_call_the_robot(desk, tmp_path):
    desk, runner = desk
    ok, text = runner.run("hand = robo.observe()\nprint(hand.text)\nx = hand.data['position'][0]")
    assert ok and "hand at [0.1, 0.2, 0.3]" in text and "1 robot call(s)" in text, text
    ok, text = runner.run("r = robo.move_to(x=x + 0.1, y=0.0, z=0.3)\nprint(r.ok, r.text)")
    assert ok and "True move_to done" in text, text
    assert desk.calls == [("observe", {}), ("move_to", {"x": pytest.approx(0.2), "y": 0.0,
                                                        "z": 0.3})]
    saved = json.loads((tmp_path / "code_policy" / "snippet_002.json").read_text())
    assert (tmp_path / "code_policy" / "snippet_002.py").read_text().startswith("r = robo")
    assert saved["calls"][0]["tool"] == "move_to" and saved["error"] is None


def test_errors_come_back_with_the_snippets_line(desk):
    _, runner = desk
    ok, text = runner.run("a = 1\nb = a / 0\n")
    assert not ok and "line 2" in text and "ZeroDivisionError" in text, text
    ok, text = runner.run("robo.fly(to='moon')\nprint(robo.fly(to='moon').text)")
    assert ok and "robo.fly does not exist" in text, text


@pytest.mark.serial  # stopped within 4 s of a 2 s limit
def test_a_snippet_past_its_time_limit_is_stopped_and_the_next_one_runs(desk):
    _, runner = desk
    runner.run("kept = 42")
    started = time.monotonic()
    ok, text = runner.run("while True:\n    pass\n")
    assert not ok and "time limit (2 s)" in text, text
    assert time.monotonic() - started < 4.0
    ok, text = runner.run("print(kept)")
    assert ok and "42" in text, text


@pytest.mark.slow
def test_a_snippet_that_will_not_stop_is_killed_and_its_variables_are_gone(desk):
    _, runner = desk
    runner.run("kept = 42")
    ok, text = runner.run("import signal\nsignal.setitimer(signal.ITIMER_REAL, 0)\n"
                          "while True:\n    pass\n")
    assert not ok and "was killed" in text, text
    ok, text = runner.run("print(kept)")
    assert "variables from earlier snippets are gone" in text and "NameError" in text, text


def test_a_snippet_over_its_call_budget_is_stopped(desk):
    desk, runner = desk
    ok, text = runner.run("for i in range(100):\n    robo.observe()\n")
    assert not ok and "used its 5 robot calls" in text, text
    assert len(desk.calls) == 5


@pytest.mark.parametrize("code", [
    "open('/etc/hostname').read()",
    "open('out.txt', 'w').write('x')",
    "import socket\nsocket.create_connection(('127.0.0.1', 80))",
    "import subprocess\nsubprocess.run(['ls'])",
    "import os\nos.system('ls')",
    "import os\nos.listdir('/')",
    "import os\nos.open('/etc/hostname', os.O_RDONLY)",
    "import sqlite3",
    "import ctypes\nctypes.CDLL('libc.so.6')",
    "import urllib.request",
])
def test_files_network_and_processes_are_refused(desk, code):
    desk, runner = desk
    ok, text = runner.run(code)
    assert not ok and ("not allowed in a snippet" in text
                       or "is not available in a snippet" in text), text
    assert not desk.calls


def test_robo_finish_ends_the_run_and_nothing_after_it_runs(desk):
    desk, runner = desk
    ok, text = runner.run("robo.finish(status='success', summary='done')\n"
                          "print('still here')\nrobo.move_to(x=0, y=0, z=0)")
    assert ok and "still here" not in text and "robo.finish" in text, text
    assert [c[0] for c in desk.calls] == ["finish"]
