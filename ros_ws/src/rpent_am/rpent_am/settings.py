"""The action-model node's parameters: the node's own (:class:`ActionModelSettings`) and
those of the backend it serves (:data:`BACKEND_SETTINGS`), declared only for the backend
selected, so ``ros2 param list`` shows what the running model uses."""
from __future__ import annotations

from dataclasses import dataclass

from rpent_contract.rpc import parse_endpoint
from rpent_contract.settings import (
    at_least,
    in_range,
    one_of,
    parameter,
    positive,
    with_default,
    write_params_file,
)

from .backends.scripted import REALIZED
from .model_io import SHIPPED

BACKENDS = ("scripted", "lerobot", "openpi", "rpent_http", "rpent_vla", "rpent_wam")
# Where the scripted expert finds the objects its instruction names.
OBJECT_SOURCES = ("simulator", "perception")
# The executor runs every predict goal on a thread of its own for the goal's whole life
# (a stream waits for observations and inference there), so it gets this many threads for
# goals plus a reserve that keeps services and cancels answered however many goals run;
# ``max_goals`` may not exceed it.
MAX_GOALS = 64


def _goals(value):
    return None if 1 <= value <= MAX_GOALS else f"must be 1..{MAX_GOALS}"


@dataclass(frozen=True)
class ActionModelSettings:
    backend: str = parameter("scripted", "Policy backend", check=one_of(*BACKENDS))
    robot_namespace: str = parameter("", "Namespace of the robot whose topics give the latest "
                                     "observation (goals may name another)")
    robot_wait_timeout: float = parameter(60.0, "Wait at start-up for the robot's "
                                          "get_robot_info", "s", positive)
    action_space: str = parameter("", "Robot control space the model drives; empty: the "
                                  "robot's default (libero_osc_delta on LIBERO, ee_delta on "
                                  "the arms)")
    max_goals: int = parameter(32, f"predict goals served at once (at most {MAX_GOALS}); more "
                               "are refused with the reason", check=_goals)
    clip_actions: bool = parameter(
        True, "Clip the backend's chunks to the bounds of its action space: trained policies "
        "overshoot them a little (LIBERO's own environment clips too); false refuses such a "
        "chunk instead")
    max_observation_age: float = parameter(2.0, "robot_state older than this is not predicted "
                                           "from (a disconnected or stalled robot)", "s",
                                           positive)
    max_sessions: int = parameter(64, "policy sessions held at once; beyond it the least "
                                  "recently used idle one is forgotten", check=positive)
    session_ttl: float = parameter(600.0, "An unused policy session is forgotten after this",
                                   "s", positive)
    max_batch: int = parameter(8, "predict goals whose inferences run as one batch at most, "
                               "for backends that batch (lerobot, scripted); 1: one at a time",
                               check=_goals)
    max_batch_wait_ms: float = parameter(
        5.0, "A batch waits this long for more goals after its first (none once every client "
        "it can expect is in it: a lone client never waits)", "ms",
        lambda v: None if 0 <= v <= 1000 else "must be 0..1000")


@dataclass(frozen=True)
class BackendSettings:
    chunk_size: int = parameter(0, "Steps per chunk; 0 = what the model produces",
                                check=at_least(0))


@dataclass(frozen=True)
class ScriptedSettings(BackendSettings):
    chunk_size: int = with_default(BackendSettings, "chunk_size", 10)
    objects: str = parameter(
        "simulator", "Where the scripted expert finds the objects the instruction names: "
        "simulator (its object poses, privileged) | perception (the robot's perception node: "
        "its cameras' depth, camera_info and tf)", check=one_of(*OBJECT_SOURCES))
    step_realized: float = parameter(
        REALIZED, "Share of a commanded delta the arm covers within a step: 0.3 for LIBERO's "
        "OSC; 1.0 where deltas move a streamed target (the arms' ee_delta)",
        check=in_range(0, 1, lo_open=True))
    slow_within: float = parameter(
        0.0, "Within this distance of a goal the hand's step shrinks in proportion, so an arm "
        "lagging a streamed target does not overshoot it; 0: never (LIBERO)", "m",
        at_least(0))
    max_translation_step: float = parameter(0.04, "The hand moves this far in one step at "
                                            "most (and never more than one axis of the action "
                                            "space takes)", "m", positive)
    max_rotation_step: float = parameter(0.1, "The hand turns this far in one step at most "
                                         "(and never more than one axis of the action space "
                                         "takes): no more than the arm's joints turn in a "
                                         "step", "rad", positive)


