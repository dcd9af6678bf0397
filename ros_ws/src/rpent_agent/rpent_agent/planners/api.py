"""The LLM planner: a pydantic-ai tool loop over the toolkit.

Each model response is one turn. Tool results go back as text plus the camera images; only
the newest ``max_history_images`` images stay in the history the model sees (older ones
become a one-line placeholder), which bounds the cost of long runs. Transient model errors
(rate limits, 5xx, dropped connections) are retried with backoff; a tool call the model got
wrong (bad arguments) goes back to it with the error, ``tool_retries`` times in a row. A
model that stops calling tools without ``finish`` is asked to continue, which costs a turn.

All runs of a planner share one event loop: a provider's HTTP client belongs to the loop it
was first used on, so a serving agent node runs any number of tasks with one model.
"""
from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from typing import Optional

from pydantic_ai import Agent, BinaryContent, Tool
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.exceptions import (AgentRunError, ModelAPIError, ModelHTTPError,
                                    UnexpectedModelBehavior, UsageLimitExceeded)
from pydantic_ai.messages import (ModelMessagesTypeAdapter, ModelRequest, TextPart,
                                  ToolReturnPart, UserPromptPart)
from pydantic_ai.models import Model, infer_model
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.usage import UsageLimits

from ..prompts import SYSTEM_PROMPT, contributed_prompt

CODE_PROMPT = """

In this run you act by writing Python with run_code: the robot's tools, finish included, \
are functions robo.<tool>(...) inside it (see run_code); only the operator requests are \
tools of their own."""

CONTINUE_PROMPT = ("You replied without calling a tool. Continue the task with the tools, "
                   "or call finish to end the run.")


def instructions_for(toolkit, system_prompt: str = SYSTEM_PROMPT) -> str:
    """The system prompt of a run: what installed packages add for its robot, and in code
    mode the line that says how to act."""
    return (system_prompt + contributed_prompt(toolkit.info.embodiment)
            + (CODE_PROMPT if "run_code" in toolkit.tools else ""))


RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}


class RunEnded(Exception):
    """Raised out of a tool call to stop the agent loop: finish was called or the run ended."""


def build_model(model: str, base_url: str = "") -> Model:
    """``provider:model``. ``base_url`` sends the provider's API elsewhere: a proxy or gateway
    for ``anthropic:``, an OpenAI-compatible server (vLLM, Ollama) for ``openai:`` (Chat
    Completions), ``openai-responses:`` or a bare model name."""
    if not base_url:
        return infer_model(model)
    provider, sep, name = model.partition(":")
    if not sep:
        provider, name = "openai", model
    if provider == "anthropic":
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        # A proxy may take no key, but the client insists on one.
        key = os.environ.get("ANTHROPIC_API_KEY") or "not-needed"
        return AnthropicModel(name, provider=AnthropicProvider(base_url=base_url, api_key=key))
    if provider in ("openai", "openai-chat", "openai-responses"):
        from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
        from pydantic_ai.providers.openai import OpenAIProvider

        key = os.environ.get("OPENAI_API_KEY") or "not-needed"
        cls = OpenAIResponsesModel if provider == "openai-responses" else OpenAIChatModel
        return cls(name, provider=OpenAIProvider(base_url=base_url, api_key=key))
    raise ValueError(f"base_url works with anthropic:, openai:, openai-responses: or a bare "
                     f"model name (OpenAI-compatible server), not '{provider}:'")


class RetryingModel(WrapperModel):
    """Retries a request that failed for a transient reason (rate limit, 5xx, connection)."""

    def __init__(self, wrapped: Model, retries: int = 3, backoff: float = 1.0):
        super().__init__(wrapped)
        self.retries, self.backoff = retries, backoff
        self.retried = 0

    async def request(self, messages, model_settings, model_request_parameters):
        for attempt in range(self.retries + 1):
            try:
                return await self.wrapped.request(messages, model_settings,
                                                  model_request_parameters)
            except ModelHTTPError as err:
                if err.status_code not in RETRY_STATUS or attempt == self.retries:
                    raise
            except ModelAPIError:  # no HTTP status: the connection failed
                if attempt == self.retries:
                    raise
            self.retried += 1
            await asyncio.sleep(self.backoff * 2 ** attempt)


