"""A session (``serve:=true``) driven from the dashboard and the terminal: a viewer connected
through the bridge (config/foxglove_bridge.yaml) starts a run with the layout's Start button
service, sees its events, cancels it and starts the next one, all without reconnecting;
``rpent task`` does the same from a shell. Every run gets a folder of its own.

A LIBERO robot, a scripted action model and a serving scripted agent run as processes; the
agent's plan streams the action model for long enough to be canceled mid-run.
"""
from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rpent_common.processes import wait_until
from rpent_contract.client import RobotClient, next_message
from rpent_contract.names import TASK_STATUS_TOPIC
from rpent_contract.qos import LATCHED_QOS
from rpent_foxglove.client import FoxgloveClient, decoder_for
from rpent_interfaces.msg import TaskStatus

CONFIG = Path(__file__).resolve().parents[1] / "config"
LAYOUT = json.loads((CONFIG / "foxglove_layout.json").read_text())
START, CANCEL = "/agent/start_run", "/agent/cancel_run"

pytestmark = pytest.mark.slow


def rpent_task(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rpent.cli", "task", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def session(rclpy_context, node_factory, tmp_path_factory):
    """Robot, model, a serving agent and the bridge up, no run yet. Yields the bridge's URL
    and the folder the agent's runs go to."""
    tmp = tmp_path_factory.mktemp("session")
    # At the control rate, the expert's few hundred steps take long enough to cancel.
    node_factory("rpent_env_sim", "libero_node", {"real_time": True}, name="session_robot")
    node_factory("rpent_am", "am_node", {"backend": "scripted"}, name="action_model")
    client = RobotClient()
    try:
        client.wait_ready(180)
        instruction = next_message(client.node, TaskStatus, TASK_STATUS_TOPIC, LATCHED_QOS,
                                   30).instruction
    finally:
        client.close()
    plan = tmp / "plan.yaml"
    plan.write_text(yaml.safe_dump([
        {"tool": "run_policy", "args": {"instruction": instruction, "max_chunks": 400}},
        {"tool": "finish", "args": {"status": "failure", "summary": "the policy ran out"}}]))
    runs = tmp / "runs"
    agent = node_factory("rpent_agent", "agent_node",
                         {"planner": "scripted", "plan_file": str(plan), "video": False,
                          "action_model": "/action_model", "output_dir": str(runs)},
                         name="agent", remaps={"__node": "agent"})
    bridge = node_factory("rpent_foxglove", "bridge", {"port": 0, "stats_period": 0.0},
                          name="session_bridge", params_file=CONFIG / "foxglove_bridge.yaml")
    port = wait_until(lambda: (m := re.search(r"ws://127\.0\.0\.1:(\d+)", bridge.log_tail(200)))
                      and int(m.group(1)), 60, what="the bridge to listen")
    wait_until(lambda: "agent ready" in agent.log_tail(200), 120, what="the agent to serve")
    yield f"ws://127.0.0.1:{port}", runs, instruction
    assert agent.alive(), agent.log_tail()
    assert bridge.alive(), bridge.log_tail()


def _events(fox, messages, kind, tool: str = "") -> list:
    """The agent events of ``kind`` (and ``tool``) among what the viewer got."""
    decode = decoder_for(fox.by_topic("/agent/events"))
    events = [decode(m.data) for m in messages if m.topic == "/agent/events"]
    return [e for e in events if e.kind == kind and (not tool or e.tool_name == tool)]


def test_the_layouts_run_buttons_call_the_agents_services():
    services = {c["serviceName"] for p, c in LAYOUT["configById"].items()
                if p.startswith("CallService!")}
    assert {START, CANCEL} <= services


def test_a_viewer_starts_cancels_and_starts_again_without_reconnecting(session):
    from rpent_interfaces.msg import AgentEvent

    url, runs, instruction = session
    # The Start button's payload as the layout ships it: the robot's own task.
    start = json.loads(LAYOUT["configById"]["CallService!start"]["requestPayload"])

    async def viewer():
        async with FoxgloveClient(url) as fox:
            await fox.wait_for_topics(["/agent/events"], 60)
            await fox.subscribe(["/agent/events"])
            bad = await fox.call_service(START, {"instruction": "x", "max_turns": -1}, 30)
            assert not bad["accepted"] and "max_turns must be >= 0" in bad["message"], bad
            for n in range(1, 3):
                reply = await fox.call_service(START, start, 30)
                assert reply["accepted"], reply
                assert reply["message"] == f"run started: '{instruction}'"
                again = await fox.call_service(START, {"instruction": "another"}, 30)
                assert not again["accepted"] and "a run is in progress" in again["message"]
                # The run is streaming the model when the viewer cancels it.
                await fox.collect(60, until=lambda ms: _events(
                    fox, ms, AgentEvent.KIND_TOOL_CALL, "run_policy"))
                canceled = await fox.call_service(CANCEL, {}, 30)
                assert canceled["success"], canceled
                got = await fox.collect(60, until=lambda ms: _events(
                    fox, ms, AgentEvent.KIND_FINISH))
                (finish,) = _events(fox, got, AgentEvent.KIND_FINISH)
                assert finish.text.startswith("canceled: canceled by agent/cancel_run"), \
                    finish.text
                # The finish event comes once the run's files are written and the agent is
                # free: the next start, sent at once, is accepted.
                assert len(list(runs.glob("*/result.json"))) == n
            nothing = await fox.call_service(CANCEL, {}, 30)
            assert not nothing["success"] and nothing["message"] == "no run is in progress"

    asyncio.run(viewer())
    results = [json.loads(p.read_text()) for p in sorted(runs.glob("*/result.json"))]
    assert [r["status"] for r in results] == ["canceled", "canceled"], results


def test_rpent_task_starts_and_cancels_a_run_from_a_shell(session):
    url, runs, _ = session
    before = set(runs.glob("*/result.json"))
    started = rpent_task("start", "pick up the alphabet soup and place it in the basket")
    assert started.returncode == 0, started
    assert "run started" in started.stdout
    refused = rpent_task("start")
    assert refused.returncode == 1 and "a run is in progress" in refused.stderr, refused
    canceled = rpent_task("cancel")
    assert canceled.returncode == 0, canceled
    new = wait_until(lambda: set(runs.glob("*/result.json")) - before, 60,
                     what="the canceled run's result.json")
    (result,) = [json.loads(p.read_text()) for p in new]
    assert result["status"] == "canceled", result
    assert rpent_task("cancel").returncode == 1
    missing = rpent_task("--agent", "/nobody", "--timeout", "2", "cancel")
    assert missing.returncode == 1 and "no agent serves /nobody/cancel_run" in missing.stderr


def test_a_viewer_runs_a_task_it_chooses_follows_it_and_resets_the_episode(session):
    """The Start button's suite / task fields reset the robot to that task first, through
    the robot's own checks; the run panel (agent/run_status) shows what runs and how it
    ended; the Reset button resets the robot's episode (back to the session's task)."""
    url, _, instruction = session
    assert {"/reset"} <= {c["serviceName"] for p, c in LAYOUT["configById"].items()
                          if p.startswith("CallService!")}
    start = json.loads(LAYOUT["configById"]["CallService!start"]["requestPayload"])
    assert {"suite", "task_id", "init_state_index"} <= set(start)

    def panel(fox, messages, topic="/agent/run_status") -> list:
        decode = decoder_for(fox.by_topic(topic))
        return [decode(m.data) for m in messages if m.topic == topic]

    async def viewer():
        async with FoxgloveClient(url) as fox:
            await fox.wait_for_topics(["/agent/run_status", "/agent/events", "/sim/tasks"], 60)
            await fox.subscribe(["/agent/run_status", "/agent/events", "/sim/tasks"])
            # The tasks to choose from (latched): the session's suite, its task 0 running.
            got = await fox.collect(30, until=lambda ms: panel(fox, ms, "/sim/tasks"))
            (tasks,) = panel(fox, got, "/sim/tasks")
            assert tasks.suite == "libero_object" and tasks.suite in tasks.suites
            assert len(tasks.instructions) == len(tasks.init_states) == 10
            assert tasks.dimensions == []  # LIBERO's suites perturb nothing
            assert tasks.instructions[0] == instruction and min(tasks.init_states) > 2
            bad = await fox.call_service(START, {**start, "task_id": 999}, 90)
            assert not bad["accepted"] and "the robot refused the task" in bad["message"], bad
            reply = await fox.call_service(START, {**start, "task_id": 1,
                                                   "init_state_index": 2}, 90)
            assert reply["accepted"], reply
            chosen = reply["message"].split("'")[1]
            assert chosen == tasks.instructions[1] != instruction, reply
            running = await fox.collect(60, until=lambda ms: any(
                s.state == "running" and s.tool == "run_policy" for s in panel(fox, ms)))
            now = [s for s in panel(fox, running) if s.state == "running"][-1]
            assert (now.instruction, now.task_id, now.tool) == (chosen, 1, "run_policy")
            assert now.turn >= 1 and now.run_dir
            assert (await fox.call_service(CANCEL, {}, 30))["success"]
            # The panel's topic and the events' arrive in their own order: wait on the panel.
            ended = await fox.collect(60, until=lambda ms: any(
                s.state != "running" for s in panel(fox, ms)))
            assert [s.state for s in panel(fox, ended)][-1] == "canceled"
            back = await fox.call_service("/reset", {"task_id": 0}, 90)
            assert back["success"] and back["instruction"] == instruction, back

    asyncio.run(viewer())
