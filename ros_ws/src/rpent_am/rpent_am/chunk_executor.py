"""Execute streamed action chunks on a robot without stalling at chunk boundaries.

Strategy: *drop the stale prefix, switch at the replan point*. A chunk is conditioned on
an observation taken at time t; by the time it runs the robot has already executed k more
steps, so its first k actions are in the past and are dropped; the rest replaces what the
robot is doing. The robot drops them itself when the chunk begins (it counts its own steps
after the chunk's ``observation_stamp``, those taken while the goal travelled included);
the executor counts the ones it has heard of, from the stamps in execute_chunk feedback,
only to leave out chunks that are wholly in the past and to bound the steps it sends.
The robot runs each chunk for at least ``replan_after`` steps before a newer one takes
over (the newest waiting chunk wins), so a fast model does not churn goals every step.
Switching sends the newer chunk as an execute_chunk goal, which the robot node starts
right after the step in flight: no gap while a chunk is still queued. A chunk conditioned
on an observation older than ``max_staleness`` is never executed.

A model that dies or hangs mid-stream is noticed by its silence: no chunk for half of
``model_timeout`` sends it a get_model_meta probe, and no answer within the other half ends
the run with an "error" naming the model, after the robot finished the chunk it held or
at once (``on_model_loss``). DDS takes many seconds to report a killed node gone from the
graph, far longer than the chunk the robot holds lasts.
"""
from __future__ import annotations

import math
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from action_msgs.msg import GoalStatus

from rpent_contract.control_space import array_to_chunk, stale_prefix
from rpent_contract.geometry import stamp_to_ns
from rpent_contract.images import image_to_numpy
from rpent_contract.names import EXECUTE_CHUNK_ACTION
from rpent_interfaces.action import ExecuteChunk

from .client import ActionModelClient, ChunkRejected


# Chunks the robot may refuse in a row before the run ends with its reason: the model's
# next chunk, from nearly the same observation, would be refused for the same reason.
MAX_REFUSALS = 3


@dataclass
class ExecutionReport:
    # "task_success", "chunks_done", "max_steps", "timeout", "refused", "canceled", "error"
    outcome: str
    message: str
    steps_executed: int = 0
    chunks_received: int = 0
    chunks_executed: int = 0
    chunks_stale: int = 0
    chunks_rejected: int = 0
    task_success: bool = False
    step_stamps_ns: list = field(default_factory=list)
    boundaries: list = field(default_factory=list)  # index in step_stamps of each chunk's 1st step
    # What a world-action model foresaw with the last chunk the robot ran: camera -> the
    # observation it expected after that chunk (HxWx3 uint8 RGB), and its value (or None).
    foreseen_images: dict = field(default_factory=dict)
    foreseen_value: Optional[float] = None

    def boundary_gaps_s(self) -> np.ndarray:
        t = np.asarray(self.step_stamps_ns, dtype=np.int64)
        return np.array([(t[i] - t[i - 1]) / 1e9 for i in self.boundaries if 0 < i < len(t)])


# What a run does when its model dies or hangs mid-stream: let the robot finish the chunk it
# already holds (a smooth stop at a chunk's end), or stop it at once.
ON_MODEL_LOSS = ("finish_chunk", "stop")


