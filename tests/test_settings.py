"""A node's settings class is the one source of its parameters: the node declares them from
it (name, type, default, unit, range, help), its params file is written from it, and the
bring-ups' arguments take its defaults."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import rclpy

from rpent import bringup
from rpent.bringup import AGENT_ARGS, VIEW_ARGS, launch_value, perception_args, twin_args
from rpent_agent import settings as agent_settings
from rpent_agent.settings import AgentSettings
from rpent_am import settings as model_settings
from rpent_bag import settings as recorder_settings
from rpent_contract import params, settings
from rpent_env_sim import settings as libero_settings
from rpent_foxglove import settings as bridge_settings
from rpent_hw.franka import settings as franka_settings
from rpent_hw.so101 import settings as so101_settings
from rpent_perception.settings import PerceptionSettings
from rpent_twins.settings import CameraSettings

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Example:
    rate: float = settings.parameter(20.0, "how often", "Hz", settings.positive)
    home: tuple = settings.parameter((0.0, 1.0), "where to go", "rad", settings.vector(2))
    name: str = settings.parameter("arm", "what it is called")
    log: object = None  # not a parameter: given by the node


@pytest.fixture
def node(rclpy_context):
    made = []

    def make(**overrides):
        made.append(rclpy.create_node(
            f"settings_{len(made)}", parameter_overrides=[
                rclpy.parameter.Parameter(k, value=v) for k, v in overrides.items()]))
        return made[-1]
    yield make
    for n in made:
        n.destroy_node()


def test_a_node_declares_its_settings_typed_with_their_unit_and_help(node):
    n = node(rate=50.0)
    settings = params.declare_settings(n, Example, log="the logger")
    assert settings == Example(rate=50.0, home=(0.0, 1.0), name="arm", log="the logger")
    described = n.describe_parameters(["rate", "home", "name"])
    assert [d.description for d in described] == ["how often (Hz)", "where to go (rad)",
                                                  "what it is called"]
    assert all(d.read_only for d in described)


@pytest.mark.parametrize("overrides, expected", [
    ({"rate": -1.0}, "parameter 'rate' = -1.0: must be a finite number > 0"),
    ({"home": [0.0, 1.0, 2.0]}, "parameter 'home' = [0.0, 1.0, 2.0]: must be 2 finite numbers"),
    ({"rate": "fast"}, "parameter 'rate' has the wrong type"),
])
def test_a_value_out_of_range_or_of_the_wrong_type_stops_the_node(node, overrides, expected):
    with pytest.raises(settings.ParameterError, match=re.escape(expected)):
        params.declare_settings(node(**overrides), Example, log=None)


# (settings module, its class, the params file written from it)
PARAMS_FILES = [(agent_settings, "AgentSettings", "agent.yaml"),
                (recorder_settings, "RecorderSettings", "recorder.yaml"),
                (bridge_settings, "BridgeSettings", "foxglove_bridge.yaml"),
                (libero_settings, "LiberoSettings", "libero_sim.yaml"),
                (franka_settings, "FrankaNodeSettings", "franka.yaml"),
                (so101_settings, "SO101NodeSettings", "so101.yaml"),
                (model_settings, "ActionModelSettings", "action_model.yaml")]


@pytest.mark.parametrize("module, name, file", PARAMS_FILES, ids=[f for *_, f in PARAMS_FILES])
def test_a_params_file_is_written_from_its_nodes_settings(module, name, file):
    expected = settings.params_yaml(getattr(module, name), module.PARAMS_HEADER)
    assert (ROOT / "config" / file).read_text() == expected, \
        f"config/{file} is stale: python -m {module.__name__} config/{file}"


@pytest.mark.parametrize("module, name, file", PARAMS_FILES, ids=[f for *_, f in PARAMS_FILES])
def test_a_params_file_declares_every_setting_at_its_default(node, module, name, file):
    """What the bring-ups load first: it must change nothing about the node's defaults (a
    default worked out at start-up is left out of the file, and the class's stands in)."""
    import yaml

    values = yaml.safe_load((ROOT / "config" / file).read_text())["/**"]["ros__parameters"]
    settings_type = getattr(module, name)
    assert params.declare_settings(node(**values), settings_type) == settings_type()


# Bring-up arguments named as an agent parameter but meaning something else there, or
# defaulting otherwise on purpose.
NOT_THE_AGENTS_DEFAULT = {
    "planner": "empty: the agent's auto",
    "memory_dir": "a bring-up's agent keeps what it learns (auto)",
}


def test_the_bringups_agent_arguments_default_to_the_agents_own_values():
    agent = settings.parameters_of(AgentSettings)
    differ = {a.name: (a.default, launch_value(agent[a.name][0])) for a in AGENT_ARGS
              if a.name in agent and a.name not in NOT_THE_AGENTS_DEFAULT
              and a.default != launch_value(agent[a.name][0])}
    assert not differ, f"bring-up default vs the agent's: {differ}"
    assert set(NOT_THE_AGENTS_DEFAULT) <= set(agent)


def test_the_bringups_perception_arguments_default_to_the_nodes_own_values():
    node = settings.parameters_of(PerceptionSettings)
    # perception:= picks the backend or none, for the agent's tools: not the node's backend.
    shared = [a for a in perception_args("auto", "") if a.name in node]
    assert [a.name for a in shared] == ["sam3_endpoint"]
    assert all(a.default == launch_value(node[a.name][0]) for a in shared)


