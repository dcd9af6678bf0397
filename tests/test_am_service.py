"""The action-model node serving many clients and surviving them, over a real ROS graph.

The LIBERO node is the robot. A counting backend, served to the node from this process as
a session-aware VLA facade (the rpent_vla backend's server), shows which policy sessions
the node keeps; a fake robot published from here gives observations with chosen stamps.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from action_msgs.msg import GoalStatus
from sensor_msgs.msg import Image

from rpent_am.chunk_executor import ChunkExecutor
from rpent_am.client import ActionModelClient
from rpent_am.policy import (
    BackendError,
    InferenceWorker,
    ModelMeta,
    PolicyBackend,
    SessionsFull,
    SessionTable,
)
from rpent_common.processes import wait_until
from rpent_contract.client import RobotClient
from rpent_contract.images import numpy_to_image
from rpent_contract.qos import IMAGE_QOS, STATE_QOS
from rpent_env_sim.libero_node import LIBERO_OSC_DELTA
from rpent_interfaces.action import Predict
from rpent_interfaces.msg import RobotState
from rpent_testkit.vla_servers import VlaFacadeServer, facade, facade_params

SOUP = "pick the alphabet soup and place it in the basket"
HANG = "hang"


class CountingBackend(PolicyBackend):
    """Zeros, remembering every session it was asked for until told to forget it."""

    meta = ModelMeta("counting", "test", "counting-v1", LIBERO_OSC_DELTA, 4,
                     state_names=("ee_x",))

    def __init__(self):
        self.lock = threading.Lock()
        self.sessions: set = set()

    def predict(self, observation, instruction, session):
        with self.lock:
            self.sessions.add(session)
        return np.zeros((4, 7))

    def reset(self, session=None):
        with self.lock:
            if session is None:
                self.sessions.clear()
            else:
                self.sessions.discard(session)

    def live(self) -> set:
        with self.lock:
            return set(self.sessions)


def hanging(backend: PolicyBackend) -> VlaFacadeServer:
    """A server with a worker per request whose requests for HANG take 4 s: the node must
    give up on them at the goal's timeout without holding up the requests after them."""
    server = facade(backend, serialize=False)
    answer = server.predict

    def predict(obs, options):
        if obs.get(server.prompt_key) == [HANG]:
            time.sleep(4.0)
        return answer(obs, options)

    server.methods["vla.predict"] = predict
    return server


def vm_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


@pytest.fixture(scope="module")
def robot(rclpy_context, node_factory):
    robot_proc = node_factory("rpent_env_sim", "libero_node",
                              {"suite": "libero_object", "task_id": 0}, name="svc_robot")
    client = RobotClient()
    try:
        info = client.wait_ready(180)
    except Exception:
        pytest.fail(f"robot did not come up:\n{robot_proc.log_tail()}")
    yield client, info
    client.close()
    assert robot_proc.alive(), robot_proc.log_tail()


@pytest.fixture(scope="module")
def svc(robot, node_factory):
    """The node serving the counting backend; yields (model client, backend, process)."""
    client, info = robot
    backend = CountingBackend()
    with hanging(backend) as server:
        proc = node_factory("rpent_am", "am_node",
                            {**facade_params(server), "timeout": 10.0,
                             "max_goals": 24, "max_sessions": 32, "session_ttl": 3.0},
                            name="svc_model", remaps={"__node": "svc_model"})
        model = ActionModelClient(client.node, model="/svc_model")
        try:
            model.connect(info, timeout=60)
        except Exception:
            pytest.fail(f"action-model node did not come up:\n{proc.log_tail()}")
        yield model, backend, proc
        assert proc.alive(), proc.log_tail()
        proc.stop()


def single(instruction=SOUP, **fields) -> Predict.Goal:
    return Predict.Goal(instruction=instruction, mode=Predict.Goal.MODE_SINGLE, **fields)


# --- without ROS ----------------------------------------------------------------------------

