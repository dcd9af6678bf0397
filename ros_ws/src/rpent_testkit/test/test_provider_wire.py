"""The api planner through the real provider SDKs (pydantic-ai's Anthropic and OpenAI
models) against local servers that speak the providers' HTTP APIs and refuse what the real
ones refuse. The robot side is a small desk of tools; what is under test is what goes over
the wire and how the planner lives with it."""
from __future__ import annotations

import base64
import json
import re
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from rpent_agent.planners.api import ApiPlanner, build_model
from rpent_testkit.provider_wire import (AnthropicServer, OpenAIChatServer,
                                      OpenAIResponsesServer, Reply)
from rpent_agent.toolkit import RunState, Tool, ToolResult

PNG = cv2.imencode(".png", np.full((8, 8, 3), 200, np.uint8))[1].tobytes()
SERVERS = {"anthropic": AnthropicServer, "openai": OpenAIChatServer,
           "openai-responses": OpenAIResponsesServer}


class Desk:
    """The toolkit's interface over a counter: ``observe`` shows it (text and a camera image),
    ``add`` adds to it, ``finish`` ends the run."""

    def __init__(self, instruction: str = "make the counter 5"):
        self.run = RunState(instruction, max_turns=10, max_steps=0)
        # What it stands for, as RobotInfo names it: installed prompt bundles are chosen by it.
        self.info = SimpleNamespace(embodiment="counter")
        self.counter = 0
        self.tools = {t.name: t for t in (
            Tool("observe", "Show the counter.", {"type": "object", "properties": {}},
                 lambda: ToolResult(f"counter={self.counter}", images=[("front", PNG)])),
            Tool("add", "Add a to the counter.",
                 {"type": "object", "properties": {"a": {"type": "integer"}},
                  "required": ["a"]}, self._add),
            Tool("finish", "End the run.",
                 {"type": "object", "properties": {"status": {"type": "string"},
                                                   "summary": {"type": "string"}},
                  "required": ["status", "summary"]}, self._finish),
        )}

    def opening(self):
        return f"Task: {self.run.instruction}"

    def _add(self, a):
        if not isinstance(a, int):
            raise ValueError(f"a must be an integer, not {a!r}")
        self.counter += a
        return ToolResult(f"counter={self.counter}")

    def _finish(self, status, summary):
        self.run.end(status, summary)
        return ToolResult(f"run finished: {status}")

    def call(self, name, arguments=None):
        try:
            return self.tools[name].handler(**(arguments or {}))
        except (TypeError, ValueError) as err:
            return ToolResult(f"{name} refused: {err}", ok=False)

    def listener(self, **_):
        pass


def last_result(conversation) -> str:
    results = [r[1] for m in conversation.messages for r in m.tool_results]
    return results[-1] if results else ""


def counting_model(conversation) -> Reply:
    """Looks, adds what is missing to reach 5 (read from the tool result), checks, finishes."""
    seen = last_result(conversation)
    turns = sum(bool(m.tool_calls) for m in conversation.messages)
    if turns == 0:
        return Reply("Let me look.", [("observe", {})])
    found = re.search(r"counter=(-?\d+)", seen)
    value = int(found.group(1)) if found else 0
    if value != 5:
        return Reply("", [("add", {"a": 5 - value})])
    return Reply("Done.", [("finish", {"status": "success", "summary": "counter is 5"})])


def planner(server, model: str, **options) -> ApiPlanner:
    prefix = next(name for name, cls in SERVERS.items() if isinstance(server, cls))
    return ApiPlanner(build_model(f"{prefix}:{model}", server.base_url), backoff=0.01,
                      **options)


def run_once(server, **options) -> Desk:
    api, desk = planner(server, "m", **options), Desk()
    try:
        api.run(desk)
    finally:
        api.stop()
    return desk


@pytest.mark.parametrize("provider", SERVERS)
def test_runs_reach_their_goal_over_the_wire_and_a_second_run_works_too(provider):
    with SERVERS[provider](counting_model) as server:
        api = planner(server, "claude-sonnet-5" if provider == "anthropic" else "gpt-5")
        try:
            for _ in range(2):  # one planner serves run after run (one event loop)
                desk = Desk()
                api.run(desk)
                assert desk.run.finished == ("success", "counter is 5"), desk.run.finished
                assert desk.counter == 5
        finally:
            api.stop()
    assert not server.refused and not server.failures, (server.refused, server.failures)
    first, second = server.requests[0], server.requests[1]
    assert "robot arm" in first.system
    assert {t["name"] for t in first.tools} == {"observe", "add", "finish"}
    add = next(t for t in first.tools if t["name"] == "add")
    assert add["schema"]["properties"]["a"] == {"type": "integer"}
    assert add["schema"]["required"] == ["a"]
    # The camera image of the observe result reached the model as an image, not as text.
    assert any(image == ("image/png", PNG) for m in second.messages for image in m.images)
    assert "base64" not in json.dumps([m.texts for m in second.messages])