def cache_settings(model: Model) -> Optional[dict]:
    """Prompt caching where the provider needs to be asked: Anthropic caches the system
    prompt, the tool definitions and the history up to the newest message when each is
    marked, and a run resends all three every turn. (OpenAI caches long prompts by itself.)
    """
    if model.system != "anthropic":
        return None
    return {"anthropic_cache_instructions": True, "anthropic_cache_tool_definitions": True,
            "anthropic_cache_messages": True}


def _is_image(item) -> bool:
    return isinstance(item, BinaryContent) and item.is_image


def prune_images(messages: list, keep: int) -> list:
    """Keep the newest ``keep`` to ``3 * keep - 1`` images; older ones become a text
    placeholder.

    Images go ``2 * keep`` at a time rather than one per turn: a pruned image rewrites the
    history where it was, and a provider's prompt cache reads only an unchanged prefix, so
    pruning every turn would make every turn miss the cache (``bench/prompt_cache.py``:
    a 20-turn run with two cameras costs 50% of its uncached input this way, 78% pruning
    ``keep`` at a time).
    """
    images = [item for message in messages if isinstance(message, ModelRequest)
              for part in message.parts if isinstance(part, (ToolReturnPart, UserPromptPart))
              and isinstance(part.content, list) for item in part.content if _is_image(item)]
    step = max(1, 2 * keep)
    cutoff = max(0, len(images) - keep) // step * step  # the oldest this many go
    seen = 0
    out = []
    for message in messages:
        if isinstance(message, ModelRequest):
            parts = []
            for part in message.parts:
                if isinstance(part, (ToolReturnPart, UserPromptPart)) and \
                        isinstance(part.content, list):
                    content = []
                    for item in part.content:
                        if _is_image(item):
                            seen += 1
                            if seen <= cutoff or keep <= 0:
                                item = f"[image from an earlier turn omitted ({item.media_type})]"
                        content.append(item)
                    part = dataclasses.replace(part, content=content)
                parts.append(part)
            message = dataclasses.replace(message, parts=parts)
        out.append(message)
    return out


def messages_json(messages: list) -> list:
    """The history as JSON for the transcript, images replaced by placeholders."""
    return ModelMessagesTypeAdapter.dump_python(prune_images(messages, 0), mode="json")


def result_content(result) -> list:
    content: list = [result.text if result.ok else f"ERROR: {result.text}"]
    for camera, png in result.images:
        content += [f"camera {camera}:", BinaryContent(png, media_type="image/png")]
    return content


