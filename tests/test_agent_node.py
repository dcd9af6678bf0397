"""The agent node end to end: real LIBERO node, agent node processes, run_task over DDS,
an MCP client over streamable HTTP on loopback."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import cv2
import pytest
from action_msgs.msg import GoalStatus
from mcp import Client, types

from rpent_common.processes import free_port, wait_until
from rpent_contract.client import ActionClient, RobotClient, wait_future
from rpent_interfaces.action import RunTask
from rpent_interfaces.msg import AgentEvent, RobotState

SOUP = "pick the alphabet soup and place it in the basket"


@pytest.fixture(scope="module")
def robot(rclpy_context, node_factory):
    proc = node_factory("rpent_env_sim", "libero_node",
                        {"suite": "libero_object", "task_id": 0}, name="agent_node_robot")
    client = RobotClient()
    client.wait_ready(180)
    states = []
    client.node.create_subscription(RobotState, "robot_state", states.append, 10)
    yield client, states
    client.close()
    assert proc.alive(), proc.log_tail()


class Agent:
    """An agent node process and a run_task client for it."""

    def __init__(self, node_factory, client, tmp_path, name, **parameters):
        self.out = tmp_path / name
        self.proc = node_factory("rpent_agent", "agent_node",
                                 {"output_dir": str(self.out), **parameters}, name=name,
                                 remaps={"__node": name})
        self.action = ActionClient(client.node, RunTask, f"/{name}/run_task")
        self.events, self.feedback = [], []
        client.node.create_subscription(AgentEvent, f"/{name}/events", self.events.append, 50)
        if not self.action.wait_for_server(timeout_sec=120):
            pytest.fail(f"agent node {name} did not come up:\n{self.proc.log_tail()}")

    def send(self, instruction, **fields):
        goal = RunTask.Goal(instruction=instruction, **fields)
        handle = wait_future(self.action.send_goal_async(
            goal, feedback_callback=lambda fb: self.feedback.append(fb.feedback)), 10, "goal")
        assert handle.accepted
        return handle

    @staticmethod
    def result(handle, timeout):
        response = wait_future(handle.get_result_async(), timeout, "run_task result")
        return response.status, response.result


@pytest.fixture(scope="module")
def scripted_agent(robot, node_factory, tmp_path_factory):
    client, _ = robot
    return Agent(node_factory, client, tmp_path_factory.mktemp("agent"), "agent_scripted",
                 planner="scripted", reset_episode=True)


def _frame_count(path) -> int:
    video = cv2.VideoCapture(str(path))
    try:
        return int(video.get(cv2.CAP_PROP_FRAME_COUNT))
    finally:
        video.release()


@pytest.mark.slow
def test_scripted_planner_reaches_native_success_through_run_task(scripted_agent):
    agent = scripted_agent
    status, result = agent.result(agent.send(SOUP), 300)
    assert status == GoalStatus.STATUS_SUCCEEDED
    assert result.status == RunTask.Result.STATUS_SUCCESS, result.summary
    assert result.task_success, "the simulator's own success check must agree"
    assert result.tool_calls == result.turns == 11  # observe, poses, 6 moves, 2 grips, finish
    run_dir = Path(result.run_dir)
    transcript = json.loads(Path(result.transcript_path).read_text())
    assert transcript["instruction"] == SOUP and transcript["result"]["status"] == "success"
    calls = [e["tool"] for e in transcript["events"] if e["kind"] == "tool_call"]
    assert calls[:3] == ["observe", "get_object_poses", "move_to"] and calls[-1] == "finish"
    assert all("duration" in e for e in transcript["events"])
    assert json.loads((run_dir / "result.json").read_text())["task_success"] is True
    frames = _frame_count(run_dir / "episode.mp4")
    assert frames > 100, "one frame per executed control step"
    # A clip of each motion (6 moves, 2 grips), in the order they ran, linked from the log.
    clips = json.loads((run_dir / "result.json").read_text())["clips"]
    motions = [c for c in calls if c in ("move_to", "gripper")]
    assert [c.split("_", 1)[1] for c in clips] == [f"{m}.mp4" for m in motions], clips
    counts = [_frame_count(run_dir / c) for c in clips]
    assert all(counts) and sum(counts) <= frames, (counts, frames)
    assert min(counts[i] for i, m in enumerate(motions) if m == "move_to") > 5, counts
    results = [e for e in transcript["events"] if e["kind"] == "tool_result"
               and e["tool"] in ("move_to", "gripper")]
    assert [e["clip"] for e in results] == clips
    wait_until(lambda: any(e.kind == AgentEvent.KIND_FINISH for e in agent.events), 5,
               what="the finish event")
    kinds = {e.kind for e in agent.events}
    assert {AgentEvent.KIND_TOOL_CALL, AgentEvent.KIND_TOOL_RESULT} <= kinds
    linked = [e.text.rsplit("[clip: ", 1)[1].rstrip("]") for e in agent.events
              if e.kind == AgentEvent.KIND_TOOL_RESULT and "[clip: " in e.text]
    assert linked == [str(run_dir / c) for c in clips]
    move = next(e for e in agent.events if e.kind == AgentEvent.KIND_TOOL_CALL
                and e.tool_name == "move_to")
    assert set(json.loads(move.arguments_json)) >= {"x", "y", "z", "rpy"}
    assert [f.turn for f in agent.feedback][:3] == [1, 2, 3]


@pytest.mark.slow
def test_canceling_run_task_stops_the_arm(scripted_agent, robot):
    _, states = robot
    agent = scripted_agent
    agent.feedback.clear()
    handle = agent.send(SOUP)
    states.clear()  # from here on only this run's states
    wait_until(lambda: states and states[-1].active_goal == "move_to"
               and states[-1].episode_step > 3, 60, what="the arm moving")
    t0 = time.monotonic()
    wait_future(handle.cancel_goal_async(), 10, "cancel")
    status, result = agent.result(handle, 30)
    assert status == GoalStatus.STATUS_CANCELED
    assert result.status == RunTask.Result.STATUS_CANCELED and not result.task_success
    wait_until(lambda: states[-1].mode != RobotState.MODE_MOVING, 5, what="the arm stopping")
    assert time.monotonic() - t0 < 10
    time.sleep(0.2)  # the contract allows the step in flight to complete
    step = states[-1].episode_step
    time.sleep(0.5)
    assert states[-1].episode_step == step, [(m.mode, m.episode_step, m.active_goal)
                                             for m in states[-40:]]
    run_dir = Path(result.run_dir)
    written = json.loads((run_dir / "result.json").read_text())
    assert written["status"] == "canceled" and "canceled by the caller" in written["summary"]
    assert json.loads((run_dir / "transcript.json").read_text())["result"] == written
    assert (run_dir / "episode.mp4").stat().st_size > 0


def far_target(client, states) -> dict:
    """A workspace corner far from the hand: a move_to there takes seconds."""
    info = client.info()
    lo, hi = info.workspace_min, info.workspace_max
    p = states[-1].ee_pose.position
    return {axis: (getattr(lo, axis) + 0.05 if getattr(p, axis) > (getattr(lo, axis)
                   + getattr(hi, axis)) / 2 else getattr(hi, axis) - 0.05)
            for axis in ("x", "y", "z")}


def at_rest(states, count=10):
    """Waits for ``count`` more robot states; asserts the hand did not move in them."""
    seen = len(states)
    wait_until(lambda: len(states) >= seen + count, 5, what=f"{count} more robot states")
    poses = {(round(m.ee_pose.position.x, 4), round(m.ee_pose.position.y, 4),
              round(m.ee_pose.position.z, 4)) for m in states[seen:]}
    assert len(poses) == 1 and not any(m.active_goal for m in states[seen:]), \
        [(m.mode, m.active_goal, m.ee_pose.position) for m in states[seen:]]


@pytest.mark.slow
@pytest.mark.serial  # the robot reports no goal within 0.5 s of the run's result
@pytest.mark.parametrize("ending", ["finish", "max_turns"])
def test_a_run_ending_during_a_move_stops_the_move_and_says_so(robot, node_factory, tmp_path,
                                                               ending):
    """An MCP client may call finish, or spend the last turn, while its own move_to is still
    running: the run ends with the arm stopped, and result.json says which motion was
    stopped."""
    client, states = robot
    port = free_port()
    agent = Agent(node_factory, client, tmp_path, f"agent_mcp_{ending}", planner="mcp",
                  mcp_port=port, max_turns=10 if ending == "finish" else 1, video=False)
    url = f"http://127.0.0.1:{port}/mcp"
    wait_until(lambda: states, 10, what="a robot state")
    target = far_target(client, states)
    handle = agent.send(SOUP)
    last_call = (("finish", {"status": "failure", "summary": "gave up mid-move"})
                 if ending == "finish" else ("observe", {}))

    async def drive():
        async with Client(url) as mover, Client(url) as finisher:
            # Called as soon as the goal is accepted: the run, still being set up, answers.
            move = asyncio.ensure_future(mover.call_tool("move_to", target))
            await asyncio.to_thread(wait_until, lambda: states[-1].active_goal == "move_to",
                                    30, what="the move starting")
            done = await finisher.call_tool(*last_call)
            return done, await move

    done, moved = asyncio.run(asyncio.wait_for(drive(), 60))
    status, result = agent.result(handle, 30)
    wait_until(lambda: not states[-1].active_goal, 0.5, what="no goal active on the robot")
    at_rest(states)
    assert moved.is_error, moved
    if ending == "finish":
        assert not done.is_error, done
        assert result.status == RunTask.Result.STATUS_FAILURE, result
        assert result.summary == "gave up mid-move", result
    else:
        assert done.is_error and "turn budget is used up" in done.content[0].text, done
        assert result.status == RunTask.Result.STATUS_MAX_TURNS, result
    written = json.loads((Path(result.run_dir) / "result.json").read_text())
    (cut,) = written["calls_at_end"]
    assert cut["tool"] == "move_to" and cut["ended_by"] == "stopped" and not cut["ok"], cut
    assert cut["arguments"] == target and "did not reach the target" in cut["outcome"], cut
    transcript = json.loads((Path(result.run_dir) / "transcript.json").read_text())
    assert any(e["kind"] == "run_end_call" and e["tool"] == "move_to"
               for e in transcript["events"])


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["one_shot", "serving"])
def test_ctrl_c_cancels_the_run_writes_its_files_and_exits_non_zero(robot, node_factory,
                                                                    tmp_path, mode):
    """Ctrl-C (SIGINT) mid-run, to an agent started for one task or one serving run_task."""
    client, states = robot
    wait_until(lambda: states, 10, what="a robot state")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"tool": "move_to", "args": far_target(client, states)},
                                {"tool": "finish", "args": {"status": "success",
                                                            "summary": "moved"}}]))
    name = f"agent_interrupted_{mode}"
    parameters = {"planner": "scripted", "plan_file": str(plan)}
    if mode == "one_shot":
        proc = node_factory("rpent_agent", "agent_node",
                            {**parameters, "instruction": "move",
                             "output_dir": str(tmp_path / name)},
                            name=name, remaps={"__node": name})
    else:
        agent = Agent(node_factory, client, tmp_path, name, **parameters)
        proc, handle = agent.proc, agent.send("move")
    wait_until(lambda: states[-1].active_goal == "move_to" or not proc.alive(), 120,
               what="the agent's move starting")
    assert proc.alive(), proc.log_tail()
    os.killpg(proc.proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C or rpent.start does
    if mode == "serving":
        status, result = agent.result(handle, 30)
        assert status == GoalStatus.STATUS_ABORTED
        assert result.status == RunTask.Result.STATUS_CANCELED, result.summary
    proc.proc.wait(30)
    assert proc.proc.returncode == 128 + signal.SIGINT, proc.log_tail()
    at_rest(states)
    (run_dir,) = (tmp_path / name).iterdir()
    written = json.loads((run_dir / "result.json").read_text())
    assert written["status"] == "canceled" and "interrupted by SIGINT" in written["summary"], \
        written
    transcript = json.loads((run_dir / "transcript.json").read_text())
    assert transcript["result"] == written
    assert any(e["kind"] == "tool_result" and e["tool"] == "move_to" and not e["ok"]
               for e in transcript["events"]), transcript["events"]
    assert (run_dir / "episode.mp4").stat().st_size > 0


@pytest.mark.slow
def test_an_mcp_client_lists_and_calls_the_tools(robot, node_factory, tmp_path):
    client, _ = robot
    port = free_port()
    agent = Agent(node_factory, client, tmp_path, "agent_mcp", planner="mcp", mcp_port=port,
                  max_turns=10)
    url = f"http://127.0.0.1:{port}/mcp"

    async def before_run():
        async with Client(url) as mcp:
            names = [t.name for t in (await mcp.list_tools()).tools]
            idle = await mcp.call_tool("observe", {})
            return names, idle

    names, idle = asyncio.run(asyncio.wait_for(before_run(), 30))
    assert {"observe", "move_to", "gripper", "get_object_poses", "finish", "memory_read",
            "memory_write", "memory_list"} <= set(names)
    assert idle.is_error and "no task is running" in idle.content[0].text

    from rclpy.qos import DurabilityPolicy, QoSProfile

    from rpent_interfaces.msg import RunStatus
    states = []
    client.node.create_subscription(RunStatus, "/agent_mcp/run_status", states.append,
                                    QoSProfile(depth=10,
                                               durability=DurabilityPolicy.TRANSIENT_LOCAL))
    handle = agent.send(SOUP)
    # The run starts a moment after its goal is accepted: drive it once it runs.
    wait_until(lambda: any(s.state == "running" and s.instruction == SOUP for s in states), 30,
               what="the run to start")

    async def drive():
        async with Client(url) as mcp:
            seen = await mcp.call_tool("observe", {})
            escape = await mcp.call_tool("memory_write", {"path": "../x.md", "content": "x"})
            moved = await mcp.call_tool("move_to", {"x": 0.4, "y": 0.0, "z": 3.0})
            done = await mcp.call_tool("finish", {"status": "stuck", "summary": "over MCP"})
            after = await mcp.call_tool("observe", {})
            return seen, escape, moved, done, after

    seen, escape, moved, done, after = asyncio.run(asyncio.wait_for(drive(), 60))
    assert not seen.is_error and SOUP in seen.content[0].text
    images = [c for c in seen.content if isinstance(c, types.ImageContent)]
    assert len(images) == 2 and all(i.mime_type == "image/png" for i in images)
    assert escape.is_error and "outside the memory folder" in escape.content[0].text
    assert moved.is_error and "refused" in moved.content[0].text
    assert not done.is_error and after.is_error
    status, result = agent.result(handle, 30)
    assert result.status == RunTask.Result.STATUS_STUCK and result.summary == "over MCP"
    assert result.turns == 4


def test_an_mcp_server_with_a_token_refuses_clients_without_it(robot, node_factory, tmp_path):
    """Beyond loopback the agent makes a token up (tested below without binding beyond
    loopback); a token given on loopback is held to in the same way."""
    import urllib.error
    import urllib.request

    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    client, _ = robot
    port = free_port()
    Agent(node_factory, client, tmp_path, "agent_mcp_token", planner="mcp", mcp_port=port,
          mcp_token="s3cret-token")
    url = f"http://127.0.0.1:{port}/mcp"
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        request = urllib.request.Request(url, data=b"{}", method="POST", headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            **headers})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 401 and b"bearer token" in refused.value.read()

    async def with_token():
        http = create_mcp_http_client(headers={"Authorization": "Bearer s3cret-token"})
        async with http, Client(streamable_http_client(url, http_client=http)) as mcp:
            return [t.name for t in (await mcp.list_tools()).tools]

    assert "observe" in asyncio.run(asyncio.wait_for(with_token(), 30))


def test_an_mcp_server_beyond_loopback_makes_up_a_token():
    from rpent_agent.planners.mcp import McpPlanner

    assert McpPlanner(lambda: None, host="127.0.0.1").token == ""
    assert McpPlanner(lambda: None, host="::1").token == ""
    made = {McpPlanner(lambda: None, host=h).token for h in ("0.0.0.0", "192.168.1.20")}
    assert len(made) == 2 and all(len(t) >= 32 for t in made)
    assert McpPlanner(lambda: None, host="0.0.0.0", token="given").token == "given"


@pytest.mark.slow
def test_startup_instruction_runs_once_and_exits(robot, node_factory, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text("- tool: gripper\n  args: {action: open}\n"
                    "- tool: finish\n  args: {status: success, summary: opened}\n")
    proc = node_factory("rpent_agent", "agent_node",
                        {"planner": "scripted", "plan_file": str(plan), "instruction": "open",
                         "output_dir": str(tmp_path / "runs"), "video": False},
                        name="agent_once", remaps={"__node": "agent_once"})
    wait_until(lambda: not proc.alive(), 120, what="the agent exiting after its run")
    assert proc.proc.returncode == 0, proc.log_tail()
    (result,) = (tmp_path / "runs").glob("*/result.json")
    assert json.loads(result.read_text())["summary"] == "opened"


@pytest.mark.slow
def test_api_planner_reports_an_unreachable_openai_compatible_server(robot, node_factory,
                                                                    tmp_path):
    """No LLM answers here: the run ends in a readable error, and the node keeps serving."""
    client, _ = robot
    agent = Agent(node_factory, client, tmp_path, "agent_api", planner="api",
                  model="openai:qwen3", base_url=f"http://127.0.0.1:{free_port()}/v1",
                  model_retries=1, images=False)
    status, result = agent.result(agent.send("open the gripper"), 120)
    assert status == GoalStatus.STATUS_ABORTED
    assert result.status == RunTask.Result.STATUS_ERROR
    assert "could not be reached" in result.summary and "base_url" in result.summary, \
        result.summary
    assert Path(result.transcript_path).is_file()
    wait_until(lambda: any(e.kind == AgentEvent.KIND_ERROR for e in agent.events), 5,
               what="the error event")
    assert agent.proc.alive(), agent.proc.log_tail()


def pick_and_place_model(conversation, prefix=""):
    """A scripted LLM: reads the object poses from the tool result it gets, then calls the
    pick-and-place plan's moves and grips one turn at a time, then finish. ``prefix``: what
    an agent CLI puts before the names of an MCP server's tools."""
    import re

    import numpy as np

    from rpent_testkit.provider_wire import Reply
    from rpent_am.pick_place import PLAN, objects_in_instruction, waypoint

    calls = [c for m in conversation.messages for c in m.tool_calls]
    if not calls:
        return Reply("Where are the objects?", [(prefix + "get_object_poses", {})])
    seen = [r[1] for m in conversation.messages for r in m.tool_results][0]
    if seen.startswith("["):  # pydantic-ai sends OpenAI a tool result of parts as JSON
        seen = "\n".join(p for p in json.loads(seen) if isinstance(p, str))
    poses = {name: np.array([float(x), float(y), float(z)]) for name, x, y, z in re.findall(
        r"(\w+): position \[([-\d.]+), ([-\d.]+), ([-\d.]+)\]", seen)}
    task = re.search(r"Task: (.*)", "\n".join(t for m in conversation.messages
                                               for t in m.texts)).group(1)
    obj, target = objects_in_instruction(task, poses)
    plan, here = [], None
    for phase in PLAN:
        if phase.anchor is None:
            plan.append(("gripper", {"action": "close" if phase.closed else "open"}))
        else:
            here = waypoint(phase, poses[obj], poses[target], here)
            plan.append(("move_to", {"x": here[0], "y": here[1], "z": here[2],
                                     "tolerance": phase.tolerance}))
    plan.append(("finish", {"status": "success", "summary": f"put {obj} in {target}"}))
    if len(calls) > len(plan):  # an agent CLI may go on after finish: the run is over
        return Reply("The soup is in the basket.")
    name, args = plan[len(calls) - 1]
    return Reply("", [(prefix + name, {k: float(v) if isinstance(v, np.floating) else v
                                       for k, v in args.items()})])


