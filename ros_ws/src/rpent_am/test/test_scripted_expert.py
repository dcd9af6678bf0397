"""The scripted expert's chunks pass the robot's own checks: the robot sums a chunk's deltas
from where the hand is and refuses one that would leave its workspace, however little of
each delta an impedance-controlled arm covers."""
from __future__ import annotations

import numpy as np
import pytest

from rpent_am.backends.scripted import (SIDE_CLEARANCE, STATE_NAMES, ArmGeometry,
                                        ScriptedPickPlace)
from rpent_am.policy import PolicyObservation
from rpent_contract.validation import GoalRejected, Workspace, check_chunk
from rpent_env_sim.libero_node import LIBERO_OSC_DELTA

# LIBERO's box; a soup can on a low table, the basket beside it (base frame, m).
LOWER, UPPER = (0.05, -0.55, -0.05), (0.95, 0.55, 0.75)
SOUP, BASKET = np.array([0.48, -0.24, 0.04]), np.array([0.61, 0.25, 0.0])
# The hand where the approach phase ends: right above the soup, fingers open.
HAND = SOUP + [0.0, 0.0, 0.12]


def _summed_z(chunk: np.ndarray) -> float:
    """Where the chunk's deltas, summed as the robot sums them, take the hand's height."""
    return HAND[2] + float(np.sum(chunk[:, 2])) * LIBERO_OSC_DELTA.step_scale[2]


def _descend_chunk(arm: ArmGeometry) -> np.ndarray:
    expert = ScriptedPickPlace(LIBERO_OSC_DELTA, lambda _robot, _text: (SOUP, BASKET), arm=arm)
    state = np.array([*HAND, 1.0, 0.0, 0.0, 0.0, 0.08])
    observation = PolicyObservation({}, state, STATE_NAMES, stamp_ns=1)
    return expert.predict(observation, "pick the soup and place it in the basket", "s")


def _robot_check(chunk: np.ndarray, lower=LOWER, hand=HAND) -> None:
    check_chunk(chunk, LIBERO_OSC_DELTA.name, [LIBERO_OSC_DELTA], max_horizon=100,
                ee_position=hand, workspace=Workspace(lower, UPPER))


def test_a_chunk_towards_a_goal_near_the_floor_stays_inside_the_workspace():
    chunk = _descend_chunk(ArmGeometry(workspace_min=LOWER, workspace_max=UPPER))
    _robot_check(chunk)
    # It still heads down to the soup at full speed first.
    assert chunk[0, 2] == pytest.approx(-0.8)
    assert np.all(chunk[:, 2] <= 0.0)
    assert _summed_z(chunk) == pytest.approx(LOWER[2] + 0.01)


def test_a_goal_nearer_the_floor_than_the_margin_stays_reachable():
    floor = (LOWER[0], LOWER[1], SOUP[2] - 0.004)
    chunk = _descend_chunk(ArmGeometry(workspace_min=floor, workspace_max=UPPER))
    _robot_check(chunk, lower=floor)
    # The deltas sum down to the soup itself, not to a margin above it the hand could
    # then never get within the descent's tolerance of.
    assert _summed_z(chunk) == pytest.approx(SOUP[2])


def test_a_goal_below_the_floor_is_aimed_just_above_it():
    # As the Franka twin's cube: its centre under the lowest the hand may go. Were the hand
    # aimed at the floor itself, the robot, checking the chunk from a hand it measured a hair
    # lower than the model saw, would refuse it.
    floor = (LOWER[0], LOWER[1], SOUP[2] + 0.004)
    chunk = _descend_chunk(ArmGeometry(workspace_min=floor, workspace_max=UPPER))
    assert _summed_z(chunk) == pytest.approx(floor[2] + SIDE_CLEARANCE)
    _robot_check(chunk, lower=floor, hand=HAND - [0.0, 0.0, SIDE_CLEARANCE / 2])


def test_without_the_workspace_the_same_chunk_would_be_refused():
    # What an expert that ignored the box would send: the check above can fail.
    with pytest.raises(GoalRejected, match="would leave the workspace"):
        _robot_check(_descend_chunk(ArmGeometry()))
