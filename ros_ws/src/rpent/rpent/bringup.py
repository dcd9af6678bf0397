"""The bring-ups, declared once: which nodes a run starts, with which parameters.

Two starters read these descriptions and nothing else: the launch files in ``launch/``
(``ros2 launch rpent libero_sim.launch.py``) and :mod:`rpent.start` where ``ros2 launch``
is absent. A bring-up is a table of launch arguments plus a function from their values
to :class:`NodeSpec` entries; neither starter adds nodes or parameters of its own.
Installed packages add bring-ups of their own the same way (:func:`bringups`).
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from rpent_agent.settings import AgentSettings
from rpent_common.processes import node_executable, ros_args
from rpent_contract.contributions import BRINGUPS as BRINGUP_GROUP
from rpent_contract.contributions import ContributionError, contributions
from rpent_contract.settings import parameters_of
from rpent_contract.spelling import did_you_mean
from rpent_env_sim.settings import LiberoSettings
from rpent_foxglove.layout import LANGUAGES, layout_file
from rpent_foxglove.settings import BridgeSettings
from rpent_hw.franka.settings import FrankaNodeSettings
from rpent_hw.so101.settings import SO101NodeSettings
from rpent_perception.settings import PerceptionSettings
from rpent_twins.settings import CameraSettings, TwinPortSettings


# Arguments ``ros2 launch`` adds itself (--launch-prefix, --launch-prefix-filter).
LAUNCH_ROS_OPTIONS = ("launch-prefix", "launch-prefix-filter")


@dataclass(frozen=True)
class Argument:
    name: str
    default: str
    help: str


@dataclass
class NodeSpec:
    package: str
    executable: str
    name: str
    namespace: str = ""
    params_files: list = field(default_factory=list)  # YAML files, applied first
    parameters: dict = field(default_factory=dict)  # then these values
    remappings: dict = field(default_factory=dict)
    # The run is over when this node exits (the agent); its exit code is the run's.
    required: bool = False
    # A plain process instead of a node executable (``ros2 bag record``).
    command: Optional[list] = None
    # What runs the node's executable: another Python interpreter (a venv's), say.
    prefix: tuple = ()

    def exit_outcome(self, returncode: int) -> tuple:
        """What this node exiting means for the run: (the run's exit code, why it ends).
        The agent's code is the run's; any other node leaving ends the run as a failure."""
        if self.required:
            return returncode, (f"{self.name} finished" if returncode == 0 else
                                f"{self.name} exited with code {returncode}")
        return returncode or 1, (f"{self.name} exited with code {returncode}; its output "
                                 "above says why")

    def argv(self) -> list:
        """The command line that starts this node, as a launch file would run it."""
        if self.command:
            return list(self.command)
        return [*self.prefix, node_executable(self.package, self.executable)] + ros_args(
            self.parameters, self.namespace, {"__node": self.name, **self.remappings},
            self.params_files)


@dataclass(frozen=True)
class Bringup:
    name: str
    summary: str
    arguments: tuple
    nodes: Callable[[dict], list]

    def resolve(self, given: dict) -> dict:
        """Argument values: ``given`` over the defaults; unknown names are refused, each with
        the closest valid name (a misspelt ``tsk_id:=3`` must not run task 0)."""
        known = {a.name: a.default for a in self.arguments}
        unknown = sorted(set(given) - set(known))
        if unknown:
            guesses = [name + did_you_mean(name, known) for name in unknown]
            raise ValueError(
                f"{self.name}: unknown argument(s) {', '.join(guesses)}; this bring-up takes "
                f"{', '.join(sorted(known))}")
        return {**known, **given}

    def check_command_line(self, argv: list) -> None:
        """Refuse unknown ``name:=value`` arguments of ``ros2 launch``'s command line, as
        :meth:`resolve` does; launch_ros's own options pass."""
        given = dict(a.split(":=", 1) for a in argv if ":=" in a)
        for option in LAUNCH_ROS_OPTIONS:
            given.pop(option, None)
        self.resolve(given)


def config_dir() -> str:
    """config/ as installed with the rpent package (the repository's config/ in a checkout)."""
    try:
        from ament_index_python.packages import get_package_share_directory

        return os.path.join(get_package_share_directory("rpent"), "config")
    except (ImportError, LookupError):
        return os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "config")