@pytest.mark.slow
# One provider's whole episode covers the api planner's path; the others' wire is covered by
# rpent_agent's fast provider-wire tests, and their episodes run in the full matrix.
@pytest.mark.parametrize("provider", ["anthropic", pytest.param("openai", marks=pytest.mark.matrix),
                                      pytest.param("openai-responses", marks=pytest.mark.matrix)])
def test_an_llm_planner_reaches_native_success_through_each_provider(robot, node_factory,
                                                                     tmp_path, provider):
    """The api planner on a serving agent node, through the provider's real SDK and wire
    (a local server that speaks it), picks and places twice in a row; the second run's
    request carries the recipe the first run left in their memory folder. The operator
    reads Chinese (language zh-cn): every request asks the model to write in it."""
    from rpent_agent.prompts import LANGUAGES, SYSTEM_PROMPT
    from rpent_testkit.provider_wire import (AnthropicServer, OpenAIChatServer,
                                          OpenAIResponsesServer)

    client, _ = robot
    server_class, model = {
        "anthropic": (AnthropicServer, "anthropic:claude-sonnet-5"),
        "openai": (OpenAIChatServer, "openai:gpt-5"),
        "openai-responses": (OpenAIResponsesServer, "openai-responses:gpt-5")}[provider]
    with server_class(pick_and_place_model) as server:
        agent = Agent(node_factory, client, tmp_path, "agent_" + provider.replace("-", "_"),
                      planner="api",
                      model=model, base_url=server.base_url, reset_episode=True,
                      memory_dir=str(tmp_path / "memory"), language="zh-cn")
        files = []
        for run in range(2):
            status, result = agent.result(agent.send(SOUP), 400)
            assert status == GoalStatus.STATUS_SUCCEEDED, (run, result.summary,
                                                           server.refused, server.failures)
            assert result.task_success and result.success_source == 1, (run, result.summary)
            tokens = json.loads((Path(result.run_dir) / "result.json").read_text())
            files.append(tokens)
            assert tokens["input_tokens"] == result.input_tokens == \
                tokens["cached_input_tokens"] + tokens["uncached_input_tokens"]
            # Anthropic is asked to cache the prompt; OpenAI caches by itself (not here).
            assert (tokens["cached_input_tokens"] > 0) == (provider == "anthropic"), tokens
    assert not server.refused and not server.failures, (server.refused, server.failures)
    assert all(r.model == model.split(":")[1] for r in server.requests)
    assert all(SYSTEM_PROMPT + LANGUAGES["zh-cn"] in r.system for r in server.requests)
    openings = ["\n".join(r.messages[0].texts) for r in server.requests if len(r.messages) == 1]
    assert len(openings) == 2 and "Recipes from earlier runs" not in openings[0]
    recipe = files[0]["recipe"]
    assert files[0]["recipes_seen"] == [] and files[1]["recipes_seen"] == [recipe]
    assert f"{recipe} (" in openings[1] and "task achieved" in openings[1]
    assert "move_to({" in openings[1] and '"status": "success"' in openings[1]


