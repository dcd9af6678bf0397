"""The robot contract suite: what every robot node (sim or real) must do.

Runs against each implementation in robots.py, over a real ROS graph with the node
in its own process.
"""
from __future__ import annotations

import copy
import math
import queue
import threading
import time

import numpy as np
import pytest
from action_msgs.msg import GoalStatus
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import CameraInfo, Image, JointState

from rpent_common.processes import wait_until
from rpent_contract.control_space import array_to_chunk
from rpent_contract.images import image_to_numpy
from rpent_contract.qos import IMAGE_QOS, LATCHED_QOS, REQUEST_QOS, STATE_QOS
from rpent_interfaces.action import ExecuteChunk, MoveTo
from rpent_interfaces.msg import RobotState, TaskStatus
from rpent_testkit.bursts import now_stamp
from rpent_testkit.processes import answered_once

SUCCEEDED, ABORTED, CANCELED = (GoalStatus.STATUS_SUCCEEDED, GoalStatus.STATUS_ABORTED,
                                GoalStatus.STATUS_CANCELED)
# Rates at the control rate, a cancel within one control period, bursts of 50 requests, and
# franky-sim's 1 kHz loop: measured on an otherwise idle machine (scripts/run_tests.sh).
# Slow as a whole (three robots, two minutes): make test-fast leaves it to
# scripts/run_tests.sh tests/contract.
pytestmark = [pytest.mark.serial, pytest.mark.slow]


@pytest.fixture
def current_state(probe):
    """Returns the latest robot_state (waiting for the first one)."""
    states = probe(RobotState, "robot_state", STATE_QOS)
    return lambda: wait_until(lambda: states.latest, 10, what="a robot_state message")


def assert_did_not_move(before: RobotState, after: RobotState):
    # 100 µrad / 100 µm: a held arm's controller still settles after a stop motion (franky-sim:
    # a few µrad a second, 13 µrad on a loaded machine), far below one step of the suite's
    # wiggle (6 mm on the Franka).
    assert after.episode_step == before.episode_step, "the robot stepped"
    np.testing.assert_allclose(after.joint_positions, before.joint_positions, atol=1e-4)
    for axis in "xyz":
        assert getattr(after.ee_pose.position, axis) == pytest.approx(
            getattr(before.ee_pose.position, axis), abs=1e-4)


def test_topics_have_contract_types(robot):
    expected = {
        "/joint_states": "sensor_msgs/msg/JointState",
        "/ee_pose": "geometry_msgs/msg/PoseStamped",
        "/robot_state": "rpent_interfaces/msg/RobotState",
        "/task_status": "rpent_interfaces/msg/TaskStatus",
    }
    for cam in robot.info.camera_names:
        expected[f"/camera/{cam}/image_raw"] = "sensor_msgs/msg/Image"
        expected[f"/camera/{cam}/camera_info"] = "sensor_msgs/msg/CameraInfo"
    node = robot.client.node

    def all_present():
        types = dict(node.get_topic_names_and_types())
        return all(t in types.get(name, []) for name, t in expected.items())

    wait_until(all_present, 10, what="every contract topic advertised")
    types = dict(node.get_topic_names_and_types())
    for name, t in expected.items():
        assert types[name] == [t], f"{name} has types {types[name]}, expected {t}"


def test_topics_publish_at_control_rate(robot, probe):
    rate = robot.info.control_rate
    probes = {
        "joint_states": probe(JointState, "joint_states", STATE_QOS),
        "ee_pose": probe(PoseStamped, "ee_pose", STATE_QOS),
        "robot_state": probe(RobotState, "robot_state", STATE_QOS),
    }
    for cam in robot.info.camera_names:
        probes[f"{cam} image"] = probe(Image, f"camera/{cam}/image_raw", IMAGE_QOS)
        probes[f"{cam} info"] = probe(CameraInfo, f"camera/{cam}/camera_info", IMAGE_QOS)
    time.sleep(0.5)
    for p in probes.values():
        p.clear()
    time.sleep(3.0)
    for name, p in probes.items():
        assert 0.7 * rate <= p.rate() <= 1.3 * rate, \
            f"{name} published at {p.rate():.1f} Hz, control rate is {rate:g} Hz"


