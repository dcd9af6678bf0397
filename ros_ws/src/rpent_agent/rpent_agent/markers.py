"""What the agent aims at and what it found, as `visualization_msgs/MarkerArray`: the last
`move_to` target, the objects `locate` returned and the simulator's object positions
(`get_object_poses`), in the robot's base frame.

Markers are plain ROS messages, so RViz, Lichtblick and Foxglove draw them live and every
recorder keeps them: a bag opened in a viewer shows the same 3D scene as the live run.
Each update is the whole scene (a DELETEALL first), so a viewer that joins late or a bag
read from the middle shows what the agent saw last, not a mix of older calls.
"""
from __future__ import annotations

import math
from typing import Optional

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point, Quaternion, Vector3
from std_msgs.msg import ColorRGBA
from visualization_msgs.msg import Marker, MarkerArray

from rpent_contract.geometry import rpy_to_quaternion

TARGET = ColorRGBA(r=1.0, g=0.5, b=0.1, a=0.8)
LOCATED = ColorRGBA(r=0.2, g=0.8, b=0.3, a=0.35)
KNOWN = ColorRGBA(r=0.6, g=0.4, b=1.0, a=0.8)
TEXT = 0.025  # m, label height: readable next to 5 cm objects without hiding them
TEXT_ABOVE = 0.04  # m


def _finite(values, n: int) -> Optional[list]:
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError):
        return None
    return out if len(out) == n and all(math.isfinite(v) for v in out) else None


class SceneMarkers:
    """The agent's scene for one robot; ``update_*`` return the MarkerArray to publish, or
    None when a call changes nothing drawable (bad arguments are the toolkit's to refuse)."""

    def __init__(self, frame: str):
        self.frame = frame
        self._groups: dict = {}  # namespace -> [Marker]

    def clear(self, stamp: Time) -> MarkerArray:
        self._groups.clear()
        return self._array(stamp)

    def update_target(self, stamp: Time, arguments) -> Optional[MarkerArray]:
        """From ``move_to``'s arguments (x, y, z and optional rpy)."""
        if not isinstance(arguments, dict):
            return None
        position = _finite([arguments.get(k) for k in ("x", "y", "z")], 3)
        if position is None:
            return None
        orientation = Quaternion(w=1.0)
        if arguments.get("rpy") is not None:
            rpy = _finite(arguments["rpy"], 3)
            if rpy is None:
                return None
            x, y, z, w = (float(v) for v in rpy_to_quaternion(*rpy))
            orientation = Quaternion(x=x, y=y, z=z, w=w)
        cube = self._marker(stamp, "target", 0, Marker.CUBE, position, Vector3(
            x=0.025, y=0.025, z=0.025), TARGET, orientation)
        self._groups["target"] = [cube, self._label(stamp, "target", 1, position, "move_to")]
        return self._array(stamp)

    def update_located(self, stamp: Time, objects) -> MarkerArray:
        """From ``locate``'s objects: a translucent box of each one's seen extent."""
        markers = []
        for i, obj in enumerate(objects):
            position = _finite(obj.position, 3)
            extent = _finite(obj.extent, 3)
            if position is None or extent is None:
                continue
            size = Vector3(**{k: max(v, 0.01) for k, v in zip("xyz", extent)})
            markers.append(self._marker(stamp, "located", 2 * i, Marker.CUBE, position, size,
                                        LOCATED))
            markers.append(self._label(stamp, "located", 2 * i + 1, position,
                                       f"{obj.label} {obj.score:.2f}",
                                       above=extent[2] / 2 + TEXT_ABOVE))
        self._groups["located"] = markers
        return self._array(stamp)

    def update_known(self, stamp: Time, poses: dict) -> MarkerArray:
        """From ``get_object_poses``: name -> (position, quaternion)."""
        markers = []
        for i, (name, (position, _orientation)) in enumerate(sorted(poses.items())):
            position = _finite(position, 3)
            if position is None:
                continue
            markers.append(self._marker(stamp, "objects", 2 * i, Marker.SPHERE, position,
                                        Vector3(x=0.02, y=0.02, z=0.02), KNOWN))
            markers.append(self._label(stamp, "objects", 2 * i + 1, position, name))
        self._groups["objects"] = markers
        return self._array(stamp)

    def _array(self, stamp: Time) -> MarkerArray:
        wipe = Marker(action=Marker.DELETEALL)
        wipe.header.frame_id, wipe.header.stamp = self.frame, stamp
        return MarkerArray(markers=[wipe] + [m for ms in self._groups.values() for m in ms])

    def _marker(self, stamp, ns, marker_id, kind, position, scale, color,
                orientation=None) -> Marker:
        m = Marker(ns=ns, id=marker_id, type=kind, action=Marker.ADD, scale=scale, color=color,
                   frame_locked=False)
        m.header.frame_id, m.header.stamp = self.frame, stamp
        m.pose.position = Point(x=position[0], y=position[1], z=position[2])
        m.pose.orientation = orientation or Quaternion(w=1.0)
        return m

    def _label(self, stamp, ns, marker_id, position, text, above=TEXT_ABOVE) -> Marker:
        m = self._marker(stamp, ns, marker_id, Marker.TEXT_VIEW_FACING,
                         [position[0], position[1], position[2] + above],
                         Vector3(z=TEXT), ColorRGBA(r=1.0, g=1.0, b=1.0, a=0.9))
        m.text = text
        return m
