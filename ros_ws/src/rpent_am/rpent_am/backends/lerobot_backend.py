"""Any LeRobot policy from a local checkpoint folder, through LeRobot's own loading path.

The folder is what ``policy.save_pretrained`` and the processors' ``save_pretrained``
write (``config.json``, ``model.safetensors``, ``policy_preprocessor.json`` /
``policy_postprocessor.json`` and their state files). Loading follows LeRobot:
``PreTrainedConfig.from_pretrained`` -> ``get_policy_class(type).from_pretrained`` and
``make_pre_post_processors(cfg, pretrained_path=...)``. Nothing is fetched from a hub.

One ``predict`` = LeRobot's chunk inference as its own async policy server runs it:
``prepare_observation_for_inference`` (HWC uint8 -> CHW float in [0, 1], batch of one,
``task``) -> pre-processor -> ``predict_action_chunk`` -> post-processor per step. The
chunk is cut to the policy's ``n_action_steps`` (what it would execute open-loop), or to
``chunk_size`` when configured.

What feeds which policy feature is the model's :class:`~rpent_am.model_io.ModelIO`: its
images under visual feature keys (``observation.images.<x>``), its state vector as
``observation.state``, the instruction as ``task``. ``lerobot_libero`` feeds LeRobot's LIBERO
checkpoints as ``lerobot-eval`` does (its env side: the checkpoint's processor does the
rest); a plain mapping of cameras and robot_state entries feeds a policy trained on this
project's own exported datasets.

Sessions: every session gets its own policy object that shares the weights (parameters
and buffers) of the loaded one but owns LeRobot's per-episode state (the observation
queues some policies keep inside ``predict_action_chunk``), so clients do not disturb one
another. ``reset(session)`` drops that object; the next predict starts from a fresh one.
Policies whose ``predict_action_chunk`` reads an observation history that only
``select_action`` records (diffusion, vqbet, tdmpc) are refused at load.

Batches: policies whose chunk depends on the observation alone (act, pi0, pi05, smolvla)
run concurrent goals as one forward pass of the loaded policy (``batching``); their session
objects hold nothing a chunk reads. The flow-matching ones draw fresh noise per call, so
their chunks vary from call to call however they are batched.
"""
from __future__ import annotations

import copy
import itertools
import threading
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from lerobot.configs.policies import PreTrainedConfig
from lerobot.configs.types import FeatureType
from lerobot.policies.factory import get_policy_class, make_pre_post_processors
from lerobot.policies.utils import prepare_observation_for_inference
from lerobot.utils.constants import ACTION, OBS_STATE

from rpent_contract.control_space import ControlSpaceSpec

from ..model_io import ModelIO
from ..policy import BackendError, ModelMeta, PolicyBackend, PolicyObservation, actions_array

HISTORY_FROM_SELECT_ACTION = ("diffusion", "vqbet", "tdmpc")
# predict_action_chunk reads no state of the policy object (smolvla fills queues there that
# only select_action reads): one forward pass can serve several sessions.
CHUNK_FROM_OBSERVATION = ("act", "pi0", "pi05", "smolvla")


