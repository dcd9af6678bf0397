"""One motion at a time (rpent_contract.motion.MotionArbiter), exercised with threads.

Every wait is bounded: a deadlock in the arbiter fails a test instead of hanging it.
"""

import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rpent_contract.driver import Motion  # noqa: E402
from rpent_contract.motion import MotionArbiter  # noqa: E402

TIMEOUT = 5.0  # generous upper bound on anything that should happen "now"
SETTLE = 0.15  # how long to watch for something that must NOT happen

pytestmark = pytest.mark.timeout(30)


class RecordingMotion(Motion):
    """A Motion that remembers every stop request, not just the first."""

    def __init__(self):
        super().__init__()
        self.stop_calls = []
        self._calls_lock = threading.Lock()

    def stop(self, reason: str) -> None:
        with self._calls_lock:
            self.stop_calls.append(reason)
        super().stop(reason)


class Begin:
    """Call arbiter.begin(motion, label) on a daemon thread."""

    def __init__(self, arbiter, motion, label="goal"):
        self.motion = motion
        self.result = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(arbiter, label), daemon=True)
        self.thread.start()

    def _run(self, arbiter, label):
        self.result = arbiter.begin(self.motion, label)
        self.done.set()

    def finished(self, timeout=TIMEOUT) -> bool:
        ok = self.done.wait(timeout)
        if ok:
            self.thread.join(TIMEOUT)
        return ok


