"""Input tokens per turn with and without Anthropic prompt caching, over a 20-turn run.

    source scripts/env.sh && python bench/prompt_cache.py [--turns 20] [--cameras 2]

The api planner runs against the local Anthropic Messages server
(``rpent_testkit.provider_wire.AnthropicServer``), which caches as the API does (prefix
reads up to the marked blocks, 1,024-token minimum) and counts tokens as a quarter of the
JSON it receives: a rough count, the same for both runs. Each tool result carries the
camera images of a LIBERO robot (128x128 PNG per camera) as the agent's do, and the
default ``max_history_images`` (4). Printed per turn: tokens sent uncached, read from the
cache, written to it; then the totals of both runs.
"""
from __future__ import annotations

import argparse

import cv2
import numpy as np

from rpent_agent.planners.api import ApiPlanner, build_model
from rpent_testkit.provider_wire import AnthropicServer, Reply
from rpent_agent.toolkit import RunState, Tool, ToolResult


def camera_png(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    frame = cv2.GaussianBlur(rng.integers(0, 255, (128, 128, 3), dtype=np.uint8), (9, 9), 3)
    return cv2.imencode(".png", frame)[1].tobytes()


class Arm:
    """A toolkit stand-in: ``observe`` and ``move`` answer with text and camera images."""

    def __init__(self, turns: int, cameras: int):
        self.run = RunState("stack the blocks", max_turns=turns + 5, max_steps=0)
        self.calls, self.cameras = 0, cameras
        schema = {"type": "object", "properties": {"x": {"type": "number"}}}
        self.tools = {t.name: t for t in (
            Tool("observe", "Show the robot's state and cameras.",
                 {"type": "object", "properties": {}}, self._result),
            Tool("move", "Move the hand along x by x metres.", schema, self._result),
            Tool("finish", "End the run.", {"type": "object", "properties": {}},
                 self._finish))}

    def _result(self, **_):
        self.calls += 1
        return ToolResult(f"hand at x={0.01 * self.calls:.2f} m; gripper open",
                          images=[(f"camera{i}", camera_png(self.calls * 10 + i))
                                  for i in range(self.cameras)])

    def _finish(self):
        self.run.end("success", "done")
        return ToolResult("finished")

    def call(self, name, arguments=None):
        return self.tools[name].handler(**(arguments or {}))

    def listener(self, **_):
        pass


def run(turns: int, cameras: int, cache: bool) -> list:
    def model(conversation):
        done = sum(bool(m.tool_calls) for m in conversation.messages)
        if done >= turns - 1:
            return Reply("", [("finish", {})])
        return Reply("Moving on.", [("move", {"x": 0.01})])

    with AnthropicServer(model) as server:
        planner = ApiPlanner(build_model("anthropic:claude-sonnet-5", server.base_url),
                             prompt_cache=cache)
        try:
            planner.run(Arm(turns, cameras))
        finally:
            planner.stop()
        assert not server.refused, server.refused
        return list(server.usages)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--cameras", type=int, default=2)
    opts = p.parse_args()
    with_cache, without = run(opts.turns, opts.cameras, True), run(opts.turns, opts.cameras,
                                                                   False)
    print("turn | uncached, cached run | read | written | uncached, no caching")
    for i, (a, b) in enumerate(zip(with_cache, without), 1):
        print(f"{i:4d} | {a['input_tokens']:20d} | {a['cache_read_input_tokens']:5d} | "
              f"{a['cache_creation_input_tokens']:7d} | {b['input_tokens']:20d}")
    total = lambda usages, key: sum(u[key] for u in usages)  # noqa: E731
    sent = total(without, "input_tokens")
    print(f"total input: {sent} tokens uncached without caching; with caching "
          f"{total(with_cache, 'input_tokens')} uncached + "
          f"{total(with_cache, 'cache_read_input_tokens')} read + "
          f"{total(with_cache, 'cache_creation_input_tokens')} written")
    # Anthropic's prices relative to uncached input: reads 0.1, 5-minute writes 1.25.
    billed = (total(with_cache, "input_tokens") + 0.1 * total(with_cache,
              "cache_read_input_tokens") + 1.25 * total(with_cache,
              "cache_creation_input_tokens"))
    print(f"input cost with caching: {100 * billed / sent:.0f}% of without (reads at 0.1, "
          "writes at 1.25 of the uncached price)")


if __name__ == "__main__":
    main()
