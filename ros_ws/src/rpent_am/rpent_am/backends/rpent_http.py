"""Models the original RPent serves, called on its RPC (:mod:`rpent_contract.rpc`): the
endpoint's scheme picks the transport, ``http://`` (the servers' default) or ``socket://``.

``rpent_http``: its LIBERO π0.5 VLA server (``vla_server``), one stateless method::

    predict(instruction=<text>,
            images={"main": {"format": "png", "data": <base64 PNG, HxWx3 RGB>},
                    "wrist": {...}, "extra": {...}},        (main required, the rest optional)
            state=[[s0, ..., sN]],                           (batch of one, float32)
            mode="eval")
    -> {"actions": [[[a0, ..., a6], ...]], "shape": [1, chunk, 7], "dtype": "float32"}

What goes under ``main`` / ``wrist`` and into ``state`` is the model's
:class:`~rpent_am.model_io.ModelIO`: ``rpent_pi05_libero`` by default (LIBERO's 256 px
renders turned 180 degrees, end-effector position, axis-angle and finger joints).

``rpent_vla``: its unified VLA facade (the ``vla.*`` routes of the RoboCasa RLDX-1 server),
which keeps a policy state per session::

    vla.predict(obs, options)
      obs     = {"<image key>": uint8 (1, 1, H, W, 3), "<state key>": (1, 1, D),
                 "<prompt key>": [instruction]}                  (keys: the ModelIO's)
      options = {"session_ids": [session], "reset_memory": [first call of the session]}
    -> {"action.<name>": (1, horizon, D_k), ...}      (the chunk: these side by side)
    vla.reset_session(session_id) -> {"ok": True}
    vla.get_modality_config() -> {"video_delta_indices": [...], "hist_maxlen": n}

Neither server describes its model, so the action space, chunk size and what the model is
fed come from the node's configuration.
"""
from __future__ import annotations

import threading
from typing import Optional, Sequence

import numpy as np

from rpent_contract.control_space import ControlSpaceSpec
from rpent_contract.images import encode_png

from ..model_io import ModelIO
from ..policy import BackendError, ModelMeta, PolicyObservation, actions_array
from ..rpc_backend import RpcBackend

PI05_IMAGE_KEYS = ("main", "wrist", "extra")


class _VlaBackend(RpcBackend):
    """What both servers share: metadata from configuration, a model's inputs and the chunk
    cut."""

    def __init__(self, endpoint: str, *, action_space: ControlSpaceSpec, io: ModelIO,
                 chunk_size: int = 0, control_rate: float = 20.0, timeout: float = 30.0,
                 connect_timeout: float = 5.0):
        super().__init__(endpoint, timeout=timeout, connect_timeout=connect_timeout)
        self._space, self.io, self._chunk_size = action_space, io, chunk_size
        height, width = io.camera_size
        self._meta = ModelMeta(
            backend=type(self).name, checkpoint=self.endpoint, checkpoint_id=self.endpoint,
            action_space=action_space, chunk_size=chunk_size, required_cameras=io.cameras,
            state_names=tuple(io.entries()), image_height=height, image_width=width,
            control_rate=control_rate, default_timeout=timeout,
            extra={"endpoint": self.endpoint, "model_io": io.name})

    def _chunk(self, rows) -> np.ndarray:
        actions = actions_array(rows, self._space.dim, self.endpoint)
        return actions[: self._chunk_size] if self._chunk_size else actions


