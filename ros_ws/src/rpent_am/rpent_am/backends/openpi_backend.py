"""A remote OpenPI policy server (``scripts/serve_policy.py``) as a backend.

It talks through openpi-client's own ``WebsocketClientPolicy``: msgpack-numpy frames over
one websocket, the server's metadata in the first frame, then one observation dict per
request and ``{"actions": (horizon, action_dim)}`` back. What the dict holds is the model's
:class:`~rpent_am.model_io.ModelIO` (``pi05_libero`` by default: the keys, image turn and
224 px padding, and state of openpi's LIBERO example), plus the instruction under its
prompt key.

OpenPI servers keep no per-client state, so sessions need no isolation here and
``reset`` has nothing to forget.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Optional

import numpy as np
from openpi_client import msgpack_numpy
from openpi_client.websocket_client_policy import WebsocketClientPolicy
from websockets.sync.server import serve

from rpent_contract.control_space import ControlSpaceSpec

from ..model_io import SHIPPED, ModelIO
from ..policy import BackendError, ModelMeta, PolicyBackend, PolicyObservation, actions_array


def _bounded(fn: Callable, timeout: float, on_timeout: Callable[[], None] = lambda: None):
    """Run ``fn`` with a deadline; returns (finished, result-or-exception).

    openpi-client blocks without a deadline (its recv has none), so the call runs on a
    daemon thread that ``on_timeout`` unblocks when it can.
    """
    outcome: list = []

    def run():
        try:
            outcome.append((True, fn()))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append((False, exc))

    worker = threading.Thread(target=run, name="openpi-call", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        on_timeout()
        return None
    return outcome[0]


class OpenPIBackend(PolicyBackend):
    """``io``: what the model is fed (default: openpi's LIBERO example). ``chunk_size`` 0
    keeps every row the server answers; otherwise the chunk is cut to that many rows
    (openpi's LIBERO example executes 5 of pi0.5's 10)."""

    def __init__(self, host: str, port: Optional[int] = None, *,
                 action_space: ControlSpaceSpec, chunk_size: int = 0,
                 io: ModelIO = SHIPPED["pi05_libero"], api_key: Optional[str] = None,
                 timeout: float = 30.0, connect_timeout: float = 15.0, checkpoint: str = "",
                 control_rate: float = 20.0):
        self._host, self._port, self._api_key = host, port, api_key
        self._where = f"{host}:{port}" if port is not None else host
        self._space, self._chunk_size, self.io = action_space, chunk_size, io
        self._timeout, self._connect_timeout = timeout, connect_timeout
        self._lock = threading.Lock()  # one websocket: requests take turns
        self._client: Optional[WebsocketClientPolicy] = None
        self._connect()
        height, width = io.camera_size
        self._meta = ModelMeta(
            backend="openpi", checkpoint=checkpoint or f"openpi://{self._where}",
            checkpoint_id=checkpoint or f"openpi://{self._where}", action_space=action_space,
            chunk_size=chunk_size, required_cameras=io.cameras,
            state_names=tuple(io.entries()), image_height=height, image_width=width,
            control_rate=control_rate, default_timeout=timeout,
            extra={"server_metadata": dict(self._client.get_server_metadata() or {}),
                   "model_io": io.name})

    @property
    def meta(self) -> ModelMeta:
        return self._meta

    def _connect(self) -> None:
        hint = (f"check that the OpenPI policy server (scripts/serve_policy.py) runs at "
                f"{self._where} and that host and port are right")
        outcome = _bounded(lambda: WebsocketClientPolicy(self._host, self._port, self._api_key),
                           self._connect_timeout)
        if outcome is None:
            raise BackendError(f"no OpenPI handshake from {self._where} within "
                               f"{self._connect_timeout:g} s: {hint}")
        ok, value = outcome
        if not ok:
            raise BackendError(f"cannot connect to the OpenPI server at {self._where} "
                               f"({value!r}): {hint}")
        self._client = value

    def _disconnect(self) -> None:
        # openpi-client 0.1.2 has no close(); its websocket is the `_ws` attribute.
        if self._client is not None:
            self._client._ws.close()
            self._client = None

    def _element(self, observation: PolicyObservation, instruction: str) -> dict:
        element = self.io.inputs(observation)
        element[self.io.prompt_key] = instruction
        return element

    def predict(self, observation: PolicyObservation, instruction: str,
                session: str) -> np.ndarray:
        element = self._element(observation, instruction)
        with self._lock:
            if self._client is None:  # the last call lost the connection
                self._connect()
            client = self._client
            outcome = _bounded(lambda: client.infer(element), self._timeout,
                               on_timeout=self._disconnect)
            if outcome is None:
                raise BackendError(
                    f"no answer from the OpenPI server at {self._where} within "
                    f"{self._timeout:g} s: it may be overloaded or hung; check its log or raise "
                    f"the timeout (the next predict reconnects)")
            ok, answer = outcome
            if not ok:
                self._disconnect()
                raise BackendError(
                    f"OpenPI inference at {self._where} failed ({answer}): check the server's "
                    f"log (the next predict reconnects)")
        if not isinstance(answer, dict) or "actions" not in answer:
            keys = ", ".join(map(str, answer)) if isinstance(answer, dict) else type(answer)
            raise BackendError(f"the OpenPI server at {self._where} answered no 'actions' "
                               f"(got {keys}): check that it serves a policy")
        actions = actions_array(answer["actions"], self._space.dim,
                                f"the OpenPI server at {self._where}")
        return actions[: self._chunk_size] if self._chunk_size else actions

    def close(self) -> None:
        with self._lock:
            self._disconnect()


def pi05_libero(obs):
    """What a pi05_libero server (serve_policy.py) takes, or the error text it answers:
    LiberoInputs reads the two images and the state by key (KeyError otherwise), takes
    images as HxWx3 uint8 (or CHW, or floats in [0, 1]: a float image in [0, 255] wraps,
    so it is refused here), normalises an 8-entry state against its statistics, and needs
    the prompt. A batch dimension is its own to add."""
    problems = []
    for key in ("observation/image", "observation/wrist_image"):
        image = obs.get(key)
        if not isinstance(image, np.ndarray) or image.ndim != 3 or \
                3 not in (image.shape[0], image.shape[2]):
            problems.append(f"{key}: expected one HxWx3 image, got "
                            f"{getattr(image, 'shape', type(image))}")
        elif image.dtype != np.uint8 and not (image.dtype.kind == "f" and image.max() <= 1.0):
            problems.append(f"{key}: {image.dtype} image outside [0, 1]")
    state = obs.get("observation/state")
    if not isinstance(state, np.ndarray) or state.dtype.kind != "f" or state.shape != (8,):
        problems.append(f"observation/state: expected 8 floats, got "
                        f"{getattr(state, 'shape', type(state))}")
    if not isinstance(obs.get("prompt"), str) or not obs["prompt"]:
        problems.append("ValueError: Prompt is required")
    if problems:
        return "Traceback (most recent call last):\n" + "\n".join(problems)
    return {"actions": np.tile(state[:7], (10, 1)) * 0.1}


class OpenPIServer:
    """A protocol-level stand-in for openpi's ``scripts/serve_policy.py``, for tests: the
    metadata frame, then observation -> ``{"actions": ...}``, or the error text a failing
    model sends. ``answer(obs)`` builds each reply (by default a pi05_libero server's
    checks, with the state's first 7 entries times 0.1 as every action); ``handshake_delay``
    holds back the metadata frame. ``port`` says where it listens."""

    def __init__(self, answer=pi05_libero, handshake_delay=0.0, metadata=None):
        self.answer = answer
        self.handshake_delay, self.metadata = handshake_delay, metadata or {"model": "fake-pi05"}
        self.received = []
        self._server = serve(self._handle, "127.0.0.1", 0, compression=None, max_size=None)
        self.port = self._server.socket.getsockname()[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _handle(self, conn):
        time.sleep(self.handshake_delay)
        conn.send(msgpack_numpy.packb(self.metadata))
        for frame in conn:
            obs = msgpack_numpy.unpackb(frame)
            self.received.append(obs)
            reply = self.answer(obs)
            conn.send(reply if isinstance(reply, str) else msgpack_numpy.packb(reply))

    def close(self):
        self._server.shutdown()
        self._thread.join(timeout=5)