def _config(name: str) -> str:
    return os.path.join(config_dir(), name)


def _flag(value: str) -> bool:
    if value.lower() in ("true", "1", "yes", "on"):
        return True
    if value.lower() in ("false", "0", "no", "off", ""):
        return False
    raise ValueError(f"'{value}' is not true or false")


def run_dir(args: dict) -> str:
    """The run folder: ``run_dir`` if given, else a new one under ``output_dir``."""
    if args.get("run_dir"):
        return args["run_dir"]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    label = "-".join(v for v in (args.get("suite"), args.get("task_id")) if v)
    ns = args.get("namespace", "").strip("/")
    return os.path.abspath(os.path.join(args.get("output_dir", "runs"),
                                        "-".join(p for p in (stamp, label, ns) if p)))


# --- shared pieces ------------------------------------------------------------------------
def launch_value(value) -> str:
    """A parameter's value as a launch argument writes it."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def node_argument(settings_type, name: str, help: str, parameter: str = "") -> Argument:
    """The argument ``name`` that sets a node's parameter (``parameter``, else the same
    name), at the node's own default."""
    return Argument(name, launch_value(parameters_of(settings_type)[parameter or name][0]),
                    help)


def agent_argument(name: str, help: str) -> Argument:
    return node_argument(AgentSettings, name, help)


def libero_argument(name: str, help: str) -> Argument:
    return node_argument(LiberoSettings, name, help)


AGENT_ARGS = (
    Argument("planner", "", "scripted | api | mcp | claude_code | codex; empty: api if "
             "model set, else scripted"),
    agent_argument("model", "provider:model for api, e.g. anthropic:claude-sonnet-5"),
    agent_argument("base_url", "the provider's endpoint for api: a proxy, or an "
                               "OpenAI-compatible server (Ollama, vLLM)"),
    agent_argument("instruction", "what to do; empty: the task's own instruction"),
    Argument("serve", "false", "true: a session: everything stays up and runs come and go "
                               "through agent/start_run and agent/cancel_run (the dashboard's "
                               "buttons, rpent task start|cancel), each in a folder of its "
                               "own; Ctrl-C ends it"),
    agent_argument("max_turns", "model turns before the run ends as max_turns"),
    agent_argument("output_dir", "where run folders are created"),
    agent_argument("run_dir", "use this run folder instead of a new one under output_dir"),
    # A bring-up's agent keeps what it learns; the node alone starts from nothing each run.
    Argument("memory_dir", "auto", "the agent's memory: auto (lasting, per robot and task "
                                   "suite, under ~/.local/share/rpent/memory) | a folder | "
                                   "empty: the run folder's own"),
    agent_argument("skills_file", "YAML of model skills: tools that run the action model on "
                                  "an instruction template"),
    agent_argument("mcp_port", "TCP port of the MCP server (planner:=mcp, claude_code, codex)"),
    agent_argument("policy_mode", "tools | code: the model writes Python that calls the tools "
                                  "as robo.<tool>(...) (run_code)"),
    agent_argument("plan_file", "scripted planner: YAML/JSON list of tool calls to run "
                                "instead of its pick-and-place heuristic"),
    agent_argument("policy_chunks", "scripted planner: chunks the action model may execute "
                                    "before its heuristic takes over"),
)
ARM_ARGS = (
    Argument("require_approval", "", "true: every motion waits for safety/approve; "
                                      "empty: the node's own (false)"),
    Argument("driver_only", "false", "true: only the robot (and dashboard / recorder), no "
                                     "agent or model; runs until stopped"),
)
MODEL_RUNTIME_ARGS = (
    Argument("am_python", "", "Python interpreter that runs the model node (a venv's "
                              "bin/python with the model's own packages); empty: this one"),
    Argument("am_device", "", "torch device of the model (am_backend:=lerobot), e.g. cuda:1; "
                              "empty: cuda if available, else cpu"),
)
MODEL_IO_ARG = Argument("am_model_io", "", "what the model is fed (lerobot, openpi, "
                                          "rpent_*): pi05_libero, lerobot_libero, "
                                          "rpent_pi05_libero, wam_libero or a YAML "
                                          "file; "
                                          "empty: the backend's default")


