"""Evaluation workers: each one a namespaced robot (LIBERO, or an arm's twin) and agent, all
sharing one action-model node; the episodes they run; what counts as the harness failing.

A worker's nodes are started once and reused while they serve the episodes (see
``robots``): an episode is a reset of the robot to its task and initial state, then one
``run_task`` goal to the agent. A node that exits, a call that never answers or an episode
past its time limit is the harness failing, not the policy: the worker is restarted and the
episode retried by the caller.
"""
from __future__ import annotations

import json
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from rpent.bringup import NodeSpec, recorder
from rpent_agent.observer import RobotObserver
from rpent_common.processes import LoggedProcess
from rpent_contract.client import ActionClient, GoalRun, RobotClient, signals_held
from rpent_interfaces.action import RunTask
from rpent_interfaces.msg import TaskStatus

AGENT_STATUS = {v: k.removeprefix("STATUS_").lower() for k, v in vars(RunTask.Result).items()
                if k.startswith("STATUS_")}
POLL = 0.2


class HarnessError(RuntimeError):
    """The harness could not run the episode (a node died or hung): retry, then record."""


class Cancelled(Exception):
    """The evaluation is stopping (Ctrl-C, SIGTERM, SIGHUP)."""


class EpisodeRefused(RuntimeError):
    """The robot refused the episode (e.g. a task the installed benchmark lacks): retrying
    cannot help, so it is recorded as an error at once."""


@dataclass(frozen=True)
class Episode:
    suite: str
    task_id: int
    init_state_index: int
    seed: int = 0

    @property
    def key(self) -> str:
        return f"{self.suite}/{self.task_id}/{self.init_state_index}/{self.seed}"

    @property
    def folder(self) -> str:
        # A twin suite may be a scene file's path.
        return (f"{Path(self.suite).stem}-t{self.task_id:02d}-i{self.init_state_index:02d}"
                f"-s{self.seed}")


@dataclass(frozen=True)
class EpisodeLimits:
    max_turns: int
    max_episode_steps: int
    timeout: float  # s for the whole episode, reset included


class Spawner:
    """Starts every process of an evaluation from one thread that lives as long as the
    evaluation: a child dies with the thread that started it (see LoggedProcess), and a
    worker thread ends as soon as the queue is empty while the others still need, say, the
    model node it restarted."""

    def __init__(self):
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="eval-spawner")

    def __call__(self, cmd: list, log_path: Path, name: str) -> LoggedProcess:
        return self._thread.submit(LoggedProcess, cmd, log_path, name).result()

    def close(self) -> None:
        self._thread.shutdown(wait=True)


class NodeGroup:
    """Processes started from bring-up node descriptions, each with its own log file."""

    def __init__(self, specs: list[NodeSpec], log_dir: Path, prefix: str, spawn: Spawner):
        log_dir.mkdir(parents=True, exist_ok=True)
        self.procs = [spawn(s.argv(), log_dir / f"{prefix}{s.name}.log", s.name)
                      for s in specs]

    def dead(self) -> Optional[str]:
        """Why the group is broken (a node exited), or None while every node runs."""
        for p in self.procs:
            code = p.proc.poll()
            if code is not None:
                tail = p.log_tail(8).replace("\n", "\n    ")
                return (f"node '{p.name}' exited with code {code} (log {p.log_path}):\n"
                        f"    {tail}")
        return None

    def stop(self) -> None:
        for p in self.procs:
            p.stop()


class ModelService:
    """The action-model node the workers share; restarted when it dies."""

    def __init__(self, spec: Optional[NodeSpec], log_dir: Path, spawn: Spawner):
        self.spec, self.log_dir, self.spawn = spec, log_dir, spawn
        self.group: Optional[NodeGroup] = None
        self.starts = 0
        self._lock = threading.Lock()  # workers restarting at once start one model

    def ensure_running(self) -> None:
        with self._lock:
            if self.spec is None or (self.group is not None and self.group.dead() is None):
                return
            if self.group is not None:
                self.group.stop()
            self.starts += 1
            self.group = NodeGroup([self.spec], self.log_dir, f"model.{self.starts}.",
                                   self.spawn)

    def dead(self) -> Optional[str]:
        return None if self.group is None else self.group.dead()

    def stop(self) -> None:
        if self.group is not None:
            self.group.stop()


