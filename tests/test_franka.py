"""Franka node against franky-sim: real franky (libfranka protocol) motions end to end.

The contract suite (tests/contract) covers what every robot does; this covers what the
Franka adds: both control spaces reaching their targets, gripper widths, the safety
layer's refusals, operator approval, and surviving the robot disappearing mid-motion.
"""
from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from action_msgs.msg import GoalStatus

from rpent_common.processes import wait_until
from rpent_contract.client import next_message
from rpent_contract.geometry import stamp_to_ns
from rpent_contract.qos import STATE_QOS, TASK_STATUS_QOS
from rpent_interfaces.action import ExecuteChunk
from rpent_interfaces.msg import RobotState, TaskStatus

SUCCEEDED, ABORTED, CANCELED = (GoalStatus.STATUS_SUCCEEDED, GoalStatus.STATUS_ABORTED,
                                GoalStatus.STATUS_CANCELED)

# franky-sim steps at 1 kHz; chunk boundaries within 2.5 control periods, cancels that stop
# short: measured alone on the machine.
pytestmark = [pytest.mark.slow, pytest.mark.serial]


@pytest.fixture(autouse=True)
def _franka_back_after_each_test(request):
    """The module shares one franky-sim: a test that kills it and fails before bringing it
    back must not fail every test after it on a lost connection."""
    arm = request.getfixturevalue("franka") if "franka" in request.fixturenames else None
    yield
    if arm is None:
        return
    client, sim, _node = arm
    if not sim.alive():
        sim.start()
        wait_until(lambda: not _state(client).errors, 30, what="errors cleared after reconnecting")


def _state(client):
    return next_message(client.node, RobotState, "robot_state", STATE_QOS, 10)


def _position(pose):
    return np.array([pose.position.x, pose.position.y, pose.position.z])


def _yaw_quat(quat, angle):
    """Orientation ``quat`` (x, y, z, w) turned by ``angle`` about the base z axis."""
    from rpent_contract.geometry import quaternion_multiply

    return quaternion_multiply([0.0, 0.0, math.sin(angle / 2), math.cos(angle / 2)], quat)


def test_move_to_reaches_position_and_orientation(franka):
    client, _sim, _node = franka
    assert client.reset().success
    start = _state(client).ee_pose
    q0 = [start.orientation.x, start.orientation.y, start.orientation.z, start.orientation.w]
    target = _position(start) + [-0.05, 0.08, -0.06]
    target_q = _yaw_quat(q0, 0.3)
    status, result = client.move_to(target, target_q, timeout=60)
    assert status == SUCCEEDED and result.reached, result.message
    after = _state(client).ee_pose
    assert np.linalg.norm(_position(after) - target) < 0.01
    o = after.orientation
    assert abs(np.dot([o.x, o.y, o.z, o.w], target_q)) > math.cos(0.05 / 2)


def test_ee_delta_chunk_integrates_to_its_sum(franka):
    client, _sim, _node = franka
    start = _position(_state(client).ee_pose)
    rows = np.zeros((30, 7))
    rows[:, 0], rows[:, 2] = 0.002, -0.001  # 6 cm forward, 3 cm down over 1.5 s
    seen = []
    goal = ExecuteChunk.Goal()
    from rpent_contract.control_space import array_to_chunk

    array_to_chunk(rows, "ee_delta", goal.chunk)
    status, result = client.send("execute_chunk", goal,
                                 feedback=lambda fb: seen.append(fb.feedback.step)).result(60)
    assert status == SUCCEEDED and result.steps_executed == 30, result.message
    assert sorted(set(seen)) == list(range(30)), "feedback missing for some steps"
    np.testing.assert_allclose(_position(result.final_ee_pose), start + [0.06, 0.0, -0.03],
                               atol=0.005)