def test_robot_info_matches_what_is_published(robot, probe):
    info = robot.info
    joints = probe(JointState, "joint_states", STATE_QOS)
    pose = probe(PoseStamped, "ee_pose", STATE_QOS)
    task = probe(TaskStatus, "task_status", LATCHED_QOS)
    cams = {c: (probe(Image, f"camera/{c}/image_raw", IMAGE_QOS),
                probe(CameraInfo, f"camera/{c}/camera_info", IMAGE_QOS))
            for c in info.camera_names}
    wait_until(lambda: joints.latest and pose.latest and task.latest
               and all(i.latest and c.latest for i, c in cams.values()), 10,
               what="one message on every contract topic")

    assert list(joints.latest.name) == list(info.joint_names)
    assert len(joints.latest.position) == len(info.joint_names)
    assert info.default_control_space in [s.name for s in info.control_spaces]
    for space in info.control_spaces:
        assert space.dim == len(space.labels) == len(space.units) == len(space.lower) \
            == len(space.upper)
    assert pose.latest.header.frame_id == info.base_frame
    p = pose.latest.pose.position
    lo, hi = info.workspace_min, info.workspace_max
    assert lo.x <= p.x <= hi.x and lo.y <= p.y <= hi.y and lo.z <= p.z <= hi.z, \
        "the robot starts outside its own workspace"
    q = pose.latest.pose.orientation
    assert math.isclose(q.x ** 2 + q.y ** 2 + q.z ** 2 + q.w ** 2, 1.0, abs_tol=1e-6)
    assert task.latest.instruction, "task_status carries no instruction"
    assert task.latest.episode_id
    for cam, (img, cinfo) in cams.items():
        assert img.latest.encoding == "rgb8"
        pixels = image_to_numpy(img.latest)
        assert pixels.shape == (img.latest.height, img.latest.width, 3)
        assert pixels.std() > 1.0, f"camera {cam} shows a blank image"
        assert (cinfo.latest.width, cinfo.latest.height) == (img.latest.width, img.latest.height)
        assert cinfo.latest.header.frame_id == img.latest.header.frame_id
        assert cinfo.latest.k[0] > 0 and cinfo.latest.k[4] > 0


def _bad_chunks(info):
    space = next(s for s in info.control_spaces if s.name == info.default_control_space)
    ok = np.zeros((4, space.dim))
    nan = ok.copy()
    nan[2, 1] = float("nan")
    inf = ok.copy()
    inf[0, 0] = float("inf")
    huge = ok.copy()
    huge[1, 0] = space.upper[0] + 10 * (space.upper[0] - space.lower[0])
    return {
        "NaN": (space.name, nan, "non-finite"),
        "inf": (space.name, inf, "non-finite"),
        "wrong length": (space.name, np.zeros((4, space.dim + 1)), "values per step"),
        "unknown control space": ("no_such_space", ok, "unknown control space"),
        "huge step": (space.name, huge, "outside"),
        "empty": (space.name, np.zeros((0, space.dim)), "at least one step"),
    }


@pytest.mark.parametrize("case", ["NaN", "inf", "wrong length", "unknown control space",
                                  "huge step", "empty"])
def test_bad_chunk_is_refused_and_nothing_moves(robot, current_state, case):
    space, actions, expected = _bad_chunks(robot.info)[case]
    before = current_state()
    status, result = robot.client.execute_chunk(actions, space, timeout=30)
    assert status == ABORTED
    assert result.outcome == ExecuteChunk.Result.OUTCOME_REFUSED
    assert expected in result.message, result.message
    assert result.steps_executed == 0
    time.sleep(0.3)
    assert_did_not_move(before, current_state())
    assert robot.client.info().embodiment == robot.info.embodiment, "node stopped serving"


@pytest.mark.parametrize("step_period, expected", [
    (float("nan"), "finite"), (-1.0, "finite"), (1.0, "control period")])
def test_chunk_with_a_foreign_step_period_is_refused(robot, current_state, step_period,
                                                     expected):
    space, rows = robot.spec.wiggle(robot.info, 4)
    before = current_state()
    goal = ExecuteChunk.Goal()
    array_to_chunk(rows, space, goal.chunk)
    goal.chunk.step_period = step_period
    status, result = robot.client.send("execute_chunk", goal).result(30)
    assert status == ABORTED and result.outcome == ExecuteChunk.Result.OUTCOME_REFUSED
    assert "step_period" in result.message and expected in result.message, result.message
    assert_did_not_move(before, current_state())
    goal.chunk.step_period = 1.0 / robot.info.control_rate  # its own period is fine
    status, result = robot.client.send("execute_chunk", goal).result(60)
    assert status == SUCCEEDED and result.steps_executed == 4, result.message