def model_args(backend: str) -> tuple:
    return (
        Argument("action_model", "", "model node to use (/gpu/action_model); "
                                     "empty: start one"),
        Argument("am_backend", backend,
                 "scripted | lerobot | openpi | rpent_http | rpent_vla | rpent_wam | none"),
        Argument("am_checkpoint", "", "LeRobot checkpoint folder (am_backend:=lerobot)"),
        Argument("am_endpoint", "", "policy server: host:port (openpi), http:// or "
                                    "socket://HOST:PORT (rpent_*)"),
        MODEL_IO_ARG, *MODEL_RUNTIME_ARGS,
    )
def perception_args(default: str, choices: str) -> tuple:
    return (
        Argument("perception", default, f"segment/locate tools for the agent: {choices}"),
        node_argument(PerceptionSettings, "sam3_endpoint", "SAM3 server, http:// or "
                      "socket://HOST:PORT (perception:=sam3_http)"),
    )


ARM_PERCEPTION = "auto (sam3_http on the twin, served by it; else none) | sam3_http | none"


def twin_args(arm: str) -> tuple:
    return (
        Argument("twin", "false", "true: rehearse on the arm's physics twin (objects, cameras, "
                                  "a SAM3 server and an operator) instead of the hardware"),
        Argument("twin_scene", "", f"the twin's scene YAML; empty: the shipped {arm} tabletop"),
        Argument("twin_task", "", "task of the twin's scene; empty: its first"),
        Argument("twin_seed", "0", "draws where the twin's objects start"),
        node_argument(TwinPortSettings, "twin_port", "TCP port of the twin port on loopback; "
                      "its SAM3 server takes the next one"),
        node_argument(CameraSettings, "twin_camera_rate", "frames per second of the twin's "
                      "cameras", parameter="rate"),
        Argument("operator", "", "who answers the robot's operator requests: human (rpent "
                                 "operator, the Foxglove layout) | auto (the twin, from its "
                                 "physics); empty: auto on the twin, else human"),
    )


VIEW_ARGS = (
    Argument("dashboard", "false", "start the Foxglove bridge (ws://127.0.0.1:dashboard_port)"),
    node_argument(BridgeSettings, "dashboard_port", "TCP port of the Foxglove bridge "
                  "(dashboard:=true)", parameter="port"),
    Argument("dashboard_legacy_port", "8764", "TCP port of the bridge's foxglove.websocket.v1 "
                                              "protocol, for Foxglove Studio 1.x; -1: none"),
    Argument("dashboard_language", "en", "en | zh-cn: the layout the run summary names "
                                         "(config/foxglove_layout[.zh-cn].json) and the "
                                         "language of the agent's reasoning and summaries"),
    Argument("record", "false", "record a rosbag2 (MCAP) into the run folder"),
    Argument("record_depth", "false", "true: the bag also holds the cameras' aligned depth "
                                      "(camera/<name>/depth/*), about as many bytes again as "
                                      "the images"),
    Argument("record_image_rate", "0", "images per second the bag keeps of each camera, at "
                                       "the same instants on all (the recorder node; ros2 bag "
                                       "record cannot thin); 0: every image"),
    Argument("namespace", "", "namespace of this robot's topics, actions and services"),
    Argument("robots_file", "", "YAML, one block per robot (/robot1/libero_sim: ...)"),
)


def robot_params(args: dict, config: str) -> list:
    """The robot node's parameter files: its config, then the per-robot blocks if any.

    A per-robot file holds one ``/<namespace>/<node>: ros__parameters:`` block per robot,
    so several namespaced robots share one file and each node picks its own block.
    """
    return [_config(config)] + ([os.path.abspath(args["robots_file"])]
                                if args["robots_file"] else [])


def model_nodes(args: dict, ns: str) -> tuple[list, str]:
    """The action-model node to start (if any) and the full name agents should use."""
    if args["action_model"]:
        return [], args["action_model"]
    if args["am_backend"] == "none":
        return [], ""
    node = _model_node(args, ns, _model_params(args))
    return [node], (f"/{ns}/action_model" if ns else "/action_model")


