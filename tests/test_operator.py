"""Operator requests on a Franka (franky-sim): the agent asks, a person answers from the
terminal (``rpent operator``) or from a viewer's Call Service panel (the Foxglove bridge),
and the verdict lands in ``task_status`` and the run's ``result.json``.
"""
from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from action_msgs.msg import GoalStatus

from rpent_common.processes import wait_until
from rpent_contract.client import ActionClient, wait_future
from rpent_contract.qos import LATCHED_QOS
from rpent_interfaces.action import RunTask
from rpent_interfaces.msg import OperatorRequests, TaskStatus

QUESTION = "Is the mug on the plate?"

pytestmark = pytest.mark.slow


def operator_cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rpent.cli", "operator", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def operator_franka(franka):
    """The Franka (operator:=human, its default), with its task status and pending requests
    as they arrive."""
    client, _sim, node = franka
    statuses, requests = [], []
    client.node.create_subscription(TaskStatus, "task_status", statuses.append, LATCHED_QOS)
    client.node.create_subscription(OperatorRequests, "operator/requests", requests.append,
                                    LATCHED_QOS)
    return client, node, statuses, requests


def _pending(requests) -> list:
    return list(requests[-1].pending) if requests else []


def test_a_run_ends_with_the_verdict_the_operator_gives_on_the_terminal(operator_franka,
                                                                         node_factory, tmp_path):
    client, _, statuses, _ = operator_franka
    assert client.reset().success
    plan = tmp_path / "plan.yaml"
    plan.write_text(json.dumps([
        {"tool": "observe"},
        {"tool": "request_operator_verdict", "args": {"question": QUESTION}},
        {"tool": "finish", "args": {"status": "success", "summary": "the operator agreed"}},
    ]))
    agent = node_factory("rpent_agent", "agent_node",
                         {"planner": "scripted", "plan_file": str(plan),
                          "output_dir": str(tmp_path / "runs"), "video": False},
                         name="operator_agent", remaps={"__node": "operator_agent"})
    action = ActionClient(client.node, RunTask, "/operator_agent/run_task")
    assert action.wait_for_server(timeout_sec=120), agent.log_tail()
    # The operator is ready before the agent asks, as at a bench: the CLI waits for it.
    operator = subprocess.Popen(
        [sys.executable, "-m", "rpent.cli", "operator", "answer", "yes", "--wait", "120",
         "--comment", "mug is on the plate"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        handle = wait_future(action.send_goal_async(RunTask.Goal(instruction="put the mug on "
                                                                 "the plate")), 10, "goal")
        response = wait_future(handle.get_result_async(), 180, "run_task result")
        out, err = operator.communicate(timeout=30)
    finally:
        if operator.poll() is None:
            operator.kill()
    assert operator.returncode == 0, (out, err)
    assert re.search(r"verdict \w+ answered yes", out), out
    assert response.status == GoalStatus.STATUS_SUCCEEDED
    result = response.result
    assert result.task_success and result.success_source == TaskStatus.SOURCE_OPERATOR
    recorded = json.loads((Path(result.run_dir) / "result.json").read_text())
    assert recorded["task_success"] and recorded["success_source"] == "operator", recorded
    transcript = json.loads(Path(result.transcript_path).read_text())
    answer = next(e for e in transcript["events"] if e["kind"] == "tool_result"
                  and e["tool"] == "request_operator_verdict")
    assert "operator says the task is achieved (mug is on the plate)" in answer["text"]
    final = wait_until(lambda: statuses and statuses[-1].success and statuses[-1], 10,
                       what="the operator's verdict on task_status")
    assert final.success_source == TaskStatus.SOURCE_OPERATOR and final.done
    # A new episode starts without a verdict.
    assert client.reset().success
    fresh = wait_until(lambda: statuses[-1].episode_id != final.episode_id and statuses[-1],
                       10, what="the next episode's status")
    assert not fresh.success and fresh.success_source == TaskStatus.SOURCE_NONE


def test_ctrl_c_while_the_operator_is_asked_keeps_the_runs_files(operator_franka,
                                                                   node_factory, tmp_path):
    """The request is withdrawn, and the run ends interrupted with its result and
    transcript written, within the time launch gives a node before it kills it."""
    client, _, _, requests = operator_franka
    assert client.reset().success
    plan = tmp_path / "plan.yaml"
    plan.write_text(json.dumps([
        {"tool": "request_operator_verdict", "args": {"question": QUESTION}},
        {"tool": "finish", "args": {"status": "success", "summary": "never reached"}},
    ]))
    run_dir = tmp_path / "run"
    agent = node_factory("rpent_agent", "agent_node",
                         {"planner": "scripted", "plan_file": str(plan), "run_dir": str(run_dir),
                          "instruction": "put the mug on the plate"},
                         name="interrupted_agent", remaps={"__node": "interrupted_agent"})
    wait_until(lambda: any(r.text == QUESTION for r in _pending(requests)), 120,
               what=f"the agent's question to the operator\n{agent.log_tail()}")
    assert agent.stop(timeout=10, signum=signal.SIGINT) == 128 + signal.SIGINT, \
        agent.log_path.read_text()[-3000:]
    wait_until(lambda: requests and not _pending(requests), 5, what="the request withdrawn")
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "canceled" and "SIGINT" in result["summary"], result
    transcript = json.loads((run_dir / "transcript.json").read_text())
    assert any(e["kind"] == "tool_result" and e["tool"] == "request_operator_verdict"
               for e in transcript["events"]), transcript["events"]


def test_an_unanswered_request_times_out_and_says_how_to_answer(operator_franka):
    client, _, statuses, requests = operator_franka
    status, result = client.request_verdict(QUESTION, timeout=1.0)
    assert status == GoalStatus.STATUS_ABORTED and not result.answered
    assert "no operator answered within 1 s" in result.message
    assert "rpent operator" in result.message
    wait_until(lambda: requests and not _pending(requests), 5, what="the request withdrawn")
    assert statuses[-1].success_source == TaskStatus.SOURCE_NONE
    # Nothing is waiting, so an answer is refused with the reason.
    refused = operator_cli("answer", "yes")
    assert refused.returncode == 1 and "no request" in refused.stderr, refused


def test_bad_requests_get_a_clear_error(operator_franka):
    client, *_ = operator_franka
    status, result = client.request_verdict(QUESTION, timeout=float("nan"))
    assert status == GoalStatus.STATUS_ABORTED and "finite" in result.message
    bad = operator_cli("answer", "maybe")
    assert bad.returncode == 2 and "neither yes" in bad.stderr


def test_a_scene_reset_answered_from_a_viewer_starts_a_new_episode(operator_franka, node_factory):
    from rpent_foxglove.client import FoxgloveClient

    client, _, statuses, requests = operator_franka
    bridge = node_factory("rpent_foxglove", "bridge", {"port": 0, "stats_period": 0.0},
                          name="operator_bridge")
    port = wait_until(lambda: (m := re.search(r"ws://127\.0\.0\.1:(\d+)", bridge.log_tail(200)))
                      and int(m.group(1)), 60, what="the bridge to listen")
    before = wait_until(lambda: statuses and statuses[-1], 10, what="task_status")
    box = {}
    asker = threading.Thread(daemon=True, target=lambda: box.setdefault(
        "reset", client.request_scene_reset("the mug fell over; stand it up", timeout=120)))
    asker.start()
    wait_until(lambda: _pending(requests), 20, what="the scene-reset request")
    listed = operator_cli("list")
    assert listed.returncode == 0, listed
    assert re.search(r"\[scene reset \w+\] the mug fell over; stand it up", listed.stdout)

    async def viewer():
        async with FoxgloveClient(f"ws://127.0.0.1:{port}") as fox:
            with pytest.raises(RuntimeError, match="has no field"):
                await fox.call_service("/operator/answer", {"succes": True}, 30)
            return await fox.call_service("/operator/answer",
                                          {"success": True, "comment": "stood it up"}, 30)

    reply = asyncio.run(viewer())
    assert reply["accepted"], reply
    asker.join(120)
    status, result = box["reset"]
    assert status == GoalStatus.STATUS_SUCCEEDED and result.done, result.message
    assert result.comment == "stood it up" and result.answered_by == "operator"
    assert result.episode_id and result.episode_id != before.episode_id
    wait_until(lambda: statuses[-1].episode_id == result.episode_id, 10,
               what="task_status of the new episode")
    assert bridge.alive(), bridge.log_tail()


def test_the_console_prompts_for_each_request_and_passes_the_answer_back(operator_franka):
    client, _, statuses, requests = operator_franka
    console = subprocess.Popen([sys.executable, "-m", "rpent.cli", "operator"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        box = {}
        asker = threading.Thread(daemon=True, target=lambda: box.setdefault(
            "verdict", client.request_verdict(QUESTION, timeout=60)))
        asker.start()
        wait_until(lambda: _pending(requests), 20, what="the verdict request")
        # What the person types at the prompt: "maybe" is asked again, then a no with words.
        console.stdin.write("maybe\nn the mug is still on the table\n")
        console.stdin.flush()
        asker.join(60)
        status, verdict = box["verdict"]
    finally:
        console.send_signal(signal.SIGINT)  # Ctrl-C
        out = console.communicate(timeout=15)[0]
    assert console.returncode == 130, out
    assert status == GoalStatus.STATUS_SUCCEEDED and verdict.answered, verdict.message
    assert not verdict.success and verdict.comment == "the mug is still on the table"
    assert re.search(r"\[verdict \w+\] " + re.escape(QUESTION), out), out
    assert "neither yes" in out, out
    final = wait_until(lambda: statuses[-1].success_source == TaskStatus.SOURCE_OPERATOR
                       and statuses[-1], 10, what="the verdict on task_status")
    assert not final.success and not final.done
