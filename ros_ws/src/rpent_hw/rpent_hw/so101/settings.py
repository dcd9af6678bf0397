"""The SO-101's control spaces, its node's parameters and its driver's settings."""
from __future__ import annotations

from dataclasses import dataclass

from rpent_contract.control_space import ControlSpaceSpec
from rpent_contract.settings import (
    non_negative,
    parameter,
    positive,
    vector,
    with_default,
    write_params_file,
)

from ..arm_driver import ArmSettings, ee_delta_space
from ..arm_settings import ArmNodeSettings
from .kinematics import ARM_JOINTS, GRIPPER_JOINT

MOTORS = ARM_JOINTS + (GRIPPER_JOINT,)
ACTION_KEYS = tuple(f"{m}.pos" for m in MOTORS)
GRIPPER_TOLERANCE = 2.0  # gripper units (0-100)
STEPS_PER_DEGREE = 4095 / 360.0


def make_control_spaces(max_translation_step: float, max_rotation_step: float,
                        max_joint_step: float, lower_deg, upper_deg,
                        frame_id: str) -> list[ControlSpaceSpec]:
    return [
        ee_delta_space(max_translation_step, max_rotation_step, frame_id,
                       " (a 5-joint arm follows rotations as closely as it can)"),
        ControlSpaceSpec(
            name="joint_position", relative=False, labels=ACTION_KEYS,
            units=("deg",) * 5 + ("percent",),
            lower=tuple(lower_deg) + (0.0,), upper=tuple(upper_deg) + (100.0,),
            max_step_change=(max_joint_step,) * 5 + (100.0,),
            description="LeRobot SO-101 action: absolute joint targets in degrees from the "
                        "middle of each calibrated range, gripper 0 (closed) to 100 (open)."),
    ]


@dataclass(frozen=True)
class SO101Settings(ArmSettings):
    port: str  # serial port of the servo bus
    robot_id: str  # names the calibration file <calibration_dir>/<robot_id>.json
    calibration_dir: str  # '' = LeRobot's default folder
    max_relative_target: float  # deg: LeRobot's per-write clip, 0 = off
    max_translation_step: float  # m per step of ee_delta
    max_rotation_step: float  # rad per step of ee_delta
    frame_id: str  # base frame of ee_delta
    home: tuple  # reset pose: five joints in degrees, gripper 0-100
    max_joint_step: float  # deg per control step of any motion
    ik_tolerance: float  # m: Cartesian targets the IK misses by more are refused
    gripper_max_width: float  # m at gripper 100
    disable_torque_on_exit: bool
    connect_timeout: float  # s to keep trying to reach the bus at start-up
    tcp_offset: tuple  # m, in the gripperframe site's frame: the point ee poses are of


@dataclass(frozen=True)
class SO101NodeSettings(ArmNodeSettings):
    """The SO-101 node's parameters (``config/so101.yaml`` is written from them)."""
    # so101_new_calib's base link and gripperframe site.
    ee_frame: str = with_default(ArmNodeSettings, "ee_frame", "gripper_frame_link")
    # The box keeps the jaws above the table in front of the arm.
    workspace_min: tuple = with_default(ArmNodeSettings, "workspace_min", (0.10, -0.30, 0.02))
    workspace_max: tuple = with_default(ArmNodeSettings, "workspace_max", (0.42, 0.30, 0.35))
    max_translation_step: float = with_default(ArmNodeSettings, "max_translation_step", 0.01)
    # A joint chunk's rotation adds up over the three pitch joints.
    max_rotation_step: float = with_default(ArmNodeSettings, "max_rotation_step", 0.15)
    control_rate: float = with_default(ArmNodeSettings, "control_rate", 30.0,
                                       "Bus read+write cycles, chunk steps and state topics")
    max_goal_translation: float = with_default(ArmNodeSettings, "max_goal_translation", 0.3)
    port: str = parameter("/dev/ttyACM0", "Serial port of the servo bus (lerobot-find-port)",
                          check=lambda v: None if v else "must not be empty")
    robot_id: str = parameter(
        "so101_follower", "LeRobot robot id: names the calibration file "
        "<calibration_dir>/<robot_id>.json",
        check=lambda v: None if v and "/" not in v else "must be a non-empty file name")
    calibration_dir: str = parameter("", "LeRobot calibration folder; '' = LeRobot's default "
                                     "(~/.cache/huggingface/lerobot/calibration/robots/"
                                     "so_follower)")
    max_relative_target: float = parameter(
        0.0, "LeRobot's per-write clip of every joint target to this far from the present "
        "position; 0 = off", "deg", non_negative)
    max_joint_step: float = parameter(4.0, "Largest joint change per control step of any "
                                      "motion", "deg", positive)
    home: tuple = parameter((0.0, -30.0, 30.0, 60.0, 0.0, 50.0), "Pose reset moves to: five "
                            "joints in degrees, gripper 0-100", check=vector(6))
    ik_position_tolerance: float = parameter(0.005, "Refuse Cartesian targets the IK cannot "
                                             "reach this closely", "m", positive)
    gripper_max_width: float = parameter(0.07, "Jaw opening at gripper 100 (widths scale "
                                         "linearly)", "m", positive)
    disable_torque_on_exit: bool = parameter(True, "Switch the servos off when the node exits "
                                             "(LeRobot's default; the arm then drops under "
                                             "gravity)")
    tcp_offset: tuple = parameter(
        (0.0, 0.0, 0.0), "Tool centre point in the gripper_frame_link frame (LeRobot's IK "
        "target, at the fixed jaw's tip; z points across the jaws): ee_pose, the ee frame on "
        "tf, move_to and ee_delta are of this point", "m", vector(3))


PARAMS_HEADER = """\
# Parameters of the SO-101 robot node (rpent_hw/so101/node), LeRobot's SO101Follower, node
# name `so101`, at their defaults; written by `python -m rpent_hw.so101.settings
# config/so101.yaml` from rpent_hw/so101/settings.py, where each is declared. Copy it to
# change a value:
#   ros2 run rpent_hw so101_node --ros-args --params-file config/so101.yaml -p port:=/dev/ttyACM0
# Calibrate the arm once first (the node never prompts), in one command:
#   lerobot-calibrate --robot.type=so101_follower --robot.port=/dev/ttyACM0
#       --robot.id=so101_follower
# Without an arm: python -m rpent_twins.feetech_emulator --calibration-dir /tmp/so101_cal
#   prints a pty port; pass -p port:=<it> -p calibration_dir:=/tmp/so101_cal
#   -p robot_id:=so101_emulated
"""


if __name__ == "__main__":
    write_params_file(SO101NodeSettings, PARAMS_HEADER)