@pytest.mark.slow
def test_a_model_writing_code_reaches_native_success(robot, node_factory, tmp_path):
    """policy_mode:=code through the Anthropic wire: the model is offered run_code and the
    operator requests, sends one pick-and-place snippet, then one that finishes."""
    from code_snippets import PICK_AND_PLACE_SNIPPET
    from rpent_testkit.provider_wire import AnthropicServer, Reply

    def model(conversation):
        sent = sum(len(m.tool_calls) for m in conversation.messages)
        if sent == 0:
            return Reply("I will write the plan as code.",
                         [("run_code", {"code": PICK_AND_PLACE_SNIPPET})])
        return Reply("", [("run_code", {"code": "robo.finish(status='success', "
                                                "summary='placed the soup')"})])

    client, _ = robot
    with AnthropicServer(model) as server:
        agent = Agent(node_factory, client, tmp_path, "agent_code", planner="api",
                      model="anthropic:claude-sonnet-5", base_url=server.base_url,
                      reset_episode=True, policy_mode="code")
        status, result = agent.result(agent.send(SOUP), 400)
    assert not server.refused, server.refused
    assert {t["name"] for t in server.requests[0].tools} == {
        "run_code", "request_operator_verdict", "request_scene_reset"}
    assert "robo.<tool>" in server.requests[0].system
    assert status == GoalStatus.STATUS_SUCCEEDED, result.summary
    assert result.task_success and result.summary == "placed the soup", result.summary
    snippets = sorted((Path(result.run_dir) / "code_policy").glob("snippet_*.py"))
    assert [s.read_text() for s in snippets] == [PICK_AND_PLACE_SNIPPET,
                                                 "robo.finish(status='success', "
                                                 "summary='placed the soup')"]


