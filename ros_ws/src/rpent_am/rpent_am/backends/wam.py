"""World-action models as the original RPent serves them (its WAM workers: Cosmos Policy on
port 8116, Fast-WAM on 8117, ...), on its RPC (:mod:`rpent_contract.rpc`, ``http://`` or
``socket://``). A WAM answers a chunk and may foresee the observation after it and a value.

    wam.get_model_meta()   (older workers: wam.capabilities)
    -> {"backend", "checkpoint",
        "control": {"embodiment", "action_space", "action_schema": [...], "action_type"},
        "camera_roles": [...], "state_schema": {name: size}, "chunk_size": int | None,
        "uses_sessions": bool, "returns_future_observation": bool, "returns_value": bool,
        "metadata": {...}, "prediction_timeout_s": float (optional)}
    wam.predict(request)
      request = {"images": {role: uint8 (H, W, 3)}, "state": {name: float32 (size,)},
                 "instruction": str, "embodiment": str, "action_space": str}
    -> {"actions": float32 (chunk, action_dim), "future_observation": ..., "value": ...,
        "metadata": {...}}
    wam.reset() -> {"ok": True}

What fills ``images`` and ``state`` is the model's :class:`~rpent_am.model_io.ModelIO`
(``wam_libero`` by default: the worker's physical observation of LIBERO, from which each
worker encodes its own model's inputs). The worker's control contract must be the one the
robot's action space stands for (:data:`CONTROLS`), checked at start-up as the original
platform does. ``future_observation`` (its layout is the model's own) is read as images:
every HxWx3 uint8 array in it (the last frame of a stack) becomes the foreseen view of the
camera whose role its key names.
"""
from __future__ import annotations

import re
from typing import Optional

import numpy as np

from rpent_contract.control_space import ControlSpaceSpec

from ..model_io import ModelIO
from ..policy import BackendError, ModelMeta, PolicyObservation, Prediction, actions_array
from ..rpc_backend import RpcBackend

# The control contract a WAM worker declares for each of this project's action spaces.
CONTROLS = {
    "libero_osc_delta": {
        "embodiment": "libero_7d", "action_space": "libero.osc_pose.delta.v1",
        "action_schema": ["delta_x", "delta_y", "delta_z", "delta_axis_angle_x",
                          "delta_axis_angle_y", "delta_axis_angle_z", "gripper"],
        "action_type": None},
}
# The original client's budget for a prediction when the worker names none.
DEFAULT_TIMEOUT_S = 300.0


def _images(value, roles) -> dict:
    """role -> HxWx3 uint8 image, from a model's future_observation (see the module)."""
    found: dict = {}

    def walk(node, key: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, str(k))
            return
        if isinstance(node, (list, tuple)):  # frames in order: the last is the latest
            node = node[-1] if node and isinstance(node[-1], np.ndarray) else None
        if isinstance(node, np.ndarray) and node.dtype == np.uint8 and node.ndim >= 3 \
                and node.shape[-1] == 3 and node.size:
            image = node.reshape((-1,) + node.shape[-3:])[-1]
            # A key naming no role keeps its name, as a ROS name token (a topic's last part).
            role = next((r for r in roles if r == key), None) or \
                next((r for r in roles if r in key), re.sub(r"\W", "_", key) or "future")
            found[role] = np.ascontiguousarray(image)

    walk(value, "")
    return found


