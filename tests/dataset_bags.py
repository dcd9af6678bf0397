"""Recorded LIBERO runs for the dataset-export tests and bench.

The scripted expert's chunks run on a LIBERO node through ChunkExecutor (what the agent's
run_policy tool does) while the recorder records its default topics (executed_actions
among them: what the exporter takes the actions from). Every execute_chunk goal the
executor sends is also kept here, cut to the rows its result says were executed (a LIBERO
chunk runs from its first row): the actions the robot was sent, in step order, known
independently of executed_actions. (Not from feedback: rclpy drops a goal's feedback that
arrives after its result, which a preempted chunk's last step can.)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from rpent_bag.settings import DEFAULT_TOPICS
from rpent_common.processes import wait_until
from rpent_contract.control_space import chunk_to_array
from rpent_contract.qos import EXECUTED_QOS
from rpent_interfaces.msg import ExecutedAction

SOUP = "pick the alphabet soup and place it in the basket"
# What the exporter reads, all default topics of the recorder.
MUST_RECORD = ("/robot_state", "/task_status", "/executed_actions",
               "/camera/agentview/image_raw", "/camera/robot0_eye_in_hand/image_raw",
               "/action_model/predict/_action/feedback")


@dataclass
class EpisodeTruth:
    """One robot episode as the executor ran it."""
    episode_id: str
    instruction: str
    success: bool
    actions: list = field(default_factory=list)  # executed rows, in step order


@dataclass
class Episode:
    """What to run: a step budget (a small one ends the episode unsolved) and the LIBERO
    initial state."""
    max_steps: int
    init_state_index: int = 0


def record_episodes(start: Callable, bag: Path, episodes: Sequence[Episode],
                    timeout: float = 300.0) -> list[EpisodeTruth]:
    """Start robot, scripted model and recorder with ``start(package, executable, params,
    name)`` (NodeProcess arguments), run ``episodes`` and close the bag; needs rclpy
    initialised. The caller stops the processes ``start`` made."""
    from rpent_am.client import ActionModelClient
    from rpent_contract.client import RobotClient

    # Published faster than it steps, the robot leaves an observation of every step in the
    # bag however fast the machine runs the simulator.
    start("rpent_env_sim", "libero_node", {"suite": "libero_object", "task_id": 0,
                                           "publish_rate": 40.0}, "dataset_robot")
    robot = RobotClient()
    try:
        info = robot.wait_ready(timeout)
        start("rpent_am", "am_node", {"backend": "scripted"}, "action_model")
        recorder = start("rpent_bag", "recorder", {"bag_path": str(bag),
                                                   "topics": DEFAULT_TOPICS}, "recorder")
        for topic in MUST_RECORD:
            wait_until(lambda: f"recording {topic} [" in recorder.log_tail(200), timeout,
                       what=f"the recorder to subscribe {topic}")
        model = ActionModelClient(robot.node)
        model.connect(info, timeout=timeout)
        executed = []
        robot.node.create_subscription(
            ExecutedAction, "executed_actions",
            lambda m: executed.append((m.episode_id, m.episode_step)), EXECUTED_QOS)
        truths = [_run_episode(robot, model, e) for e in episodes]
        # The last goal's final step is published as the goal ends: stopping the recorder
        # at once can cut it off in transit. Stop once a peer of the recorder has it.
        last = truths[-1]
        wait_until(lambda: (last.episode_id, len(last.actions) - 1) in executed, 30.0,
                   what="the last executed step on executed_actions")
        assert recorder.stop() == 0, recorder.log_tail()
    finally:
        robot.close()
    return truths


def _run_episode(robot, model, episode: Episode) -> EpisodeTruth:
    from rpent_am.chunk_executor import ChunkExecutor

    reset = robot.reset(init_state_index=episode.init_state_index)
    assert reset.success, reset.message
    truth = EpisodeTruth(reset.episode_id, reset.instruction, False)
    send, sent = robot.send, []

    def recording_send(action, goal, feedback=None, timeout=10.0):
        run = send(action, goal, feedback, timeout)
        sent.append((chunk_to_array(goal.chunk), run))
        return run

    robot.send = recording_send
    try:
        report = ChunkExecutor(robot, model).run(SOUP, max_steps=episode.max_steps,
                                                 timeout=30.0)
        # A goal canceled as the run ends may still finish the step in flight.
        for rows, run in sent:
            _, result = run.result(30.0)
            skipped = result.steps_skipped
            truth.actions.extend(rows[skipped:skipped + result.steps_executed])
    finally:
        robot.send = send
    truth.success = report.task_success
    truth.actions = np.array(truth.actions)
    return truth


def copy_bag(src: Path, dst: Path, keep: Callable[[str], bool] = lambda topic: True) -> Path:
    """Rewrite a bag as ``ros2 bag record`` on Humble writes one: SQLite storage and no
    message definitions; the same topics (those ``keep`` accepts), QoS and messages. (The
    type hash is kept: rosbags' writer insists on one.)"""
    from rosbags.rosbag2 import Reader, StoragePlugin, Writer

    with Reader(src) as reader, Writer(dst, version=8,
                                       storage_plugin=StoragePlugin.SQLITE3) as writer:
        conns = {c.id: writer.add_connection(c.topic, c.msgtype, msgdef="", rihs01=c.digest,
                                             offered_qos_profiles=c.ext.offered_qos_profiles)
                 for c in reader.connections if keep(c.topic)}
        for c, stamp, data in reader.messages([c for c in reader.connections if c.id in conns]):
            writer.write(conns[c.id], stamp, data)
    return dst


def write_bag(dst: Path, messages: Sequence[tuple]) -> Path:
    """A SQLite bag of (topic, rclpy message) pairs, one nanosecond apart, without message
    definitions (their type hashes are placeholders: nothing here reads them). The messages
    are serialized by rosbags from the installed definitions: rclpy's serialize_message may
    leave padding after the message, which rosbags' reader refuses."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    from rpent_bag import definitions

    store = definitions.typestore_for()

    def type_name(msg) -> str:
        package, kind = type(msg).__module__.split(".")[:2]
        return f"{package}/{kind}/{type(msg).__name__}"

    def convert(msg):
        name = type_name(msg)
        if name not in store.types:
            definitions.register(store, name, "")
        values = {}
        for slot in msg.get_fields_and_field_types():
            value = getattr(msg, slot)
            if hasattr(value, "get_fields_and_field_types"):
                value = convert(value)
            elif isinstance(value, (list, tuple)) and value and hasattr(
                    value[0], "get_fields_and_field_types"):
                value = [convert(v) for v in value]
            elif not isinstance(value, (str, list, tuple, bool, int, float, bytes)):
                value = np.asarray(value)  # array.array / numpy sequences of numbers
            values[slot] = value
        return store.types[name](**values)

    with Writer(dst, version=8, storage_plugin=StoragePlugin.SQLITE3) as writer:
        conns = {}
        for i, (topic, msg) in enumerate(messages):
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, type_name(msg), msgdef="",
                                                     rihs01="RIHS01_" + "0" * 64)
            writer.write(conns[topic], i + 1, bytes(store.serialize_cdr(convert(msg),
                                                                        type_name(msg))))
    return dst
