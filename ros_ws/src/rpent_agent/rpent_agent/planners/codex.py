"""The codex planner: the Codex CLI (``codex exec``) decides; it reaches the robot through
the toolkit's MCP server (the mcp planner's), with the api planner's prompts in place of
Codex's own and none of its own tools (shell, files, web, sub-agents).

Each run is one ``codex exec`` process: the task is its prompt, its JSON events are the
run's reasoning and token counts. When ``finish`` ends the run, Codex gets the model's
closing reply (which reports the turn's tokens); a tool call after that, cancel or
``run_timeout`` stops the process at once. With ``base_url`` the model is served by that
Responses API endpoint (key: ``OPENAI_API_KEY``); without it by OpenAI, with the key or
Codex's own login.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

from . import PlannerConfigError, cli_model
from ..prompts import SYSTEM_PROMPT
from .api import instructions_for
from .mcp import McpPlanner

SERVER = "robot"
TOKEN_ENV = "RPENT_MCP_TOKEN"  # the MCP server's bearer token, for Codex to send
# The model's closing reply after finish may take this long before the process is stopped.
CLOSING_REPLY_S = 30.0
INSTALL = ("scripts/setup.sh --extras agents (installs @openai/codex@0.171.0 into the venv), "
           "or npm install -g @openai/codex@0.171.0, or set codex_cli to the executable")
# Codex's features that give the model tools of its own or reach the network by themselves
# (plugins sync from GitHub; shell_snapshot runs the login shell's profile).
DISABLED_FEATURES = ("shell_tool", "unified_exec", "view_image", "multi_agent", "goals",
                     "apps", "plugins", "shell_snapshot",
                     # without this a dead endpoint is retried forever
                     "unbounded_connection_retries")


def find_cli(cli: str) -> str:
    path = shutil.which(cli)
    if path is None:
        raise PlannerConfigError(f"planner 'codex' needs the Codex CLI, and '{cli}' is not an "
                                 f"executable on PATH: {INSTALL}")
    return path


def _toml(value) -> str:
    return json.dumps(value)  # a JSON string or number is a TOML one too


class CodexPlanner(McpPlanner):
    name = "codex"

    def __init__(self, toolkit_provider, model: str = "", base_url: str = "",
                 host: str = "127.0.0.1", port: int = 8766, run_timeout: float = 3600.0,
                 system_prompt: str = SYSTEM_PROMPT, cli: str = "codex", token: str = ""):
        """``model``: ``openai:<name>``, ``openai-responses:<name>``, a bare name, or empty
        for Codex's default."""
        super().__init__(toolkit_provider, host, port, run_timeout, token)
        self.cli = find_cli(cli)
        self.model = cli_model(self.name, model, ("openai", "openai-responses"),
                               "OpenAI Responses")
        self.base_url = base_url
        self.system_prompt = system_prompt
        self._process: Optional[subprocess.Popen] = None
        self._lock = threading.Lock()

    def command(self, instructions_file: Path, workdir: str) -> list:
        config = {
            "approval_policy": "never", "web_search": "disabled",
            # The MCP server's tools run without asking: no one is there to approve them.
            f"mcp_servers.{SERVER}.url": self.url,
            f"mcp_servers.{SERVER}.default_tools_approval_mode": "approve",
            f"mcp_servers.{SERVER}.tool_timeout_sec": 3600,
            "model_instructions_file": str(instructions_file),
            "include_environment_context": False, "include_permissions_instructions": False,
            "include_apps_instructions": False,
            "include_collaboration_mode_instructions": False,
            "skills.include_instructions": False, "skills.bundled.enabled": False,
            "mcp_oauth_credentials_store": "file", "check_for_update_on_startup": False,
            "analytics.enabled": False, "feedback.enabled": False,
            "history.persistence": "none",
        }
        if self.token:
            # From the environment: a command line is readable by every user of the machine.
            config[f"mcp_servers.{SERVER}.bearer_token_env_var"] = TOKEN_ENV
        if self.base_url:
            config.update({
                "model_provider": "rpent", "model_providers.rpent.name": "rpent",
                "model_providers.rpent.base_url": self.base_url,
                "model_providers.rpent.env_key": "OPENAI_API_KEY",
                "model_providers.rpent.wire_api": "responses",
            })
        cmd = [self.cli, "exec", "--json", "--color", "never", "--strict-config",
               "--skip-git-repo-check", "--ephemeral", "--ignore-user-config",
               "--ignore-rules", "--sandbox", "read-only", "--cd", workdir]
        if self.model:
            cmd += ["--model", self.model]
        for key, value in config.items():
            cmd += ["-c", f"{key}={_toml(value)}"]
        for feature in DISABLED_FEATURES:
            cmd += ["--disable", feature]
        return cmd + ["-"]  # the prompt on stdin

    def run(self, toolkit) -> None:
        run = toolkit.run
        deadline = time.monotonic() + self.run_timeout
        errors: list = []
        with tempfile.TemporaryDirectory(prefix="rpent-codex-") as workdir:
            instructions = Path(workdir) / "instructions.md"
            instructions.write_text(instructions_for(toolkit, self.system_prompt))
            env = dict(os.environ)
            if self.token:
                env[TOKEN_ENV] = self.token
            if self.base_url and not env.get("OPENAI_API_KEY"):
                env["OPENAI_API_KEY"] = "not-needed"  # a local server may take no key
            with self._lock:
                self._process = subprocess.Popen(
                    self.command(instructions, workdir), stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=workdir,
                    start_new_session=True, text=True)  # its own group: stopped whole
            process = self._process
            stderr: list = []
            threading.Thread(target=lambda: stderr.extend(process.stderr.read().splitlines()),
                             daemon=True).start()
            try:
                process.stdin.write(toolkit.opening() + "\n")
                process.stdin.close()
            except BrokenPipeError:
                pass  # Codex exited before reading its prompt; its stderr says why, below
            reader = threading.Thread(target=self._read_events, args=(process, toolkit, errors),
                                      daemon=True)
            reader.start()
            ended_at = None
            while process.poll() is None:
                now = time.monotonic()
                if run.finished is not None:
                    ended_at = ended_at or now
                    if now - ended_at > CLOSING_REPLY_S:
                        self._stop()
                elif run.cancel.is_set() or now > deadline:
                    self._stop()
                time.sleep(0.05)
            reader.join(5.0)
            with self._lock:
                self._process = None
        why = "; ".join(errors[-2:]) or " | ".join(stderr[-3:]) or \
            f"exit status {process.returncode}"
        self.end_unfinished(run, deadline, f"Codex ended without calling finish: {why}. Check "
                            "the model name, OPENAI_API_KEY and base_url")

    def called_after_end(self) -> None:
        # The model went on after finish: no closing reply to wait for. The server's event
        # loop calls this, so it only signals; run() waits for the exit.
        self._stop(wait=False)

    def _stop(self, wait: bool = True) -> None:
        """SIGTERM to Codex's process group (the npm wrapper and the native binary), SIGKILL
        if it is still there 5 s later."""
        with self._lock:
            process = self._process
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            if wait:
                process.wait(5.0)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    @staticmethod
    def _read_events(process, toolkit, errors: list) -> None:
        """``codex exec --json`` events: the model's messages, errors, each turn's tokens."""
        run = toolkit.run
        for line in process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            kind, item = event.get("type"), event.get("item") or {}
            if kind == "item.completed" and item.get("type") == "agent_message":
                if item.get("text", "").strip():
                    toolkit.listener(kind="reasoning", text=item["text"].strip())
            elif kind == "item.completed" and item.get("type") == "error":
                # e.g. no metadata for a model Codex does not know: it goes on with defaults
                toolkit.listener(kind="reasoning", text=f"Codex: {item.get('message', '')}")
            elif kind in ("error", "turn.failed"):
                message = event.get("message") or (event.get("error") or {}).get("message", "")
                errors.append(message)
                toolkit.listener(kind="error", text=f"Codex: {message}")
            elif kind == "turn.completed":
                usage = event.get("usage") or {}
                run.count_tokens(usage.get("input_tokens"), usage.get("cached_input_tokens"),
                                 usage.get("cache_write_input_tokens"),
                                 usage.get("output_tokens"))
