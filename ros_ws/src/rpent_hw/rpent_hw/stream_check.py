"""Does an arm follow streamed chunks without stopping at their boundaries?

    python -m rpent_hw.stream_check [--namespace /arm] [--chunks 4] [--steps 20] [--dy 0.002]

Streams ``--chunks`` ee_delta chunks the way a policy client does (each new chunk is sent
while the previous one still runs, after ``--switch-after`` of its steps) along one
straight line, records ``ee_pose`` and every chunk's step feedback, and reports, per chunk
boundary, the gap between the last step of one chunk and the first of the next (in
control periods) and the end effector's lowest speed across the boundary as a fraction of
its speed inside the chunks. An arm that halts at boundaries shows a speed near 0 there.
Run it on a clear workspace: the arm moves ``chunks x switch_after x dy`` along y and
back is not part of it.
"""
from __future__ import annotations

import argparse
import threading
import time
from dataclasses import dataclass, field

import numpy as np


@dataclass
class StreamRecord:
    period: float  # s, the robot's control period
    poses: list = field(default_factory=list)  # (stamp s, position (3,)) from ee_pose
    steps: list = field(default_factory=list)  # per chunk: [feedback stamp s, ...]
    results: list = field(default_factory=list)  # per chunk: (status, result)

    def boundaries(self) -> list:
        """(last step of a chunk, first step of the next) stamps, s, for each boundary."""
        return [(old[-1], new[0]) for old, new in zip(self.steps, self.steps[1:])
                if old and new]

    def boundary_gaps(self) -> np.ndarray:
        """Per boundary: time from the old chunk's last executed step to the new chunk's
        first, in control periods."""
        return np.array([(new - old) / self.period for old, new in self.boundaries()])

    def speeds(self) -> tuple:
        """(stamps, speeds) of the end effector: ee_pose resampled every half period, the
        distance covered over one control period (state topics jitter by a few ms, which
        differences of consecutive samples would turn into speed noise)."""
        t, first = np.unique([s for s, _ in self.poses], return_index=True)
        if len(t) < 2:
            return np.zeros(0), np.zeros(0)
        p = np.array([q for _, q in self.poses])[first]
        grid = np.arange(t[0], t[-1], self.period / 2)
        if len(grid) < 3:
            return np.zeros(0), np.zeros(0)
        resampled = np.column_stack([np.interp(grid, t, p[:, k]) for k in range(3)])
        v = np.linalg.norm(resampled[2:] - resampled[:-2], axis=1) / self.period
        return grid[1:-1], v

    def boundary_speed_ratios(self) -> np.ndarray:
        """Per boundary: the lowest speed from the old chunk's last step to two periods into
        the new chunk, over the median speed inside the chunks (away from boundaries)."""
        t, v = self.speeds()
        inside = np.zeros(len(t), bool)
        for chunk in self.steps:
            if len(chunk) > 4:
                inside |= (t > chunk[2]) & (t < chunk[-2])
        boundaries = self.boundaries()
        for old, new in boundaries:
            inside &= ~((t > old - 2 * self.period) & (t < new + 2 * self.period))
        reference = float(np.median(v[inside])) if inside.any() else float("nan")
        ratios = []
        for old, new in boundaries:
            window = (t >= old) & (t <= new + 2 * self.period)
            if window.any():
                ratios.append(float(v[window].min()) / reference)
        return np.array(ratios)


def constant_delta(row, steps: int = 20):
    """Chunks of ``steps`` copies of one ee_delta ``row``: a straight line."""
    rows = np.tile(np.asarray(row, float), (steps, 1))
    return lambda _index, _executed: (rows, "ee_delta")


def joint_ramp(start, step, space: str = "joint_position", steps: int = 20):
    """Absolute joint chunks along one straight joint-space ramp ``start + k * step``; each
    starts after the steps already executed and the one in flight, which the robot
    finishes before the new chunk takes over (a client that starts at the step in flight
    makes the arm hold that target for a period)."""
    start, step = np.asarray(start, float), np.asarray(step, float)

    def chunk(index, executed):
        first = executed + (2 if index else 1)
        return start + np.arange(first, first + steps)[:, None] * step, space
    return chunk