def test_session_table_evicts_the_least_recently_used_idle_session():
    now = [0.0]
    table = SessionTable(capacity=2, ttl=10.0, clock=lambda: now[0])
    assert table.acquire("a") == [] and table.acquire("b") == []
    table.release("a")
    assert table.acquire("c") == ["a"], "a is idle and the oldest: it goes"
    with pytest.raises(SessionsFull, match="max_sessions"):
        table.acquire("d")  # b and c are both in use
    table.release("b")
    table.release("c")
    now[0] = 11.0
    assert sorted(table.expired()) == ["b", "c"] and len(table) == 0
    # A reset while a goal uses the session: what the goal predicts after it is still freed.
    table.acquire("e")
    assert table.drop() == 1 and len(table) == 0
    table.release("e")
    now[0] = 22.0
    assert table.expired() == ["e"]


def test_a_timed_out_call_does_not_hold_up_the_next():
    worker = InferenceWorker("test", max_stuck=2)
    release = threading.Event()
    try:
        with pytest.raises(BackendError, match="did not answer within 0.2 s"):
            worker.call(lambda: release.wait(30), 0.2)
        assert worker.call(lambda: "next", 5.0) == "next"
        with pytest.raises(BackendError, match="did not answer within 0.2 s"):
            worker.call(lambda: release.wait(30), 0.2)
        with pytest.raises(BackendError, match="2 inference calls .* looks hung"):
            worker.call(lambda: "refused while the stuck call runs", 5.0)
        release.set()
        wait_until(lambda: _answers(worker), 5, what="worker serving again")
    finally:
        release.set()
        worker.close()


def _answers(worker) -> bool:
    try:
        return worker.call(lambda: True, 1.0)
    except BackendError:
        return False


# --- sessions ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_predicts_without_client_id_share_one_session_per_robot(svc):
    model, backend, proc = svc
    for _ in range(50):  # warm-up: first allocations, connections, caches
        model.predict(SOUP)
    rss_before = vm_rss_kib(proc.proc.pid)
    for _ in range(450):
        model.predict(SOUP)
    rss_after = vm_rss_kib(proc.proc.pid)
    print(f"\nmodel node VmRSS after 50 predicts {rss_before} KiB, after 500 {rss_after} KiB")
    assert [s for s in backend.live() if not s.startswith("default@")] == []
    assert len(backend.live()) <= 1
    assert rss_after - rss_before < 50 * 1024, "the node's memory grows with predict goals"


@pytest.mark.slow
def test_sessions_beyond_the_limit_and_unused_ones_are_freed(svc):
    model, backend, _proc = svc
    for i in range(40):
        model.predict(SOUP, client_id=f"client{i}")
    live = {s for s in backend.live() if s.startswith("client")}
    assert len(live) <= 32 and "client39" in live and "client0" not in live, live
    # session_ttl is 3 s: with nobody predicting, every session is freed.
    wait_until(lambda: not backend.live(), 20, what="idle sessions expired")
    assert "'client39'" in model.reset("client39").message


# --- observations -----------------------------------------------------------------------------

@pytest.mark.slow
def test_goals_naming_unknown_robots_leave_no_subscriptions(svc, robot):
    model, _backend, _proc = svc
    client, _info = robot
    node = client.node
    # Control: while a goal waits on an unknown robot, the node does subscribe to it.
    probe = model.send(single(robot_namespace="ghost_probe", timeout=10.0))
    wait_until(lambda: node.count_subscribers("/ghost_probe/robot_state") > 0, 10,
               what="the node subscribing to the robot a goal names")
    status, result = probe.result(30)
    assert status == GoalStatus.STATUS_ABORTED
    assert "no robot publishes /ghost_probe/robot_state" in result.message, result.message
    for batch in range(5):
        runs = [model.send(single(robot_namespace=f"ghost{batch}_{i}", timeout=0.5))
                for i in range(20)]
        for run in runs:
            status, result = run.result(30)
            assert status == GoalStatus.STATUS_ABORTED and "ghost" in result.message
    topics = [f"/ghost{b}_{i}/robot_state" for b in range(5) for i in range(20)]
    topics += ["/ghost_probe/robot_state", "/ghost_probe/camera/agentview/image_raw"]
    wait_until(lambda: all(node.count_subscribers(t) == 0 for t in topics), 15,
               what="every unknown robot's subscription gone")


