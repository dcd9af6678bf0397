"""Planners decide which tool to call next. Each one runs a whole task on a toolkit:

* ``api``: an LLM through pydantic-ai (Anthropic, OpenAI, OpenAI-compatible servers);
* ``scripted``: no LLM, a plan file or the pick-and-place heuristic, works offline;
* ``mcp``: the toolkit served over MCP, an external agent (Claude Code, Codex, ...) decides;
* ``claude_code``, ``codex``: the same server, with the agent's CLI started for each run.

``run(toolkit)`` returns when the run has ended; how it ended is ``toolkit.run.finished``.
"""
from __future__ import annotations

from typing import Optional

PLANNERS = ("auto", "api", "scripted", "mcp", "claude_code", "codex")


class PlannerConfigError(ValueError):
    """The planner cannot be built from the given parameters."""


def cli_model(planner: str, model: str, providers: tuple, what: str) -> str:
    """The model name an agent CLI takes, from ``provider:name`` or a bare name."""
    provider, sep, name = model.partition(":")
    if sep and provider not in providers:
        raise PlannerConfigError(
            f"planner '{planner}' runs {what} models, not '{provider}:'; set model to "
            f"{providers[0]}:<name> or leave it empty for the CLI's default model")
    return name if sep else model


def model_problem(model: str, base_url: str = "") -> Optional[str]:
    """Why ``model`` cannot be used (no model, unknown provider, missing key), or None."""
    if not model:
        return "no model is set (parameter 'model', e.g. anthropic:claude-sonnet-5)"
    if base_url:
        return None  # an OpenAI-compatible server (Ollama, vLLM) may need no key
    from pydantic_ai.exceptions import UserError
    from pydantic_ai.models import infer_model
    try:
        infer_model(model)
    except UserError as err:
        return str(err).split(". To try")[0]
    return None


def choose(planner: str, model: str, base_url: str = "") -> tuple[str, str]:
    """(planner to use, why): ``auto`` is ``api`` when a usable model is configured, else
    ``scripted``."""
    if planner != "auto":
        if planner == "api":
            problem = model_problem(model, base_url)
            if problem:
                raise PlannerConfigError(
                    f"planner 'api' cannot start: {problem}. Set the model parameter and its "
                    "API key in the environment, or use planner:=scripted / planner:=mcp")
        return planner, f"planner '{planner}' as configured"
    problem = model_problem(model, base_url)
    if problem:
        return "scripted", (f"no usable LLM ({problem}); using the offline scripted planner. "
                            "Set model and its API key (e.g. ANTHROPIC_API_KEY) for the LLM "
                            "planner")
    return "api", f"LLM planner with model '{model}'"

