"""The policy backend interface: observation in, action chunk out. No ROS here.

A backend is one model behind ``predict``: a LeRobot checkpoint, a remote policy server,
or a model-free expert. The node turns ROS observations into :class:`PolicyObservation`,
calls :meth:`PolicyBackend.predict` and checks the chunk against :class:`ModelMeta`
before it leaves the node.
"""
from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import Counter, OrderedDict
from concurrent.futures import CancelledError, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from rpent_contract.control_space import ControlSpaceSpec


class BackendError(RuntimeError):
    """The model failed or answered something unusable; the message says what to do."""


def actions_array(value, action_dim: int, what: str) -> np.ndarray:
    """Check a chunk a model answered: a finite (horizon >= 1, action_dim) array."""
    try:
        actions = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise BackendError(f"{what} answered actions that are not a numeric array") from None
    if actions.ndim != 2 or actions.shape[0] < 1 or actions.shape[1] != action_dim:
        raise BackendError(
            f"{what} answered actions of shape {actions.shape}; expected (horizon, {action_dim}) "
            f"with horizon >= 1: check that the server runs the model this client expects")
    if not np.all(np.isfinite(actions)):
        raise BackendError(f"{what} answered non-finite actions (NaN or inf): check the model")
    return actions


@dataclass
class PolicyObservation:
    """What a policy is conditioned on, in contract terms."""

    images: dict  # contract camera name -> HxWx3 uint8 RGB, upright
    state: np.ndarray  # float64, ordered as ``state_names``
    state_names: Sequence[str]
    stamp_ns: int = 0  # acquisition time (ROS clock) of the state
    robot: str = ""  # namespace of the robot it was observed on (one model, several robots)

    def value(self, name: str) -> float:
        try:
            return float(self.state[list(self.state_names).index(name)])
        except ValueError:
            raise BackendError(
                f"observation has no state entry '{name}' (has: {', '.join(self.state_names)})"
            ) from None


@dataclass
class ModelMeta:
    backend: str
    checkpoint: str
    checkpoint_id: str
    action_space: ControlSpaceSpec
    chunk_size: int
    required_cameras: Sequence[str] = ()
    state_names: Sequence[str] = ()
    image_height: int = 0  # 0: any size
    image_width: int = 0
    control_rate: float = 20.0
    default_timeout: float = 30.0
    extra: dict = field(default_factory=dict)
    predicts_future: bool = False  # a world-action model: predict foresees the observation
    predicts_value: bool = False


@dataclass
class Prediction:
    """A chunk with what a world-action model foresaw along with it: ``future_images``,
    the observation it expects once the chunk has run (contract camera name -> HxWx3 uint8
    RGB, upright), and ``value``, its estimate of how well the task is going. A backend's
    ``predict`` returns one of these, or the chunk alone."""

    actions: np.ndarray
    future_images: dict = field(default_factory=dict)
    value: Optional[float] = None

    @staticmethod
    def of(answer) -> "Prediction":
        return answer if isinstance(answer, Prediction) else Prediction(answer)


@dataclass
class Request:
    """One goal's inference: what :meth:`PolicyBackend.predict` takes, as one value."""

    observation: PolicyObservation
    instruction: str
    session: str


class PolicyBackend(ABC):
    """One model. ``session`` isolates the state of stateful policies between clients.

    A backend that sets ``batching`` runs the inferences of several goals as one call of
    :meth:`predict_batch`; the node then gathers concurrent goals into batches. A backend
    whose inputs a :class:`~rpent_am.model_io.ModelIO` prepares sets ``io`` to it: the node
    then shows viewers its images as the model receives them.
    """

    batching = False
    io = None

    @property
    @abstractmethod
    def meta(self) -> ModelMeta: ...

    @abstractmethod
    def predict(self, observation: PolicyObservation, instruction: str,
                session: str) -> np.ndarray:
        """Return a (horizon, action_dim) chunk in ``meta.action_space`` (or, from a model
        that foresees, a :class:`Prediction` holding it)."""

    def predict_batch(self, requests: Sequence[Request]) -> list:
        """One answer per request, in order: its chunk, or the :class:`BackendError` that
        fails that request alone. This default runs them one by one, for backends whose
        batch is a loop; a model override runs them as one forward pass."""
        answers = []
        for r in requests:
            try:
                answers.append(self.predict(r.observation, r.instruction, r.session))
            except BackendError as err:
                answers.append(err)
        return answers

    def reset(self, session: Optional[str] = None) -> None:
        """Forget the state of one session (None: every session). Stateless: nothing to do."""

    def close(self) -> None:
        """Release the model / connection."""


