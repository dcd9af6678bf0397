"""The dashboard as a user opens it: the shipped Lichtblick/Foxglove layout uses real panel
types and only channels a LIBERO bring-up serves; a viewer or recorder that starts after
the agent's run still gets the task status and the whole agent log; a recorded bag has
what the layout's panels show.

A LIBERO robot, a scripted action model (named action_model, as in a bring-up) and a
scripted agent run as processes; the bridge runs with config/foxglove_bridge.yaml and the
recorder with its default topics.
"""
from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from rpent_common.processes import wait_until
from rpent_contract.client import RobotClient, wait_future
from rpent_foxglove.client import FoxgloveClient, decoder_for

CONFIG = Path(__file__).resolve().parents[1] / "config"
LAYOUT = json.loads((CONFIG / "foxglove_layout.json").read_text())

# Every panel type Lichtblick registers: the `type:` entries of its panel list,
# lichtblick-suite/lichtblick packages/suite-base/src/panels/index.ts (v1.28.1), with
# TAB_PANEL_TYPE = "Tab" from packages/suite-base/src/util/constants.ts. Any other type
# opens as "Unknown panel type".
LICHTBLICK_PANEL_TYPES = {
    "3D", "DiagnosticStatusPanel", "DiagnosticSummary", "Image", "Indicator", "Gauge",
    "Teleop", "map", "Parameters", "Plot", "PieChart", "Publish", "CallService",
    "RawMessages", "RawMessagesVirtual", "RosOut", "StateTransitions", "Table", "TopicGraph",
    "SourceInfo", "GlobalVariableSliderPanel", "NodePlayground", "Tab", "PlaybackPerformance",
}


def _leaves(node):
    """The panels a layout node places, those inside its Tab panels' tabs too."""
    if node is None:
        return []
    if isinstance(node, str):
        tabs = LAYOUT["configById"].get(node, {}).get("tabs", []) \
            if node.startswith("Tab!") else []
        return [node] + [p for tab in tabs for p in _leaves(tab.get("layout"))]
    return _leaves(node["first"]) + _leaves(node["second"])


def _topic(message_path: str) -> str:
    return message_path.split(".", 1)[0]   # '/joint_states.position[0]' -> '/joint_states'


# Published only by a world-action model's node (a scripted model foresees nothing), and by
# a model fed through a model_io (the scripted expert is fed no images).
MODEL_VIEWS = {"/action_model/predicted/agentview", "/action_model/predicted/robot0_eye_in_hand",
             "/action_model/policy_input/agentview",
             "/action_model/policy_input/robot0_eye_in_hand"}


def layout_topics() -> set:
    """Every topic a panel of the layout subscribes to, but a world-action model's and a
    model_io's."""
    topics = set()
    for panel_id, config in LAYOUT["configById"].items():
        kind = panel_id.split("!", 1)[0]
        if kind == "Image":
            topics.add(config["imageMode"]["imageTopic"])
            topics.update(config["imageMode"].get(key) for key in ("calibrationTopic",)
                          if key in config["imageMode"])
            topics.update(config["topics"])  # 3D markers drawn over the image
        elif kind == "3D":
            topics.update(config["topics"])
        elif kind in ("Plot", "StateTransitions"):
            topics.update(_topic(p["value"]) for p in config["paths"])
        elif kind == "RosOut":
            topics.add(config["topicToRender"])
        elif kind == "RawMessages":
            topics.add(_topic(config["topicPath"]))
    assert MODEL_VIEWS <= topics
    return topics - MODEL_VIEWS


def layout_services() -> set:
    return {c["serviceName"] for p, c in LAYOUT["configById"].items()
            if p.startswith("CallService!")}


def test_layout_panels_are_lichtblick_panels():
    ids = set(LAYOUT["configById"])
    assert set(_leaves(LAYOUT["layout"])) == ids, "every panel placed once, every one configured"
    unknown = {i for i in ids if i.split("!", 1)[0] not in LICHTBLICK_PANEL_TYPES}
    assert not unknown, f"Lichtblick shows 'Unknown panel type' for {sorted(unknown)}"
    # The 3D panel's default frame labels (0.2 m) and axes (~0.15 m) hide a tabletop scene.
    (scene,) = [c for i, c in LAYOUT["configById"].items() if i.startswith("3D!")]
    assert scene["scene"]["transforms"]["labelSize"] <= 0.05
    assert scene["scene"]["transforms"]["axisScale"] <= 0.5


