"""Whole runs started by rpent.start from the same descriptions the launch files use."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rpent_common.processes import free_port

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


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
    port, legacy = free_port(), free_port()  # for the dashboard's two protocols
    proc = start("libero_sim", f"run_dir:={run_dir}", "record:=true", "dashboard:=true",
                 f"dashboard_port:={port}", f"dashboard_legacy_port:={legacy}")
    out = finish(proc, 400)
    assert proc.returncode == 0, out[-4000:]
    assert "task success   : yes (native)" in out
    assert f"Foxglove bridge listening on ws://127.0.0.1:{port} (foxglove.sdk.v1) and " \
        f"ws://127.0.0.1:{legacy} (foxglove.websocket.v1)" in out, out[-4000:]
    dashboard = next(line for line in out.splitlines() if "dashboard      :" in line)
    assert f"ws://127.0.0.1:{port}" in dashboard, dashboard
    layout = dashboard.split("with the layout ", 1)[1].rstrip(")")
    assert Path(layout).is_absolute() and json.loads(Path(layout).read_text()), dashboard
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "success" and result["task_success"], result
    assert result["success_source"] == "native", result
    assert (run_dir / "transcript.json").exists() and (run_dir / "episode.mp4").exists()
    assert (run_dir / "bag" / "metadata.yaml").exists(), "record:=true wrote no bag"
    # Every node the description names was started, with its name as the output prefix,
    # and no two nodes share a name (rcl warns of a clash, and ros2 node list shows both).
    for prefix in ("[libero_sim]", "[action_model]", "[agent]", "[recorder]"):
        assert prefix in out
    assert "already registered for node name" not in out, out[-4000:]


def test_a_run_from_the_users_folder_exits_with_the_agents_code_and_keeps_its_files_there(
        tmp_path):
    """scripts/run.sh as typed from a user's own folder, with a run the agent fails (one turn
    is too few): the shell sees the agent's exit code, the run folder is under the user's
    folder, and every path the summary prints works from anywhere."""
    proc = subprocess.Popen([str(ROOT / "scripts" / "run.sh"), "libero_sim", "max_turns:=1",
                             "record:=true"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    out = finish(proc, 400)
    assert proc.returncode == 1, out[-4000:]
    assert "agent status   : max_turns" in out, out[-4000:]
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1, runs
    result = json.loads((runs[0] / "result.json").read_text())
    assert result["status"] == "max_turns" and not result["task_success"], result
    watch = next(line for line in out.splitlines() if "watch it       :" in line)
    replay, bag = watch.split(":", 1)[1].split()[:2]
    assert Path(replay).is_absolute() and os.access(replay, os.X_OK), watch
    assert Path(bag) == runs[0] / "bag" and (Path(bag) / "metadata.yaml").exists(), watch


def test_a_robot_that_cannot_start_ends_the_run_at_once(tmp_path):
    """Not after the agent's 120 s start-up timeout: the robot's exit is the run's."""
    proc = start("libero_sim", "suite:=no_such_suite", f"run_dir:={tmp_path / 'run'}")
    out = finish(proc, 90)
    assert proc.returncode == 2, out[-4000:]
    assert "[rpent.start] libero_sim exited with code 2; its output above says why" in out
    assert "no_such_suite" in out, out[-4000:]


def test_a_busy_dashboard_port_ends_the_run_with_the_reason(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = start("libero_sim", f"run_dir:={tmp_path / 'run'}", "dashboard:=true",
                     f"dashboard_port:={port}", "dashboard_legacy_port:=0")
        out = finish(proc, 120)
    assert proc.returncode != 0, out[-4000:]
    assert f"cannot listen on 127.0.0.1:{port}" in out, out[-4000:]
    assert "foxglove_bridge exited with code" in out, out[-4000:]
    assert "dashboard      :" not in out, "the summary names a dashboard that never ran"


@pytest.mark.serial  # two whole runs at once load both cores themselves
def test_two_namespaced_runs_share_one_action_model(node_factory, tmp_path):
    robots_file = ROOT / "config" / "robots.yaml"
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


@pytest.mark.parametrize("how", ["SIGHUP", "SIGTERM", "SIGKILL"])
def test_nodes_never_outlive_the_starter(tmp_path, how):
    """A closed terminal (SIGHUP) or a service manager (SIGTERM) stops the run cleanly; a
    starter killed outright still takes its nodes with it. Either way no orphan keeps
    driving the robot, and the bag is closed."""
    run_dir = tmp_path / "run"
    proc = start("libero_sim", f"run_dir:={run_dir}", "record:=true")
    out, _ = _follow(proc, "recording /robot_state", 300)
    nodes = _children(proc.pid)
    assert len(nodes) == 4, nodes   # robot, model, agent, recorder
    os.kill(proc.pid, getattr(signal, how))   # the starter alone, as a hang-up reaches it
    expected = -signal.SIGKILL if how == "SIGKILL" else 128 + getattr(signal, how)
    assert proc.wait(60) == expected, "".join(out)[-4000:]
    deadline = time.monotonic() + 60
    while any(_alive(p) for p in nodes) and time.monotonic() < deadline:
        time.sleep(0.2)
    orphans = [p for p in nodes if _alive(p)]
    for p in orphans:
        os.kill(p, signal.SIGKILL)
    assert not orphans, f"{len(orphans)} node(s) outlived the starter"
    assert (run_dir / "bag" / "metadata.yaml").exists(), "the bag was not closed"


def test_ctrl_c_mid_run_stops_every_node_and_keeps_the_runs_files(tmp_path, rclpy_context):
    """Ctrl-C reaches every node at once, so the agent's robot and model go while it cancels
    its run: it must still end the run and write its files before the starter (or launch,
    which escalates to SIGTERM after 5 s and SIGKILL 10 s later) gives up on it."""
    from rpent_contract.client import RobotClient
    from rpent_common.processes import wait_until
    from rpent_contract.qos import EXECUTED_QOS
    from rpent_interfaces.msg import ExecutedAction

    run_dir = tmp_path / "run"
    watcher, steps = RobotClient(actions=()), []
    watcher.node.create_subscription(ExecutedAction, "executed_actions",
                                     lambda m: steps.append(m.episode_step), EXECUTED_QOS)
    proc = start("libero_sim", f"run_dir:={run_dir}")
    try:
        out, reader = _follow(proc, "[agent]: run ", 300)
        # Mid-run: the arm has moved a second of its control steps, which the cameras showed.
        wait_until(lambda: len(steps) >= 20, 120, what="20 executed steps of the run")
        os.kill(proc.pid, signal.SIGINT)
        code = proc.wait(60)
    finally:
        watcher.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(10)
    text = "".join(out)
    assert code == 128 + signal.SIGINT, text[-4000:]
    assert "did not stop" not in text, text[-4000:]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "canceled", result
    assert (run_dir / "transcript.json").exists() and (run_dir / "episode.mp4").exists()


def test_the_model_node_is_started_by_am_python(tmp_path):
    """am_python names the interpreter of the model node (a venv's python): a wrapper that
    notes its arguments, then runs this environment's Python, starts the node."""
    marker = tmp_path / "argv"
    python = tmp_path / "venv_python"
    python.write_text(f'#!/bin/sh\necho "$@" > {marker}\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    proc = start("action_model", "am_backend:=scripted", f"am_python:={python}",
                 "robot_namespace:=am_python_robot")
    try:
        deadline = time.monotonic() + 60
        while not marker.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert marker.exists(), "the model node was not started through am_python"
        argv = marker.read_text().split()
        assert argv[0].endswith("/rpent_am/am_node") and "--ros-args" in argv, argv
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=60)
