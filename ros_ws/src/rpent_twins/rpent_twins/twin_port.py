"""The twin's own port: what its cameras, its operator and an evaluation ask the physics.

One JSON object per line over TCP, on loopback; each request ``{"method": ..., "params":
{...}}`` gets one answer line, ``{"result": ...}`` or ``{"error": "..."}``. A twin serves:

* ``model``: the compiled scene as MJCF text (the cameras render their own copy of it);
* ``state``: ``{"time": s, "qpos": [...]}``, the physics state of the newest step;
* ``scene``: the task, its instruction, the seed and each item's pose in the base frame;
* ``reset_scene`` ``{"task": name (optional), "seed": int (optional)}``: put the items where
  the seed puts them (the next seed when none is given), for that task;
* ``judge``: ``{"achieved": bool, "why": str}`` for the current task.

This is the simulator's side of the bench, never the robot's: the robot node and the agent
reach the twin only through the driver's wire, the cameras' topics and the operator.
"""
from __future__ import annotations

import json
import socket
import socketserver
import threading
from typing import Callable

DEFAULT_PORT = 8767


class TwinPortError(RuntimeError):
    pass


class TwinPortServer:
    """Serve ``handlers`` (method name -> fn(**params) -> JSON-able) on host:port."""

    def __init__(self, handlers: dict, host: str = "127.0.0.1", port: int = DEFAULT_PORT):
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                for line in self.rfile:
                    self.wfile.write((json.dumps(outer._answer(line)) + "\n").encode())
                    self.wfile.flush()

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

        self._handlers: dict[str, Callable] = handlers
        self._server = Server((host, port), Handler)
        self.host, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(target=self._server.serve_forever, name="twin-port",
                                        daemon=True)

    def _answer(self, line: bytes) -> dict:
        try:
            request = json.loads(line)
            method, params = request["method"], request.get("params", {})
        except (ValueError, KeyError, TypeError):
            return {"error": "a request is one JSON object {\"method\": ..., \"params\": {...}} "
                             "per line"}
        handler = self._handlers.get(method)
        if handler is None:
            return {"error": f"unknown method {method!r}; this twin serves "
                             f"{', '.join(sorted(self._handlers))}"}
        try:
            return {"result": handler(**params)}
        except (TypeError, ValueError) as err:
            return {"error": f"{method}: {err}"}

    def start(self) -> "TwinPortServer":
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class TwinPort:
    """A client of a twin's port; every call is bounded by ``timeout``."""

    def __init__(self, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 timeout: float = 10.0):
        self.address = f"{host}:{port}"
        try:
            self._sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as err:
            raise TwinPortError(f"no twin answers on {self.address} ({err}): start it "
                                "(twin:=true) or check twin_host / twin_port") from None
        self._file = self._sock.makefile("rwb")
        self._lock = threading.Lock()

    def call(self, method: str, **params):
        with self._lock:
            try:
                self._file.write((json.dumps({"method": method, "params": params}) + "\n")
                                 .encode())
                self._file.flush()
                line = self._file.readline()
            except OSError as err:
                raise TwinPortError(f"the twin on {self.address} did not answer {method} "
                                    f"({err})") from None
        if not line:
            raise TwinPortError(f"the twin on {self.address} closed the connection")
        answer = json.loads(line)
        if "error" in answer:
            raise TwinPortError(answer["error"])
        return answer["result"]

    def close(self) -> None:
        try:
            self._file.close()
            self._sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def wait_for_twin(host: str, port: int, timeout: float) -> TwinPort:
    """A connected client once the twin serves (it builds its physics first), bounded."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            return TwinPort(host, port)
        except TwinPortError:
            if time.monotonic() > deadline:
                raise TwinPortError(f"no twin answered on {host}:{port} within {timeout:g} s: "
                                    "check that the twin started (its log says why not)")
            time.sleep(0.2)
