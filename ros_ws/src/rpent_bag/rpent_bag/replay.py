"""Replay a recorded run: republish a bag's messages on their recorded topics, with their
recorded types and QoS, at the recorded pace (or scaled), so Foxglove, the recorder and
the agent tooling see a past run as if it were live.

    ros2 run rpent_bag replay runs/<time>/bag [--rate 2.0] [--topics /joint_states ...]

Messages go out serialized, byte for byte as recorded. Header stamps are the original
ones; no /clock is published.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Callable, Iterable, Optional

from rpent_bag import bagfile, definitions


class Pacer:
    """Maps bag time to wall time: message t is due at start + (t - t0) / rate."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        if not rate > 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        self.rate, self._clock, self._sleep = rate, clock, sleep
        self._t0: Optional[int] = None
        self._start = 0.0

    def wait(self, stamp_ns: int) -> float:
        """Sleep until the message is due; return how late it went out (s)."""
        if self._t0 is None:
            self._t0, self._start = stamp_ns, self._clock()
        due = self._start + (stamp_ns - self._t0) / 1e9 / self.rate
        delay = due - self._clock()
        if delay > 0:
            self._sleep(delay)
        return max(0.0, -delay)


def _qos_from_bag(conn, depth: int):
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    offered = list(getattr(conn.ext, "offered_qos_profiles", []) or [])
    reliable = all(q.reliability.name == "RELIABLE" for q in offered)
    latched = bool(offered) and all(q.durability.name == "TRANSIENT_LOCAL" for q in offered)
    depth = max([depth] + [q.depth for q in offered])
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=depth,
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)


def replay(node, bag_path, rate: float = 1.0, topics: Optional[Iterable[str]] = None,
           start_delay: float = 1.0, should_stop: Callable[[], bool] = lambda: False,
           pubs: Optional[dict] = None, subscribers: int = 0) -> dict:
    """Publish the bag from ``node``; return messages published per topic.

    Before the first message: with ``subscribers``, wait until every topic has that many
    (at most ``start_delay`` s); without, wait ``start_delay`` s for whoever comes.

    ``pubs`` (topic -> publisher) is filled and reused, so looping keeps one publisher.
    """
    published: dict = {}
    pubs = {} if pubs is None else pubs
    with bagfile.open_reader(bag_path) as reader:
        conns = bagfile.select(reader, topics)
        for conn in conns:
            published[conn.topic] = 0
            if conn.topic in pubs:
                continue
            try:
                cls = definitions.message_class(conn.msgtype)
            except definitions.DefinitionError as err:
                raise bagfile.BagError(f"cannot republish {conn.topic}: {err}") from None
            pubs[conn.topic] = node.create_publisher(cls, conn.topic, _qos_from_bag(conn, 10))
        # Give subscribers time to match before the first message (DDS discovery).
        deadline = time.monotonic() + start_delay
        while time.monotonic() < deadline and not (subscribers and all(
                pubs[c.topic].get_subscription_count() >= subscribers for c in conns)):
            time.sleep(0.01)
        pacer = Pacer(rate)
        for conn, stamp, data in bagfile.messages(reader, conns):
            if should_stop():
                break
            pacer.wait(stamp)
            pubs[conn.topic].publish(data)
            published[conn.topic] += 1
    return published


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bag", help="rosbag2 directory (contains metadata.yaml)")
    parser.add_argument("--rate", type=float, default=1.0, help="speed factor (2 = twice as fast)")
    parser.add_argument("--topics", nargs="+", help="only these topics (default: all)")
    parser.add_argument("--loop", action="store_true", help="start over at the end")
    parser.add_argument("--start-delay", type=float, default=1.0,
                        help="s to wait for subscribers before the first message (with "
                             "--subscribers: at most)")
    parser.add_argument("--subscribers", type=int, default=0,
                        help="start as soon as every topic has this many subscribers")
    args, ros_args = parser.parse_known_args(argv)
    if not args.rate > 0:
        parser.error("--rate must be > 0")

    import rclpy
    from rclpy.duration import Duration
    from rclpy.executors import ExternalShutdownException

    rclpy.init(args=ros_args)
    node = rclpy.create_node("replay")
    pubs: dict = {}
    try:
        while True:
            counts = replay(node, args.bag, args.rate, args.topics, args.start_delay, pubs=pubs,
                            subscribers=args.subscribers)
            node.get_logger().info("replayed " + ", ".join(f"{t}: {n}" for t, n in counts.items()))
            if not args.loop:
                # Reliable subscribers may still be fetching the last messages: exiting now
                # would take them away with the publishers.
                for pub in pubs.values():
                    pub.wait_for_all_acked(Duration(seconds=5))
                break
    except bagfile.BagError as err:
        print(f"[replay] {err}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