def _areas(node, x=0.0, y=0.0, w=1.0, h=1.0):
    """Each top-level panel's (x, y, width, height), as fractions of the window's panel area."""
    if isinstance(node, str):
        return {node: (x, y, w, h)}
    share = node.get("splitPercentage", 50) / 100
    if node["direction"] == "row":
        return {**_areas(node["first"], x, y, w * share, h),
                **_areas(node["second"], x + w * share, y, w * (1 - share), h)}
    return {**_areas(node["first"], x, y, w, h * share),
            **_areas(node["second"], x, y + h * share, w, h * (1 - share))}


def test_every_button_has_room_at_1366x768_with_the_viewers_sidebar_open():
    """Lichtblick's Call Service panel always shows its request and response boxes; side by
    side (`horizontal`), its button stays inside the panel from 180 px high and 125 px wide
    (measured in Lichtblick 1.19 and 1.24 web builds, headless Chromium). At 1366x768 with
    the viewer's left sidebar open, the panels share about 1046 x 724 px; the shipped
    layout, smaller shares, had the Yes / No buttons below their panels, where a click
    lands on the next panel."""
    areas = _areas(LAYOUT["layout"])
    buttons = {p for p in LAYOUT["configById"] if p.startswith("CallService!")}
    assert buttons <= set(areas), "a button inside a tab is hidden until its tab is chosen"
    for panel in sorted(buttons):
        _, _, width, height = areas[panel]
        assert LAYOUT["configById"][panel]["layout"] == "horizontal", panel
        assert height * 724 >= 180 and width * 1046 >= 125, (panel, width, height)


def test_images_with_a_3d_overlay_name_their_calibration():
    """An Image panel draws markers (the intended path) over its camera only from the
    camera's calibration; without one Lichtblick shows the image and silently no path."""
    for panel, config in LAYOUT["configById"].items():
        if panel.startswith("Image!") and config.get("topics"):
            image = config["imageMode"]["imageTopic"]
            assert config["imageMode"].get("calibrationTopic") == \
                image.rsplit("/", 1)[0] + "/camera_info", panel


def test_the_3d_view_labels_only_each_arms_base_end_effector_and_cameras(tmp_path):
    """The shipped arms' other link frames are hidden in the 3D panel (their meshes still
    show), so the frames drawn and labelled are each robot's base and end effector, the
    cameras' and the world's."""
    import importlib.util

    import yaml

    from rpent_env_sim.libero_sim import panda_urdf
    from rpent_hw.so101.kinematics import model_path

    franky = Path(importlib.util.find_spec("franky_sim").submodule_search_locations[0])
    urdfs = {"libero_sim": panda_urdf(tmp_path), "franka": franky / "assets" / "fr3.urdf",
             "so101": model_path().with_name("so101_new_calib.urdf")}
    shown = set()
    links = set()
    for robot, urdf in urdfs.items():
        links |= set(re.findall(r'<link name="([^"]+)"', urdf.read_text()))
        config = yaml.safe_load((CONFIG / f"{robot}.yaml").read_text())["/**"]["ros__parameters"]
        shown |= {config.get("base_frame", "base_link"), config.get("ee_frame", "ee_link")}
    (scene,) = [c for i, c in LAYOUT["configById"].items() if i.startswith("3D!")]
    hidden = {key.removeprefix("frame:") for key, frame in scene["transforms"].items()
              if frame.get("visible") is False}
    assert shown <= links and hidden == links - shown
    assert scene["scene"]["transforms"]["showLabel"]


@pytest.mark.parametrize("language", ["zh-cn"])
def test_each_language_has_the_layout_with_every_shown_text_translated(language):
    """The shipped layout of each language the dashboard offers is the English one with
    every text a viewer shows translated (the same panels, topics and services), and the
    agent writes for the operator in the same languages."""
    from rpent_agent.prompts import LANGUAGES as AGENT_LANGUAGES
    from rpent_foxglove.layout import LANGUAGES, layout_file, shown_texts, translate

    assert set(AGENT_LANGUAGES) == set(LANGUAGES)
    shipped = json.loads((CONFIG / layout_file(language)).read_text())
    assert shipped == translate(LAYOUT, language), \
        "the shipped layout is stale: python -m rpent_foxglove.layout config"
    english = shown_texts(LAYOUT)
    assert len(english) >= 20 and not english & shown_texts(shipped)
    assert all(any("\u4e00" <= c <= "\u9fff" for c in text) for text in shown_texts(shipped))
    changed = json.loads(json.dumps(LAYOUT).replace('"Cameras"', '"Camera views"'))
    with pytest.raises(ValueError, match=r"no zh-cn translation: \['Camera views'\]"):
        translate(changed, language)