def _chunk_with_reflexes(client, sim, after_steps):
    """A 30-step chunk along y (6 cm); the arm aborts the motion with a late-stream reflex
    (franky-sim's, on cue) once the feedback reaches each of ``after_steps``."""
    from rpent_contract.control_space import array_to_chunk

    rows = np.zeros((30, 7))
    rows[:, 1] = 0.002
    goal = ExecuteChunk.Goal()
    array_to_chunk(rows, "ee_delta", goal.chunk)
    pending = sorted(after_steps)

    def on_feedback(fb):
        if pending and fb.feedback.step >= pending[0]:
            pending.pop(0)
            sim.reflex()
    return client.send("execute_chunk", goal, feedback=on_feedback).result(60)


def test_a_chunk_the_arm_aborts_for_late_commands_resumes_and_says_so(franka):
    """A loaded controller PC sends its commands late, and a real FR3 then aborts the motion
    with a communication_constraints_violation reflex. The chunk recovers, sends its row
    again and reaches its sum, and robot_state says what happened and what to do; once
    reflex_retries (2) are used up, the chunk fails with the robot's message."""
    client, sim, _node = franka
    assert client.reset().success
    start = _position(_state(client).ee_pose)
    status, result = _chunk_with_reflexes(client, sim, [5, 15])
    assert status == SUCCEEDED and result.steps_executed == 30, result.message
    np.testing.assert_allclose(_position(result.final_ee_pose), start + [0.0, 0.06, 0.0],
                               atol=0.005)
    said = " ".join(_state(client).errors)
    assert "communication_constraints_violation" in said and \
        "recovered and resumed the chunk" in said and "PREEMPT_RT" in said, said

    status, result = _chunk_with_reflexes(client, sim, [3, 8, 13])
    assert status == ABORTED and result.steps_executed < 30, result
    assert "motion aborted by reflex" in result.message and \
        "communication_constraints_violation" in result.message, result.message
    assert client.reset().success  # and the arm goes on


def test_joint_chunk_reaches_its_last_row(franka):
    client, _sim, _node = franka
    q = np.array(_state(client).joint_positions[:7])
    target = q + np.array([0.2, -0.1, 0.0, 0.15, 0.0, 0.1, -0.2])
    ramp = np.linspace(q, target, 11)[1:]  # 10 steps, at most 0.02 rad each
    rows = np.hstack([ramp, np.zeros((10, 1))])
    status, result = client.execute_chunk(rows, "joint_position", timeout=60)
    assert status == SUCCEEDED, result.message
    np.testing.assert_allclose(_state(client).joint_positions[:7], target, atol=5e-3)


def test_gripper_moves_to_commanded_widths(franka):
    client, _sim, _node = franka
    for width in (0.02, 0.07):
        status, result = client.gripper(width)
        assert status == SUCCEEDED and result.reached_goal, result.message
        assert abs(result.position - width) < 0.005
        assert abs(_state(client).gripper_width - width) < 0.005
    # Closing on nothing reaches the target; it is not reported as a grasp.
    status, result = client.gripper(0.0, max_effort=30.0)
    assert status == SUCCEEDED and result.reached_goal and not result.stalled, result.message


@pytest.mark.parametrize("case,expected", [
    ("goal too far", "max_goal_translation"),
    ("joint step too large", "per step"),
    ("joint target outside workspace", "workspace"),
])
def test_safety_layer_refuses_without_moving(franka, case, expected):
    client, _sim, _node = franka
    assert client.reset().success  # from home, where these paths stay inside the box
    before = _state(client)
    q = np.array(before.joint_positions[:7])
    if case == "goal too far":  # inside the box, every step within limits, 0.51 m in all
        space, rows = "ee_delta", np.tile([-0.0085, 0.0147, 0, 0, 0, 0, 0], (30, 1))
    elif case == "joint step too large":
        space, rows = "joint_position", np.append(q + [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3], 0)[None]
    else:  # small joint steps that fold the arm down below the workspace floor
        target = q + np.array([0.0, 1.2, 0.0, 0.0, 0.0, 0.0, 0.0])
        space = "joint_position"
        rows = np.hstack([np.linspace(q, target, 81)[1:], np.zeros((80, 1))])
    status, result = client.execute_chunk(rows, space, timeout=30)
    assert status == ABORTED and result.outcome == ExecuteChunk.Result.OUTCOME_REFUSED
    assert expected in result.message, result.message
    assert result.steps_executed == 0
    after = _state(client)
    np.testing.assert_allclose(after.joint_positions, before.joint_positions, atol=1e-4)


