"""Ctrl-C or SIGTERM while goals run (the whole bring-up stopping at once): the robot node
mid-chunk and the model node mid-stream both exit at once, cleanly and without tracebacks."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from rpent_am.client import ActionModelClient
from rpent_common.processes import wait_until
from rpent_contract.client import RobotClient
from rpent_contract.control_space import array_to_chunk
from rpent_interfaces.action import ExecuteChunk

SOUP = "pick the alphabet soup and place it in the basket"


def _signal(proc, signum, times: int) -> int:
    """``signum`` to the node's process group ``times`` times, 0.1 s apart (a terminal's
    Ctrl-C under ros2 launch reaches each node twice: from the terminal, then from launch,
    while the first one's clean-up runs); the exit code."""
    for i in range(times):
        if proc.proc.poll() is None:
            os.killpg(proc.proc.pid, signum)
        if i + 1 < times:
            time.sleep(0.1)
    try:
        proc.proc.wait(10)
    except subprocess.TimeoutExpired:
        pass  # stop() below ends it, and its code fails the test
    return proc.stop(5, signum)


@pytest.mark.slow
@pytest.mark.parametrize("signum, times", [(signal.SIGINT, 1), (signal.SIGTERM, 1),
                                           (signal.SIGINT, 2)],
                         ids=["SIGINT", "SIGTERM", "SIGINT-twice"])
def test_a_signal_mid_chunk_and_mid_stream_ends_both_nodes_at_once(rclpy_context, node_factory,
                                                                   signum, times):
    robot_proc = node_factory("rpent_env_sim", "libero_node", {},
                              name=f"shutdown_robot_{signum.name}_{times}")
    robot = RobotClient()
    try:
        info = robot.wait_ready(180)
        model_proc = node_factory("rpent_am", "am_node", {"backend": "scripted"},
                                  name=f"shutdown_model_{signum.name}_{times}")
        model = ActionModelClient(robot.node)
        model.connect(info, timeout=60)
        chunks = []
        model.stream(SOUP, chunks.append, client_id="shutdown")
        steps = []
        rows = np.zeros((400, 7))
        rows[:, 0] = np.where(np.arange(400) % 2 == 0, 0.3, -0.3)
        goal = ExecuteChunk.Goal()
        array_to_chunk(rows, info.default_control_space, goal.chunk)
        robot.send("execute_chunk", goal, feedback=steps.append)
        wait_until(lambda: len(chunks) >= 2 and len(steps) >= 3, 60,
                   what="a running stream and a running chunk")
        # The signal reaches every node of a bring-up at once; the robot stops publishing,
        # so the stream's next observation never comes.
        assert _signal(robot_proc, signum, times) == 0, robot_proc.log_path.read_text()[-3000:]
        assert _signal(model_proc, signum, times) == 0, model_proc.log_path.read_text()[-3000:]
    finally:
        robot.close()
    for proc in (robot_proc, model_proc):
        log = proc.log_path.read_text()
        assert "Traceback" not in log and "RCLError" not in log, log[-3000:]


def test_ctrl_c_while_the_agent_waits_for_its_robot_exits_130(rclpy_context, node_factory):
    """A bring-up stopped before its robot came up (a robot node that failed): the agent,
    still waiting for it, exits as a signal-ended process does, not by aborting."""
    agent = node_factory("rpent_agent", "agent_node", {"robot_namespace": "nobody_here"},
                         name="shutdown_waiting_agent")
    wait_until(lambda: "no usable LLM" in agent.log_tail(), 60,
               what="the agent to start waiting for its robot")
    code = agent.stop(timeout=15)
    log = agent.log_path.read_text()
    assert code == 130 and "terminate called" not in log, (code, log[-3000:])


HELD_NODE = """
import sys, threading, time
import rclpy
from rpent_contract.node_main import run_node

def hold_forever():
    time.sleep(3600)

def make():
    node = rclpy.create_node("held_node")
    threading.Thread(target=hold_forever).start()  # not a daemon: Python waits for it
    if sys.argv[1] == "starting":
        print("ready", flush=True)
        time.sleep(60)  # still starting (waiting for a robot, loading a model) when stopped
    else:
        said = []
        def spinning():
            if not said:
                said.append(True)
                print("ready", flush=True)
        node.create_timer(0.01, spinning)
    return node

sys.exit(run_node(make, name="held_node", shutdown_deadline=2.0))
"""


@pytest.mark.parametrize("when", ["spinning", "starting"])
def test_a_node_held_by_a_thread_that_never_ends_still_exits_and_says_what_held_it(when):
    """A node must not outlive its starter (its SIGINT on the parent's death) however its
    clean-up goes, and whenever the signal comes: past the deadline it prints every
    thread's stack and exits."""
    proc = subprocess.Popen([sys.executable, "-c", HELD_NODE, when], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        code = proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert code == 1, err
    assert "hold_forever" in err and "Timeout (0:00:02)!" in err, err
