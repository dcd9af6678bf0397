"""Small pose helpers (quaternions are x, y, z, w as in geometry_msgs)."""
from __future__ import annotations

import numpy as np


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
    q_err = quaternion_multiply(qt, qc * np.array([-1.0, -1.0, -1.0, 1.0]))
    if q_err[3] < 0.0:
        q_err = -q_err
    sin_half = np.linalg.norm(q_err[:3])
    if sin_half < 1e-12:
        return np.zeros(3)
    return q_err[:3] / sin_half * 2.0 * np.arctan2(sin_half, q_err[3])


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