@pytest.fixture(scope="module")
def ran(rclpy_context, node_factory, tmp_path_factory):
    """Robot, action model and agent up, and one agent run finished: everything a viewer
    or recorder started now has missed. Yields the run's events as a subscriber that was
    there from the start got them, and the robot's base frame."""
    from rpent_contract.client import ActionClient
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    from rpent_interfaces.action import RunTask
    from rpent_interfaces.msg import AgentEvent

    tmp = tmp_path_factory.mktemp("dashboard")
    plan = tmp / "plan.yaml"
    plan.write_text("- tool: gripper\n  args: {action: open}\n"
                    "- tool: gripper\n  args: {action: close}\n"
                    "- tool: get_object_poses\n"
                    "- tool: finish\n  args: {status: success, summary: done}\n")
    node_factory("rpent_env_sim", "libero_node", {}, name="dash_robot")
    node_factory("rpent_am", "am_node", {"backend": "scripted"}, name="action_model")
    robot = RobotClient()
    info = robot.wait_ready(180)
    agent = node_factory("rpent_agent", "agent_node",
                         {"planner": "scripted", "plan_file": str(plan), "video": False,
                          "output_dir": str(tmp / "runs")}, name="agent",
                         remaps={"__node": "agent"})
    node = robot.node   # spun by the client's executor
    events = []
    node.create_subscription(AgentEvent, "/agent/events", events.append, QoSProfile(
        depth=1000, reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL))
    action = ActionClient(node, RunTask, "/agent/run_task")
    try:
        assert action.wait_for_server(timeout_sec=120), agent.log_tail()
        handle = wait_future(action.send_goal_async(RunTask.Goal(instruction="open, close")),
                             10, "goal")
        assert handle.accepted
        result = wait_future(handle.get_result_async(), 120, "run_task result").result
        assert result.summary == "done" and result.turns == 4, result
        wait_until(lambda: any(e.kind == AgentEvent.KIND_FINISH for e in events), 30,
                   what="the agent's finish event")
        yield [_summary(e) for e in events], info.base_frame
    finally:
        action.destroy()
        robot.close()


def _summary(event) -> tuple:
    return event.kind, event.turn, event.tool_name, event.text


def _check_log(lines, events):
    assert len(lines) == len(events), lines
    assert lines[0].startswith("[turn ") and "tool_call: gripper(" in lines[0], lines
    assert "finish" in lines[-1] and "done" in lines[-1], lines


LATCHED = ["/task_status", "/agent/events", "/agent/log", "/agent/activity", "/agent/markers",
           "/rosout"]
# The run's timeline (the plan of the ``ran`` fixture): each call, then how it ended.
TIMELINE = ["gripper", "gripper: ok", "gripper", "gripper: ok", "get_object_poses",
            "get_object_poses: ok", "finish", "finish: ok", "finished: success"]


def _history_complete(events):
    """Whether a viewer's messages hold the latched topics' whole history of the run."""
    def complete(messages):
        topics = [m.topic for m in messages]
        return (topics.count("/task_status") >= 1 and topics.count("/agent/events") >= len(events)
                and topics.count("/agent/log") >= len(events) and "/agent/markers" in topics
                and topics.count("/agent/activity") >= len(TIMELINE)
                and any(m.topic == "/rosout" and b"bridging /task_status" in m.data
                        for m in messages))
    return complete


def _check_history(got, channels, events):
    decode = {c["topic"]: decoder_for(c) for c in channels}
    by_topic = {t: [decode[t](m.data) for m in got if m.topic == t] for t in LATCHED}
    # The newest; a viewer that subscribes while the bridge is still taking the robot's
    # history (its publisher keeps one for recorders) may see earlier statuses go by.
    statuses = by_topic["/task_status"]
    status = statuses[-1]
    assert status.instruction, "the current task, though the robot is idle"
    assert {s.episode_id for s in statuses} == {status.episode_id}, \
        [(s.episode_id, s.step) for s in statuses]
    assert [_summary(e) for e in by_topic["/agent/events"]] == events
    _check_log([m.msg for m in by_topic["/agent/log"]], events)
    assert [m.data for m in by_topic["/agent/activity"]] == TIMELINE
    (markers,) = by_topic["/agent/markers"]
    assert {"alphabet_soup_1", "basket_1"} <= {m.text for m in markers.markers}
    # The nodes' log lines from before the viewer came (the Nodes tab): the bridge's own.
    assert any(m.msg.startswith("bridging /task_status") and m.level == 20
               for m in by_topic["/rosout"]), [m.msg for m in by_topic["/rosout"]][:20]


