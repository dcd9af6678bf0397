"""The launch files and the starter describe the same runs.

Both read rpent.bringup. What could still drift is each launch file's own text (its
argument table, the bring-up it names) and, where launch_ros is installed, the
translation into launch actions: both are checked here, the latter only where
launch_ros imports (it does not on the PyPI-wheel setup; on Humble it does).
"""
from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from rpent.bringup import BUILT_IN, describe

LAUNCH = Path(__file__).resolve().parents[1] / "launch"
needs_launch_ros = pytest.mark.skipif(
    importlib.util.find_spec("launch_ros") is None,
    reason="launch_ros is not installed (PyPI-wheel ROS); checked on Humble")
# What `ros2 launch rpent FILE ARGS` does: a LaunchService, its return code the command's.
RUN_LAUNCH = """
import sys
from launch import LaunchService
from launch.actions import IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
args = [a.split(":=", 1) for a in sys.argv[2:]]
service = LaunchService(argv=sys.argv[2:])
service.include_launch_description(IncludeLaunchDescription(
    PythonLaunchDescriptionSource(sys.argv[1]), launch_arguments=args))
sys.exit(service.run())
"""


def _documented_arguments(path: Path) -> dict:
    doc = ast.get_docstring(ast.parse(path.read_text()))
    table = doc.split("Launch arguments (name, default, what):\n", 1)[1].split("\n\n", 1)[0]
    rows = [line.split(None, 2) for line in table.splitlines()]
    return {name: ("" if default == "''" else default) for name, default, *_ in rows}


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_every_bringup_has_a_launch_file_documenting_its_arguments(name):
    path = LAUNCH / f"{name}.launch.py"
    assert path.exists(), f"{path} missing: every bring-up needs a launch file"
    documented = _documented_arguments(path)
    declared = {a.name: a.default for a in BUILT_IN[name].arguments}
    assert documented == declared, "the launch file's argument table drifted from rpent.bringup"
    calls = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Call)
             and getattr(n.func, "id", "") == "launch_description"]
    assert [c.args[0].value for c in calls] == [name]


def test_every_launch_file_is_a_bringup():
    assert sorted(p.name[:-len(".launch.py")] for p in LAUNCH.glob("*.launch.py")) == \
        sorted(BUILT_IN)


@needs_launch_ros
@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_launch_actions_match_the_description(name):
    from launch import LaunchContext
    from launch.actions import DeclareLaunchArgument, OpaqueFunction
    from launch_ros.actions import Node

    from rpent.launch_files import launch_description

    given = {"run_dir": "/tmp/run"} if any(a.name == "run_dir"
                                           for a in BUILT_IN[name].arguments) else {}
    context = LaunchContext()
    entities = launch_description(name).entities
    for entity in entities:
        if isinstance(entity, DeclareLaunchArgument):
            context.launch_configurations[entity.name] = given.get(entity.name,
                                                                   entity.default_value[0].text)
    actions = []
    for entity in entities:
        if isinstance(entity, OpaqueFunction):
            actions += entity.execute(context) or []
    nodes = [a for a in actions if isinstance(a, Node)]
    expected = [s for s in describe(name, given) if not s.command]
    assert [(n.node_package, n.node_executable) for n in nodes] == \
        [(s.package, s.executable) for s in expected]


def test_unknown_arguments_are_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown argument\(s\) taks_id \(did you mean "
                                         r"task_id\?\); this bring-up takes .*task_id"):
        describe("libero_sim", {"taks_id": "3"})
    with pytest.raises(ValueError, match="unknown bring-up"):
        describe("libero")


# Launch arguments handed to a node's parameter of the same name: with no argument given, a
# launched node must run as the same node started from its config file alone.
FORWARDED = {
    "agent.yaml": ("model", "base_url", "instruction", "max_turns", "mcp_port", "policy_mode",
                   "plan_file"),
    "libero_sim.yaml": ("suite", "task_id", "seed", "init_state_index", "max_episode_steps",
                        "privileged"),
}


