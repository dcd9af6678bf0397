"""JSON over HTTP, as the model servers RPent talks to (action models, SAM3) speak it: a
client with one keep-alive connection, every exchange bounded by a timeout and errors that
say which server failed and what to check; and the server side, for protocol-level peers."""
from __future__ import annotations

import http.client
import ipaddress
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional, Type
from urllib.parse import urlsplit


def is_loopback(host: str) -> bool:
    """Whether a server listening on ``host`` is reachable from this machine only."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class JsonHttpClient:
    """``request(verb, path, body)`` -> (HTTP status, JSON object answered).

    ``server`` names the peer in messages ("the SAM3 server"); failures raise ``error``.
    Calls from several threads take turns on the one connection.
    """

    def __init__(self, endpoint: str, *, server: str, timeout: float,
                 connect_timeout: float = 5.0, error: Type[Exception] = RuntimeError):
        url = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
        if url.scheme != "http" or not url.hostname or not url.port:
            raise error(f"endpoint '{endpoint}' is not http://HOST:PORT (socket:// RPC is not "
                        "supported)")
        self.endpoint = f"http://{url.hostname}:{url.port}{url.path.rstrip('/')}"
        self._host, self._port, self._prefix = url.hostname, url.port, url.path.rstrip("/")
        self._server, self._error = server, error
        self.timeout, self.connect_timeout = timeout, connect_timeout
        self._conn: Optional[http.client.HTTPConnection] = None
        self._lock = threading.Lock()

    def request(self, verb: str, path: str, body: Optional[dict] = None,
                timeout: Optional[float] = None) -> tuple[int, dict]:
        timeout = self.timeout if timeout is None else timeout
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        with self._lock:
            try:
                try:
                    status, raw = self._exchange(verb, path, payload, headers, timeout)
                except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                    # The server closed the idle keep-alive connection: one fresh try.
                    self._drop_connection()
                    status, raw = self._exchange(verb, path, payload, headers, timeout)
            except (socket.timeout, TimeoutError):
                self._drop_connection()
                raise self._error(
                    f"no answer from {self.endpoint}{path} within {timeout:g} s: the "
                    f"{self._server} may be overloaded or hung; check its log or raise the "
                    "timeout") from None
            except (OSError, http.client.HTTPException) as exc:
                self._drop_connection()
                raise self._error(
                    f"cannot reach the {self._server} at {self.endpoint} ({exc}): check that it "
                    "is running and that the endpoint's host and port are right") from None
        try:
            answer = json.loads(raw) if raw else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise self._error(
                f"{self.endpoint}{path} answered HTTP {status} with a body that is not a JSON "
                f"object: check that the endpoint is the {self._server}")
        return status, answer

    def _exchange(self, verb, path, payload, headers, timeout):
        if self._conn is None or self._conn.sock is None:
            self._drop_connection()
            self._conn = http.client.HTTPConnection(
                self._host, self._port, timeout=self.connect_timeout)
            self._conn.connect()
        self._conn.sock.settimeout(timeout)
        self._conn.request(verb, self._prefix + path, body=payload, headers=headers)
        response = self._conn.getresponse()
        return response.status, response.read()

    def _drop_connection(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self._drop_connection()


class JsonHttpServer:
    """The server side: ``GET <health_path>`` answers ok, ``POST <call_path>`` with a JSON
    object body goes to :meth:`handle`, anything else gets a JSON error. Subclasses
    implement ``handle(body) -> (HTTP status, JSON object)``.

    ``with Server(...) as s: s.endpoint`` serves on a free loopback port until the block
    ends; closing also ends open keep-alive connections, so clients see the server go.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, call_path: str = "/call",
                 health_path: str = "/healthz", error: str = "error"):
        self._paths, self._error = (call_path, health_path), error
        self._httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: Optional[threading.Thread] = None
        self._connections: set = set()

    def handle(self, body: dict) -> tuple[int, dict]:
        raise NotImplementedError

    @property
    def endpoint(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self):
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        name=type(self).__name__, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()
        for conn in list(self._connections):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # the client closed it meanwhile

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    def _handler_class(self):
        server = self
        call_path, health_path = self._paths
        error = self._error

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: clients reuse their connection

            def log_message(self, *args):
                pass

            def setup(self):
                super().setup()
                server._connections.add(self.connection)

            def finish(self):
                server._connections.discard(self.connection)
                super().finish()

            def _answer(self, status: int, answer: dict):
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == health_path:
                    self._answer(200, {"status": "ok"})
                else:
                    self._answer(404, {error: f"no route {self.path}"})

            def do_POST(self):
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != call_path:
                    self._answer(404, {error: f"no route {self.path}"})
                    return
                try:
                    body = json.loads(data)
                except ValueError:
                    body = None
                if not isinstance(body, dict):
                    self._answer(400, {error: "the body must be a JSON object"})
                    return
                self._answer(*server.handle(body))

        return Handler