class LeRobotBackend(PolicyBackend):
    def __init__(self, checkpoint: str, *, action_space: ControlSpaceSpec, io: ModelIO,
                 chunk_size: int = 0, device: Optional[str] = None,
                 control_rate: float = 20.0, timeout: float = 30.0):
        path = Path(checkpoint).expanduser()
        if not (path / "config.json").is_file():
            raise BackendError(f"'{checkpoint}' is not a LeRobot checkpoint folder (no "
                               f"config.json): pass the folder save_pretrained wrote")
        try:
            cfg = PreTrainedConfig.from_pretrained(str(path), local_files_only=True)
        except Exception as exc:  # draccus/JSON errors of every kind: say which file
            raise BackendError(f"cannot read {path / 'config.json'}: {exc}") from exc
        if cfg.type in HISTORY_FROM_SELECT_ACTION:
            raise BackendError(
                f"LeRobot '{cfg.type}' policies build their observation history in "
                f"select_action, which chunk-level serving does not call; use a chunking "
                f"policy (act, pi0, pi05, smolvla, groot, ...)")
        if device:
            cfg.device = device
        self._check_features(cfg, io, action_space)
        try:
            self._policy = get_policy_class(cfg.type).from_pretrained(
                str(path), config=cfg, local_files_only=True)
            self._pre, self._post = make_pre_post_processors(
                cfg, pretrained_path=str(path),
                preprocessor_overrides={"device_processor": {"device": cfg.device}})
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise BackendError(
                f"cannot load the LeRobot {cfg.type} policy from {path} ({exc}): the folder "
                f"needs the weights and the policy_preprocessor/postprocessor files that "
                f"save_pretrained writes") from exc
        self._policy.eval()
        self.batching = cfg.type in CHUNK_FROM_OBSERVATION
        self._device = torch.device(cfg.device)
        self.io = io
        steps = getattr(cfg, "n_action_steps", 0) or getattr(cfg, "chunk_size", 0)
        self._chunk_size = chunk_size or steps
        self._space = action_space
        self._sessions: dict = {}
        # One model: predictions take turns, and the session table changes under the lock.
        self._lock = threading.Lock()
        height, width = io.camera_size
        if (height, width) == (0, 0):
            shapes = {tuple(cfg.input_features[i.key].shape) for i in io.images}
            height, width = (shapes.pop()[1:] if len(shapes) == 1 else (0, 0))
        self._meta = ModelMeta(
            backend="lerobot", checkpoint=str(path), checkpoint_id=f"{cfg.type}:{path.name}",
            action_space=action_space, chunk_size=self._chunk_size,
            required_cameras=io.cameras, state_names=tuple(io.entries()),
            image_height=height, image_width=width, control_rate=control_rate,
            default_timeout=timeout, extra={"policy_type": cfg.type, "device": cfg.device,
                                            "model_io": io.name})

    @staticmethod
    def _check_features(cfg, io: ModelIO, action_space) -> None:
        visual = {k for k, f in cfg.input_features.items() if f.type is FeatureType.VISUAL}
        fed = {i.key: i.camera for i in io.images}
        if set(fed) != visual:
            raise BackendError(
                f"the cameras of {io.name} ({fed}) must feed each visual feature of the "
                f"policy: {', '.join(sorted(visual)) or 'none'}")
        state = cfg.input_features.get(OBS_STATE)
        wanted = state.shape[0] if state is not None else 0
        if io.state_size != wanted:
            raise BackendError(f"the policy's {OBS_STATE} has {wanted} entries; {io.name} "
                               f"makes {io.state_size} of {', '.join(io.entries()) or 'none'}")
        action = cfg.output_features.get(ACTION)
        if action is None or action.shape[0] != action_space.dim:
            raise BackendError(
                f"the policy's {ACTION} has shape {action.shape if action else None}; the "
                f"action space '{action_space.name}' has {action_space.dim} entries")
        other = set(cfg.input_features) - visual - {OBS_STATE}
        if other:
            raise BackendError(f"the policy also needs {', '.join(sorted(other))}, which no "
                               f"contract observation provides")

    @property
    def meta(self) -> ModelMeta:
        return self._meta

    def _session_policy(self, session: str):
        policy = self._sessions.get(session)
        if policy is None:
            shared = itertools.chain(self._policy.parameters(), self._policy.buffers())
            policy = copy.deepcopy(self._policy, memo={id(t): t for t in shared})
            policy.reset()
            self._sessions[session] = policy
        return policy

    def _frame(self, observation: PolicyObservation, instruction: str) -> dict:
        """A batch of one, as LeRobot's async policy server prepares it."""
        frame = self.io.inputs(observation)
        if OBS_STATE in frame:
            frame[OBS_STATE] = frame[OBS_STATE].astype(np.float32)
        return prepare_observation_for_inference(frame, self._device, task=instruction)

    def _chunks(self, policy, batch: dict) -> list:
        """Pre-processor, chunk inference and post-processor; one (steps, dim) array per
        item of ``batch``. Call with the lock held."""
        try:
            with torch.inference_mode():
                chunk = policy.predict_action_chunk(self._pre(batch))[:, : self._chunk_size]
                rows = [self._post(chunk[:, i]) for i in range(chunk.shape[1])]
        except NotImplementedError as exc:
            raise BackendError(f"this LeRobot policy predicts no action chunks ({exc})") \
                from None
        except (RuntimeError, ValueError, KeyError) as exc:
            raise BackendError(f"LeRobot inference failed ({exc}): check that model_io "
                               f"({self.io.name}) feeds what the policy was trained "
                               "on") from exc
        actions = torch.stack(rows, dim=1).float().cpu().numpy()
        return [actions_array(a, self._space.dim, "the LeRobot policy") for a in actions]

    def predict(self, observation: PolicyObservation, instruction: str,
                session: str) -> np.ndarray:
        frame = self._frame(observation, instruction)
        with self._lock:
            return self._chunks(self._session_policy(session), frame)[0]

    def predict_batch(self, requests) -> list:
        if not self.batching:
            return super().predict_batch(requests)
        answers, frames = [], []
        for r in requests:
            try:
                frames.append(self._frame(r.observation, r.instruction))
                answers.append(None)
            except BackendError as err:  # this request's own fault: the others still run
                answers.append(err)
        if frames:
            # Tensors stack along the batch axis; task and robot_type become lists of
            # strings, as LeRobot's data loader collates them.
            batch = {key: torch.cat([f[key] for f in frames])
                     if isinstance(frames[0][key], torch.Tensor) else [f[key] for f in frames]
                     for key in frames[0]}
            with self._lock:
                chunks = iter(self._chunks(self._policy, batch))
            answers = [a if a is not None else next(chunks) for a in answers]
        return answers

    def reset(self, session: Optional[str] = None) -> None:
        with self._lock:
            if session is None:
                self._sessions.clear()
            else:
                self._sessions.pop(session, None)

    def close(self) -> None:
        self.reset()