class WamBackend(RpcBackend):
    name = "rpent_wam"
    kind = "WAM worker"

    def __init__(self, endpoint: str, *, action_space: ControlSpaceSpec, io: ModelIO,
                 chunk_size: int = 0, control_rate: float = 20.0, timeout: float = 0.0,
                 connect_timeout: float = 5.0, expected_backend: str = ""):
        """``timeout`` 0: the worker's ``prediction_timeout_s``, else 300 s."""
        control = CONTROLS.get(action_space.name)
        if control is None:
            raise BackendError(f"no WAM control contract stands for the action space "
                               f"'{action_space.name}' (known: {', '.join(CONTROLS)}): run the "
                               "worker on a robot with one of those")
        super().__init__(endpoint, timeout=timeout or DEFAULT_TIMEOUT_S,
                         connect_timeout=connect_timeout)
        self.io, self._control = io, control
        self._space, self._chunk_size = action_space, chunk_size
        caps = self._capabilities(connect_timeout)
        self._check(caps, expected_backend)
        self._roles = {spec.key: spec.camera for spec in io.images}
        if not timeout and caps.get("prediction_timeout_s"):
            self._rpc.timeout = float(caps["prediction_timeout_s"])
        self._worker_chunk = caps.get("chunk_size")
        height, width = io.camera_size
        self._meta = ModelMeta(
            backend=self.name, checkpoint=str(caps.get("checkpoint", "")),
            checkpoint_id=f"{caps.get('backend')}:{caps.get('checkpoint', '')}",
            action_space=action_space, chunk_size=chunk_size or int(self._worker_chunk or 0),
            required_cameras=io.cameras, state_names=tuple(io.entries()),
            image_height=height, image_width=width, control_rate=control_rate,
            default_timeout=self._rpc.timeout,
            extra={"endpoint": self.endpoint, "model_io": io.name, "wam": caps},
            predicts_future=bool(caps.get("returns_future_observation")),
            predicts_value=bool(caps.get("returns_value")))

    def _capabilities(self, timeout: float) -> dict:
        caps = self._optional("wam.get_model_meta",
                              lambda: self._call("wam.capabilities", timeout=timeout), timeout)
        if not isinstance(caps, dict) or not isinstance(caps.get("control"), dict):
            raise BackendError(f"{self.endpoint} answered model metadata without a 'control' "
                               "dictionary: check that it is an RPent WAM worker")
        return caps

    def _check(self, caps: dict, expected_backend: str) -> None:
        actual = dict(caps["control"])
        actual["action_schema"] = list(actual.get("action_schema") or [])
        if actual != self._control:
            raise BackendError(f"WAM control mismatch: expected={self._control!r}, "
                               f"actual={actual!r}")
        if expected_backend and caps.get("backend") != expected_backend:
            raise BackendError(f"expected backend {expected_backend!r}, got "
                               f"{caps.get('backend')!r}")
        if caps.get("uses_sessions"):
            raise BackendError(f"{self.endpoint} keeps a session per client, bound through "
                               "the RPC's session.register, which this node does not do: "
                               "serve the model without sessions")
        missing = [r for r in caps.get("camera_roles") or [] if r not in
                   {spec.key for spec in self.io.images}]
        if missing:
            raise BackendError(f"the worker needs camera role(s) {missing}; model_io "
                               f"{self.io.name} feeds {[s.key for s in self.io.images]}")
        sizes = self.io.part_sizes()
        wrong = {name: size for name, size in (caps.get("state_schema") or {}).items()
                 if sizes.get(name) != size}
        if wrong:
            raise BackendError(f"the worker needs state {wrong} (name: size); model_io "
                               f"{self.io.name} feeds {sizes}")

    def predict(self, observation: PolicyObservation, instruction: str,
                session: str) -> Prediction:
        inputs = self.io.inputs(observation)
        request = {
            "images": {spec.key: inputs[spec.key] for spec in self.io.images},
            "state": {name: vector.astype(np.float32)
                      for name, vector in self.io.state_parts(observation).items()},
            "instruction": instruction,
            "embodiment": self._control["embodiment"],
            "action_space": self._control["action_space"]}
        answer = self._call("wam.predict", (request,))
        if not isinstance(answer, dict) or "actions" not in answer:
            raise BackendError(f"wam.predict answer from {self.endpoint} has no 'actions'")
        actions = actions_array(answer["actions"], self._space.dim, self.endpoint)
        if self._worker_chunk and actions.shape[0] != self._worker_chunk:
            raise BackendError(f"{self.endpoint} answered {actions.shape[0]} actions; its "
                               f"model metadata says it predicts {self._worker_chunk}: check "
                               "the worker's checkpoint")
        future = {}
        if self._meta.predicts_future and answer.get("future_observation") is not None:
            future = {self._roles.get(role, role): image for role, image in
                      _images(answer["future_observation"], list(self._roles)).items()}
        value = answer.get("value") if self._meta.predicts_value else None
        if value is not None:
            try:
                value = float(np.asarray(value, dtype=np.float64).reshape(-1)[0])
            except (TypeError, ValueError, IndexError):
                raise BackendError(f"WAM value {value!r} is not a number") from None
        return Prediction(actions[: self._chunk_size] if self._chunk_size else actions,
                          future, value)

    def reset(self, session: Optional[str] = None) -> None:
        self._call("wam.reset")
