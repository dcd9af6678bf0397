"""Batcher: concurrent inferences gathered into batches, each answer to its own caller."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from rpent_am.policy import (
    BackendError,
    Batcher,
    InferenceWorker,
    ModelMeta,
    PolicyBackend,
    PolicyObservation,
    Request,
)
from rpent_common.processes import wait_until
from rpent_contract.control_space import ControlSpaceSpec

SPACE = ControlSpaceSpec(name="d2", labels=("a", "b"), units=("1", "1"), lower=(-9.0, -9.0),
                         upper=(9.0, 9.0), relative=True)
WAIT = 10.0  # s: every wait below ends on an event long before this


class Gated(PolicyBackend):
    """Answers each request with a chunk made of its own state value; records the batches
    it was given; holds every batch until ``gate`` opens; fails instructions 'fail'."""

    batching = True
    meta = ModelMeta("gated", "test", "gated-v1", SPACE, 3)

    def __init__(self):
        self.batches: list = []
        self.gate = threading.Event()
        self.entered = threading.Event()

    def predict(self, observation, instruction, session):
        if instruction == "fail":
            raise BackendError("no such task")
        return np.full((3, 2), observation.state[0])

    def predict_batch(self, requests):
        self.batches.append([r.session for r in requests])
        self.entered.set()
        assert self.gate.wait(WAIT)
        return super().predict_batch(requests)


def request(i: int, instruction: str = "go") -> Request:
    return Request(PolicyObservation({}, np.array([float(i)]), ["x"]), instruction, f"s{i}")


@pytest.fixture
def gated():
    backend = Gated()
    batchers = []

    def make(running, max_batch=8, max_wait=WAIT):
        batcher = Batcher(backend, InferenceWorker("gated"), max_batch, max_wait,
                          lambda: running)
        batchers.append(batcher)
        return batcher

    yield backend, make
    backend.gate.set()
    for batcher in batchers:
        batcher.close()


def infer_all(batcher, requests, cancels=None):
    cancels = cancels or [threading.Event() for _ in requests]
    with ThreadPoolExecutor(len(requests)) as pool:
        futures = [pool.submit(batcher.infer, r, WAIT, c) for r, c in zip(requests, cancels)]
        return futures


def test_concurrent_requests_go_as_one_batch_and_each_gets_its_own_chunk(gated):
    backend, make = gated
    backend.gate.set()
    batcher = make(running=8)
    answers = [f.result(WAIT) for f in infer_all(batcher, [request(i) for i in range(8)])]
    # Eight goals running, eight queued: the batch left without waiting out its window.
    assert backend.batches == [[f"s{i}" for i in range(8)]]
    for i, (chunk, _ms, size) in enumerate(answers):
        assert size == 8
        np.testing.assert_array_equal(chunk, np.full((3, 2), float(i)))


def test_a_lone_goal_does_not_wait_for_the_window(gated):
    backend, make = gated
    backend.gate.set()
    batcher = make(running=1, max_wait=60.0)
    chunk, _ms, size = batcher.infer(request(5), WAIT, threading.Event())
    assert size == 1 and chunk[0, 0] == 5.0


def test_batches_fill_while_one_runs_and_respect_max_batch(gated):
    backend, make = gated
    batcher = make(running=12, max_batch=4, max_wait=0.05)
    pool = ThreadPoolExecutor(12)
    futures = [pool.submit(batcher.infer, request(0), WAIT, threading.Event())]
    assert backend.entered.wait(WAIT)  # the first batch (a window's wait, then alone) runs
    futures += [pool.submit(batcher.infer, request(i), WAIT, threading.Event())
                for i in range(1, 12)]
    assert wait_until(lambda: len(batcher._queue) == 11, WAIT)
    backend.gate.set()
    answers = [f.result(WAIT) for f in futures]
    pool.shutdown()
    assert [len(b) for b in backend.batches] == [1, 4, 4, 3]
    assert [a[0][0, 0] for a in answers] == [float(i) for i in range(12)]
    assert sorted(a[2] for a in answers) == [1] + [3] * 3 + [4] * 8


def test_a_goal_canceled_mid_batch_returns_at_once_and_the_others_get_their_chunks(gated):
    backend, make = gated
    batcher = make(running=4)
    cancels = [threading.Event() for _ in range(4)]
    pool = ThreadPoolExecutor(4)
    futures = [pool.submit(batcher.infer, request(i), WAIT, c)
               for i, c in enumerate(cancels)]
    assert backend.entered.wait(WAIT)
    cancels[2].set()
    batcher.poke()
    assert futures[2].result(WAIT) is None  # the gate is still shut: it did not wait for it
    assert not any(f.done() for i, f in enumerate(futures) if i != 2)
    backend.gate.set()
    for i in (0, 1, 3):
        chunk, _ms, size = futures[i].result(WAIT)
        assert size == 4 and chunk[0, 0] == float(i)
    pool.shutdown()


def test_a_goal_canceled_while_queued_never_reaches_the_model(gated):
    backend, make = gated
    batcher = make(running=2, max_wait=60.0)
    cancel = threading.Event()
    pool = ThreadPoolExecutor(1)
    queued = pool.submit(batcher.infer, request(7), WAIT, cancel)
    cancel.set()
    batcher.poke()
    assert queued.result(WAIT) is None  # within WAIT: it did not sit out the 60 s window
    pool.shutdown()
    backend.gate.set()
    answers = [f.result(WAIT) for f in infer_all(batcher, [request(1), request(2)])]
    assert backend.batches == [["s1", "s2"]]
    assert [a[2] for a in answers] == [2, 2]


def test_one_requests_failure_fails_it_alone(gated):
    backend, make = gated
    backend.gate.set()
    batcher = make(running=3)
    futures = infer_all(batcher, [request(0), request(1, "fail"), request(2)])
    with pytest.raises(BackendError, match="no such task"):
        futures[1].result(WAIT)
    assert [futures[i].result(WAIT)[0][0, 0] for i in (0, 2)] == [0.0, 2.0]


def test_a_backend_bug_fails_its_batch_with_the_reason_and_the_batcher_goes_on(gated):
    backend, make = gated
    backend.gate.set()
    batcher = make(running=1)
    broken = backend.predict_batch
    backend.predict_batch = lambda requests: 1 / 0
    with pytest.raises(BackendError, match="ZeroDivisionError"):
        batcher.infer(request(0), WAIT, threading.Event())
    backend.predict_batch = lambda requests: []
    with pytest.raises(BackendError, match="answered 0 of the 1 requests"):
        batcher.infer(request(0), WAIT, threading.Event())
    backend.predict_batch = broken
    assert batcher.infer(request(0), WAIT, threading.Event())[0][0, 0] == 0.0


def test_a_request_past_its_timeout_fails_and_a_closed_batcher_refuses(gated):
    backend, make = gated
    batcher = make(running=1)
    with pytest.raises(BackendError, match="did not answer within 0.5 s"):
        batcher.infer(request(0), 0.5, threading.Event())
    backend.gate.set()
    batcher.close()
    with pytest.raises(BackendError, match="shutting down"):
        batcher.infer(request(0), WAIT, threading.Event())
