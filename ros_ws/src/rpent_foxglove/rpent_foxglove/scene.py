"""The 3D scene Foxglove draws: end-effector frame and marker, the last commanded target.

Plain functions from poses (position xyz, quaternion xyzw) to Foxglove SDK messages; the
bridge node decodes ee_pose and the agent's tool calls and logs what these return.
"""
from __future__ import annotations

import json
from typing import Optional, Sequence

from foxglove.messages import (ArrowPrimitive, Color, CubePrimitive, FrameTransform,
                               FrameTransforms, Pose, Quaternion, SceneEntity, SceneUpdate,
                               TextPrimitive, Timestamp, Vector3)

EE_COLOR = Color(r=0.2, g=0.6, b=1.0, a=0.9)
TARGET_COLOR = Color(r=1.0, g=0.5, b=0.1, a=0.8)


def _stamp(ns: int) -> Timestamp:
    return Timestamp(sec=ns // 10**9, nsec=ns % 10**9)


def _pose(position: Sequence[float], orientation: Sequence[float]) -> Pose:
    return Pose(position=Vector3(x=position[0], y=position[1], z=position[2]),
                orientation=Quaternion(x=orientation[0], y=orientation[1],
                                       z=orientation[2], w=orientation[3]))


def ee_transform(stamp_ns: int, parent: str, child: str, position, orientation) -> FrameTransforms:
    p, q = position, orientation
    return FrameTransforms(transforms=[FrameTransform(
        timestamp=_stamp(stamp_ns), parent_frame_id=parent, child_frame_id=child,
        translation=Vector3(x=p[0], y=p[1], z=p[2]),
        rotation=Quaternion(x=q[0], y=q[1], z=q[2], w=q[3]))])


def ee_entity(stamp_ns: int, frame: str, position, orientation) -> SceneUpdate:
    """A small cube at the end effector with an arrow along its approach (z) axis."""
    pose = _pose(position, orientation)
    return SceneUpdate(entities=[SceneEntity(
        timestamp=_stamp(stamp_ns), frame_id=frame, id="end_effector",
        cubes=[CubePrimitive(pose=pose, size=Vector3(x=0.03, y=0.03, z=0.03), color=EE_COLOR)],
        arrows=[ArrowPrimitive(pose=_pose(position, orientation), shaft_length=0.06,
                               shaft_diameter=0.006, head_length=0.02, head_diameter=0.015,
                               color=EE_COLOR)])])


def target_from_tool_call(arguments_json: str) -> Optional[tuple]:
    """(position, orientation or None) from a move_to-style call's JSON arguments."""
    try:
        args = json.loads(arguments_json or "{}")
    except json.JSONDecodeError:
        return None
    pos = args.get("position") if isinstance(args, dict) else None
    if not (isinstance(pos, list) and len(pos) == 3 and all(isinstance(v, (int, float)) for v in pos)):
        return None
    quat = args.get("orientation")
    ok = isinstance(quat, list) and len(quat) == 4 and all(isinstance(v, (int, float)) for v in quat)
    return [float(v) for v in pos], ([float(v) for v in quat] if ok else None)


def target_entity(stamp_ns: int, frame: str, position, orientation, label: str) -> SceneUpdate:
    q = orientation or [0.0, 0.0, 0.0, 1.0]
    return SceneUpdate(entities=[SceneEntity(
        timestamp=_stamp(stamp_ns), frame_id=frame, id="target",
        cubes=[CubePrimitive(pose=_pose(position, q), size=Vector3(x=0.025, y=0.025, z=0.025),
                             color=TARGET_COLOR)],
        texts=[TextPrimitive(pose=_pose([position[0], position[1], position[2] + 0.04], q),
                             billboard=True, font_size=14.0, scale_invariant=True,
                             color=TARGET_COLOR, text=label)])])

