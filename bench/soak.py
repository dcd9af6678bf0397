"""A long run of episodes with everything that goes wrong at a bench: does anything grow or
slow down?

    source scripts/env.sh && python bench/soak.py [--robot libero|franka|so101]
        [--minutes 120] [--sample 60] [--model-restart 300] [--seed 0] [--logs DIR]

The robot's bring-up as ``rpent.start`` runs it, less the agent, with the scripted expert as
its action model: LIBERO, or an arm's twin (its physics, cameras and SAM3 server, its
operator, the unchanged robot node and perception; the expert finds the cube and the bowl
through perception). Episodes follow one another without a pause: reset, then the expert
streamed by the action-model node through a ChunkExecutor. Into each one, at random: nothing, a stop
(the robot's ``stop`` service), a cancel (the executor's) or a reset mid-episode; every
``--model-restart`` s the model node gets SIGINT and a new one takes over (how long it takes
to exit is timed; one slower than ros2 launch waits, 10 s, is reported with its log). Every
``--sample`` s one line: episodes, the robot's and model node's memory (VmRSS), open file
descriptors and threads, and the p50 / p99 of a single ``predict`` (measured 20 times per
sample) and of the time between executed steps (their stamps), and the robot node's CPU time
per executed step (a step that costs more work, or one that only waits longer), beside the
CPU time of a fixed probe in this process (the machine's own speed: on a virtual machine it
varies with the neighbours). At the end, each column's last quarter against its first (a
growth of more than 5 % is flagged), and the robot's CPU time per step divided by the
probe's, which the machine's speed does not move; the model node is compared within each
of its lives.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import random
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

SOUP = "pick the alphabet soup and place it in the basket"
# Per robot: (its bring-up, arguments besides the expert's, steps and s an episode may take). An
# arm's expert moves 2 to 5 mm a step and holds still once its task is done: no success
# signal ends a twin's stream, its steps do.
BENCHES = {
    "libero": ("libero_sim", {}, 600, 60.0),
    "franka": ("franka", {"twin": "true", "twin_task": "cube_in_bowl"}, 1200, 240.0),
    "so101": ("so101", {"twin": "true", "twin_task": "cube_in_bowl"}, 600, 120.0),
}


# The verdict's column of the robot node's CPU time per step in units of the probe's.
WORK = "robot_cpu_per_step / probe_cpu"

# s a node may take to exit on SIGINT: ros2 launch sends SIGTERM 5 s after it, SIGKILL 5 s
# after that.
EXIT_S = 10.0

# s between an episode's end and a sample's predict timings.
SETTLE_S = 8.0


def proc_stats(pid: int) -> dict:
    """VmRSS (MiB), threads and open file descriptors of a process."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.split()
    return {"rss": int(fields["VmRSS"][0]) / 1024, "threads": int(fields["Threads"][0]),
            "fds": len(list(Path(f"/proc/{pid}/fd").iterdir()))}


def cpu_s(pid: int) -> float:
    """User + system CPU time a process has used, s."""
    # The command name may hold spaces: fields are counted after its closing parenthesis.
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_nodes(robot: str, logs: Path) -> list:
    """The NodeSpecs of ``robot``'s bring-up with the scripted expert, less the agent."""
    from rpent.bringup import describe
    from rpent_common.processes import free_port_pair

    bringup, arguments, _, _ = BENCHES[robot]
    given = {**arguments, "am_backend": "scripted", "run_dir": str(logs / "run")}
    if robot != "libero":
        given["twin_port"] = str(free_port_pair())
    if robot == "franka":
        from rpent_twins.franky_sim import free_loopback_address

        given["twin_host"] = free_loopback_address()
    return [n for n in describe(bringup, given) if n.package != "rpent_agent"]


