"""Small pose helpers (quaternions are x, y, z, w as in geometry_msgs)."""
from __future__ import annotations

import numpy as np


def normalize_quaternion(q) -> np.ndarray:
    q = np.asarray(q, dtype=np.float64)
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


def pose_to_msg(position, orientation, msg=None):
    from geometry_msgs.msg import Pose

    msg = msg if msg is not None else Pose()
    msg.position.x, msg.position.y, msg.position.z = (float(v) for v in position)
    (msg.orientation.x, msg.orientation.y,
     msg.orientation.z, msg.orientation.w) = (float(v) for v in orientation)
    return msg


def pose_from_msg(msg) -> tuple[np.ndarray, np.ndarray]:
    p, q = msg.position, msg.orientation
    return np.array([p.x, p.y, p.z]), np.array([q.x, q.y, q.z, q.w])
