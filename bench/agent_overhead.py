"""Agent overhead per tool call, without model latency or motion time.

    source scripts/env.sh && python bench/agent_overhead.py [--calls 200] [--clis codex]

The real agent node runs in-process against the LIBERO node; its planner is the pydantic-ai
loop with a model that answers at once and calls ``observe`` (no motion) every turn. The
interval between consecutive model calls is then the agent's own cost of one tool call:
pydantic-ai's loop, the toolkit, AgentEvent publishing, the transcript and feedback, and,
with images on, converting and PNG-encoding both 128x128 cameras. The model is a
FunctionModel (in-process), then each provider path through its real SDK to a local server
that speaks its wire (rpent_testkit.provider_wire): there the interval runs from one answer
leaving the server to the next request arriving, so the server's own time is left out
and the SDK's, HTTP's and the growing request's are in. The claude_code and codex planners
run their CLIs against the same servers, each tool call an MCP round trip. ``observe``
first waits for a state and images measured after it was called (never an older view as
current): up to a control period, and a whole one when calls come back to back as here.
"""
from __future__ import annotations

import argparse
import tempfile
import threading
import time

import numpy as np
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel
from rclpy.parameter import Parameter

from rpent_common.processes import free_port
from rpent_testkit.processes import NodeProcess, isolate_ros_graph


def stats(ms) -> str:
    ms = np.asarray(ms)
    return (f"p50 {np.percentile(ms, 50):6.2f} ms  p90 {np.percentile(ms, 90):6.2f} ms  "
            f"p99 {np.percentile(ms, 99):6.2f} ms")


def measure(node, calls: int, images: bool) -> np.ndarray:
    from rpent_agent.planners.api import ApiPlanner

    stamps = []

    def model(messages, info):
        stamps.append(time.perf_counter())
        if len(stamps) <= calls:
            return ModelResponse(parts=[ToolCallPart("observe", {})])
        return ModelResponse(parts=[TextPart(""), ToolCallPart(
            "finish", {"status": "failure", "summary": "benchmark"})])

    node.images = images
    run(node, ApiPlanner(FunctionModel(model), max_history_images=4), calls)
    return np.diff(stamps)[5:] * 1e3  # the first turns pay for imports and allocations


def run(node, planner, calls: int, opening: int = 1) -> None:
    node.planner = planner
    try:
        result = node.run_task("pick the alphabet soup and place it in the basket",
                               max_turns=calls + 5)
    finally:
        planner.stop()
    # + the api planner's opening observe, and finish
    assert result.tool_calls == calls + opening + 1, result.summary


def measure_provider(node, calls: int, provider: str) -> np.ndarray:
    """The same run through a provider's SDK and wire, images on."""
    from rpent_agent.planners.api import ApiPlanner, build_model
    from rpent_testkit.provider_wire import (AnthropicServer, OpenAIChatServer,
                                          OpenAIResponsesServer, Reply)

    def model(conversation):
        turns = sum(bool(m.tool_calls) for m in conversation.messages)
        if turns < calls:
            return Reply("", [("observe", {})])
        return Reply("", [("finish", {"status": "failure", "summary": "benchmark"})])

    server_class, name = {
        "anthropic": (AnthropicServer, "anthropic:claude-sonnet-5"),
        "openai": (OpenAIChatServer, "openai:gpt-5"),
        "openai-responses": (OpenAIResponsesServer, "openai-responses:gpt-5")}[provider]
    node.images = True
    with server_class(model) as server:
        run(node, ApiPlanner(build_model(name, server.base_url), max_history_images=4), calls)
        assert not server.refused, server.refused
        timings = list(server.timings)
    gaps = [nxt[0] - prev[1] for prev, nxt in zip(timings, timings[1:])]
    return np.asarray(gaps[5:]) * 1e3


