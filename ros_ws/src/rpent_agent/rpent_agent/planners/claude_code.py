"""The claude_code planner: Claude Code, through the Claude Agent SDK (which bundles the
CLI), decides; it reaches the robot through the toolkit's MCP server (the mcp planner's),
with the api planner's prompts and none of Claude Code's own tools.

Each run is one Claude Code session: the task is the first prompt, the run ends when the
model calls ``finish`` (the session is stopped there), when the tool calls run out, on
cancel or after ``run_timeout``. ``base_url`` and ``ANTHROPIC_API_KEY`` reach the CLI as
``ANTHROPIC_BASE_URL`` / its key, so a proxy or gateway works as for the api planner.
"""
from __future__ import annotations

import asyncio
import tempfile
import time

import anyio

from . import PlannerConfigError, cli_model
from ..prompts import SYSTEM_PROMPT
from .api import instructions_for
from .mcp import McpPlanner

SERVER = "robot"  # Claude Code names the tools mcp__robot__<tool>
INSTALL = ("pip install 'claude-agent-sdk==0.2.189' (it bundles the Claude Code CLI), or "
           "scripts/setup.sh --extras agents")


def require_sdk() -> None:
    try:
        import claude_agent_sdk  # noqa: F401
    except ImportError:
        raise PlannerConfigError(
            f"planner 'claude_code' needs the Claude Agent SDK, which is not installed: "
            f"{INSTALL}") from None


class ClaudeCodePlanner(McpPlanner):
    name = "claude_code"

    def __init__(self, toolkit_provider, model: str = "", base_url: str = "",
                 host: str = "127.0.0.1", port: int = 8766, run_timeout: float = 3600.0,
                 system_prompt: str = SYSTEM_PROMPT, token: str = ""):
        """``model``: ``anthropic:<name>``, a bare name, or empty for Claude Code's default."""
        require_sdk()
        super().__init__(toolkit_provider, host, port, run_timeout, token)
        self.model = cli_model(self.name, model, ("anthropic",), "Anthropic")
        self.base_url = base_url
        self.system_prompt = system_prompt
        self._counted: set = set()  # message ids whose usage is counted

    def run(self, toolkit) -> None:
        asyncio.run(self._run(toolkit))

    async def _run(self, toolkit) -> None:
        from claude_agent_sdk import (ClaudeAgentOptions, ClaudeSDKClient, ClaudeSDKError,
                                      HookMatcher)

        run = toolkit.run
        deadline = time.monotonic() + self.run_timeout
        self._counted = set()
        stderr: list = []
        env = {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
        if self.base_url:
            env["ANTHROPIC_BASE_URL"] = self.base_url

        async def after_tool(_input, _tool_use_id, _context) -> dict:
            # The tool ended the run (finish, or the turns ran out): no further request.
            if run.finished is not None:
                return {"continue_": False, "stopReason": "the robot's run has ended"}
            return {}

        with tempfile.TemporaryDirectory(prefix="rpent-claude-code-") as cwd:
            options = ClaudeAgentOptions(
                system_prompt=instructions_for(toolkit, self.system_prompt),
                mcp_servers={SERVER: {"type": "http", "url": self.url,
                                      **({"headers": self.headers} if self.token else {})}},
                # No built-in tools (files, shell, web): the robot's tools are all it has,
                # pre-approved; anything else is refused without asking anyone.
                tools=[], allowed_tools=[f"mcp__{SERVER}__{t}" for t in toolkit.tools],
                permission_mode="dontAsk", setting_sources=[], cwd=cwd, env=env,
                model=self.model or None, max_turns=run.max_turns,
                hooks={"PostToolUse": [HookMatcher(matcher=f"mcp__{SERVER}__.*",
                                                   hooks=[after_tool])]},
                stderr=lambda line: stderr.append(line) if len(stderr) < 50 else None)
            try:
                async with ClaudeSDKClient(options=options) as session:
                    await session.query(toolkit.opening())
                    async with anyio.create_task_group() as group:
                        group.start_soon(self._watch, run, deadline, session)
                        async for message in session.receive_response():
                            self._on_message(toolkit, message)
                        group.cancel_scope.cancel()
            except ClaudeSDKError as err:
                run.end("error", f"Claude Code failed: {err}{_tail(stderr)}. Check the "
                        "model name, ANTHROPIC_API_KEY and base_url")
        self.end_unfinished(run, deadline, "Claude Code ended its session without calling "
                            f"finish{_tail(stderr)}")

    @staticmethod
    async def _watch(run, deadline: float, session) -> None:
        """Interrupt the session on cancel or at the deadline (the turn it is in ends)."""
        while run.finished is None and not run.cancel.is_set() and \
                time.monotonic() < deadline:
            await anyio.sleep(0.05)
        if run.finished is None:
            await session.interrupt()

    def _on_message(self, toolkit, message) -> None:
        from claude_agent_sdk import AssistantMessage, ResultMessage, TextBlock

        run = toolkit.run
        if isinstance(message, AssistantMessage):
            text = "\n".join(b.text for b in message.content if isinstance(b, TextBlock))
            if text.strip():
                toolkit.listener(kind="reasoning", text=text.strip())
            # Claude Code reports each content block of a response as a message of its own,
            # with the response's usage each time: count a response once.
            if message.usage and message.message_id not in self._counted:
                self._counted.add(message.message_id)
                usage = message.usage
                read = usage.get("cache_read_input_tokens") or 0
                written = usage.get("cache_creation_input_tokens") or 0
                # Anthropic's input_tokens are the uncached part only
                run.count_tokens((usage.get("input_tokens") or 0) + read + written, read,
                                 written, usage.get("output_tokens"))
            if message.error:
                toolkit.listener(kind="error", text=f"Claude Code: {message.error}")
        elif isinstance(message, ResultMessage) and message.is_error and run.finished is None:
            kind = "" if message.subtype == "success" else f" ({message.subtype})"
            run.end("error", f"Claude Code ended with an error{kind}: {message.result or '?'}"
                    ". Check the model name, ANTHROPIC_API_KEY and base_url")


def _tail(stderr: list) -> str:
    return f" (its last output: {' | '.join(stderr[-3:])})" if stderr else ""