def perception_nodes(args: dict, ns: str, backend: str,
                     extra: Optional[dict] = None) -> tuple[list, str]:
    """The perception node to start (if any) and its name for the agent."""
    if backend == "none":
        return [], ""
    params = {"backend": backend, **(extra or {})}
    if args["sam3_endpoint"]:
        params["sam3_endpoint"] = args["sam3_endpoint"]
    return [NodeSpec("rpent_perception", "perception_node", "perception", ns,
                     parameters=params)], "perception"


def view_nodes(args: dict, ns: str, folder: str) -> list:
    nodes = []
    if _flag(args["dashboard"]):
        nodes.append(NodeSpec("rpent_foxglove", "bridge", "foxglove_bridge", ns,
                              params_files=[_config("foxglove_bridge.yaml")],
                              parameters={"port": int(args["dashboard_port"]),
                                          "legacy_port": int(args["dashboard_legacy_port"])}))
    if _flag(args["record"]):
        nodes.append(recorder(ns, os.path.join(folder, "bag"), _flag(args["record_depth"]),
                              **_given(args, {"record_image_rate": float})))
    return nodes


def _have_rosbag2_mcap() -> bool:
    try:
        from ament_index_python.packages import get_package_share_directory

        get_package_share_directory("rosbag2_storage_mcap")
    except (ImportError, LookupError):
        return False
    return shutil.which("ros2") is not None


def recorder(ns: str, bag: str, depth: bool = False, record_image_rate: float = 0.0) -> NodeSpec:
    """``ros2 bag record`` (MCAP) where rosbag2 is installed and every image is kept, else
    the rpent_bag recorder; the cameras' aligned depth only with ``depth``."""
    if not 0 <= record_image_rate < float("inf"):
        raise ValueError(f"record_image_rate:={record_image_rate:g}: give images per second "
                         f"> 0, or 0 to keep every image")
    if _have_rosbag2_mcap() and not record_image_rate:
        from rpent_bag.settings import DEFAULT_EXCLUDE, DEFAULT_TOPICS

        prefix = f"/{ns}/" if ns else "/"

        def regex(patterns):
            return "^(" + "|".join((p if p.startswith("/") else prefix + p).replace("*", ".*")
                                   for p in patterns) + ")$"
        return NodeSpec("rosbag2", "ros2", "recorder", ns, command=[
            "ros2", "bag", "record", "-s", "mcap", "-o", bag, "--include-hidden-topics",
            "-e", regex(DEFAULT_TOPICS)] + ([] if depth else ["-x", regex(DEFAULT_EXCLUDE)]))
    return NodeSpec("rpent_bag", "recorder", "recorder", ns,
                    params_files=[_config("recorder.yaml")],
                    parameters={"bag_path": bag, **({"exclude": [""]} if depth else {}),
                                **({"image_rate": record_image_rate} if record_image_rate else {})})


def dashboard_url(args: dict) -> str:
    """Where a viewer connects, for the run summary; empty without a dashboard."""
    return (f"ws://127.0.0.1:{int(args['dashboard_port'])}"
            if _flag(args.get("dashboard", "false")) else "")


def agent_node(args: dict, ns: str, folder: str, model: str, max_steps: str,
               perception: str) -> NodeSpec:
    url = dashboard_url(args)
    serve = _flag(args["serve"])
    if serve and args["instruction"]:
        raise ValueError(f"instruction:={args['instruction']} runs one task; with serve:=true "
                         "give each run's instruction to agent/start_run (the dashboard's "
                         "Start button, rpent task start)")
    language = args["dashboard_language"]
    if language not in LANGUAGES:
        raise ValueError(f"dashboard_language:={language}: choose one of {', '.join(LANGUAGES)}")
    # A session's runs each get a folder of their own inside the session's.
    runs = {"output_dir": folder, "run_dir": ""} if serve else \
        {"output_dir": os.path.abspath(args["output_dir"]), "run_dir": folder}
    return NodeSpec(
        "rpent_agent", "agent_node", "agent", ns,
        params_files=[_config("agent.yaml")],
        parameters={"planner": args["planner"] or "auto", "model": args["model"],
                    "base_url": args["base_url"], "instruction": args["instruction"],
                    "max_turns": int(args["max_turns"]), "max_episode_steps": int(max_steps),
                    **runs, "action_model": model, "perception": perception,
                    "plan_file": os.path.abspath(args["plan_file"]) if args["plan_file"] else "",
                    "policy_chunks": int(args["policy_chunks"]),
                    "memory_dir": (args["memory_dir"] if args["memory_dir"] in ("", "auto")
                                   else os.path.abspath(args["memory_dir"])),
                    "skills_file": (os.path.abspath(args["skills_file"])
                                    if args["skills_file"] else ""),
                    "robot_namespace": ns, "run_at_startup": not serve,
                    "policy_mode": args["policy_mode"],
                    "mcp_port": int(args["mcp_port"]), "dashboard_url": url,
                    "dashboard_layout": (os.path.abspath(_config(layout_file(language)))
                                         if url else ""),
                    "language": language},
        required=True)


