"""A top-down pick-and-place over two primitives: move the hand, open/close the gripper.

The plan is written once and runs on anything that offers the primitives: the robot
contract (move_to + gripper_command), or a simulator driven directly in a test.

    1. approach  object + APPROACH_HEIGHT, open        5. carry    target + CARRY_HEIGHT
    2. descend   object + GRASP_OFFSET                 6. lower    target + RELEASE_HEIGHT
    3. grasp     close the gripper                     7. release  open the gripper
    4. lift      + LIFT_HEIGHT                         8. retreat  + RETREAT_HEIGHT

Object positions are the objects' body origins in the base frame (what LIBERO's
success predicates use); for the grocery items of libero_object that is near the
item's centre, so grasping at the origin height takes the item round its middle.
Verified on libero_object task 0 for all 50 initial states.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

APPROACH_HEIGHT = 0.12
GRASP_OFFSET = 0.0
LIFT_HEIGHT = 0.20
CARRY_HEIGHT = 0.20
RELEASE_HEIGHT = 0.12
RETREAT_HEIGHT = 0.10

# move(phase, position, tolerance_m) -> end-effector position reached
Move = Callable[[str, np.ndarray, float], np.ndarray]
# grip(phase, close) -> end-effector position after the gripper motion
Grip = Callable[[str, bool], np.ndarray]


def pick_and_place(object_position, target_position, move: Move, grip: Grip) -> None:
    obj = np.asarray(object_position, dtype=float)
    target = np.asarray(target_position, dtype=float)
    up = np.array([0.0, 0.0, 1.0])
    move("approach", obj + APPROACH_HEIGHT * up, 0.01)
    move("descend", obj + GRASP_OFFSET * up, 0.008)
    held = grip("grasp", True)
    move("lift", held + LIFT_HEIGHT * up, 0.02)
    move("carry", target + CARRY_HEIGHT * up, 0.02)
    move("lower", target + RELEASE_HEIGHT * up, 0.02)
    released = grip("release", False)
    move("retreat", released + RETREAT_HEIGHT * up, 0.02)
