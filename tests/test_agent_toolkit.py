"""The agent's toolkit and LLM loop against the real LIBERO node (and action-model node).

The LLM is a pydantic-ai FunctionModel: a script that calls tools and checks what comes
back (text and camera images) exactly as a real model would receive it, with no network.
"""
from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest
from pydantic_ai import BinaryContent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

from code_snippets import PICK_AND_PLACE_SNIPPET
from distributions import install
from rpent_agent.memory import MemoryDir
from rpent_agent.observer import RobotObserver
from rpent_agent.planners.api import ApiPlanner
from rpent_agent.toolkit import RunState, Timeouts, Toolkit
from rpent_common.processes import wait_until
from rpent_contract.client import RobotClient
from rpent_contract.contributions import ContributionError
from rpent_interfaces.msg import RobotState

SOUP = "pick the alphabet soup and place it in the basket"


@pytest.fixture(scope="module")
def robot(rclpy_context, node_factory):
    proc = node_factory("rpent_env_sim", "libero_node",
                        {"suite": "libero_object", "task_id": 0}, name="agent_tk_robot")
    client = RobotClient()
    info = client.wait_ready(180)
    observer = RobotObserver(client.node, info.camera_names)
    observer.wait_ready(20)
    yield client, info, observer, proc
    client.close()
    assert proc.alive(), proc.log_tail()


def make_toolkit(robot, tmp_path, max_turns=10, timeouts=Timeouts(), **kwargs):
    client, info, observer, _ = robot
    events = []
    toolkit = Toolkit(client, info, observer, RunState(SOUP, max_turns, 0),
                      memory=MemoryDir(tmp_path / "memory"), timeouts=timeouts,
                      listener=lambda **e: events.append(e), **kwargs)
    return toolkit, events


def returns(messages):
    """The tool returns in the newest request: name -> content list."""
    return {p.tool_name: p.content for p in messages[-1].parts if isinstance(p, ToolReturnPart)}


def images_in(messages) -> int:
    return sum(isinstance(c, BinaryContent) for m in messages for p in m.parts
               for c in (p.content if isinstance(getattr(p, "content", None), list) else []))


def scripted_model(script, image_counts=None):
    """FunctionModel that plays ``script``: one callable per turn, given the last returns."""
    seen = []

    def model(messages, info):
        turn = len(seen)
        seen.append(returns(messages))
        if image_counts is not None:
            image_counts.append(images_in(messages))
        step = script[min(turn, len(script) - 1)]
        return ModelResponse(parts=step(seen[-1]))
    return FunctionModel(model), seen


def test_model_calls_tools_and_receives_text_and_images(robot, tmp_path):
    toolkit, events = make_toolkit(robot, tmp_path)
    image_counts = []
    model, seen = scripted_model([
        lambda r: [TextPart("Let me look."), ToolCallPart("observe", {})],
        lambda r: [ToolCallPart("memory_write", {"path": "../../outside.md", "content": "x"})],
        lambda r: [ToolCallPart("gripper", {"action": "open"})],
        lambda r: [ToolCallPart("finish", {"status": "failure", "summary": "just looking"})],
    ], image_counts)
    ApiPlanner(model, max_history_images=3).run(toolkit)

    assert toolkit.run.finished == ("failure", "just looking"), toolkit.run.finished
    assert toolkit.run.turns == 4 and toolkit.run.tool_calls == 5  # + the opening observe
    assert toolkit.run.input_tokens > 0 and toolkit.run.output_tokens > 0
    observed = seen[1]["observe"]
    assert "alphabet soup" in observed[0] and "end effector: position" in observed[0]
    images = [c for c in observed if isinstance(c, BinaryContent)]
    assert len(images) == 2 and all(i.media_type == "image/png" and i.data[:4] == b"\x89PNG"
                                    for i in images)
    assert seen[2]["memory_write"][0].startswith("ERROR: memory_write refused")
    assert not (tmp_path / "outside.md").exists()
    assert "gripper at 0.0" in seen[3]["gripper"][0]
    kinds = [e["kind"] for e in events]
    assert kinds.count("tool_call") == 5 and kinds.count("tool_result") == 5
    assert {"kind": "reasoning", "text": "Let me look."} in events
    # Results bring 2 images (memory_write none); the history the model sees keeps the
    # newest 3 to 8, dropping 6 at a time: of 2, 4, 4 and 6 images, none yet.
    assert image_counts == [2, 4, 4, 6]


