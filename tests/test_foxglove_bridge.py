"""The Foxglove bridge seen from a real Foxglove WebSocket client.

A LIBERO robot node and the bridge run as processes; the test speaks the Foxglove
protocol over `websockets`, decodes what arrives only from the advertised ros2msg
schemas (mcap-ros2-support), and publishes agent events itself. The robot-model tests
publish a robot_description themselves and fetch its meshes as a 3D panel does.
"""
from __future__ import annotations

import asyncio
import os
import re
import struct
import time
from urllib.parse import quote

import cv2
import numpy as np
import pytest

from rpent_common.processes import wait_until
from rpent_foxglove.client import FoxgloveClient, decoder_for

ALLOWED = ["joint_states", "ee_pose", "robot_state", "task_status", "camera/*/image_raw",
           "agent/events", "agent/log"]


@pytest.fixture(scope="module")
def robot_and_bridge(rclpy_context, node_factory):
    robot = node_factory("rpent_env_sim", "libero_node",
                         {"image_height": 256, "image_width": 256}, name="fox_robot")
    bridge = node_factory("rpent_foxglove", "bridge", {
        "port": 0, "topics": ALLOWED, "rate_limits": ["joint_states:5"],
        "jpeg_topics": ["camera/robot0_eye_in_hand/image_raw"], "stats_period": 0.0,
    }, name="fox_bridge")
    port = wait_until(lambda: (m := re.search(r"ws://127\.0\.0\.1:(\d+)", bridge.log_tail(200)))
                      and int(m.group(1)), 60, what="the bridge to listen")
    yield robot, bridge, f"ws://127.0.0.1:{port}"
    assert robot.alive(), f"robot exited with {robot.proc.returncode}: {robot.log_tail()}"
    assert bridge.alive(), bridge.log_tail()


def _publish_events(node, stop):
    """An agent's events and its log lines, as the agent node publishes them."""
    from rcl_interfaces.msg import Log

    from rpent_agent import agentlog
    from rpent_interfaces.msg import AgentEvent

    pub = node.create_publisher(AgentEvent, "agent/events", 10)
    log = node.create_publisher(Log, "agent/log", 10)
    ev = AgentEvent(run_id="run-1", turn=3, kind=AgentEvent.KIND_TOOL_CALL, tool_name="move_to",
                    arguments_json='{"position": [0.5, 0.1, 0.3]}', text="moving over the soup")
    while not stop.wait(0.2):
        pub.publish(ev)
        log.publish(agentlog.log_line(time.time_ns(), ev))


@pytest.mark.slow
@pytest.mark.serial  # counts joint_states per 4 s window
def test_client_sees_schemas_and_decodes_image_jpeg_and_agent_event(robot_and_bridge):
    import threading

    import rclpy

    _, _, url = robot_and_bridge
    node = rclpy.create_node("fox_event_source")
    wait_until(lambda: "/camera/agentview/depth/image_raw" in dict(
        node.get_topic_names_and_types()), 30, what="the robot's depth topic")
    stop = threading.Event()
    publisher = threading.Thread(target=_publish_events, args=(node, stop), daemon=True)
    publisher.start()

    async def scenario():
        async with FoxgloveClient(url) as client:
            want = ["/camera/agentview/image_raw", "/camera/robot0_eye_in_hand/image_raw/compressed",
                    "/agent/events", "/agent/log", "/joint_states"]
            await client.wait_for_topics(want, 90)
            topics = {c["topic"] for c in client.channels.values()}
            assert not any("camera_info" in t for t in topics), "camera_info is not on the allow-list"
            # The robot publishes depth too, which the image pattern matches; no panel shows
            # it, and a simulator renders it only for a subscriber.
            assert not any("/depth/" in t for t in topics), "depth is excluded by default"
            assert "/camera/robot0_eye_in_hand/image_raw" not in topics, "JPEG replaces the raw image"
            image_ch = client.by_topic("/camera/agentview/image_raw")
            assert (image_ch["encoding"], image_ch["schemaEncoding"], image_ch["schemaName"]) == \
                ("cdr", "ros2msg", "sensor_msgs/msg/Image")
            assert "MSG: std_msgs/Header" in image_ch["schema"]
            assert client.by_topic("/agent/events")["schemaName"] == "rpent_interfaces/msg/AgentEvent"

            await client.subscribe(want)
            got = await client.collect(30, until=lambda ms: {m.topic for m in ms} >= set(want))
            by_topic = {}
            for m in got:
                by_topic.setdefault(m.topic, []).append(m)
            assert set(want) <= set(by_topic), f"no messages on {set(want) - set(by_topic)}"

            img = decoder_for(image_ch)(by_topic["/camera/agentview/image_raw"][-1].data)
            assert (img.height, img.width, img.encoding) == (256, 256, "rgb8")
            assert len(img.data) == 256 * 256 * 3
            assert np.frombuffer(bytes(img.data), np.uint8).std() > 5, "a rendered scene, not blank"

            jpeg = decoder_for(client.by_topic("/camera/robot0_eye_in_hand/image_raw/compressed"))(
                by_topic["/camera/robot0_eye_in_hand/image_raw/compressed"][-1].data)
            assert jpeg.format == "jpeg"
            frame = cv2.imdecode(np.frombuffer(bytes(jpeg.data), np.uint8), cv2.IMREAD_COLOR)
            assert frame.shape == (256, 256, 3)

            ev = decoder_for(client.by_topic("/agent/events"))(by_topic["/agent/events"][-1].data)
            assert (ev.tool_name, ev.turn, ev.text) == ("move_to", 3, "moving over the soup")
            log = by_topic["/agent/log"][-1].data
            assert b"[turn 3] tool_call: move_to" in log  # the readable line for the Log panel

            # joint_states is limited to 5 Hz (the robot publishes 20 Hz).
            window = await client.collect(4.0)
            n = sum(m.topic == "/joint_states" for m in window)
            assert 10 <= n <= 28, f"{n} joint_states in 4 s, expected about 20 at 5 Hz"

    try:
        asyncio.run(scenario())
    finally:
        stop.set()
        publisher.join(5)
        node.destroy_node()


