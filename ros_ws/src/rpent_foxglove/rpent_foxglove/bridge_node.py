"""Foxglove bridge node: the robot contract, action-model chunks and the agent's events and
log and 3D markers on a Foxglove WebSocket (Foxglove SDK server), plus the operator's
answer service for a viewer's Call Service panel. Everything it sends is a ROS topic, so a
bag of the same topics shows what the live view shows.

    ros2 run rpent_foxglove bridge --ros-args --params-file config/foxglove_bridge.yaml

Open Lichtblick (>= 1.22) or Foxglove, "Open connection" -> Foxglove WebSocket ->
ws://127.0.0.1:8765, and import config/foxglove_layout.json (README: Dashboard).

Robot model: ``robot_description``, /tf and /tf_static are on the default allow-list. A
description (a std_msgs/String topic named robot_description, namespaced or not) reaches
viewers with its ``file://`` mesh URIs as ``package://rpent_assets/<path>``, which the
bridge serves over the protocol's fetchAsset (rpent_foxglove.bridge.MeshAssets): a browser
cannot open file:// URIs. ROS subscribers such as RViz get the original message.
"""
from __future__ import annotations

import fnmatch
import json
import sys

from rclpy.node import Node
from rclpy.qos import DurabilityPolicy
from rclpy.serialization import deserialize_message, serialize_message

from rpent_bag import definitions, graph
from rpent_bag.embed import is_description
from rpent_bag.settings import DEFAULT_EXCLUDE, DEFAULT_TOPICS
from rpent_contract.client import wait_future
from rpent_contract.http_json import is_loopback
from rpent_contract.node_main import run_node
from rpent_contract.images import image_to_numpy, rgb_to_compressed, to_rgb
from rpent_contract.names import ANSWER_SERVICE, RESET_SERVICE
from rpent_contract.params import ParameterError, declare, non_negative, positive
from rpent_foxglove.bridge import ASSET_PACKAGE, FoxgloveBridge
from rpent_foxglove.json_message import from_json, json_schema, to_json


def _rate_limits(value):
    for item in value:
        pattern, sep, hz = item.rpartition(":")
        try:
            ok = sep and pattern and float(hz) >= 0
        except ValueError:
            ok = False
        if not ok:
            return f"entry '{item}' is not 'topic_pattern:max_hz' (e.g. 'camera/*/image_raw:10')"
    return None


def _port(value):
    return None if 0 <= value <= 65535 else "must be a TCP port in [0, 65535] (0 = any free port)"


