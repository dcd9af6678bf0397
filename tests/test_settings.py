"""A node's settings class is the one source of its parameters: the node declares them from
it (name, type, default, unit, range, help), its params file is written from it, and the
bring-ups' arguments take its defaults."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import rclpy

from rpent.bringup import AGENT_ARGS, VIEW_ARGS, launch_value, perception_args, twin_args
from rpent_agent import settings as agent_settings
from rpent_agent.settings import AgentSettings
from rpent_bag import settings as recorder_settings
from rpent_contract import params
from rpent_foxglove import settings as bridge_settings
from rpent_perception.settings import PerceptionSettings
from rpent_twins.settings import CameraSettings

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Example:
    rate: float = params.parameter(20.0, "how often", "Hz", params.positive)
    home: tuple = params.parameter((0.0, 1.0), "where to go", "rad", params.vector(2))
    name: str = params.parameter("arm", "what it is called")
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
    with pytest.raises(params.ParameterError, match=re.escape(expected)):
        params.declare_settings(node(**overrides), Example, log=None)


# (settings module, its class, the params file written from it)
PARAMS_FILES = [(agent_settings, "AgentSettings", "agent.yaml"),
                (recorder_settings, "RecorderSettings", "recorder.yaml"),
                (bridge_settings, "BridgeSettings", "foxglove_bridge.yaml")]


@pytest.mark.parametrize("module, name, file", PARAMS_FILES, ids=[f for *_, f in PARAMS_FILES])
def test_a_params_file_is_written_from_its_nodes_settings(module, name, file):
    expected = params.params_yaml(getattr(module, name), module.PARAMS_HEADER)
    assert (ROOT / "config" / file).read_text() == expected, \
        f"config/{file} is stale: python -m {module.__name__} config/{file}"


@pytest.mark.parametrize("module, name, file", PARAMS_FILES, ids=[f for *_, f in PARAMS_FILES])
def test_a_params_file_declares_every_setting_at_its_default(node, module, name, file):
    """What the bring-ups load first: it must change nothing about the node's defaults."""
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
    agent = params.parameters_of(AgentSettings)
    differ = {a.name: (a.default, launch_value(agent[a.name][0])) for a in AGENT_ARGS
              if a.name in agent and a.name not in NOT_THE_AGENTS_DEFAULT
              and a.default != launch_value(agent[a.name][0])}
    assert not differ, f"bring-up default vs the agent's: {differ}"
    assert set(NOT_THE_AGENTS_DEFAULT) <= set(agent)


def test_the_bringups_perception_arguments_default_to_the_nodes_own_values():
    node = params.parameters_of(PerceptionSettings)
    # perception:= picks the backend or none, for the agent's tools: not the node's backend.
    shared = [a for a in perception_args("auto", "") if a.name in node]
    assert [a.name for a in shared] == ["sam3_endpoint"]
    assert all(a.default == launch_value(node[a.name][0]) for a in shared)


def test_the_bringups_twin_arguments_default_to_the_twin_nodes_own_values():
    args = {a.name: a.default for a in twin_args("franka")}
    camera = params.parameters_of(CameraSettings)
    assert args["twin_port"] == launch_value(camera["twin_port"][0])
    assert args["twin_camera_rate"] == launch_value(camera["rate"][0])


def test_the_bringups_dashboard_port_is_the_bridges_own():
    """The bring-up also serves the foxglove.websocket.v1 port, which the bridge alone does
    not (legacy_port -1)."""
    args = {a.name: a.default for a in VIEW_ARGS}
    bridge = params.parameters_of(bridge_settings.BridgeSettings)
    assert args["dashboard_port"] == launch_value(bridge["port"][0])
    assert bridge["legacy_port"][0] == -1 and args["dashboard_legacy_port"] == "8764"
