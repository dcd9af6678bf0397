"""Action-model node: serves ``predict`` (streamed action chunks), ``get_model_meta``, ``reset``.

    ros2 run rpent_am am_node --ros-args -p backend:=scripted -p robot_namespace:=robot1

Its endpoints are private names (``action_model/predict`` ...): a robot's ``reset``
(ResetEpisode) and the model's ``reset`` (ResetPolicy) must never share a name, and one
model node can serve several robots in their own namespaces.

The model sits behind a :class:`~rpent_am.policy.PolicyBackend`. Observations come with
the goal, or from the latest contract topics of the robot (``robot_state`` and the model's
cameras) in ``robot_namespace``. Every chunk is checked against the model's metadata
before it leaves the node; a failing backend fails the goal, never the node.

Many clients, and clients that misbehave: at most ``max_goals`` goals run at once (more
are aborted with the reason); a robot's topics are subscribed while goals use them (on the
companion node ``<name>_observations``), an observation older than
``max_observation_age`` is never predicted from, and a goal naming a namespace where no
robot publishes fails after a few seconds. Policy sessions are bounded (``max_sessions``,
``session_ttl``); goals without a client_id share one session per robot. An inference that
overruns its goal's timeout is abandoned to its thread, and the next goal gets a fresh one.

Dynamic batching: a backend that can run several goals' inferences as one forward pass
(``batching``: LeRobot's chunking policies, the scripted expert) gets the goals that ask at
the same time as one batch of at most ``max_batch``, gathered for at most
``max_batch_wait_ms`` (not at all once every client it can expect waits in it, so a lone
client never waits; see policy.Batcher). Each goal keeps its own session and chunk;
feedback says how many goals each chunk's batch served.

A world-action model foresees along with each chunk (``get_model_meta``'s
``predicts_future`` / ``predicts_value``): each chunk's feedback (and the result, for the
last chunk) carries the observation it expects once the chunk has run, per camera, and its
value estimate, and the node publishes them on ``~/predicted/<camera>`` (stamped with the
time the chunk ends) and ``~/predicted_value``.

What the model sees: a backend fed through a ModelIO (``model_io``) has each image it is
given, turned, mirrored and resized as the model receives it, published on
``~/policy_input/<camera>`` with the stamp of the observation it came from. The node
prepares them again with the same ModelIO, and only while someone subscribes (a viewer, a
recorder).
"""
from __future__ import annotations

import threading
import time
import traceback
from collections import OrderedDict
from typing import Optional

import numpy as np
import rclpy
from rclpy.action import CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.exceptions import InvalidNamespaceException
from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node
from rclpy.publisher import Publisher
from rclpy.validate_namespace import validate_namespace
from sensor_msgs.msg import Image
from std_msgs.msg import Empty, Float64
from tf2_msgs.msg import TFMessage

from rpent_contract import params
from rpent_contract.client import spin_in_thread
from rpent_contract.control_space import ControlSpaceSpec, array_to_chunk
from rpent_contract.geometry import pose_from_msg, stamp_to_ns
from rpent_contract.images import image_to_numpy, numpy_to_image, to_rgb
from rpent_contract.names import (
    CAMERA_TRIGGER_TOPIC,
    GET_ROBOT_INFO_SERVICE,
    OBJECT_POSES_SERVICE,
    ROBOT_STATE_TOPIC,
    camera_topic,
)
from rpent_contract.node_main import run_node
from rpent_contract.perception import located_from_response
from rpent_contract.qos import (
    IMAGE_QOS,
    STATE_QOS,
    TF_STATIC_QOS,
    TRIGGER_QOS,
    camera_sub_qos,
)
from rpent_contract.serving import action_server, service
from rpent_contract.tf_tree import TfTree
from rpent_contract.validation import GoalRejected, check_chunk, check_timeout
from rpent_interfaces.action import Predict
from rpent_interfaces.msg import RobotState
from rpent_interfaces.srv import GetModelMeta, GetObjectPoses, GetRobotInfo, Locate, ResetPolicy

from .backends import make_backend
from .observation import (
    ObservationError,
    check_chunk_shape,
    check_foresight,
    check_observation,
    from_msg,
    state_from_robot_state,
)
from .pick_place import objects_in_instruction, phrases_in_instruction, placing_base
from .policy import (
    BackendError,
    Batcher,
    InferenceWorker,
    PolicyBackend,
    PolicyObservation,
    Prediction,
    Request,
    SessionsFull,
    SessionTable,
)
from .settings import BACKEND_SETTINGS, MAX_GOALS, ActionModelSettings

