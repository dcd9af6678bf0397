"""Pixels back to points: what perception answers must land where the object is, for a
pinhole camera and for a calibrated camera whose raw images are distorted."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
from sensor_msgs.msg import CameraInfo

from rpent_perception.geometry import Intrinsics, back_project

K = np.array([[500.0, 0.0, 319.5], [0.0, 505.0, 239.5], [0.0, 0.0, 1.0]])
# A camera 0.5 m above the base, looking straight down (optical z = base -z).
POSITION = np.array([0.4, 0.1, 0.5])
ORIENTATION = np.array([1.0, 0.0, 0.0, 0.0])  # x, y, z, w: 180 deg about x


def _info(model: str, d) -> CameraInfo:
    info = CameraInfo()
    info.header.frame_id = "cam_optical_frame"
    info.width, info.height = 640, 480
    info.k = K.ravel().tolist()
    info.distortion_model, info.d = model, [float(v) for v in d]
    return info


def _seen_at(point_base: np.ndarray, d) -> tuple[np.ndarray, float]:
    """Pixel where the camera sees a base-frame point (through its lens), and the depth."""
    camera = np.array([1.0, -1.0, -1.0]) * (point_base - POSITION)  # the 180 deg turn
    pixel, _ = cv2.projectPoints(camera.reshape(1, 1, 3), np.zeros(3), np.zeros(3), K,
                                 np.asarray(d, dtype=float))
    return pixel.reshape(2), float(camera[2])


@pytest.mark.parametrize("d", [[0.0] * 5, [-0.28, 0.09, 0.001, -0.0015, 0.0]],
                         ids=["pinhole", "plumb_bob"])
def test_a_pixel_goes_back_to_the_point_the_camera_saw(d):
    point = np.array([0.55, -0.05, 0.02])  # off-centre, where distortion is strong
    pixel, z = _seen_at(point, d)
    depth = np.full((480, 640), z, dtype=np.float32)
    found = back_project(pixel[0], pixel[1], depth, Intrinsics.from_camera_info(
        _info("plumb_bob", d)), POSITION, ORIENTATION)
    np.testing.assert_allclose(found, point, atol=1e-4)


def test_ignoring_the_distortion_would_miss_the_point():
    """The undistortion matters at this lens: a pinhole reading is centimetres off."""
    d = [-0.28, 0.09, 0.001, -0.0015, 0.0]
    point = np.array([0.55, -0.05, 0.02])
    pixel, z = _seen_at(point, d)
    depth = np.full((480, 640), z, dtype=np.float32)
    pinhole = back_project(pixel[0], pixel[1], depth, Intrinsics.from_camera_info(
        _info("plumb_bob", [0.0] * 5)), POSITION, ORIENTATION)
    assert np.linalg.norm(pinhole - point) > 0.01


def test_a_distortion_model_it_cannot_undo_is_refused_with_the_way_out():
    with pytest.raises(ValueError, match="image_proc"):
        Intrinsics.from_camera_info(_info("my_lens_model", [0.1, 0.0, 0.0, 0.0, 0.0]))
