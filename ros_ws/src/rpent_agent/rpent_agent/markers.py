"""What the agent aims at and what it found, as `visualization_msgs/MarkerArray`: the last
`move_to` target, the objects `locate` found in this run (each with its label, the newest
find of a label replacing the older) and the simulator's object positions
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
from geometry_msgs.msg import Quaternion, Vector3
from std_msgs.msg import ColorRGBA
from visualization_msgs.msg import Marker, MarkerArray

from rpent_contract.geometry import rpy_to_quaternion
from rpent_contract.markers import TEXT_ABOVE, label, marker, wipe

TARGET = ColorRGBA(r=1.0, g=0.5, b=0.1, a=0.8)
LOCATED = ColorRGBA(r=0.2, g=0.8, b=0.3, a=0.35)
KNOWN = ColorRGBA(r=0.6, g=0.4, b=1.0, a=0.8)


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
        self._located: dict = {}  # label -> (position, extent, text), in the order found

    def clear(self, stamp: Time) -> MarkerArray:
        self._groups.clear()
        self._located.clear()
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
        cube = marker(self.frame, stamp, "target", 0, Marker.CUBE, position, Vector3(
            x=0.025, y=0.025, z=0.025), TARGET, orientation)
        self._groups["target"] = [cube, label(self.frame, stamp, "target", 1, position,
                                              "move_to")]
        return self._array(stamp)

    def update_located(self, stamp: Time, objects) -> MarkerArray:
        """From ``locate``'s objects: a translucent box of each one's seen extent, kept
        with the boxes of earlier finds until the scene is cleared; a label found again
        moves to where it was found last."""
        for obj in objects:
            position = _finite(obj.position, 3)
            extent = _finite(obj.extent, 3)
            if position is not None and extent is not None:
                self._located.pop(obj.label, None)
                self._located[obj.label] = (position, extent, f"{obj.label} {obj.score:.2f}")
        markers = []
        for i, (position, extent, text) in enumerate(self._located.values()):
            size = Vector3(**{k: max(v, 0.01) for k, v in zip("xyz", extent)})
            markers.append(marker(self.frame, stamp, "located", 2 * i, Marker.CUBE, position,
                                  size, LOCATED))
            markers.append(label(self.frame, stamp, "located", 2 * i + 1, position, text,
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
            markers.append(marker(self.frame, stamp, "objects", 2 * i, Marker.SPHERE, position,
                                  Vector3(x=0.02, y=0.02, z=0.02), KNOWN))
            markers.append(label(self.frame, stamp, "objects", 2 * i + 1, position, name))
        self._groups["objects"] = markers
        return self._array(stamp)

    def _array(self, stamp: Time) -> MarkerArray:
        return MarkerArray(markers=[wipe(self.frame, stamp)]
                           + [m for ms in self._groups.values() for m in ms])
