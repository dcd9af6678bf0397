"""The FR3's limits, control spaces, its node's parameters and its driver's settings."""
from __future__ import annotations

from dataclasses import dataclass

from rpent_contract.control_space import ControlSpaceSpec
from rpent_contract.settings import (
    at_least,
    in_range,
    one_of,
    parameter,
    positive,
    vector,
    with_default,
    write_params_file,
)

from ..arm_driver import ArmSettings, ee_delta_space
from ..arm_settings import ArmNodeSettings

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


def _home_check(value):
    """home_joints: 7 finite angles inside the FR3's joint limits."""
    why = vector(7)(value)
    if why:
        return why
    outside = [f"joint {i + 1}: {v:g} not in [{lo:g}, {hi:g}]"
               for i, (v, lo, hi) in enumerate(zip(value, JOINT_LOWER, JOINT_UPPER))
               if not lo <= v <= hi]
    return f"outside the FR3 joint limits ({'; '.join(outside)})" if outside else None


@dataclass(frozen=True)
class FrankaNodeSettings(ArmNodeSettings):
    """The Franka node's parameters (``config/franka.yaml`` is written from them); the
    defaults are for a real FR3."""
    base_frame: str = with_default(ArmNodeSettings, "base_frame", "fr3_link0")
    ee_frame: str = with_default(ArmNodeSettings, "ee_frame", "fr3_hand_tcp")
    # The box keeps the hand above the table in front of the arm.
    workspace_min: tuple = with_default(ArmNodeSettings, "workspace_min", (0.25, -0.45, 0.05))
    workspace_max: tuple = with_default(ArmNodeSettings, "workspace_max", (0.80, 0.45, 0.80))
    # franky-sim's joints creep on after a motion: its arm needs longer to come to rest.
    settle_timeout: float = with_default(ArmNodeSettings, "settle_timeout", 5.0)
    robot_ip: str = parameter("172.16.0.2", "Franka control (FCI) address",
                              check=lambda v: None if v else "must not be empty")
    gripper: bool = parameter(True, "Use the Franka Hand")
    realtime_mode: str = parameter(
        "enforce", "enforce: refuse to run without a realtime kernel (hardware); ignore: run "
        "anyway (franky-sim, development)", check=one_of("enforce", "ignore"))
    relative_dynamics_factor: float = parameter(0.2, "franky relative dynamics factor of "
                                                "every motion", check=in_range(0, 1, lo_open=True))
    velocity_scale: float = parameter(1.0, "Safety scaling of every motion's velocity, "
                                      "acceleration and jerk", check=in_range(0, 1, lo_open=True))
    max_joint_step: float = parameter(0.05, "Largest joint change per step of "
                                      "joint_position", "rad", positive)
    home_joints: tuple = parameter((0.0, 0.0, 0.0, -1.57, 0.0, 1.57, 0.785), "Joint "
                                   "configuration reset moves to", "rad", _home_check)
    settle_velocity: float = parameter(1e-3, "A motion ends once every joint is slower than "
                                       "this", "rad/s", positive)
    reflex_retries: int = parameter(
        2, "Times per chunk the arm's abort of a late command stream "
        "(communication_constraints_violation, a discontinuity, franky's planner failing) is "
        "recovered from and the row sent again; 0 fails the chunk at once",
        check=at_least(0))
    gripper_speed: float = parameter(0.05, "Finger speed", "m/s", positive)
    gripper_force: float = parameter(
        20.0, "Grasp force when a goal gives none", "N",
        lambda v: None if 0 < v <= GRIPPER_MAX_FORCE else
        f"must be in (0, {GRIPPER_MAX_FORCE:g}] N")


PARAMS_HEADER = """\
# Parameters of the Franka FR3 robot node (rpent_hw/franka/node), node name `franka`, at
# their defaults; written by `python -m rpent_hw.franka.settings config/franka.yaml` from
# rpent_hw/franka/settings.py, where each is declared. Copy it to change a value:
#   ros2 run rpent_hw franka_node --ros-args --params-file config/franka.yaml
# The defaults are for a real FR3: set robot_ip to its FCI address (a PREEMPT_RT kernel for
# realtime_mode enforce), and set require_approval true while a policy is untested. Against
# franky-sim (python -m rpent_twins.franky_sim --hostname 127.0.0.1) give -p robot_ip:=127.0.0.1
# and the overrides rpent_twins.franky_sim.SIM_PARAMETERS lists (realtime_mode ignore, ...).
"""


if __name__ == "__main__":
    write_params_file(FrankaNodeSettings, PARAMS_HEADER)