@pytest.mark.parametrize("provider", SERVERS)
def test_a_malformed_tool_call_goes_back_to_the_model_to_correct(provider):
    bad = iter(['{"a": "two"', '{"b": 2}'])  # broken JSON, then a missing argument

    def clumsy(conversation):
        mistake = next(bad, None)
        if mistake is not None:
            return Reply("", [("add", mistake)])
        return counting_model(conversation)

    with SERVERS[provider](clumsy) as server:
        desk = run_once(server, tool_retries=3)
    assert desk.run.finished[0] == "success", desk.run.finished
    retried = server.requests[1]
    told = json.dumps([m.texts for m in retried.messages] +
                      [r for m in retried.messages for r in m.tool_results])
    assert "a" in told and ("Fix the errors" in told or "validation" in told.lower()), told


def test_a_model_that_never_gets_a_tool_call_right_says_so():
    with AnthropicServer(lambda c: Reply("", [("add", '{"a": ')])) as server:
        desk = run_once(server, tool_retries=2)
    status, summary = desk.run.finished
    assert status == "error" and "2 chances to correct" in summary, summary
    assert "API key" not in summary and len(server.requests) == 3


@pytest.mark.parametrize("provider", SERVERS)
def test_a_refused_key_is_named_as_the_cause(provider, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "wrong")
    monkeypatch.setenv("OPENAI_API_KEY", "wrong")
    with SERVERS[provider](counting_model, api_key="right") as server:
        desk = run_once(server, retries=0)
    status, summary = desk.run.finished
    assert status == "error" and "refused the API key (HTTP 401)" in summary, summary


def test_the_server_refuses_what_the_real_api_refuses():
    with AnthropicServer(counting_model) as server:
        body = {"model": "m", "max_tokens": 10, "messages": [
            {"role": "user", "content": "hi"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x",
                                          "content": "?"}]}]}
        status, _, answer = server.handle("/v1/messages", {"x-api-key": "k",
                                                           "anthropic-version": "2023-06-01"},
                                          json.dumps(body).encode())
    assert status == 400 and b"answers no tool_use" in answer
    body["messages"][1]["content"] = "and hello"  # combined into one turn, as the API does
    body["messages"].insert(0, {"role": "assistant", "content": "hello"})
    status, _, answer = server.handle("/v1/messages", {"x-api-key": "k",
                                                       "anthropic-version": "2023-06-01"},
                                      json.dumps(body).encode())
    assert status == 400 and b"first message must use the user role" in answer
    del body["messages"][0]
    status, _, answer = server.handle("/v1/messages", {"x-api-key": "k",
                                                       "anthropic-version": "2023-06-01"},
                                      json.dumps(body).encode())
    assert status == 200 and server.requests[-1].messages[0].texts == ["hi", "and hello"]
    with OpenAIResponsesServer(counting_model) as server:
        body = {"model": "m", "input": "hi", "tools": [{
            "type": "function", "name": "move", "strict": True, "parameters": {
                "type": "object", "additionalProperties": False,
                "properties": {"x": {"type": "number"}, "speed": {"type": "number"}},
                "required": ["x"]}}]}
        status, _, answer = server.handle("/v1/responses", {"authorization": "Bearer k"},
                                          json.dumps(body).encode())
    assert status == 400 and b"including every key in properties" in answer


def test_anthropic_runs_read_their_prompt_from_the_cache():
    """System prompt, tools and the growing history are marked for Anthropic's prompt cache,
    so each request after the first reads what the one before wrote, and the run's token
    count says how much of its input was read from the cache."""
    with AnthropicServer(counting_model, min_cache_tokens=50) as server:
        desk = run_once(server)
    assert desk.run.finished == ("success", "counter is 5") and not server.refused
    for conversation in server.requests:
        request = conversation.raw
        assert "cache_control" in request["system"][-1] and "cache_control" in \
            request["tools"][-1]
        assert "cache_control" in request["messages"][-1]["content"][-1]
    first, *later = server.usages
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 0
    # Each request reads the whole prompt the one before it sent: the history too.
    reads = [u["cache_read_input_tokens"] for u in later]
    assert reads == sorted(reads) and reads[0] >= first["cache_creation_input_tokens"]
    run = desk.run
    assert run.cache_read_tokens == sum(reads)
    assert run.cache_write_tokens == sum(u["cache_creation_input_tokens"]
                                         for u in server.usages)
    assert run.input_tokens == sum(sum(u.values()) for u in server.usages)