# --- bring-ups ----------------------------------------------------------------------------
def _libero_sim(args: dict) -> list:
    ns = args["namespace"].strip("/")
    folder = run_dir(args)
    # With a per-robot file the task of each robot comes from its block there.
    task = {} if args["robots_file"] else {
        "suite": args["suite"], "task_id": int(args["task_id"]), "seed": int(args["seed"]),
        "init_state_index": int(args["init_state_index"])}
    robot = NodeSpec(
        "rpent_env_sim", "libero_node", "libero_sim", ns,
        params_files=robot_params(args, "libero_sim.yaml"),
        parameters={**task, "max_episode_steps": int(args["max_episode_steps"]),
                    "privileged": _flag(args["privileged"]), "operator": args["operator"],
                    "render_device": int(args["render_device"])})
    models, model = model_nodes(args, ns)
    # A run without the simulator's object poses needs perception to find anything.
    backend = args["perception"]
    if backend == "auto":
        backend = "none" if _flag(args["privileged"]) else "sim"
    eyes, perception = perception_nodes(args, ns, backend)
    return [robot, *models, *eyes,
            agent_node(args, ns, folder, model, args["max_episode_steps"], perception),
            *view_nodes(args, ns, folder)]


def _given(args: dict, convert: dict) -> dict:
    """Robot parameters from the arguments a user set; an empty one keeps the node's own."""
    given = {}
    for name, to in convert.items():
        if args[name] != "":
            try:
                given[name] = to(args[name])
            except ValueError as err:
                raise ValueError(f"argument {name}:={args[name]}: {err}") from None
    return given


# The scripted expert on an arm: it finds the objects through the robot's perception; the
# arm's ee_delta moves a streamed target, so the arm covers each delta in full, and the
# hand slows down near each goal not to overshoot it while it lags that target. Its steps
# stay within what the robot node's safety layer takes: on the SO-101 a centimetre near
# the table can turn a joint more than its 4 degrees per step.
ARM_SCRIPTED_MODEL = {"objects": "perception", "step_realized": 1.0, "slow_within": 0.05}
ARM_SCRIPTED_STEP = {"franka": 0.002, "so101": 0.005}
# The SO-101 turns each joint 4 degrees a step at most, and its wrist roll alone turns the hand
# about its approach axis: with the expert's 0.1 rad a turn, most of its streams in
# bench/soak.py (reset, then stream) were refused at their first chunk (4.1 degrees of roll).
ARM_SCRIPTED_TURN = {"franka": 0.1, "so101": 0.04}


def arm_model_parameters(arm: str, args: dict) -> dict:
    """The action-model node's parameters that differ on ``arm`` from LIBERO."""
    if args["am_backend"] != "scripted":
        return {}
    return {**ARM_SCRIPTED_MODEL, "max_translation_step": ARM_SCRIPTED_STEP[arm],
            "max_rotation_step": ARM_SCRIPTED_TURN[arm]}


