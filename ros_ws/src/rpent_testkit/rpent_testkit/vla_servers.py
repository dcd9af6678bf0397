"""The original RPent's VLA servers as protocol-level peers, around any
:class:`~rpent_am.policy.PolicyBackend`: what the ``rpent_http`` and ``rpent_vla`` backends
are tested and benchmarked against. Each checks a request as the original server does
(its validation messages included) and answers in its shapes; see
:mod:`rpent_am.backends.rpent_http` for the wire.
"""
from __future__ import annotations

import base64
import binascii
from typing import Mapping, Sequence

import numpy as np

from rpent_am.policy import PolicyBackend, PolicyObservation
from rpent_contract.images import ImageConversionError, decode_png
from rpent_contract.rpc import RpcServer

SESSION = "default"


def _state_names(n: int) -> tuple:
    return tuple(f"state_{i}" for i in range(n))


def _image_block(name: str, block) -> np.ndarray:
    fmt = str(block.get("format") or "png").lower()
    if fmt != "png":
        raise ValueError(f"unsupported image format: {fmt!r} (only 'png')")
    data = block.get("data")
    if not isinstance(data, str) or not data:
        raise ValueError("image block missing base64 'data'")
    try:
        base64.b64decode(data)
        image = decode_png(data)
    except (binascii.Error, ImageConversionError) as err:
        raise ValueError(f"images.{name}: {err}") from None
    if image.ndim != 3 or image.shape[-1] != 3:
        raise ValueError(f"image must be HxWx3 RGB; got {image.shape}")
    return image


class Pi05Server(RpcServer):
    """The LIBERO π0.5 VLA server's ``predict``. ``requests`` keeps each decoded request
    (instruction, images by wire name, state row, mode)."""

    def __init__(self, backend: PolicyBackend, *, transport: str = "http",
                 serialize: bool = True, host: str = "127.0.0.1", port: int = 0):
        super().__init__({"predict": self.predict}, transport=transport, host=host,
                         port=port, serialize=serialize)
        self.backend = backend
        self.requests: list = []

    def predict(self, instruction, images, state, mode="eval") -> dict:
        if not isinstance(images, dict) or "main" not in images:
            raise ValueError("'images.main' is required")
        decoded = {"main": _image_block("main", images["main"])}
        for name in ("wrist", "extra"):
            if isinstance(images.get(name), dict):
                decoded[name] = _image_block(name, images[name])
        states = np.asarray(state, dtype=np.float32)
        if states.ndim != 2:
            raise ValueError(f"state must be [B, state_dim]; got shape {states.shape}")
        if states.shape[0] != 1:
            raise ValueError(f"{states.shape[0]} states for the batch of one image each "
                             "camera sent")
        self.requests.append((str(instruction), decoded, states[0], mode))
        row = states[0].astype(np.float64)
        observation = PolicyObservation(images=decoded, state=row,
                                        state_names=_state_names(row.size))
        actions = np.asarray(self.backend.predict(observation, str(instruction), SESSION),
                             dtype=np.float32)[None]
        return {"actions": actions.tolist(), "shape": list(actions.shape), "dtype": "float32"}


class VlaFacadeServer(RpcServer):
    """The unified VLA facade's ``vla.predict`` / ``vla.reset_session`` /
    ``vla.get_modality_config``. ``images`` and ``state_key`` / ``prompt_key`` are the
    observation keys the model reads; ``actions`` names the answer's arrays with their
    widths, in column order; ``history`` is the model's video delta indices."""

    def __init__(self, backend: PolicyBackend, *, images: Sequence[str], state_key: str,
                 prompt_key: str, actions: Mapping[str, int], history: Sequence[int] = (0,),
                 transport: str = "http", serialize: bool = True, host: str = "127.0.0.1",
                 port: int = 0):
        super().__init__({"vla.predict": self.predict, "vla.reset_session": self.reset_session,
                          "vla.get_modality_config": self.get_modality_config},
                         transport=transport, host=host, port=port, serialize=serialize)
        self.backend, self.images, self.state_key = backend, tuple(images), state_key
        self.prompt_key, self.actions, self.history = prompt_key, dict(actions), list(history)
        self.requests: list = []

    def get_modality_config(self) -> dict:
        return {"video_delta_indices": self.history,
                "hist_maxlen": int(max(self.history) - min(self.history)) + 2}

    def reset_session(self, session_id) -> dict:
        self.backend.reset(str(session_id))
        return {"ok": True}

    def predict(self, obs, options) -> dict:
        if not isinstance(obs, dict) or not isinstance(options, dict):
            raise TypeError("vla.predict takes (obs: dict, options: dict)")
        sessions, resets = options.get("session_ids"), options.get("reset_memory")
        if not (isinstance(sessions, list) and isinstance(resets, list) and
                len(sessions) == len(resets) == 1):
            raise ValueError("options must hold session_ids and reset_memory, one per env")
        images = {}
        for key in self.images:
            frames = np.asarray(obs.get(key)) if key in obs else None
            if frames is None or frames.dtype != np.uint8 or frames.ndim != 5 or \
                    frames.shape[:2] != (1, len(self.history)) or frames.shape[-1] != 3:
                raise ValueError(f"{key}: expected uint8 (1, {len(self.history)}, H, W, 3), got "
                                 f"{None if frames is None else (frames.dtype, frames.shape)}")
            images[key] = frames[0, -1]
        state = np.asarray(obs.get(self.state_key, np.zeros((1, 1, 0))), dtype=np.float64)
        if state.ndim != 3 or state.shape[:2] != (1, 1):
            raise ValueError(f"{self.state_key}: expected (1, 1, D), got {state.shape}")
        prompt = obs.get(self.prompt_key)
        if not (isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str)):
            raise ValueError(f"{self.prompt_key}: expected a list of one instruction")
        session = str(sessions[0])
        self.requests.append((obs, options))
        if resets[0]:
            self.backend.reset(session)
        row = state[0, 0]
        chunk = np.asarray(self.backend.predict(
            PolicyObservation(images=images, state=row, state_names=_state_names(row.size)),
            prompt[0], session))
        if chunk.shape[1] != sum(self.actions.values()):
            raise RuntimeError(f"the model's actions have {chunk.shape[1]} columns; the "
                               f"server's action keys {self.actions} take "
                               f"{sum(self.actions.values())}")
        out, start = {}, 0
        for key, width in self.actions.items():
            out[key] = chunk[None, :, start:start + width].astype(np.float32)
            start += width
        return out


def facade(backend: PolicyBackend, *, cameras: Sequence[str] = ("agentview",),
           action_dim: int = 7, **kwargs) -> VlaFacadeServer:
    """A facade reading what the ``rpent_vla`` backend sends without a model_io (its
    ``cameras`` as ``video.<camera>``, ``state.robot``, the task description) and answering
    an arm's columns and the gripper's."""
    return VlaFacadeServer(backend, images=[f"video.{c}" for c in cameras],
                           state_key="state.robot",
                           prompt_key="annotation.human.task_description",
                           actions={"action.arm": action_dim - 1, "action.gripper": 1}, **kwargs)


def facade_params(server: VlaFacadeServer, cameras: Sequence[str] = ("agentview",)) -> dict:
    """The model node's parameters for ``server``."""
    return {"backend": "rpent_vla", "endpoint": server.endpoint,
            "cameras": [f"{c}=video.{c}" for c in cameras] or [""]}
