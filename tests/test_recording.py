"""Recording a LIBERO run: the recorder node writes a rosbag2 MCAP that rosbags and
mcap-ros2-support both read, with every topic, the right counts, decodable custom types,
Humble-readable metadata, the agent's events also as log lines; a robot crash and then
Ctrl-C still leave a complete bag."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from rpent_bag.settings import DEFAULT_TOPICS
from rpent_common.processes import wait_until

# The robot node publishes these with the same stamp every control tick.
STAMPED_TOGETHER = ("/robot_state", "/joint_states", "/ee_pose", "/camera/agentview/image_raw")
# Counts what a 20 Hz robot published in a few seconds: run alone on the machine.
pytestmark = pytest.mark.serial


def _matched_by(node, publisher, subscriber_node: str) -> bool:
    """``publisher`` has matched every subscription the graph shows on its topic, one of
    them ``subscriber_node``'s (so also that one, whatever else still listens there)."""
    subs = node.get_subscriptions_info_by_topic(publisher.topic_name)
    return (any(s.node_name == subscriber_node for s in subs)
            and publisher.get_subscription_count() >= len(subs))


@pytest.mark.slow
def test_libero_run_recording_survives_robot_crash_and_sigint(rclpy_context, node_factory,
                                                                tmp_path, monkeypatch):
    import rclpy
    from rpent_interfaces.action import Predict
    from rpent_interfaces.msg import AgentEvent

    bag = tmp_path / "run" / "bag"
    robot = node_factory("rpent_env_sim", "libero_node", {}, name="rec_robot")
    # The default patterns, except that only this test's predict feedback is wanted: the
    # graph may still list the feedback topics of model nodes other tests ran moments ago.
    topics = [t if t != "*predict/_action/feedback" else "predict/_action/feedback"
              for t in DEFAULT_TOPICS]
    recorder = node_factory("rpent_bag", "recorder", {"bag_path": str(bag), "topics": topics},
                            name="recorder")
    # What `record_depth:=true record_image_rate:=10` starts, beside it.
    from rpent import bringup
    monkeypatch.setattr(bringup, "_have_rosbag2_mcap", lambda: False)
    with_depth = bringup.recorder("", str(tmp_path / "depth" / "bag"), depth=True,
                                  record_image_rate=10.0)
    depth_recorder = node_factory(with_depth.package, with_depth.executable,
                                  {**with_depth.parameters, "topics": topics},
                                  name="depth_recorder", params_file=with_depth.params_files[0])
    from rcl_interfaces.msg import Log

    from rpent_agent import agentlog

    node = rclpy.create_node("rec_sources")
    from std_msgs.msg import String

    from rpent_contract.qos import LATCHED_QOS
    descriptions = []
    node.create_subscription(String, "robot_description", lambda m: descriptions.append(m.data),
                             LATCHED_QOS)
    events = node.create_publisher(AgentEvent, "agent/events", 10)
    log = node.create_publisher(Log, "agent/log", 10)   # what the agent publishes with each
    feedback = node.create_publisher(Predict.Impl.FeedbackMessage, "predict/_action/feedback", 10)
    from builtin_interfaces.msg import Time
    from visualization_msgs.msg import MarkerArray

    from rpent_agent.markers import SceneMarkers
    markers = node.create_publisher(MarkerArray, "agent/markers", 10)
    try:
        wait_until(lambda: rclpy.spin_once(node, timeout_sec=0.1) or descriptions, 60,
                   what="the robot's robot_description")
        for topic in ("/robot_state", "/camera/agentview/image_raw", "/task_status",
                      "/agent/events", "/agent/log", "/agent/markers",
                      "/predict/_action/feedback"):
            wait_until(lambda: f"recording {topic} [" in recorder.log_tail(100), 120,
                       what=f"the recorder to subscribe {topic}")
        wait_until(lambda: "recording /camera/agentview/depth/image_raw ["
                   in depth_recorder.log_tail(100), 60,
                   what="record_depth's recorder to subscribe the depth images")
        # The recorder subscribes once it sees a publisher; what it publishes from now on
        # reaches it only once each of these publishers has matched its subscription.
        for pub in (events, log, feedback, markers):
            wait_until(lambda: _matched_by(node, pub, "recorder"), 30,
                       what=f"the recorder's subscription to match {pub.topic_name}")
        markers.publish(SceneMarkers("base_link").update_target(
            Time(sec=1), {"x": 0.4, "y": 0.1, "z": 0.3, "rpy": [3.14, 0.0, 0.0]}))
        for i in range(10):
            event = AgentEvent(run_id="r", turn=i, kind=AgentEvent.KIND_REASONING,
                               text=f"thought {i}")
            events.publish(event)
            log.publish(agentlog.log_line(time.time_ns(), event))
            fb = Predict.Impl.FeedbackMessage()
            fb.feedback.chunk.sequence, fb.feedback.chunk.control_space = i, "libero_osc_delta"
            fb.feedback.chunk.horizon, fb.feedback.chunk.action_dim = 2, 7
            fb.feedback.chunk.data = [float(i)] * 14
            if i < 5:
                feedback.publish(fb)
            time.sleep(0.05)
        time.sleep(3.0)
        os.killpg(robot.proc.pid, signal.SIGKILL)       # another node crashes
        time.sleep(1.0)
        assert recorder.alive(), recorder.log_tail()
        assert recorder.stop() == 0, recorder.log_tail()  # SIGINT, like Ctrl-C
        assert depth_recorder.stop() == 0, depth_recorder.log_tail()
    finally:
        node.destroy_node()

    meta = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["version"] == 8 and meta["storage_identifier"] == "mcap"
    counts = {t["topic_metadata"]["name"]: t["message_count"]
              for t in meta["topics_with_message_count"]}
    qos = {t["topic_metadata"]["name"]: yaml.safe_load(t["topic_metadata"]["offered_qos_profiles"])
           for t in meta["topics_with_message_count"]}
    expected = {"/joint_states", "/ee_pose", "/robot_state", "/task_status",
                "/camera/agentview/image_raw", "/camera/agentview/camera_info",
                "/camera/robot0_eye_in_hand/image_raw", "/camera/robot0_eye_in_hand/camera_info",
                "/agent/events", "/agent/log", "/agent/markers", "/predict/_action/feedback",
                "/operator/requests", "/sim/scene_markers", "/sim/tasks"}
    # The robot model and its frames, so a viewer draws the arm from the bag alone, and
    # the nodes' log lines.
    expected |= {"/robot_description", "/tf", "/tf_static", "/rosout"}
    # What the robot executes and where its chunks go; it ran no goal here, so the topics
    # are there without messages.
    expected |= {"/executed_actions", "/intended_path"}
    assert set(counts) == expected
    # Aligned depth only where asked for, with the images it belongs to.
    depth = {f"/camera/{c}/depth/{t}" for c in ("agentview", "robot0_eye_in_hand")
             for t in ("image_raw", "camera_info")}
    depth_meta = yaml.safe_load((tmp_path / "depth" / "bag" / "metadata.yaml").read_text())
    depth_counts = {t["topic_metadata"]["name"]: t["message_count"] for t in
                    depth_meta["rosbag2_bagfile_information"]["topics_with_message_count"]}
    assert set(depth_counts) == expected | depth
    assert all(depth_counts[t] > 0 for t in depth), depth_counts
    assert counts["/robot_description"] == 1 and counts["/tf_static"] >= 1
    assert counts["/tf"] > 60, counts
    assert qos["/robot_description"][0]["durability"] == 1  # latched again on replay
    assert counts["/agent/events"] == counts["/agent/log"] == 10
    assert counts["/agent/markers"] == 1
    assert counts["/predict/_action/feedback"] == 5
    assert counts["/task_status"] >= 1
    assert counts["/operator/requests"] >= 1  # latched: the robot's empty list at start-up
    assert counts["/robot_state"] > 60, counts   # ~20 Hz for the ~5 s the robot lived
    assert qos["/task_status"][0]["durability"] == 1      # transient local, as offered
    assert qos["/robot_state"][0]["reliability"] == 1

    # rosbags: every message deserializes from the bag's own definitions.
    from rpent_bag import bagfile
    with bagfile.open_reader(bag) as reader:
        store = bagfile.typestore(reader.connections)
        seen, stamps = {}, {t: [] for t in STAMPED_TOGETHER}
        for conn, _, data in bagfile.messages(reader, reader.connections):
            msg = store.deserialize_cdr(data, conn.msgtype)
            seen[conn.topic] = seen.get(conn.topic, 0) + 1
            if conn.topic in stamps:
                stamps[conn.topic].append((msg.header.stamp.sec, msg.header.stamp.nanosec))
            if conn.topic == "/robot_description":
                _assert_meshes_embedded(msg.data, descriptions[0])
            if conn.topic == "/predict/_action/feedback":
                assert conn.msgtype == "rpent_interfaces/action/Predict_FeedbackMessage"
                assert msg.feedback.chunk.control_space == "libero_osc_delta"
                assert len(msg.feedback.chunk.data) == 14
    assert seen == {t: n for t, n in counts.items() if n}
    # The recorder subscribes each topic as discovery finds it, so they start at different
    # ticks; from the moment all of them are recorded until the crash, every topic has every
    # tick (but for the odd one a loaded machine lets the publisher's short history drop).
    start = max(min(s) for s in stamps.values())
    end = min(max(s) for s in stamps.values())
    window = {t: {s for s in v if start <= s <= end} for t, v in stamps.items()}
    ticks = set().union(*window.values())
    assert len(ticks) > 40, {t: len(v) for t, v in window.items()}
    for topic, seen_ticks in window.items():
        assert len(ticks - seen_ticks) <= 3, (topic, sorted(ticks - seen_ticks))

    # mcap-ros2-support: an independent reader and decoder, of every channel but one. It
    # refuses action feedback: its vendored rosidl parser wants message names matching
    # ^[A-Z][A-Za-z0-9]*$ and two-part field types, and the feedback type is
    # pkg/action/Name_FeedbackMessage with a pkg/action/Name_Feedback field. `ros2 bag
    # record` gives the channel the same schema name and no definition at all (rosbag2_cpp's
    # local_message_definition_source.cpp only resolves msg/ and srv/ types), so rosbags
    # with the definitions this recorder writes is the reader that decodes it (README).
    from mcap.reader import make_reader
    from mcap_ros2._vendor.rosidl_adapter.parser import InvalidResourceName
    from mcap_ros2.decoder import DecoderFactory
    with open(bag / "bag.mcap", "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        summary = reader.get_summary()
        assert summary is not None, "MCAP summary missing: the bag was not closed"
        mcap_counts = {summary.channels[cid].topic: n
                       for cid, n in summary.statistics.channel_message_counts.items()}
        assert mcap_counts == counts
        decoded = {}
        for topic in sorted(counts):
            if topic == "/predict/_action/feedback":
                with pytest.raises(InvalidResourceName):
                    next(reader.iter_decoded_messages(topics=[topic]))
                continue
            decoded[topic] = [d for _, _, _, d in reader.iter_decoded_messages(topics=[topic])]
            assert len(decoded[topic]) == counts[topic], topic
    assert [d.text for d in decoded["/agent/events"]] == [f"thought {i}" for i in range(10)]
    assert [d.msg for d in decoded["/agent/log"]] == \
        [f"[turn {i}] reasoning: thought {i}" for i in range(10)]
    (scene,) = decoded["/agent/markers"]
    assert [m.text for m in scene.markers] == ["", "", "move_to"]   # wipe, target, label
    assert scene.markers[1].pose.position.x == 0.4
    img = decoded["/camera/agentview/image_raw"][0]
    assert (img.height, img.width, img.encoding) == (128, 128, "rgb8")

    # record_image_rate:=10 on a 20 Hz robot: every image and depth topic keeps one frame per
    # 100 ms of stamps, the same instants on all of them, while the states keep every step.
    images = {f"/camera/{c}/{s}" for c in ("agentview", "robot0_eye_in_hand")
              for s in ("image_raw", "depth/image_raw")}
    stamps = {t: [] for t in images | {"/robot_state"}}
    with bagfile.open_reader(tmp_path / "depth" / "bag") as reader:
        store = bagfile.typestore(reader.connections)
        for conn, _, data in bagfile.messages(reader, reader.connections):
            if conn.topic in stamps:
                h = store.deserialize_cdr(data, conn.msgtype).header.stamp
                stamps[conn.topic].append(h.sec * 10**9 + h.nanosec)
    start = max(min(v) for v in stamps.values())
    end = min(max(v) for v in stamps.values())
    kept = {t: sorted(s for s in stamps[t] if start <= s <= end) for t in images}
    periods = {s // 10**8 for s in stamps["/robot_state"] if start <= s <= end}
    assert len(periods) > 20, (start, end)
    for topic, seen in kept.items():
        assert len({s // 10**8 for s in seen}) == len(seen), f"{topic}: two in one period"
        # (but for the odd frame a loaded machine lets the publisher's history drop)
        assert len(seen) >= len(periods) - 3, (topic, len(seen), len(periods))
        assert len(set(seen) ^ set(kept["/camera/agentview/image_raw"])) <= 3, topic


def test_sigint_right_after_a_burst_loses_none_of_it(rclpy_context, node_factory, tmp_path):
    """Every message published before the recorder is told to stop is in the bag: it takes
    what DDS has delivered before it closes."""
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from rpent_bag import bagfile
    from rpent_interfaces.msg import AgentEvent

    bag = tmp_path / "bag"
    recorder = node_factory("rpent_bag", "recorder",
                            {"bag_path": str(bag), "topics": ["agent/events"]},
                            name="burst_recorder", remaps={"__node": "burst_recorder"})
    node = rclpy.create_node("burst_source")
    # Deep enough for the whole burst: what is measured is the recorder, not the history.
    events = node.create_publisher(AgentEvent, "agent/events",
                                   QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE))
    try:
        wait_until(lambda: "recording /agent/events [" in recorder.log_tail(100), 60,
                   what="the recorder to subscribe /agent/events")
        wait_until(lambda: _matched_by(node, events, "burst_recorder"), 30,
                   what="the recorder's subscription to match")
        for i in range(80):
            events.publish(AgentEvent(run_id="burst", turn=i, kind=AgentEvent.KIND_REASONING,
                                      text=f"event {i}"))
        assert recorder.stop() == 0, recorder.log_tail()  # SIGINT at once
    finally:
        node.destroy_node()
    with bagfile.open_reader(bag) as reader:
        store = bagfile.typestore(reader.connections)
        turns = [store.deserialize_cdr(data, conn.msgtype).turn
                 for conn, _, data in bagfile.messages(reader, reader.connections)]
    assert turns == list(range(80)), f"{len(turns)} of 80 recorded: {turns}"


def test_a_killed_recorders_bag_is_recovered_up_to_its_last_complete_chunk(
        rclpy_context, node_factory, tmp_path):
    """SIGKILL leaves the recorder no time to close its bag: no metadata.yaml, no MCAP
    summary, so no reader opens it. The chunks it had written are whole, and
    ``rpent recover-bag`` copies every message in them, in order, into a bag readers open."""
    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from rpent.cli import main as rpent_main
    from rpent_bag import bagfile
    from rpent_interfaces.msg import AgentEvent

    bag, count = tmp_path / "bag", 1200
    recorder = node_factory("rpent_bag", "recorder",
                            {"bag_path": str(bag), "topics": ["agent/events"],
                             "subscription_depth": count},
                            name="killed_recorder", remaps={"__node": "killed_recorder"})
    node = rclpy.create_node("killed_source")
    events = node.create_publisher(AgentEvent, "agent/events",
                                   QoSProfile(depth=count, reliability=ReliabilityPolicy.RELIABLE))
    padding = "x" * 4000  # about 260 events to a 1 MiB chunk
    try:
        wait_until(lambda: "recording /agent/events [" in recorder.log_tail(100), 60,
                   what="the recorder to subscribe /agent/events")
        wait_until(lambda: _matched_by(node, events, "killed_recorder"), 30,
                   what="the recorder's subscription to match")
        for i in range(count):
            events.publish(AgentEvent(run_id="killed", turn=i, kind=AgentEvent.KIND_REASONING,
                                      text=f"event {i} {padding}"))
        mcap = bag / "bag.mcap"
        # Two complete chunks and more are on disk.
        wait_until(lambda: mcap.exists() and mcap.stat().st_size > 3_000_000, 60,
                   what="the recorder to write three chunks")
        assert recorder.stop(signum=signal.SIGKILL) == -signal.SIGKILL
    finally:
        node.destroy_node()
    assert not (bag / "metadata.yaml").exists()
    with pytest.raises(bagfile.BagError, match="rpent recover-bag"):
        bagfile.open_reader(bag)

    out = tmp_path / "recovered"
    assert rpent_main(["recover-bag", str(bag), "--out", str(out)]) == 0
    with bagfile.open_reader(out) as reader:
        store = bagfile.typestore(reader.connections)
        kept = [store.deserialize_cdr(data, conn.msgtype)
                for conn, _, data in bagfile.messages(reader, reader.connections)]
    turns = [e.turn for e in kept]
    assert len(turns) >= 2 * 260 and turns == list(range(len(turns))), turns
    assert all(e.text == f"event {e.turn} {padding}" for e in kept)
    # A closed bag is read as it is.
    assert rpent_main(["recover-bag", str(out), "--out", str(tmp_path / "again")]) == 2


def test_check_bag_names_what_a_bag_lost(tmp_path, capsys):
    """A dataset trained on a bag with holes learns from steps that never happened next to
    each other: check-bag reports missing executed steps and undecodable messages, and says
    which bag cannot be opened and what to do."""
    from rclpy.serialization import serialize_message
    from std_msgs.msg import String

    from rpent.cli import main as rpent_main
    from rpent_bag.recorder import BagRecorder
    from rpent_interfaces.msg import ExecutedAction

    def bag(name, steps, corrupt=False):
        rec = BagRecorder(tmp_path / name)
        rec.add_topic("/executed_actions", "rpent_interfaces/msg/ExecutedAction")
        rec.add_topic("/note", "std_msgs/msg/String")
        for n in steps:
            rec.write("/executed_actions", 1000 + n, serialize_message(
                ExecutedAction(episode_id="e1", episode_step=n, action=[0.0] * 7)))
        rec.write("/note", 5000, b"\x00\x01" if corrupt else serialize_message(String(data="x")))
        assert not rec.close().errors
        return str(tmp_path / name)

    whole = bag("whole", range(10))
    holed = bag("holed", [0, 1, 2, 3, 6, 7, 9], corrupt=True)
    assert rpent_main(["check-bag", whole]) == 0
    assert "ok" in capsys.readouterr().out
    assert rpent_main(["check-bag", whole, holed]) == 1
    out = capsys.readouterr().out
    assert "episode e1 lacks 3 executed steps between 0 and 9 (4-5, 8)" in out, out
    assert "/note: 1 messages do not decode as std_msgs/msg/String" in out, out

    unclosed = tmp_path / "unclosed"
    unclosed.mkdir()
    (unclosed / "unclosed.mcap").write_bytes(b"\x89MCAP0\r\n")
    assert rpent_main(["check-bag", str(unclosed)]) == 2
    assert f"rpent recover-bag {unclosed}" in capsys.readouterr().err


@pytest.mark.parametrize("action", sorted(p.stem for p in (
    Path(__file__).resolve().parents[1] / "ros_ws/src/rpent_interfaces/action").glob("*.action")))
def test_every_action_feedback_and_result_has_a_definition_a_reader_can_build(action):
    """What a bag stores for an action's feedback (and a result, were it recorded): the
    whole ros2msg definition, comments between fields included, that rosbags can parse."""
    from rpent_bag import definitions

    for part in ("FeedbackMessage", "Result"):
        name = f"rpent_interfaces/action/{action}_{part}"
        text = definitions.full_text(name)
        assert "/#" not in text, text
        definitions.typestore_for({name: text})



def _assert_meshes_embedded(urdf: str, published: str) -> None:
    """A bag's description draws the arm without the recording machine: each mesh the
    robot published as a file:// URI is a data: URI of that file's bytes."""
    import base64
    import re
    from urllib.parse import unquote, urlsplit

    meshes = re.findall(r'filename="([^"]+)"', urdf)
    files = re.findall(r'filename="([^"]+)"', published)
    assert len(meshes) == len(files) >= 10 and all(f.startswith("file://") for f in files)
    for uri, embedded in zip(files, meshes):
        media, sep, data = embedded.removeprefix("data:").partition(";base64,")
        assert (embedded.startswith("data:"), media, sep) == (True, "model/stl", ";base64,")
        assert base64.b64decode(data) == Path(unquote(urlsplit(uri).path)).read_bytes(), uri
