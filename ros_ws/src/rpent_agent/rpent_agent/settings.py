"""The agent node's settings: every parameter it has, with its default, unit, range and
help, in one place. The node declares its parameters from :class:`AgentSettings`,
``config/agent.yaml`` is written from it (``python -m rpent_agent.settings``), and the
bring-ups take their defaults for the agent's arguments from it."""
from __future__ import annotations

from dataclasses import dataclass

from rpent_contract.settings import one_of, parameter, positive, write_params_file

from .planners import PLANNERS
from .prompts import LANGUAGES


def non_negative_int(value):
    return None if isinstance(value, int) and value >= 0 else "must be an integer >= 0"


def positive_int(value):
    return None if isinstance(value, int) and value > 0 else "must be an integer > 0"


@dataclass(frozen=True)
class AgentSettings:
    planner: str = parameter(
        "auto", "api | scripted | mcp | claude_code | codex | auto (api when a model and its "
        "key are configured, else scripted)", check=one_of(*PLANNERS))
    model: str = parameter("", "LLM as provider:model, e.g. anthropic:claude-sonnet-5, "
                           "openai:gpt-4.1; keys come from the environment")
    base_url: str = parameter(
        "", "the provider's endpoint: an Anthropic proxy for anthropic:, an OpenAI-compatible "
        "server (Ollama, vLLM: e.g. http://localhost:11434/v1) for openai: or a bare model "
        "name; empty = the provider's own API")
    plan_file: str = parameter("", "scripted planner: YAML/JSON list of tool calls; empty = "
                               "the pick-and-place heuristic")
    policy_chunks: int = parameter(80, "scripted planner: chunks the action model may execute "
                                   "before the heuristic takes over", check=positive_int)
    max_turns: int = parameter(30, "model turns (scripted/mcp: tool calls) per run",
                               check=positive_int)
    max_episode_steps: int = parameter(
        0, "control steps the agent's tools may execute per run; 0 = no agent cap (the "
        "robot's own cap still applies)", check=non_negative_int)
    move_timeout: float = parameter(60.0, "a move_to may go this long without progress from "
                                    "the robot", "s", positive)
    gripper_timeout: float = parameter(20.0, "a gripper command may go this long without "
                                       "progress", "s", positive)
    policy_timeout: float = parameter(120.0, "a run_policy call may go this long without a "
                                      "step executed", "s", positive)
    service_timeout: float = parameter(10.0, "longest wait for a service answer", "s",
                                       positive)
    images: bool = parameter(True, "attach the camera images to every tool result")
    policy_mode: str = parameter(
        "tools", "tools: the model calls the robot's tools; code: it writes Python calling "
        "them as robo.<tool>(...)", check=one_of("tools", "code"))
    code_timeout: float = parameter(120.0, "code mode: longest a snippet may take", "s",
                                    positive)
    code_max_calls: int = parameter(100, "code mode: robot calls per snippet",
                                    check=positive_int)
    max_history_images: int = parameter(4, "api planner: images kept in the history the "
                                        "model sees", check=non_negative_int)
    model_retries: int = parameter(3, "api planner: retries of a transient model error (rate "
                                   "limits, 5xx, dropped connections)", check=non_negative_int)
    tool_retries: int = parameter(3, "api planner: times in a row a model may correct a "
                                  "malformed tool call", check=non_negative_int)
    prompt_cache: bool = parameter(True, "api planner: ask providers that need asking "
                                   "(Anthropic) to cache the prompt; false for a gateway that "
                                   "refuses cache_control")
    output_dir: str = parameter("runs", "folder of the run folders")
    memory_dir: str = parameter(
        "", "memory folder shared by runs; auto = one that lasts per robot and task suite "
        "under the user's data folder; empty = <run folder>/memory")
    robot_namespace: str = parameter("", "namespace of the robot contract")
    action_model: str = parameter("", "action-model node name (e.g. /action_model) for the "
                                  "run_policy tool; empty = no policy tool")
    skills_file: str = parameter("", "YAML file of model skills, tools that run an action "
                                 "model on an instruction template (rpent_agent.skills); "
                                 "empty = none")
    perception: str = parameter("", "perception node (e.g. perception, relative to the robot "
                                "namespace) for the segment and locate tools; empty = no "
                                "perception tools")
    mcp_host: str = parameter("127.0.0.1", "mcp, claude_code, codex planners: address of the "
                              "tools' MCP server")
    mcp_port: int = parameter(8766, "mcp, claude_code, codex planners: its TCP port (the "
                              "dashboard has 8765)",
                              check=lambda v: None if 0 < v < 65536 else "must be 1..65535")
    mcp_token: str = parameter(
        "", "mcp, claude_code, codex planners: the bearer token every MCP client must send; "
        "empty = none on loopback, a new one (printed at start-up) when mcp_host is beyond "
        "loopback")
    codex_cli: str = parameter("codex", "codex planner: the Codex CLI executable (name on "
                               "PATH or path)")
    dashboard_url: str = parameter("", "where a viewer connects to this run's dashboard, for "
                                   "the run summary; empty = no dashboard")
    dashboard_layout: str = parameter("", "the viewer layout file to load with the "
                                      "dashboard, for the run summary")
    run_timeout: float = parameter(3600.0, "longest a run may take (every planner but "
                                   "scripted)", "s", positive)
    reset_episode: bool = parameter(False, "reset the robot's episode before each run")
    video: bool = parameter(True, "write episode.mp4 from the camera topics")
    language: str = parameter(
        "en", "the language of what the operator reads from the model (reasoning, "
        "questions, the finish summary): " + " | ".join(LANGUAGES), check=one_of(*LANGUAGES))
    startup_timeout: float = parameter(120.0, "longest wait for the robot (and action model) "
                                       "at start-up", "s", positive)
    instruction: str = parameter("", "run this task at start-up, then exit")
    run_at_startup: bool = parameter(False, "run once at start-up, then exit; with an empty "
                                     "instruction, the robot's task instruction")
    run_dir: str = parameter("", "run folder to write (a launch file's, shared with the "
                             "recorder); empty = a new one under output_dir per run")


PARAMS_HEADER = """\
# Parameters of the agent node (rpent_agent/agent_node), node name `agent`, at their
# defaults; written by `python -m rpent_agent.settings config/agent.yaml` from
# rpent_agent/settings.py, where each is declared. Copy it to change a value:
#   ros2 run rpent_agent agent_node --ros-args --params-file config/agent.yaml
#   ros_ws/install/rpent_agent/lib/rpent_agent/agent_node --ros-args --params-file config/agent.yaml
# It serves /agent/run_task (rpent_interfaces/RunTask) and publishes /agent/events.
"""


if __name__ == "__main__":
    write_params_file(AgentSettings, PARAMS_HEADER)
