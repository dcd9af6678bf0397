"""Requests for the operator: a verdict on the task, or putting the scene back.

Plain Python, no rclpy: the robot node (which owns ``task_status``) serves the requests as
actions and the answers as a service, and keeps the pending list here. A request waits
until it is answered, withdrawn (its goal canceled) or timed out; waiting happens in the
thread that asked, so the answering side never blocks.
"""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Optional

VERDICT = "verdict"
SCENE_RESET = "scene_reset"


@dataclass
class Answer:
    success: bool  # verdict: the task is achieved; scene reset: the scene is put back
    comment: str = ""
    answered_by: str = "operator"


@dataclass
class Request:
    kind: str
    text: str
    episode_id: str
    asked_at: float  # wall-clock s
    deadline: float  # wall-clock s
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    answer: Optional[Answer] = None
    _answered: threading.Event = field(default_factory=threading.Event, repr=False)


class OperatorDesk:
    """Pending requests, oldest first; ``on_change(pending)`` runs after every change, under
    the desk's lock, so the lists it is given arrive in the order the changes happened
    (the last one published is the current one). It must not call back into the desk."""

    def __init__(self, on_change: Callable[[list], None] = lambda pending: None,
                 clock: Callable[[], float] = time.time):
        self._pending: list[Request] = []
        self._lock = threading.Lock()
        self._on_change, self._clock = on_change, clock

    def pending(self) -> list:
        with self._lock:
            return list(self._pending)

    def ask(self, kind: str, text: str, episode_id: str, timeout: float) -> Request:
        """Post a request; one of each kind may wait at a time (an agent asks, then waits)."""
        now = self._clock()
        with self._lock:
            waiting = [r for r in self._pending if r.kind == kind]
            if waiting:
                raise ValueError(f"a {kind.replace('_', ' ')} request ({waiting[0].request_id}) "
                                 "is already waiting for the operator; wait for its answer or "
                                 "cancel it first")
            request = Request(kind, text, episode_id, now, now + timeout)
            self._pending.append(request)
            self._on_change(list(self._pending))
        return request

    def answer(self, request_id: str, answer: Answer) -> Request:
        """Answer a pending request (``request_id`` empty: the only one pending)."""
        with self._lock:
            if request_id:
                found = [r for r in self._pending if r.request_id == request_id]
                if not found:
                    ids = ", ".join(r.request_id for r in self._pending) or "none"
                    raise ValueError(f"no pending request '{request_id}' (pending: {ids}); it "
                                     "may have been answered, canceled or timed out")
            else:
                found = list(self._pending)
                if len(found) != 1:
                    raise ValueError(
                        "no request is waiting for the operator" if not found else
                        f"{len(found)} requests are waiting "
                        f"({', '.join(r.request_id for r in found)}); name the one to answer")
            request = found[0]
            self._pending.remove(request)
            request.answer = answer
            request._answered.set()
            self._on_change(list(self._pending))
        return request

    def wait(self, request: Request, interrupted: Callable[[], bool],
             tick: Callable[[float], None] = lambda waited: None,
             poll: float = 0.1) -> Optional[Answer]:
        """Block until ``request`` is answered; None when it timed out or ``interrupted()``.

        ``tick(waited_s)`` runs about once a second while waiting (progress feedback).
        """
        next_tick = 0.0
        try:
            while not request._answered.wait(poll):
                now = self._clock()
                if now >= request.deadline or interrupted():
                    # An answer that came in meanwhile still counts.
                    return None if self._withdraw(request) else request.answer
                if now >= next_tick:
                    tick(now - request.asked_at)
                    next_tick = now + 1.0
            return request.answer
        finally:
            self._withdraw(request)

    def _withdraw(self, request: Request) -> bool:
        """Take ``request`` off the list; False when it was no longer pending (answered)."""
        with self._lock:
            if request not in self._pending:
                return False
            self._pending.remove(request)
            self._on_change(list(self._pending))
        return True
