"""The SO-101's control spaces and settings."""
from __future__ import annotations

from dataclasses import dataclass

from rpent_contract.control_space import ControlSpaceSpec

from ..arm_driver import ArmSettings, ee_delta_space
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