def test_the_bringups_twin_arguments_default_to_the_twin_nodes_own_values():
    args = {a.name: a.default for a in twin_args("franka")}
    camera = settings.parameters_of(CameraSettings)
    assert args["twin_port"] == launch_value(camera["twin_port"][0])
    assert args["twin_camera_rate"] == launch_value(camera["rate"][0])


def test_the_bringups_dashboard_port_is_the_bridges_own():
    """The bring-up also serves the foxglove.websocket.v1 port, which the bridge alone does
    not (legacy_port -1)."""
    args = {a.name: a.default for a in VIEW_ARGS}
    bridge = settings.parameters_of(bridge_settings.BridgeSettings)
    assert args["dashboard_port"] == launch_value(bridge["port"][0])
    assert bridge["legacy_port"][0] == -1 and args["dashboard_legacy_port"] == "8764"


# Bring-up arguments named as a robot parameter but meaning something else there, or
# defaulting otherwise on purpose.
_ARM = {"require_approval": "empty: the node's",
        "operator": "empty: the twin's operator on a twin, else a person (the node's human)",
        "instruction": "the agent's: empty is the robot's task"}
NOT_THE_ROBOTS_DEFAULT = {
    "franka": {**_ARM, "realtime_mode": "empty: the node's, or ignore on a twin",
               "relative_dynamics_factor": "empty: the node's"},
    "so101": _ARM,
}
ROBOT_SETTINGS = {"libero_sim": libero_settings.LiberoSettings,
                  "franka": franka_settings.FrankaNodeSettings,
                  "so101": so101_settings.SO101NodeSettings}


@pytest.mark.parametrize("name", list(ROBOT_SETTINGS))
def test_the_bringups_robot_arguments_default_to_the_robot_nodes_own_values(name):
    node = settings.parameters_of(ROBOT_SETTINGS[name])
    shared = [a for a in bringup.get(name).arguments if a.name in node
              and a.name not in NOT_THE_ROBOTS_DEFAULT.get(name, {})]
    assert shared, f"no argument of the {name} bring-up sets a robot parameter"
    differ = {a.name: (a.default, launch_value(node[a.name][0])) for a in shared
              if a.default != launch_value(node[a.name][0])}
    assert not differ, f"bring-up default vs the {name} node's: {differ}"


def test_an_arm_and_the_simulator_override_only_their_own_defaults():
    """An embodiment's class keeps the contract's parameters and their meaning: each of
    them is there under the same name, help and check, with the embodiment's default."""
    from rpent_contract.robot_settings import RobotSettings

    contract = settings.parameters_of(RobotSettings)
    for robot in ROBOT_SETTINGS.values():
        own = settings.parameters_of(robot)
        assert list(own)[:len(contract)] == list(contract)
        assert all(own[k][1] == contract[k][1] for k in contract), robot.__name__


@pytest.mark.parametrize("backend", sorted(model_settings.BACKEND_SETTINGS))
def test_every_backends_settings_declare_at_their_defaults(node, backend):
    settings_type = model_settings.BACKEND_SETTINGS[backend]
    # lerobot's checkpoint and the HTTP backends' endpoint have no usable default.
    needed = {k: v for k, v in {"checkpoint": "/models/act", "endpoint": "http://127.0.0.1:9"}
              .items() if k in settings.parameters_of(settings_type)}
    declared = params.declare_settings(node(**needed), settings_type)
    assert declared == settings_type(**needed)


def _default_text(settings_type, name: str) -> str:
    return f"{settings.parameters_of(settings_type)[name][0]:g}"


# Where the README states a parameter's default: (its words, with {} for the default, the
# settings class, the parameter).
README_DEFAULTS = [
    ("`max_age` ({} s)", PerceptionSettings, "max_age"),
    ("`code_timeout` s ({})", AgentSettings, "code_timeout"),
    ("`code_max_calls` robot calls ({})", AgentSettings, "code_max_calls"),
    ("`reflex_retries` times ({})", franka_settings.FrankaNodeSettings, "reflex_retries"),
    ("`connect_timeout` s ({})", franka_settings.FrankaNodeSettings, "connect_timeout"),
    ("`connect_timeout` s ({})", so101_settings.SO101NodeSettings, "connect_timeout"),
    ("`state_timeout` ({} s)", libero_settings.LiberoSettings, "state_timeout"),
    ("`max_goals` predict goals at once ({},", model_settings.ActionModelSettings, "max_goals"),
    ("`max_sessions` ({})", model_settings.ActionModelSettings, "max_sessions"),
    ("`max_observation_age` ({} s)", model_settings.ActionModelSettings, "max_observation_age"),
    ("`max_batch` goals ({};", model_settings.ActionModelSettings, "max_batch"),
    ("`max_batch_wait_ms` ({})", model_settings.ActionModelSettings, "max_batch_wait_ms"),
    ("`camera_rate` (Hz of simulated time; {}, the default", libero_settings.LiberoSettings,
     "camera_rate"),
]


@pytest.mark.parametrize("words, settings_type, name", README_DEFAULTS,
                         ids=[f"{t.__name__}.{n}" for _, t, n in README_DEFAULTS])
def test_the_readme_states_a_parameters_own_default(words, settings_type, name):
    readme = " ".join((ROOT / "README.md").read_text().split())
    expected = words.format(_default_text(settings_type, name))
    assert expected in readme, f"README.md should say {expected!r}, as {settings_type.__name__}"
