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
from rpent_common.http_json import is_loopback
from rpent_contract.client import wait_future
from rpent_contract.node_main import run_node
from rpent_contract.images import image_to_numpy, rgb_to_compressed, to_rgb
from rpent_contract.params import ParameterError, declare_settings
from rpent_foxglove.bridge import ASSET_PACKAGE, FoxgloveBridge
from rpent_foxglove.json_message import from_json, json_schema, to_json
from rpent_foxglove.settings import BridgeSettings


class BridgeNode(Node):
    def __init__(self):
        super().__init__("foxglove_bridge")
        settings = declare_settings(self, BridgeSettings)
        host, port, legacy_port = settings.host, settings.port, settings.legacy_port
        if not (settings.allow_remote or is_loopback(host)):
            raise ParameterError(
                f"parameter 'host' = {host!r}: {host} is beyond loopback: anyone who reaches "
                "it could answer the operator's questions. Set allow_remote:=true to mean it "
                "(and keep 'services' to what remote viewers may call), or use 127.0.0.1 with "
                "an SSH tunnel (ssh -L 8765:127.0.0.1:8765 robot-host)")
        self._service_timeout = settings.service_timeout
        self._jpeg_quality = settings.jpeg_quality
        self._depth, self._latched_history = (settings.subscription_depth,
                                              settings.latched_history)
        try:
            self._patterns = graph.resolve_patterns(self, list(settings.topics))

            def named(patterns):
                return graph.resolve_patterns(self, [p for p in patterns if p])
            self._exclude = tuple(named(settings.exclude))
            self._service_patterns = named(settings.services)
            self._jpeg = named(settings.jpeg_topics)
            self._newest = named(settings.latched_newest)
            self._limits = []
            for item in (x for x in settings.rate_limits if x):
                pattern, _, hz = item.rpartition(":")
                self._limits.append((graph.resolve_patterns(self, [pattern])[0], float(hz)))
        except ParameterError:
            raise
        except Exception as err:  # rclpy's own exception types for invalid names
            raise ParameterError(f"invalid topic name in the parameters: {err}") from None
        try:
            self.bridge = FoxgloveBridge(host, port, settings.queue_size, settings.client_backlog,
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
        self.create_timer(settings.discovery_period, self._discover)
        if settings.stats_period > 0:
            self.create_timer(settings.stats_period, self._report)
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
