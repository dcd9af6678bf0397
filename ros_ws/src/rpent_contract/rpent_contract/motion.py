"""One motion at a time: a new goal or a stop request preempts the running one, and a
burst of stops costs one hold of the robot."""
from __future__ import annotations

import threading
import traceback
from typing import Callable, Optional

from .driver import Motion


class MotionArbiter:
    """Serialises motions. ``begin`` stops the running motion and waits for it to end;
    a chunk that follows a chunk takes over from it instead (``Motion.hand_over``), so a
    stream of chunks moves the arm without stopping at their boundaries.

    Every request takes a ticket when it arrives (``arrive``), in the order requests come; a
    motion whose request is older than another one still live (waiting to start or
    running), than one that has begun, or than the last stop, does not start at all. The
    robot so ends up doing the latest thing it was asked, however late a request's own
    execution is scheduled: an action goal accepted before a reset but executed after it
    does not take over from the reset.
    """

    def __init__(self):
        self._run = threading.Lock()
        self._guard = threading.Lock()
        self._ticket = 0  # the last one given
        self._stopped_up_to = 0  # a stop voided every ticket up to this one
        self._newest_begun = 0
        self._live: set[int] = set()  # tickets whose requests wait to begin, or run
        self._active: Optional[Motion] = None
        self._active_ticket = 0

    def arrive(self) -> int:
        """A ticket for a request that has just arrived."""
        with self._guard:
            self._ticket += 1
            self._live.add(self._ticket)
            return self._ticket

    def withdraw(self, ticket: int) -> None:
        """The request will not begin, or has ended: it no longer outranks older ones."""
        with self._guard:
            self._live.discard(ticket)

    def begin(self, motion: Motion, label: str, ticket: Optional[int] = None) -> bool:
        """Make ``motion`` the running one, for the request of ``ticket`` (one taken now if
        None); False, with the motion stopped, when a newer request outranks it."""
        if ticket is None:
            ticket = self.arrive()
        with self._guard:
            if self._outranked(ticket):
                return self._give_up(motion, ticket)
            if self._active is not None:
                if self._active.continuous and motion.continuous:
                    self._active.hand_over(f"preempted by a new {label} request, which "
                                           "continues the motion")
                else:
                    self._active.stop(f"preempted by a new {label} request")
        self._run.acquire()
        with self._guard:
            if self._outranked(ticket):
                self._run.release()
                return self._give_up(motion, ticket)
            self._active, self._active_ticket = motion, ticket
            self._newest_begun = max(self._newest_begun, ticket)
        return True

    def _outranked(self, ticket: int) -> bool:
        return (ticket <= self._stopped_up_to or ticket < self._newest_begun
                or any(t > ticket for t in self._live))

    def _give_up(self, motion: Motion, ticket: int) -> bool:
        self._live.discard(ticket)
        motion.stop("superseded by a newer request before it started")
        return False

    def end(self, motion: Motion) -> None:
        with self._guard:
            if self._active is motion:
                self._active = None
                self._live.discard(self._active_ticket)
        self._run.release()

    def interrupt(self, reason: str) -> None:
        """Stop the running motion and cancel every request that has arrived so far."""
        with self._guard:
            self._stopped_up_to = self._ticket
            if self._active is not None:
                self._active.stop(reason)

    @property
    def busy(self) -> bool:
        return self._active is not None


class Holder:
    """Runs the driver's ``hold`` on a thread of its own, once for all the stops that arrive
    while it runs: a stop is answered as soon as the motion is interrupted, not after the arm
    has come to rest (a Franka's stop motion, a simulator's step), and a burst of stops costs
    one or two holds, not one each."""

    def __init__(self, hold: Callable[[], None], log):
        self._hold, self._log = hold, log
        self._changed = threading.Condition()
        self._requested = self._done = 0  # holds asked for / carried out, counted
        self._failure = ""  # why the last hold carried out failed, if it did
        self._closed = False
        threading.Thread(target=self._run, name="holder", daemon=True).start()

    def request(self) -> str:
        """Ask for a hold; return why the last one failed ('' if it did not)."""
        with self._changed:
            self._requested += 1
            self._changed.notify_all()
            return self._failure

    def wait(self, timeout: float) -> bool:
        """Whether every hold asked for so far was carried out within ``timeout`` s."""
        with self._changed:
            asked = self._requested
            return self._changed.wait_for(lambda: self._done >= asked or self._closed,
                                          timeout)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._requested > self._done or self._closed)
                if self._closed:
                    return
                asked = self._requested
            try:
                self._hold()
                failure = ""
            except Exception as err:  # reported to the next stop, and in the log now
                failure = f"{type(err).__name__}: {err}"
                self._log.error(f"hold failed: {failure}\n{traceback.format_exc()}")
            with self._changed:
                self._done, self._failure = asked, failure
                self._changed.notify_all()