def _arm(args: dict, robot: NodeSpec, twin: Optional["Twin"] = None) -> list:
    """A real arm's run: the robot (and its twin in place of the hardware), then model,
    perception and agent unless driver_only."""
    ns = robot.namespace
    folder = run_dir(args)
    bench, eyes_params = [], {}
    perception = args["perception"]
    if twin is not None:
        bench = twin.nodes(args, ns, folder, robot)
        # The twin's cameras render a frame in a twentieth of a second of CPU, not a
        # RealSense's 30 per second: give a new frame after a request more time to come.
        eyes_params = {"max_age": max(5.0, 10.0 / float(args["twin_camera_rate"]))}
        if perception == "auto":
            perception = "sam3_http"
            args = {**args, "sam3_endpoint": args["sam3_endpoint"] or twin.sam3_endpoint(args)}
    elif perception == "auto":
        perception = "none"
    if _flag(args["driver_only"]):
        return [*bench, robot, *view_nodes(args, ns, folder)]
    models, model = model_nodes(args, ns)
    for node in models:
        node.parameters.update(arm_model_parameters(robot.name, args))
    eyes, perception = perception_nodes(args, ns, perception, eyes_params)
    return [*bench, robot, *models, *eyes,
            agent_node(args, ns, folder, model, args["max_episode_steps"], perception),
            *view_nodes(args, ns, folder)]


@dataclass(frozen=True)
class Twin:
    """An arm's physics twin in place of its hardware (``twin:=true``): the simulator behind
    the driver's wire, its cameras as RealSense drivers publish them (remapped onto the
    robot's camera topics, placed by ``camera_extrinsics``), a SAM3 server answering from
    the physics, and an operator answering the robot's requests (``operator:=auto``)."""

    arm: str  # the scene's arm: franka | so101
    frames: tuple  # (mount frame of 'base', of 'hand')

    def scene(self, args: dict):
        from rpent_twins.scene import load_scene

        scene = load_scene(args["twin_scene"] or self.arm)
        if args["twin_task"]:
            scene.task(args["twin_task"])
        return scene

    @staticmethod
    def sam3_endpoint(args: dict) -> str:
        return f"http://127.0.0.1:{int(args['twin_port']) + 1}"

    def robot_parameters(self, args: dict) -> dict:
        scene = self.scene(args)
        task = scene.task(args["twin_task"]) if args["twin_task"] else scene.tasks[0]
        return {**scene.robot_parameters,
                "external_cameras": [c.name for c in scene.cameras],
                "camera_extrinsics": scene.camera_extrinsics(dict(zip(("base", "hand"),
                                                                      self.frames))),
                "instruction": task.instruction}

    def physics(self, args: dict, folder: str) -> NodeSpec:
        common = ["--scene", args["twin_scene"] or self.arm, "--task", args["twin_task"],
                  "--seed", str(int(args["twin_seed"])), "--twin-port", str(int(args["twin_port"]))]
        if self.arm == "franka":
            return NodeSpec("rpent_twins", "franky_sim", "franka_twin", command=[
                node_executable("rpent_twins", "franky_sim"), "--hostname", args["twin_host"],
                *common])
        return NodeSpec("rpent_twins", "so101_twin", "so101_twin", command=[
            node_executable("rpent_twins", "so101_twin"), *common,
            "--port-link", so101_twin_port(folder), "--calibration-dir",
            os.path.join(folder, "twin_calibration"), "--robot-id", SO101_TWIN_ID])

    def nodes(self, args: dict, ns: str, folder: str, robot: NodeSpec) -> list:
        robot.parameters.update(self.robot_parameters(args))
        host = args["twin_host"] if self.arm == "franka" else "127.0.0.1"
        port = int(args["twin_port"])
        remaps = {}
        for camera in self.scene(args).cameras:
            c = camera.name
            remaps.update({f"{c}/color/image_raw": f"camera/{c}/image_raw",
                           f"{c}/color/camera_info": f"camera/{c}/camera_info",
                           f"{c}/aligned_depth_to_color/image_raw": f"camera/{c}/depth/image_raw",
                           f"{c}/aligned_depth_to_color/camera_info":
                               f"camera/{c}/depth/camera_info"})
        twin = {"twin_host": host, "twin_port": port}
        nodes = [self.physics(args, folder),
                 NodeSpec("rpent_twins", "camera_node", "twin_cameras", ns, parameters={
                     **twin, "scene": args["twin_scene"] or self.arm,
                     "rate": float(args["twin_camera_rate"]), "sam3_port": port + 1},
                          remappings=remaps)]
        if args["operator"] == "auto":
            nodes.append(NodeSpec("rpent_twins", "operator_node", "twin_operator", ns,
                                  parameters=twin))
        return nodes