def test_an_installed_package_adds_a_tool_and_a_prompt(robot, tmp_path, example_package,
                                                       monkeypatch):
    """examples/rpent_example, installed: its tool is offered to the model and goes through
    the refusals every tool goes through; its prompt is in the system prompt for this robot."""
    monkeypatch.syspath_prepend(str(example_package))
    toolkit, _ = make_toolkit(robot, tmp_path, images=False)
    offered, instructions = [], []

    def model(messages, info):
        offered.append({t.name for t in info.function_tools})
        instructions.append(messages[0].instructions)
        return inner(messages, info)
    script, seen = scripted_model([
        lambda r: [ToolCallPart("distance_to", {"x": "far", "y": 0.0, "z": 1.0})],
        lambda r: [ToolCallPart("distance_to", {"x": "inf", "y": 0.0, "z": 1.0})],
        lambda r: [ToolCallPart("distance_to", {"x": 0.1})],
        lambda r: [ToolCallPart("distance_to", {"x": 0.1, "y": 0.0, "z": 1.0})],
        lambda r: [ToolCallPart("finish", {"status": "failure", "summary": "measured"})],
    ])
    inner = script.function
    ApiPlanner(FunctionModel(model)).run(toolkit)

    assert "distance_to" in offered[0] and "observe" in offered[0]
    assert "check with distance_to that the fingers are within 1 cm" in instructions[0]
    assert "Example:\nget_object_poses -> move_to 5 cm above" in instructions[0]
    texts = [seen[i]["distance_to"][0] for i in range(1, 5)]
    assert texts[0].startswith("ERROR: distance_to refused: could not convert"), texts[0]
    assert "x, y and z must be finite numbers of metres" in texts[1], texts[1]
    assert texts[2].startswith("ERROR: distance_to: bad arguments"), texts[2]
    position = robot[2].state().ee_pose.position
    expected = ((0.1 - position.x) ** 2 + position.y ** 2 + (1.0 - position.z) ** 2) ** 0.5
    said = re.match(r"the point is ([\d.]+) m from the end effector \(offset x ", texts[3])
    assert said and abs(float(said.group(1)) - expected) < 0.002, texts[3]
    late = toolkit.call("distance_to", {"x": 0.1, "y": 0.0, "z": 1.0})
    assert not late.ok and "the run has already ended" in late.text


TOOL_NAMED_LIKE_OURS = """
from rpent_agent.toolkit import Tool, ToolResult
def tools(toolkit):
    return [Tool("observe", "another observe", {"type": "object", "properties": {}},
                 lambda: ToolResult("mine"))]
"""


def test_a_package_whose_tool_takes_a_built_in_name_is_named(robot, tmp_path, monkeypatch):
    site = install(tmp_path / "site", "rpent-clash", "rpent.tools", {"look": "rpent_clash:tools"},
                   {"rpent_clash": TOOL_NAMED_LIKE_OURS})
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(ContributionError, match=re.escape(
            "'look' (rpent_clash:tools) of package rpent-clash adds a tool named 'observe', "
            "which exists already: rename it in that package")):
        make_toolkit(robot, tmp_path)


def test_refused_motion_comes_back_to_the_model_as_text(robot, tmp_path):
    toolkit, _ = make_toolkit(robot, tmp_path)
    model, seen = scripted_model([
        lambda r: [ToolCallPart("move_to", {"x": 0.4, "y": 0.0, "z": 2.5})],
        lambda r: [ToolCallPart("finish", {"status": "stuck", "summary": "refused"})],
    ])
    ApiPlanner(model).run(toolkit)
    text = seen[1]["move_to"][0]
    assert text.startswith("ERROR: move_to refused by the robot") and "workspace" in text, text
    assert toolkit.run.finished[0] == "stuck"