# A second run on the same agent needs no second pick-and-place: a look and a finish.
LOOK = "look at the table, then finish"


def soup_or_look_model(conversation, prefix=""):
    """pick_and_place_model for the soup task; for LOOK, one observe, then finish."""
    from rpent_testkit.provider_wire import Reply

    if f"Task: {LOOK}" not in "\n".join(t for m in conversation.messages for t in m.texts):
        return pick_and_place_model(conversation, prefix)
    calls = [c[1] for m in conversation.messages for c in m.tool_calls]
    if prefix + "observe" not in calls:
        return Reply("Looking.", [(prefix + "observe", {})])
    if prefix + "finish" not in calls:
        return Reply("", [(prefix + "finish", {"status": "failure",
                                               "summary": "looked at the table"})])
    return Reply("I looked at the table.")


def after_finish_keeps_calling(prefix):
    """soup_or_look_model, then more tool calls once finish was called: a planner that
    did not stop its agent CLI at finish would go on."""
    def model(conversation):
        reply = soup_or_look_model(conversation, prefix)
        return reply if reply.tool_calls else type(reply)("", [(prefix + "observe", {})])
    return model


def task_run(agent, server, run: int):
    """Run the soup task (run 0) or LOOK (later runs); (its result, the requests the model
    server got meanwhile)."""
    before = len(server.requests)
    status, result = agent.result(agent.send(LOOK if run else SOUP), 400)
    assert status == GoalStatus.STATUS_SUCCEEDED, (run, result.summary, server.refused,
                                                   server.failures, agent.proc.log_tail())
    if run:
        assert not result.task_success and result.summary == "looked at the table", \
            result.summary
    else:
        assert result.task_success and result.summary == "put alphabet_soup_1 in basket_1", \
            result.summary
    return result, server.requests[before:]