SO101_TWIN_ID = "so101_twin"


def so101_twin_port(folder: str) -> str:
    """Where the SO-101 twin links its bus's pty: the run folder, one per run."""
    return os.path.join(folder, "so101_twin_port")


def _twin_given(args: dict) -> bool:
    twin = _flag(args["twin"])
    operator = args["operator"] or ("auto" if twin else "human")
    if operator not in ("auto", "human") or (operator == "auto" and not twin):
        raise ValueError(f"operator:={args['operator']}: give human (rpent operator answers), "
                         "or auto on a twin (twin:=true), whose operator judges from the "
                         "physics")
    args["operator"] = operator
    return twin


def _franka(args: dict) -> list:
    twin = Twin("franka", ("fr3_link0", "fr3_hand")) if _twin_given(args) else None
    given = _given(args, {"realtime_mode": str, "relative_dynamics_factor": float,
                          "require_approval": _flag})
    if twin is not None:
        if not args["twin_host"].startswith("127."):
            raise ValueError(f"twin_host:={args['twin_host']}: the twin serves on loopback, "
                             "give a 127.x.y.z address")
        # A rehearsal runs as the FR3 would, but for the real-time kernel it cannot have.
        given = {"realtime_mode": "ignore", **given}
    return _arm(args, NodeSpec(
        "rpent_hw", "franka_node", "franka", args["namespace"].strip("/"),
        params_files=robot_params(args, "franka.yaml"),
        parameters={"robot_ip": args["twin_host"] if twin else args["robot_ip"], **given}),
        twin)


def _so101(args: dict) -> list:
    twin = Twin("so101", ("base_link", "gripper_link")) if _twin_given(args) else None
    given = _given(args, {"calibration_dir": os.path.abspath, "require_approval": _flag})
    port, robot_id = args["port"], args["robot_id"]
    if twin is not None:
        folder = run_dir(args)
        args = {**args, "run_dir": folder}  # the twin's port link and calibration live there
        port, robot_id = so101_twin_port(folder), SO101_TWIN_ID
        given["calibration_dir"] = os.path.join(folder, "twin_calibration")
    return _arm(args, NodeSpec(
        "rpent_hw", "so101_node", "so101", args["namespace"].strip("/"),
        params_files=robot_params(args, "so101.yaml"),
        parameters={"port": port, "robot_id": robot_id, **given}), twin)


def _model_params(args: dict) -> dict:
    """The action-model node's parameters from the am_* arguments given."""
    params = {"backend": args["am_backend"]}
    for arg, name in (("am_checkpoint", "checkpoint"), ("am_endpoint", "endpoint"),
                      ("am_model_io", "model_io"), ("am_device", "device")):
        if args[arg]:
            params[name] = args[arg]
    if args["am_device"] and args["am_backend"] != "lerobot":
        raise ValueError(f"am_device:={args['am_device']} places a model this node runs "
                         f"(am_backend:=lerobot); am_backend:={args['am_backend']} runs none "
                         "here: pick the GPU where its server runs, or leave am_device empty")
    return params


def _model_node(args: dict, ns: str, parameters: dict, required: bool = False) -> NodeSpec:
    python = args["am_python"]
    if python and not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise ValueError(f"am_python:={python} is not an executable file: give a Python "
                         "interpreter, e.g. /opt/venvs/pi05/bin/python")
    return NodeSpec("rpent_am", "am_node", "action_model", ns, parameters=parameters,
                    required=required, prefix=(python,) if python else ())


def _action_model(args: dict) -> list:
    params = {**_model_params(args), "robot_namespace": args["robot_namespace"]}
    return [_model_node(args, args["namespace"].strip("/"), params, required=True)]


