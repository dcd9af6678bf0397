"""The FR3's limits, control spaces and settings."""
from __future__ import annotations

from dataclasses import dataclass

from rpent_contract.control_space import ControlSpaceSpec

from ..arm_driver import ArmSettings, ee_delta_space

ARM_JOINTS = tuple(f"fr3_joint{i}" for i in range(1, 8))
FINGER_JOINTS = ("fr3_finger_joint1", "fr3_finger_joint2")
# FR3 joint limits (Franka's datasheet), rad.
JOINT_LOWER = (-2.7437, -1.7837, -2.9007, -3.0421, -2.8065, 0.5445, -3.0159)
JOINT_UPPER = (2.7437, 1.7837, 2.9007, -0.1518, 2.8065, 4.5169, 3.0159)
GRIPPER_MAX_WIDTH = 0.08  # m, Franka Hand
GRIPPER_MAX_FORCE = 70.0  # N, Franka Hand continuous force
GRIPPER_TOLERANCE = 0.004  # m
RECONNECT_PERIOD = 1.0  # s
RECOVERY_STATE_WAIT = 0.05  # s for the arm's state to show a recovery (50 of its cycles)
# What franky raises when the commands reached the arm late: nothing about the motion
# itself is wrong, so after recovery the same target can be sent again.
LATE_STREAM_ERRORS = ("communication_constraints_violation", "motion_generator_velocity_"
                      "discontinuity", "motion_generator_acceleration_discontinuity",
                      "Motion planner failed")


def make_control_spaces(max_translation_step: float, max_rotation_step: float,
                        max_joint_step: float, frame_id: str) -> list[ControlSpaceSpec]:
    return [
        ee_delta_space(max_translation_step, max_rotation_step, frame_id),
        ControlSpaceSpec(
            name="joint_position", relative=False,
            labels=tuple(f"q{i}" for i in range(1, 8)) + ("gripper",),
            units=("rad",) * 7 + ("1",),
            lower=JOINT_LOWER + (-1.0,), upper=JOINT_UPPER + (1.0,),
            max_step_change=(max_joint_step,) * 7 + (2.0,),
            description="Absolute FR3 joint position targets in rad. Last column: gripper, "
                        "-1 opens, +1 closes (grasps), 0 keeps."),
    ]


@dataclass(frozen=True)
class FrankaSettings(ArmSettings):
    host: str  # FCI address
    gripper: bool  # a Franka Hand is fitted
    realtime: str  # "enforce" (PREEMPT_RT kernel) or "ignore"
    dynamics_factor: float  # franky relative dynamics of every motion, (0, 1]
    state_rate: float  # Hz the state is read at
    spaces: tuple  # ControlSpaceSpecs
    home_joints: tuple  # rad, where reset goes
    settle_velocity: float  # rad/s below which a motion has ended
    gripper_speed: float  # m/s
    gripper_force: float  # N when a goal gives none
    connect_timeout: float  # s to keep trying to reach the arm at start-up
    reflex_retries: int  # times per chunk a late-stream error is recovered from