@pytest.mark.parametrize("config", sorted(FORWARDED))
def test_launch_defaults_are_the_config_files(config):
    import yaml

    from rpent.bringup import config_dir

    block = yaml.safe_load((Path(config_dir()) / config).read_text())["/**"]["ros__parameters"]
    defaults = {a.name: a.default for a in BUILT_IN["libero_sim"].arguments}
    drifted = {name: (defaults[name], block[name]) for name in FORWARDED[config]
               if defaults[name] != ("" if block[name] is None else str(block[name]).lower())}
    assert not drifted, f"launch default vs {config}: {drifted}"


def test_ros2_launch_command_line_is_checked_like_the_starters():
    from rpent.launch_files import launched_directly

    bringup = BUILT_IN["libero_sim"]
    with pytest.raises(ValueError, match=r"tsk_id \(did you mean task_id\?\)"):
        bringup.check_command_line(["tsk_id:=3", "suite:=libero_10"])
    # ros2 launch's own --launch-prefix arrives as an argument of the launch file.
    bringup.check_command_line(["task_id:=3", "launch-prefix:=xterm -e"])
    ros2 = "/opt/ros/humble/bin/ros2"
    assert launched_directly("libero_sim", [ros2, "launch", "rpent", "libero_sim.launch.py",
                                            "task_id:=3"])
    assert launched_directly("libero_sim", [ros2, "launch", "/ws/launch/libero_sim.launch.py"])
    # Included from a user's own launch file: its arguments are not ours to refuse.
    assert not launched_directly("libero_sim", [ros2, "launch", "lab", "bench.launch.py",
                                                "lab_option:=1"])


def test_libero_sim_description():
    nodes = {n.name: n for n in describe("libero_sim", {"task_id": "3", "run_dir": "/tmp/r",
                                                        "namespace": "robot1"})}
    assert sorted(nodes) == ["action_model", "agent", "libero_sim"]
    assert nodes["libero_sim"].parameters["task_id"] == 3
    assert all(n.namespace == "robot1" for n in nodes.values())
    assert nodes["agent"].required and nodes["agent"].parameters["run_dir"] == "/tmp/r"
    assert nodes["agent"].parameters["action_model"] == "/robot1/action_model"
    assert nodes["libero_sim"].params_files[0].endswith("libero_sim.yaml")
    assert Path(nodes["libero_sim"].params_files[0]).exists()

    shared = {n.name for n in describe("libero_sim", {"action_model": "/gpu/action_model",
                                                      "dashboard": "true", "record": "true",
                                                      "run_dir": "/tmp/r"})}
    assert shared == {"libero_sim", "agent", "foxglove_bridge", "recorder"}


def test_the_model_node_runs_under_its_own_interpreter_on_its_device(tmp_path):
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)
    nodes = {n.name: n for n in describe("libero_sim", {
        "am_backend": "lerobot", "am_checkpoint": "/models/act", "am_python": str(python),
        "am_device": "cuda:1", "render_device": "1", "run_dir": "/tmp/r"})}
    model = nodes["action_model"]
    assert model.argv()[0] == str(python) and model.argv()[1].endswith("/am_node")
    assert model.parameters["device"] == "cuda:1"
    assert nodes["libero_sim"].parameters["render_device"] == 1
    with pytest.raises(ValueError, match="am_python:=/nope is not an executable file"):
        describe("action_model", {"am_python": "/nope"})
    with pytest.raises(ValueError, match="am_backend:=openpi runs none here"):
        describe("action_model", {"am_backend": "openpi", "am_device": "cuda:0"})