# The bring-ups rpent itself registers; installed packages add theirs (bringups()).
BUILT_IN = {b.name: b for b in (
    Bringup("libero_sim", "a LIBERO task: simulated robot, action model, agent", (
        libero_argument("suite", "LIBERO / LIBERO-PRO / LIBERO-Plus suite"),
        libero_argument("task_id", "task index in the suite"),
        libero_argument("seed", "simulator seed"),
        libero_argument("init_state_index", "recorded initial state of the task"),
        libero_argument("max_episode_steps", "simulator steps before the episode ends"),
        libero_argument("privileged", "false: no object poses or native success for the "
                                      "agent, as on a real arm"),
        libero_argument("operator", "who answers the agent's operator requests: auto (the "
                                    "simulator) | human (rpent operator, the Foxglove layout)"),
        libero_argument("render_device", "EGL device (GPU index) the simulator renders on; -1: "
                                         "MUJOCO_EGL_DEVICE_ID, else the first"),
        *AGENT_ARGS, *model_args("scripted"),
        *perception_args("auto", "auto (sim when privileged:=false, else none) | sim | "
                                 "sam3_http | none"), *VIEW_ARGS), _libero_sim),
    Bringup("franka", "a Franka FR3 through franky, action model, agent", (
        node_argument(FrankaNodeSettings, "robot_ip", "address of the robot's control unit"),
        Argument("realtime_mode", "", "enforce (a real FR3: PREEMPT_RT kernel) | ignore "
                                      "(franky-sim, development); empty: the node's own "
                                      "(enforce; ignore on a twin)"),
        Argument("relative_dynamics_factor", "", "scale of franky's velocity, acceleration "
                                                 "and jerk, (0, 1]; empty: the node's own"),
        *ARM_ARGS,
        Argument("max_episode_steps", "1000", "control steps before the episode ends"),
        *twin_args("franka"),
        Argument("twin_host", "127.0.0.2", "loopback address the Franka twin serves on "
                                            "(twin:=true; robot_ip is then not used)"),
        *AGENT_ARGS, *model_args("none"), *perception_args("auto", ARM_PERCEPTION),
        *VIEW_ARGS), _franka),
    Bringup("so101", "an SO-101 arm through LeRobot, action model, agent", (
        node_argument(SO101NodeSettings, "port", "serial port of the arm's Feetech bus"),
        node_argument(SO101NodeSettings, "robot_id", "LeRobot robot id (names the calibration "
                                                     "file)"),
        node_argument(SO101NodeSettings, "calibration_dir", "folder of <robot_id>.json from "
                                                            "lerobot-calibrate; empty: "
                                                            "LeRobot's default folder"),
        *ARM_ARGS,
        Argument("max_episode_steps", "1000", "control steps before the episode ends"),
        *twin_args("so101"),
        *AGENT_ARGS, *model_args("none"), *perception_args("auto", ARM_PERCEPTION),
        *VIEW_ARGS), _so101),
    Bringup("action_model", "only the action-model node (for a GPU host)", (
        Argument("am_backend", "lerobot",
                 "scripted | lerobot | openpi | rpent_http | rpent_vla | rpent_wam"),
        Argument("am_checkpoint", "", "LeRobot checkpoint folder"),
        Argument("am_endpoint", "", "policy server for openpi / rpent_*"),
        MODEL_IO_ARG, *MODEL_RUNTIME_ARGS,
        Argument("robot_namespace", "", "robot whose topics give the latest observation"),
        Argument("namespace", "", "namespace of the model node"),
    ), _action_model),
)}


def bringups() -> dict:
    """Every bring-up by name: the built-in ones, then those installed packages contribute
    (entry point group ``rpent.bringups``, :mod:`rpent_contract.contributions`)."""
    found = dict(BUILT_IN)
    for each in contributions(BRINGUP_GROUP, Bringup):
        if each.value.name in found:
            raise ContributionError(f"{each} registers a bring-up named '{each.value.name}', "
                                    "which exists already: rename it in that package")
        found[each.value.name] = each.value
    return found


def get(bringup: str) -> Bringup:
    """The bring-up named ``bringup``, or a ValueError naming those there are."""
    known = bringups()
    try:
        return known[bringup]
    except KeyError:
        raise ValueError(f"unknown bring-up '{bringup}'; choose one of "
                         f"{', '.join(known)}") from None


def describe(bringup: str, given: Optional[dict] = None) -> list:
    """The nodes of ``bringup`` for the given argument values (defaults for the rest)."""
    b = get(bringup)
    return b.nodes(b.resolve(given or {}))