@pytest.mark.slow
def test_claude_code_reaches_native_success_then_runs_a_second_task(robot, node_factory,
                                                                   tmp_path, monkeypatch):
    """planner:=claude_code: the real Claude Code CLI (the Claude Agent SDK's) against a
    local Anthropic Messages server, with the toolkit as its only tools, over the MCP
    server; the session is stopped at finish, and a second task runs on the same node."""
    pytest.importorskip("claude_agent_sdk", reason="the Claude Agent SDK is not installed: "
                        "scripts/setup.sh --extras agents")
    from rpent_agent.prompts import SYSTEM_PROMPT
    from rpent_testkit.provider_wire import AnthropicServer

    client, _ = robot
    prefix = "mcp__robot__"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-rpent-test")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))  # not ~/.claude
    with AnthropicServer(after_finish_keeps_calling(prefix),
                         api_key="sk-ant-rpent-test") as server:
        # With a token: the real CLI must send it.
        agent = Agent(node_factory, client, tmp_path, "agent_claude_code",
                      planner="claude_code", model="anthropic:claude-sonnet-5",
                      base_url=server.base_url, reset_episode=True, mcp_port=free_port(),
                      mcp_token="claude-token")
        for run in range(2):
            result, requests = task_run(agent, server, run)
            assert result.input_tokens > 0 and result.output_tokens > 0
            assert f"Task: {LOOK if run else SOUP}" in requests[0].messages[0].texts
            # The model would call tools after finish (up to max_turns): the session stops
            # at finish, before sending the model its result.
            after = [r for r in requests if any(c[1] == prefix + "finish"
                                                for m in r.messages for c in m.tool_calls)]
            assert after == [], len(after)
    assert not server.refused and not server.failures, (server.refused, server.failures)
    assert all(r.model == "claude-sonnet-5" for r in server.requests)
    first = server.requests[0]
    assert SYSTEM_PROMPT in first.system
    # The robot's tools and none of Claude Code's own (files, shell, web).
    tools = {t["name"] for t in first.tools}
    assert all(t.startswith(prefix) for t in tools) and {
        prefix + t for t in ("observe", "get_object_poses", "move_to", "gripper",
                             "finish")} <= tools, tools
    assert any(m.images for r in server.requests for m in r.messages)  # the cameras


