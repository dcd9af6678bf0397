"""USB / RealSense (UVC) cameras through OpenCV, each captured on a thread of its own.

A source is a device index ("0"), a device path ("/dev/video2"), a URL, or a video file
(played in a loop, which is how the tests feed a camera). Intrinsics come from a ROS
camera_calibration file (``camera_calibration_files``) or, without one, from the field of
view. Cameras run by their own ROS driver (realsense2_camera, usb_cam) need nothing here:
remap their topics onto ``camera/<name>/image_raw`` and ``camera_info`` and name them in the
robot's ``external_cameras``.
"""
from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Optional

import cv2
import numpy as np

from rpent_contract.driver import CameraImage, Lens
from rpent_contract.settings import ParameterError


class OpenCVCamera:
    """Latest frame of one capture source as an upright RGB :class:`CameraImage`."""

    def __init__(self, name: str, source: str, width: int, height: int, intrinsics: tuple,
                 rate: float, lens: Optional[Lens] = None):
        """``intrinsics``: (fx, fy, cx, cy) in pixels of the width x height image; ``lens``:
        its calibration's distortion, passed on with every frame."""
        self.name = name
        target = int(source) if source.isdigit() else source
        self._cap = cv2.VideoCapture(target)
        if not self._cap.isOpened():
            raise ValueError(f"camera '{name}': cannot open capture source '{source}' "
                             "(check the device index / path, or remove it from cameras)")
        self._is_file = not source.isdigit() and not source.startswith("/dev/") \
            and "://" not in source
        self._size = (width, height)
        self._intrinsics = tuple(float(v) for v in intrinsics)
        self._lens = lens
        self._period = 1.0 / rate
        self._latest: Optional[CameraImage] = None
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.error = ""
        self._thread = threading.Thread(target=self._run, name=f"camera-{name}", daemon=True)
        self._thread.start()

    def latest(self) -> Optional[CameraImage]:
        with self._lock:
            return self._latest

    def _run(self) -> None:
        while not self._closed.is_set():
            started = time.monotonic()
            ok, frame = self._cap.read()
            if not ok and self._is_file:  # a recording plays in a loop
                self._cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
                ok, frame = self._cap.read()
            if ok:
                rgb = cv2.cvtColor(cv2.resize(frame, self._size), cv2.COLOR_BGR2RGB)
                with self._lock:
                    self._latest = CameraImage(np.ascontiguousarray(rgb), *self._intrinsics,
                                               lens=self._lens)
                self.error = ""
            else:
                self.error = f"camera '{self.name}': no frame from its capture source"
            # Files would otherwise play as fast as they decode.
            self._closed.wait(max(0.0, self._period - (time.monotonic() - started)))

    def close(self) -> None:
        self._closed.set()
        self._thread.join(2.0)
        self._cap.release()


def load_calibration(path: str, width: int, height: int) -> tuple:
    """((fx, fy, cx, cy), lens) from a ROS camera_calibration YAML (what
    ``cameracalibrator`` and camera_info_manager write), checked against the image size it
    will be used at. ``lens`` is None when the file has no distortion coefficients."""
    import yaml

    def matrix(key: str, size: Optional[int], required: bool):
        """``size`` None: any length (distortion models differ in their number of
        coefficients)."""
        entry = data.get(key)
        if entry is None and not required:
            return None
        values = [float(v) for v in entry["data"]]
        if (size is not None and len(values) != size) \
                or not all(math.isfinite(v) for v in values):
            raise ValueError(f"{key}.data must be {size or 'some'} finite numbers, got "
                             f"{values}")
        return values

    try:
        data = yaml.safe_load(Path(path).read_text())
        size = (int(data["image_width"]), int(data["image_height"]))
        k = matrix("camera_matrix", 9, True)
        d = matrix("distortion_coefficients", None, False)
        r = matrix("rectification_matrix", 9, False)
        p = matrix("projection_matrix", 12, False)
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"camera calibration {path}: cannot read image_width, image_height, "
                         f"camera_matrix and the optional distortion_coefficients, "
                         f"rectification_matrix, projection_matrix ({err}); give the YAML file "
                         "that ROS camera_calibration writes") from None
    if k[0] <= 0 or k[4] <= 0:
        raise ValueError(f"camera calibration {path}: camera_matrix.data must be a row-major "
                         "K with positive focal lengths")
    if size != (width, height):
        raise ValueError(f"camera calibration {path} is for {size[0]}x{size[1]} images, the "
                         f"camera is captured at {width}x{height}: set camera_width / "
                         "camera_height to the calibrated size, or recalibrate")
    intrinsics = (k[0], k[4], k[2], k[5])
    if not d or not any(d):
        return intrinsics, None
    # A calibration without rectification / projection is a monocular one: identity R,
    # and the rectified image keeps K.
    lens = Lens(model=str(data.get("distortion_model") or "plumb_bob"), d=tuple(d),
                r=tuple(r or (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0)),
                p=tuple(p or (k[0], 0.0, k[2], 0.0, 0.0, k[4], k[5], 0.0, 0.0, 0.0, 1.0,
                              0.0)))
    return intrinsics, lens


