"""The recorder's settings: every parameter it has, with its default, unit, range and help,
in one place. The node declares its parameters from :class:`RecorderSettings`, and
``config/recorder.yaml`` is written from it (``python -m rpent_bag.settings
config/recorder.yaml``)."""
from __future__ import annotations

from dataclasses import dataclass

from rpent_contract.settings import non_negative, parameter, positive, write_params_file

DEFAULT_TOPICS = [
    "joint_states", "ee_pose", "robot_state", "task_status", "executed_actions",
    "camera/*/image_raw", "camera/*/camera_info",
    "*predict/_action/feedback", "*predicted/*", "agent/events", "agent/log", "agent/activity",
    "agent/run_status", "agent/markers", "operator/requests",
    # What the policy sees (its inputs as it gets them) and where each chunk takes the hand.
    "*policy_input/*", "intended_path",
    # A simulator's objects and table, for a viewer's 3D panel, and the tasks it offers.
    "sim/scene_markers", "sim/tasks",
    # The robot model and its frames, so a viewer opening the bag draws the arm moving.
    "robot_description", "/tf", "/tf_static",
    # Every node's log lines (the robot's "waiting for the operator" among them).
    "/rosout",
]
# Aligned depth (camera/<name>/depth/...), which the image pattern also matches: a float or
# 16-bit image per camera per frame, more than half of a LIBERO bag, and rarely what a bag
# is kept for.
DEFAULT_EXCLUDE = ["camera/*/depth/*"]


def topic_names(value):
    """A list parameter of topic names or patterns: none empty, at least one."""
    return None if value and all(isinstance(t, str) and t for t in value) else \
        "must be a non-empty list of topic names"


@dataclass(frozen=True)
class RecorderSettings:
    topics: tuple = parameter(tuple(DEFAULT_TOPICS), "Topics to record: names or glob "
                              "patterns, relative to the namespace", check=topic_names)
    exclude: tuple = parameter(tuple(DEFAULT_EXCLUDE), "Topics not recorded although 'topics' "
                               "matches them (names or glob patterns); [''] = none, e.g. to "
                               "record aligned depth too")
    image_rate: float = parameter(0.0, "Images (sensor_msgs/msg/Image) kept per second of "
                                  "their stamps, at the same instants on every camera; 0 = "
                                  "every image", "Hz", non_negative)
    embed_meshes: bool = parameter(True, "Put the local meshes a robot_description names into "
                                   "it (data: URIs), so the bag shows the arm in a browser "
                                   "viewer anywhere; false: record the description as "
                                   "published (RViz replay)")
    bag_path: str = parameter("", "Bag directory to create; empty = runs/<time>/bag")
    queue_size: int = parameter(2000, "Messages buffered between DDS and the disk",
                                check=positive)
    subscription_depth: int = parameter(100, "History depth of each subscription",
                                        check=positive)
    discovery_period: float = parameter(0.5, "Time between looks for new matching topics",
                                        "s", positive)


PARAMS_HEADER = """\
# Parameters of the recorder (rpent_bag/record_node), used where `ros2 bag record` is
# absent, at their defaults; written by `python -m rpent_bag.settings config/recorder.yaml`
# from rpent_bag/settings.py, where each is declared. Copy it to change a value:
#   ros2 run rpent_bag recorder --ros-args --params-file config/recorder.yaml -p bag_path:=runs/x/bag
"""


if __name__ == "__main__":
    write_params_file(RecorderSettings, PARAMS_HEADER)