class Soak:
    def __init__(self, robot: str, logs: Path, seed: int):
        from rpent_common.processes import LoggedProcess
        from rpent_contract.client import RobotClient

        self.logs, self.rng = logs, random.Random(seed)
        _, _, self.max_steps, self.timeout = BENCHES[robot]
        nodes = bench_nodes(robot, logs)
        self.model_spec = next(n for n in nodes if n.package == "rpent_am")
        others = [n for n in nodes if n is not self.model_spec]
        self.procs = [LoggedProcess(n.argv(), logs / f"{n.name}.log", n.name) for n in others]
        self.robot_proc = self.procs[[n.executable for n in others].index(f"{robot}_node")]
        self.robot = RobotClient()
        self.info = self.robot.wait_ready(180)
        from rpent_am.client import ActionModelClient

        # One client for every life of the model node: each new node serves the same name.
        self.model = ActionModelClient(self.robot.node)
        self.model_proc = None
        self.lives = 0
        self.exits: list = []  # s from SIGINT to each model node's exit
        self.slow_exits: list = []
        self.start_model()
        # When each executed step was published (its stamp, s): arrival times would measure
        # this process's executor, which takes messages in bursts.
        self.step_times: list = []
        # The robot's CPU time at the last sample: does a step cost it more work over time,
        # or only more waiting?
        self.robot_cpu = cpu_s(self.robot_proc.proc.pid)
        from rpent_contract.names import EXECUTED_ACTIONS_TOPIC
        from rpent_contract.qos import EXECUTED_QOS
        from rpent_interfaces.msg import ExecutedAction

        self.robot.node.create_subscription(
            ExecutedAction, EXECUTED_ACTIONS_TOPIC,
            lambda m: self.step_times.append(m.header.stamp.sec + m.header.stamp.nanosec * 1e-9),
            EXECUTED_QOS)
        self.episodes = {"plain": 0, "stop": 0, "cancel": 0, "reset": 0}
        self.instruction = SOUP  # the task's, from each reset
        self.resets_taken_over = 0
        self.outcomes: dict = {}
        self.first_message: dict = {}  # outcome -> what the first episode so ended said

    def start_model(self) -> None:
        from rpent_common.processes import LoggedProcess

        if self.model_proc is not None:
            # Waited for as long as the node's own shutdown deadline, at which it writes every
            # thread's stack to its log: a slow exit is reported with what held it, and the
            # soak goes on.
            from rpent_contract.node_main import SHUTDOWN_DEADLINE_S

            started = time.monotonic()
            code = self.model_proc.stop(SHUTDOWN_DEADLINE_S + 5)
            took = time.monotonic() - started
            self.exits.append(took)
            if code != 0 or took > EXIT_S:
                self.slow_exits.append(f"life {self.lives}: exit {code} after {took:.1f} s "
                                       f"({self.model_proc.log_path})")
                print(f"the model node took {took:.1f} s to exit on SIGINT (exit {code}); "
                      f"its log: {self.model_proc.log_path}", flush=True)
        self.lives += 1
        name = f"{self.model_spec.name}_{self.lives}"
        self.model_proc = LoggedProcess(self.model_spec.argv(), self.logs / f"{name}.log", name)
        self.model.connect(self.info, timeout=120)

    def episode(self) -> None:
        from rpent_am.chunk_executor import ChunkExecutor

        kind = self.rng.choice(list(self.episodes))
        response = self.robot.reset(timeout=60)
        if not response.success:
            raise RuntimeError(f"reset refused: {response.message}")
        self.instruction = response.instruction
        executor = ChunkExecutor(self.robot, self.model)
        out = {}
        runner = threading.Thread(target=lambda: out.setdefault(
            "report", executor.run(self.instruction, max_steps=self.max_steps,
                                   timeout=self.timeout)), daemon=True)
        runner.start()
        if kind != "plain":
            runner.join(self.rng.uniform(0.5, 4.0))
            if kind == "stop":
                self.robot.stop()
            elif kind == "cancel":
                executor.cancel()
            else:
                # Mid-stream, the executor's next chunk may take over from the reset (the
                # robot does what it was asked last): then it is the stream that goes on.
                response = self.robot.reset(timeout=60)
                if not response.success and "stopped" not in response.message:
                    raise RuntimeError(f"a reset mid-episode was refused: {response.message}")
                self.resets_taken_over += not response.success
        runner.join(self.timeout + 60)
        if runner.is_alive():
            raise RuntimeError(f"a {kind} episode did not end within {self.timeout + 60:g} s")
        self.episodes[kind] += 1
        outcome = out["report"].outcome
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        self.first_message.setdefault(outcome, out["report"].message)

    def predict_ms(self, n: int = 20) -> np.ndarray:
        # Untimed: a twin's expert first locates the objects through perception (1.5 s).
        self.model.predict(self.instruction, timeout=30.0)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            self.model.predict(self.instruction, timeout=10.0)
            times.append((time.perf_counter() - t0) * 1e3)
        return np.array(times)

    def close(self) -> None:
        self.robot.close()
        for proc in [self.model_proc, *reversed(self.procs)]:
            if proc is not None:
                proc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--robot", choices=list(BENCHES), default="libero")
    parser.add_argument("--minutes", type=float, default=120.0)
    parser.add_argument("--sample", type=float, default=60.0, help="s between samples")
    parser.add_argument("--model-restart", type=float, default=300.0,
                        help="s between model node restarts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logs", type=Path,
                        help="keep every node's log in this folder (default: a temporary one)")
    args = parser.parse_args()

    from rpent_testkit.processes import isolate_ros_graph

    isolate_ros_graph()
    import rclpy

    rclpy.init()
    rows = []
    try:
        with kept(args.logs) if args.logs else tempfile.TemporaryDirectory() as logs:
            soak = Soak(args.robot, Path(logs), args.seed)
            try:
                start = last_restart = time.monotonic()
                last_sample, last_stamp = start, ros_now(soak)
                print("  min  episodes  robot MiB fds thr | model MiB fds thr life | "
                      "predict p50/p99 ms | step p50/p99 ms | robot CPU ms/step | "
                      "probe CPU ms", flush=True)
                while time.monotonic() - start < args.minutes * 60:
                    soak.episode()
                    now = time.monotonic()
                    if now - last_restart >= args.model_restart:
                        soak.start_model()
                        last_restart = now
                    if now - last_sample >= args.sample:
                        rows.append(sample(soak, (now - start) / 60, last_stamp))
                        last_sample, last_stamp = now, ros_now(soak)
            finally:
                soak.close()
    finally:
        rclpy.try_shutdown()
    print(f"\nepisodes by disturbance: {soak.episodes}; outcomes: {soak.outcomes}; "
          f"resets taken over by the stream's next chunk: {soak.resets_taken_over}; "
          f"model node lives: {soak.lives}")
    for outcome, message in soak.first_message.items():
        print(f"  first '{outcome}': {message}")
    if soak.exits:
        print(f"model node exits on SIGINT: {len(soak.exits)}, p50 {np.median(soak.exits):.2f} "
              f"s, max {max(soak.exits):.2f} s; slower than {EXIT_S:g} s or failed: "
              f"{soak.slow_exits or 'none'}")
    verdict(rows)


