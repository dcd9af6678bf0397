"""Whole runs started by rpent.start from the same descriptions the launch files use."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rpent_contract.processes import free_port

pytestmark = pytest.mark.slow


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rpent.start", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float) -> str:
    try:
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        out = proc.communicate(timeout=60)[0]
        pytest.fail(f"run did not finish within {timeout:g} s:\n{out[-4000:]}")


def test_starter_runs_a_libero_task_to_native_success(tmp_path):
    run_dir = tmp_path / "run"
    port = free_port()  # for the dashboard
    proc = start("libero_sim", f"run_dir:={run_dir}", "record:=true", "dashboard:=true",
                 f"dashboard_port:={port}")
    out = finish(proc, 400)
    assert proc.returncode == 0, out[-4000:]
    assert "task success   : yes (native)" in out
    assert f"Foxglove bridge listening on ws://127.0.0.1:{port}" in out, out[-4000:]
    assert f"dashboard      : ws://127.0.0.1:{port}" in out
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "success" and result["task_success"], result
    assert result["success_source"] == "native", result
    assert (run_dir / "transcript.json").exists() and (run_dir / "episode.mp4").exists()
    assert (run_dir / "bag" / "metadata.yaml").exists(), "record:=true wrote no bag"
    # Every node the description names was started, with its name as the output prefix.
    for prefix in ("[libero_sim]", "[action_model]", "[agent]", "[recorder]"):
        assert prefix in out


def test_two_namespaced_runs_share_one_action_model(node_factory, tmp_path):
    robots_file = Path(__file__).resolve().parents[1] / "config" / "robots.yaml"
    runs = {ns: start("libero_sim", f"namespace:={ns}", "action_model:=/action_model",
                      f"run_dir:={tmp_path / ns}", f"robots_file:={robots_file}")
            for ns in ("robot1", "robot2")}
    # One model for both: it reads its control space from robot1; each goal names its robot.
    model = node_factory("rpent_am", "am_node", {"backend": "scripted",
                                                 "robot_namespace": "robot1"}, name="shared_am")
    outputs = {ns: finish(proc, 600) for ns, proc in runs.items()}
    for ns, proc in runs.items():
        assert proc.returncode == 0, f"{ns}:\n{outputs[ns][-4000:]}"
        result = json.loads((tmp_path / ns / "result.json").read_text())
        assert result["task_success"], (ns, result)
        assert f"[{ns}/agent]" in outputs[ns] and "[action_model]" not in outputs[ns]

    assert model.alive(), model.log_tail()


def _children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found |= {int(c) for c in (task / "children").read_text().split()}
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _follow(proc: subprocess.Popen, marker: str, timeout: float):
    """Wait until a line of the run's output holds ``marker``; return the output lines so far
    and the thread that keeps reading them (a starter whose output is not read blocks)."""
    seen, found = [], threading.Event()

    def read():
        for line in proc.stdout:
            seen.append(line)
            if marker in line:
                found.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not found.wait(timeout):
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"no '{marker}' in the run's output:\n" + "".join(seen)[-4000:])
    return seen, reader


@pytest.mark.parametrize("how", ["SIGHUP", "SIGKILL"])
def test_nodes_never_outlive_the_starter(tmp_path, how):
    """A closed terminal (SIGHUP) stops the run cleanly; a starter killed outright still
    takes its nodes with it. Either way no orphan keeps driving the robot, and the bag is
    closed."""
    run_dir = tmp_path / "run"
    proc = start("libero_sim", f"run_dir:={run_dir}", "record:=true")
    out, _ = _follow(proc, "recording /robot_state", 300)
    nodes = _children(proc.pid)
    assert len(nodes) == 4, nodes   # robot, model, agent, recorder
    os.kill(proc.pid, getattr(signal, how))   # the starter alone, as a hang-up reaches it
    expected = 128 + signal.SIGHUP if how == "SIGHUP" else -signal.SIGKILL
    assert proc.wait(60) == expected, "".join(out)[-4000:]
    deadline = time.monotonic() + 60
    while any(_alive(p) for p in nodes) and time.monotonic() < deadline:
        time.sleep(0.2)
    orphans = [p for p in nodes if _alive(p)]
    for p in orphans:
        os.kill(p, signal.SIGKILL)
    assert not orphans, f"{len(orphans)} node(s) outlived the starter"
    assert (run_dir / "bag" / "metadata.yaml").exists(), "the bag was not closed"


def test_ctrl_c_mid_run_stops_every_node_and_keeps_the_runs_files(tmp_path):
    """Ctrl-C reaches every node at once, so the agent's robot and model go while it cancels
    its run: it must still end the run and write its files before the starter (or launch,
    which escalates to SIGTERM after 5 s and SIGKILL 10 s later) gives up on it."""
    run_dir = tmp_path / "run"
    proc = start("libero_sim", f"run_dir:={run_dir}")
    out, reader = _follow(proc, "[agent]: run ", 300)
    os.kill(proc.pid, signal.SIGINT)
    code = proc.wait(60)
    reader.join(10)
    text = "".join(out)
    assert code == 128 + signal.SIGINT, text[-4000:]
    assert "did not stop" not in text, text[-4000:]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "canceled", result
    assert (run_dir / "transcript.json").exists() and (run_dir / "episode.mp4").exists()
