"""Pure-Python Cartesian `move_to` over LIBERO's native OSC_POSE action space.

LIBERO builds its Panda with robosuite 1.4's default OSC_POSE controller
(robosuite/controllers/config/osc_pose.json, loaded by
libero.libero.envs.env_wrapper.ControlEnv):

    input_max/min  = +1 / -1
    output_max/min = +/-[0.05, 0.05, 0.05, 0.5, 0.5, 0.5], control_delta = true

so each step the action's first three entries are scaled by 0.05 m and the next
three by 0.5 rad, and the controller's goal becomes ``current ee pose + delta``
(translation added in the world frame, the axis-angle rotation pre-multiplied
onto the current orientation, also world frame). An action of 1.0 therefore asks
for 5 cm (or 0.5 rad) *beyond the current pose* at this step; the impedance
controller (kp=150, critically damped) only covers part of that in one 50 ms
step, which is why commanding the remaining error every step converges smoothly.

All poses here are (position (3,), quaternion x, y, z, w) in one frame. The
native deltas are world-frame; in LIBERO the robot base frame is only translated
from the world frame, so base-frame poses from LiberoSim can be used directly.
"""

from __future__ import annotations

import numpy as np

from rpent_contract.geometry import limit_norm, rotation_error

OSC_POSE_MAX_POS_DELTA = 0.05
"""m of goal offset per unit of action (robosuite OSC_POSE output_max[:3])."""
OSC_POSE_MAX_ROT_DELTA = 0.5
"""rad of goal rotation (axis-angle) per unit of action (output_max[3:])."""

GRIPPER_OPEN = -1.0
GRIPPER_CLOSE = 1.0


def _vec3(v, name: str) -> np.ndarray:
    v = np.asarray(v, dtype=float)
    if v.shape != (3,) or not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be a finite 3-vector, got {v!r}")
    return v


def pose_error(current_pos, current_quat, target_pos, target_quat) -> tuple[float, float]:
    """(position error in m, orientation error in rad) between two poses."""
    pos_err = float(
        np.linalg.norm(_vec3(target_pos, "target_pos") - _vec3(current_pos, "current_pos"))
    )
    return pos_err, float(np.linalg.norm(rotation_error(current_quat, target_quat)))


def within_tolerance(
    current_pos, current_quat, target_pos, target_quat, pos_tol: float = 0.01, rot_tol: float = 0.1
) -> bool:
    """True when the pose is within pos_tol metres and rot_tol radians of the target."""
    pos_err, rot_err = pose_error(current_pos, current_quat, target_pos, target_quat)
    return pos_err <= pos_tol and rot_err <= rot_tol


def move_to(
    current_pos,
    current_quat,
    target_pos,
    target_quat,
    gripper: float = GRIPPER_OPEN,
    *,
    max_pos_step: float = OSC_POSE_MAX_POS_DELTA,
    max_rot_step: float = OSC_POSE_MAX_ROT_DELTA,
) -> np.ndarray:
    """One native 7-D OSC_POSE action that drives the ee towards the target pose.

    The remaining error is commanded as the goal offset, its length capped at
    max_pos_step (m) and max_rot_step (rad) - lower caps give slower, gentler
    motion - then scaled into the controller's [-1, 1] input range. `gripper`
    is passed through (-1 open, +1 close).
    """
    if not 0.0 < max_pos_step <= OSC_POSE_MAX_POS_DELTA:
        raise ValueError(
            f"max_pos_step must be in (0, {OSC_POSE_MAX_POS_DELTA}] m, got {max_pos_step}"
        )
    if not 0.0 < max_rot_step <= OSC_POSE_MAX_ROT_DELTA:
        raise ValueError(
            f"max_rot_step must be in (0, {OSC_POSE_MAX_ROT_DELTA}] rad, got {max_rot_step}"
        )
    if not np.isfinite(gripper):
        raise ValueError(f"gripper must be finite (-1 open, +1 close), got {gripper}")
    pos_delta = limit_norm(
        _vec3(target_pos, "target_pos") - _vec3(current_pos, "current_pos"), max_pos_step
    )
    rot_delta = limit_norm(rotation_error(current_quat, target_quat), max_rot_step)
    action = np.concatenate(
        [
            pos_delta / OSC_POSE_MAX_POS_DELTA,
            rot_delta / OSC_POSE_MAX_ROT_DELTA,
            [gripper],
        ]
    )
    return np.clip(action, -1.0, 1.0)