def probe_cpu_ms() -> float:
    """CPU time of a fixed piece of work on this thread (ms, median of 5): how fast the
    machine runs now. A virtual machine's CPUs slow down with their neighbours' load; a step
    that costs more CPU time while this does too is the machine, not the robot node."""
    x = np.linspace(0.0, 1.0, 200_000)
    times = []
    for _ in range(5):
        t0 = time.thread_time()
        sum(i * i for i in range(50_000))  # the interpreter
        for _ in range(10):
            x = np.sin(x) + 0.5  # elementwise numpy, one thread
        times.append(time.thread_time() - t0)
    return float(np.median(times)) * 1e3


@contextlib.contextmanager
def kept(folder: Path):
    folder.mkdir(parents=True, exist_ok=True)
    print(f"node logs: {folder}", flush=True)
    yield str(folder)


def sample(soak: Soak, minutes: float, since: float) -> dict:
    """One line of the table; ``since``: the last sample's time (ROS clock, s)."""
    robot, model = proc_stats(soak.robot_proc.proc.pid), proc_stats(soak.model_proc.proc.pid)
    # predict is timed in the same state every sample: not while the episode just ended still
    # loads the machine (a twin's perception node works 4-5 s on; a p50 of 11 ms right after
    # an episode, 6 ms a few seconds later), nor only after a model restart's delay.
    time.sleep(SETTLE_S)
    predict = soak.predict_ms()
    steps = np.array([t for t in soak.step_times if t >= since])
    gaps = np.diff(steps) * 1e3
    # Between episodes and chunks the robot waits: only gaps inside motion are steps.
    gaps = gaps[gaps < 500] if gaps.size else np.array([np.nan])
    robot_cpu = cpu_s(soak.robot_proc.proc.pid)
    cpu_per_step = (robot_cpu - soak.robot_cpu) * 1e3 / max(steps.size, 1)
    soak.robot_cpu = robot_cpu
    probe = probe_cpu_ms()
    row = {"min": minutes, "episodes": sum(soak.episodes.values()), "life": soak.lives,
           "robot_rss": robot["rss"], "robot_fds": robot["fds"], "robot_threads": robot["threads"],
           "model_rss": model["rss"], "model_fds": model["fds"],
           "model_threads": model["threads"],
           "predict_p50": np.percentile(predict, 50), "predict_p99": np.percentile(predict, 99),
           "step_p50": np.percentile(gaps, 50), "step_p99": np.percentile(gaps, 99),
           "robot_cpu_per_step": cpu_per_step, "probe_cpu": probe}
    print(f"{minutes:5.1f} {row['episodes']:9d}  {row['robot_rss']:9.1f} {row['robot_fds']:3d} "
          f"{row['robot_threads']:3d} | {row['model_rss']:9.1f} {row['model_fds']:3d} "
          f"{row['model_threads']:3d} {row['life']:4d} | {row['predict_p50']:7.1f} / "
          f"{row['predict_p99']:6.1f} | {row['step_p50']:6.1f} / {row['step_p99']:6.1f} | "
          f"{cpu_per_step:5.1f} | {probe:5.1f}",
          flush=True)
    return row


