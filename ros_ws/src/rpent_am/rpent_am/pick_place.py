"""A top-down pick-and-place as data: phases that move the hand or open/close the gripper.

The plan is written once and runs on anything that offers the primitives: the robot
contract (move_to + gripper_command), a simulator driven directly in a test, or a
closed-loop expert policy that turns the current phase into action chunks.

    1. approach  object + 0.12 m, open          5. carry    target + 0.20 m
    2. descend   object origin                  6. lower    target + 0.12 m
    3. grasp     close the gripper              7. release  open the gripper
    4. lift      + 0.20 m                       8. retreat  + 0.10 m

Object positions are the objects' body origins in the base frame (what LIBERO's
success predicates use); for the grocery items of libero_object that is near the
item's centre, so grasping at the origin height takes the item round its middle.
Verified on libero_object task 0 for all 50 initial states.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

import numpy as np

from rpent_contract.geometry import quaternion_to_rpy

from rpent_contract.perception import spoken


@dataclass(frozen=True)
class Phase:
    name: str
    # "object", "target": above that object; "here": above where the previous phase ended;
    # None: a gripper phase that does not move the hand.
    anchor: Optional[str]
    height: float  # m above the anchor
    tolerance: float  # m
    closed: bool  # gripper closed during / at the end of this phase


PLAN = (
    Phase("approach", "object", 0.12, 0.01, closed=False),
    Phase("descend", "object", 0.0, 0.008, closed=False),
    Phase("grasp", None, 0.0, 0.0, closed=True),
    Phase("lift", "here", 0.20, 0.02, closed=True),
    Phase("carry", "target", 0.20, 0.02, closed=True),
    Phase("lower", "target", 0.12, 0.02, closed=True),
    Phase("release", None, 0.0, 0.0, closed=False),
    Phase("retreat", "here", 0.10, 0.02, closed=False),
)


# The plan's heights are for an arm of the Franka's size: workspaces this tall. A smaller
# arm (the SO-101 reaches about 0.35 m up) flies its plan proportionally lower.
REFERENCE_HEIGHT = 0.75


def height_scale(workspace_min, workspace_max) -> float:
    """How much lower than :data:`PLAN` an arm with this workspace box flies, (0, 1]."""
    return float(min(1.0, max(0.1, (workspace_max[2] - workspace_min[2]) / REFERENCE_HEIGHT)))


def waypoint(phase: Phase, object_position, target_position, here,
             scale: float = 1.0) -> np.ndarray:
    """Where a moving phase sends the hand (its height above the anchor times ``scale``)."""
    base = {"object": object_position, "target": target_position, "here": here}[phase.anchor]
    return np.asarray(base, dtype=float) + np.array([0.0, 0.0, phase.height * scale])


def hand_orientation(start_position, start_orientation, arm_joints: int):
    """position -> the hand's roll, pitch, yaw there: as it starts. An arm of five joints
    turns its hand with its base, so it keeps its orientation relative to the direction
    of the hand from the base, the one orientation it can take everywhere."""
    roll, pitch, yaw = (float(a) for a in quaternion_to_rpy(start_orientation))
    if arm_joints >= 6:
        return lambda position: [roll, pitch, yaw]
    offset = yaw - math.atan2(start_position[1], start_position[0])
    return lambda position: [roll, pitch, math.atan2(position[1], position[0]) + offset]


def arm_joint_count(control_spaces) -> int:
    """The arm's joints, from its joint_position control space (6 where it has none);
    ``control_spaces``: anything with ``name`` and ``labels``, as get_robot_info gives."""
    for space in control_spaces:
        if space.name == "joint_position":
            return sum(1 for label in space.labels if "gripper" not in label)
    return 6


def placing_base(position, extent) -> np.ndarray:
    """Where to plan placing on a target perception located: the base of its visible surface
    (``position`` its centre, ``extent`` its size), as from a simulator's body origin, so a
    container is entered, not dropped into from its rim. The items the plan grasps are
    grasped at the located centre, their middle."""
    return np.asarray(position, dtype=float) - np.array([0.0, 0.0, float(extent[2]) / 2.0])


# move(phase, position, tolerance_m) -> end-effector position reached
Move = Callable[[str, np.ndarray, float], np.ndarray]
# grip(phase, close) -> end-effector position after the gripper motion
Grip = Callable[[str, bool], np.ndarray]


def pick_and_place(object_position, target_position, move: Move, grip: Grip,
                   scale: float = 1.0) -> None:
    """Run :data:`PLAN` through blocking primitives, its heights times ``scale``."""
    here = None
    for phase in PLAN:
        if phase.anchor is None:
            here = grip(phase.name, phase.closed)
        else:
            here = move(phase.name,
                        waypoint(phase, object_position, target_position, here, scale),
                        phase.tolerance)


def objects_in_instruction(instruction: str, names: Iterable[str]) -> tuple[str, str]:
    """(object to pick, where to put it): the first and last known objects the text names."""
    text = instruction.lower()
    found = sorted((text.find(spoken(n)), n) for n in names if spoken(n) in text)
    if len(found) < 2:
        raise ValueError(
            f"cannot tell what to pick and where to place it from '{instruction}'; "
            f"name two of: {', '.join(sorted(spoken(n) for n in names))}")
    return found[0][1], found[-1][1]


_PICK_PLACE = re.compile(
    r"^\s*(?:pick up|pick|grab|take|put|place|move)\s+(?:up\s+)?(?:the\s+)?(?P<object>.+?)\s+"
    r"(?:and\s+(?:place|put|drop|move)\s+it\s+)?"
    r"(?:on top of|in the top of|into|onto|inside|in|on)\s+(?:the\s+)?(?P<target>.+?)\s*\.?$",
    re.IGNORECASE)


def phrases_in_instruction(instruction: str) -> tuple[str, str]:
    """(what to pick, where to place it) as the instruction words them, for a perception
    query: 'pick up the alphabet soup and place it in the basket' -> ('alphabet soup',
    'basket')."""
    match = _PICK_PLACE.match(instruction)
    if match is None:
        raise ValueError(
            f"cannot tell what to pick and where to place it from '{instruction}'; the "
            "heuristic understands 'pick up the X and place it in/on the Y' and 'put the X "
            "in/on the Y'")
    return match["object"], match["target"]
