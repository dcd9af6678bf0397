"""All of the project's rotation math, in one place and one set of conventions.

* Quaternions are x, y, z, w, as in geometry_msgs, tf and scipy. MuJoCo and robosuite
  store w, x, y, z: convert where their numbers enter (:func:`wxyz_to_xyzw`).
* Roll, pitch, yaw are URDF's: fixed axes, about x, then y, then z (REP-103).
* Rotation vectors (axis times angle, rad) take the short way round
  (:func:`rotation_error`, :func:`rotvec_to_quaternion`), except
  :func:`quaternion_to_axis_angle`, which keeps robosuite's signed formula because the
  LIBERO policies were trained on it.
* A rotation's quaternion is unique up to sign; :func:`canonical_quaternion` picks w >= 0
  where two must compare equal.
"""
from __future__ import annotations

import math

import numpy as np


def wxyz_to_xyzw(q) -> np.ndarray:
    """A MuJoCo / robosuite quaternion (w, x, y, z) in this project's order."""
    return np.array([q[1], q[2], q[3], q[0]], dtype=np.float64)


def xyzw_to_wxyz(q) -> np.ndarray:
    return np.array([q[3], q[0], q[1], q[2]], dtype=np.float64)


def canonical_quaternion(q) -> np.ndarray:
    """The unit quaternion of ``q``'s rotation with w >= 0, so equal rotations compare equal."""
    q = normalize_quaternion(q)
    return -q if q[3] < 0 else q


def quaternion_conjugate(q) -> np.ndarray:
    """The inverse rotation of a unit quaternion."""
    return np.asarray(q, dtype=np.float64) * np.array([-1.0, -1.0, -1.0, 1.0])


def normalize_quaternion(q) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64)
    if q.shape != (4,):
        raise ValueError(f"a quaternion has 4 values (x, y, z, w), got shape {q.shape}")
    n = np.linalg.norm(q)
    if not np.isfinite(n) or n < 1e-9:
        raise ValueError(f"quaternion {q.tolist()} has no orientation (norm {n:g})")
    return q / n


def quaternion_multiply(a, b) -> np.ndarray:
    """Hamilton product a * b of x, y, z, w quaternions (apply b, then a)."""
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return np.array([
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    ])


def quaternion_to_matrix(q) -> np.ndarray:
    """3x3 rotation matrix of an x, y, z, w quaternion."""
    x, y, z, w = normalize_quaternion(q)
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def compose(translation, rotation, position, orientation) -> tuple[np.ndarray, np.ndarray]:
    """A pose (``position``, ``orientation``) given in a frame that sits at (``translation``,
    ``rotation``) in its parent, expressed in that parent."""
    return (quaternion_to_matrix(rotation) @ np.asarray(position, dtype=np.float64)
            + translation, quaternion_multiply(rotation, orientation))


def rotation_error(current, target) -> np.ndarray:
    """Axis-angle vector (rad) rotating orientation ``current`` onto ``target`` (both xyzw),
    in the frame both are given in (R_target R_current^T), the short way round."""
    qc, qt = normalize_quaternion(current), normalize_quaternion(target)
    q_err = quaternion_multiply(qt, quaternion_conjugate(qc))
    if q_err[3] < 0.0:
        q_err = -q_err
    sin_half = np.linalg.norm(q_err[:3])
    if sin_half < 1e-12:
        return np.zeros(3)
    return q_err[:3] / sin_half * 2.0 * np.arctan2(sin_half, q_err[3])