def camera_specs(settings) -> dict:
    """The OpenCV cameras an arm node's settings (``rpent_hw.arm_settings``) name: name ->
    (source, width, height, (fx, fy, cx, cy), lens)."""
    names = [n for n in settings.cameras if n]
    sources = [s for s in settings.camera_sources if s]
    if len(names) != len(sources):
        raise ParameterError(
            f"cameras {names} and camera_sources {sources} need one source per camera")
    width, height, fov = settings.camera_width, settings.camera_height, settings.camera_fov_deg
    files = [f for f in settings.camera_calibration_files if f]
    if files and len(files) != len(names):
        raise ParameterError(f"camera_calibration_files has {len(files)} entries for cameras "
                             f"{names}: give one per camera ('-' for none), in the same order")
    fx = width / (2.0 * math.tan(math.radians(fov) / 2.0))
    from_fov = (fx, fx, width / 2.0, height / 2.0)
    cameras = {}
    for i, (name, source) in enumerate(zip(names, sources)):
        path = files[i] if files else "-"
        try:
            intrinsics, lens = (from_fov, None) if path == "-" else load_calibration(
                path, width, height)
        except ValueError as err:
            raise ParameterError(f"camera '{name}': {err}") from None
        cameras[name] = (source, width, height, intrinsics, lens)
    return cameras


def camera_mounts(settings, cameras, base_frame: str, log, external=()) -> dict:
    """Where each camera is mounted (``settings.camera_extrinsics``: one entry per camera of
    the node's own, then optionally one per ``external`` camera): name -> (mount frame,
    position, quaternion x, y, z, w) of its optical frame (z forward, x right, y down) in
    the mount frame, for the node's /tf_static. Cameras without extrinsics are named in a
    warning: their images carry an optical frame that tf cannot place."""
    entries = [e for e in settings.camera_extrinsics if e]
    names = list(cameras)
    if external and len(entries) == len(names) + len(external):
        names += list(external)
    if entries and len(entries) != len(names):
        also = (f" (or one for each of these and then for external_cameras {list(external)})"
                if external else "")
        raise ParameterError(f"camera_extrinsics has {len(entries)} entries for cameras "
                             f"{names}{also}: give one per camera, in the same order")
    mounts = {}
    for name, entry in zip(names, entries):
        fields = entry.split()
        try:
            values = np.array([float(v) for v in fields[1:]])
        except ValueError:
            values = np.array([])
        if len(fields) != 8 or not np.all(np.isfinite(values)) \
                or np.linalg.norm(values[3:]) < 1e-6:
            raise ParameterError(
                f"camera_extrinsics for camera '{name}' is {entry!r}; write '<mount frame> x y "
                "z qx qy qz qw' (metres, a unit quaternion), e.g. "
                f"'{base_frame} 0.5 0 0.4 0 0 0 1'")
        mounts[name] = (fields[0], values[:3], values[3:] / np.linalg.norm(values[3:]))
    if names and not entries:
        log.warning(f"no camera_extrinsics for cameras {names}: their images are published "
                    "but tf cannot place them; set camera_extrinsics to use them in 3-D")
    return mounts