def wait_until(predicate, timeout=TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


def start_active(arbiter, label="goal"):
    motion = RecordingMotion()
    b = Begin(arbiter, motion, label)
    assert b.finished(), "begin on an idle arbiter blocked"
    assert b.result is True
    return motion


# ---------------------------------------------------------------- basics


def test_begin_on_idle_arbiter_succeeds_and_end_frees_it():
    arbiter = MotionArbiter()
    assert not arbiter.busy
    motion = start_active(arbiter)
    assert arbiter.busy
    assert not motion.stopped
    arbiter.end(motion)
    assert not arbiter.busy


def test_new_begin_after_end_succeeds():
    arbiter = MotionArbiter()
    for _ in range(3):
        motion = start_active(arbiter)
        assert not motion.stopped
        arbiter.end(motion)
    assert not arbiter.busy


# ---------------------------------------------------------------- preemption


def test_second_begin_preempts_first_and_waits_for_its_end():
    arbiter = MotionArbiter()
    first = start_active(arbiter)

    second = Begin(arbiter, RecordingMotion(), "reset")
    assert wait_until(lambda: first.stopped), "the running motion was not asked to stop"
    assert "preempted" in first.reason and "reset" in first.reason

    # The newer motion must not start while the old one is still running.
    assert not second.done.wait(SETTLE), "second motion started before the first ended"
    assert arbiter.busy

    arbiter.end(first)
    assert second.finished(), "second motion never started after the first ended"
    assert second.result is True
    assert not second.motion.stopped
    assert arbiter.busy

    arbiter.end(second.motion)
    assert not arbiter.busy


def test_preempted_motion_gets_only_one_effective_reason():
    arbiter = MotionArbiter()
    first = start_active(arbiter)
    second = Begin(arbiter, RecordingMotion())
    assert wait_until(lambda: first.stopped)
    reason = first.reason
    arbiter.interrupt("stopped by the stop service")
    assert first.reason == reason  # the first reason sticks
    arbiter.end(first)
    assert second.finished()
    assert second.result is False


# ---------------------------------------------------------------- interrupt


def test_interrupt_stops_active_motion():
    arbiter = MotionArbiter()
    motion = start_active(arbiter)
    arbiter.interrupt("stopped by the stop service")
    assert motion.stopped
    assert motion.reason == "stopped by the stop service"
    # Still running until the executor finishes it.
    assert arbiter.busy
    arbiter.end(motion)
    assert not arbiter.busy
    after = start_active(arbiter)
    assert not after.stopped
    arbiter.end(after)


def test_interrupt_when_idle_does_not_block_the_next_begin():
    arbiter = MotionArbiter()
    arbiter.interrupt("nothing running")
    motion = start_active(arbiter)
    assert not motion.stopped
    arbiter.end(motion)


def test_interrupt_cancels_motion_waiting_to_start():
    arbiter = MotionArbiter()
    first = start_active(arbiter)
    waiting = Begin(arbiter, RecordingMotion())
    # ``first`` is stopped once the waiting request has taken its ticket.
    assert wait_until(lambda: first.stopped)
    assert not waiting.done.wait(SETTLE)

    arbiter.interrupt("stopped by the stop service")
    arbiter.end(first)

    assert waiting.finished(), "the superseded begin never returned"
    assert waiting.result is False
    assert waiting.motion.stopped
    assert "superseded" in waiting.motion.reason
    assert not arbiter.busy

    # The arbiter is usable again: the superseded begin released the run lock.
    after = start_active(arbiter)
    assert not after.stopped
    arbiter.end(after)
    assert not arbiter.busy


def test_only_the_latest_of_two_waiting_goals_runs():
    arbiter = MotionArbiter()
    first = start_active(arbiter)
    older = Begin(arbiter, RecordingMotion())
    assert wait_until(lambda: len(first.stop_calls) == 1)
    newer = Begin(arbiter, RecordingMotion())
    assert wait_until(lambda: len(first.stop_calls) == 2), "newer request did not take a ticket"
    assert not older.done.wait(SETTLE) and not newer.done.is_set()

    arbiter.end(first)
    # Either thread may get the run lock first; the newer one must end up running, and the
    # older one must give up (possibly only once the newer one has ended).
    assert newer.finished(), "the latest goal never started"
    assert newer.result is True
    assert not newer.motion.stopped
    assert arbiter.busy

    arbiter.end(newer.motion)
    assert older.finished(), "the superseded goal never returned"
    assert older.result is False
    assert "superseded" in older.motion.reason
    assert not arbiter.busy


# ---------------------------------------------------------------- arrival order


class BeginTicket(Begin):
    """arbiter.begin for a request that arrived earlier, with its ticket."""

    def __init__(self, arbiter, motion, ticket, label="goal"):
        self.ticket = ticket
        super().__init__(arbiter, motion, label)

    def _run(self, arbiter, label):
        self.result = arbiter.begin(self.motion, label, self.ticket)
        self.done.set()


def test_a_request_whose_execution_comes_late_does_not_take_over_from_a_newer_one():
    """A chunk goal accepted, then a reset asked: the reset runs, whenever the goal's own
    execution gets scheduled."""
    arbiter = MotionArbiter()
    chunk = arbiter.arrive()
    reset = start_active(arbiter, "reset")
    late = BeginTicket(arbiter, RecordingMotion(), chunk)
    assert late.finished() and late.result is False
    assert "superseded" in late.motion.reason
    assert not reset.stopped, reset.stop_calls
    arbiter.end(reset)
    assert not arbiter.busy


def test_a_late_request_waiting_behind_a_newer_one_never_runs_after_it():
    arbiter = MotionArbiter()
    first = start_active(arbiter)
    older = arbiter.arrive()
    newer = Begin(arbiter, RecordingMotion())
    assert wait_until(lambda: first.stopped)
    arbiter.end(first)
    assert newer.finished() and newer.result is True
    late = BeginTicket(arbiter, RecordingMotion(), older)
    assert late.finished() and late.result is False
    arbiter.end(newer.motion)
    assert not newer.motion.stopped


def test_a_withdrawn_request_does_not_outrank_older_ones():
    """A goal canceled before it began does not void the request that came before it."""
    arbiter = MotionArbiter()
    first = start_active(arbiter)
    reset = arbiter.arrive()
    arbiter.withdraw(arbiter.arrive())
    waiting = BeginTicket(arbiter, RecordingMotion(), reset, "reset")
    assert wait_until(lambda: first.stopped)
    arbiter.end(first)
    assert waiting.finished() and waiting.result is True
    assert not waiting.motion.stopped
    arbiter.end(waiting.motion)


def test_a_stop_voids_every_request_that_came_before_it():
    arbiter = MotionArbiter()
    before = arbiter.arrive()
    arbiter.interrupt("stopped by the stop service")
    late = BeginTicket(arbiter, RecordingMotion(), before)
    assert late.finished() and late.result is False
    after = start_active(arbiter)
    assert not after.stopped
    arbiter.end(after)