def processes_in_group(pgid: int) -> list:
    """(pid, command name) of every process in the process group ``pgid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # it exited meanwhile
        name, fields = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:]
        if int(fields.split()[2]) == pgid:
            found.append((int(stat.parent.name), name))
    return found


def processes_mentioning(text: str) -> list:
    """(pid, command line) of every process whose command line contains ``text``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in args:
            found.append((int(cmdline.parent.name), args))
    return found


@pytest.mark.slow
def test_canceling_a_claude_code_run_stops_its_session(robot, node_factory, tmp_path,
                                                      monkeypatch):
    """A model that never finishes: canceling the run interrupts Claude Code, which sends
    no further request, and leaves no CLI process behind."""
    pytest.importorskip("claude_agent_sdk", reason="the Claude Agent SDK is not installed: "
                        "scripts/setup.sh --extras agents")
    from rpent_testkit.provider_wire import AnthropicServer, Reply

    client, _ = robot
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-rpent-test")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    with AnthropicServer(lambda c: Reply("Looking again.", [("mcp__robot__observe", {})])) \
            as server:
        agent = Agent(node_factory, client, tmp_path, "agent_claude_code_cancel",
                      planner="claude_code", base_url=server.base_url, mcp_port=free_port(),
                      images=False, max_turns=1000)
        pgid = agent.proc.proc.pid
        handle = agent.send("look around until told to stop")
        wait_until(lambda: len(server.requests) >= 3, 60, what="Claude Code's requests")
        assert any(name == "claude" for _, name in processes_in_group(pgid))
        wait_future(handle.cancel_goal_async(), 10, "cancel")
        status, result = agent.result(handle, 30)
        sent = len(server.requests)
        assert status == GoalStatus.STATUS_CANCELED, result.summary
        assert result.status == RunTask.Result.STATUS_CANCELED
        assert [pid for pid, _ in processes_in_group(pgid)] == [pgid], \
            processes_in_group(pgid)  # the node itself, no CLI
        assert len(server.requests) == sent
        assert agent.proc.alive(), agent.proc.log_tail()


