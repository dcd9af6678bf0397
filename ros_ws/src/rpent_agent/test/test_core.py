"""Plain-Python parts of the agent: memory confinement, history image pruning, transient
retries, planner selection, plan files, transcript and video files."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
from pydantic_ai import Agent, BinaryContent
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from rpent_agent.memory import MemoryDir, MemoryRefused
from rpent_agent.planners import PlannerConfigError, choose
from rpent_agent.planners.api import RetryingModel, messages_json, prune_images
from rpent_agent.planners.scripted import load_plan
from rpent_agent.transcript import Transcript
from rpent_agent.video import EpisodeVideo
from rpent_contract.geometry import quaternion_to_rpy, rpy_to_quaternion


def test_memory_reads_writes_and_lists_inside_its_folder(tmp_path):
    memory = MemoryDir(tmp_path / "mem")
    assert memory.list() == []
    memory.write("notes.md", "soup is left")
    memory.write("objects/basket.md", "basket at y=0.2")
    assert memory.list() == ["notes.md", "objects/basket.md"]
    assert memory.read("objects/basket.md") == "basket at y=0.2"


@pytest.mark.parametrize("path", ["../escape.txt", "/etc/passwd", "a/../../b", ""])
def test_memory_refuses_paths_that_leave_the_folder(tmp_path, path):
    memory = MemoryDir(tmp_path / "mem")
    with pytest.raises(MemoryRefused):
        memory.write(path, "x")
    assert not (tmp_path / "escape.txt").exists()


def test_memory_refuses_a_symlink_pointing_out(tmp_path):
    (tmp_path / "mem").mkdir()
    (tmp_path / "secret").write_text("s")
    (tmp_path / "mem" / "link").symlink_to(tmp_path / "secret")
    with pytest.raises(MemoryRefused):
        MemoryDir(tmp_path / "mem").read("link")


def _write_many(root, worker: int, count: int) -> None:
    memory = MemoryDir(root)
    for i in range(count):
        memory.write(f"worker{worker}/note{i}.md", f"worker {worker} note {i}\n")
        memory.write("shared.md", f"worker {worker} write {i}\n" + "x" * 20_000)


def test_two_workers_writing_one_memory_lose_nothing(tmp_path):
    """Parallel evaluation workers share a memory folder: every file each wrote is there, and
    the file both kept rewriting holds one whole write, never a mix."""
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(2) as pool:
        for done in [pool.submit(_write_many, tmp_path / "mem", w, 60) for w in (0, 1)]:
            done.result(timeout=60)
    memory = MemoryDir(tmp_path / "mem")
    for worker in (0, 1):
        for i in range(60):
            assert memory.read(f"worker{worker}/note{i}.md") == f"worker {worker} note {i}\n"
    shared = memory.read("shared.md")
    first, rest = shared.split("\n", 1)
    assert first in ("worker 0 write 59", "worker 1 write 59") and rest == "x" * 20_000
    assert len(memory.list()) == 121  # no temporary file left behind


def test_the_memory_index_lists_files_newest_first_with_their_first_line(tmp_path):
    import os

    memory = MemoryDir(tmp_path / "mem")
    assert memory.index() == ""
    memory.write("objects/basket.md", "basket at y=0.2\nwide")
    memory.write("notes.md", "\n")
    os.utime(memory.root / "objects/basket.md", (1, 1))
    assert memory.index() == "- notes.md\n- objects/basket.md: basket at y=0.2"
    with pytest.raises(MemoryRefused, match="starting with '.'"):
        memory.write(".hidden.md", "x")


def test_lasting_memory_is_kept_per_robot_and_task_suite_under_the_data_folder(
        tmp_path, monkeypatch):
    from rpent_agent.memory import lasting_folder

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert lasting_folder("panda", "libero_object") == \
        tmp_path / "rpent" / "memory" / "panda" / "libero_object"
    assert lasting_folder("so101 follower", "") == \
        tmp_path / "rpent" / "memory" / "so101_follower" / "default"


def _png(value):
    return BinaryContent(cv2.imencode(".png", np.full((4, 4, 3), value, np.uint8))[1].tobytes(),
                         media_type="image/png")


def test_history_keeps_only_the_newest_images():
    """A model that looks 9 times sees the last 2 to 5 images (they go 4 at a time, so the
    history stays the same for a few turns); older ones are placeholders."""
    seen = []

    def model(messages, info):
        pruned = prune_images(messages, 2)
        seen.append(sum(isinstance(c, BinaryContent) for m in pruned for p in m.parts
                        for c in (p.content if isinstance(getattr(p, "content", None), list)
                                  else [])))
        if len(seen) <= 9:
            return ModelResponse(parts=[ToolCallPart("look", {})])
        return ModelResponse(parts=[TextPart("done")])

    agent = Agent(FunctionModel(model))

    @agent.tool_plain
    def look() -> list:
        return ["frame", _png(len(seen))]

    result = agent.run_sync("go")
    assert seen == [0, 1, 2, 3, 4, 5, 2, 3, 4, 5]
    dumped = json.dumps(messages_json(result.all_messages()))
    assert "earlier turn omitted" in dumped and "base64" not in dumped


def test_transient_model_errors_are_retried_and_others_are_not():
    calls = []

    def flaky(messages, info):
        calls.append(1)
        if len(calls) == 1:
            raise ModelHTTPError(503, "flaky", "overloaded")
        return ModelResponse(parts=[TextPart("ok")])

    model = RetryingModel(FunctionModel(flaky), retries=2, backoff=0.01)
    assert Agent(model).run_sync("hi").output == "ok" and model.retried == 1

    def broken(messages, info):
        raise ModelHTTPError(401, "broken", "bad key")

    with pytest.raises(ModelHTTPError):
        Agent(RetryingModel(FunctionModel(broken), retries=2, backoff=0.01)).run_sync("hi")


def test_planner_selection_defaults_to_scripted_without_a_usable_model(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    planner, why = choose("auto", "anthropic:claude-sonnet-4-5")
    assert planner == "scripted" and "ANTHROPIC_API_KEY" in why
    assert choose("auto", "")[0] == "scripted"
    with pytest.raises(PlannerConfigError, match="ANTHROPIC_API_KEY"):
        choose("api", "anthropic:claude-sonnet-4-5")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    assert choose("auto", "anthropic:claude-sonnet-4-5")[0] == "api"
    # An OpenAI-compatible local server needs no key.
    assert choose("auto", "openai:qwen3", base_url="http://127.0.0.1:11434/v1")[0] == "api"


def test_plan_files_are_validated(tmp_path):
    good = tmp_path / "plan.yaml"
    good.write_text("- tool: gripper\n  args: {action: open}\n- tool: finish\n"
                    "  args: {status: success, summary: done}\n")
    assert [s["tool"] for s in load_plan(good)] == ["gripper", "finish"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("tool: gripper\n")
    with pytest.raises(PlannerConfigError, match="list of"):
        load_plan(bad)
    with pytest.raises(PlannerConfigError, match="not found"):
        load_plan(tmp_path / "missing.yaml")


def test_rpy_round_trips():
    for rpy in ([np.pi, 0.0, 0.5], [0.1, -0.3, 2.0]):
        q = rpy_to_quaternion(*rpy)
        assert np.allclose(rpy_to_quaternion(*quaternion_to_rpy(q)), q) or \
            np.allclose(rpy_to_quaternion(*quaternion_to_rpy(q)), -q)


def test_transcript_and_video_files(tmp_path):
    transcript = Transcript(tmp_path / "transcript.json", "r1", {"instruction": "x"})
    transcript.event(kind="tool_call", tool="observe", png=b"\x89PNG")
    path = transcript.finish({"status": "success"})
    doc = json.loads(path.read_text())
    assert doc["events"][0]["tool"] == "observe" and doc["result"]["status"] == "success"

    video = EpisodeVideo(fps=20)
    frame = {"a": np.zeros((32, 32, 3), np.uint8), "b": np.full((16, 16, 3), 255, np.uint8)}
    for step, stamp in ((1, 0.0), (1, 0.0), (2, 0.05), (3, 0.1)):  # a repeated frame adds none
        video.offer(step, frame, stamp)
    assert len(video) == 3
    # A camera slower than the control rate: its frame holds over the steps it skipped, so
    # the video lasts as long as the motion.
    video.offer(6, frame, 0.25)
    assert len(video) == 6
    video.offer(2, frame, 0.3)  # a new episode starts afresh
    assert len(video) == 7
    out = video.write(tmp_path / "episode.mp4")
    cap = cv2.VideoCapture(str(out))
    assert int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) == 7
    assert int(cap.get(cv2.CAP_PROP_FRAME_WIDTH)) == 64  # cameras side by side
    cap.release()
    assert EpisodeVideo(fps=20).write(tmp_path / "none.mp4") is None


def test_the_episode_video_lasts_as_long_as_the_run_with_motion_at_the_control_rate(tmp_path):
    """Thinking time is the scene held, in real time; a simulator faster than real time still
    shows one frame per control step."""
    dark, light = ({"a": np.full((32, 32, 3), v, np.uint8)} for v in (0, 255))
    video = EpisodeVideo(fps=20)
    video.offer(0, dark, 100.0)
    video.offer(0, dark, 102.0)  # two seconds of thought, the cameras still publishing
    assert len(video) == 41
    for step in range(1, 11):  # ten steps in a tenth of a second
        video.offer(step, light, 102.0 + 0.01 * step)
    assert len(video) == 51
    # Two seconds with no frame at all (a camera that publishes only while the arm moves):
    # the scene before them is held, then the new step shows.
    video.offer(11, dark, 104.5)
    assert len(video) == 51 + 39 + 1
    out = video.write(tmp_path / "episode.mp4")
    cap = cv2.VideoCapture(str(out))
    levels = []
    while (ok := cap.read())[0]:
        levels.append(ok[1].mean())
    cap.release()
    assert len(levels) == 91
    assert max(levels[:41]) < 30 and min(levels[41:90]) > 220 and levels[90] < 30


def test_the_mcp_server_on_a_busy_port_says_which_setting_to_change():
    import socket

    from rpent_agent.planners.mcp import McpPlanner

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(PlannerConfigError,
                           match=rf"127\.0\.0\.1:{port} .*set mcp_port to a free port"):
            McpPlanner(lambda: None, port=port).start([])