def _agent_serves_goals(specs: list[NodeSpec]) -> list[NodeSpec]:
    """The bring-up's agent runs one task and exits; a worker's serves one run_task goal per
    episode, each into the run folder the goal names. An episode's memory is its own run
    folder's unless a memory folder was named: the lasting default would let episodes learn
    from each other and from the user's other runs."""
    for spec in specs:
        if spec.package == "rpent_agent":
            spec.parameters.update(run_at_startup=False, run_dir="", reset_episode=False)
            if spec.parameters.get("memory_dir") == "auto":
                spec.parameters["memory_dir"] = ""
            spec.required = False
    return specs


class Worker:
    """One robot + agent pair under its own namespace; ``station`` is its robot's kind
    (robots.LiberoStation, robots.TwinStation)."""

    host = ""  # where it runs, when not on this machine

    def __init__(self, index: int, namespace: str, station, log_dir: Path,
                 model: ModelService, record: bool, stopping: threading.Event):
        self.index, self.namespace, self.station = index, namespace, station
        self.log_dir, self.model, self.record = log_dir, model, record
        self.spawn = model.spawn
        self.stopping = stopping
        self.group: Optional[NodeGroup] = None
        self.client: Optional[RobotClient] = None
        self.starts = 0
        self._calls = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"eval-w{index}")

    # --- life cycle ------------------------------------------------------------------------
    def dead(self) -> Optional[str]:
        why = self.group.dead() if self.group is not None else "not started"
        return why or self.model.dead()

    def serves(self, episode: Episode) -> bool:
        """Whether the running nodes can run ``episode`` without a restart."""
        return self.dead() is None and self.station.serves(episode)

    def start(self, episode: Episode, timeout: float) -> None:
        """Start the nodes, for ``episode`` and those the station serves with them."""
        self.stop()
        self.model.ensure_running()
        self.starts += 1
        self.group = NodeGroup(_agent_serves_goals(self.station.specs(episode)), self.log_dir,
                               f"w{self.index}.{self.starts}.", self.spawn)
        # Resets and watches only: no action client, so no per-step chunk feedback here.
        with signals_held():  # Ctrl-C: stop() then finds the client to close
            self.client = RobotClient(namespace=self.namespace,
                                      node_name=f"eval_client_{self.starts}", actions=())
        self.observer = RobotObserver(self.client.node, [])
        self._run_client = ActionClient(self.client.node, RunTask, "agent/run_task")
        deadline = time.monotonic() + timeout
        self._watch(lambda: self._run_client.wait_for_server(timeout_sec=POLL) or None,
                    deadline, "the agent's run_task action")
        self._watch(lambda: self.observer.task() is not None and self.observer.state()
                    is not None or None, deadline, "the robot's state and task status")

    def stop(self) -> None:
        self.station.close()
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.group is not None:
            self.group.stop()
            self.group = None

    def close(self) -> None:
        self.stop()
        self._calls.shutdown(wait=False)

    def _watch(self, poll: Callable, deadline: float, what: str):
        """Call ``poll`` until it returns something other than None, failing fast when a
        node dies, at ``deadline`` and when the evaluation stops."""
        while True:
            value = poll()
            if value is not None:
                return value
            if self.stopping.is_set():
                raise Cancelled
            why = self.dead()
            if why:
                raise HarnessError(f"waiting for {what}: {why}")
            if time.monotonic() > deadline:
                raise HarnessError(f"{what} did not answer in time (worker {self.index}, "
                                   f"logs in {self.log_dir})")
            time.sleep(POLL)

    def _blocking(self, fn: Callable, deadline: float, what: str):
        """Run a blocking client call, watching the nodes while it waits."""
        future = self._calls.submit(fn)
        self._watch(lambda: True if future.done() else None, deadline, what)
        try:
            return future.result()
        except (TimeoutError, RuntimeError) as err:  # no answer, or a refused goal
            raise HarnessError(f"{what}: {err}") from None

    # --- one episode -----------------------------------------------------------------------
    def run(self, episode: Episode, run_dir: Path, limits: EpisodeLimits) -> dict:
        deadline = time.monotonic() + limits.timeout
        reset = self._blocking(lambda: self.station.reset(self.client, episode, limits.timeout),
                               deadline, "reset")
        if not reset.success:
            raise EpisodeRefused(f"the robot refused the episode: {reset.message}")
        bag = self._start_recorder(run_dir, deadline) if self.record else None
        try:
            goal = RunTask.Goal(instruction=reset.instruction, max_turns=limits.max_turns,
                                max_episode_steps=limits.max_episode_steps,
                                run_dir=str(run_dir))
            run = self._blocking(lambda: GoalRun.send(
                self._run_client, goal, None, 30.0, "run_task", "the agent node"),
                deadline, "run_task goal")
            try:
                self._watch(lambda: True if run.done() else None, deadline,
                            f"the agent's run of {episode.key}")
            except (HarnessError, Cancelled):
                self._cancel(run)
                raise
            _, result = run.result(5.0)
        finally:
            if bag is not None:
                bag.stop()
        # A node that died during the run may have ended it early (the agent reports a
        # dead robot as a failed tool call): that is the harness failing, not the policy.
        why = self.dead()
        if why:
            raise HarnessError(f"during the run of {episode.key}: {why}")
        task = self.observer.settled_task(self.client.node.get_clock().now().nanoseconds)
        if task is None or task.episode_id != reset.episode_id:
            raise HarnessError("the robot reported no task status for the episode (its "
                               "episode changed under the agent)")
        judged = self._blocking(self.station.judge, deadline, "the twin's success check")
        record = _record(result, task, run_dir, reset.instruction, judged)
        # An arm names its task after itself; a twin knows the task it set.
        record["task_name"] = self.station.task_name(episode) or record["task_name"]
        return record

    def _cancel(self, run: GoalRun) -> None:
        try:
            run.cancel(2.0)
        except (TimeoutError, RuntimeError):
            pass  # the node is dead or stuck: the restart that follows stops it anyway

    def _start_recorder(self, run_dir: Path, deadline: float) -> LoggedProcess:
        spec = recorder(self.namespace, str(run_dir / "bag"))
        run_dir.mkdir(parents=True, exist_ok=True)
        proc = self.spawn(spec.argv(), run_dir / "recorder.log", "recorder")
        events = f"/{self.namespace}/agent/events"
        # Recording starts once the recorder listens to the agent, which only it does here.
        try:
            self._watch(lambda: True if self.client.node.count_subscribers(events) else
                        (_recorder_failed(proc)), deadline, "the recorder")
        except BaseException:
            proc.stop()
            raise
        return proc