@pytest.mark.parametrize("ros2_bag", [False, True], ids=["rpent_recorder", "ros2_bag_record"])
def test_recordings_hold_depth_only_with_record_depth(ros2_bag, monkeypatch):
    """Aligned depth, which the cameras' pattern also matches, is left out of a bag unless
    record_depth:=true, by either recorder (the recorder's own test records both ways)."""
    import re

    from rpent import bringup
    monkeypatch.setattr(bringup, "_have_rosbag2_mcap", lambda: ros2_bag)
    args = {"run_dir": "/tmp/r", "record": "true", "namespace": "robot1"}
    plain = {n.name: n for n in describe("libero_sim", args)}["recorder"]
    depth = {n.name: n for n in describe("libero_sim", {**args, "record_depth": "true"})}[
        "recorder"]
    if not ros2_bag:
        assert "exclude" not in plain.parameters  # the recorder's default leaves depth out
        assert depth.parameters["exclude"] == [""]
        return

    def records(command, topic):
        include = command[command.index("-e") + 1]
        exclude = command[command.index("-x") + 1] if "-x" in command else "(?!)"
        return bool(re.fullmatch(include, topic)) and not re.fullmatch(exclude, topic)
    for topic in ("/robot1/camera/agentview/image_raw", "/robot1/camera/agentview/camera_info"):
        assert records(plain.command, topic) and records(depth.command, topic)
    for topic in ("/robot1/camera/agentview/depth/image_raw",
                  "/robot1/camera/agentview/depth/camera_info"):
        assert not records(plain.command, topic) and records(depth.command, topic)


def test_serve_keeps_the_agent_serving_with_a_folder_per_run():
    """serve:=true: the agent runs nothing at start-up (runs come from agent/start_run, as
    tests/test_session.py drives them) and writes each run in a folder inside the session's."""
    args = {"run_dir": "/tmp/session", "serve": "true"}
    agent = {n.name: n for n in describe("libero_sim", args)}["agent"].parameters
    assert agent["run_at_startup"] is False and agent["instruction"] == ""
    assert (agent["output_dir"], agent["run_dir"]) == ("/tmp/session", "")
    once = {n.name: n for n in describe("libero_sim", {"run_dir": "/tmp/r"})}["agent"]
    assert once.parameters["run_at_startup"] is True and once.parameters["run_dir"] == "/tmp/r"
    with pytest.raises(ValueError, match="with serve:=true give each run's instruction"):
        describe("libero_sim", {**args, "instruction": "open the drawer"})


def test_the_agents_exit_is_the_runs_and_any_other_node_leaving_fails_it():
    """The rule both ``ros2 launch`` (launch_files.on_node_exit) and rpent.start apply when
    a node exits: a user's shell and CI read the run's outcome from the exit code."""
    nodes = {n.name: n for n in describe("libero_sim", {"run_dir": "/tmp/r", "record": "true",
                                                        "dashboard": "true"})}
    assert nodes["agent"].exit_outcome(0) == (0, "agent finished")
    assert nodes["agent"].exit_outcome(1) == (1, "agent exited with code 1")
    for name in ("libero_sim", "action_model", "recorder", "foxglove_bridge"):
        for returncode in (0, 2, -9):
            code, why = nodes[name].exit_outcome(returncode)
            assert code != 0 and f"{name} exited with code {returncode}" in why, (name, why)


def test_the_dashboard_and_the_mcp_server_listen_on_different_ports_by_default():
    nodes = {n.name: n for n in describe("libero_sim", {"run_dir": "/tmp/r", "dashboard": "true",
                                                        "planner": "mcp"})}
    bridge, mcp = nodes["foxglove_bridge"].parameters["port"], nodes["agent"].parameters["mcp_port"]
    legacy = nodes["foxglove_bridge"].parameters["legacy_port"]
    assert len({bridge, legacy, mcp}) == 3, (bridge, legacy, mcp)
    moved = {n.name: n for n in describe("libero_sim", {"run_dir": "/tmp/r", "dashboard": "true",
                                                        "dashboard_port": "9001",
                                                        "planner": "mcp", "mcp_port": "9002"})}
    assert moved["foxglove_bridge"].parameters["port"] == 9001
    assert moved["agent"].parameters["mcp_port"] == 9002


