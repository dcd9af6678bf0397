"""A robot's URDF: the text published on ``robot_description`` and the joint tree behind tf.

Forward kinematics are numpy only (no tf2, no KDL), so every ROS 2 install can publish the
link frames a viewer needs to place the model: fixed joints once on /tf_static, moving
joints from each measured ``joint_states`` on /tf, as robot_state_publisher would.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from .geometry import axis_angle_matrix, matrix_to_quaternion, rpy_to_matrix

MOVING = ("revolute", "continuous", "prismatic")


def _floats(text: Optional[str], default) -> np.ndarray:
    return np.array([float(v) for v in text.split()]) if text else np.array(default, float)


@dataclass
class Joint:
    name: str
    type: str
    parent: str
    child: str
    origin: np.ndarray  # 4x4, child frame at zero joint position in the parent frame
    axis: np.ndarray
    mimic: Optional[tuple] = None  # (joint, multiplier, offset)

    def transform(self, position: float) -> np.ndarray:
        motion = np.eye(4)
        if self.type in ("revolute", "continuous"):
            motion[:3, :3] = axis_angle_matrix(self.axis, position)
        elif self.type == "prismatic":
            motion[:3, 3] = self.axis * position
        return self.origin @ motion


@dataclass
class Transform:
    parent: str
    child: str
    position: np.ndarray
    orientation: np.ndarray  # x, y, z, w


def _position(joint: Joint, positions: Mapping[str, float]) -> float:
    if joint.name in positions:
        return float(positions[joint.name])
    if joint.mimic is not None:
        return float(positions.get(joint.mimic[0], 0.0) * joint.mimic[1] + joint.mimic[2])
    return 0.0


def _as_transform(joint: Joint, matrix: np.ndarray) -> Transform:
    return Transform(joint.parent, joint.child, matrix[:3, 3].copy(),
                     matrix_to_quaternion(matrix[:3, :3]))


class RobotModel:
    """The links and joints of one URDF, and the transforms of its joints."""

    def __init__(self, urdf: str, source: str = "robot_description"):
        self.urdf, self.source = urdf, source
        try:
            root = ET.fromstring(urdf)
        except ET.ParseError as err:
            raise ValueError(f"{source} is not valid XML: {err}") from None
        if root.tag != "robot":
            raise ValueError(f"{source} is not a URDF: its root element is <{root.tag}>, "
                             "not <robot>")
        self.links = [link.get("name") for link in root.findall("link")]
        self.joints: list[Joint] = []
        for j in root.findall("joint"):
            name, kind = j.get("name"), j.get("type")
            if kind not in MOVING + ("fixed",):
                raise ValueError(f"{source}: joint '{name}' is a {kind} joint; only fixed, "
                                 "revolute, continuous and prismatic joints are supported")
            origin = j.find("origin")
            matrix = np.eye(4)
            if origin is not None:
                matrix[:3, :3] = rpy_to_matrix(*_floats(origin.get("rpy"), (0, 0, 0)))
                matrix[:3, 3] = _floats(origin.get("xyz"), (0, 0, 0))
            axis_el = j.find("axis")
            axis = _floats(axis_el.get("xyz") if axis_el is not None else None, (1, 0, 0))
            if kind in MOVING:
                norm = np.linalg.norm(axis)
                if norm < 1e-9:
                    raise ValueError(f"{source}: joint '{name}' has a zero axis")
                axis = axis / norm
            mimic_el = j.find("mimic")
            mimic = None if mimic_el is None else (
                mimic_el.get("joint"), float(mimic_el.get("multiplier", 1.0)),
                float(mimic_el.get("offset", 0.0)))
            parent, child = j.find("parent"), j.find("child")
            if parent is None or child is None:
                raise ValueError(f"{source}: joint '{name}' lacks its <parent> or <child> link")
            self.joints.append(Joint(name, kind, parent.get("link"), child.get("link"), matrix,
                                     axis, mimic))
        children = [j.child for j in self.joints]
        twice = {c for c in children if children.count(c) > 1}
        if twice:
            raise ValueError(f"{source}: link(s) {sorted(twice)} have more than one parent joint")
        self.joint_names = [j.name for j in self.joints if j.type in MOVING]

    @classmethod
    def from_file(cls, path) -> "RobotModel":
        path = Path(path).expanduser().resolve()
        try:
            text = path.read_text()
        except OSError as err:
            raise ValueError(f"cannot read the robot description {path}: {err}") from None
        # Mesh paths relative to the file mean nothing to a subscriber: as file:// URIs a
        # viewer on this machine (RViz, Foxglove desktop) finds the meshes.
        text = re.sub(r'filename="(?![A-Za-z][A-Za-z0-9+.-]*://)([^"]+)"',
                      lambda m: f'filename="{(path.parent / m.group(1)).as_uri()}"', text)
        return cls(text, str(path))

    def fixed_transforms(self) -> list[Transform]:
        return [_as_transform(j, j.origin) for j in self.joints if j.type == "fixed"]

    def moving_transforms(self, positions: Mapping[str, float]) -> list[Transform]:
        """Every moving joint's transform at ``positions`` (joint name -> rad or m); a joint
        missing from them is at its mimicked joint's position, else at zero."""
        return [_as_transform(j, j.transform(_position(j, positions)))
                for j in self.joints if j.type in MOVING]

    def pose(self, ancestor: str, link: str, positions: Mapping[str, float]) -> np.ndarray:
        """4x4 pose of ``link`` in ``ancestor`` (a link above it) at ``positions``."""
        by_child = {j.child: j for j in self.joints}
        matrix, frame = np.eye(4), link
        while frame != ancestor:
            joint = by_child.get(frame)
            if joint is None:
                raise ValueError(f"{self.source}: '{ancestor}' is not above '{link}'")
            matrix = joint.transform(_position(joint, positions)) @ matrix
            frame = joint.parent
        return matrix