def test_chunk_leaving_the_workspace_is_refused_before_moving(robot, current_state):
    info = robot.info
    space = next(s for s in info.control_spaces if s.name == info.default_control_space)
    if not (space.relative and space.step_scale):
        pytest.skip(f"{space.name} is not a scaled relative Cartesian space")
    before = current_state()
    rows = np.zeros((400, space.dim))
    rows[:, 2] = space.upper[2]  # straight up, far past the workspace ceiling
    status, result = robot.client.execute_chunk(rows, space.name, timeout=30)
    assert status == ABORTED
    assert "workspace" in result.message and "z=" in result.message, result.message
    assert_did_not_move(before, current_state())


@pytest.mark.parametrize("case", ["outside workspace", "NaN position", "zero quaternion",
                                  "foreign frame", "negative tolerance", "endless timeout"])
def test_bad_move_to_is_refused_and_nothing_moves(robot, current_state, case):
    info = robot.info
    before = current_state()
    goal = MoveTo.Goal()
    goal.target.pose = copy.deepcopy(before.ee_pose)
    if case == "outside workspace":
        goal.target.pose.position.z = info.workspace_max.z + 0.5
        expected = "workspace"
    elif case == "NaN position":
        goal.target.pose.position.x = float("nan")
        expected = "non-finite"
    elif case == "zero quaternion":
        goal.target.pose.orientation.x = goal.target.pose.orientation.y = 0.0
        goal.target.pose.orientation.z = goal.target.pose.orientation.w = 0.0
        expected = "quaternion"
    elif case == "foreign frame":
        goal.target.header.frame_id = "camera_link"
        expected = "base frame"
    elif case == "negative tolerance":
        goal.position_tolerance = -0.1
        expected = "position_tolerance"
    else:
        goal.timeout = 1e308
        expected = "timeout 1e+308 s is longer than"
    status, result = robot.client.send("move_to", goal).result(30)
    assert status == ABORTED
    assert not result.reached
    assert expected in result.message, result.message
    time.sleep(0.3)
    assert_did_not_move(before, current_state())


def test_bad_gripper_width_is_refused(robot, current_state):
    before = current_state()
    status, result = robot.client.gripper(-0.01)
    assert status == ABORTED and "outside" in result.message, result.message
    status, result = robot.client.gripper(robot.info.gripper_max_width * 3)
    assert status == ABORTED and "outside" in result.message, result.message
    assert_did_not_move(before, current_state())


def _start_long_chunk(robot, steps=400):
    """(the running goal, the steps its feedback reported so far, the chunk's stamp)."""
    space, rows = robot.spec.wiggle(robot.info, steps)
    seen = []
    goal = ExecuteChunk.Goal()
    array_to_chunk(rows, space, goal.chunk)
    goal.chunk.header.stamp = now_stamp()
    run = robot.client.send("execute_chunk", goal, feedback=lambda fb: seen.append(
        fb.feedback.step))
    wait_until(lambda: len(seen) >= 3, 60, what="three feedback steps")
    return run, seen, goal.chunk.header.stamp


def _assert_halted_at_the_step_in_flight(executed, chunk_stamp, result, answered_at: float,
                                        what: str):
    after = executed.run_after(chunk_stamp, result.steps_executed, answered_at)
    assert after <= 1, (f"{after} of {result.steps_executed} steps ran after the {what} was "
                        "answered; only the step in flight may")


@pytest.fixture
def executed_steps(probe_node):
    from rpent_testkit.bursts import ExecutedSteps

    steps = ExecutedSteps(probe_node)
    steps.wait_for_robot()
    yield steps
    probe_node.destroy_subscription(steps.subscription)


def _assert_holds_still(current_state, seconds=1.0):
    # Start from a state published after the motion ended, not one in flight before it.
    a = wait_until(lambda: (lambda st: st if not st.active_goal else None)(current_state()), 5,
                   what="robot_state with no active goal")
    time.sleep(seconds)
    b = current_state()
    assert_did_not_move(a, b)