# Executor threads beyond one per goal (settings.MAX_GOALS); observations arrive on a
# thread of their own (ObservationHub).
RESERVE_THREADS = 4
# A robot's observation subscriptions outlive their last goal by this long, so a client
# asking again soon finds them connected, with no discovery wait.
SOURCE_LINGER_S = 30.0
# How long a goal waits for the ROS graph to show a robot_state publisher before it
# concludes that no robot runs in the namespace it named.
DISCOVERY_S = 3.0
# Measurements kept per robot to pair a state with the frames stamped like it; a frame
# arrives within a few states of its own.
PAIRING_DEPTH = 32
# A frame request (camera/trigger) sent before the robot matched the request publisher is
# lost: waiting goals repeat it this often, s.
TRIGGER_REPEAT_S = 0.1
HOUSEKEEPING_S = 5.0
# The perception node's locate, relative to the robot's namespace (the bring-ups start it
# there as 'perception'), and how long one may take: it segments every camera's frame.
PERCEPTION_LOCATE_SERVICE = "perception/locate"
LOCATE_TIMEOUT_S = 8.0


def _ns(namespace: str, name: str) -> str:
    namespace = namespace.strip("/")
    return f"/{namespace}/{name}" if namespace else name


class ObservationHub:
    """The robots' observation subscriptions, on a companion node (``<name>_observations``)
    spun by one thread of its own.

    rclpy's executor crashes when a subscription is destroyed while another thread builds
    its wait set (the subscription's QoS event handler raises InvalidHandle there), and
    goals release subscriptions from their own threads. Here one thread both waits and
    destroys: goals queue the subscriptions to drop and wake it. Goals, however many wait
    or infer, also never hold up the delivery of observations.
    """

    def __init__(self, owner: Node):
        name = f"{owner.get_name()}_observations"
        # A name rule of its own: a launch file's process-wide __node:= rule would otherwise
        # give this node the model node's name (and rosout its "already registered" warning).
        self.node = rclpy.create_node(name, namespace=owner.get_namespace(),
                                      context=owner.context,
                                      cli_args=["--ros-args", "-r", f"__node:={name}"])
        self._executor = SingleThreadedExecutor(context=owner.context)
        self._executor.add_node(self.node)
        self._lock = threading.Lock()
        self._doomed: list = []
        self._wake = self.node.create_guard_condition(self._drop_doomed)
        # Robots' world frames, for models trained in a simulator's world (model_io).
        self.frames = TfTree()
        self.node.create_subscription(TFMessage, "/tf_static", self.frames.add_static,
                                      TF_STATIC_QOS)
        self._thread = spin_in_thread(self._executor, "observations")

    def subscribe(self, topics) -> list:
        """[(type, topic, callback, qos)] -> their subscriptions."""
        subs = [self.node.create_subscription(t, name, cb, qos) for t, name, cb, qos in topics]
        self._wake.trigger()  # waiting on the old wait set, the thread would not see them
        return subs

    def advertise(self, msg_type, topic: str, qos) -> Publisher:
        return self.node.create_publisher(msg_type, topic, qos)

    def unsubscribe(self, subs) -> None:
        """Destroy subscriptions (and publishers) on the hub's thread."""
        with self._lock:
            self._doomed.extend(subs)
        self._wake.trigger()

    def _drop_doomed(self) -> None:
        with self._lock:
            doomed, self._doomed = self._doomed, []
        for entity in doomed:
            if isinstance(entity, Publisher):
                self.node.destroy_publisher(entity)
            else:
                self.node.destroy_subscription(entity)

    def close(self) -> None:
        self._executor.shutdown(timeout_sec=2.0)
        self._thread.join(2.0)
        self.node.destroy_node()


