"""Policy backends; the node builds one by name (parameter ``backend``).

Each backend's parameters are declared only when it is selected, so ``ros2 param list``
shows what the running model actually uses. Heavy imports (torch, LeRobot, openpi-client)
happen here, not at node import, so a scripted or remote model needs none of them.
"""
from __future__ import annotations

from typing import Callable, Optional

from rpent_contract import params
from rpent_contract.control_space import ControlSpaceSpec
from rpent_contract.extras import require
from rpent_contract.pick_place import arm_joint_count, height_scale

from ..model_io import SHIPPED, ModelIO, load
from ..policy import PolicyBackend

BACKENDS = ("scripted", "lerobot", "openpi", "rpent_http", "rpent_vla", "rpent_wam")


def _mapping(entries) -> dict:
    """["contract_camera=model_key", ...] -> dict, refusing malformed entries; [''] (ROS's
    way to write an empty string array) maps no camera."""
    entries = [e for e in entries if e]
    pairs = [e.split("=", 1) for e in entries]
    bad = [e for e, p in zip(entries, pairs) if len(p) != 2 or not p[0] or not p[1]]
    if bad:
        raise params.ParameterError(
            f"camera mapping entries must look like 'agentview=observation.images.image', "
            f"got {bad}")
    return dict(pairs)


def _model_io(declare: Callable, default: str, simple: Optional[Callable] = None) -> ModelIO:
    """The ``model_io`` parameter: a shipped configuration's name or a YAML file; '' (where
    ``simple`` builds one) feeds cameras and state entries as they are."""
    empty = "" if simple is None else "; empty = cameras and state_names as they are"
    spec = declare("model_io", default, f"what the model is fed: {', '.join(SHIPPED)} or a "
                   f"YAML file of model_io fields{empty}")
    if not spec and simple is not None:
        return simple()
    try:
        return load(spec)
    except ValueError as err:
        raise params.ParameterError(f"model_io: {err}") from None