def test_the_cache_reads_only_an_unchanged_prefix():
    """What the emulated cache reads: the longest prefix some earlier request marked."""
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}

    def send(server, system):
        body = {"model": "m", "max_tokens": 10, "system": [
            {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "hi"}]}
        status, _, _ = server.handle("/v1/messages", headers, json.dumps(body).encode())
        assert status == 200
        return server.usages[-1]

    with AnthropicServer(counting_model, min_cache_tokens=50) as server:
        written = send(server, "a long system prompt " * 20)["cache_creation_input_tokens"]
        assert written > 0
        assert send(server, "a long system prompt " * 20)["cache_read_input_tokens"] == written
        assert send(server, "another system prompt " * 20)["cache_read_input_tokens"] == 0
        assert send(server, "short")["cache_creation_input_tokens"] == 0  # below the minimum


def test_base_url_keeps_the_provider_it_names():
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel

    assert isinstance(build_model("anthropic:claude-sonnet-5", "http://proxy:1"), AnthropicModel)
    assert isinstance(build_model("openai:gpt-5", "http://h:1/v1"), OpenAIChatModel)
    assert isinstance(build_model("llama3", "http://h:1/v1"), OpenAIChatModel)
    assert isinstance(build_model("openai-responses:gpt-5", "http://h:1/v1"),
                      OpenAIResponsesModel)
    with pytest.raises(ValueError, match="not 'google:'"):
        build_model("google:gemini", "http://h:1")


def test_the_other_response_mode_parses_with_each_providers_own_sdk():
    """pydantic-ai streams from Anthropic and not from OpenAI; the providers' SDKs read the
    servers' other mode (Anthropic JSON, OpenAI's server-sent events) as well."""
    import anthropic
    import openai

    reply = lambda c: Reply("adding", [("add", {"a": 2})])  # noqa: E731
    with AnthropicServer(reply) as server:
        message = anthropic.Anthropic(base_url=server.base_url, api_key="k").messages.create(
            model="m", max_tokens=50, messages=[{"role": "user", "content": "add two"}])
    assert message.stop_reason == "tool_use" and message.content[1].input == {"a": 2}
    with OpenAIChatServer(reply) as server:
        chunks = list(openai.OpenAI(base_url=server.base_url, api_key="k").chat.completions
                      .create(model="m", messages=[{"role": "user", "content": "add two"}],
                              stream=True, stream_options={"include_usage": True}))
    calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices and
             c.choices[0].delta.tool_calls]
    assert json.loads(calls[0][0].function.arguments) == {"a": 2}
    assert chunks[-1].usage.prompt_tokens > 0
    with OpenAIResponsesServer(reply) as server:
        events = list(openai.OpenAI(base_url=server.base_url, api_key="k").responses.create(
            model="m", input="add two", stream=True))
    assert events[0].type == "response.created"
    done = events[-1]
    assert done.type == "response.completed" and done.response.output_text == "adding"
    assert done.response.output[1].name == "add"
    assert json.loads(done.response.output[1].arguments) == {"a": 2}


def test_responses_namespaces_are_answered_in_their_namespace():
    """Codex sends an MCP server's tools as a namespace: the policy sees <ns>__<name>, and
    a call to one goes back with its namespace, as the API answers it (with the OpenAI
    SDK parsing the answer). Images count by size, not by their base64 length."""
    from openai import OpenAI

    noise = np.random.default_rng(0).integers(0, 255, (480, 640, 3), dtype=np.uint8)
    png = cv2.imencode(".png", noise)[1].tobytes()  # ~900 kB: ~300k tokens by its length
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    seen = []

    def model(conversation):
        seen.append(conversation)
        return Reply("", [("mcp__robot__observe", {})])

    with OpenAIResponsesServer(model) as server:
        sdk = OpenAI(base_url=server.base_url, api_key="k")
        namespace = {"type": "namespace", "name": "mcp__robot", "description": "robot",
                     "tools": [{"type": "function", "name": "observe", "strict": False,
                                "parameters": {"type": "object", "properties": {}}}]}
        answer = sdk.post("/responses", cast_to=object, body={
            "model": "m", "tools": [namespace], "input": [
                {"type": "message", "role": "user", "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_image", "image_url": url}]},
                {"type": "function_call", "call_id": "c1", "name": "observe",
                 "namespace": "mcp__robot", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "ok"}]})
    assert [t["name"] for t in seen[0].tools] == ["mcp__robot__observe"]
    assert seen[0].messages[1].tool_calls[0][1] == "mcp__robot__observe"
    call = answer["output"][0]
    assert (call["namespace"], call["name"]) == ("mcp__robot", "observe")
    assert answer["usage"]["input_tokens"] < 1000  # 640x480: ~400 tokens, not len(base64)/4
