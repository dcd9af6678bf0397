"""The Foxglove bridge's settings: every parameter it has, with its default, unit, range and
help, in one place. The node declares its parameters from :class:`BridgeSettings`, and
``config/foxglove_bridge.yaml`` is written from it (``python -m rpent_foxglove.settings
config/foxglove_bridge.yaml``)."""
from __future__ import annotations

from dataclasses import dataclass

from rpent_bag.settings import DEFAULT_EXCLUDE, DEFAULT_TOPICS, topic_names
from rpent_contract.names import ANSWER_SERVICE, RESET_SERVICE
from rpent_contract.settings import (
    in_range,
    non_negative,
    parameter,
    positive,
    write_params_file,
)


def _rate_limits(value):
    for item in (x for x in value if x):
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


@dataclass(frozen=True)
class BridgeSettings:
    allow_remote: bool = parameter(False, "Listen beyond loopback: any machine that reaches "
                                   "the port can then watch the robot and call the allowed "
                                   "services (the operator's answer)")
    # Beyond loopback only with allow_remote: the node checks the two together.
    host: str = parameter("127.0.0.1", "Address to listen on; 127.0.0.1 keeps it on this "
                          "machine", check=lambda v: None if v else
                          "must not be empty (use 0.0.0.0 for all interfaces)")
    port: int = parameter(8765, "WebSocket port; 0 picks a free one (logged)", check=_port)
    legacy_port: int = parameter(-1, "Port of the foxglove.websocket.v1 protocol, for viewers "
                                 "the SDK's foxglove.sdk.v1 port refuses (Foxglove Studio "
                                 "1.x); 0 picks a free one (logged), -1 = none",
                                 check=lambda v: None if v == -1 else _port(v))
    # What a recording keeps but the executed steps, which no panel shows.
    topics: tuple = parameter(tuple(t for t in DEFAULT_TOPICS if t != "executed_actions"),
                              "Allow-list: topic names or glob patterns, relative to the "
                              "namespace", check=topic_names)
    exclude: tuple = parameter(tuple(DEFAULT_EXCLUDE), "Topics not bridged although 'topics' "
                               "allows them (names or glob patterns); [''] = none. By default "
                               "the cameras' aligned depth, which no panel of the layout "
                               "shows and which a simulator renders only for a subscriber")
    # camera_info rarely changes: once a second is plenty for a viewer.
    rate_limits: tuple = parameter(("camera/*/camera_info:1",), "Per-topic 'pattern:max_hz' "
                                   "entries; unmatched = no limit; [''] = none",
                                   check=_rate_limits)
    services: tuple = parameter((ANSWER_SERVICE, "agent/start_run", "agent/cancel_run",
                                 RESET_SERVICE),
                                "Services a viewer may call (Call Service panel): names or "
                                "glob patterns, relative to the namespace")
    service_timeout: float = parameter(60.0, "Longest a viewer's service call waits for the "
                                       "ROS service (a start that switches the robot's task "
                                       "waits for its reset)", "s", positive)
    jpeg_topics: tuple = parameter(("",), "Image topics sent as JPEG CompressedImage on "
                                   "<topic>/compressed, e.g. ['camera/*/image_raw']")
    jpeg_quality: int = parameter(80, "JPEG quality 1-100",
                                  check=in_range(1, 100))
    queue_size: int = parameter(64, "Messages between ROS callbacks and the sender (the oldest "
                                "go when it is full)", check=positive)
    client_backlog: int = parameter(64, "Messages buffered per client before the oldest go",
                                    check=positive)
    subscription_depth: int = parameter(10, "History depth of each subscription",
                                        check=positive)
    latched_history: int = parameter(1000, "Messages of each latched topic (agent/events, "
                                     "agent/log) kept for viewers that connect later",
                                     check=positive)
    latched_newest: tuple = parameter(("task_status", "agent/run_status", "agent/markers",
                                       "sim/scene_markers", "operator/requests"),
                                      "Latched topics that carry a state, not a log: viewers "
                                      "that connect later get only the newest message")
    discovery_period: float = parameter(0.5, "Time between looks for new allowed topics", "s",
                                        positive)
    stats_period: float = parameter(10.0, "Time between statistics lines; 0 = never", "s",
                                    non_negative)


PARAMS_HEADER = """\
# Parameters of the Foxglove bridge (rpent_foxglove/bridge), at their defaults; written by
# `python -m rpent_foxglove.settings config/foxglove_bridge.yaml` from
# rpent_foxglove/settings.py, where each is declared. Copy it to change a value:
#   ros2 run rpent_foxglove bridge --ros-args --params-file config/foxglove_bridge.yaml
"""


if __name__ == "__main__":
    write_params_file(BridgeSettings, PARAMS_HEADER)