def test_rotate_wrist_turns_the_hand_in_place_and_observe_shows_one_camera(robot, tmp_path):
    import numpy as np

    from rpent_contract.geometry import quaternion_multiply, quaternion_to_matrix, rotation_angle

    client, _, observer, _ = robot
    toolkit, _ = make_toolkit(robot, tmp_path)

    def hand():
        observer.catch_up()
        pose = observer.state().ee_pose
        return (np.array([pose.position.x, pose.position.y, pose.position.z]),
                np.array([pose.orientation.x, pose.orientation.y, pose.orientation.z,
                          pose.orientation.w]))

    p0, q0 = hand()
    result = toolkit.call("rotate_wrist", {"angle": 0.5})
    assert result.ok, result.text
    p1, q1 = hand()
    assert np.linalg.norm(p1 - p0) < 0.01
    # Turned about its own z axis by the angle asked: z stays, and q1 is q0 turned about it.
    assert np.degrees(np.arccos(np.clip(quaternion_to_matrix(q0)[:, 2]
                                        @ quaternion_to_matrix(q1)[:, 2], -1, 1))) < 4
    assert rotation_angle(q1, quaternion_multiply(q0, [0, 0, np.sin(0.25), np.cos(0.25)])) < 0.1
    assert result.text.startswith("turned 0.")
    back = toolkit.call("rotate_wrist", {"angle": -0.5})
    assert back.ok, back.text
    for angle in (4.0, float("nan")):
        refused = toolkit.call("rotate_wrist", {"angle": angle})
        assert not refused.ok and "not within [-pi, pi]" in refused.text, refused.text

    one = toolkit.call("observe", {"camera": "robot0_eye_in_hand"})
    assert [name for name, _ in one.images] == ["robot0_eye_in_hand"]
    assert len(toolkit.call("observe").images) == 2
    unknown = toolkit.call("observe", {"camera": "front"})
    assert not unknown.ok and "unknown camera 'front'" in unknown.text