class LatestObservation:
    """The newest robot_state of one robot with its camera frames, as a PolicyObservation.

    A frame belongs to the state stamped like it: a robot node stamps the frames of a
    measurement with that measurement's time, and a simulator renders only the states
    someone looks at, so the newest state may have no frames yet. A camera whose frames
    never carry a state's stamp (another driver's, on its own clock) gives its newest.
    A goal waiting for frames asks the robot for them on ``camera/trigger``.

    ``users`` counts the goals reading it; the node destroys its subscriptions when none
    does (at once when the robot never published, else after SOURCE_LINGER_S).
    """

    def __init__(self, node: Node, hub: "ObservationHub", namespace: str, cameras,
                 max_age: float):
        self._node, self._hub = node, hub
        self._lock = threading.Condition()
        self._state: Optional[RobotState] = None
        self._states: OrderedDict = OrderedDict()  # stamp (ns) -> RobotState, oldest first
        self._images: dict = {c: OrderedDict() for c in cameras}  # camera -> stamp -> Image
        self._paired: set = set()  # cameras whose frames carry their state's stamp
        self._closed = False
        self._max_age_ns = int(max_age * 1e9)
        self.state_topic = _ns(namespace, ROBOT_STATE_TOPIC)
        topics = [(RobotState, self.state_topic, self._on_state, STATE_QOS)] + [
            (Image, topic, lambda msg, cam=cam: self._on_image(cam, msg),
             camera_sub_qos(node, topic))
            for cam, topic in ((c, _ns(namespace, camera_topic(c))) for c in cameras)]
        self._subs = hub.subscribe(topics)
        self._trigger = hub.advertise(Empty, _ns(namespace, CAMERA_TRIGGER_TOPIC), TRIGGER_QOS) \
            if cameras else None
        self.namespace = namespace
        self.users = 0
        self.idle_since = time.monotonic()

    @property
    def heard(self) -> bool:
        return self._state is not None

    def _on_state(self, msg):
        stamp = stamp_to_ns(msg.header.stamp)
        with self._lock:
            self._state = msg
            _keep(self._states, stamp, msg)
            self._paired.update(c for c, frames in self._images.items() if stamp in frames)
            self._lock.notify_all()

    def close(self) -> None:
        """Wake every waiter (no observation will come any more) and unsubscribe."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._hub.unsubscribe(self._subs + ([self._trigger] if self._trigger else []))
        self._subs, self._trigger = [], None

    def _on_image(self, cam, msg):
        stamp = stamp_to_ns(msg.header.stamp)
        with self._lock:
            _keep(self._images[cam], stamp, msg)
            if stamp in self._states:
                self._paired.add(cam)
            self._lock.notify_all()

    def _observed(self, after_ns: int, cameras):
        """(state, camera -> Image) of the newest state after ``after_ns`` with all its
        frames, or None."""
        for stamp in reversed(self._states):
            if stamp <= after_ns:
                return None
            frames = {}
            for cam in cameras:
                held = self._images[cam]
                frame = held.get(stamp) if cam in self._paired else \
                    next(reversed(held.values()), None)
                if frame is None:
                    break
                frames[cam] = frame
            else:
                return self._states[stamp], frames
        return None

    def _age_ns(self, state) -> int:
        return self._node.get_clock().now().nanoseconds - stamp_to_ns(state.header.stamp)

    def wait_newer(self, after_ns: int, cameras, state_names, timeout: float,
                   cancel: threading.Event) -> Optional[PolicyObservation]:
        """Block until a robot_state newer than ``after_ns`` and younger than the node's
        ``max_observation_age`` (and every camera) has arrived; None once ``cancel`` is set
        (a goal waiting on a silent robot must still end when its client cancels it)."""
        started = time.monotonic()
        deadline = started + timeout
        where = self.namespace or "the node's namespace"

        def ready():
            found = self._observed(after_ns, cameras)
            return found if found is not None and self._age_ns(found[0]) <= self._max_age_ns \
                else None

        asked = 0.0
        with self._lock:
            while (found := ready()) is None:
                if self._trigger is not None and time.monotonic() - asked >= TRIGGER_REPEAT_S:
                    self._trigger.publish(Empty())
                    asked = time.monotonic()
                if self._closed:
                    raise ObservationError("the model node is shutting down")
                if cancel.is_set():
                    return None
                now = time.monotonic()
                if self._state is None and now - started >= min(DISCOVERY_S, timeout) and \
                        self._node.count_publishers(self.state_topic) == 0:
                    raise ObservationError(
                        f"no robot publishes {self.state_topic}: is a robot node running in "
                        f"{where}? Name the robot's namespace as in ros2 node list, or leave "
                        "robot_namespace empty for the model node's own robot")
                left = deadline - now
                if left <= 0:
                    raise ObservationError(self._why_not_ready(after_ns, cameras, timeout, where))
                self._lock.wait(min(left, TRIGGER_REPEAT_S if self._trigger else 0.5))
        state, images = found
        return PolicyObservation(
            images={c: to_rgb(image_to_numpy(images[c]), images[c].encoding) for c in cameras},
            state=state_from_robot_state(state, state_names, self._hub.frames,
                                         max(min(DISCOVERY_S, deadline - time.monotonic()), 0.0)),
            state_names=list(state_names), stamp_ns=stamp_to_ns(state.header.stamp),
            robot=self.namespace)

    def _why_not_ready(self, after_ns, cameras, timeout, where) -> str:
        state = self._state
        if state is not None and stamp_to_ns(state.header.stamp) > after_ns and \
                self._age_ns(state) > self._max_age_ns:
            return (f"the newest robot_state from the robot in {where} is "
                    f"{self._age_ns(state) / 1e9:.1f} s old, older than max_observation_age "
                    f"({self._max_age_ns / 1e9:g} s), and no fresher one came within "
                    f"{timeout:g} s: the robot is disconnected or stalled, or its clock is "
                    "not this node's; check ros2 topic hz robot_state in its namespace")
        missing = [c for c in cameras if not self._images[c]]
        return (f"no fresh robot_state{' and camera images' if cameras else ''} from "
                f"the robot in {where} within {timeout:g} s"
                f"{' (no image yet from ' + ', '.join(missing) + ')' if missing else ''}; "
                "is the robot node running (ros2 topic hz robot_state)?")


def _keep(held: OrderedDict, stamp: int, msg) -> None:
    held[stamp] = msg
    while len(held) > PAIRING_DEPTH:
        held.popitem(last=False)


class ActionModelNode(Node):
    """``backend``: serve this PolicyBackend instead of the one the parameters select
    (to put your own model behind the standard node from Python)."""

    def __init__(self, backend: Optional[PolicyBackend] = None, **node_kwargs):
        super().__init__("action_model", **node_kwargs)
        self.settings = settings = params.declare_settings(self, ActionModelSettings)
        self.backend_name = settings.backend
        self.robot_namespace = settings.robot_namespace
        self.robot_wait = settings.robot_wait_timeout
        self.max_goals = settings.max_goals
        self.clip_actions = settings.clip_actions
        self.max_observation_age = settings.max_observation_age
        self._sessions = SessionTable(settings.max_sessions, settings.session_ttl)
        max_batch, batch_wait = settings.max_batch, settings.max_batch_wait_ms
        self._client_group = ReentrantCallbackGroup()
        self.backend: PolicyBackend = backend or self._make_backend()
        meta = self.backend.meta
        self.meta = meta
        self._model = InferenceWorker(meta.backend)
        self._batcher = Batcher(self.backend, self._model, max_batch, batch_wait / 1e3,
                                lambda: self._goals) \
            if self.backend.batching and max_batch > 1 else None
        self._latest: dict[str, LatestObservation] = {}
        self._latest_lock = threading.Lock()
        self._cancel: dict[bytes, threading.Event] = {}
        self._goals = 0
        self._goals_lock = threading.Lock()
        self._hub = ObservationHub(self)
        self._predicted: dict[str, Publisher] = {}
        self._predicted_lock = threading.Lock()
        self._value_pub = self.create_publisher(Float64, "~/predicted_value", 10) \
            if meta.predicts_value else None
        self._input_pubs = [(spec, self.create_publisher(Image, topic, IMAGE_QOS))
                            for spec, topic in _input_topics(self.backend.io)]

        group = ReentrantCallbackGroup()
        self._server = action_server(
            self, Predict, "~/predict", execute_callback=self._predict,
            goal_callback=lambda _g: GoalResponse.ACCEPT, cancel_callback=self._on_cancel,
            callback_group=group)
        service(self, GetModelMeta, "~/get_model_meta", self._get_meta, callback_group=group)
        service(self, ResetPolicy, "~/reset", self._reset, callback_group=group)
        self.create_timer(HOUSEKEEPING_S, self._housekeeping, callback_group=group)
        self.get_logger().info(
            f"{meta.backend} model ready: {meta.checkpoint} ({meta.checkpoint_id}), "
            f"{meta.chunk_size} x {meta.action_space.dim} in '{meta.action_space.name}', "
            f"cameras {list(meta.required_cameras)}"
            f"{f', batches of up to {max_batch}' if self._batcher else ''}")

    # --- backends ----------------------------------------------------------------------
    def _make_backend(self) -> PolicyBackend:
        # Every model's chunks must fit a control space the robot declares; the node takes
        # that space's definition (bounds, scales) from the robot itself.
        backend = params.declare_settings(self, BACKEND_SETTINGS[self.backend_name])
        info = self._call(GetRobotInfo, GET_ROBOT_INFO_SERVICE, self.robot_wait, "action model")
        space_name = self.settings.action_space or info.default_control_space
        for space in info.control_spaces:
            if space.name == space_name:
                return make_backend(self.backend_name, backend, ControlSpaceSpec.from_msg(space),
                                    info, {"simulator": self._find_in_simulator,
                                           "perception": self._find_by_perception})
        raise params.ParameterError(
            f"parameter 'action_space' = '{space_name}': the robot offers "
            f"{', '.join(s.name for s in info.control_spaces)}")

    def _call(self, srv_type, name: str, timeout: float, what: str, namespace=None,
              request=None, start_hint: str = "start the robot node first"):
        namespace = self.robot_namespace if namespace is None else namespace
        client = self.create_client(srv_type, _ns(namespace, name),
                                    callback_group=self._client_group)
        try:
            if not client.wait_for_service(timeout_sec=timeout):
                raise BackendError(f"{what}: service {client.srv_name} not available after "
                                   f"{timeout:g} s; {start_hint}")
            future = client.call_async(request or srv_type.Request())
            if self.executor is None:  # still constructing: nobody else spins this node yet
                rclpy.spin_until_future_complete(self, future, timeout_sec=timeout)
            else:
                done = threading.Event()
                future.add_done_callback(lambda _f: done.set())
                done.wait(timeout)
            if not future.done():
                raise BackendError(f"{what}: {client.srv_name} did not answer in {timeout:g} s")
            return future.result()
        finally:
            self.destroy_client(client)

    def _find_in_simulator(self, namespace: str, instruction: str) -> tuple:
        # Short wait: a robot without the service (privileged:=false, a real arm) is the
        # usual cause, and the predict budget must be left to say so.
        response = self._call(
            GetObjectPoses, OBJECT_POSES_SERVICE, 2.0,
            "the scripted model needs the simulator's object poses", namespace,
            start_hint="is the robot running with privileged:=false, or a real arm? then "
                       "set the model's objects parameter to perception")
        poses = {n: pose_from_msg(p.pose)[0] for n, p in zip(response.names, response.poses)}
        obj, target = objects_in_instruction(instruction, poses)
        return poses[obj], poses[target]

    def _find_by_perception(self, namespace: str, instruction: str) -> tuple:
        found = []
        for phrase in phrases_in_instruction(instruction):
            answer = self._call(Locate, PERCEPTION_LOCATE_SERVICE, LOCATE_TIMEOUT_S,
                                f"the scripted model locating '{phrase}'", namespace,
                                request=Locate.Request(query=phrase),
                                start_hint="start the robot's perception node (the bring-up's "
                                           "perception argument)")
            if not answer.success:
                raise BackendError(f"perception did not find '{phrase}': {answer.message}")
            found.append(max(located_from_response(answer), key=lambda o: o.score))
        obj, target = found
        return obj.position, placing_base(target.position, target.extent)

    # --- observations ---------------------------------------------------------------------
    def _acquire_source(self, namespace: str) -> LatestObservation:
        with self._latest_lock:
            source = self._latest.get(namespace)
            if source is None:
                source = self._latest[namespace] = LatestObservation(
                    self, self._hub, namespace, self.meta.required_cameras,
                    self.max_observation_age)
            source.users += 1
            return source

    def _release_source(self, source: LatestObservation) -> None:
        # A namespace no robot ever published in goes at once: goals naming a hundred
        # wrong namespaces must not leave a hundred subscriptions behind.
        with self._latest_lock:
            source.users -= 1
            source.idle_since = time.monotonic()
            if source.users > 0 or source.heard or \
                    self._latest.get(source.namespace) is not source:  # closed with the node
                return
            del self._latest[source.namespace]
        source.close()

    def _housekeeping(self) -> None:
        with self._latest_lock:
            cutoff = time.monotonic() - SOURCE_LINGER_S
            idle = [src for src in self._latest.values()
                    if src.users == 0 and src.idle_since < cutoff]
            for src in idle:
                del self._latest[src.namespace]
        for src in idle:
            src.close()
        self._forget(self._sessions.expired(), "unused for session_ttl")

    # --- sessions ------------------------------------------------------------------------
    @staticmethod
    def _session(goal, robot: str) -> str:
        # One shared session per robot for clients that give no id: a fresh one per goal
        # would pile up (a LeRobot session is a policy copy) and forget the policy's state
        # between a client's consecutive predicts anyway.
        return goal.client_id or f"default@/{robot.strip('/')}"

    def _forget(self, sessions, why: str) -> None:
        for session in sessions:
            try:
                self.backend.reset(session)
            except Exception as err:  # the session is gone from the table either way
                self.get_logger().warning(f"could not free policy session '{session}' "
                                          f"({why}): {err}")

    # --- predict -------------------------------------------------------------------------
    def _on_cancel(self, goal_handle) -> CancelResponse:
        event = self._cancel.get(bytes(goal_handle.goal_id.uuid))
        if event is not None:
            event.set()
            if self._batcher is not None:
                self._batcher.poke()
        return CancelResponse.ACCEPT

    def _infer(self, obs: PolicyObservation, instruction: str, session: str,
               timeout: float, cancel: threading.Event) -> Optional[tuple]:
        """(Prediction, inference ms, batch size); None when the goal was canceled
        meanwhile."""
        if self._batcher is not None:
            answer = self._batcher.infer(Request(obs, instruction, session), timeout, cancel)
            if answer is None:
                return None
            actions, ms, batch = answer
        else:
            def run():
                started = time.perf_counter()
                actions = self.backend.predict(obs, instruction, session)
                return actions, (time.perf_counter() - started) * 1e3

            (actions, ms), batch = self._model.call(run, timeout), 1
        prediction = check_foresight(Prediction.of(actions), self.meta)
        actions = check_chunk_shape(prediction.actions, self.meta)
        if self.clip_actions:
            space = self.meta.action_space
            # NaN stays NaN: np.clip keeps it, and the check below refuses it.
            clipped = np.clip(actions, space.lower, space.upper)
            over = np.nanmax(np.abs(clipped - actions)) if actions.size else 0.0
            if over > 0.05 * np.min(np.subtract(space.upper, space.lower)):
                self.get_logger().warning(
                    f"the backend's chunk left '{space.name}' by up to {over:.3g}: clipped "
                    "to its bounds (a policy far outside them may not fit this space)",
                    throttle_duration_sec=10.0)
            actions = clipped
        try:
            check_chunk(actions, self.meta.action_space.name, [self.meta.action_space],
                        max_horizon=max(len(actions), 1))
        except GoalRejected as err:
            raise BackendError(f"backend chunk is out of its own action space: {err}") from None
        prediction.actions = actions
        return prediction, ms, batch

    def _predict(self, goal_handle):
        with self._goals_lock:
            full = self._goals >= self.max_goals
            if not full:
                self._goals += 1
        if full:
            return self._fail(
                goal_handle, Predict.Result(),
                f"the model node is already serving {self.max_goals} predict goals (its "
                "max_goals parameter); cancel streams you no longer need or try again when "
                "one ends", [], None, [])
        try:
            return self._serve(goal_handle)
        finally:
            with self._goals_lock:
                self._goals -= 1

    def _serve(self, goal_handle):
        goal, result = goal_handle.request, Predict.Result()
        uid = bytes(goal_handle.goal_id.uuid)
        cancel = self._cancel.setdefault(uid, threading.Event())
        robot = goal.robot_namespace or self.robot_namespace
        timeout = goal.timeout or self.meta.default_timeout
        given = len(goal.observation.images) > 0 or len(goal.observation.state) > 0
        stream = goal.mode == Predict.Goal.MODE_STREAM
        inference, last_obs_ns, chunk_msg, batches = [], -1, None, []
        foresight, foreseen = None, []
        source, session = None, None
        try:
            if goal.mode not in (Predict.Goal.MODE_SINGLE, Predict.Goal.MODE_STREAM):
                raise ObservationError(f"unknown mode {goal.mode}; use MODE_SINGLE or MODE_STREAM")
            if stream and given:
                raise ObservationError("stream mode predicts from the robot's latest "
                                       "observations; leave the goal's observation empty")
            try:
                check_timeout(goal.timeout)
            except GoalRejected as err:
                raise ObservationError(str(err)) from None
            _check_namespace(robot)
            try:
                evicted = self._sessions.acquire(self._session(goal, robot))
            except SessionsFull as err:
                raise ObservationError(str(err)) from None
            session = self._session(goal, robot)
            self._forget(evicted, "least recently used beyond max_sessions")
            source = None if given else self._acquire_source(robot)
            while not cancel.is_set() and rclpy.ok():
                if given:
                    obs = from_msg(goal.observation)
                    obs.robot = robot
                else:
                    obs = source.wait_newer(last_obs_ns, self.meta.required_cameras,
                                            self.meta.state_names, timeout, cancel)
                    if obs is None:
                        break
                obs = check_observation(obs, self.meta)
                last_obs_ns = obs.stamp_ns
                answer = self._infer(obs, goal.instruction, session, timeout, cancel)
                if answer is None:
                    break
                foresight, ms, batch = answer
                inference.append(ms)
                batches.append(batch)
                chunk_msg = self._chunk_msg(foresight.actions, len(inference) - 1, obs.stamp_ns,
                                            ms)
                foreseen = self._publish_foresight(foresight, chunk_msg)
                if stream:
                    feedback = Predict.Feedback(chunk=chunk_msg, batch_size=batch)
                    self._fill_foresight(feedback, foresight, foreseen)
                    goal_handle.publish_feedback(feedback)
                self._show_inputs(obs)
                if not stream or (goal.max_chunks and len(inference) >= goal.max_chunks):
                    break
        except (ObservationError, BackendError) as err:
            return self._fail(goal_handle, result, str(err), inference, chunk_msg, batches)
        except Exception as err:  # a backend bug must not take the node down
            self.get_logger().error(f"predict failed: {err}\n{traceback.format_exc()}")
            return self._fail(goal_handle, result, f"backend error: {err}", inference, chunk_msg,
                              batches)
        finally:
            self._cancel.pop(uid, None)
            if source is not None:
                self._release_source(source)
            if session is not None:
                self._sessions.release(session)
        self._fill(result, inference, chunk_msg, batches)
        self._fill_foresight(result, foresight, foreseen)
        if cancel.is_set() and goal_handle.is_cancel_requested:
            result.message = f"canceled after {len(inference)} chunk(s)"
            goal_handle.canceled()
        else:
            result.message = f"{len(inference)} chunk(s)"
            goal_handle.succeed()
        return result

    def _chunk_msg(self, actions, sequence: int, obs_ns: int, ms: float):
        msg = array_to_chunk(actions, self.meta.action_space.name)
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id = self.meta.action_space.frame_id
        msg.sequence = sequence
        msg.observation_stamp.sec, msg.observation_stamp.nanosec = divmod(obs_ns, 1_000_000_000)
        msg.step_period = 1.0 / self.meta.control_rate
        msg.inference_ms = float(ms)
        return msg

    @staticmethod
    def _fill_foresight(msg, foresight: Optional[Prediction], foreseen: list) -> None:
        """Predict feedback or result: the chunk's foreseen images and value."""
        value = None if foresight is None else foresight.value
        msg.value = float("nan") if value is None else float(value)
        msg.predicted_cameras = [camera for camera, _ in foreseen]
        msg.predicted_images = [image for _, image in foreseen]

    def _publish_foresight(self, foresight: Prediction, chunk_msg) -> list:
        """Publish what the model foresaw with ``chunk_msg``; its images as (camera, Image),
        stamped with the time the chunk ends, when the foreseen observation is due."""
        end = stamp_to_ns(chunk_msg.observation_stamp) + \
            int(chunk_msg.horizon * chunk_msg.step_period * 1e9)
        foreseen = []
        for camera, rgb in foresight.future_images.items():
            image = numpy_to_image(rgb)
            image.header.stamp.sec, image.header.stamp.nanosec = divmod(end, 1_000_000_000)
            with self._predicted_lock:
                pub = self._predicted.get(camera)
                if pub is None:
                    pub = self._predicted[camera] = self.create_publisher(
                        Image, f"~/predicted/{camera}", IMAGE_QOS)
            pub.publish(image)
            foreseen.append((camera, image))
        if self._value_pub is not None and foresight.value is not None:
            self._value_pub.publish(Float64(data=float(foresight.value)))
        return foreseen

    def _show_inputs(self, obs: PolicyObservation) -> None:
        """The images the model was just fed from ``obs``, for whoever subscribes: after a
        stream's chunk has left, so a viewer never delays the robot (a single predict's
        answer waits for them while someone watches)."""
        for spec, pub in self._input_pubs:
            if pub.get_subscription_count() == 0:
                continue
            image = numpy_to_image(spec.prepare(obs.images[spec.camera]))
            image.header.stamp.sec, image.header.stamp.nanosec = divmod(obs.stamp_ns,
                                                                        1_000_000_000)
            pub.publish(image)

    @staticmethod
    def _fill(result, inference, chunk_msg, batches):
        result.chunks = len(inference)
        result.value = float("nan")  # no value unless a world-action model gave one
        result.max_batch_size = max(batches, default=0)
        if chunk_msg is not None:
            result.last_chunk = chunk_msg
        if inference:
            result.mean_inference_ms = float(np.mean(inference))
            result.max_inference_ms = float(np.max(inference))

    def _fail(self, goal_handle, result, message, inference, chunk_msg, batches):
        self.get_logger().warning(f"predict failed: {message}")
        self._fill(result, inference, chunk_msg, batches)
        result.message = message
        goal_handle.abort()
        return result

    # --- services ------------------------------------------------------------------------
    def _get_meta(self, _request, response):
        m = self.meta
        response.backend, response.checkpoint, response.checkpoint_id = (
            m.backend, m.checkpoint, m.checkpoint_id)
        response.action_space = m.action_space.to_msg()
        response.chunk_size = int(m.chunk_size)
        response.required_cameras = list(m.required_cameras)
        response.state_names = list(m.state_names)
        response.image_height, response.image_width = int(m.image_height), int(m.image_width)
        response.control_rate = float(m.control_rate)
        response.default_timeout = float(m.default_timeout)
        response.max_batch = self._batcher.max_batch if self._batcher else 1
        response.predicts_future, response.predicts_value = m.predicts_future, m.predicts_value
        return response

    def _reset(self, request, response):
        held = self._sessions.drop(request.client_id or None)
        try:
            self.backend.reset(request.client_id or None)
        except Exception as err:
            response.success, response.message = False, f"reset failed: {err}"
            return response
        response.success = True
        response.message = (f"cleared the policy state of '{request.client_id}'"
                            if request.client_id else
                            f"cleared every client's policy state ({held} session(s))")
        return response

    def close(self):
        # Running predict goals end now, not when their robot's next observation or their
        # timeout comes (the robot may be going down with us).
        for cancel in list(self._cancel.values()):
            cancel.set()
        with self._latest_lock:
            sources, self._latest = list(self._latest.values()), {}
        for source in sources:
            source.close()
        self._hub.close()
        if self._batcher is not None:
            self._batcher.close()
        self._model.close()
        self.backend.close()


