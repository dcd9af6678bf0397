"""The MCP planner: the toolkit served as an MCP server (streamable HTTP, loopback by
default) so an external agent (Claude Code, Codex, any MCP client) decides what to do.

The server runs for the node's lifetime at ``http://<host>:<port>/mcp``; tool calls act on
the current run_task (outside one they say that no task is running). Every tool call is a
turn; the run ends when the external agent calls ``finish``, when the turns run out, on
cancel, or after ``run_timeout``.
"""
from __future__ import annotations

import base64
import hmac
import secrets
import socket
import threading
import time
from typing import Optional

import anyio
import uvicorn
from mcp import types
from mcp.server.lowlevel import Server
from rpent_common.http_json import is_loopback

from . import PlannerConfigError


class BearerAuth:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` get 401."""

    def __init__(self, app, token: str):
        self._app, self._expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                body = (b"this MCP server needs the bearer token the agent printed at "
                        b"start-up (header Authorization: Bearer <token>)")
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self._app(scope, receive, send)


INSTRUCTIONS = ("Tools of a robot arm. Call observe first: it shows the task and the cameras. "
                "Positions are metres in the robot base frame. End with finish.")


class McpPlanner:
    name = "mcp"

    def __init__(self, toolkit_provider, host: str = "127.0.0.1", port: int = 8766,
                 run_timeout: float = 3600.0, token: str = ""):
        """``toolkit_provider()``: the toolkit of the current run, or None between runs (it
        may block while a run is being set up).
        ``token``: the bearer token every client must send; one is made up when the server
        listens beyond loopback and none is given (anyone who reaches the port could
        otherwise move the arm)."""
        self._toolkit = toolkit_provider
        self.host, self.port, self.run_timeout = host, port, run_timeout
        self.token = token or ("" if is_loopback(host) else secrets.token_urlsafe(24))
        self._server: Optional[uvicorn.Server] = None
        self._thread: Optional[threading.Thread] = None
        self._catalogue: list = []

    @property
    def headers(self) -> dict:
        """What an MCP client sends with every request."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/mcp"

    # --- server --------------------------------------------------------------------------
    def start(self, catalogue: list, timeout: float = 10.0) -> str:
        """Serve the tools described by ``catalogue`` (Toolkit.describe()); return the URL."""
        self._catalogue = catalogue
        server = Server("rpent-robot", instructions=INSTRUCTIONS,
                        on_list_tools=self._list_tools, on_call_tool=self._call_tool)
        app = server.streamable_http_app(host=self.host)
        if self.token:
            app = BearerAuth(app, self.token)
        config = uvicorn.Config(app, host=self.host, port=self.port, log_level="warning",
                                lifespan="on")
        self._server = uvicorn.Server(config)
        # Bound here, not in uvicorn's thread: a busy port is then this call's error, said
        # once, rather than a traceback from a thread that quietly ends.
        try:
            family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            sock = socket.create_server((self.host, self.port), family=family)
        except OSError as err:
            raise PlannerConfigError(f"the MCP server cannot listen on {self.host}:{self.port} "
                                     f"({err.strerror}); set mcp_port to a free port or stop "
                                     "the program using it") from None
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name="mcp-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the MCP server did not start on {self.host}:{self.port} "
                                   "(the agent's log above says why)")
            time.sleep(0.05)
        return self.url

    def stop(self, timeout: float = 5.0) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(timeout)

    async def _list_tools(self, ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[
            types.Tool(name=t["name"], description=t["description"], input_schema=t["parameters"])
            for t in self._catalogue])

    async def _call_tool(self, ctx, params) -> types.CallToolResult:
        # The provider may wait for a run being set up: off the event loop, which serves
        # every other client meanwhile.
        toolkit = await anyio.to_thread.run_sync(self._toolkit)
        if toolkit is None or toolkit.run.finished is not None:
            self.called_after_end()
            return _text("no task is running; start one with the agent's run_task action",
                         error=True)
        run = toolkit.run
        if run.turns >= run.max_turns:
            run.end("max_turns", f"used all {run.max_turns} tool calls without finishing")
            return _text("the turn budget is used up; the run has ended", error=True)
        run.turns += 1
        toolkit.listener(kind="turn", text=params.name)
        result = await anyio.to_thread.run_sync(toolkit.call, params.name,
                                                dict(params.arguments or {}))
        content: list = [types.TextContent(text=result.text)]
        for camera, png in result.images:
            content += [types.TextContent(text=f"camera {camera}:"),
                        types.ImageContent(data=base64.b64encode(png).decode(),
                                           mime_type="image/png")]
        return types.CallToolResult(content=content, is_error=not result.ok)

    def called_after_end(self) -> None:
        """A tool was called with no run going on: a planner that starts the agent stops it."""

    def end_unfinished(self, run, deadline: float, why: str) -> None:
        """End a run its agent left without finish: past ``run_timeout``, else for ``why``."""
        if run.finished is None and not run.cancel.is_set():
            if time.monotonic() >= deadline:
                run.end("error", f"the run took longer than run_timeout "
                        f"({self.run_timeout:g} s)")
            else:
                run.end("error", why)

    # --- one run -------------------------------------------------------------------------
    def run(self, toolkit) -> None:
        """Wait until the external agent ends the run (or cancel / timeout ends it)."""
        run = toolkit.run
        deadline = time.monotonic() + self.run_timeout
        toolkit.listener(kind="reasoning",
                         text=f"waiting for an MCP client at {self.url} to carry out the task")
        while run.finished is None and not run.cancel.is_set():
            if time.monotonic() > deadline:
                run.end("error", f"no MCP client finished the task within run_timeout "
                        f"({self.run_timeout:g} s); connect a client to {self.url}")
                break
            time.sleep(0.05)


def _text(text: str, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error)