def test_unknown_robots_do_not_delay_another_clients_predict(svc):
    model, _backend, _proc = svc
    bad = [model.send(single(robot_namespace=f"nobody{i}", timeout=20.0)) for i in range(20)]
    started = time.monotonic()
    chunk = model.predict(SOUP, client_id="good", timeout=20.0)
    took = time.monotonic() - started
    waiting = sum(not run.done() for run in bad)
    print(f"\npredict beside 20 goals waiting for unknown robots: {took * 1e3:.0f} ms")
    assert chunk.shape == (4, 7)
    assert waiting > 0, "the good predict was answered only after the bad goals ended"
    for run in bad:
        assert run.result(30)[0] == GoalStatus.STATUS_ABORTED


@pytest.fixture(scope="module")
def fake_robots(robot):
    """Robots published from here: fresh_bot's robot_state is current, stale_bot's is
    stamped 10 s in the past (a robot whose clock or link is broken)."""
    client, _info = robot
    node = client.node
    pubs = {ns: (node.create_publisher(RobotState, f"/{ns}/robot_state", STATE_QOS),
                 node.create_publisher(Image, f"/{ns}/camera/agentview/image_raw", IMAGE_QOS),
                 age) for ns, age in (("fresh_bot", 0.0), ("stale_bot", 10.0))}
    image = numpy_to_image(np.zeros((8, 8, 3), np.uint8), "rgb8")

    def publish():
        for state_pub, image_pub, age in pubs.values():
            msg = RobotState()
            stamp = node.get_clock().now().nanoseconds - int(age * 1e9)
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
            state_pub.publish(msg)
            image_pub.publish(image)

    timer = node.create_timer(0.05, publish)
    yield
    node.destroy_timer(timer)
    for state_pub, image_pub, _age in pubs.values():
        node.destroy_publisher(state_pub)
        node.destroy_publisher(image_pub)


def test_stale_robot_state_is_refused_with_the_reason(svc, fake_robots):
    model, _backend, _proc = svc
    assert model.predict(SOUP, robot_namespace="fresh_bot", timeout=10.0).shape == (4, 7)
    with pytest.raises(RuntimeError, match="older than max_observation_age"):
        model.predict(SOUP, robot_namespace="stale_bot", timeout=1.0)


def test_goals_beyond_max_goals_are_refused_and_waiting_ones_cancel(svc, fake_robots):
    model, _backend, _proc = svc
    # Goals on the stale robot wait for a fresh observation for their whole timeout.
    crowd = [model.send(single(robot_namespace="stale_bot", timeout=60.0)) for _ in range(24)]
    status, result = model.send(single(robot_namespace="stale_bot")).result(30)
    assert status == GoalStatus.STATUS_ABORTED
    assert "already serving 24 predict goals" in result.message, result.message
    for run in crowd:
        run.cancel()
    assert all(run.result(10)[0] == GoalStatus.STATUS_CANCELED for run in crowd)


# --- inference and streams --------------------------------------------------------------------

@pytest.mark.serial  # the next goal has 1.5 s
def test_an_inference_that_times_out_does_not_block_the_next_goal(svc):
    model, _backend, _proc = svc
    status, result = model.send(single(HANG, timeout=1.0)).result(30)
    assert status == GoalStatus.STATUS_ABORTED
    assert "did not answer within 1 s" in result.message, result.message
    # The hung request still runs for 3 s more; the next goal must not wait for it.
    status, result = model.send(single(timeout=1.5)).result(30)
    assert status == GoalStatus.STATUS_SUCCEEDED, result.message