class ChunkExecutor:
    """Runs a predict stream and feeds its chunks to the robot's execute_chunk."""

    def __init__(self, robot, model: ActionModelClient, *, replan_after: int = 5,
                 max_staleness: float = 1.0, robot_namespace: str = "",
                 model_timeout: float = 1.0, on_model_loss: str = "finish_chunk"):
        """``robot_namespace`` tells a shared model node whose observations to use.

        ``model_timeout``: s the model may stay silent (no chunk, no answer to a liveness
        probe sent halfway) before the run ends with an "error" naming it; a model whose
        inference is slow still answers the probe. ``on_model_loss``: one of ON_MODEL_LOSS.
        """
        if on_model_loss not in ON_MODEL_LOSS:
            raise ValueError(f"on_model_loss '{on_model_loss}' is not one of "
                             f"{', '.join(ON_MODEL_LOSS)}")
        if not model_timeout > 0:
            raise ValueError(f"model_timeout must be > 0 s, got {model_timeout}")
        self.robot, self.model = robot, model
        self.robot_namespace = robot_namespace
        self.replan_after, self.max_staleness_ns = replan_after, int(max_staleness * 1e9)
        self.model_timeout, self.on_model_loss = model_timeout, on_model_loss
        self._cancel = threading.Event()

    def cancel(self) -> None:
        self._cancel.set()

    def run(self, instruction: str, *, max_steps: int = 600, max_chunks: int = 0,
            stop_on_success: bool = True, timeout: float = 120.0,
            client_id: str = "") -> ExecutionReport:
        """Stream ``instruction`` to the robot until success, a budget (``max_steps``,
        ``max_chunks``), the end of the stream or cancel. ``timeout`` is the time the run may
        go without a step executed: a hung model or robot ends it, a slow machine does not
        (a wall-clock budget would make the outcome depend on the machine's speed).

        Without a ``client_id`` the run gets a policy session of its own, freed when it ends:
        each run starts the policy afresh, as a new episode segment should."""
        self._cancel.clear()
        own_session = not client_id
        if own_session:
            client_id = f"chunk-executor-{uuid.uuid4().hex[:12]}"
        report = ExecutionReport("error", "")
        wake = threading.Condition()
        newest: list = []  # at most one chunk waiting: the newest
        stamps: list = []
        state = {"running": None, "since_switch": 0, "stream_done": False, "stream_end": None,
                 "success": False, "progress_at": time.monotonic(), "refused": 0,
                 "heard_at": time.monotonic(), "probe": None, "model_lost": None}

        def on_chunk(feedback):
            with wake:
                report.chunks_received += 1
                state["heard_at"] = time.monotonic()
                newest[:] = [feedback]
                wake.notify_all()

        stream = self.model.stream(instruction, on_chunk, client_id=client_id,
                                   robot_namespace=self.robot_namespace, whole_feedback=True)
        with wake:
            state["heard_at"] = time.monotonic()
        stream.result_future.add_done_callback(lambda f: self._notify_done(wake, state, f))
        try:
            report.outcome, report.message = self._loop(
                wake, newest, stamps, state, report, stop_on_success, max_steps, max_chunks,
                timeout)
        finally:
            lost = state["model_lost"] is not None
            if not stream.result_future.done():
                # Nobody would answer a lost model's cancel; a canceled run (its process
                # may be stopping with the model's) must not wait for the answer.
                if lost or self._cancel.is_set():
                    stream.handle.cancel_goal_async()
                else:
                    stream.cancel()
            if state["probe"] is not None:
                self.model.forget_probe(state["probe"][0])
            running = state["running"]
            if running is not None and not running.result_future.done():
                if self._cancel.is_set():  # the caller stops the robot itself
                    running.run.handle.cancel_goal_async()
                else:
                    running.run.cancel()
            if own_session and not lost:
                self.model.release(client_id)
        report.steps_executed = len(stamps)
        report.step_stamps_ns = list(stamps)
        report.task_success = state["success"]
        return report

    @staticmethod
    def _notify_done(wake, state, future):
        response = future.result()
        with wake:
            state["stream_done"] = True
            state["stream_end"] = (response.status, response.result.message)
            wake.notify_all()

    def _watch_model(self, state) -> bool:
        """Under ``wake``: whether a liveness probe should be sent now. Marks the model lost
        when a probe went unanswered for half of ``model_timeout``."""
        if state["stream_done"]:
            return False  # the model answered the stream itself
        now = time.monotonic()
        probe = state["probe"]
        if probe is None:
            return now - state["heard_at"] > self.model_timeout / 2
        if now - probe[1] > self.model_timeout / 2:
            state["model_lost"] = (
                f"the action model {self.model.name} went silent: no chunk for "
                f"{now - state['heard_at']:.1f} s and no answer to get_model_meta within "
                f"{now - probe[1]:.1f} s; its node died or hangs (ros2 node list, and its log)")
        return False

    def _send_probe(self, wake, state) -> None:
        future = self.model.probe()
        with wake:
            state["probe"] = (future, time.monotonic())

        def answered(_f):
            with wake:
                if state["probe"] is not None and state["probe"][0] is future:
                    state["probe"] = None
                    state["heard_at"] = time.monotonic()
                wake.notify_all()
        future.add_done_callback(answered)

    def _loop(self, wake, newest, stamps, state, report, stop_on_success, max_steps, max_chunks,
              idle_timeout):
        while True:
            probe = False
            with wake:
                while True:
                    running = state["running"]
                    idle = running is None or running.result_future.done()
                    if self._cancel.is_set():
                        return "canceled", "canceled by the caller"
                    ended = running.ended() if running is not None else None
                    if ended is not None:
                        refusal, succeeded = ended
                        # Feedback and result travel apart, and rclpy drops a goal's
                        # feedback that comes after its result: the success step's feedback
                        # can be lost, and every later chunk then ends at once, with no
                        # step and the success only in its result.
                        state["success"] = state["success"] or succeeded
                        state["refused"] = state["refused"] + 1 if refusal else 0
                        if state["refused"] >= MAX_REFUSALS:
                            return "refused", (f"the robot refused {state['refused']} chunks "
                                               f"in a row: {refusal}")
                    if stop_on_success and state["success"]:
                        return "task_success", f"task succeeded after {len(stamps)} steps"
                    if len(stamps) >= max_steps:
                        return "max_steps", f"step budget of {max_steps} used"
                    if state["model_lost"] is None and self._watch_model(state):
                        probe = True
                        break
                    lost = state["model_lost"]
                    if lost is not None and (idle or self.on_model_loss == "stop"):
                        how = ("the robot was stopped" if not idle else
                               "the robot finished the chunk it held" if running is not None
                               else "nothing had run")
                        return "error", f"{lost}; {how} after {len(stamps)} steps"
                    # The budget counts chunks executed: a fast model predicts many more.
                    spent = bool(max_chunks) and report.chunks_executed >= max_chunks
                    if newest and not spent and lost is None and \
                            (idle or state["since_switch"] >= self.replan_after):
                        feedback = newest.pop()
                        chunk = feedback.chunk
                        break
                    if idle and (spent or (state["stream_done"] and not newest)):
                        status, message = state["stream_end"] or (None, "")
                        if not spent and status == GoalStatus.STATUS_ABORTED:
                            return "error", (f"the action model {self.model.name} ended the "
                                             f"stream: {message}")
                        return "chunks_done", (f"executed {report.chunks_executed} chunks of "
                                               f"{report.chunks_received} received")
                    left = state["progress_at"] + idle_timeout - time.monotonic()
                    if left <= 0:
                        return "timeout", (f"no step executed for {idle_timeout:g} s "
                                           f"({len(stamps)} steps in all)")
                    # Short waits: the model's silence is measured, not signalled.
                    wake.wait(min(left, self.model_timeout / 10))
                steps_so_far = list(stamps)
            if probe:
                self._send_probe(wake, state)
                continue
            try:
                actions = self.model.validate(chunk)
            except ChunkRejected:
                report.chunks_rejected += 1
                raise
            obs_ns = stamp_to_ns(chunk.observation_stamp)
            now_ns = self.robot.node.get_clock().now().nanoseconds
            if now_ns - obs_ns > self.max_staleness_ns:
                report.chunks_stale += 1
                continue
            known_stale = stale_prefix(obs_ns, steps_so_far)
            if known_stale >= len(actions):
                report.chunks_stale += 1
                continue
            # The whole chunk, less what would pass the step budget after the prefix the robot
            # drops (at least the one known here).
            sent = actions[: known_stale + max(0, max_steps - len(steps_so_far))]
            goal = ExecuteChunk.Goal(stop_on_success=stop_on_success)
            array_to_chunk(sent, chunk.control_space, goal.chunk)
            # Which observation and which model answer the steps come from: the robot
            # reports both with every executed step, for the loop's latency.
            goal.chunk.header.stamp = chunk.header.stamp
            goal.chunk.observation_stamp = chunk.observation_stamp
            goal.chunk.inference_ms = chunk.inference_ms
            run = self.robot.send(EXECUTE_CHUNK_ACTION, goal, feedback=self._step_cb(wake, stamps,
                                                                                state))
            with wake:
                report.boundaries.append(len(stamps))
                report.chunks_executed += 1
                report.foreseen_images = {
                    camera: image_to_numpy(image) for camera, image in
                    zip(feedback.predicted_cameras, feedback.predicted_images)}
                report.foreseen_value = None if math.isnan(feedback.value) else feedback.value
                state["running"] = _Running(run, wake)
                state["since_switch"] = 0

    @staticmethod
    def _step_cb(wake, stamps, state):
        def on_step(fb):
            f = fb.feedback
            with wake:
                stamps.append(stamp_to_ns(f.stamp))
                state["progress_at"] = time.monotonic()
                state["since_switch"] += 1
                state["success"] = state["success"] or f.task_success
                wake.notify_all()
        return on_step


class _Running:
    """An execute_chunk goal in flight; wakes the loop when it ends."""

    def __init__(self, run, wake):
        self.run = run
        # The goal's own future: asking the client again here, under ``wake``, could wait
        # on the client's lock while a feedback callback holding it waits on ``wake``.
        self.result_future = run.result_future
        self.result_future.add_done_callback(lambda _f: _notify(wake))
        self._judged = False

    def ended(self):
        """Once, after the goal ended: the robot's reason if it refused the chunk (else ""),
        and whether the task had succeeded. None while it runs and after the first answer."""
        if self._judged or not self.result_future.done():
            return None
        self._judged = True
        result = self.result_future.result().result
        refused = result.outcome == ExecuteChunk.Result.OUTCOME_REFUSED
        return (result.message if refused else ""), bool(result.task_success)


def _notify(wake):
    with wake:
        wake.notify_all()
