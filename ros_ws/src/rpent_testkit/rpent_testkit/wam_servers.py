"""The original RPent's world-action-model workers as protocol-level peers: the ``wam.*``
routes with the worker's checks and messages (:class:`WamServer`), and the LIBERO adapters
of its models, which encode the physical observation into the model's own inputs as the
workers do: Cosmos Policy (:func:`cosmos_policy`), Fast-WAM (:func:`fast_wam`) and Cosmos3
(:func:`cosmos3`). The model itself is the test's function. See :mod:`rpent_am.backends.wam`
for the wire.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

from rpent_contract.rpc import RpcServer

LIBERO_CONTROL = {
    "embodiment": "libero_7d", "action_space": "libero.osc_pose.delta.v1",
    "action_schema": ["delta_x", "delta_y", "delta_z", "delta_axis_angle_x",
                      "delta_axis_angle_y", "delta_axis_angle_z", "gripper"],
    "action_type": None}
ROLES = ("primary", "wrist")

# model(request) -> prediction dict; request already checked by the worker
Model = Callable[[dict], dict]


class WamServer(RpcServer):
    """``wam.*`` around ``model`` advertising ``capabilities``; ``meta_route`` is the
    metadata route's name (``wam.capabilities`` for older workers). ``requests`` keeps
    each checked request."""

    def __init__(self, model: Model, capabilities: dict, *,
                 meta_route: str = "wam.get_model_meta", transport: str = "http",
                 host: str = "127.0.0.1", port: int = 0):
        super().__init__({meta_route: lambda: self.capabilities, "wam.predict": self.predict,
                          "wam.reset": self.reset}, transport=transport, host=host, port=port)
        self.model, self.capabilities = model, capabilities
        self.requests: list = []
        self.resets = 0

    def reset(self) -> dict:
        self.resets += 1
        return {"ok": True}

    def predict(self, request) -> dict:
        control = self.capabilities["control"]
        if request["embodiment"] != control["embodiment"] or \
                request["action_space"] != control["action_space"]:
            raise ValueError("WAM request does not match the worker's control contract")
        instruction = request["instruction"]
        if not isinstance(instruction, str) or not instruction:
            raise ValueError("instruction must be a non-empty string")
        for role in self.capabilities["camera_roles"]:
            image = request["images"].get(role)
            if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or \
                    image.ndim != 3 or image.shape[-1] != 3 or not image.size:
                raise ValueError(f"images.{role} must have non-empty [H, W, 3] uint8 RGB shape")
        for name, size in self.capabilities["state_schema"].items():
            vector = request["state"].get(name)
            if not isinstance(vector, np.ndarray) or vector.shape != (size,) or \
                    not np.all(np.isfinite(vector)):
                raise ValueError(f"state.{name} must have shape ({size},) without NaN or Inf")
        self.requests.append(request)
        return self.model(request)


def capabilities(backend: str, checkpoint: str, state_schema: dict, chunk_size: int, *,
                 foresees: bool = False, metadata: Optional[dict] = None) -> dict:
    return {"backend": backend, "checkpoint": checkpoint, "control": dict(LIBERO_CONTROL),
            "camera_roles": list(ROLES), "state_schema": dict(state_schema),
            "chunk_size": chunk_size, "uses_sessions": False,
            "returns_future_observation": foresees, "returns_value": foresees,
            "metadata": dict(metadata or {})}


def cosmos_policy(policy: Callable, *, predict_future: bool = False) -> tuple:
    """(capabilities, model) of the Cosmos Policy LIBERO worker: 256 px primary and wrist
    images, the 9-D proprio ``gripper_qpos | eef_position | eef_quaternion_xyzw``, 16
    actions. ``policy(proprio, images, instruction) -> (16, 7)``; with ``predict_future``
    it also answers each camera's image as its future observation and a value of 0.5.
    ``model.encoded`` keeps each (proprio, images)."""
    caps = capabilities("cosmos_policy", "nvidia/Cosmos-Policy-LIBERO-Predict2-2B",
                        {"gripper_qpos": 2, "eef_position": 3, "eef_quaternion_xyzw": 4}, 16,
                        foresees=predict_future, metadata={"cached_instructions_only": False})

    def model(request: dict) -> dict:
        images = {}
        for role in ROLES:
            image = request["images"][role]
            if image.shape != (256, 256, 3):
                raise ValueError(f"images.{role} must be an RGB image shaped [256, 256, 3]")
            images[f"{role}_image"] = image
        state = request["state"]
        proprio = np.concatenate([state["gripper_qpos"], state["eef_position"],
                                  state["eef_quaternion_xyzw"]]).astype(np.float32)
        model.encoded.append((proprio, images))
        actions = np.asarray(policy(proprio, images, request["instruction"]), np.float32)
        if actions.shape[0] != 16:
            raise ValueError("Cosmos Policy checkpoint must use 16-action chunks")
        answer = {"actions": actions, "future_observation": None, "value": None,
                  "metadata": {}}
        if predict_future:
            answer["future_observation"] = {"future_image_predictions": {
                role: images[f"{role}_image"] for role in ROLES}}
            answer["value"] = np.float32(0.5)
        return answer

    model.encoded = []
    return caps, model


def quat2axisangle(quat: np.ndarray) -> np.ndarray:
    """Fast-WAM's orientation: w clipped to [-1, 1], zeros where sin(angle / 2) is 0, the
    quaternion's sign kept as given."""
    w = min(max(float(quat[3]), -1.0), 1.0)
    den = math.sqrt(1.0 - w * w)
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return np.asarray(quat[:3], dtype=np.float64) * 2.0 * math.acos(w) / den