def test_twenty_concurrent_streams_all_get_chunks(svc):
    model, _backend, _proc = svc
    chunks = {i: [] for i in range(20)}
    runs = [model.stream(SOUP, chunks[i].append, max_chunks=3, client_id=f"stream{i}",
                         timeout=20.0) for i in range(20)]
    results = [run.result(120) for run in runs]
    failed = [r.message for status, r in results if status != GoalStatus.STATUS_SUCCEEDED]
    assert failed == [], failed
    # A stream's last feedback and its result travel on different DDS entities, and rclpy's
    # action client drops a feedback that arrives after its goal's result; the result
    # carries the last chunk, so every chunk the node produced is in one or the other.
    got = {i: sorted({c.sequence for c in chunks[i]} | {result.last_chunk.sequence})
           for i, (_status, result) in enumerate(results)}
    wrong = {i: seqs for i, seqs in got.items() if seqs != [0, 1, 2]}
    assert not wrong, wrong
    assert all([c.sequence for c in chunks[i]][:2] == [0, 1] for i in chunks), chunks


# --- a model that dies mid-run ----------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("on_model_loss, how", [
    ("finish_chunk", "the robot finished the chunk it held"), ("stop", "the robot was stopped")])
def test_executor_stops_with_an_error_naming_the_model_when_it_is_killed(
        robot, node_factory, on_model_loss, how):
    client, info = robot
    name = f"doomed_{on_model_loss}"
    # "stop" must find a chunk still running when the loss is noticed (~1 s): chunks of 100
    # steps outlast it however fast the simulator steps.
    parameters = {"backend": "scripted", **({"chunk_size": 100} if on_model_loss == "stop"
                                            else {})}
    proc = node_factory("rpent_am", "am_node", parameters, name=name, remaps={"__node": name})
    model = ActionModelClient(client.node, model=f"/{name}")
    try:
        model.connect(info, timeout=60)
    except Exception:
        pytest.fail(f"action-model node did not come up:\n{proc.log_tail()}")
    seen = threading.Condition()
    states: list = []

    def on_state(msg):
        with seen:
            states.append((msg.episode_step, msg.active_goal))
            seen.notify_all()

    sub = client.node.create_subscription(RobotState, "/robot_state", on_state, STATE_QOS)
    try:
        assert client.reset().success
        with seen:
            assert seen.wait_for(lambda: states, 10), "no robot_state"
            start_step = states[-1][0]
        executor = ChunkExecutor(client, model, on_model_loss=on_model_loss)
        out = {}
        runner = threading.Thread(target=lambda: out.setdefault("report", executor.run(
            SOUP, max_steps=2000, timeout=30.0)), daemon=True)
        runner.start()
        with seen:
            assert seen.wait_for(lambda: states[-1][0] >= start_step + 5, 60), \
                "the executor did not drive the robot"
        os.killpg(proc.proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        runner.join(60)
        took = time.monotonic() - killed
        assert not runner.is_alive(), "the executor did not return after its model died"
        report = out["report"]
        print(f"\n{on_model_loss}: executor returned {took:.2f} s after the model was killed: "
              f"{report.message}")
        assert report.outcome == "error", report.message
        assert f"/{name} went silent" in report.message and how in report.message
        assert report.steps_executed > 0
        # Then the robot stands still: no goal active, no step taken. (Its last chunk may
        # still take the step in progress when the cancel comes, and one chunk handing over
        # to the next shows a moment with no goal, so idle means ten states in a row.)
        with seen:
            assert seen.wait_for(lambda: len(states) >= 10 and
                                 all(goal == "" for _, goal in states[-10:]), 10), states[-10:]
            count = len(states)
            assert seen.wait_for(lambda: len(states) >= count + 10, 10), "no robot_state"
            after = states[count - 1:]
        assert all(step == after[0][0] and goal == "" for step, goal in after), after
        # And it keeps serving: a reset is answered, and a new model drives it again.
        response = client.reset(timeout=30)
        assert response.success, response.message
        revived = f"revived_{on_model_loss}"
        node_factory("rpent_am", "am_node", {"backend": "scripted"}, name=revived,
                     remaps={"__node": revived})
        model = ActionModelClient(client.node, model=f"/{revived}")
        model.connect(info, timeout=60)
        report = ChunkExecutor(client, model).run(SOUP, max_chunks=2, timeout=30.0)
        assert report.steps_executed > 0, report.message
    finally:
        client.node.destroy_subscription(sub)