def test_cancel_halts_within_one_control_period(robot, current_state, executed_steps):
    run, _seen, stamp = _start_long_chunk(robot)
    run.cancel()
    answered_at = time.time()
    status, result = run.result(30)
    assert status == CANCELED
    assert result.outcome == ExecuteChunk.Result.OUTCOME_CANCELED
    _assert_halted_at_the_step_in_flight(executed_steps, stamp, result, answered_at, "cancel")
    _assert_holds_still(current_state)


def test_stop_service_halts_and_robot_keeps_serving(robot, current_state, executed_steps):
    run, _seen, stamp = _start_long_chunk(robot)
    response = robot.client.stop()
    answered_at = time.time()
    assert response.success, response.message
    status, result = run.result(30)
    assert status == ABORTED
    assert "stop" in result.message
    _assert_halted_at_the_step_in_flight(executed_steps, stamp, result, answered_at, "stop")
    _assert_holds_still(current_state)
    assert current_state().mode == RobotState.MODE_STOPPED
    space, rows = robot.spec.wiggle(robot.info, 2)
    status, result = robot.client.execute_chunk(rows, space, timeout=60)
    assert status == SUCCEEDED and result.steps_executed == 2, result.message


@pytest.fixture
def executed_actions(probe_node):
    """The executed_actions messages received from now on, in order."""
    from rpent_contract.qos import EXECUTED_QOS
    from rpent_interfaces.msg import ExecutedAction

    done = []
    sub = probe_node.create_subscription(ExecutedAction, "executed_actions", done.append,
                                         EXECUTED_QOS)
    wait_until(lambda: probe_node.count_publishers("/executed_actions") > 0, 10,
               what="the robot's executed_actions publisher")
    yield done
    probe_node.destroy_subscription(sub)


def test_every_executed_step_is_published_with_the_step_it_acted_on(robot, executed_actions,
                                                                    current_state):
    """executed_actions is what a recording turns into training data: one message per step
    carried out, the action as executed, and the episode step of the observation it acted
    on (robot_state's episode_step when the step began)."""
    done = executed_actions
    before = wait_until(lambda: (lambda st: st if not st.active_goal else None)(
        current_state()), 10, what="robot_state with no active goal")
    space, rows = robot.spec.wiggle(robot.info, 5)
    status, result = robot.client.execute_chunk(rows, space, timeout=60)
    assert status == SUCCEEDED and result.steps_executed == 5, result.message
    wait_until(lambda: len(done) >= 5, 10, what="five executed_actions")
    assert len(done) == 5
    np.testing.assert_allclose([d.action for d in done], rows)
    assert {d.control_space for d in done} == {space}
    assert len({d.episode_id for d in done}) == 1 and done[0].episode_id
    assert [d.episode_step for d in done] == list(range(before.episode_step,
                                                        before.episode_step + 5))


def test_new_goal_preempts_the_running_one(robot):
    run, _seen, _stamp = _start_long_chunk(robot)
    space, rows = robot.spec.wiggle(robot.info, 2)
    status2, result2 = robot.client.execute_chunk(rows, space, timeout=60)
    status1, result1 = run.result(30)
    assert status1 == ABORTED and "preempted" in result1.message, result1.message
    assert result1.steps_executed < 400
    assert status2 == SUCCEEDED and result2.steps_executed == 2


def test_a_chunk_begins_at_the_step_after_the_robots_steps_since_its_observation(
        robot, executed_actions):
    """A model's chunk is conditioned on an observation; the steps the robot took after it,
    while the model inferred and the goal travelled, are in the past. The robot skips their
    actions when the chunk begins, counting them itself: a client can only count the steps
    it has heard of, and repeating the others' actions is what a loaded machine did."""
    from builtin_interfaces.msg import Time

    done = executed_actions
    run, _seen, first = _start_long_chunk(robot)
    # The observation: the running chunk's second step.
    observed = wait_until(lambda: (lambda mine: mine[1] if len(mine) >= 2 else None)(
        [d for d in done if d.chunk_stamp == first]), 10, what="two executed steps")
    space, rows = robot.spec.wiggle(robot.info, 40)
    rows[:, 0] *= np.linspace(1.0, 0.5, len(rows))  # every action different
    goal = ExecuteChunk.Goal()
    array_to_chunk(rows, space, goal.chunk)
    goal.chunk.header.stamp = now_stamp()
    goal.chunk.observation_stamp = Time(sec=observed.header.stamp.sec,
                                        nanosec=observed.header.stamp.nanosec)
    status, result = robot.client.send("execute_chunk", goal).result(60)
    assert run.result(30)[0] == ABORTED
    assert status == SUCCEEDED, result.message
    wait_until(lambda: sum(d.chunk_stamp == goal.chunk.header.stamp for d in done)
               >= result.steps_executed, 10, what="the chunk's executed_actions")
    mine = [i for i, d in enumerate(done) if d.chunk_stamp == goal.chunk.header.stamp]
    after = [d for d in done[:mine[0]]
             if (d.header.stamp.sec, d.header.stamp.nanosec) >
             (observed.header.stamp.sec, observed.header.stamp.nanosec)]
    assert len(after) >= 1, "the chunk came before the robot stepped past its observation"
    assert (result.steps_skipped, result.steps_executed) == (
        len(after), len(rows) - len(after)), result.message
    np.testing.assert_allclose([done[i].action for i in mine], rows[len(after):])


