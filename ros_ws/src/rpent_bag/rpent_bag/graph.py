"""Find contract topics on the ROS graph and subscribe to them serialized (shared by the
recorder and the Foxglove bridge)."""
from __future__ import annotations

import fnmatch

from rclpy.expand_topic_name import expand_topic_name
from rclpy.qos import (DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy)

# rmw's "infinite" duration as Humble's rosbag2 writes it in offered_qos_profiles.
_INFINITE = (2147483647, 4294967295)


def resolve_patterns(node, patterns) -> list[str]:
    """Make relative names / glob patterns absolute in the node's namespace (rcl's expansion
    refuses the glob characters, so they are set aside while it checks the rest)."""
    out = []
    for pattern in patterns:
        checked = expand_topic_name(pattern.replace("*", "x").replace("?", "x"),
                                    node.get_name(), node.get_namespace())
        ns = node.get_namespace().rstrip("/")
        out.append(pattern if pattern.startswith("/") else
                   checked if pattern.startswith("~") else f"{ns}/{pattern}")
    return out


def discover(node, patterns: list[str], known: set,
             exclude: tuple = ()) -> list[tuple[str, str]]:
    """(topic, type) pairs on the graph matching the patterns, and none of the ``exclude``
    patterns, that are not in ``known``.

    A topic only subscribers have made known so far (the agent subscribes task_status
    before the robot's publisher is discovered) is left for a later look: the QoS a
    subscription must match, latched or not, is the publishers'."""
    found = []
    for topic, types in node.get_topic_names_and_types():
        if topic in known or not types:
            continue
        if (any(fnmatch.fnmatchcase(topic, p) for p in patterns)
                and not any(fnmatch.fnmatchcase(topic, p) for p in exclude)
                and node.get_publishers_info_by_topic(topic)):
            found.append((topic, types[0]))
    return found


def is_latched(node, topic: str) -> bool:
    """Whether every publisher of the topic is transient local (latched)."""
    infos = node.get_publishers_info_by_topic(topic)
    return bool(infos) and all(
        i.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL for i in infos)


def subscription_qos(node, topic: str, depth: int, newest_only: bool = False) -> QoSProfile:
    """A QoS that matches every publisher: reliable / transient-local only when all
    publishers offer it, so latched topics arrive after the fact. A latched topic is read
    with KEEP_ALL: a late subscriber then gets all the history the publishers keep (the
    agent's events of a whole run), whose depth the graph does not tell (DDS discovery
    reports a remote publisher's depth as 0); with ``newest_only`` (a topic that carries a
    state, not a log), only the newest of it."""
    infos = node.get_publishers_info_by_topic(topic)
    reliable = bool(infos) and all(
        i.qos_profile.reliability == ReliabilityPolicy.RELIABLE for i in infos)
    latched = is_latched(node, topic)
    if latched and newest_only:
        history, depth = HistoryPolicy.KEEP_LAST, 1
    else:
        history = HistoryPolicy.KEEP_ALL if latched else HistoryPolicy.KEEP_LAST
    return QoSProfile(
        history=history, depth=depth,
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)


def offered_qos(node, topic: str) -> list:
    """The publishers' QoS as rosbags Qos records (rosbag2's offered_qos_profiles)."""
    from rosbags.interfaces import (Qos, QosDurability, QosHistory, QosLiveliness,
                                    QosReliability, QosTime)

    def duration(d):
        ns = d.nanoseconds
        if ns <= 0 or ns >= 2**63 - 1 or ns // 10**9 >= _INFINITE[0]:
            return QosTime(*_INFINITE) if ns > 0 else QosTime(0, 0)
        return QosTime(ns // 10**9, ns % 10**9)

    def enum(cls, value):
        try:
            return cls(int(value))
        except ValueError:
            return cls.UNKNOWN

    out = []
    for info in node.get_publishers_info_by_topic(topic):
        q = info.qos_profile
        out.append(Qos(
            enum(QosHistory, q.history), int(q.depth), enum(QosReliability, q.reliability),
            enum(QosDurability, q.durability), duration(q.deadline), duration(q.lifespan),
            enum(QosLiveliness, q.liveliness), duration(q.liveliness_lease_duration),
            bool(q.avoid_ros_namespace_conventions)))
    return out