def _model_io(default: str, simple: bool = False):
    return parameter(default, f"what the model is fed: {', '.join(SHIPPED)} or a YAML file of "
                     "model_io fields" + ("; empty = cameras and state_names as they are"
                                          if simple else ""))


def _endpoint(value):
    try:
        parse_endpoint(value)
    except ValueError as err:
        return f"{err}: set it to the server's address"
    return None


_STATE_NAMES = ("ee_x", "ee_y", "ee_z", "gripper_width")


@dataclass(frozen=True)
class ServedSettings(BackendSettings):
    """A model that answers each inference, here or on a server, within a timeout."""
    timeout: float = parameter(30.0, "A single inference may take this long", "s", positive)


@dataclass(frozen=True)
class LeRobotSettings(ServedSettings):
    checkpoint: str = parameter("", "LeRobot checkpoint folder (save_pretrained output)",
                                check=lambda v: None if v else
                                "set it to the folder with config.json")
    device: str = parameter("", "torch device; empty = cuda if available, else cpu")
    model_io: str = _model_io("", simple=True)
    cameras: tuple = parameter(("agentview=observation.images.image",),
                               "contract_camera=policy_feature pairs (without model_io)")
    state_names: tuple = parameter(_STATE_NAMES, "robot_state entries forming "
                                   "observation.state, in order (without model_io)")


@dataclass(frozen=True)
class OpenPISettings(ServedSettings):
    endpoint: str = parameter("127.0.0.1:8000", "host:port of the OpenPI server",
                              check=lambda v: None if ":" in v else "write host:port")
    model_io: str = _model_io("pi05_libero")


@dataclass(frozen=True)
class RpentHttpSettings(ServedSettings):
    endpoint: str = parameter("", "the server: http://HOST:PORT or socket://HOST:PORT (its "
                              "--transport)", check=_endpoint)
    model_io: str = _model_io("rpent_pi05_libero")


@dataclass(frozen=True)
class WamSettings(RpentHttpSettings):
    timeout: float = parameter(0.0, "A single inference may take this long; 0: the worker's "
                               "prediction_timeout_s, else 300", "s", at_least(0))
    model_io: str = _model_io("wam_libero")
    wam_backend: str = parameter("", "the worker's model, as its metadata names it "
                                 "(cosmos_policy, fast_wam, cosmos3); empty: any")


@dataclass(frozen=True)
class RpentVlaSettings(RpentHttpSettings):
    model_io: str = _model_io("", simple=True)
    cameras: tuple = parameter(("agentview=video.agentview",), "contract_camera="
                               "observation_key pairs (without model_io)")
    state_names: tuple = parameter(_STATE_NAMES, "robot_state entries forming the state, in "
                                   "order (without model_io)")
    state_key: str = parameter("state.robot", "observation key of the state (without "
                               "model_io)")
    prompt_key: str = parameter("annotation.human.task_description", "observation key of the "
                                "instruction (without model_io)")
    action_keys: tuple = parameter(("",), "the answer's action arrays in column order; empty "
                                   "= the order the server answers them in")


BACKEND_SETTINGS = {
    "scripted": ScriptedSettings, "lerobot": LeRobotSettings, "openpi": OpenPISettings,
    "rpent_http": RpentHttpSettings, "rpent_vla": RpentVlaSettings, "rpent_wam": WamSettings,
}

PARAMS_HEADER = """\
# Parameters of the action-model node (rpent_am/am_node), node name `action_model`, at
# their defaults; written by `python -m rpent_am.settings config/action_model.yaml` from
# rpent_am/settings.py, where each is declared. A backend's own parameters (chunk_size,
# endpoint, model_io ...) are declared only when it is selected: see BACKEND_SETTINGS there.
#   ros2 run rpent_am am_node --ros-args --params-file config/action_model.yaml
"""


if __name__ == "__main__":
    write_params_file(ActionModelSettings, PARAMS_HEADER)