def codex_or_skip() -> str:
    import shutil

    cli = shutil.which("codex")
    if cli is None:
        pytest.skip("the Codex CLI is not installed: scripts/setup.sh --extras agents")
    return cli


@pytest.mark.slow
def test_codex_reaches_native_success_and_stops_when_the_model_goes_on(
        robot, node_factory, tmp_path, monkeypatch):
    """planner:=codex: the real Codex CLI against a local Responses server, with the
    toolkit's MCP tools as the model's only robot tools, Codex's shell, files and web off;
    after finish the model's closing reply ends Codex by itself (run 1); a model that calls
    a tool instead has Codex stopped there (run 2)."""
    codex_or_skip()
    from rpent_agent.prompts import SYSTEM_PROMPT
    from rpent_testkit.provider_wire import OpenAIResponsesServer, Reply

    client, _ = robot
    prefix = "mcp__robot__"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-rpent-test")
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))  # not ~/.codex
    (tmp_path / "codex").mkdir()
    closing = {"reply": Reply("The soup is in the basket.")}

    def model(conversation):
        reply = soup_or_look_model(conversation, prefix)
        return reply if reply.tool_calls else closing["reply"]

    port = free_port()
    with OpenAIResponsesServer(model, api_key="sk-rpent-test") as server:
        # With a token: the real CLI must send it (from RPENT_MCP_TOKEN, not its command line).
        agent = Agent(node_factory, client, tmp_path, "agent_codex", planner="codex",
                      model="openai:rpent-test-model", base_url=server.base_url,
                      reset_episode=True, mcp_port=port, mcp_token="codex-token")
        for run in range(2):
            result, requests = task_run(agent, server, run)
            assert f"Task: {LOOK if run else SOUP}" in "\n".join(requests[0].messages[-1].texts)
            after = [r for r in requests if any(c[1] == prefix + "finish"
                                                for m in r.messages for c in m.tool_calls)]
            assert len(after) == 1, len(after)  # the finish result, then no more
            # Codex runs in a process group of its own: none of it is left.
            assert processes_mentioning(f"127.0.0.1:{port}/mcp") == []
            if run == 0:
                # Codex reports a turn's tokens when it completes.
                assert result.input_tokens > 0 and result.output_tokens > 0
            closing["reply"] = Reply("", [(prefix + "observe", {})])
    assert not server.refused and not server.failures, (server.refused, server.failures)
    first = server.requests[0]
    assert all(r.model == "rpent-test-model" for r in server.requests)
    # Our prompt instead of Codex's own; the robot's tools and none of Codex's shell, file,
    # image or agent tools.
    assert SYSTEM_PROMPT in "\n".join(first.messages[0].texts)
    tools = {t["name"] for t in first.tools}
    robot_tools = {t for t in tools if t.startswith(prefix)}
    assert {prefix + t for t in ("observe", "get_object_poses", "move_to", "gripper",
                                 "finish")} <= robot_tools
    assert not {"exec_command", "shell", "view_image", "apply_patch", "web_search"} & tools, \
        tools
    assert any(m.images for r in server.requests for m in r.messages)  # the cameras


@pytest.mark.slow
def test_codex_without_its_cli_says_how_to_install_it(node_factory, robot, tmp_path):
    proc = node_factory("rpent_agent", "agent_node",
                        {"planner": "codex", "codex_cli": str(tmp_path / "no-codex"),
                         "output_dir": str(tmp_path)}, name="agent_no_codex")
    wait_until(lambda: not proc.alive(), 60, what="the node to exit")
    assert proc.proc.returncode != 0
    assert "needs the Codex CLI" in proc.log_tail() and "--extras agents" in proc.log_tail(), \
        proc.log_tail()
