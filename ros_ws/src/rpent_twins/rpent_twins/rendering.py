"""The twin's cameras as pictures: colour, depth and ground-truth segmentation rendered from
a copy of the twin's model at a state the twin port gave. Plain Python over MuJoCo.

Depth is what an aligned RealSense depth image holds: distance along the optical axis,
per colour pixel. Intrinsics follow from the camera's vertical field of view with square
pixels and the principal point at the image centre (ROS convention: pixel centres at
integer coordinates, so the centre of a W-pixel row is (W - 1) / 2).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .scene import Scene


@dataclass(frozen=True)
class Intrinsics:
    fx: float
    fy: float
    cx: float
    cy: float
    width: int
    height: int


def intrinsics(fovy_deg: float, width: int, height: int) -> Intrinsics:
    f = (height / 2.0) / math.tan(math.radians(fovy_deg) / 2.0)
    return Intrinsics(f, f, (width - 1) / 2.0, (height - 1) / 2.0, width, height)


def _for_cameras(xml: str, width: int, height: int) -> str:
    """The MJCF as the cameras render it: an offscreen buffer large enough for their
    images, and no shadows or multisampling (on a CPU renderer they cost 4x the frame)."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(xml)
    visual = root.find("visual")
    if visual is None:
        visual = ET.SubElement(root, "visual")
    for tag, attrs in (("global", {"offwidth": str(max(width, 640)),
                                   "offheight": str(max(height, 480))}),
                       ("quality", {"shadowsize": "0", "offsamples": "0"})):
        element = visual.find(tag)
        if element is None:
            element = ET.SubElement(visual, tag)
        element.attrib.update(attrs)
    return ET.tostring(root, encoding="unicode")


class SceneRenderer:
    """Renders the scene's cameras from qpos vectors of the twin's model."""

    def __init__(self, xml: str, scene: Scene, width: int, height: int):
        import mujoco

        self._mj = mujoco
        self.model = mujoco.MjModel.from_xml_string(_for_cameras(xml, width, height))
        self.data = mujoco.MjData(self.model)
        self.scene = scene
        self.width, self.height = width, height
        self._renderer = mujoco.Renderer(self.model, height, width)
        self.intrinsics = {c.name: intrinsics(c.fovy_deg, width, height) for c in scene.cameras}
        # geom id -> the item it belongs to (a bowl's walls are parts of the bowl)
        self._item_of_geom = {}
        for item in scene.items:
            body = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, item.name)
            for g in np.nonzero(self.model.geom_bodyid == body)[0]:
                self._item_of_geom[int(g)] = item.name

    def set_state(self, qpos) -> None:
        qpos = np.asarray(qpos, dtype=np.float64)
        if qpos.shape != (self.model.nq,):
            raise ValueError(f"the twin's state has {qpos.shape[0]} positions, this model "
                             f"{self.model.nq}: the camera node and the twin load different "
                             "scenes")
        self.data.qpos[:] = qpos
        self._mj.mj_kinematics(self.model, self.data)
        self._mj.mj_camlight(self.model, self.data)

    def colour(self, camera: str, exposure: float = 1.0) -> np.ndarray:
        self._renderer.update_scene(self.data, camera=camera)
        rgb = self._renderer.render()
        if exposure != 1.0:
            rgb = np.clip(rgb.astype(np.float32) * exposure, 0, 255).astype(np.uint8)
        return rgb

    def depth(self, camera: str) -> np.ndarray:
        """Metres along the optical axis, float32."""
        self._renderer.enable_depth_rendering()
        try:
            self._renderer.update_scene(self.data, camera=camera)
            return self._renderer.render().astype(np.float32)
        finally:
            self._renderer.disable_depth_rendering()

    def item_masks(self, camera: str) -> dict:
        """item name -> (H, W) bool mask of its visible pixels."""
        self._renderer.enable_segmentation_rendering()
        try:
            self._renderer.update_scene(self.data, camera=camera)
            seg = self._renderer.render()
        finally:
            self._renderer.disable_segmentation_rendering()
        ids, kinds = seg[..., 0], seg[..., 1]
        geoms = kinds == int(self._mj.mjtObj.mjOBJ_GEOM)
        masks: dict = {}
        for geom, name in self._item_of_geom.items():
            hit = geoms & (ids == geom)
            if hit.any():
                masks[name] = masks[name] | hit if name in masks else hit
        return masks

    def close(self) -> None:
        self._renderer.close()


def depth_to_millimetres(depth_m: np.ndarray, max_range_m: float = 10.0) -> np.ndarray:
    """16UC1 depth as a RealSense publishes it: millimetres, 0 where nothing was measured
    (beyond its range)."""
    mm = np.round(depth_m * 1000.0)
    mm[(depth_m <= 0) | (depth_m > max_range_m) | ~np.isfinite(depth_m)] = 0
    return mm.astype(np.uint16)


def matching_items(scene: Scene, query: str) -> list:
    """The items a text query names: every word of an item's name in the query ('red
    cube' -> red_cube), or the query's words all in the name ('cube' -> red_cube)."""
    words = set(re.findall(r"[a-z]+", query.lower())) - {"the", "a", "an"}
    found = []
    for item in scene.items:
        name = set(item.name.split("_"))
        if name <= words or (words and words <= name):
            found.append(item.name)
    return found


class FrameMemory:
    """The state each recently published frame was rendered from, by its pixels: the
    ground-truth segmenter answers only for images its cameras published."""

    def __init__(self, size: int = 64):
        self._size = size
        self._frames: dict = {}

    @staticmethod
    def key(rgb: np.ndarray) -> bytes:
        import hashlib

        return hashlib.sha1(np.ascontiguousarray(rgb).tobytes()).digest()

    def remember(self, rgb: np.ndarray, camera: str, qpos: np.ndarray) -> None:
        self._frames[self.key(rgb)] = (camera, qpos)
        while len(self._frames) > self._size:
            self._frames.pop(next(iter(self._frames)))

    def recall(self, rgb: np.ndarray) -> Optional[tuple]:
        return self._frames.get(self.key(rgb))
