"""What the executor every node spins with guarantees: a robot whose threads are held by slow
work still has one for ``stop``, and a task waiting for a thread is handed to one once."""
from __future__ import annotations

import collections
import threading

import rclpy
from std_srvs.srv import Trigger

from rpent_common.processes import wait_until
from rpent_contract import sim_services
from rpent_contract.client import shutdown_executor, spin_in_thread, wait_future
from rpent_contract.driver import RobotDescription
from rpent_contract.executors import MultiThreadedExecutor
from rpent_contract.qos import REQUEST_QOS
from rpent_contract.serving import service


class SlowSimulator:
    """A simulator that answers viewers' looks only once released, as LIBERO does behind a
    running chunk and while it reads a suite's files; it counts the looks waiting at once."""

    description = RobotDescription(embodiment="slow_sim", simulated=True, joint_names=[],
                                   camera_names=[], control_spaces=[], control_rate=20.0,
                                   gripper_max_width=0.08)

    def __init__(self):
        self.released = threading.Event()
        self._lock = threading.Lock()
        self.waiting = self.most_waiting = 0

    def task_list(self):
        with self._lock:
            self.waiting += 1
            self.most_waiting = max(self.most_waiting, self.waiting)
        self.released.wait(30)
        with self._lock:
            self.waiting -= 1
        return "slow_suite", [], []


def test_stop_is_answered_while_the_simulator_keeps_viewers_waiting(rclpy_context,
                                                                    monkeypatch):
    """The looks of a robot's scene timer each waited on the simulator in a thread of their
    own, one more every period, until the node had no thread left for a stop."""
    monkeypatch.setattr(sim_services, "SCENE_PERIOD_S", 0.02)
    simulator = SlowSimulator()
    robot = rclpy.create_node("slow_robot")
    sim_services.SimServices(robot, simulator, simulator.description, frame_prefix="",
                             base_frame="base_link")
    service(robot, Trigger, "stop", lambda _request, response: response, coalesce=True)
    executor = MultiThreadedExecutor(num_threads=6)  # as many as a robot node's
    executor.add_node(robot)
    spinner = spin_in_thread(executor, "slow-robot")
    caller = rclpy.create_node("stop_caller")
    stop = caller.create_client(Trigger, "/stop", qos_profile=REQUEST_QOS)
    caller_executor = MultiThreadedExecutor(num_threads=2)
    caller_executor.add_node(caller)
    caller_spinner = spin_in_thread(caller_executor, "stop-caller")
    try:
        wait_until(lambda: simulator.waiting, 10, what="the first look at the simulator")
        # Ten timer periods: time for more looks than the node has threads, had it let them.
        threading.Event().wait(0.2)
        assert stop.wait_for_service(10)
        wait_future(stop.call_async(Trigger.Request()), 10, "the stop answer while the "
                    "simulator keeps a look waiting")
        assert simulator.most_waiting == 1
    finally:
        simulator.released.set()
        shutdown_executor(caller_executor)
        shutdown_executor(executor)
        spinner.join(5)
        caller_spinner.join(5)
        caller.destroy_node()
        robot.destroy_node()


def test_a_task_waiting_for_a_thread_is_handed_to_one_once(rclpy_context):
    """rclpy's executor handed a waiting task to its thread pool again at every wake-up
    (ros2/rclpy#1452): fifty answers queued behind three busy threads became thousands of
    hand-overs, and a burst's last answer came hundreds of milliseconds late."""
    threads = 3
    node = rclpy.create_node("handing_over")
    executor = MultiThreadedExecutor(num_threads=threads)
    executor.add_node(node)
    handed = collections.Counter()
    pool_submit = executor._executor.submit

    def counted(fn, *args, **kwargs):
        handed[fn] += 1
        return pool_submit(fn, *args, **kwargs)

    executor._executor.submit = counted
    spinner = spin_in_thread(executor, "handing-over")
    release, busy = threading.Event(), threading.Semaphore(0)

    def hold():
        busy.release()
        release.wait(30)

    try:
        holders = [executor.create_task(hold) for _ in range(threads)]
        for _ in range(threads):
            assert busy.acquire(timeout=10), "the executor's threads did not all start"
        waiting = [executor.create_task(lambda: None) for _ in range(20)]
        for _ in range(30):  # wake-ups while they wait, as every arriving message makes
            executor.wake()
            threading.Event().wait(0.002)
        release.set()
        wait_until(lambda: all(t.done() for t in waiting + holders), 10,
                   what="the waiting tasks to run")
        assert [handed[t] for t in waiting] == [1] * len(waiting)
    finally:
        release.set()
        shutdown_executor(executor)
        spinner.join(5)
        node.destroy_node()