def ros_now(soak: Soak) -> float:
    return soak.robot.node.get_clock().now().nanoseconds * 1e-9


def verdict(rows: list) -> None:
    if len(rows) < 4:
        print("too few samples for a verdict: run longer than 4 samples")
        return
    quarter = max(1, len(rows) // 4)
    print("\n| column | first quarter | last quarter | change | grew more than 5 % |")
    print("|---|---|---|---|---|")
    columns = {key: [r[key] for r in rows] for key in (
        "robot_rss", "robot_fds", "robot_threads", "predict_p50", "predict_p99", "step_p50",
        "step_p99", "robot_cpu_per_step", "probe_cpu")}
    # The robot node's work per step with the machine's own speed divided out: the one
    # latency-like column a virtual machine's neighbours do not move.
    columns[WORK] = [r["robot_cpu_per_step"] / r["probe_cpu"] for r in rows]
    for key, values in columns.items():
        a, b = np.median(values[:quarter]), np.median(values[-quarter:])
        change = (b - a) / a if a else 0.0
        digits = 3 if key == WORK else 1
        print(f"| {key} | {a:.{digits}f} | {b:.{digits}f} | {change:+.1%} | "
              f"{'YES' if change > 0.05 else 'no'} |")
    # The model node restarts: compare each life's first sample with its last.
    for life in sorted({r["life"] for r in rows}):
        mine = [r for r in rows if r["life"] == life]
        if len(mine) >= 2:
            a, b = mine[0]["model_rss"], mine[-1]["model_rss"]
            print(f"model node life {life}: VmRSS {a:.1f} -> {b:.1f} MiB over "
                  f"{mine[-1]['min'] - mine[0]['min']:.1f} min ({(b - a) / a:+.1%}); fds "
                  f"{mine[0]['model_fds']} -> {mine[-1]['model_fds']}, threads "
                  f"{mine[0]['model_threads']} -> {mine[-1]['model_threads']}")


if __name__ == "__main__":
    main()