def _input_topics(io) -> list:
    """(ImageInput, topic) of each image a ModelIO feeds: ``~/policy_input/<camera>``, the
    camera's name numbered where a model takes one camera twice."""
    topics, seen = [], {}
    for spec in (io.images if io is not None else ()):
        seen[spec.camera] = seen.get(spec.camera, 0) + 1
        suffix = f"_{seen[spec.camera]}" if seen[spec.camera] > 1 else ""
        topics.append((spec, f"~/policy_input/{spec.camera}{suffix}"))
    return topics


def _check_namespace(namespace: str) -> None:
    try:
        validate_namespace("/" + namespace.strip("/"))
    except InvalidNamespaceException as err:
        raise ObservationError(
            f"robot_namespace '{namespace}' is not a ROS namespace "
            f"({str(err).splitlines()[0].rstrip(':')}); give the "
            "robot's namespace as in ros2 node list, or leave it empty") from None


def main(args=None, backend: Optional[PolicyBackend] = None):
    raise SystemExit(run_node(lambda: ActionModelNode(backend), name="action_model", args=args,
                              num_threads=MAX_GOALS + RESERVE_THREADS,
                              close=ActionModelNode.close,
                              startup_errors=(ValueError, BackendError)))


if __name__ == "__main__":
    main()
