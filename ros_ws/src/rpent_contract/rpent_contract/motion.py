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

    Every request takes a ticket; a motion that was waiting while a newer request (goal
    or stop) arrived does not start at all, so the robot always ends up doing the latest
    thing it was asked.
    """

    def __init__(self):
        self._run = threading.Lock()
        self._guard = threading.Lock()
        self._ticket = 0
        self._active: Optional[Motion] = None

    def begin(self, motion: Motion, label: str) -> bool:
        with self._guard:
            self._ticket += 1
            ticket = self._ticket
            if self._active is not None:
                if self._active.continuous and motion.continuous:
                    self._active.hand_over(f"preempted by a new {label} request, which "
                                           "continues the motion")
                else:
                    self._active.stop(f"preempted by a new {label} request")
        self._run.acquire()
        with self._guard:
            if ticket != self._ticket:
                self._run.release()
                motion.stop("superseded by a newer request before it started")
                return False
            self._active = motion
        return True

    def end(self, motion: Motion) -> None:
        with self._guard:
            if self._active is motion:
                self._active = None
        self._run.release()

    def interrupt(self, reason: str) -> None:
        """Stop the running motion and cancel any that are waiting to start."""
        with self._guard:
            self._ticket += 1
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