def make_backend(name: str, declare: Callable, space: ControlSpaceSpec, info,
                 finders: dict) -> PolicyBackend:
    """Declare ``name``'s parameters with ``declare`` and build it for ``space`` of the
    robot ``info`` (its get_robot_info answer) describes; ``finders`` are the scripted
    expert's ways to find objects (name -> scripted.Find)."""
    d = declare
    control_rate = info.control_rate
    chunk = d("chunk_size", 10 if name == "scripted" else 0,
              "Steps per chunk; 0 = what the model produces",
              lambda v: None if v >= 0 else "must be >= 0")
    if name == "scripted":
        from .scripted import REALIZED, ArmGeometry, ScriptedPickPlace

        objects = d("objects", "simulator", "Where the scripted expert finds the objects the "
                    "instruction names: simulator (its object poses, privileged) | perception "
                    "(the robot's perception node: its cameras' depth, camera_info and tf)",
                    params.one_of(*finders))
        lo, hi = info.workspace_min, info.workspace_max
        arm = ArmGeometry(
            gripper_max_width=info.gripper_max_width,
            height_scale=height_scale((lo.x, lo.y, lo.z), (hi.x, hi.y, hi.z)),
            arm_joints=arm_joint_count(info.control_spaces),
            workspace_min=(lo.x, lo.y, lo.z), workspace_max=(hi.x, hi.y, hi.z),
            realized=d("step_realized", REALIZED, "Share of a commanded delta the arm covers "
                       "within a step: 0.3 for LIBERO's OSC; 1.0 where deltas move a streamed "
                       "target (the arms' ee_delta)", lambda v: None if 0 < v <= 1 else
                       "must be in (0, 1]"),
            slow_within=d("slow_within", 0.0, "m: within this distance of a goal the hand's "
                          "step shrinks in proportion, so an arm lagging a streamed target "
                          "does not overshoot it; 0: never (LIBERO)",
                          lambda v: None if v >= 0 else "must be >= 0"))
        source = {"simulator": "the simulator's object poses",
                  "perception": "the robot's perception"}[objects]
        step = d("max_translation_step", 0.04, "m the hand moves in one step at most (and "
                 "never more than one axis of the action space takes)", params.positive)
        return ScriptedPickPlace(space, finders[objects], arm=arm, chunk_size=chunk or 10,
                                 max_translation_step=step, control_rate=control_rate,
                                 source=source)
    if name == "rpent_wam":
        timeout = d("timeout", 0.0, "s a single inference may take; 0: the worker's "
                    "prediction_timeout_s, else 300", lambda v: None if v >= 0 else
                    "must be >= 0")
    else:
        timeout = d("timeout", 30.0, "s a single inference may take", params.positive)
    if name == "lerobot":
        require("models", "the lerobot backend", "lerobot")
        from .lerobot_backend import LeRobotBackend

        io = _model_io(d, "", lambda: ModelIO.simple(
            "lerobot", _mapping(d("cameras", ["agentview=observation.images.image"],
                                  "contract_camera=policy_feature pairs (without model_io)")),
            d("state_names", ["ee_x", "ee_y", "ee_z", "gripper_width"],
              "robot_state entries forming observation.state, in order (without model_io)"),
            prompt_key="task"))
        return LeRobotBackend(
            d("checkpoint", "", "LeRobot checkpoint folder (save_pretrained output)",
              lambda v: None if v else "set it to the folder with config.json"),
            action_space=space, io=io, chunk_size=chunk,
            device=d("device", "", "torch device; empty = cuda if available, else cpu") or None,
            control_rate=control_rate, timeout=timeout)
    if name == "openpi":
        require("models", "the openpi backend", "openpi_client")
        from .openpi_backend import OpenPIBackend

        host, _, port = d("endpoint", "127.0.0.1:8000", "host:port of the OpenPI server",
                          lambda v: None if ":" in v else "write host:port").rpartition(":")
        return OpenPIBackend(host, int(port), action_space=space, chunk_size=chunk,
                             io=_model_io(d, "pi05_libero"),
                             timeout=timeout, control_rate=control_rate)
    if name in ("rpent_http", "rpent_vla", "rpent_wam"):
        from rpent_contract.rpc import parse_endpoint

        from .rpent_http import RpentHttpBackend, RpentVlaBackend

        def endpoint_problem(value: str):
            try:
                parse_endpoint(value)
            except ValueError as err:
                return f"{err}: set it to the server's address"
            return None

        common = dict(
            endpoint=d("endpoint", "", "the server: http://HOST:PORT or socket://HOST:PORT "
                       "(its --transport)", endpoint_problem),
            action_space=space, chunk_size=chunk, control_rate=control_rate, timeout=timeout)
        if name == "rpent_http":
            return RpentHttpBackend(io=_model_io(d, "rpent_pi05_libero"), **common)
        if name == "rpent_wam":
            from .wam import WamBackend

            return WamBackend(io=_model_io(d, "wam_libero"), expected_backend=d(
                "wam_backend", "", "the worker's model, as its metadata names it "
                "(cosmos_policy, fast_wam, cosmos3); empty: any"), **common)
        io = _model_io(d, "", lambda: ModelIO.simple(
            "rpent_vla", _mapping(d("cameras", ["agentview=video.agentview"],
                                    "contract_camera=observation_key pairs (without model_io)")),
            d("state_names", ["ee_x", "ee_y", "ee_z", "gripper_width"],
              "robot_state entries forming the state, in order (without model_io)"),
            state_key=d("state_key", "state.robot", "observation key of the state (without "
                        "model_io)"),
            prompt_key=d("prompt_key", "annotation.human.task_description", "observation key "
                         "of the instruction (without model_io)")))
        keys = [k for k in d("action_keys", [""], "the answer's action arrays in column order; "
                             "empty = the order the server answers them in") if k]
        return RpentVlaBackend(io=io, action_keys=keys, **common)
    raise params.ParameterError(f"unknown backend '{name}'; choose one of {', '.join(BACKENDS)}")
