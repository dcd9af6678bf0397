"""The arm base's motion loops, as a third arm gets them: a gantry (``gantry_arm.py``, the
README's guide worked through) implements only the hardware hooks, and its chunks stream,
hand over, stop, fail, move_to and reset as the Franka's and the SO-101's do."""
from __future__ import annotations

import logging
import threading

import numpy as np
import pytest

from gantry_arm import GantryDriver, gantry_settings
from rpent_contract.driver import Motion, ResetRequest
from rpent_hw.safety import SafetyRejected

LOG = logging.getLogger("gantry")


@pytest.fixture
def gantry():
    arm = GantryDriver(gantry_settings(), LOG)
    yield arm
    arm.close()


def _space(arm, name):
    return next(s for s in arm.description.control_spaces if s.name == name)


def _line(steps: int, dx: float) -> np.ndarray:
    rows = np.zeros((steps, 7))
    rows[:, 0] = dx
    return rows


def _settled(arm) -> np.ndarray:
    arm._settle()
    return arm.snapshot().ee_position


def test_a_chunk_ends_at_its_sum_with_feedback_for_every_step(gantry):
    start, seen = _settled(gantry), []
    motion = Motion(lambda snap, step: seen.append((step, snap.episode_step)))
    outcome = gantry.execute_chunk(_space(gantry, "ee_delta"), _line(20, 0.005), motion, False)
    assert outcome.steps_executed == 20 and not outcome.fault
    np.testing.assert_allclose(outcome.snapshot.ee_position, start + [0.1, 0, 0], atol=1e-9)
    assert [step for step, _ in seen] == list(range(20))
    # Each step's feedback says it was applied: its episode step counts it.
    assert [episode for _, episode in seen] == sorted({episode for _, episode in seen})


def test_a_chunk_that_takes_over_continues_from_the_last_target_not_the_lagging_arm(gantry):
    """The gantry trails a 1.5 cm-per-step stream (0.4 m/s at 50 Hz is 8 mm a period), so
    the next chunk must continue from where the last one aimed, as a real arm's does."""
    start = _settled(gantry)
    space = _space(gantry, "joint_position")
    first = start + np.outer(np.arange(1, 21), [0.01, 0, 0])
    handed = threading.Event()
    motion = Motion(lambda snap, step: step == 9 and handed.set(), continuous=True)
    runner = threading.Thread(target=lambda: results.append(gantry.execute_chunk(
        space, np.hstack([first, np.zeros((20, 1))]), motion, False)))
    results = []
    runner.start()
    assert handed.wait(5)
    lag = first[9] - gantry.snapshot().ee_position
    motion.hand_over("the next chunk continues")
    runner.join(5)
    sent = results[0].steps_executed
    assert 10 <= sent <= 12 and lag[0] > 0.005, (sent, lag)
    # The next chunk's first row is one step from the last target sent, more than a step
    # from the measured position: accepted only because it continues from that target.
    second = first[sent - 1] + np.outer(np.arange(1, 11), [0.0, 0.01, 0])
    outcome = gantry.execute_chunk(space, np.hstack([second, np.zeros((10, 1))]),
                                   Motion(continuous=True), False)
    assert outcome.steps_executed == 10, outcome
    np.testing.assert_allclose(_settled(gantry), second[-1], atol=1e-9)


def test_a_stopped_chunk_sends_no_further_row_and_the_arm_holds(gantry):
    start = _settled(gantry)
    sent = []
    motion = Motion(lambda snap, step: sent.append(step) or step == 4 and motion.stop("test"))
    outcome = gantry.execute_chunk(_space(gantry, "ee_delta"), _line(40, 0.005), motion, False)
    assert outcome.steps_executed == 5 and sent == list(range(5))
    held = outcome.snapshot.ee_position
    assert 0.0 < held[0] - start[0] <= 0.025 + 1e-9
    np.testing.assert_allclose(_settled(gantry), held, atol=1e-9)


def test_a_chunk_out_of_the_workspace_is_refused_and_nothing_moves(gantry):
    start = _settled(gantry)
    with pytest.raises(SafetyRejected, match="workspace"):
        gantry.execute_chunk(_space(gantry, "ee_delta"), _line(60, 0.01), Motion(), False)
    np.testing.assert_allclose(_settled(gantry), start)


def test_a_fault_mid_chunk_is_reported_and_the_next_chunk_starts_from_the_measured_arm(gantry):
    start = _settled(gantry)
    motion = Motion(lambda snap, step: step == 2 and setattr(gantry, "jammed", True))
    outcome = gantry.execute_chunk(_space(gantry, "ee_delta"), _line(10, 0.01), motion, False)
    assert outcome.steps_executed == 3 and "axis jammed" in outcome.fault, outcome
    gantry.jammed = False
    here = _settled(gantry)
    assert here[0] > start[0]
    outcome = gantry.execute_chunk(_space(gantry, "ee_delta"), _line(5, 0.01), Motion(), False)
    np.testing.assert_allclose(outcome.snapshot.ee_position, here + [0.05, 0, 0], atol=1e-9)


def test_move_to_steps_at_most_the_safety_step_and_reaches_the_target(gantry):
    start, path = _settled(gantry), []
    target = start + [0.1, -0.05, 0.05]
    outcome = gantry.move_to(
        target, None, position_only=True, max_translation_step=0.005, max_rotation_step=0.05,
        position_tolerance=0.002, orientation_tolerance=0.05, max_steps=200,
        motion=Motion(lambda snap, step: path.append(snap.ee_position)))
    assert outcome.reached and outcome.position_error < 0.002, outcome
    steps = np.linalg.norm(np.diff([start] + path, axis=0), axis=1)
    assert steps.max() <= 0.005 + 1e-9


def test_reset_goes_home_through_the_safety_layer_and_starts_an_episode(gantry):
    episode = gantry.snapshot().task.episode_id
    outcome = gantry.execute_chunk(_space(gantry, "ee_delta"), _line(20, 0.01), Motion(), False)
    assert outcome.steps_executed == 20
    with pytest.raises(ValueError, match="no task list.*moves the gantry to home"):
        gantry.reset(ResetRequest(task_id=3), Motion())
    feedback = []
    snap = gantry.reset(ResetRequest(), Motion(lambda s, step: feedback.append(s.ee_position)))
    np.testing.assert_allclose(snap.ee_position, [0.5, 0.0, 0.3], atol=1e-9)
    assert len(feedback) in (20, 21) and snap.episode_step == 0  # 1 cm steps
    assert snap.task.episode_id != episode


def test_a_stopped_reset_holds_part_way_and_keeps_the_episode(gantry):
    gantry.execute_chunk(_space(gantry, "ee_delta"), _line(30, 0.01), Motion(), False)
    episode = gantry.snapshot().task.episode_id
    motion = Motion(lambda s, step: step == 5 and motion.stop("canceled"))
    assert gantry.reset(ResetRequest(), motion) is None
    # Held part-way: neither where it was (0.8) nor home (0.5), and still the same episode.
    here = _settled(gantry)
    assert 0.6 < here[0] < 0.78, here
    assert gantry.snapshot().task.episode_id == episode
