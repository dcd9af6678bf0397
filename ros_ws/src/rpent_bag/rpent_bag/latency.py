"""The control loop's latency per action chunk: the observation a model was given was
measured, the model produced its chunk, the robot received it, the robot applied the
chunk's first step.

Every stamp comes from what the nodes already publish: each ``executed_actions`` message
names its chunk (``observation_stamp``, ``chunk_stamp``, ``chunk_received``), and the model's
``predict`` feedback, where recorded, gives each chunk's inference time. A chunk whose steps
were never applied (stale, or replaced before its turn) has no row.

    rpent latency BAG [--namespace NS] [--chunks]
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence

import numpy as np

EXECUTED_TYPE = "rpent_interfaces/msg/ExecutedAction"
FEEDBACK_TYPE = "rpent_interfaces/action/Predict_FeedbackMessage"


@dataclass(frozen=True)
class Step:
    """One executed_actions message, its stamps in ns."""

    applied: int
    observation: int
    produced: int
    received: int


@dataclass(frozen=True)
class ChunkLatency:
    observation: int  # ns, when the observation the chunk was conditioned on was measured
    produced: int  # ns, when the model sent the chunk
    received: int  # ns, when the robot received it
    first_applied: int  # ns, when the robot applied its first step
    steps: int  # steps of it the robot applied
    inference_ms: Optional[float] = None

    @property
    def total_ms(self) -> float:
        return (self.first_applied - self.observation) / 1e6


def stamp_ns(t) -> int:
    return int(t.sec) * 1_000_000_000 + int(t.nanosec)


def chunk_latencies(steps: Iterable[Step], inference_ms: Optional[dict] = None) -> list:
    """One ChunkLatency per model chunk the robot applied steps of, in order.
    ``inference_ms``: chunk produced stamp (ns) -> the model's inference time."""
    chunks: dict = {}
    for step in steps:
        if not step.produced or not step.observation:
            continue  # a chunk no model made (a scripted motion, a hand-written chunk)
        key = (step.produced, step.received)
        first = chunks.get(key)
        chunks[key] = (min(step.applied, first[0]) if first else step.applied,
                       (first[1] if first else 0) + 1, step.observation)
    inference_ms = inference_ms or {}
    return sorted((ChunkLatency(obs, produced, received, applied, n,
                                inference_ms.get(produced))
                   for (produced, received), (applied, n, obs) in chunks.items()),
                  key=lambda c: c.first_applied)


def _percentiles(values_ms) -> str:
    v = np.asarray(values_ms, dtype=float)
    return (f"{np.percentile(v, 50):8.1f} {np.percentile(v, 95):8.1f} {v.max():8.1f}")


def summary(chunks: Sequence[ChunkLatency], period_s: float) -> str:
    """A table of the stages' p50 / p95 / max in ms, and how often the first action came
    within the chunk's inference time plus one control period of its observation."""
    if not chunks:
        return ("no model chunk was applied: run a policy through execute_chunk "
                "(ChunkExecutor, run_policy) and record executed_actions")
    rows = [
        ("observation -> chunk produced", [(c.produced - c.observation) / 1e6 for c in chunks]),
        ("chunk produced -> robot received", [(c.received - c.produced) / 1e6 for c in chunks]),
        ("robot received -> first step applied",
         [(c.first_applied - c.received) / 1e6 for c in chunks]),
        ("observation -> first step applied", [c.total_ms for c in chunks]),
    ]
    timed = [c for c in chunks if c.inference_ms is not None]
    if timed:
        rows.append(("inference", [c.inference_ms for c in timed]))
        rows.append(("first step - inference", [c.total_ms - c.inference_ms for c in timed]))
    lines = [f"{len(chunks)} chunks applied, control period {period_s * 1e3:.1f} ms",
             f"{'stage (ms)':<38} {'p50':>8} {'p95':>8} {'max':>8}"]
    lines += [f"{name:<38} {_percentiles(values)}" for name, values in rows]
    if timed:
        within = sum(c.total_ms <= c.inference_ms + period_s * 1e3 for c in timed)
        lines.append(f"first step within inference + one period of the observation: "
                     f"{within}/{len(timed)} chunks")
    return "\n".join(lines)