class ApiPlanner:
    name = "api"

    def __init__(self, model, *, max_history_images: int = 4, retries: int = 3,
                 backoff: float = 1.0, system_prompt: str = SYSTEM_PROMPT,
                 run_timeout: float = 3600.0, tool_retries: int = 3,
                 prompt_cache: bool = True):
        """``model``: a pydantic-ai Model (FunctionModel in tests) or a ``provider:model``."""
        self.model = RetryingModel(infer_model(model) if isinstance(model, str) else model,
                                   retries, backoff)
        self.max_history_images = max_history_images
        self.system_prompt = system_prompt
        self.run_timeout = run_timeout
        self.tool_retries = tool_retries
        self.prompt_cache = prompt_cache
        self.messages: list = []
        self._event_loop: Optional[asyncio.AbstractEventLoop] = None

    def run(self, toolkit) -> None:
        self.messages = []
        if self._event_loop is None:
            self._event_loop = asyncio.new_event_loop()
            threading.Thread(target=self._event_loop.run_forever, name="api-planner",
                             daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._run_bounded(toolkit), self._event_loop).result()

    def stop(self) -> None:
        """Close the event loop (the node is going away)."""
        if self._event_loop is not None:
            self._event_loop.call_soon_threadsafe(self._event_loop.stop)

    async def _run_bounded(self, toolkit) -> None:
        run = toolkit.run
        task = asyncio.ensure_future(self._loop(toolkit))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.run_timeout
        # The model call itself may block for long: cancel and the deadline act on the task.
        while not task.done():
            await asyncio.wait([task], timeout=0.1)
            if run.cancel.is_set() or loop.time() > deadline:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                if not run.cancel.is_set():
                    run.end("error", f"the run took longer than run_timeout "
                            f"({self.run_timeout:g} s)")
                return
        try:
            task.result()
        except Exception as err:  # noqa: BLE001 - a failed loop ends the run, readable
            what = f"{type(err).__name__}: {err}"
            toolkit.listener(kind="error", text=what)
            if isinstance(err, AgentRunError):
                run.end("error", model_failure(err, self.tool_retries))
            else:
                run.end("error", f"the agent loop failed: {what}; the transcript has the "
                        "conversation up to here")

    def _tools(self, toolkit) -> list:
        def make(name):
            def call(**arguments):
                result = toolkit.call(name, arguments)
                if toolkit.run.finished is not None or toolkit.run.cancel.is_set():
                    raise RunEnded(name)
                return result_content(result)
            return call
        return [Tool.from_schema(make(t.name), t.name, t.description, t.parameters,
                                 sequential=True)
                for t in toolkit.tools.values()]

    async def _loop(self, toolkit) -> None:
        run = toolkit.run
        keep = self.max_history_images
        instructions = instructions_for(toolkit, self.system_prompt)
        agent = Agent(self.model, instructions=instructions, tools=self._tools(toolkit),
                      retries=self.tool_retries,
                      model_settings=cache_settings(self.model) if self.prompt_cache else None,
                      capabilities=[ProcessHistory(lambda messages: prune_images(messages,
                                                                                 keep))])
        first = toolkit.call("observe")
        prompt: object = [f"{toolkit.opening()}\n\n{first.text}"] + result_content(first)[1:]
        history: Optional[list] = None
        while run.finished is None:
            left = run.max_turns - run.turns
            if left <= 0:
                run.end("max_turns", f"used all {run.max_turns} turns without finishing")
                break
            async with agent.iter(prompt, message_history=history,
                                  usage_limits=UsageLimits(request_limit=left)) as agent_run:
                try:
                    async for node in agent_run:
                        if Agent.is_call_tools_node(node):
                            self._on_response(toolkit, node.model_response)
                except RunEnded:
                    pass
                except UsageLimitExceeded:
                    run.end("max_turns", f"used all {run.max_turns} turns without finishing")
                finally:
                    usage = agent_run.usage
                    run.count_tokens(usage.input_tokens, usage.cache_read_tokens,
                                     usage.cache_write_tokens, usage.output_tokens)
                    history = agent_run.all_messages()
                    self.messages = history
            prompt = CONTINUE_PROMPT

    def _on_response(self, toolkit, response) -> None:
        toolkit.run.turns += 1
        text = "\n".join(p.content for p in response.parts if isinstance(p, TextPart)).strip()
        if text:
            toolkit.listener(kind="reasoning", text=text)
        toolkit.listener(kind="turn", text=text)


def model_failure(err: AgentRunError, tool_retries: int) -> str:
    """What ended the run, and what to do about it, by the kind of failure."""
    what = f"{type(err).__name__}: {err}"
    if isinstance(err, ModelHTTPError):
        if err.status_code in (401, 403):
            return (f"the provider refused the API key (HTTP {err.status_code}): {what}. Set "
                    "the provider's key in the environment (e.g. ANTHROPIC_API_KEY)")
        if err.status_code == 404:
            return (f"the provider does not know the model (HTTP 404): {what}. Check the model "
                    "name (provider:model) and base_url")
        return (f"the provider refused the request (HTTP {err.status_code}): {what}. The body "
                "says why; the transcript has the conversation up to here")
    if isinstance(err, ModelAPIError):
        return (f"the provider could not be reached: {what}. Check base_url and the network, "
                "and that the provider is up")
    if isinstance(err, UnexpectedModelBehavior):
        return (f"the model kept answering in a way the agent cannot use ({what}); it got "
                f"{tool_retries} chances to correct each tool call. Try a stronger model, or "
                "raise tool_retries")
    return f"the model call failed: {what}"
