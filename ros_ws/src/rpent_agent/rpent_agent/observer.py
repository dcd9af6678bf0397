"""Keeps the newest robot state, task status and camera frames from the contract's topics,
and feeds the episode video."""
from __future__ import annotations

import threading
import time
from typing import Optional

from sensor_msgs.msg import Image

from rpent_common.processes import wait_until
from rpent_contract.geometry import stamp_to_ns
from rpent_contract.images import image_to_numpy, to_rgb
from rpent_contract.names import ROBOT_STATE_TOPIC, TASK_STATUS_TOPIC, camera_topic
from rpent_contract.qos import LATCHED_QOS, STATE_QOS, camera_sub_qos
from rpent_interfaces.msg import RobotState, TaskStatus


class RobotObserver:
    def __init__(self, node, camera_names, video=None, state_rate: float = 20.0):
        """``state_rate``: Hz the robot publishes robot_state at (its control rate)."""
        self._node = node
        self._lock = threading.Condition()
        self._state: Optional[RobotState] = None
        self._state_at = 0.0  # monotonic time the newest state arrived
        # The robot publishes its state on a timer, moving or not: a state older than many
        # periods means the robot node is down or hung (a loaded machine delays a few).
        self._period = 1.0 / (state_rate or 20.0)
        self.stale_after = max(2.0, 20.0 * self._period)
        self._task: Optional[TaskStatus] = None
        self._images: dict = {}
        self.camera_names = list(camera_names)
        self.video = video
        self._subs = [
            node.create_subscription(RobotState, ROBOT_STATE_TOPIC, self._on_state, STATE_QOS),
            node.create_subscription(TaskStatus, TASK_STATUS_TOPIC, self._on_task, LATCHED_QOS),
        ] + [node.create_subscription(Image, camera_topic(name),
                                      lambda msg, n=name: self._on_image(n, msg),
                                      camera_sub_qos(node, camera_topic(name)))
             for name in self.camera_names]

    def _on_state(self, msg):
        with self._lock:
            self._state_at = time.monotonic()
            self._state = msg
            self._lock.notify_all()

    def _on_task(self, msg):
        self._task = msg

    def _on_image(self, name, msg):
        with self._lock:
            self._images[name] = msg
            self._lock.notify_all()
        # The last camera of a tick completes the frame set the video records.
        if self.video is not None and name == self.camera_names[-1] and self._state is not None:
            self.video.offer(self._state.episode_step, self.frames(),
                             stamp_to_ns(msg.header.stamp) * 1e-9)

    def wait_ready(self, timeout: float) -> None:
        wait_until(lambda: self._state is not None and self._task is not None
                   and len(self._images) == len(self.camera_names), timeout,
                   what="robot_state, task_status and every camera topic")

    def state(self) -> Optional[RobotState]:
        return self._state

    def catch_up(self) -> bool:
        """Wait (a few control periods at most) until the state and every camera's image
        were measured after this call; False if they were not.

        What an agent reads right after a reset or a motion must show the scene after it:
        the robot answers before its next measurement has reached this node, the more so on
        a loaded machine. Stamps, not arrival counts, tell: frames measured before the call
        may still be queued here. If they time out the newest data stands, and
        :meth:`staleness` says when it is too old to trust.
        """
        after = self._node.get_clock().now().nanoseconds
        with self._lock:
            return self._lock.wait_for(
                lambda: self._state is not None
                and stamp_to_ns(self._state.header.stamp) >= after
                and all(name in self._images
                        and stamp_to_ns(self._images[name].header.stamp) >= after
                        for name in self.camera_names),
                timeout=max(0.5, 10.0 * self._period))

    def staleness(self) -> Optional[str]:
        """None while the robot's data is current; else what is wrong and what to do."""
        if self._state is None:
            return "no robot state has arrived yet; check that the robot node is running"
        age = time.monotonic() - self._state_at
        if age <= self.stale_after:
            return None
        if self._node.count_publishers(ROBOT_STATE_TOPIC) == 0:
            return (f"the robot node is gone (nothing publishes robot_state): the robot "
                    f"state and images are {age:.1f} s old. Restart the robot node")
        return (f"robot state is {age:.1f} s old (it should arrive every "
                f"{self._period:.2f} s); the robot node may be down or hung, so "
                "the state and images are not current. Check it (ros2 node list) before "
                "moving")

    def task(self) -> Optional[TaskStatus]:
        return self._task

    def settled_task(self, after_ns: int, timeout: float = 2.0) -> Optional[TaskStatus]:
        """The task status as of a robot state stamped after ``after_ns`` (ROS time).

        The robot publishes both in the same tick but on separate topics, and this node's
        callbacks may lag behind a busy robot: right after a motion, the newest verdict
        can still be in flight.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state, task = self._state, self._task
            if state is not None and task is not None and task.step >= state.episode_step \
                    and stamp_to_ns(state.header.stamp) >= after_ns:
                return task
            time.sleep(0.02)
        return self._task

    def frames(self) -> dict:
        """camera -> RGB array, newest frame of each camera."""
        with self._lock:
            msgs = dict(self._images)
        return {name: to_rgb(image_to_numpy(m), m.encoding) for name, m in msgs.items()}