def test_a_chunk_shows_where_it_takes_the_hand_until_the_last_one_ends(robot, probe_node,
                                                                       current_state):
    """intended_path, what a viewer draws in 3D and over the cameras: a relative Cartesian
    chunk's commanded path from where the hand was when it began, in the base frame. A
    chunk that preempts another draws its own over it; the path goes once the last ends."""
    from visualization_msgs.msg import Marker

    info = robot.info
    space_name, rows = robot.spec.wiggle(info, 5)
    space = next(s for s in info.control_spaces if s.name == space_name)
    if not (space.relative and space.step_scale):
        pytest.skip(f"{space.name} is not a scaled relative Cartesian space")
    scale = np.asarray(space.step_scale[:3])
    shown = []
    sub = probe_node.create_subscription(Marker, "intended_path", shown.append, 10)
    try:
        wait_until(lambda: probe_node.count_publishers("/intended_path") > 0, 10,
                   what="the robot's intended_path publisher")
        rest = wait_until(lambda: (lambda st: st if not st.active_goal else None)(
            current_state()), 10, what="robot_state with no active goal")
        status, result = robot.client.execute_chunk(rows, space_name, timeout=60)
        assert status == SUCCEEDED, result.message
        wait_until(lambda: len(shown) >= 2, 10, what="the path drawn, then taken down")
        drawn, gone = shown[:2]
        assert (drawn.action, drawn.type, gone.action) == (Marker.ADD, Marker.LINE_STRIP,
                                                           Marker.DELETE)
        assert drawn.header.frame_id == gone.header.frame_id == info.base_frame
        assert (gone.ns, gone.id) == (drawn.ns, drawn.id)
        start = rest.ee_pose.position
        path = np.array([[p.x, p.y, p.z] for p in drawn.points])
        np.testing.assert_allclose(path[0], [start.x, start.y, start.z], atol=1e-4)
        np.testing.assert_allclose(np.diff(path, axis=0), rows[:, :3] * scale, atol=1e-9)

        shown.clear()
        run, _seen, _stamp = _start_long_chunk(robot)
        status, result = robot.client.execute_chunk(rows, space_name, timeout=60)
        assert status == SUCCEEDED, result.message
        assert run.result(30)[0] == ABORTED
        wait_until(lambda: len(shown) >= 3, 10, what="two paths drawn, then taken down")
        assert [m.action for m in shown] == [Marker.ADD, Marker.ADD, Marker.DELETE], \
            "the preempted chunk took down the path of the chunk that preempted it"
        assert [len(m.points) for m in shown[:2]] == [401, 6]
    finally:
        probe_node.destroy_subscription(sub)


def test_reset_restores_the_initial_state(robot, current_state):
    client = robot.client
    response = client.reset()
    assert response.success, response.message
    initial = wait_until(lambda: (lambda st: st if st.episode_step == 0 else None)(
        current_state()), 10, what="robot_state of the new episode")
    poses = client.object_poses() if "sim/get_object_poses" in robot.info.sim_services else {}

    target = np.array([initial.ee_pose.position.x, initial.ee_pose.position.y,
                       initial.ee_pose.position.z + 0.05])
    status, result = client.move_to(target, timeout=60)
    assert status == SUCCEEDED and result.reached, result.message
    moved = current_state()
    assert moved.ee_pose.position.z > initial.ee_pose.position.z + 0.03

    response = client.reset()
    assert response.success, response.message
    wait_until(lambda: current_state().episode_step == 0, 10, what="episode step 0")
    after = current_state()
    np.testing.assert_allclose(after.joint_positions, initial.joint_positions, atol=1e-3)
    assert after.ee_pose.position.z == pytest.approx(initial.ee_pose.position.z, abs=1e-3)
    for name, (position, _q) in poses.items():
        np.testing.assert_allclose(client.object_poses()[name][0], position, atol=1e-3,
                                   err_msg=f"{name} not back where it started")