def rpy_to_matrix(roll: float, pitch: float, yaw: float) -> np.ndarray:
    cr, sr, cp, sp, cy, sy = (np.cos(roll), np.sin(roll), np.cos(pitch), np.sin(pitch),
                              np.cos(yaw), np.sin(yaw))
    return np.array([
        [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
        [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
        [-sp, cp * sr, cp * cr]])


def rpy_to_quaternion(roll: float, pitch: float, yaw: float) -> np.ndarray:
    cr, sr = math.cos(roll / 2), math.sin(roll / 2)
    cp, sp = math.cos(pitch / 2), math.sin(pitch / 2)
    cy, sy = math.cos(yaw / 2), math.sin(yaw / 2)
    return np.array([sr * cp * cy - cr * sp * sy, cr * sp * cy + sr * cp * sy,
                     cr * cp * sy - sr * sp * cy, cr * cp * cy + sr * sp * sy])


def matrix_to_rpy(m: np.ndarray) -> np.ndarray:
    """Roll, pitch, yaw of a rotation matrix; at pitch +-90 deg (gimbal lock) roll is 0 and
    the rotation about the vertical is all yaw."""
    pitch = float(np.arcsin(-np.clip(m[2, 0], -1.0, 1.0)))
    if abs(m[2, 0]) < 1.0 - 1e-9:
        return np.array([np.arctan2(m[2, 1], m[2, 2]), pitch, np.arctan2(m[1, 0], m[0, 0])])
    return np.array([0.0, pitch, np.arctan2(-m[0, 1], m[1, 1])])


def quaternion_to_rpy(q) -> np.ndarray:
    return matrix_to_rpy(quaternion_to_matrix(q))


def axis_angle_matrix(axis, angle: float) -> np.ndarray:
    """Rotation by ``angle`` rad about the unit vector ``axis`` (Rodrigues)."""
    x, y, z = axis
    c, s = np.cos(angle), np.sin(angle)
    k = np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
    return np.eye(3) + s * k + (1.0 - c) * (k @ k)


def matrix_to_quaternion(m: np.ndarray) -> np.ndarray:
    """The quaternion of a rotation matrix (Shepperd's method: stable at every angle)."""
    trace = m[0, 0] + m[1, 1] + m[2, 2]
    if trace > 0:
        s = 2.0 * np.sqrt(trace + 1.0)
        q = [(m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, s / 4]
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2])
        q = [s / 4, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s, (m[2, 1] - m[1, 2]) / s]
    elif m[1, 1] > m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2])
        q = [(m[0, 1] + m[1, 0]) / s, s / 4, (m[1, 2] + m[2, 1]) / s, (m[0, 2] - m[2, 0]) / s]
    else:
        s = 2.0 * np.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1])
        q = [(m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, s / 4, (m[1, 0] - m[0, 1]) / s]
    q = np.array(q)
    return q / np.linalg.norm(q)


def quaternion_to_axis_angle(q) -> np.ndarray:
    """Rotation vector with robosuite's formula (``transform_utils.quat2axisangle``, which
    openpi's LIBERO example copies and LeRobot's ``LiberoProcessorStep`` ports): the angle
    is ``2 acos(w)`` as signed, so ``q`` and ``-q`` give different vectors."""
    q = np.asarray(q, dtype=np.float64)
    w = min(1.0, max(-1.0, float(q[3])))
    den = math.sqrt(1.0 - w * w)
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return q[:3] * 2.0 * math.acos(w) / den


def rotvec_to_quaternion(rotvec) -> np.ndarray:
    rotvec = np.asarray(rotvec, dtype=np.float64)
    angle = float(np.linalg.norm(rotvec))
    if angle < 1e-12:
        return np.array([0.0, 0.0, 0.0, 1.0])
    axis = rotvec / angle
    return np.concatenate([axis * np.sin(angle / 2), [np.cos(angle / 2)]])


def rotation_angle(a, b) -> float:
    """Angle of the rotation between two orientations, rad in [0, pi]."""
    dot = abs(float(np.dot(normalize_quaternion(a), normalize_quaternion(b))))
    return 2.0 * float(np.arccos(min(1.0, dot)))


def slerp(a, b, fraction: float) -> np.ndarray:
    a, b = normalize_quaternion(a), normalize_quaternion(b)
    dot = float(np.dot(a, b))
    if dot < 0.0:  # the short way round
        b, dot = -b, -dot
    if dot > 0.9995:
        return normalize_quaternion(a + fraction * (b - a))
    theta = np.arccos(dot)
    return (np.sin((1 - fraction) * theta) * a + np.sin(fraction * theta) * b) / np.sin(theta)


def limit_norm(v, max_norm: float) -> np.ndarray:
    """Scale ``v`` down to ``max_norm`` if longer: a straight path, unlike per-axis clipping."""
    v = np.asarray(v, dtype=np.float64)
    norm = np.linalg.norm(v)
    return v if norm <= max_norm else v * (max_norm / norm)


def pose_to_msg(position, orientation, msg=None):
    from geometry_msgs.msg import Pose

    msg = msg if msg is not None else Pose()
    msg.position.x, msg.position.y, msg.position.z = (float(v) for v in position)
    (msg.orientation.x, msg.orientation.y,
     msg.orientation.z, msg.orientation.w) = (float(v) for v in orientation)
    return msg


# The fixed frame a robot with a world (a simulator) puts its base in on /tf_static, under
# the robot's frame_prefix.
WORLD_FRAME = "world"


def stamp_to_ns(stamp) -> int:
    """A builtin_interfaces/Time as integer nanoseconds, exact (no float rounding)."""
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def pose_from_msg(msg) -> tuple[np.ndarray, np.ndarray]:
    p, q = msg.position, msg.orientation
    return np.array([p.x, p.y, p.z]), np.array([q.x, q.y, q.z, q.w])