def measure_cli(node, calls: int, planner_name: str, tmp: str) -> np.ndarray:
    """The same run with an agent CLI deciding (its HTTP and MCP round trips included)."""
    import os

    from rpent_testkit.provider_wire import AnthropicServer, OpenAIResponsesServer, Reply
    from rpent_agent.toolkit import RunState

    prefix = "mcp__robot__"

    def model(conversation):
        turns = sum(bool(m.tool_calls) for m in conversation.messages)
        if turns < calls:
            return Reply("", [(prefix + "observe", {})])
        if turns == calls:
            return Reply("", [(prefix + "finish", {"status": "failure",
                                                   "summary": "benchmark"})])
        return Reply("Done.")  # Codex's closing reply

    port = free_port()
    node.images = True
    if planner_name == "claude_code":
        from rpent_agent.planners.claude_code import ClaudeCodePlanner as planner_class

        os.environ.update(ANTHROPIC_API_KEY="sk-ant-bench", CLAUDE_CONFIG_DIR=f"{tmp}/claude")
        server_class, name = AnthropicServer, "anthropic:claude-sonnet-5"
    else:
        from rpent_agent.planners.codex import CodexPlanner as planner_class

        os.makedirs(f"{tmp}/codex", exist_ok=True)
        os.environ.update(OPENAI_API_KEY="sk-bench", CODEX_HOME=f"{tmp}/codex")
        server_class, name = OpenAIResponsesServer, "openai:rpent-bench"
    with server_class(model) as server:
        planner = planner_class(lambda: node._toolkit, name, server.base_url, port=port)
        planner.start(node._new_toolkit(RunState("", 1, 0)).describe())
        run(node, planner, calls, opening=0)
        assert not server.refused, server.refused
        timings = list(server.timings)
    gaps = [nxt[0] - prev[1] for prev, nxt in zip(timings, timings[1:])]
    return np.asarray(gaps[5:]) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--clis", default="claude_code,codex", type=lambda v: v.split(",") if v
                        else [], help="agent CLIs to measure too (extra agents); empty: none")
    args = parser.parse_args()
    isolate_ros_graph()
    import rclpy
    from rclpy.executors import MultiThreadedExecutor

    from rpent_agent.agent_node import AgentNode

    with tempfile.TemporaryDirectory() as tmp:
        robot = NodeProcess("rpent_env_sim", "libero_node",
                            {"suite": "libero_object", "task_id": 0}, tmp, name="bench_robot")
        rclpy.init()
        node = None
        try:
            node = AgentNode(parameter_overrides=[
                Parameter("planner", value="scripted"), Parameter("output_dir", value=tmp),
                Parameter("video", value=False), Parameter("startup_timeout", value=180.0)])
            executor = MultiThreadedExecutor(num_threads=2)
            executor.add_node(node)
            threading.Thread(target=executor.spin, daemon=True).start()
            off = measure(node, args.calls, images=False)
            on = measure(node, args.calls, images=True)
            wire = {p: measure_provider(node, args.calls, p)
                    for p in ("anthropic", "openai", "openai-responses")}
            clis = {p: measure_cli(node, args.calls, p, tmp) for p in args.clis}
        finally:
            if node is not None:
                node.destroy_node()
            rclpy.try_shutdown()
            robot.stop()
    print(f"agent overhead per tool call (FunctionModel + observe, {args.calls} calls, "
          "agent node in-process, LIBERO node)")
    print(f"  {'images off':32s} {stats(off)}   (each observe waits for a state "
          "measured after it: up to a control period, 50 ms, back to back)")
    print(f"  {'images on (2 x 128x128)':32s} {stats(on)}")
    for provider, gaps in wire.items():
        print(f"  {provider + ' wire, images on':32s} {stats(gaps)}   (SDK and HTTP "
              "included, the server's time not)")
    for cli, gaps in clis.items():
        print(f"  {cli + ' planner, images on':32s} {stats(gaps)}   (the CLI, its HTTP and "
              "MCP round trips included, the server's time not)")


if __name__ == "__main__":
    main()