def test_reset_with_bad_arguments_is_refused(robot):
    response = robot.client.reset(task_id=100000)
    assert not response.success
    assert "task" in response.message
    assert robot.client.info().embodiment == robot.info.embodiment


def test_a_refused_reset_changes_neither_the_task_nor_the_episode(robot, probe_node):
    """Everything is validated before the robot is touched: a reset refused for one bad
    field must not leave the next episode judged against a task the agent was never given."""
    def latched_status() -> TaskStatus:
        got = []
        sub = probe_node.create_subscription(TaskStatus, "task_status", got.append, LATCHED_QOS)
        try:
            wait_until(lambda: got, 10, what="the latched task_status")
        finally:
            probe_node.destroy_subscription(sub)
        return got[-1]

    before = latched_status()
    response = robot.client.reset(task_id=1, init_state_index=2**31 - 1)
    assert not response.success, response.message
    after = latched_status()
    assert (after.suite, after.task_id, after.instruction, after.episode_id) == \
        (before.suite, before.task_id, before.instruction, before.episode_id)


def test_every_request_of_a_burst_is_answered(robot, probe_node, current_state):
    """Fifty stop calls and fifty goals at once all get an answer, and a cancel followed by
    a burst of other cancels stops the chunk it names. (The clients keep every answer, so
    what is measured is the robot's side.)"""
    import uuid

    from action_msgs.msg import GoalInfo
    from action_msgs.srv import CancelGoal
    from unique_identifier_msgs.msg import UUID
    from std_srvs.srv import Trigger

    # Not rclpy's own: it drops an answer that comes before it has filed the request (a
    # result of a goal that already ended, in this burst), and the robot would be blamed.
    from rpent_contract.client import ActionClient

    stop = probe_node.create_client(Trigger, "stop", qos_profile=REQUEST_QOS)
    cancel = probe_node.create_client(CancelGoal, "execute_chunk/_action/cancel_goal",
                                      qos_profile=REQUEST_QOS)
    chunks = ActionClient(probe_node, ExecuteChunk, "execute_chunk",
                          goal_service_qos_profile=REQUEST_QOS,
                          result_service_qos_profile=REQUEST_QOS)
    space, rows = robot.spec.wiggle(robot.info, 1)
    goal = ExecuteChunk.Goal()
    array_to_chunk(rows, space, goal.chunk)
    try:
        assert stop.wait_for_service(10) and cancel.wait_for_service(10)
        assert chunks.wait_for_server(10)
        # One answered call on each path first (see answered_once).
        answered_once(lambda: stop.call_async(Trigger.Request()), "stop")
        answered_once(lambda: cancel.call_async(CancelGoal.Request(goal_info=GoalInfo(
            goal_id=UUID(uuid=list(uuid.uuid4().bytes))))), "cancel_goal")  # no such goal
        handle = answered_once(lambda: chunks.send_goal_async(goal), "send_goal")
        answered_once(handle.get_result_async, "get_result")

        calls = [stop.call_async(Trigger.Request()) for _ in range(50)]
        wait_until(lambda: all(c.done() for c in calls), 30,
                   what=f"answers to 50 stop calls ({sum(c.done() for c in calls)} came)")
        assert all(c.result().success for c in calls), {c.result().message for c in calls}

        sent = [chunks.send_goal_async(goal) for _ in range(50)]
        wait_until(lambda: all(s.done() for s in sent), 60,
                   what=f"answers to 50 goals ({sum(s.done() for s in sent)} came)")
        results = [s.result().get_result_async() for s in sent]
        wait_until(lambda: all(r.done() for r in results), 120,
                   what=f"results of 50 goals ({sum(r.done() for r in results)} came)")

        space, rows = robot.spec.wiggle(robot.info, 400)
        array_to_chunk(rows, space, goal.chunk)
        seen = []
        accepted = chunks.send_goal_async(goal, feedback_callback=lambda fb: seen.append(1))
        wait_until(lambda: accepted.done() and len(seen) >= 3, 60, what="the chunk to run")
        handle = accepted.result()
        others = [UUID(uuid=list(uuid.uuid4().bytes)) for _ in range(49)]  # no such goals
        calls = [cancel.call_async(CancelGoal.Request(goal_info=GoalInfo(goal_id=goal_id)))
                 for goal_id in [handle.goal_id] + others]
        wait_until(lambda: all(c.done() for c in calls), 30,
                   what=f"answers to 50 cancels ({sum(c.done() for c in calls)} came)")
        status = handle.get_result_async()
        wait_until(status.done, 30, what="the canceled chunk's result")
        assert status.result().status == CANCELED, status.result().result.message
        assert status.result().result.steps_executed < 400
    finally:
        chunks.destroy()
        probe_node.destroy_client(stop)
        probe_node.destroy_client(cancel)