def test_cancelled_move_to_stops_short_and_holds(franka):
    client, _sim, _node = franka
    start = _position(_state(client).ee_pose)
    target = start + [0.0, -0.25, 0.0]
    goal = _move_goal(target)
    goal.max_translation_step = 0.005  # 0.1 m/s: about 2.5 s to get there
    poses = []
    run = client.send("move_to", goal, feedback=lambda fb: poses.append(fb.feedback.current_pose))
    # Canceled once the arm is on its way (the feedback says where it is): a cancel of an
    # arm that never started would "stop short" too.
    wait_until(lambda: poses and np.linalg.norm(_position(poses[-1]) - start) > 0.02, 30,
               what="the move under way")
    run.cancel()
    status, result = run.result(30)
    assert status == CANCELED, result.message
    stopped = _position(_state(client).ee_pose)
    assert np.linalg.norm(stopped - start) > 0.02, "the arm never moved"
    assert np.linalg.norm(stopped - target) > 0.05, "the arm went all the way"
    time.sleep(1.0)
    assert np.linalg.norm(_position(_state(client).ee_pose) - stopped) < 1e-3


def _move_goal(position):
    from rpent_interfaces.action import MoveTo

    goal = MoveTo.Goal()
    goal.position_only = True
    goal.target.pose.position.x, goal.target.pose.position.y, goal.target.pose.position.z = \
        (float(v) for v in position)
    goal.target.pose.orientation.w = 1.0
    return goal


def _ns(stamp) -> int:
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def test_robot_lost_mid_motion_is_reported_and_recovered(franka):
    client, sim, node = franka
    from sensor_msgs.msg import JointState

    states, joints = [], []  # (arrival, message)
    subs = [client.node.create_subscription(
        msg_type, topic, lambda m, into=into: into.append((time.monotonic(), m)), STATE_QOS)
        for msg_type, topic, into in ((RobotState, "robot_state", states),
                                      (JointState, "joint_states", joints))]
    start = _position(_state(client).ee_pose)
    poses = []
    run = client.send("move_to", _move_goal(start + [0.0, 0.2, 0.0]),
                      feedback=lambda fb: poses.append(fb.feedback.current_pose))
    # Lost mid-motion: once the arm is on its way, well short of the target.
    wait_until(lambda: poses and np.linalg.norm(_position(poses[-1]) - start) > 0.02, 30,
               what="the move under way")
    sim.kill()
    killed = time.monotonic()
    # robot_state says so, stamped with its last measurement. How soon is a figure
    # (bench/disconnect.py: ~0.5 s, state_timeout); this bound only leaves room for a
    # machine loaded by other work.
    first = wait_until(lambda: next((m for t, m in list(states) if t > killed
                                     and m.mode == RobotState.MODE_ERROR), None), 5,
                       what="robot_state reporting the silent robot")
    last_measured = _ns(first.header.stamp)
    status, result = run.result(30)
    assert status == ABORTED and "lost" in result.message, result.message
    state = wait_until(lambda: (lambda s: s if any("lost" in e for e in s.errors) else None)(
        _state(client)), 10, what="robot_state reporting the lost connection")
    # Nothing was published as newer than the last measurement while the robot was gone.
    for msg_type in (states, joints):
        stamps = [_ns(m.header.stamp) for _, m in list(msg_type)]
        assert max(stamps) == last_measured, (max(stamps) - last_measured) / 1e9
    assert state.mode == RobotState.MODE_ERROR and _ns(state.header.stamp) == last_measured
    for sub in subs:
        client.node.destroy_subscription(sub)
    # Still serving: info answers, and motions are refused with the reason.
    assert client.info().embodiment == "franka_fr3"
    status, result = client.execute_chunk(np.zeros((2, 7)), "ee_delta", timeout=30)
    assert status == ABORTED and "lost" in result.message, result.message

    # The robot comes back on the same address; the fixture stops it at the end.
    sim.start()
    wait_until(lambda: not _state(client).errors, 20, what="errors cleared after reconnecting")
    status, result = client.execute_chunk(np.zeros((2, 7)), "ee_delta", timeout=30)
    assert status == SUCCEEDED, result.message
    assert node.alive()


