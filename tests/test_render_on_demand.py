"""A simulated robot renders only the frames someone looks at, and every frame it publishes
shows the state of the step it is stamped with.

The LIBERO node runs with ``camera_rate:=2`` (a frame every 10 of its 20 Hz steps). What
the node published is checked from the outside: its frames against a second simulator
that replays the same actions, and the steps frames were made at against the camera
rate and the ``camera/trigger`` requests sent.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest
from sensor_msgs.msg import Image
from std_msgs.msg import Empty

from rpent_common.processes import wait_until
from rpent_contract.client import RobotClient
from rpent_contract.geometry import stamp_to_ns
from rpent_contract.images import image_to_numpy
from rpent_contract.names import CAMERA_TRIGGER_TOPIC
from rpent_contract.qos import EXECUTED_QOS, TRIGGER_QOS
from rpent_env_sim.libero_sim import LiberoSim
from rpent_interfaces.msg import RobotState

SUITE, TASK, INIT = "libero_object", 0, 0
# A trigger must reach a free-running simulator within the chunk's 18 remaining steps.
pytestmark = [pytest.mark.serial, pytest.mark.slow]
CAMERAS = ("agentview", "robot0_eye_in_hand")
FRAME_EVERY = 10  # steps per frame at camera_rate 2 Hz and the 20 Hz control rate
# Sweeps the hand sideways and down, so the wrist camera's view changes every step.
ACTIONS = np.array([[0.4, -0.4, -0.1, 0.0, 0.0, 0.3, -1.0]] * 24)


class Watcher:
    """robot_state and both cameras' frames as they arrive."""

    def __init__(self, node):
        self.lock = threading.Lock()
        self.states: dict = {}  # stamp -> episode step
        self.frames: dict = {c: {} for c in CAMERAS}  # camera -> stamp -> RGB
        # Every state and frame, with the executed steps' deep history: a free-running
        # simulator publishes a chunk's states in a burst, and a shallow history loses the
        # oldest while this process is busy (the contract's own profiles keep the newest).
        self.subs = [node.create_subscription(RobotState, "robot_state", self._state,
                                              EXECUTED_QOS)]
        self.subs += [node.create_subscription(
            Image, f"camera/{c}/image_raw", lambda m, c=c: self._frame(c, m),
            EXECUTED_QOS)
            for c in CAMERAS]

    def _state(self, msg):
        with self.lock:
            self.states[stamp_to_ns(msg.header.stamp)] = msg.episode_step

    def _frame(self, camera, msg):
        with self.lock:
            self.frames[camera][stamp_to_ns(msg.header.stamp)] = image_to_numpy(msg).copy()

    def framed_steps(self, since_ns: int) -> dict:
        """step -> {camera: RGB} of the frames stamped like a robot_state after since_ns."""
        with self.lock:
            out: dict = {}
            for camera, frames in self.frames.items():
                for stamp, rgb in frames.items():
                    if stamp > since_ns and stamp in self.states:
                        out.setdefault(self.states[stamp], {})[camera] = rgb
            return out

    def unpaired(self, since_ns: int, until_ns: int) -> list:
        with self.lock:
            return [(c, s) for c, frames in self.frames.items() for s in frames
                    if since_ns < s <= until_ns and s not in self.states]

    def complete(self, step: int, since_ns: int) -> int:
        """The stamp of ``step`` once every camera's frame of it has arrived, else 0."""
        with self.lock:
            stamps = [s for s, st in self.states.items() if st == step and s > since_ns]
            return next((s for s in stamps if all(s in f for f in self.frames.values())), 0)


@pytest.fixture(scope="module")
def robot(rclpy_context, node_factory):
    proc = node_factory("rpent_env_sim", "libero_node",
                        {"suite": SUITE, "task_id": TASK, "init_state_index": INIT,
                         "camera_rate": 2.0, "cameras": list(CAMERAS)}, name="on_demand")
    client = RobotClient()
    client.wait_ready(180)
    yield client
    client.close()
    assert proc.alive(), proc.log_tail()