def stream_chunks(client, next_chunk, *, chunks: int = 4, switch_after: int = 10,
                  last_steps: int | None = None, timeout: float = 60.0) -> StreamRecord:
    """Stream ``chunks`` chunks through a :class:`~rpent_contract.client.RobotClient`, each
    sent once the previous one has executed ``switch_after`` steps. ``next_chunk(index,
    steps executed so far)`` gives each chunk's (rows, control space); ``last_steps`` keeps
    only the first rows of the last chunk, the one that runs to its end, so the chunks that
    are preempted can be long (time for a loaded client to send the next) while the whole
    motion stays short."""
    from geometry_msgs.msg import PoseStamped

    from rpent_contract.control_space import array_to_chunk
    from rpent_contract.names import EE_POSE_TOPIC, EXECUTE_CHUNK_ACTION
    from rpent_contract.qos import STATE_QOS
    from rpent_interfaces.action import ExecuteChunk

    info = client.wait_ready(timeout)
    record = StreamRecord(period=1.0 / info.control_rate)
    lock = threading.Condition()

    def on_pose(msg):
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        p = msg.pose.position
        with lock:
            record.poses.append((stamp, np.array([p.x, p.y, p.z])))

    def on_step(index):
        def cb(fb):
            f = fb.feedback
            with lock:
                record.steps[index].append(f.stamp.sec + f.stamp.nanosec * 1e-9)
                lock.notify_all()
        return cb

    sub = client.node.create_subscription(PoseStamped, EE_POSE_TOPIC, on_pose, STATE_QOS)
    runs = []
    try:
        time.sleep(5 * record.period)  # poses from before the first chunk
        for index in range(chunks):
            with lock:
                executed = sum(len(s) for s in record.steps)
                record.steps.append([])
            rows, space = next_chunk(index, executed)
            if index + 1 == chunks and last_steps is not None:
                rows = rows[:last_steps]
            goal = ExecuteChunk.Goal()
            array_to_chunk(rows, space, goal.chunk)
            runs.append(client.send(EXECUTE_CHUNK_ACTION, goal, feedback=on_step(index)))
            if index + 1 < chunks:
                with lock:
                    if not lock.wait_for(lambda: len(record.steps[index]) >= switch_after
                                         or runs[index].result_future.done(), timeout):
                        raise TimeoutError(f"chunk {index} executed no {switch_after} steps "
                                           f"within {timeout:g} s")
        for run in runs:
            record.results.append(run.result(timeout))
        time.sleep(10 * record.period)  # the arm coming to rest after the last chunk
    finally:
        client.node.destroy_subscription(sub)
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", default="", help="the robot's namespace")
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20, help="rows per chunk")
    parser.add_argument("--switch-after", type=int, default=10,
                        help="steps of a chunk executed before the next is sent")
    parser.add_argument("--dy", type=float, default=0.002, help="m per step along y")
    args = parser.parse_args(argv)

    import rclpy

    from rpent_contract.client import RobotClient

    rclpy.init()
    client = RobotClient(namespace=args.namespace)
    try:
        row = np.zeros(7)
        row[1] = args.dy
        record = stream_chunks(client, constant_delta(row, args.steps), chunks=args.chunks,
                               switch_after=args.switch_after)
    finally:
        client.close()
        rclpy.try_shutdown()
    print(format_figures(record))
    return 0


def format_figures(record: StreamRecord) -> str:
    gaps, ratios = record.boundary_gaps(), record.boundary_speed_ratios()
    if not len(gaps) or not len(ratios):
        return "no chunk boundary was executed"
    return (f"boundary gap: p50 {np.median(gaps):.2f}, max {gaps.max():.2f} control periods; "
            f"speed at boundaries / inside chunks: min {ratios.min():.2f}, "
            f"median {np.median(ratios):.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
