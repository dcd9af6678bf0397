"""The parameters every real arm's node has beyond the robot contract's: its control rate,
the safety layer's limits, the operator approval gate, its OpenCV cameras and how its
driver starts, settles and names its task. An arm's settings class derives from
:class:`ArmNodeSettings` (``franka.settings``, ``so101.settings``)."""
from __future__ import annotations

from dataclasses import dataclass

from rpent_contract.robot_settings import RobotSettings
from rpent_contract.settings import in_range, non_negative, parameter, positive


@dataclass(frozen=True)
class ArmNodeSettings(RobotSettings):
    control_rate: float = parameter(20.0, "Chunk steps and state topics", "Hz",
                                    in_range(0, 200, lo_open=True))
    max_goal_translation: float = parameter(0.5, "Farthest a goal may move the end effector "
                                            "from its start", "m", positive)
    max_goal_rotation: float = parameter(1.6, "Largest rotation of the end effector in one "
                                         "goal", "rad", positive)
    watchdog_timeout: float = parameter(0.5, "Stop the arm when a chunk's next command is "
                                        "this late", "s", positive)
    require_approval: bool = parameter(False, "Hold every motion until an operator approves "
                                       "it on safety/approve (recommended on hardware while a "
                                       "policy is untested)")
    approval_timeout: float = parameter(60.0, "Refuse a motion not approved within this time",
                                        "s", positive)
    instruction: str = parameter("pick up the object on the table", "Task instruction "
                                 "published on task_status")
    settle_timeout: float = parameter(3.0, "Longest wait for the arm to come to rest after a "
                                      "motion", "s", positive)
    connect_timeout: float = parameter(15.0, "Keep trying to reach the arm for this long at "
                                       "start-up (it may come up after the node)", "s",
                                       non_negative)
    max_target_lead: float = parameter(
        0.01, "How far the target a relative chunk (ee_delta) continues from may lead the "
        "measured hand, or what the stream moves it in max_target_lag where that is farther. "
        "Each chunk continues from the target the one before left, so the motion flows on "
        "across chunks; a target farther ahead (the hand held up by contact, or a twin whose "
        "physics runs slower than the clock) is pulled back to it, so a policy's deltas do not "
        "pile up on a target the hand has not reached", "m", positive)
    max_target_lag: float = parameter(
        1.0, "See max_target_lead: the time of the stream the target may lead the hand by",
        "s", positive)
    cameras: tuple = parameter(("",), "OpenCV camera names (camera/<name>/image_raw); [''] = "
                               "none")
    camera_sources: tuple = parameter(("",), "Capture source per camera: index, /dev path, "
                                      "URL or video file")
    camera_width: int = parameter(640, "Camera image width", "px", in_range(16, 4096))
    camera_height: int = parameter(480, "Camera image height", "px", in_range(16, 4096))
    camera_fov_deg: float = parameter(69.0, "Horizontal field of view for the intrinsics of "
                                      "cameras without a calibration file", "deg",
                                      in_range(1, 179, lo_open=True, hi_open=True))
    camera_calibration_files: tuple = parameter(
        ("",), "Per camera, in the order of cameras: a ROS camera_calibration YAML, or '-' for "
        "intrinsics from camera_fov_deg; [''] = none")
    camera_extrinsics: tuple = parameter(
        ("",), "Per camera, in the order of cameras (then, optionally, external_cameras): "
        "'<mount frame> x y z qx qy qz qw', the optical frame (z forward, x right, y down) in "
        "the mount frame (a link of the robot, e.g. the hand for a wrist camera, or the base "
        "frame for one fixed in the room); [''] = unknown", "m")