@pytest.fixture(scope="module")
def replay():
    """The robot's task in a simulator of our own, to render any step of ACTIONS."""
    with LiberoSim(SUITE, TASK, init_state_index=INIT, cameras=CAMERAS) as sim:
        sim.reset()
        frames = {0: sim.observe(render=True).images}
        for step, action in enumerate(ACTIONS, 1):
            frames[step] = sim.step(action, render=True).images
        yield {step: {c: f.rgb for c, f in images.items()} for step, images in frames.items()}


def _now(client) -> int:
    return client.node.get_clock().now().nanoseconds


def test_frames_are_made_at_the_camera_rate_and_show_the_step_they_name(robot, replay):
    watcher = Watcher(robot.node)
    try:
        robot.reset(init_state_index=INIT)
        since = _now(robot)
        # At rest the state holds: a watcher gets its frames without any motion.
        wait_until(lambda: watcher.complete(0, since), 30, what="frames of step 0")
        _status, result = robot.execute_chunk(ACTIONS, "libero_osc_delta")
        last = len(ACTIONS)
        assert result.steps_executed == last, result.message
        # Each camera's frame and the state of one step come on topics of their own: wait
        # for all of them, then check only what came before.
        until = wait_until(lambda: watcher.complete(last, since), 30,
                           what=f"frames of step {last}, where the robot rests")
        framed = {step: images for step, images in watcher.framed_steps(since).items()
                  if step <= last}
        moving = sorted(s for s in framed if 0 < s < last)
        assert moving == list(range(FRAME_EVERY, last, FRAME_EVERY)), \
            f"while moving, frames came at steps {moving}; at 2 Hz they belong to every " \
            f"{FRAME_EVERY}th step only"
        assert not watcher.unpaired(since, until), "a frame went out without its robot_state"
        for step, images in framed.items():
            assert set(images) == set(CAMERAS), f"step {step} lacks a camera: {set(images)}"
            for camera, rgb in images.items():
                errors = {s: np.abs(rgb.astype(int) - replay[s][camera]).mean()
                          for s in range(max(0, step - 2), min(last, step + 2) + 1)}
                assert min(errors, key=errors.get) == step and errors[step] < 1.0, \
                    f"{camera} frame stamped like step {step} looks like another step " \
                    f"(mean abs difference per step: {errors})"
    finally:
        for sub in watcher.subs:
            robot.node.destroy_subscription(sub)


def test_a_trigger_gets_the_next_step_its_frames(robot, replay):
    watcher = Watcher(robot.node)
    trigger = robot.node.create_publisher(Empty, CAMERA_TRIGGER_TOPIC, TRIGGER_QOS)
    try:
        wait_until(lambda: trigger.get_subscription_count() > 0, 10,
                   what="the robot subscribing to camera/trigger")
        robot.reset(init_state_index=INIT)
        since = _now(robot)
        asked_at: list = []

        def on_feedback(fb):
            if fb.feedback.step == 1 and not asked_at:
                asked_at.append(fb.feedback.step)
                trigger.publish(Empty())

        last = 2 * FRAME_EVERY - 1
        _status, result = robot.execute_chunk(ACTIONS[:last], "libero_osc_delta",
                                              feedback=on_feedback)
        assert result.steps_executed == last, result.message
        assert asked_at, "no feedback of step 1 came"
        wait_until(lambda: watcher.complete(last, since), 30,
                   what=f"frames of step {last}, where the robot rests")
        framed = watcher.framed_steps(since)
        extra = sorted(s for s in framed if 0 < s < last and s % FRAME_EVERY)
        assert len(extra) == 1 and extra[0] > 1, \
            f"after a trigger at step 1, frames came at steps {extra} besides the camera " \
            "rate's: the one step after the trigger should have been rendered"
        step = extra[0]
        for camera, rgb in framed[step].items():
            assert np.abs(rgb.astype(int) - replay[step][camera]).mean() < 1.0, \
                f"the triggered {camera} frame does not show step {step}"
    finally:
        robot.node.destroy_publisher(trigger)
        for sub in watcher.subs:
            robot.node.destroy_subscription(sub)