def _recorder_failed(proc: LoggedProcess):
    if not proc.alive():
        raise HarnessError(f"the recorder exited: {proc.log_tail(5)}")
    return None


def _record(result, task: TaskStatus, run_dir: Path, instruction: str,
            judged: Optional[bool] = None) -> dict:
    """The episode's line in results.jsonl, from the agent's result and the robot's verdict;
    ``judged`` is the twin's own success check, where the robot has none."""
    files = {}
    result_json = run_dir / "result.json"
    if result_json.exists():
        files = json.loads(result_json.read_text())
    operator = task.success if task.success_source == TaskStatus.SOURCE_OPERATOR else None
    native = bool(task.native_success) if judged is None else judged
    success = operator if operator is not None else native
    status = AGENT_STATUS.get(result.status, str(result.status))
    return {
        "instruction": instruction, "task_name": task.task_name,
        "outcome": "success" if success else "failure",
        "native_success": native, "operator_verdict": operator,
        "agent_status": status, "summary": result.summary,
        "turns": int(result.turns), "tool_calls": int(result.tool_calls),
        "input_tokens": int(result.input_tokens), "output_tokens": int(result.output_tokens),
        "cached_input_tokens": int(files.get("cached_input_tokens", 0)),
        "steps": int(task.step), "episode_id": task.episode_id,
        "video": files.get("video"),
        # The recipes of earlier runs this one was shown (with a named memory_dir): what an
        # evaluation with memory is compared on.
        "recipes_seen": files.get("recipes_seen", []),
    }


def prune_files(run_dir: Path) -> None:
    """Drop an episode's video and bag (its transcript and result are small and stay)."""
    (run_dir / "episode.mp4").unlink(missing_ok=True)
    shutil.rmtree(run_dir / "bag", ignore_errors=True)