class BridgeNode(Node):
    def __init__(self):
        super().__init__("foxglove_bridge")
        d = lambda *a, **k: declare(self, *a, **k)  # noqa: E731
        allow_remote = d("allow_remote", False,
                         "Listen beyond loopback: any machine that reaches the port can then "
                         "watch the robot and call the allowed services (the operator's answer)")
        host = d("host", "127.0.0.1", "Address to listen on; 127.0.0.1 keeps it on this machine",
                 lambda v: "must not be empty (use 0.0.0.0 for all interfaces)" if not v else (
                     None if allow_remote or is_loopback(v) else
                     f"{v} is beyond loopback: anyone who reaches it could answer the "
                     "operator's questions. Set allow_remote:=true to mean it (and keep "
                     "'services' to what remote viewers may call), or use 127.0.0.1 with an "
                     "SSH tunnel (ssh -L 8765:127.0.0.1:8765 robot-host)"))
        port = d("port", 8765, "WebSocket port; 0 picks a free one (logged)", _port)
        legacy_port = d("legacy_port", -1, "Port of the foxglove.websocket.v1 protocol, for "
                        "viewers the SDK's foxglove.sdk.v1 port refuses (Foxglove Studio 1.x); "
                        "0 picks a free one (logged), -1 = none",
                        lambda v: None if v == -1 else _port(v))
        patterns = d("topics", DEFAULT_TOPICS,
                     "Allow-list: topic names or glob patterns, relative to the namespace",
                     lambda v: None if v and all(isinstance(t, str) and t for t in v)
                     else "must be a non-empty list of topic names")
        exclude = d("exclude", DEFAULT_EXCLUDE,
                    "Topics not bridged although 'topics' allows them (names or glob "
                    "patterns); [''] = none. By default the cameras' aligned depth, which no "
                    "panel of the layout shows and which a simulator renders only for a "
                    "subscriber")
        limits = d("rate_limits", [""], "Per-topic 'pattern:max_hz' entries; unmatched = no limit",
                   lambda v: _rate_limits([x for x in v if x]))
        services = d("services", [ANSWER_SERVICE, "agent/start_run", "agent/cancel_run",
                                  RESET_SERVICE],
                     "Services a viewer may call (Call Service panel): names or glob "
                     "patterns, relative to the namespace")
        self._service_timeout = d("service_timeout", 60.0,
                                  "s a viewer's service call waits for the ROS service (a "
                                  "start that switches the robot's task waits for its reset)",
                                  positive)
        jpeg = d("jpeg_topics", [""], "Image topics sent as JPEG CompressedImage on <topic>/compressed")
        self._jpeg_quality = d("jpeg_quality", 80, "JPEG quality 1-100",
                               lambda v: None if 1 <= v <= 100 else "must be in [1, 100]")
        queue_size = d("queue_size", 64, "Messages between ROS callbacks and the sender", positive)
        backlog = d("client_backlog", 64, "Messages buffered per client before the oldest go",
                    positive)
        self._depth = d("subscription_depth", 10, "History depth of each subscription", positive)
        self._latched_history = d(
            "latched_history", 1000, "Messages of each latched topic (agent/events, "
            "agent/log) kept for viewers that connect later", positive)
        newest = d("latched_newest", ["task_status", "agent/run_status", "agent/markers",
                                      "sim/scene_markers", "operator/requests"],
                   "Latched topics that carry a state, not a log: viewers that connect later "
                   "get only the newest message")
        period = d("discovery_period", 0.5, "s between looks for new allowed topics", positive)
        stats_period = d("stats_period", 10.0, "s between statistics lines; 0 = never",
                         non_negative)

        try:
            self._patterns = graph.resolve_patterns(self, patterns)
            self._exclude = tuple(graph.resolve_patterns(self, [p for p in exclude if p]))
            self._service_patterns = graph.resolve_patterns(self, [p for p in services if p])
            self._jpeg = graph.resolve_patterns(self, [p for p in jpeg if p])
            self._newest = graph.resolve_patterns(self, [p for p in newest if p])
            self._limits = []
            for item in (x for x in limits if x):
                pattern, _, hz = item.rpartition(":")
                self._limits.append((graph.resolve_patterns(self, [pattern])[0], float(hz)))
        except ParameterError:
            raise
        except Exception as err:  # rclpy's own exception types for invalid names
            raise ParameterError(f"invalid topic name in the parameters: {err}") from None
        try:
            self.bridge = FoxgloveBridge(host, port, queue_size, backlog,
                                         name=self.get_fully_qualified_name(),
                                         warn=self.get_logger().warning,
                                         legacy_port=None if legacy_port < 0 else legacy_port)
        except Exception as err:
            raise ParameterError(f"cannot listen on {host}:{port}"
                                 + (f" and {legacy_port}" if legacy_port >= 0 else "")
                                 + f" ({err}); pick another 'port' (or 'legacy_port') or stop "
                                 "the program using it") from None
        self._subs = {}
        self._offered = {}
        self.create_timer(period, self._discover)
        if stats_period > 0:
            self.create_timer(stats_period, self._report)
        self._discover()
        legacy = self.bridge.legacy
        self.get_logger().info(
            f"Foxglove bridge listening on ws://{host}:{self.bridge.port} (foxglove.sdk.v1)"
            + (f" and ws://{host}:{legacy.port} (foxglove.websocket.v1)" if legacy else "")
            + ", "
            f"allowed {self._patterns}"
            + (f" but {list(self._exclude)}" if self._exclude else "")
            + f", services {self._service_patterns}")

    # --- topics ---------------------------------------------------------------------------
    def _max_hz(self, topic: str) -> float:
        for pattern, hz in self._limits:
            if fnmatch.fnmatchcase(topic, pattern):
                return hz
        return 0.0

    def _discover(self) -> None:
        self._discover_services()
        for topic, type_name in graph.discover(self, self._patterns, set(self._subs),
                                               self._exclude):
            # task_status changes every step and its publisher keeps a history for
            # recorders: a viewer needs only where the task is now.
            newest = any(fnmatch.fnmatchcase(topic, p) for p in self._newest)
            qos = graph.subscription_qos(self, topic, self._depth, newest_only=newest)
            latched = 0
            if qos.durability == DurabilityPolicy.TRANSIENT_LOCAL:  # one reading of the graph
                latched = 1 if newest else self._latched_history
            try:
                cls = definitions.message_class(type_name)
                jpeg = (type_name == "sensor_msgs/msg/Image"
                        and any(fnmatch.fnmatchcase(topic, p) for p in self._jpeg))
                description = is_description(topic, type_name)
                if jpeg:
                    self.bridge.add_ros_topic(
                        topic, "sensor_msgs/msg/CompressedImage",
                        definitions.full_text("sensor_msgs/msg/CompressedImage"),
                        self._max_hz(topic), transform=self._to_jpeg,
                        channel_topic=topic + "/compressed", latched_depth=latched)
                else:
                    rewrite = ((lambda data, t=topic: self._rewrite_description(t, data))
                               if description else None)
                    self.bridge.add_ros_topic(topic, type_name, definitions.full_text(type_name),
                                              self._max_hz(topic), transform=rewrite,
                                              latched_depth=latched)
            except definitions.DefinitionError as err:
                self.get_logger().error(f"not bridging {topic}: {err}")
                self._subs[topic] = None
                continue
            self._subs[topic] = self.create_subscription(
                cls, topic, lambda data, t=topic: self.bridge.on_message(
                    t, self.get_clock().now().nanoseconds, data), qos, raw=True)
            self.get_logger().info(
                f"bridging {topic} [{type_name}]" + (" as JPEG" if jpeg else "")
                + (f", file:// meshes sent as package://{ASSET_PACKAGE}/<path> and served"
                   if description else "")
                + (f", latched: last {latched} kept" if latched else ""))

    def _discover_services(self) -> None:
        for name, types in self.get_service_names_and_types():
            if name in self._offered or not types or not any(
                    fnmatch.fnmatchcase(name, p) for p in self._service_patterns):
                continue
            try:
                srv = definitions.message_class(types[0])
            except definitions.DefinitionError as err:
                self.get_logger().error(f"not offering service {name}: {err}")
                self._offered[name] = None
                continue
            client = self.create_client(srv, name)
            self._offered[name] = client
            self.bridge.add_service(
                name, types[0], json_schema(srv.Request), json_schema(srv.Response),
                lambda payload, c=client, t=srv: self._call(c, t, payload))
            self.get_logger().info(f"offering service {name} [{types[0]}]")

    def _call(self, client, srv, payload: bytes) -> bytes:
        """A viewer's call (on the server's thread): JSON in, the ROS service, JSON out."""
        try:
            request = from_json(srv.Request, json.loads(payload.decode() or "{}"))
        except ValueError as err:  # JSONDecodeError and field errors alike
            raise ValueError(f"{client.srv_name}: bad request: {err}") from None
        # A viewer may call as soon as the service is offered, before this client has
        # matched the server: wait for it (bounded) rather than refuse.
        if not client.wait_for_service(timeout_sec=self._service_timeout):
            raise RuntimeError(f"{client.srv_name} is not available (has its node stopped?)")
        # Asked once: a service a viewer calls (an answer) need not be safe to repeat.
        response = wait_future(client.call_async(request), self._service_timeout,
                               client.srv_name)
        return json.dumps(to_json(response)).encode()

    # --- sender-thread handlers -------------------------------------------------------------
    def _to_jpeg(self, data: bytes) -> bytes:
        from sensor_msgs.msg import Image

        img = deserialize_message(data, Image)
        out = rgb_to_compressed(to_rgb(image_to_numpy(img), img.encoding), "jpeg",
                                self._jpeg_quality)
        out.header = img.header
        return serialize_message(out)

    def _rewrite_description(self, topic: str, data: bytes) -> bytes:
        from std_msgs.msg import String

        urdf = deserialize_message(data, String).data
        return serialize_message(String(data=self.bridge.assets.rewrite(urdf, topic)))

    def _report(self) -> None:
        parts = [f"{t}: {s.sent} sent, {s.rate_limited} rate-limited, {s.errors} errors"
                 for t, s in self.bridge.stats().items() if s.received]
        self.get_logger().info(f"sender queue drops {self.bridge.dropped}; " + "; ".join(parts))


def main(args=None) -> int:
    return run_node(BridgeNode, name="foxglove_bridge", args=args,
                    close=lambda node: node.bridge.close())


if __name__ == "__main__":
    sys.exit(main())
