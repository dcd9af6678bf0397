"""The original RPent's RPC, both ends: how its model servers (the π0.5 VLA server, the
RoboCasa VLA facade, the SAM3 server) are called, on either of its two transports.

A call is a method name, positional ``args`` and keyword ``kwargs``; the answer is an
envelope, ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "<message>",
"traceback": "<server traceback>"}``. Every server also answers ``healthz``
(``{"status": "ok"}``) and ``shutdown``; an unknown method fails with ``unknown RPC
method: '<name>'``.

* ``http://HOST:PORT`` (``--transport http``, the servers' default): ``POST /call`` with
  the JSON body ``{"method", "args", "kwargs", "session_id"}`` (``session_id`` null: no
  session bound). NumPy arrays travel as ``{"__ndarray__":
  "<base64 of the raw bytes>", "dtype": "<numpy dtype>", "shape": [...]}``. The answer is
  always HTTP 200 (the envelope says whether the call failed); another path is a bare 404.
  One request per connection (HTTP/1.0).
* ``socket://HOST:PORT`` (``--transport socket``): one connection per call; each way one
  frame, a 4-byte big-endian length and a pickle of the request dict / the envelope.

Unpickling runs code named by the payload, and a socket server's answer is unpickled
here: :func:`safe_loads` admits only data (NumPy arrays and scalars of numeric or string
dtypes, numbers, strings, bytes, lists, tuples and dicts) and refuses anything else with
:class:`UnsafePayload` before it is built, so a compromised or impostor server on the
network cannot run code in the robot's model node. The servers here read requests the same
way.
"""
from __future__ import annotations

import base64
import io
import json
import pickle
import socket
import socketserver
import struct
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping, Optional, Type

import numpy as np

from rpent_common.http_json import JsonHttpClient

TRANSPORTS = ("http", "socket")
_LENGTH = struct.Struct(">I")
# A frame longer than this is not a model server's answer (an observation is about 1 MB).
MAX_FRAME = 256 << 20
# dtype kinds that are data: bool, signed, unsigned, float, complex, bytes, str.
_DATA_KINDS = "biufcSU"


class UnsafePayload(ValueError):
    """A pickle or JSON payload that is not plain data."""


class RpcFailed(RuntimeError):
    """The server ran the call and answered ``ok: false``; ``message`` is its error."""

    def __init__(self, method: str, endpoint: str, message: str, server_traceback: str = ""):
        super().__init__(f"{method} failed on {endpoint}: {message}")
        self.method, self.message, self.server_traceback = method, message, server_traceback

    @property
    def unknown_method(self) -> bool:
        return self.message.startswith("unknown RPC method")


def parse_endpoint(endpoint: str) -> tuple[str, str, int]:
    """``[http|socket://]HOST:PORT`` -> (transport, host, port); http when unprefixed, as
    the original's ``--vla-endpoint`` reads it."""
    transport, sep, rest = endpoint.partition("://")
    if not sep:
        transport, rest = "http", endpoint
    host, _, port = rest.rstrip("/").rpartition(":")
    if transport not in TRANSPORTS or not host or not port.isdigit():
        raise ValueError(f"endpoint '{endpoint}' is not [http|socket]://HOST:PORT")
    return transport, host, int(port)


# --- payloads ----------------------------------------------------------------------------
def _check_array(value: np.ndarray) -> np.ndarray:
    if value.dtype.kind not in _DATA_KINDS:
        raise UnsafePayload(f"an array of dtype {value.dtype} is not data (only numeric and "
                            "string arrays are)")
    return value