def test_late_viewer_gets_task_status_whole_agent_log_and_every_layout_channel(ran, node_factory):
    """The bridge and two viewers start after the run, the robot idle: both viewers get the
    current task status and every agent event and log line once, in order."""
    events, _ = ran
    bridge = node_factory("rpent_foxglove", "bridge", {"port": 0, "stats_period": 0.0},
                          name="dash_bridge", params_file=CONFIG / "foxglove_bridge.yaml")
    port = wait_until(lambda: (m := re.search(r"ws://127\.0\.0\.1:(\d+)", bridge.log_tail(200)))
                      and int(m.group(1)), 60, what="the bridge to listen")
    url = f"ws://127.0.0.1:{port}"
    latched = LATCHED
    complete = _history_complete(events)

    async def scenario():
        async with FoxgloveClient(url) as first:
            await first.wait_for_topics(sorted(layout_topics()), 90)
            # Services are advertised as the bridge discovers them.
            await first.collect(10, until=lambda _: layout_services() <= set(first.services))
            assert layout_services() <= set(first.services), sorted(first.services)
            await first.subscribe(latched)
            got_first = await first.collect(30, until=complete)
            async with FoxgloveClient(url) as second:
                await second.wait_for_topics(latched, 30)
                await second.subscribe(latched)
                got_second = await second.collect(30, until=complete)
                # The second viewer's history must not reach the first one again.
                again = await first.collect(1.5)
            return [first.by_topic(t) for t in latched], got_first, got_second, again

    channels, got_first, got_second, again = asyncio.run(scenario())
    for got in (got_first, got_second):
        _check_history(got, channels, events)
    # The second viewer's replay is not broadcast: nothing the first viewer had comes again.
    had = {(m.topic, bytes(m.data)) for m in got_first}
    assert not [m for m in again if (m.topic, bytes(m.data)) in had], \
        "history sent twice to a viewer"
    assert bridge.alive(), bridge.log_tail()


def test_a_viewer_loads_every_mesh_of_the_arm_asked_for_at_once(ran, node_factory):
    """As a browser's 3D panel loads a robot: every mesh the description names, asked for
    at once, comes back with its file's bytes. (The SDK server refuses a client's fetches
    beyond 32 at a time; the simulator's description names few enough files.)"""
    from urllib.parse import unquote, urlsplit

    bridge = node_factory("rpent_foxglove", "bridge", {"port": 0, "legacy_port": -1,
                                                       "stats_period": 0.0},
                          name="dash_mesh_bridge", params_file=CONFIG / "foxglove_bridge.yaml")
    port = wait_until(lambda: (m := re.search(r"ws://127\.0\.0\.1:(\d+)", bridge.log_tail(200)))
                      and int(m.group(1)), 60, what="the bridge to listen")

    async def scenario():
        async with FoxgloveClient(f"ws://127.0.0.1:{port}") as viewer:
            await viewer.wait_for_topics(["/robot_description"], 60)
            await viewer.subscribe(["/robot_description"])
            got = await viewer.collect(30, until=lambda ms: ms)
            assert got, "no /robot_description, though it is latched"
            urdf = decoder_for(viewer.by_topic("/robot_description"))(got[0].data).data
            meshes = re.findall(r'filename="([^"]+)"', urdf)
            return meshes, await viewer.fetch_assets(meshes, 60)

    meshes, fetched = asyncio.run(scenario())
    assert len(meshes) >= 10, meshes
    failed = {uri: str(a) for uri, a in fetched.items() if isinstance(a, Exception)}
    assert not failed, failed
    for uri, data in fetched.items():
        assert data == Path(unquote(urlsplit(uri).path)).read_bytes(), uri