class SessionsFull(RuntimeError):
    """Every session the node may hold is in use by a running goal."""


class SessionTable:
    """The policy sessions a node holds, so that it can free them: at most ``capacity``
    (beyond it the least recently used idle session goes), none idle longer than ``ttl`` s.

    A backend keeps per-session state (a LeRobot policy copy, a scripted plan) until told to
    forget it; the table decides when, and the caller tells the backend. Sessions used by a
    running goal are never evicted: a stream's policy state must not vanish mid-episode.
    """

    def __init__(self, capacity: int, ttl: float, clock: Callable[[], float] = time.monotonic):
        self.capacity, self.ttl, self._clock = capacity, ttl, clock
        self._lock = threading.Lock()
        self._last_use: OrderedDict = OrderedDict()  # session -> time of last use, oldest first
        self._users: Counter = Counter()

    def __len__(self) -> int:
        with self._lock:
            return len(self._last_use)

    def acquire(self, session: str) -> list:
        """Mark ``session`` in use; return the sessions to free to make room for it."""
        with self._lock:
            evicted = []
            if session not in self._last_use:
                idle = [s for s in self._last_use if not self._users[s]]
                excess = len(self._last_use) + 1 - self.capacity
                if excess > len(idle):
                    raise SessionsFull(
                        f"all {self.capacity} policy sessions are in use by running goals; "
                        "wait for one to end, or raise the node's max_sessions parameter")
                for s in idle[:max(0, excess)]:
                    evicted.append(s)
                    del self._last_use[s]
            self._last_use[session] = self._clock()
            self._last_use.move_to_end(session)
            self._users[session] += 1
            return evicted

    def release(self, session: str) -> None:
        # Recorded again even when a reset dropped it meanwhile: the goal may have
        # predicted after the reset, and whatever it left must be freed some day.
        with self._lock:
            self._users[session] -= 1
            if self._users[session] <= 0:
                del self._users[session]
            self._last_use[session] = self._clock()
            self._last_use.move_to_end(session)

    def expired(self) -> list:
        """Remove and return the idle sessions not used for ``ttl`` s."""
        with self._lock:
            cutoff = self._clock() - self.ttl
            gone = [s for s, t in self._last_use.items() if t < cutoff and not self._users[s]]
            for s in gone:
                del self._last_use[s]
            return gone

    def drop(self, session: Optional[str] = None) -> int:
        """Forget ``session`` (None: every session); return how many were held."""
        with self._lock:
            if session is None:
                count = len(self._last_use)
                self._last_use.clear()
                return count
            return 1 if self._last_use.pop(session, None) is not None else 0


class InferenceWorker:
    """Runs backend calls one at a time, each bounded by its caller's timeout.

    Python cannot stop a thread, so a call that overruns its timeout keeps running; it must
    not hold up the next goal, though. Its thread is left to finish alone and later calls
    go to a fresh one. At most ``max_stuck`` such threads may linger: beyond that the model
    is taken to be hung and calls are refused until one of them returns.
    """

    def __init__(self, what: str, max_stuck: int = 2):
        self._what, self._max_stuck = what, max_stuck
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
        self._stuck: list = []  # futures of calls that overran their timeout, still running

    def call(self, fn: Callable, timeout: float):
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                self._stuck = [f for f in self._stuck if not f.done()]
                if len(self._stuck) >= self._max_stuck:
                    raise BackendError(
                        f"the {self._what} backend has {len(self._stuck)} inference calls that "
                        "overran their timeout and are still running: the model looks hung; "
                        "check the model (or its server) and restart the action-model node")
                pool = self._pool
                future = pool.submit(fn)
            try:
                return future.result(timeout=max(0.0, deadline - time.monotonic()))
            except CancelledError:
                continue  # it was queued behind a call that got stuck: on to the fresh thread
            except FutureTimeout:
                if future.cancel():
                    raise BackendError(
                        f"the {self._what} backend did not answer within {timeout:g} s: the "
                        "call waited that long behind other goals' inference; raise the "
                        "goal's timeout or run fewer goals at once") from None
                with self._lock:
                    self._stuck.append(future)
                    if self._pool is pool:
                        pool.shutdown(wait=False, cancel_futures=True)
                        self._pool = ThreadPoolExecutor(max_workers=1,
                                                        thread_name_prefix="model")
                raise BackendError(
                    f"the {self._what} backend did not answer within {timeout:g} s; raise the "
                    "goal's timeout or check the model server") from None

    def close(self) -> None:
        with self._lock:
            self._pool.shutdown(wait=False, cancel_futures=True)


