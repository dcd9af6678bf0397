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


class PolicyBackend(ABC):
    """One model. ``session`` isolates the state of stateful policies between clients."""

    @property
    @abstractmethod
    def meta(self) -> ModelMeta: ...

    @abstractmethod
    def predict(self, observation: PolicyObservation, instruction: str,
                session: str) -> np.ndarray:
        """Return a (horizon, action_dim) chunk in ``meta.action_space``."""

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