@pytest.mark.parametrize("space", ["ee_delta", "joint_position"])
def test_streamed_chunks_keep_the_arm_moving_across_boundaries(franka, space):
    """Each chunk is sent while the previous one runs, as a policy client does: the arm
    keeps moving (it used to halt and settle, ~75 control periods per boundary)."""
    from rpent_hw.stream_check import constant_delta, joint_ramp, stream_chunks

    client, _sim, _node = franka
    assert client.reset().success
    row = np.zeros(7)
    row[1] = 0.002
    # Joint chunks continue from the last target sent, which the arm trails by a few steps.
    # 100-step chunks, each sent after 10 steps, leave this client 4.5 s to see those 10
    # steps before the running chunk ends of itself (CI's loaded machine once took over 1 s);
    # the last chunk, which runs to its end, is 20 steps.
    chunks = constant_delta(row, steps=100) if space == "ee_delta" else joint_ramp(
        np.append(_state(client).joint_positions[:7], 0.0), [0.005] + [0.0] * 7, steps=100)
    record = stream_chunks(client, chunks, chunks=3, last_steps=20)
    results = [result for _status, result in record.results]
    assert [r.outcome for r in results] == [ExecuteChunk.Result.OUTCOME_CANCELED] * 2 + [
        ExecuteChunk.Result.OUTCOME_COMPLETED], [r.message for r in results]
    assert all("continues the motion" in r.message for r in results[:2])
    # From ee_pose and the step feedback: the next chunk's first step follows the last
    # one's within a period or so, and the end effector never comes to rest in between.
    gaps, ratios = record.boundary_gaps(), record.boundary_speed_ratios()
    assert len(gaps) == 2 and gaps.max() < 2.5, gaps
    assert len(ratios) == 2 and ratios.min() > 0.05, ratios
    if space == "ee_delta":  # each chunk continues from where the last left its target
        y = [p[1] for _t, p in record.poses]
        assert y[-1] - y[0] == pytest.approx(sum(r.steps_executed for r in results) * 0.002,
                                             abs=0.005)


def _task(client):
    """The robot's newest task_status. A late subscriber is sent the topic's latched history
    and may be handed an older sample before the newest: keep the newest of those that came
    before two fresh robot states."""
    seen, got = [], threading.Event()

    def on_task(msg):
        seen.append(msg)
        got.set()

    sub = client.node.create_subscription(TaskStatus, "task_status", on_task, TASK_STATUS_QOS)
    try:
        assert got.wait(10), "no task_status within 10 s"
        _state(client)
        _state(client)
        return max(list(seen), key=lambda m: stamp_to_ns(m.header.stamp))
    finally:
        client.node.destroy_subscription(sub)


def _reset_goal(client, feedback):
    from rpent_interfaces.action import ResetEpisode

    return client.send("reset_episode", ResetEpisode.Goal(), feedback=feedback)


def _away_from_home(client):
    """Move joint 1 well away from home, so a reset has a long way to go."""
    q = np.array(_state(client).joint_positions[:7])
    target = q + [0.4, 0, 0, 0, 0, 0, 0]
    rows = np.hstack([np.linspace(q, target, 41)[1:], np.zeros((40, 1))])
    status, result = client.execute_chunk(rows, "joint_position", timeout=60)
    assert status == SUCCEEDED, result.message
    return target


