"""Building blocks of the `visualization_msgs` scenes the project draws for viewers (the
simulator's objects, the agent's targets and finds): boxes, labels and the DELETEALL that
makes each update the whole scene, so a viewer that joins late, or a bag read from the
middle, shows the latest scene and not a mix of older ones."""
from __future__ import annotations

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point, Quaternion, Vector3
from std_msgs.msg import ColorRGBA
from visualization_msgs.msg import Marker

TEXT = 0.025  # m, label height: readable next to 5 cm objects without hiding them
TEXT_ABOVE = 0.04  # m
LABEL = ColorRGBA(r=1.0, g=1.0, b=1.0, a=0.9)


def marker(frame: str, stamp: Time, ns: str, marker_id: int, kind: int, position, scale,
           color: ColorRGBA, orientation=None) -> Marker:
    m = Marker(ns=ns, id=marker_id, type=kind, action=Marker.ADD, scale=scale, color=color,
               frame_locked=False)
    m.header.frame_id, m.header.stamp = frame, stamp
    m.pose.position = Point(x=float(position[0]), y=float(position[1]), z=float(position[2]))
    m.pose.orientation = orientation or Quaternion(w=1.0)
    return m


def label(frame: str, stamp: Time, ns: str, marker_id: int, position, text: str,
          above: float = TEXT_ABOVE) -> Marker:
    """``text`` facing the viewer, ``above`` m over ``position``."""
    m = marker(frame, stamp, ns, marker_id, Marker.TEXT_VIEW_FACING,
               [position[0], position[1], position[2] + above], Vector3(z=TEXT), LABEL)
    m.text = text
    return m


def wipe(frame: str, stamp: Time) -> Marker:
    """Deletes every marker drawn before it in the same array's topic."""
    m = Marker(action=Marker.DELETEALL)
    m.header.frame_id, m.header.stamp = frame, stamp
    return m
