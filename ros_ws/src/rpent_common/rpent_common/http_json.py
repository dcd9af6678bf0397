"""JSON over HTTP, as the model servers RPent talks to speak it: a client with one
keep-alive connection, every exchange bounded by a timeout and errors that say which server
failed and what to check."""
from __future__ import annotations

import http.client
import ipaddress
import json
import socket
import threading
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