def fast_wam(policy: Callable, *, execute_steps: int = 8, horizon: int = 16) -> tuple:
    """(capabilities, model) of the Fast-WAM LIBERO worker: both cameras mirrored left-right
    (with the physical observation's upright images, LIBERO's 180-degree turn), the 8-D
    state ``eef_position | axis-angle | gripper_qpos``; ``policy(state, images,
    instruction) -> (horizon, 7)`` with the gripper in [0, 1] (closed 1), decoded to
    LIBERO's -1 / +1 and cut to ``execute_steps``. ``model.encoded`` keeps (state, images)."""
    caps = capabilities("fast_wam", "fast_wam_libero",
                        {"eef_position": 3, "eef_quaternion_xyzw": 4, "gripper_qpos": 2},
                        execute_steps, metadata={"prediction_horizon": horizon})

    def model(request: dict) -> dict:
        images = {role: np.ascontiguousarray(request["images"][role][:, ::-1]) for role in ROLES}
        state = request["state"]
        state8 = np.concatenate([state["eef_position"],
                                 quat2axisangle(state["eef_quaternion_xyzw"]),
                                 state["gripper_qpos"]])
        model.encoded.append((state8, images))
        actions = np.asarray(policy(state8, images, request["instruction"]), np.float64)
        if actions.shape != (horizon, 7):
            raise ValueError(f"expected [1, {horizon}, 7] actions, got {actions.shape}")
        actions[:, -1] = 1.0 - 2.0 * actions[:, -1]
        return {"actions": actions[:execute_steps].astype(np.float32)}

    model.encoded = []
    return caps, model


def cosmos3(policy: Callable, *, http_timeout_s: float = 600.0, chunks: int = 16) -> tuple:
    """(capabilities, model) of the Cosmos3 LIBERO worker, which relays to an SGLang
    ``/v1/actions/generations`` service through RLinf's Cosmos3 adapter: the images and the
    instruction only (no state), the third-person view and the wrist side by side, and a
    budget of the service's HTTP timeout plus 30 s for the RPC. ``policy(view, instruction)
    -> (chunks, 7)``, the chunk as the adapter decodes it for LIBERO. ``model.encoded``
    keeps each (view, instruction)."""
    caps = capabilities("cosmos3", "nvidia/cosmos3-nano-libero10-sdg-export-S2_s43", {},
                        chunks, metadata={"sglang_http_timeout_s": http_timeout_s})
    caps["prediction_timeout_s"] = http_timeout_s + 30.0

    def model(request: dict) -> dict:
        main, wrist = (request["images"][role] for role in ROLES)
        view = np.concatenate([main, wrist], axis=1) if main.shape == wrist.shape else main
        model.encoded.append((view, request["instruction"]))
        actions = np.asarray(policy(view, request["instruction"]), np.float32)
        if actions.shape != (chunks, 7):
            raise ValueError(f"Cosmos3 answered {actions.shape} actions, not ({chunks}, 7)")
        return {"actions": actions}

    model.encoded = []
    return caps, model
