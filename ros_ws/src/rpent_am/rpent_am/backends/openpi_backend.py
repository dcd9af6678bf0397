"""A remote OpenPI policy server (``scripts/serve_policy.py``) as a backend.

It talks through openpi-client's own ``WebsocketClientPolicy``: msgpack-numpy frames over
one websocket, the server's metadata in the first frame, then one observation dict per
request and ``{"actions": (horizon, action_dim)}`` back. The observation keys are
configuration; the defaults are those of openpi's LIBERO example (``observation/image``
from the third-person camera, ``observation/wrist_image``, ``observation/state``,
``prompt``), with LIBERO's contract camera names. Images go out resized with padding by
openpi-client's ``image_tools`` (as in that example) to save bandwidth.

OpenPI servers keep no per-client state, so sessions need no isolation here and
``reset`` has nothing to forget.
"""
from __future__ import annotations

import threading
from typing import Callable, Mapping, Optional, Sequence

import numpy as np
from openpi_client import image_tools
from openpi_client.websocket_client_policy import WebsocketClientPolicy

from rpent_contract.control_space import ControlSpaceSpec

from ..policy import BackendError, ModelMeta, PolicyBackend, PolicyObservation
from .rpent_http import actions_array

LIBERO_CAMERAS = {"agentview": "observation/image", "robot0_eye_in_hand": "observation/wrist_image"}


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
    """``cameras``: contract camera name -> openpi image key. ``state_names``: the contract
    state entries forming ``state_key``, in order (None: the whole state vector).
    ``chunk_size`` 0 keeps every row the server answers; otherwise the chunk is cut to that
    many rows (openpi's LIBERO example executes 5 of pi0.5's 10). ``image_size`` 0 sends
    images at their own size."""

    def __init__(self, host: str, port: Optional[int] = None, *,
                 action_space: ControlSpaceSpec, chunk_size: int = 0,
                 cameras: Mapping[str, str] = LIBERO_CAMERAS,
                 state_key: str = "observation/state", prompt_key: str = "prompt",
                 state_names: Optional[Sequence[str]] = None, image_size: int = 224,
                 api_key: Optional[str] = None, timeout: float = 30.0,
                 connect_timeout: float = 15.0, checkpoint: str = "",
                 control_rate: float = 20.0):
        self._host, self._port, self._api_key = host, port, api_key
        self._where = f"{host}:{port}" if port is not None else host
        self._space, self._chunk_size = action_space, chunk_size
        self._cameras, self._state_names = dict(cameras), state_names
        self._state_key, self._prompt_key = state_key, prompt_key
        self._image_size = image_size
        self._timeout, self._connect_timeout = timeout, connect_timeout
        self._lock = threading.Lock()  # one websocket: requests take turns
        self._client: Optional[WebsocketClientPolicy] = None
        self._connect()
        self._meta = ModelMeta(
            backend="openpi", checkpoint=checkpoint or f"openpi://{self._where}",
            checkpoint_id=checkpoint or f"openpi://{self._where}", action_space=action_space,
            chunk_size=chunk_size, required_cameras=tuple(self._cameras),
            state_names=tuple(state_names or ()), control_rate=control_rate,
            default_timeout=timeout,
            extra={"server_metadata": dict(self._client.get_server_metadata() or {})})

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
        missing = [cam for cam in self._cameras if cam not in observation.images]
        if missing:
            raise BackendError(f"observation lacks camera(s) {', '.join(missing)} that the "
                               f"OpenPI model needs (has: {', '.join(observation.images)})")
        element = {}
        for cam, key in self._cameras.items():
            image = image_tools.convert_to_uint8(np.asarray(observation.images[cam]))
            if self._image_size:
                image = image_tools.resize_with_pad(image, self._image_size, self._image_size)
            element[key] = image
        if self._state_names is None:
            state = np.asarray(observation.state)
        else:
            state = np.array([observation.value(n) for n in self._state_names])
        element[self._state_key] = state.astype(np.float32)
        element[self._prompt_key] = instruction
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