def read_bag(bag: Path, namespace: Optional[str] = None):
    """(steps, inference_ms by chunk stamp, control period in s) of one robot in ``bag``."""
    from rpent_bag import bagfile

    try:
        with bagfile.open_reader(bag) as reader:
            steps, inference, periods = _read(reader, bag, namespace)
    except bagfile.BagError:
        raise
    except Exception as err:  # rosbags raises its own types for damaged files
        raise bagfile.BagError(f"cannot read {bag} ({type(err).__name__}: {err}); check that "
                               "the recording was closed and its files are intact") from None
    applied = np.diff(sorted(s.applied for s in steps)) / 1e9
    period = float(np.median(periods)) if periods else (
        float(np.median(applied)) if len(applied) else 0.0)
    return steps, inference, period


def _read(reader, bag: Path, namespace: Optional[str]):
    from rpent_bag import bagfile

    executed = [c for c in reader.connections if c.msgtype == EXECUTED_TYPE]
    if namespace is not None:
        ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
        executed = [c for c in executed if c.topic == f"{ns}/executed_actions"]
    robots = sorted({c.topic for c in executed})
    if not robots:
        raise bagfile.BagError(
            f"{bag} has no executed_actions{' in ' + namespace if namespace else ''}: "
            "record the robot's executed_actions (a default of the recorder)")
    if len(robots) > 1:
        raise bagfile.BagError(f"{bag} holds several robots ({', '.join(robots)}); "
                               "pick one with --namespace")
    conns = executed + [c for c in reader.connections if c.msgtype == FEEDBACK_TYPE]
    store = bagfile.typestore(conns)
    steps, inference, periods = [], {}, []
    for conn, _received, data in bagfile.messages(reader, conns):
        msg = store.deserialize_cdr(data, conn.msgtype)
        if conn.msgtype == EXECUTED_TYPE:
            steps.append(Step(stamp_ns(msg.header.stamp), stamp_ns(msg.observation_stamp),
                              stamp_ns(msg.chunk_stamp), stamp_ns(msg.chunk_received)))
        else:
            chunk = msg.feedback.chunk
            inference[stamp_ns(chunk.header.stamp)] = float(chunk.inference_ms)
            if chunk.step_period > 0:
                periods.append(float(chunk.step_period))
    return steps, inference, periods


def main(argv=None) -> int:
    from rpent_bag.bagfile import BagError

    parser = argparse.ArgumentParser(
        prog="rpent latency",
        description="The control loop's latency per action chunk in a recorded run: "
                    "observation measured -> chunk produced -> received by the robot -> "
                    "first step applied.")
    parser.add_argument("bag", help="rosbag2 folder (holds metadata.yaml)")
    parser.add_argument("--namespace", help="robot namespace, for bags of several robots")
    parser.add_argument("--chunks", action="store_true", help="also list every chunk")
    args = parser.parse_args(argv)
    try:
        steps, inference, period = read_bag(Path(args.bag), args.namespace)
    except BagError as err:
        print(f"rpent latency: {err}", file=sys.stderr)
        return 2
    chunks = chunk_latencies(steps, inference)
    print(summary(chunks, period))
    if args.chunks:
        t0 = chunks[0].observation if chunks else 0
        print(f"\n{'observation s':>13} {'produced':>9} {'received':>9} {'applied':>9} "
              f"{'inference':>9} {'steps':>5}   (ms after the observation)")
        for c in chunks:
            print(f"{(c.observation - t0) / 1e9:13.3f} {(c.produced - c.observation) / 1e6:9.1f} "
                  f"{(c.received - c.observation) / 1e6:9.1f} {c.total_ms:9.1f} "
                  f"{'' if c.inference_ms is None else f'{c.inference_ms:9.1f}':>9} {c.steps:5d}")
    return 0