class RpentHttpBackend(_VlaBackend):
    """The LIBERO π0.5 VLA server's ``predict`` (see the module docstring)."""

    name = "rpent_http"
    kind = "VLA server"

    def __init__(self, endpoint: str, **kwargs):
        super().__init__(endpoint, **kwargs)
        keys = [spec.key for spec in self.io.images]
        if "main" not in keys or not set(keys) <= set(PI05_IMAGE_KEYS):
            raise BackendError(
                f"model_io {self.io.name} feeds images {keys}; the VLA server takes 'main' "
                f"(required), 'wrist' and 'extra': fix the model_io's image keys")

    def predict(self, observation: PolicyObservation, instruction: str,
                session: str) -> np.ndarray:
        inputs = self.io.inputs(observation)
        state = np.asarray(inputs.get(self.io.state_key, ()), dtype=np.float32)
        answer = self._call("predict", kwargs={
            "instruction": instruction,
            "images": {spec.key: {"format": "png", "data": encode_png(inputs[spec.key])}
                       for spec in self.io.images},
            "state": [state.tolist()],
            "mode": "eval"})
        if not isinstance(answer, dict) or "actions" not in answer:
            raise BackendError(f"predict answer from {self.endpoint} has no 'actions': check "
                               "that the endpoint is an RPent VLA server")
        try:
            batch = np.asarray(answer["actions"], dtype=np.float64)
        except (TypeError, ValueError):
            raise BackendError(f"{self.endpoint} answered actions that are not a numeric "
                               "array") from None
        if batch.ndim != 3 or batch.shape[0] != 1 or \
                list(answer.get("shape", batch.shape)) != list(batch.shape):
            raise BackendError(
                f"{self.endpoint} answered actions of shape {batch.shape} (its 'shape' says "
                f"{answer.get('shape')}); expected (1, chunk, {self._space.dim}) for the batch "
                "of one it was sent")
        return self._chunk(batch[0])


class RpentVlaBackend(_VlaBackend):
    """The unified VLA facade's ``vla.*`` routes (see the module docstring).

    ``action_keys`` orders the answer's ``action.*`` arrays into the chunk's columns
    (default: the order the server answers them in); together they must make the action
    space's dimension.
    """

    name = "rpent_vla"
    kind = "VLA facade server"

    def __init__(self, endpoint: str, *, action_keys: Sequence[str] = (), **kwargs):
        super().__init__(endpoint, **kwargs)
        self._action_keys = tuple(action_keys)
        self._seen: set = set()  # sessions the policy holds a memory for
        self._lock = threading.Lock()
        modality = self._optional("vla.get_modality_config", dict,
                                  timeout=self._rpc.connect_timeout)
        history = (modality or {}).get("video_delta_indices") or [0]
        if len(history) > 1:
            raise BackendError(
                f"{self.endpoint} wants a history of {len(history)} frames per camera (video "
                f"delta indices {list(history)}, at its own step rate); the model node sends "
                "the frame of the observation it predicts from: serve a checkpoint without "
                "video history")
        self._meta.extra["modality"] = dict(modality or {})

    def predict(self, observation: PolicyObservation, instruction: str,
                session: str) -> np.ndarray:
        inputs = self.io.inputs(observation)
        obs = {spec.key: inputs[spec.key][None, None] for spec in self.io.images}
        if self.io.state:
            obs[self.io.state_key] = np.asarray(inputs[self.io.state_key])[None, None]
        obs[self.io.prompt_key] = [instruction]
        with self._lock:
            fresh = session not in self._seen
            self._seen.add(session)
        answer = self._call("vla.predict", (obs, {"session_ids": [session],
                                                  "reset_memory": [fresh]}))
        if not isinstance(answer, dict):
            raise BackendError(f"vla.predict answer from {self.endpoint} is not a dict of "
                               "action arrays: check that the endpoint is a VLA facade")
        keys = self._action_keys or tuple(k for k in answer if str(k).startswith("action."))
        missing = [k for k in keys if k not in answer]
        if not keys or missing:
            raise BackendError(f"vla.predict answer from {self.endpoint} lacks "
                               f"{missing or 'action.* arrays'} (has {list(answer)}): set "
                               "action_keys to the names the server answers")
        parts = []
        for key in keys:
            part = np.asarray(answer[key], dtype=np.float64)
            if part.ndim == 2:  # a scalar action per step, (1, horizon)
                part = part[..., None]
            if part.ndim != 3 or part.shape[0] != 1:
                raise BackendError(f"{key} from {self.endpoint} has shape {part.shape}; "
                                   "expected (1, horizon, dim) for the batch of one sent")
            parts.append(part[0])
        if len({p.shape[0] for p in parts}) != 1:
            raise BackendError(f"the action arrays from {self.endpoint} differ in horizon: "
                               f"{[p.shape for p in parts]}")
        return self._chunk(np.concatenate(parts, axis=1))

    def reset(self, session: Optional[str] = None) -> None:
        with self._lock:
            sessions = sorted(self._seen) if session is None else [session]
            self._seen.difference_update(sessions)
        for each in sessions:
            self._call("vla.reset_session", (each,))
