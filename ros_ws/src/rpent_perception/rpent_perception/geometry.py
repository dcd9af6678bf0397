"""Pixels to points: back-projection through a pinhole camera and its pose (no ROS).

Depth images follow REP-118 (metres along the optical axis; 0, NaN and inf mean no
reading); intrinsics and pixel coordinates follow ROS (pixel centres at integers); poses
are the camera's optical frame in the base frame as (position, quaternion x, y, z, w).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import cv2
import numpy as np

from rpent_contract.geometry import quaternion_to_matrix


@dataclass(frozen=True)
class Intrinsics:
    fx: float
    fy: float
    cx: float
    cy: float
    # camera_info's distortion: raw images of a calibrated lens; () = none
    distortion_model: str = "plumb_bob"
    d: tuple = ()

    @classmethod
    def from_camera_info(cls, info) -> "Intrinsics":
        k = info.k
        if not (k[0] > 0 and k[4] > 0):
            raise ValueError(f"camera_info of '{info.header.frame_id}' has no focal length "
                             "(K is empty): is the camera calibrated?")
        d = tuple(float(v) for v in info.d)
        if any(d) and info.distortion_model not in _UNDISTORT:
            raise ValueError(
                f"camera_info of '{info.header.frame_id}' has distortion model "
                f"'{info.distortion_model}', which this node cannot undo (it knows "
                f"{', '.join(sorted(_UNDISTORT))}): publish rectified images (image_proc) "
                "with their camera_info instead")
        return cls(float(k[0]), float(k[4]), float(k[2]), float(k[5]),
                   info.distortion_model, d if any(d) else ())

    def normalized(self, pixels: np.ndarray) -> np.ndarray:
        """(N, 2) pixels -> (N, 2) points on the z = 1 plane of the optical frame."""
        if not self.d:
            return np.stack([(pixels[:, 0] - self.cx) / self.fx,
                             (pixels[:, 1] - self.cy) / self.fy], axis=1)
        k = np.array([[self.fx, 0.0, self.cx], [0.0, self.fy, self.cy], [0.0, 0.0, 1.0]])
        points = _UNDISTORT[self.distortion_model](
            np.ascontiguousarray(pixels, dtype=np.float64).reshape(-1, 1, 2), k,
            np.asarray(self.d, dtype=np.float64))
        return points.reshape(-1, 2)


# camera_info distortion models (sensor_msgs/distortion_models) and how OpenCV undoes them
_UNDISTORT = {"plumb_bob": cv2.undistortPoints, "rational_polynomial": cv2.undistortPoints,
              "equidistant": cv2.fisheye.undistortPoints}


@dataclass(frozen=True)
class Located:
    """Where a detection's visible surface is, in the base frame."""

    center: np.ndarray  # (3,) m: centre of the visible surface's axis-aligned bounding box
    extent: np.ndarray  # (3,) m: size of that box
    points: int  # pixels with a valid depth reading
    cut_off: bool  # the mask touches the image border: part of the object is out of view


def _valid(depth: np.ndarray) -> np.ndarray:
    return np.isfinite(depth) & (depth > 0)


def back_project(u: float, v: float, depth: np.ndarray, intrinsics: Intrinsics,
                 position, orientation) -> np.ndarray:
    """The base-frame point seen at pixel (u, v) (column, row) of an aligned depth image."""
    depth = np.asarray(depth)
    if depth.ndim != 2:
        raise ValueError(f"depth must be an (H, W) image, got shape {depth.shape}")
    h, w = depth.shape
    if not (np.isfinite(u) and np.isfinite(v)):
        raise ValueError(f"pixel ({u}, {v}) is not finite")
    col, row = int(round(u)), int(round(v))
    if not (0 <= col < w and 0 <= row < h):
        raise ValueError(f"pixel ({u:g}, {v:g}) is outside the {w}x{h} image: u is the column "
                         f"(0..{w - 1}), v the row (0..{h - 1})")
    z = float(depth[row, col])
    if not _valid(np.array(z)):
        raise ValueError(f"no depth reading at pixel ({col}, {row}) (value {z}): the surface "
                         "is too far, too close or not seen by the depth camera; pick a pixel "
                         "on the object")
    return _to_base(np.array([[u, v]], dtype=float), np.array([z]), intrinsics,
                    position, orientation)[0]


def locate_mask(mask: np.ndarray, depth: np.ndarray, intrinsics: Intrinsics, position,
                orientation, min_points: int = 5) -> Optional[Located]:
    """Where the pixels of ``mask`` are; None when fewer than ``min_points`` have depth."""
    mask, depth = np.asarray(mask, dtype=bool), np.asarray(depth)
    if mask.shape != depth.shape:
        raise ValueError(f"mask {mask.shape} and depth {depth.shape} differ in size: the depth "
                         "image must be aligned to the segmented image")
    rows, cols = np.nonzero(mask & _valid(depth))
    if rows.size < min_points:
        return None
    points = _to_base(np.stack([cols, rows], axis=1).astype(float), depth[rows, cols],
                      intrinsics, position, orientation)
    lo, hi = points.min(axis=0), points.max(axis=0)
    cut_off = bool(mask[0].any() or mask[-1].any() or mask[:, 0].any() or mask[:, -1].any())
    return Located((lo + hi) / 2.0, hi - lo, int(rows.size), cut_off)


def _to_base(pixels: np.ndarray, z: np.ndarray, k: Intrinsics, position, orientation):
    camera = np.concatenate([k.normalized(pixels) * np.asarray(z, dtype=float)[:, None],
                             np.asarray(z, dtype=float)[:, None]], axis=1)
    return camera @ quaternion_to_matrix(orientation).T + np.asarray(position, dtype=float)