def test_stops_and_cancels_sent_together_during_a_chunk_are_all_answered(robot, current_state,
                                                                         executed_steps):
    """A stop is the one request that must always be answered: sixty stop calls from three
    clients while a chunk runs, then sixty cancels of a running chunk (and of goals that do
    not exist), each burst answered in full, the chunk halted at the step in flight and the
    arm left still. bench/stop_burst.py measures how fast the answers come."""
    from rpent_testkit.bursts import Burst

    with Burst(clients=3) as burst:
        run, _seen, stamp = _start_long_chunk(robot)
        answers = burst.stop(60)
        assert all(a.success for a in answers), {a.message for a in answers}
        status, result = run.result(30)
        assert status == ABORTED and "stop" in result.message, result.message
        _assert_halted_at_the_step_in_flight(
            executed_steps, stamp, result, min(burst.answered_at), "first stop")
        _assert_holds_still(current_state)

        run, _seen, stamp = _start_long_chunk(robot)
        answers = burst.cancel(run.handle.goal_id, 60)
        assert sum(a.return_code == 0 for a in answers) >= 1, [a.return_code for a in answers]
        status, result = run.result(30)
        assert status == CANCELED, result.message
        # The running goal's cancel is the burst's first request.
        _assert_halted_at_the_step_in_flight(
            executed_steps, stamp, result, burst.answered_at[0], "cancel")
        _assert_holds_still(current_state)


def test_no_cancel_is_lost_in_a_storm_of_goals_canceled_as_they_are_accepted(robot, probe_node,
                                                                              current_state):
    """A goal canceled the moment it is accepted, before it starts to run, must still be
    stopped: fifty of them in a row, each with forty steps, and not one whose cancel the
    robot accepted runs to its end. (A cancel that comes after its goal ended is refused as
    such: a simulator not held to real time may finish forty steps first.)"""
    from rpent_contract.client import ActionClient

    chunks = ActionClient(probe_node, ExecuteChunk, "execute_chunk",
                          goal_service_qos_profile=REQUEST_QOS,
                          result_service_qos_profile=REQUEST_QOS,
                          cancel_service_qos_profile=REQUEST_QOS)
    space, rows = robot.spec.wiggle(robot.info, 40)
    goal = ExecuteChunk.Goal()
    array_to_chunk(rows, space, goal.chunk)
    accepted, results, cancels = queue.Queue(), [], []

    def cancel_on_accept():
        # Not in the answer's callback: the client takes answers under the lock it sends with.
        for _ in range(50):
            handle = accepted.get(timeout=60).result()
            cancels.append(handle.cancel_goal_async())
            results.append(handle.get_result_async())

    try:
        assert chunks.wait_for_server(10)
        canceler = threading.Thread(target=cancel_on_accept, daemon=True)
        canceler.start()
        for _ in range(50):
            chunks.send_goal_async(goal).add_done_callback(accepted.put)
        canceler.join(90)
        wait_until(lambda: len(results) == 50 and all(r.done() for r in results + cancels),
                   120, what=f"results of 50 canceled goals ({sum(r.done() for r in results)} "
                             "came)")
        canceled = [(r.result(), bool(c.result().goals_canceling))
                    for r, c in zip(results, cancels)]
        assert any(taken for _, taken in canceled), "the robot accepted none of 50 cancels"
        ran = [(r.result.steps_executed, r.status) for r, taken in canceled if taken]
        assert all(steps < 40 and status in (CANCELED, ABORTED) for steps, status in ran), \
            f"a goal whose cancel the robot accepted ran on (steps run, status): {ran}"
        _assert_holds_still(current_state)
    finally:
        chunks.destroy()
