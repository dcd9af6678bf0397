"""Policy backends; the node builds one by name (parameter ``backend``).

Each backend's parameters (``rpent_am.settings``) are declared only when it is selected, so
``ros2 param list`` shows what the running model actually uses. Heavy imports (torch,
LeRobot, openpi-client) happen here, not at node import, so a scripted or remote model
needs none of them.
"""
from __future__ import annotations

from typing import Callable, Optional

from rpent_contract.control_space import ControlSpaceSpec
from rpent_contract.extras import require
from rpent_contract.settings import ParameterError

from ..model_io import ModelIO, load
from ..pick_place import arm_joint_count, height_scale
from ..policy import PolicyBackend


def _mapping(entries) -> dict:
    """["contract_camera=model_key", ...] -> dict, refusing malformed entries; [''] (ROS's
    way to write an empty string array) maps no camera."""
    entries = [e for e in entries if e]
    pairs = [e.split("=", 1) for e in entries]
    bad = [e for e, p in zip(entries, pairs) if len(p) != 2 or not p[0] or not p[1]]
    if bad:
        raise ParameterError(
            f"camera mapping entries must look like 'agentview=observation.images.image', "
            f"got {bad}")
    return dict(pairs)


def _model_io(settings, simple: Optional[Callable] = None) -> ModelIO:
    """The ``model_io`` setting: a shipped configuration's name or a YAML file; '' (where
    ``simple`` builds one) feeds cameras and state entries as they are."""
    if not settings.model_io and simple is not None:
        return simple()
    try:
        return load(settings.model_io)
    except ValueError as err:
        raise ParameterError(f"model_io: {err}") from None


def make_backend(name: str, s, space: ControlSpaceSpec, info, finders: dict) -> PolicyBackend:
    """Build the backend ``name`` from its settings ``s`` (``rpent_am.settings``'s
    BACKEND_SETTINGS[name]) for ``space`` of the robot ``info`` (its get_robot_info answer)
    describes; ``finders`` are the scripted expert's ways to find objects (name ->
    scripted.Find)."""
    control_rate = info.control_rate
    if name == "scripted":
        from .scripted import ArmGeometry, ScriptedPickPlace

        lo, hi = info.workspace_min, info.workspace_max
        arm = ArmGeometry(
            gripper_max_width=info.gripper_max_width,
            height_scale=height_scale((lo.x, lo.y, lo.z), (hi.x, hi.y, hi.z)),
            arm_joints=arm_joint_count(info.control_spaces),
            workspace_min=(lo.x, lo.y, lo.z), workspace_max=(hi.x, hi.y, hi.z),
            realized=s.step_realized, slow_within=s.slow_within)
        source = {"simulator": "the simulator's object poses",
                  "perception": "the robot's perception"}[s.objects]
        # chunk_size 0 ("what the model produces") is the expert's own chunk.
        chunk = {"chunk_size": s.chunk_size} if s.chunk_size else {}
        return ScriptedPickPlace(space, finders[s.objects], arm=arm, **chunk,
                                 max_translation_step=s.max_translation_step,
                                 max_rotation_step=s.max_rotation_step,
                                 control_rate=control_rate, source=source)
    if name == "lerobot":
        require("models", "the lerobot backend", "lerobot")
        from .lerobot_backend import LeRobotBackend

        io = _model_io(s, lambda: ModelIO.simple(
            "lerobot", _mapping(s.cameras), list(s.state_names), prompt_key="task"))
        return LeRobotBackend(s.checkpoint, action_space=space, io=io, chunk_size=s.chunk_size,
                              device=s.device or None, control_rate=control_rate,
                              timeout=s.timeout)
    if name == "openpi":
        require("models", "the openpi backend", "openpi_client")
        from .openpi_backend import OpenPIBackend

        host, _, port = s.endpoint.rpartition(":")
        return OpenPIBackend(host, int(port), action_space=space, chunk_size=s.chunk_size,
                             io=_model_io(s), timeout=s.timeout, control_rate=control_rate)
    if name in ("rpent_http", "rpent_vla", "rpent_wam"):
        from .rpent_http import RpentHttpBackend, RpentVlaBackend

        common = dict(endpoint=s.endpoint, action_space=space, chunk_size=s.chunk_size,
                      control_rate=control_rate, timeout=s.timeout)
        if name == "rpent_http":
            return RpentHttpBackend(io=_model_io(s), **common)
        if name == "rpent_wam":
            from .wam import WamBackend

            return WamBackend(io=_model_io(s), expected_backend=s.wam_backend, **common)
        io = _model_io(s, lambda: ModelIO.simple(
            "rpent_vla", _mapping(s.cameras), list(s.state_names), state_key=s.state_key,
            prompt_key=s.prompt_key))
        return RpentVlaBackend(io=io, action_keys=[k for k in s.action_keys if k], **common)
    raise ParameterError(f"unknown backend '{name}': rpent_am.settings.BACKENDS lists them")
