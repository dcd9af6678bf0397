"""One motion at a time: a new goal or a stop request preempts the running one."""
from __future__ import annotations

import threading
from typing import Optional

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