@pytest.mark.parametrize("interrupt", ["cancel", "stop"])
def test_reset_on_its_way_home_halts_when_canceled_or_stopped(franka, interrupt):
    client, _sim, _node = franka
    episode = client.reset()
    assert episode.success, episode.message
    home = np.array(_state(client).joint_positions[:7])
    away = _away_from_home(client)
    poses = []
    run = _reset_goal(client, lambda fb: poses.append(fb.feedback.ee_pose))
    # Interrupted once well on its way (the feedback says where the arm is).
    wait_until(lambda: len(poses) > 2 and np.linalg.norm(
        _position(poses[-1]) - _position(poses[0])) > 0.03, 30, what="the reset under way")
    if interrupt == "cancel":
        run.cancel()
    else:
        assert client.stop().success
    status, result = run.result(30)
    assert status == (CANCELED if interrupt == "cancel" else ABORTED), result.message
    assert not result.success and "stopped" in result.message, result.message
    # Halted part-way: at rest, neither where it was nor home, and no new episode.
    first = np.array(_state(client).joint_positions[:7])
    time.sleep(0.5)
    halted = np.array(_state(client).joint_positions[:7])
    assert np.abs(halted - first).max() < 0.005
    assert 0.03 < halted[0] - home[0] < away[0] - home[0] - 0.05, (halted[0], home[0], away[0])
    assert _task(client).episode_id == episode.episode_id
    # A reset run to the end gets home and starts a new episode.
    status, result = _reset_goal(client, None).result(60)
    assert status == SUCCEEDED and result.success, result.message
    np.testing.assert_allclose(_state(client).joint_positions[:7], home, atol=5e-3)


def test_home_outside_joint_limits_stops_the_node_at_start_up(node_factory):
    proc = node_factory("rpent_hw", "franka_node",
                        {"home_joints": [0.0, 0.0, 0.0, 0.0, 0.0, 1.57, 0.785]},
                        name="bad_home",
                        params_file=Path(__file__).resolve().parents[1] / "config/franka.yaml")
    wait_until(lambda: not proc.alive(), 60, what="the node to exit")
    assert proc.proc.returncode == 2
    assert "home_joints" in proc.log_tail() and "joint 4" in proc.log_tail(), proc.log_tail()


def test_a_predict_for_a_franka_that_went_silent_is_refused_with_the_reason(franka,
                                                                            node_factory):
    """Kill franky-sim: robot_state keeps the stamp of the last measurement, and the model
    node refuses to predict from it, saying why."""
    from rpent_am.client import ActionModelClient
    from rpent_am.policy import ModelMeta, PolicyBackend
    from rpent_hw.franka.settings import make_control_spaces
    from rpent_interfaces.action import Predict
    from rpent_testkit.vla_servers import facade, facade_params

    class Still(PolicyBackend):
        meta = ModelMeta("still", "test", "still-v1",
                         make_control_spaces(0.02, 0.1, 0.05, "fr3_link0")[0], 4,
                         state_names=("ee_x", "ee_y", "ee_z"))

        def predict(self, observation, instruction, session):
            return np.zeros((4, 7))

    client, sim, _node = franka
    with facade(Still(), cameras=()) as server:
        proc = node_factory("rpent_am", "am_node",
                            {**facade_params(server, cameras=()), "action_space": "ee_delta"},
                            name="franka_model", remaps={"__node": "franka_model"})
        model = ActionModelClient(client.node, model="/franka_model")
        try:
            model.connect(client.info(), timeout=60)
        except Exception:
            pytest.fail(proc.log_tail())
        goal = Predict.Goal(instruction="hold still", mode=Predict.Goal.MODE_SINGLE,
                            timeout=10.0)
        status, result = model.send(goal).result(60)
        assert status == SUCCEEDED, result.message
        sim.kill()
        wait_until(lambda: _state(client).mode == RobotState.MODE_ERROR, 10,
                   what="robot_state reporting the silent robot")
        # Refused once the last measurement is older than max_observation_age (2 s).
        status, result = wait_until(
            lambda: (lambda r: r if r[0] == ABORTED else None)(model.send(goal).result(60)),
            20, interval=0.5, what="a predict refused")
        assert "older than max_observation_age" in result.message, result.message
        proc.stop()
    sim.start()
    wait_until(lambda: not _state(client).errors, 30, what="errors cleared after reconnecting")