DEADLINE_GRACE_S = 0.25
RECENT_S = 1.0


@dataclass(eq=False)
class _Pending:
    request: Request
    queued: float
    deadline: float
    answer: object = None  # (chunk, ms, batch size) or BackendError, once its batch ran


class Batcher:
    """Gathers the inferences of concurrent goals into batches, for a backend that runs a
    batch as one call (``PolicyBackend.batching``).

    A batch leaves when it holds ``max_batch`` requests, when every client it can expect
    waits in it, or ``max_wait`` s after its first request came. It expects the goals the
    node serves (``running()``) and the sessions that asked within the last
    ``RECENT_S`` (a closed-loop client is between two goals for a moment), so a lone client
    waits for nothing. While one batch runs the next gathers, so under load batches fill
    with no wait at all. Each answer goes to its own goal; a goal canceled while its request
    waits leaves the queue, and one canceled while its batch runs does not wait for it (the
    others' chunks are not disturbed).
    """

    def __init__(self, backend: PolicyBackend, worker: InferenceWorker, max_batch: int,
                 max_wait: float, running: Callable[[], int]):
        self._backend, self._worker = backend, worker
        self.max_batch, self._max_wait, self._running = max_batch, max_wait, running
        self._cond = threading.Condition()
        self._queue: list = []
        self._recent: dict = {}  # session -> when its last request left in a batch
        self._expected = 0
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="batcher", daemon=True)
        self._thread.start()

    def infer(self, request: Request, timeout: float,
              cancel: threading.Event) -> Optional[tuple]:
        """(chunk, inference ms, batch size) for ``request``; None once ``cancel`` is set
        (call :meth:`poke` after setting it)."""
        now = time.monotonic()
        pending = _Pending(request, now, now + timeout)
        with self._cond:
            if self._closed:
                raise BackendError("the model node is shutting down")
            self._queue.append(pending)
            self._cond.notify_all()
            self._cond.wait_for(lambda: pending.answer is not None or cancel.is_set()
                                or self._closed, timeout)
            if pending in self._queue:
                self._queue.remove(pending)
            answer = pending.answer
        if isinstance(answer, BackendError):
            raise answer
        if answer is not None or cancel.is_set():
            return answer
        if self._closed:
            raise BackendError("the model node is shutting down")
        raise BackendError(
            f"the {self._backend.meta.backend} backend did not answer within {timeout:g} s "
            "(its batch included); raise the goal's timeout, lower the node's max_batch, or "
            "check the model")

    def poke(self) -> None:
        """Wake waiting goals to look at their cancel events."""
        with self._cond:
            self._cond.notify_all()

    def _ready(self) -> bool:
        return self._closed or not self._queue or \
            len(self._queue) >= min(self.max_batch, max(1, self._running(), self._expected))

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._closed)
                if self._closed:
                    return
                now = time.monotonic()
                self._recent = {s: t for s, t in self._recent.items() if t > now - RECENT_S}
                self._expected = len(self._recent.keys() | {p.request.session
                                                            for p in self._queue})
                until = self._queue[0].queued + self._max_wait
                self._cond.wait_for(self._ready, max(0.0, until - now))
                batch = self._queue[:self.max_batch]
                del self._queue[:len(batch)]
                now = time.monotonic()
                self._recent.update((p.request.session, now) for p in batch)
            if batch:
                self._run(batch)

    def _run(self, batch: list) -> None:
        def run():
            started = time.perf_counter()
            answers = self._backend.predict_batch([p.request for p in batch])
            return answers, (time.perf_counter() - started) * 1e3

        # A little past the last deadline: each goal's own wait ends first, with its own
        # timeout in the message.
        budget = max(p.deadline for p in batch) - time.monotonic() + DEADLINE_GRACE_S
        try:
            answers, ms = self._worker.call(run, max(budget, DEADLINE_GRACE_S))
            if len(answers) != len(batch):
                raise BackendError(f"the backend answered {len(answers)} of the "
                                   f"{len(batch)} requests of a batch: a backend bug")
        except BackendError as err:
            answers, ms = [err] * len(batch), 0.0
        except Exception as err:  # a backend bug fails its batch, never the node
            answers, ms = [BackendError(f"backend error: {type(err).__name__}: {err}")] * \
                len(batch), 0.0
        with self._cond:
            for pending, answer in zip(batch, answers):
                pending.answer = answer if isinstance(answer, BackendError) else \
                    (answer, ms, len(batch))
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(2.0)