@pytest.mark.parametrize("name", ["libero_sim", "franka", "so101"])
def test_dashboard_language_names_its_layout_and_sets_the_agents_language(name):
    """dashboard_language:=zh-cn: the run summary names the Chinese layout, a file the
    package ships, and the agent writes for the operator in Chinese."""
    for language, layout in (("en", "foxglove_layout.json"),
                             ("zh-cn", "foxglove_layout.zh-cn.json")):
        agent = {n.name: n for n in describe(name, {
            "run_dir": "/tmp/r", "dashboard": "true",
            "dashboard_language": language})}["agent"].parameters
        assert agent["language"] == language
        assert Path(agent["dashboard_layout"]).name == layout
        assert Path(agent["dashboard_layout"]).is_file()
    with pytest.raises(ValueError, match="dashboard_language:=fr: choose one of en, zh-cn"):
        describe(name, {"run_dir": "/tmp/r", "dashboard_language": "fr"})


def test_real_arms_start_without_a_model_by_default():
    for name in ("franka", "so101"):
        nodes = describe(name, {"run_dir": "/tmp/r"})
        assert "action_model" not in {n.name for n in nodes}
        agent = next(n for n in nodes if n.name == "agent")
        assert agent.parameters["action_model"] == ""


def test_the_scripted_expert_on_an_arm_finds_objects_through_perception():
    for name in ("franka", "so101"):
        nodes = {n.name: n for n in describe(name, {"run_dir": "/tmp/r", "twin": "true",
                                                    "am_backend": "scripted"})}
        model = nodes["action_model"].parameters
        assert (model["backend"], model["objects"], model["step_realized"]) == \
            ("scripted", "perception", 1.0)
        assert model["max_translation_step"] == {"franka": 0.002, "so101": 0.005}[name]
        assert model["max_rotation_step"] == {"franka": 0.1, "so101": 0.04}[name]
        assert "action_space" not in model  # the robot's default: ee_delta
        assert nodes["agent"].parameters["perception"] == "perception"
    lerobot = {n.name: n for n in describe("franka", {"run_dir": "/tmp/r", "am_backend":
                                                      "lerobot", "am_checkpoint": "/m"})}
    assert "objects" not in lerobot["action_model"].parameters


def test_a_per_robot_file_gives_each_robot_its_own_block(tmp_path):
    robots = tmp_path / "robots.yaml"
    robots.write_text("/robot2/libero_sim:\n  ros__parameters:\n    task_id: 3\n")
    robot = describe("libero_sim", {"namespace": "robot2", "robots_file": str(robots),
                                    "run_dir": "/tmp/r"})[0]
    assert robot.params_files[-1] == str(robots), "the per-robot file must come last"
    assert "task_id" not in robot.parameters, "a -p task_id would override the robot's block"


def test_a_bench_is_configured_from_launch_arguments(tmp_path):
    franka = {n.name: n for n in describe("franka", {
        "run_dir": "/tmp/r", "realtime_mode": "ignore", "relative_dynamics_factor": "0.1",
        "require_approval": "true", "plan_file": "plan.yaml"})}
    assert franka["franka"].parameters == {"robot_ip": "172.16.0.2", "realtime_mode": "ignore",
                                           "relative_dynamics_factor": 0.1,
                                           "require_approval": True}
    assert franka["agent"].parameters["plan_file"] == str(Path("plan.yaml").resolve())
    # Arguments left empty keep what the config file says.
    plain = describe("franka", {"run_dir": "/tmp/r"})[0]
    assert plain.parameters == {"robot_ip": "172.16.0.2"}
    so101 = describe("so101", {"run_dir": "/tmp/r", "calibration_dir": str(tmp_path)})[0]
    assert so101.parameters["calibration_dir"] == str(tmp_path)
    with pytest.raises(ValueError, match="relative_dynamics_factor:=fast"):
        describe("franka", {"run_dir": "/tmp/r", "relative_dynamics_factor": "fast"})