def to_json(value: Any) -> Any:
    """A payload as the HTTP transport writes it: arrays tagged, NumPy scalars as numbers."""
    if isinstance(value, np.ndarray):
        _check_array(value)
        return {"__ndarray__": base64.b64encode(np.ascontiguousarray(value).tobytes())
                .decode("ascii"), "dtype": str(value.dtype), "shape": list(value.shape)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


def from_json(value: Any) -> Any:
    """The inverse of :func:`to_json`; a malformed array tag raises :class:`UnsafePayload`."""
    if isinstance(value, dict):
        if "__ndarray__" in value and set(value) <= {"__ndarray__", "dtype", "shape"}:
            try:
                dtype = np.dtype(value.get("dtype"))
                _check_array(np.empty(0, dtype))
                array = np.frombuffer(base64.b64decode(value["__ndarray__"]), dtype=dtype)
                return array.reshape(value.get("shape", (-1,))).copy()
            except UnsafePayload:
                raise
            except (TypeError, ValueError) as err:
                raise UnsafePayload(f"a malformed array ({err})") from None
        return {k: from_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json(v) for v in value]
    return value


class _DataUnpickler(pickle.Unpickler):
    # What NumPy's own pickles of arrays, dtypes and scalars name (NumPy 1 and 2 spellings).
    _ALLOWED = {(module, name)
                for core in ("numpy.core", "numpy._core")
                for module, name in ((f"{core}.multiarray", "_reconstruct"),
                                     (f"{core}.multiarray", "scalar"),
                                     (f"{core}.numeric", "_frombuffer"))} | {
        ("numpy", "ndarray"), ("numpy", "dtype")}

    def find_class(self, module: str, name: str):
        if (module, name) not in self._ALLOWED:
            raise UnsafePayload(
                f"the payload names {module}.{name}, which is not data: only NumPy arrays, "
                "numbers, strings, lists and dicts are accepted. Check that the endpoint is an "
                "RPent model server you trust")
        return super().find_class(module, name)


def _walk(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        _check_array(value)
    elif isinstance(value, np.generic):
        _check_array(np.asarray(value))
    elif isinstance(value, dict):
        for k, v in value.items():
            _walk(k)
            _walk(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _walk(v)
    return value


def safe_loads(data: bytes) -> Any:
    """Unpickle ``data`` if it is plain data; :class:`UnsafePayload` otherwise."""
    try:
        return _walk(_DataUnpickler(io.BytesIO(data)).load())
    except UnsafePayload:
        raise
    except Exception as err:  # a truncated or garbled pickle: any of pickle's errors
        raise UnsafePayload(f"not a readable pickle ({type(err).__name__}: {err})") from None


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError(f"the connection closed mid-frame ({len(buf)} of {n} bytes)")
        buf.extend(chunk)
    return bytes(buf)


def read_frame(sock: socket.socket) -> Any:
    (length,) = _LENGTH.unpack(_read_exact(sock, _LENGTH.size))
    if length > MAX_FRAME:
        raise UnsafePayload(f"a frame of {length} bytes is over the {MAX_FRAME >> 20} MiB limit")
    return safe_loads(_read_exact(sock, length))


def write_frame(sock: socket.socket, value: Any) -> None:
    body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_LENGTH.pack(len(body)) + body)


# --- client ------------------------------------------------------------------------------
class RpcClient:
    """``call(method, args, kwargs)`` -> the result, on the endpoint's transport.

    ``server`` names the peer in messages ("the SAM3 server"); transport failures (down,
    timeout, not this protocol) raise ``error``; a call the server ran and failed raises
    :class:`RpcFailed`. Thread-safe: concurrent calls each use a connection of their own.
    """

    def __init__(self, endpoint: str, *, server: str, timeout: float,
                 connect_timeout: float = 5.0, error: Type[Exception] = RuntimeError):
        try:
            self.transport, self._host, self._port = parse_endpoint(endpoint)
        except ValueError as err:
            raise error(str(err)) from None
        self.endpoint = f"{self.transport}://{self._host}:{self._port}"
        self._server, self._error = server, error
        self.timeout, self.connect_timeout = timeout, connect_timeout
        # A connection per concurrent HTTP call: one call stuck on a hung request (which the
        # caller gives up on at its timeout) must not hold the next call behind it.
        self._idle: list = []
        self._idle_lock = threading.Lock()

    def call(self, method: str, args: tuple = (), kwargs: Optional[dict] = None,
             timeout: Optional[float] = None) -> Any:
        # session_id: the newer servers' envelope carries one; None is "no bound session",
        # and the older servers read method, args and kwargs only.
        request = {"method": method, "args": tuple(args), "kwargs": dict(kwargs or {}),
                   "session_id": None}
        timeout = self.timeout if timeout is None else timeout
        if self.transport == "http":
            with self._idle_lock:
                http = self._idle.pop() if self._idle else JsonHttpClient(
                    f"http://{self._host}:{self._port}", server=self._server,
                    timeout=self.timeout, connect_timeout=self.connect_timeout,
                    error=self._error)
            try:
                _, answer = http.request("POST", "/call", to_json(request), timeout)
            finally:
                with self._idle_lock:
                    self._idle.append(http)
            try:
                answer = from_json(answer)
            except UnsafePayload as err:
                raise self._error(f"{method} answer from {self.endpoint}: {err}") from None
        else:
            answer = self._socket_call(method, request, timeout)
        if not isinstance(answer, dict) or not isinstance(answer.get("ok"), bool):
            raise self._error(f"{method} answer from {self.endpoint} is not an RPC envelope "
                              f"{{ok, result | error}}: check that the endpoint is the "
                              f"{self._server}")
        if not answer["ok"]:
            raise RpcFailed(method, self.endpoint, str(answer.get("error", "no reason given")),
                            str(answer.get("traceback") or ""))
        return answer.get("result")

    def _socket_call(self, method: str, request: dict, timeout: float) -> Any:
        try:
            with socket.create_connection((self._host, self._port),
                                          timeout=self.connect_timeout) as sock:
                sock.settimeout(timeout)
                write_frame(sock, request)
                return read_frame(sock)
        except (socket.timeout, TimeoutError):
            raise self._error(
                f"no answer to {method} from {self.endpoint} within {timeout:g} s: the "
                f"{self._server} may be overloaded or hung; check its log or raise the "
                "timeout") from None
        except UnsafePayload as err:
            raise self._error(f"{method} answer from {self.endpoint}: {err}") from None
        except OSError as err:
            raise self._error(
                f"cannot reach the {self._server} at {self.endpoint} ({err}): check that it is "
                "running and that the endpoint's transport, host and port are right") from None

    def close(self) -> None:
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for http in idle:
            http.close()


# --- server ------------------------------------------------------------------------------
class RpcServer:
    """The server side of both transports around ``methods`` (name -> callable), as the
    original's ``RpcFacade`` serves: ``healthz`` and ``shutdown`` built in, unknown methods
    and exceptions answered ``ok: false`` with the message and traceback, and calls run one
    at a time unless ``serialize`` is false. ``with RpcServer(...) as s: s.endpoint``.
    ``shutdown_requested`` is set when a client calls ``shutdown``.
    """

    def __init__(self, methods: Mapping[str, Callable], *, transport: str = "http",
                 host: str = "127.0.0.1", port: int = 0, serialize: bool = True):
        if transport not in TRANSPORTS:
            raise ValueError(f"transport '{transport}' is not one of {', '.join(TRANSPORTS)}")
        self.methods, self.transport = dict(methods), transport
        self.shutdown_requested = threading.Event()
        self._lock = threading.Lock() if serialize else None
        handler = _HttpHandler if transport == "http" else _SocketHandler
        base = ThreadingHTTPServer if transport == "http" else socketserver.ThreadingTCPServer
        self._server = type("Server", (base,), {"daemon_threads": True,
                                                "allow_reuse_address": True})(
            (host, port), handler)
        self._server.rpc = self
        self._thread: Optional[threading.Thread] = None

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{self.transport}://{host}:{port}"

    def answer(self, request: Any) -> dict:
        """The envelope for one decoded request."""
        try:
            if not isinstance(request, dict) or not isinstance(request.get("method"), str):
                raise ValueError("a request is an object with 'method', 'args' and 'kwargs'")
            method = request["method"]
            args, kwargs = tuple(request.get("args") or ()), dict(request.get("kwargs") or {})
            if method == "healthz":
                return {"ok": True, "result": {"status": "ok"}}
            if method == "shutdown":
                self.shutdown_requested.set()
                return {"ok": True, "result": {"ok": True}}
            handler = self.methods.get(method)
            if handler is None:
                raise ValueError(f"unknown RPC method: {method!r}")
            if self._lock is None:
                return {"ok": True, "result": handler(*args, **kwargs)}
            with self._lock:
                return {"ok": True, "result": handler(*args, **kwargs)}
        except Exception as exc:  # the envelope carries every failure back, as the original
            return {"ok": False, "error": str(exc), "traceback": traceback.format_exc()}

    def start(self) -> "RpcServer":
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name=f"rpc-{self.transport}", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> "RpcServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


class _HttpHandler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path != "/call":
            self.send_response(404)
            self.end_headers()
            return
        try:
            request = from_json(json.loads(body))
        except (ValueError, UnsafePayload) as err:
            answer = {"ok": False, "error": str(err), "traceback": traceback.format_exc()}
        else:
            answer = self.server.rpc.answer(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        try:
            self.wfile.write(json.dumps(to_json(answer)).encode())
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up on this call


class _SocketHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        try:
            request = read_frame(self.request)
        except (OSError, ValueError):
            return  # as the original: an unreadable request closes the connection
        try:
            write_frame(self.request, self.server.rpc.answer(request))
        except OSError:
            pass  # the client gave up on this call
