"""Recorder node: the contract topics, action-model feedback and agent events to a
rosbag2 (MCAP) bag, used where ``ros2 bag record`` is not installed.

Topics are found by name pattern as they appear on the graph (a robot started later is
still recorded) and subscribed serialized, so nothing is deserialized on the way to disk,
but for a robot description: its local meshes go into it (``embed_meshes``), so a viewer
draws the arm from the bag alone, on any machine (rpent_bag.embed).
SIGINT, SIGTERM and SIGHUP all end with a closed bag: summary, index and metadata.yaml
written, after the messages already delivered are taken (:meth:`RecorderNode.drain`). Other
nodes crashing only stops their topics.
"""
from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.serialization import deserialize_message, serialize_message
from rclpy.signals import SignalHandlerOptions
from std_msgs.msg import String

from rpent_bag import definitions, graph
from rpent_bag.embed import embed_meshes, is_description
from rpent_bag.recorder import BagRecorder, StampThinning
from rpent_bag.settings import RecorderSettings
from rpent_contract.params import ParameterError, check_all_known, declare_settings

IMAGE_TYPE = "sensor_msgs/msg/Image"


class RecorderNode(Node):
    def __init__(self):
        super().__init__("recorder")
        settings = declare_settings(self, RecorderSettings)
        self._embed, self._depth = settings.embed_meshes, settings.subscription_depth
        check_all_known(self)
        self._patterns = self._resolve("topics", list(settings.topics))
        self._exclude = tuple(self._resolve("exclude", [p for p in settings.exclude if p]))
        self.path = Path(settings.bag_path or f"runs/{time.strftime('%Y%m%d-%H%M%S')}/bag")
        try:
            self.recorder = BagRecorder(self.path, queue_size=settings.queue_size)
        except FileExistsError as err:
            raise ParameterError(f"parameter 'bag_path': {err}") from None
        self._thinning = (StampThinning(settings.image_rate) if settings.image_rate > 0
                          else None)
        self._subs = {}
        self._last_message = time.monotonic()
        self.create_timer(settings.discovery_period, self._discover)
        self._discover()
        self.get_logger().info(f"recording {self._patterns}"
                               + (f" but {list(self._exclude)}" if self._exclude else "")
                               + f" to {self.path}")

    def _resolve(self, parameter: str, patterns: list) -> list:
        try:
            return graph.resolve_patterns(self, patterns)
        except Exception as err:  # rclpy raises its own types for invalid names
            raise ParameterError(f"parameter '{parameter}' = {patterns}: {err}") from None

    def _discover(self) -> None:
        for topic, type_name in graph.discover(self, self._patterns, set(self._subs),
                                               self._exclude):
            try:
                cls = definitions.message_class(type_name)
                self.recorder.add_topic(topic, type_name, graph.offered_qos(self, topic))
            except definitions.DefinitionError as err:
                self.get_logger().error(f"not recording {topic}: {err}")
                self._subs[topic] = None
                continue
            qos = graph.subscription_qos(self, topic, self._depth)
            write = self._write
            if self._thinning is not None and type_name == IMAGE_TYPE:
                write = self._write_thinned
            elif self._embed and is_description(topic, type_name):
                write = self._write_description
            self._subs[topic] = self.create_subscription(
                cls, topic, lambda data, t=topic, w=write: w(t, data), qos, raw=True)
            self.get_logger().info(f"recording {topic} [{type_name}]")

    def _write(self, topic: str, data: bytes) -> None:
        self._last_message = time.monotonic()
        self.recorder.write(topic, self.get_clock().now().nanoseconds, data)

    def _write_thinned(self, topic: str, data: bytes) -> None:
        if self._thinning.keep(topic, data):
            self._write(topic, data)
        else:
            self._last_message = time.monotonic()

    def _write_description(self, topic: str, data: bytes) -> None:
        urdf = deserialize_message(data, String).data
        warn = lambda text: self.get_logger().warning(f"{topic}: {text}")  # noqa: E731
        self._write(topic, serialize_message(String(data=embed_meshes(urdf, warn))))

    def drain(self, executor) -> None:
        """Take the messages DDS delivered before the stop: spin until none came for
        DRAIN_QUIET_S (at most DRAIN_LIMIT_S)."""
        start = self._last_message = time.monotonic()
        while time.monotonic() - self._last_message < DRAIN_QUIET_S and \
                time.monotonic() - start < DRAIN_LIMIT_S and rclpy.ok():
            executor.spin_once(timeout_sec=0.05)

    def close(self) -> None:
        stats = self.recorder.close()
        counts = ", ".join(f"{t}: {n}" for t, n in sorted(stats.written.items()))
        print(f"[recorder] bag closed: {self.path} ({counts}); dropped {stats.dropped}", flush=True)
        for err in stats.errors[:5]:
            print(f"[recorder] write error: {err}", file=sys.stderr)


# s the recorder keeps taking messages after it is told to stop, until none came for
# DRAIN_QUIET_S: what DDS delivered before the signal is in the bag, a live publisher does not
# keep the recorder open.
DRAIN_QUIET_S = 0.3
DRAIN_LIMIT_S = 3.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def main(args=None) -> int:
    # rclpy's own handler would shut the context down at once, and what DDS had delivered but
    # the executor not yet taken would be lost: a signal (launch ends with SIGINT then
    # SIGTERM; a terminal may send SIGHUP) ends the recording loop instead.
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    stopping: list = []
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda n, _frame: stopping.append(n))
    try:
        node = RecorderNode()
    except (ValueError, definitions.DefinitionError) as err:
        print(f"[recorder] cannot start: {err}", file=sys.stderr)
        rclpy.try_shutdown()
        return 2
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    try:
        while not stopping and rclpy.ok():
            executor.spin_once(timeout_sec=0.1)
        node.drain(executor)
    finally:
        for signum in STOP_SIGNALS:  # a second Ctrl-C must not cut the close short
            signal.signal(signum, signal.SIG_IGN)
        node.close()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