def test_driver_only_starts_the_robot_without_agent_or_model():
    for name in ("franka", "so101"):
        nodes = describe(name, {"run_dir": "/tmp/r", "driver_only": "true",
                                "am_backend": "scripted", "dashboard": "true"})
        assert [n.name for n in nodes] == [name, "foxglove_bridge"]
        assert not any(n.required for n in nodes)


def test_twin_true_puts_the_twin_its_cameras_and_operator_in_place_of_the_hardware():
    nodes = {n.name: n for n in describe("franka", {
        "run_dir": "/tmp/r", "twin": "true", "twin_task": "bar_in_bowl", "twin_seed": "4",
        "twin_port": "9100"})}
    assert list(nodes) == ["franka_twin", "twin_cameras", "twin_operator", "franka",
                           "perception", "agent"]
    physics = nodes["franka_twin"].command
    assert physics[physics.index("--task") + 1] == "bar_in_bowl"
    assert physics[physics.index("--seed") + 1] == "4"
    assert physics[physics.index("--hostname") + 1] == "127.0.0.2"
    robot = nodes["franka"].parameters
    assert robot["robot_ip"] == "127.0.0.2" and robot["realtime_mode"] == "ignore"
    assert robot["external_cameras"] == ["scene", "wrist"]
    assert [e.split()[0] for e in robot["camera_extrinsics"]] == ["fr3_link0", "fr3_hand"]
    assert robot["instruction"] == "put the blue bar in the bowl"
    # The cameras' RealSense topics are remapped onto the robot's, as on a real bench.
    remaps = nodes["twin_cameras"].remappings
    assert remaps["scene/aligned_depth_to_color/image_raw"] == "camera/scene/depth/image_raw"
    assert remaps["wrist/color/camera_info"] == "camera/wrist/camera_info"
    assert nodes["perception"].parameters == {"backend": "sam3_http", "max_age": 5.0,
                                              "sam3_endpoint": "http://127.0.0.1:9101"}
    so101 = {n.name: n for n in describe("so101", {"run_dir": "/tmp/r", "twin": "true",
                                                   "operator": "human"})}
    assert "twin_operator" not in so101, "operator:=human leaves the answers to a person"
    port = so101["so101"].parameters["port"]
    assert port in so101["so101_twin"].command and port.startswith("/tmp/r/")
    assert so101["so101"].parameters["tcp_offset"] == [0.0, 0.0, 0.017]


@pytest.mark.parametrize("arguments, why", [
    ({"operator": "auto"}, "operator:=auto: give human"),
    ({"twin": "true", "twin_host": "10.0.0.2"}, "twin_host:=10.0.0.2: the twin serves on "
                                                "loopback"),
    ({"twin": "true", "twin_task": "juggle"}, "no task 'juggle'"),
])
def test_twin_arguments_that_cannot_work_are_refused(arguments, why):
    with pytest.raises(ValueError, match=why):
        describe("franka", {"run_dir": "/tmp/r", **arguments})


@needs_launch_ros
@pytest.mark.slow
@pytest.mark.parametrize("arguments, code, why", [
    ([], 0, "agent status   : success"),
    (["max_turns:=1"], 1, "agent exited with code 1"),
    (["suite:=no_such_suite"], 1, "libero_sim exited with code 2"),   # ends before the agent's
    #                                                                    start-up timeout
    (["tsk_id:=3"], 1, "tsk_id (did you mean task_id?)"),
])
def test_ros2_launch_exits_with_the_runs_outcome(arguments, code, why, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", RUN_LAUNCH, str(LAUNCH / "libero_sim.launch.py"),
         f"run_dir:={tmp_path / 'run'}", *arguments],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=400)
    assert proc.returncode == code and why in proc.stdout, proc.stdout[-4000:]
    if "libero_sim exited" in why:  # the agent was only stopped: not named as a cause
        assert "agent exited" not in proc.stdout, proc.stdout[-4000:]