def test_a_viewer_speaking_only_foxglove_websocket_v1_gets_the_layout(ran, node_factory):
    """Foxglove Studio 1.x offers only foxglove.websocket.v1, which the SDK's port refuses:
    the bridge's second port gives it every channel and service the layout uses, the
    latched topics' whole history, and answers its service calls."""
    events, _ = ran
    bridge = node_factory("rpent_foxglove", "bridge", {"port": 0, "legacy_port": 0,
                                                       "stats_period": 0.0},
                          name="dash_bridge_v1", params_file=CONFIG / "foxglove_bridge.yaml")
    ports = wait_until(lambda: (m := re.search(
        r"ws://127\.0\.0\.1:(\d+) \(foxglove\.sdk\.v1\) and ws://127\.0\.0\.1:(\d+) "
        r"\(foxglove\.websocket\.v1\)", bridge.log_tail(200))) and (int(m[1]), int(m[2])), 60,
        what="the bridge to listen on both ports")
    cancel = next(s for s in layout_services() if s.endswith("cancel_run"))

    async def scenario():
        only_v1 = ["foxglove.websocket.v1"]
        with pytest.raises(Exception, match="HTTP 400"):
            async with FoxgloveClient(f"ws://127.0.0.1:{ports[0]}", subprotocols=only_v1):
                pass
        async with FoxgloveClient(f"ws://127.0.0.1:{ports[1]}", subprotocols=only_v1) as old:
            assert old.ws.subprotocol == "foxglove.websocket.v1"
            await old.wait_for_topics(sorted(layout_topics()), 90)
            await old.collect(10, until=lambda _: layout_services() <= set(old.services))
            assert layout_services() <= set(old.services), sorted(old.services)
            await old.subscribe(LATCHED)
            got = await old.collect(30, until=_history_complete(events))
            answer = await old.call_service(cancel, {}, 20)
            return [old.by_topic(t) for t in LATCHED], got, answer

    channels, got, answer = asyncio.run(scenario())
    assert all(c["encoding"] == "cdr" and c["schemaEncoding"] == "ros2msg" for c in channels)
    _check_history(got, channels, events)
    assert answer["success"] is False and "no run" in answer["message"], answer
    assert bridge.alive(), bridge.log_tail()


def test_late_recorder_bag_has_the_whole_agent_log_and_what_the_layout_shows(ran, node_factory,
                                                                            tmp_path):
    """The recorder (its default topics, those `ros2 bag record` gets in a bring-up) starts
    after the run: the bag still has every agent event, their log lines on the channel the
    layout's log panel reads, and every other channel the layout shows."""
    import rclpy
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    from rpent_interfaces.msg import AgentEvent

    events, base_frame = ran
    bag = tmp_path / "bag"
    recorder = node_factory("rpent_bag", "recorder", {"bag_path": str(bag)}, name="dash_recorder")
    wanted = layout_topics()
    for topic in sorted(wanted | {"/agent/events"}):
        wait_until(lambda: f"recording {topic} [" in recorder.log_tail(200), 90,
                   what=f"the recorder to subscribe {topic}")
    # A latched history arrives once a subscription matches, which nothing outside the
    # recorder shows: a subscriber that starts now getting all of it bounds that time.
    probe = rclpy.create_node("dash_late_probe")
    late = []
    probe.create_subscription(AgentEvent, "/agent/events", late.append, QoSProfile(
        depth=1000, reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL))
    try:
        wait_until(lambda: rclpy.spin_once(probe, timeout_sec=0.1) or len(late) >= len(events),
                   30, what="a late subscriber to get the run's events")
    finally:
        probe.destroy_node()
    assert recorder.stop() == 0, recorder.log_tail()

    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory
    with open(bag / "bag.mcap", "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        recorded = {c.topic for c in reader.get_summary().channels.values()}
        assert wanted <= recorded, f"the bag lacks {sorted(wanted - recorded)}"
        log = [d.msg for _, _, _, d in reader.iter_decoded_messages(topics=["/agent/log"])]
        evs = [d for _, _, _, d in reader.iter_decoded_messages(topics=["/agent/events"])]
        markers = [d for _, _, _, d in reader.iter_decoded_messages(topics=["/agent/markers"])]
    assert [_summary(e) for e in evs] == events, "a recorder started late missed events"
    _check_log(log, events)
    # The 3D scene is in the bag: the objects the agent asked for, labelled, in the base frame.
    labels = {m.text for m in markers[-1].markers if m.text}
    assert {"alphabet_soup_1", "basket_1"} <= labels, labels
    assert {m.header.frame_id for m in markers[-1].markers} == {base_frame}