def test_a_second_run_is_shown_what_the_first_left_in_memory(robot, tmp_path):
    from pydantic_ai.messages import UserPromptPart

    def opening(messages) -> str:
        return next(c for m in messages for p in m.parts if isinstance(p, UserPromptPart)
                    for c in (p.content if isinstance(p.content, list) else [p.content])
                    if isinstance(c, str))

    firsts = []

    def run(script):
        toolkit, _ = make_toolkit(robot, tmp_path, images=False)

        def model(messages, info):
            if len(messages) == 1:
                firsts.append(opening(messages))
            return ModelResponse(parts=script[min(len(messages) // 2, len(script) - 1)])
        ApiPlanner(FunctionModel(model)).run(toolkit)
        return toolkit

    run([[ToolCallPart("memory_write", {"path": "soup.md",
                                        "content": "The soup sits left of the basket.\nok"})],
         [ToolCallPart("finish", {"status": "failure", "summary": "noted"})]])
    second = run([[ToolCallPart("finish", {"status": "failure", "summary": "read it"})]])
    assert firsts[0].startswith(f"Task: {SOUP}") and "memory folder" not in firsts[0]
    assert "Your memory folder holds, from earlier runs" in firsts[1]
    assert "- soup.md: The soup sits left of the basket." in firsts[1]
    assert second.run.finished == ("failure", "read it")


def test_max_turns_ends_a_model_that_never_finishes(robot, tmp_path):
    toolkit, _ = make_toolkit(robot, tmp_path, max_turns=3, images=False)
    model, seen = scripted_model([
        lambda r: [TextPart("thinking only")],  # no tool: the planner asks it to continue
        lambda r: [ToolCallPart("observe", {})],
    ])
    ApiPlanner(model).run(toolkit)
    assert toolkit.run.finished[0] == "max_turns", toolkit.run.finished
    assert toolkit.run.turns == 3 and len(seen) == 3
    assert not any(isinstance(c, BinaryContent) for c in seen[2]["observe"])  # images off


def test_a_robot_that_stops_answering_mid_motion_is_reported_and_stopped(robot, tmp_path):
    """A tool times out when the robot stops reporting progress (a hung node), not when a
    motion merely takes long; once the robot answers again it is told to stop."""
    client, info, observer, proc = robot
    client.reset()
    toolkit, _ = make_toolkit(robot, tmp_path, timeouts=Timeouts(move=0.5))

    def hang_mid_motion():
        # The move's own goal: the reset before it is a motion too.
        wait_until(lambda: observer.state().active_goal == "move_to", 30,
                   what="the move starting")
        os.kill(proc.proc.pid, signal.SIGSTOP)
        time.sleep(2.0)  # the hang: longer than the tool's timeout
        os.kill(proc.proc.pid, signal.SIGCONT)

    hang = threading.Thread(target=hang_mid_motion)
    hang.start()
    model, seen = scripted_model([
        lambda r: [ToolCallPart("move_to", {"x": 0.6, "y": 0.3, "z": 0.5})],
        lambda r: [ToolCallPart("finish", {"status": "stuck", "summary": "robot hung"})],
    ])
    try:
        ApiPlanner(model).run(toolkit)
    finally:
        hang.join()
    text = seen[1]["move_to"][0]
    assert "move_to timed out" in text and "no progress for 0.5 s" in text, text
    assert "told to stop" in text, text
    assert toolkit.run.finished == ("stuck", "robot hung")
    wait_until(lambda: observer.state().mode != RobotState.MODE_MOVING, 5,
               what="the robot stopping after the timeout")
    step = observer.state().episode_step
    wait_until(lambda: observer.state().episode_step == step, 2, what="no further steps")


def test_a_dead_peer_comes_back_as_text(robot, tmp_path):
    """A robot that is gone (here: a namespace nobody serves) yields a readable result."""
    _client, info, observer, _ = robot
    ghost = RobotClient(namespace="no_robot_here")
    try:
        toolkit = Toolkit(ghost, info, observer, RunState(SOUP, 5, 0),
                          timeouts=Timeouts(service=0.3), images=False)
        result = toolkit.call("get_object_poses")
    finally:
        ghost.close()
    assert not result.ok
    assert "get_object_poses timed out" in result.text and "not available" in result.text
    assert "the robot may be unreachable" in result.text


def test_model_errors_end_the_run_with_a_readable_error(robot, tmp_path):
    toolkit, _ = make_toolkit(robot, tmp_path, images=False)

    def broken(messages, info):
        raise ModelHTTPError(401, "function", "invalid x-api-key")

    ApiPlanner(FunctionModel(broken)).run(toolkit)
    status, summary = toolkit.run.finished
    assert status == "error" and "401" in summary and "API key" in summary, summary


@pytest.mark.slow
def test_run_policy_and_a_configured_skill_go_through_the_chunk_executor(robot, node_factory,
                                                                          tmp_path):
    from rpent_agent.skills import Skill
    from rpent_am.chunk_executor import ChunkExecutor
    from rpent_am.client import ActionModelClient

    client, info, _observer, _ = robot
    client.reset()
    am = node_factory("rpent_am", "am_node", {"backend": "scripted"}, name="agent_tk_am")
    model_client = ActionModelClient(client.node)
    try:
        meta = model_client.connect(info, timeout=60)
    except Exception:
        pytest.fail(f"action-model node did not come up:\n{am.log_tail()}")
    toolkit, _ = make_toolkit(robot, tmp_path, executor=ChunkExecutor(client, model_client),
                              model_meta=meta, images=False)
    assert "run_policy" in toolkit.tools and "scripted" in toolkit.tools["run_policy"].description
    model, seen = scripted_model([
        lambda r: [ToolCallPart("run_policy", {"instruction": SOUP, "max_chunks": 3})],
        lambda r: [ToolCallPart("finish", {"status": "failure", "summary": "partial"})],
    ])
    ApiPlanner(model).run(toolkit)
    text = seen[1]["run_policy"][0]
    assert text.startswith("policy ended: chunks_done"), text
    assert toolkit.run.steps_used > 0

    executor = ChunkExecutor(client, model_client)
    skill = Skill("pick_and_place", "Pick an object up and put it somewhere.",
                  "pick up the {object} and place it in the {target}", max_chunks=2)
    toolkit, _ = make_toolkit(robot, tmp_path, executor=executor, model_meta=meta,
                              skills=[(skill, executor, meta)], images=False)
    tool = toolkit.tools["pick_and_place"]
    assert tool.parameters["required"] == ["object", "target"]
    assert "'pick up the {object} and place it in the {target}', up to 2 chunks" in \
        tool.description
    done = toolkit.call("pick_and_place", {"object": "alphabet soup", "target": "basket"})
    assert done.ok, done.text
    assert done.text.startswith("pick_and_place ('pick up the alphabet soup and place it in "
                                "the basket'): policy ended: chunks_done"), done.text
    # What the model is told is the instruction made from the arguments: an object the
    # scene does not have is the model's refusal.
    absent = toolkit.call("pick_and_place", {"object": "unicorn", "target": "basket"})
    assert not absent.ok and "/action_model ended the stream: cannot tell what to pick and " \
        "where to place it from 'pick up the unicorn and place it in the basket'" in \
        absent.text, absent.text
    missing = toolkit.call("pick_and_place", {"object": "alphabet soup"})
    assert not missing.ok and "needs target" in missing.text, missing.text
    for built_in in ("observe", "memory_read"):
        with pytest.raises(ValueError, match=f"named as the agent's own tools: {built_in};"):
            make_toolkit(robot, tmp_path, executor=executor, model_meta=meta,
                         skills=[(Skill(built_in, "d", "look"), executor, meta)])


@pytest.mark.slow
def test_scripted_planner_does_the_task_itself_when_the_policy_fails(robot, node_factory,
                                                                     tmp_path):
    """An action model that dies before the run: run_policy fails, and the heuristic still
    picks and places, rather than giving up on the first failed tool."""
    from rpent_agent.planners.scripted import ScriptedPlanner
    from rpent_am.chunk_executor import ChunkExecutor
    from rpent_am.client import ActionModelClient

    client, info, observer, _ = robot
    client.reset()
    # A name of its own: the other tests' model node still serves under the default one.
    am = node_factory("rpent_am", "am_node", {"backend": "scripted"}, name="agent_tk_dead_am",
                      remaps={"__node": "doomed_model"})
    model_client = ActionModelClient(client.node, "doomed_model")
    meta = model_client.connect(info, timeout=60)
    am.proc.send_signal(signal.SIGKILL)
    am.proc.wait(10)
    toolkit, events = make_toolkit(robot, tmp_path, max_turns=20,
                                   executor=ChunkExecutor(client, model_client),
                                   model_meta=meta, images=False)
    ScriptedPlanner().run(toolkit)
    results = [e for e in events if e["kind"] == "tool_result"]
    calls = [e["tool_name"] for e in events if e["kind"] == "tool_call"]
    assert calls[:3] == ["observe", "run_policy", "gripper"], calls
    assert not results[1]["ok"], results[1]
    assert calls[-1] == "finish" and "get_object_poses" in calls
    assert toolkit.run.finished[0] == "success", toolkit.run.finished
    assert observer.task().success, "the simulator's own success check must agree"


@pytest.mark.slow
def test_observe_says_when_the_robot_node_is_gone(rclpy_context, node_factory, tmp_path):
    """A robot node killed outright leaves its last state behind: observe must not present
    it as current."""
    proc = node_factory("rpent_env_sim", "libero_node", {"suite": "libero_object", "task_id": 0},
                        namespace="doomed", name="agent_tk_doomed_robot")
    client = RobotClient(namespace="doomed")
    try:
        info = client.wait_ready(180)
        observer = RobotObserver(client.node, info.camera_names, state_rate=info.control_rate)
        observer.wait_ready(20)
        toolkit = Toolkit(client, info, observer, RunState(SOUP, 10, 0), images=False)
        live = toolkit.call("observe")
        assert "WARNING" not in live.text, live.text
        proc.proc.send_signal(signal.SIGKILL)
        proc.proc.wait(10)

        def warned():
            result = toolkit.call("observe")
            return result if "WARNING" in result.text else None

        stale = wait_until(warned, observer.stale_after + 5,
                           what="observe reporting the dead robot")
    finally:
        client.close()
    assert stale.text.startswith("WARNING: "), stale.text
    assert " s old" in stale.text and ("may be down" in stale.text or "is gone" in stale.text), \
        stale.text
    assert "end effector: position" in stale.text  # the last state, marked as old


@pytest.mark.slow
def test_code_as_policy_picks_and_places_and_finishes(robot, tmp_path):
    """In code mode the model is offered run_code (and the operator requests); a snippet
    that loops the pick-and-place waypoints reaches native success, a second one reads it
    from the first's variables and finishes the run."""
    from rpent_agent.toolkit import CodeSettings

    client, *_ = robot
    assert client.reset(init_state_index=0).success
    toolkit, events = make_toolkit(robot, tmp_path, code=CodeSettings(tmp_path / "code_policy"))
    try:
        assert set(toolkit.tools) == {"run_code", "request_operator_verdict",
                                      "request_scene_reset"}
        assert "robo.move_to(x, y, z, rpy=None, tolerance=None)" in \
            toolkit.tools["run_code"].description
        result = toolkit.call("run_code", {"code": PICK_AND_PLACE_SNIPPET})
        assert result.ok and result.text.count("True") == 6, result.text
        assert len(result.images) == 2  # the cameras after the snippet
        result = toolkit.call("run_code", {"code": (
            "status = robo.observe().text\nprint('here', here)\n"
            "robo.finish(status='success' if 'task success: yes' in status else 'failure', "
            "summary='placed the soup')\nprint('not printed')")})
    finally:
        toolkit.close()
    assert result.ok and "not printed" not in result.text, result.text
    assert toolkit.run.finished == ("success", "placed the soup"), toolkit.run.finished
    # Every robot call went through the toolkit: logged and counted as tool calls.
    called = [e["tool_name"] for e in events if e["kind"] == "tool_call"]
    assert called.count("run_code") == 2 and called.count("move_to") == 6
    assert (tmp_path / "code_policy" / "snippet_002.json").exists()