@pytest.mark.slow
@pytest.mark.serial  # robot rate, frames per 6 s and their latency
def test_slow_client_does_not_slow_the_robot(robot_and_bridge):
    """A client that subscribes to both cameras and never reads: the robot keeps its
    20 Hz and a second client keeps getting fresh frames."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from rpent_interfaces.msg import RobotState

    _, bridge, url = robot_and_bridge
    cams = ["/camera/agentview/image_raw", "/camera/robot0_eye_in_hand/image_raw/compressed"]
    node = rclpy.create_node("fox_rate_probe")
    stamps = []
    node.create_subscription(RobotState, "robot_state", lambda m: stamps.append(time.monotonic()), 10)
    executor = SingleThreadedExecutor()
    executor.add_node(node)

    async def scenario():
        async with FoxgloveClient(url, max_queue=1) as slow, FoxgloveClient(url) as fast:
            for c in (slow, fast):
                await c.wait_for_topics(cams, 30)
                await c.subscribe(cams)
            await asyncio.sleep(2.0)          # slow's socket buffers fill; it never reads
            stamps.clear()
            latencies = []
            loop = asyncio.get_running_loop()
            end = loop.time() + 6.0
            while loop.time() < end:
                executor.spin_once(timeout_sec=0.0)
                try:
                    m = await fast.recv(0.02)
                except asyncio.TimeoutError:
                    continue
                if m is not None:
                    latencies.append(time.time() - m.log_time / 1e9)
            return latencies

    try:
        latencies = asyncio.run(scenario())
    finally:
        node.destroy_node()
    rate = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 2 else 0.0
    assert rate > 15.0, f"robot_state at {rate:.1f} Hz while a client stalls (expected ~20)"
    assert len(latencies) > 30, f"the fast client got only {len(latencies)} frames in 6 s"
    assert np.median(latencies) < 1.0, f"fast client frames are {np.median(latencies):.2f} s old"
    assert bridge.alive(), bridge.log_tail()


# --- robot model: the description and its meshes --------------------------------------------
ARM_NS = "fox_arm"
DESCRIPTION = f"/{ARM_NS}/robot_description"
PACKAGE = "rpent_test_arm"   # a ROS package in an ament prefix the test creates


def _stl(triangles: int) -> bytes:
    """A binary STL: 80-byte header, triangle count, then normal, 3 vertices, attribute."""
    tri = struct.pack("<12fH", 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0)
    return b"rpent test mesh".ljust(80, b"\0") + struct.pack("<I", triangles) + tri * triangles


@pytest.fixture(scope="module")
def model_bridge(rclpy_context, node_factory, tmp_path_factory):
    """A robot's latched description names one mesh by file:// (as the robot nodes publish
    it) and one by package://; a bridge with the default allow-list runs in the robot's
    namespace. Yields (url, files, bridge)."""
    import rclpy
    from std_msgs.msg import String

    from rpent_contract.qos import LATCHED_QOS

    root = tmp_path_factory.mktemp("model")
    meshes = root / "arm" / "meshes"
    (meshes / "textures").mkdir(parents=True)
    files = {"mesh": meshes / "link 1.stl",          # a space: URIs are percent-encoded
             "texture": meshes / "textures" / "skin.png",
             "notes": meshes / "notes.txt",
             "package_mesh": root / "prefix" / "share" / PACKAGE / "meshes" / "base.stl"}
    files["mesh"].write_bytes(_stl(1))
    files["texture"].write_bytes(b"\x89PNG\r\n\x1a\n texture bytes")
    files["notes"].write_text("beside the mesh, but not a mesh, texture or material")
    files["package_mesh"].parent.mkdir(parents=True)
    files["package_mesh"].write_bytes(_stl(2))
    index = root / "prefix" / "share" / "ament_index" / "resource_index" / "packages"
    index.mkdir(parents=True)
    (index / PACKAGE).write_text("")

    urdf = (f'<robot name="arm"><link name="base_link"><visual><geometry>'
            f'<mesh filename="package://{PACKAGE}/meshes/base.stl"/></geometry></visual></link>'
            f'<link name="link1"><visual><geometry><mesh filename="{files["mesh"].as_uri()}"/>'
            f'</geometry></visual></link><joint name="j1" type="revolute">'
            f'<parent link="base_link"/><child link="link1"/><axis xyz="0 0 1"/></joint></robot>')
    node = rclpy.create_node("fox_description_source", namespace=ARM_NS)
    node.create_publisher(String, "robot_description", LATCHED_QOS).publish(String(data=urdf))
    with pytest.MonkeyPatch.context() as env:   # read when the bridge process starts
        env.setenv("AMENT_PREFIX_PATH", os.pathsep.join(
            [str(root / "prefix")] + [p for p in [os.environ.get("AMENT_PREFIX_PATH")] if p]))
        bridge = node_factory("rpent_foxglove", "bridge", {"port": 0, "stats_period": 0.0},
                              namespace=ARM_NS, name="fox_model_bridge")
    try:
        port = wait_until(lambda: (m := re.search(r"ws://127\.0\.0\.1:(\d+)",
                                                  bridge.log_tail(200))) and int(m.group(1)),
                          60, what="the bridge to listen")
        # Viewers connect once the description is bridged: foxglove-sdk 0.30.3 can answer a
        # subscribe sent the instant a channel is advertised with "unknown channel".
        wait_until(lambda: f"bridging {DESCRIPTION} [" in bridge.log_tail(200), 30,
                   what="the bridge to bridge the description")
        yield f"ws://127.0.0.1:{port}", files, bridge
        assert bridge.alive(), bridge.log_tail()
    finally:
        node.destroy_node()


async def _description(viewer) -> str:
    await viewer.wait_for_topics([DESCRIPTION], 30)
    channel = viewer.by_topic(DESCRIPTION)
    await viewer.subscribe([DESCRIPTION])
    got = await viewer.collect(15, until=lambda ms: ms)
    assert got, f"no {DESCRIPTION} within 15 s, though it is latched"
    return decoder_for(channel)(got[0].data).data


def test_viewer_gets_the_model_with_package_uris_and_fetches_its_meshes(model_bridge):
    from rpent_foxglove.bridge import asset_uri

    url, files, _ = model_bridge

    async def scenario():
        async with FoxgloveClient(url) as viewer:
            urdf = await _description(viewer)
            assert "assets" in viewer.server_info["capabilities"]
            mesh_uri = asset_uri(str(files["mesh"]))
            assert f'filename="{mesh_uri}"' in urdf, urdf
            assert "file://" not in urdf, "a browser cannot open file:// URIs"
            assert f'filename="package://{PACKAGE}/meshes/base.stl"' in urdf, "kept as is"
            fetched = {
                "mesh": await viewer.fetch_asset(mesh_uri, 10),
                # as a Collada/OBJ mesh's texture resolves against the mesh's URI
                "texture": await viewer.fetch_asset(mesh_uri.rsplit("/", 1)[0]
                                                    + "/textures/skin.png", 10),
                "package_mesh": await viewer.fetch_asset(
                    f"package://{PACKAGE}/meshes/base.stl", 10)}
            return fetched

    fetched = asyncio.run(scenario())
    for name, data in fetched.items():
        assert data == files[name].read_bytes(), f"{name}: not the file's bytes"


def test_bridge_serves_no_other_file(model_bridge):
    url, files, bridge = model_bridge
    mesh_dir = quote(str(files["mesh"].parent))
    refused = {
        "package://rpent_assets/etc/passwd": "is not served",
        f"package://rpent_assets{quote(str(files['notes']))}": "is not served",
        f"package://rpent_assets{mesh_dir}/../../../../../../etc/passwd": "'..' is not allowed",
        f"package://{PACKAGE}/../../../../etc/passwd": "'..' is not allowed",
        f"package://{PACKAGE}/package.xml": "is not served",
        "package://no_such_package/meshes/a.stl": "not in the ament index",
        "file:///etc/passwd": "only package://",
    }

    async def scenario():
        async with FoxgloveClient(url) as viewer:
            await _description(viewer)   # the mesh directory is servable from now on
            for uri, reason in refused.items():
                with pytest.raises(RuntimeError, match=re.escape(reason)):
                    await viewer.fetch_asset(uri, 10)
            with pytest.raises(RuntimeError):
                await viewer.fetch_asset("package://rpent_assets/etc/passwd", 10)

    asyncio.run(scenario())
    line = "asset package://rpent_assets/etc/passwd not sent to a viewer"
    wait_until(lambda: line in bridge.log_tail(400), 10, what="the refusal in the bridge's log")
    assert bridge.log_tail(400).count(line) == 1, "a refused asset is logged once"
