"""The safety layer on its own: every limit refuses with its name, nothing else does."""
import threading
import time

import numpy as np
import pytest

from rpent_contract.geometry import rotation_angle
from rpent_contract.validation import Workspace
from rpent_hw.safety import ApprovalGate, SafetyLayer, SafetyLimits, SafetyRejected, Watchdog

DOWN = np.array([1.0, 0.0, 0.0, 0.0])  # hand pointing down
START = np.array([0.5, 0.0, 0.5])


def layer(**overrides):
    limits = dict(workspace=Workspace((0.2, -0.4, 0.1), (0.8, 0.4, 0.8)),
                  max_translation_step=0.02, max_rotation_step=0.1,
                  max_goal_translation=0.3, max_goal_rotation=1.0, velocity_scale=0.5)
    limits.update(overrides)
    return SafetyLayer(SafetyLimits(**limits))


def test_deltas_integrate_to_absolute_targets():
    deltas = np.tile([0.01, 0.0, -0.005, 0.0, 0.0, 0.05], (4, 1))
    positions, quats = layer().integrate_deltas(START, DOWN, deltas)
    np.testing.assert_allclose(positions[-1], START + [0.04, 0.0, -0.02])
    assert rotation_angle(DOWN, quats[-1]) == pytest.approx(0.2)


@pytest.mark.parametrize("row,steps,limit", [
    ([0.03, 0, 0, 0, 0, 0], 1, "max_translation_step"),
    ([0, 0, 0, 0, 0, 0.2], 1, "max_rotation_step"),
    ([0.0, 0.02, 0, 0, 0, 0], 16, "max_goal_translation"),
    ([0, 0, 0, 0, 0, 0.1], 11, "max_goal_rotation"),
    ([0, 0, 0.02, 0, 0, 0], 20, "workspace maximum"),
])
def test_each_limit_is_named_when_hit(row, steps, limit):
    with pytest.raises(SafetyRejected, match=limit):
        layer().integrate_deltas(START, DOWN, np.tile(row, (steps, 1)))


def test_from_beyond_the_floor_a_path_may_come_back_but_not_go_deeper():
    below = np.array([0.5, 0.0, 0.09])  # 1 cm under the workspace's floor
    layer().integrate_deltas(below, DOWN, np.tile([0.01, 0, 0.005, 0, 0, 0], (4, 1)))
    with pytest.raises(SafetyRejected, match="step 1 leaves the workspace: z=0.080 m is below "
                                             "the workspace minimum 0.100 m and farther out"):
        layer().integrate_deltas(below, DOWN, np.array([[0, 0, 0.005, 0, 0, 0],
                                                        [0, 0, -0.015, 0, 0, 0]]))


def test_path_at_exactly_the_limits_passes():
    layer().integrate_deltas(START, DOWN, np.tile([0.02, 0, 0, 0, 0, 0], (15, 1)))


@pytest.mark.parametrize("deltas,what", [
    (np.array([[0.0, np.nan, 0, 0, 0, 0]]), "non-finite"),
    (np.zeros((2, 5)), "(steps, 6)"),
])
def test_non_finite_and_misshapen_deltas_are_refused(deltas, what):
    with pytest.raises(SafetyRejected, match=what.replace("(", r"\(").replace(")", r"\)")):
        layer().integrate_deltas(START, DOWN, deltas)


def test_joint_paths_hold_to_joint_and_cartesian_limits():
    lower, upper, step = -np.ones(2), np.ones(2), np.full(2, 0.1)
    safety = layer()
    with pytest.raises(SafetyRejected, match="outside its limits"):
        safety.check_joint_path([0, 0], [[0.05, 1.5]], lower, upper, step)
    with pytest.raises(SafetyRejected, match="more than the limit"):
        safety.check_joint_path([0, 0], [[0.2, 0.0]], lower, upper, step)
    # A toy arm whose end effector moves 0.2 m along y per rad of its first joint.
    safety.forward_kinematics = lambda q: (START + [0, q[0] * 0.2, 0], DOWN)
    safety.check_joint_path([0, 0], [[0.1, 0], [0.2, 0]], lower, upper, step)
    with pytest.raises(SafetyRejected, match="max_goal_translation"):
        safety.check_joint_path([0, 0], np.c_[np.arange(1, 17) * 0.1, np.zeros(16)],
                                lower * 10, upper * 10, step)


def test_clip_step_moves_one_step_towards_the_target():
    target = START + [0.1, 0, 0]
    p, q = layer().clip_step(START, DOWN, target, DOWN, 0.05, 0.1)
    np.testing.assert_allclose(p, START + [0.02, 0, 0])  # the layer's limit is tighter
    p, q = layer().clip_step(START + [0.095, 0, 0], DOWN, target, DOWN, 0.05, 0.1)
    np.testing.assert_allclose(p, target)


def test_goal_target_limits():
    safety = layer()
    safety.check_goal_target(START, DOWN, START + [0.2, 0, 0], DOWN)
    with pytest.raises(SafetyRejected, match="workspace"):
        safety.check_goal_target(START, DOWN, START + [0.0, 0, 0.5], DOWN)
    with pytest.raises(SafetyRejected, match="max_goal_translation"):
        safety.check_goal_target(START, DOWN, START + [0.25, 0.2, 0], DOWN)


def test_velocity_scale_scales_the_dynamics_factor():
    assert layer().dynamics_factor(0.4) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="velocity_scale"):
        layer(velocity_scale=1.5)


@pytest.mark.serial  # fed every 0.1 s against a 0.2 s timeout
def test_watchdog_fires_once_when_not_fed_and_never_when_fed():
    fired = []
    dog = Watchdog(0.2, fired.append)
    try:
        dog.arm()
        for _ in range(5):  # fed every 0.1 s: stays quiet
            time.sleep(0.1)
            dog.feed()
        assert not fired
        deadline = time.monotonic() + 2.0
        while not fired and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(fired) == 1 and "watchdog" in fired[0]
        time.sleep(0.4)
        assert len(fired) == 1, "fired again without being re-armed"
        dog.arm()
        dog.disarm()
        time.sleep(0.4)
        assert len(fired) == 1, "fired while disarmed"
    finally:
        dog.close()


def _answer_when_pending(gate, approve):
    def run():
        deadline = time.monotonic() + 2.0
        while not gate.pending and time.monotonic() < deadline:
            time.sleep(0.01)
        gate.answer(approve)
    t = threading.Thread(target=run)
    t.start()
    return t


def test_approval_gate():
    ApprovalGate(False, 1.0).request("anything", lambda: False)  # off: never blocks
    gate = ApprovalGate(True, 2.0)
    assert gate.answer(True) == (False, "no motion is waiting for approval")
    t = _answer_when_pending(gate, True)
    gate.request("move_to [0.5, 0, 0.3]", lambda: False)
    t.join()
    t = _answer_when_pending(gate, False)
    with pytest.raises(SafetyRejected, match="denied"):
        gate.request("move_to", lambda: False)
    t.join()
    with pytest.raises(SafetyRejected, match="no operator approval within"):
        ApprovalGate(True, 0.1).request("move_to", lambda: False)
    with pytest.raises(SafetyRejected, match="stopped"):
        ApprovalGate(True, 2.0).request("move_to", lambda: True)
