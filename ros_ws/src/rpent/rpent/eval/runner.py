"""The evaluation loop: a queue of episodes, N workers draining it, results streamed to
the evaluation folder as each episode ends, a live progress line, a report at the end."""
from __future__ import annotations

import os
import shutil
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import rclpy

from rpent.bringup import NodeSpec, describe

from .report import write_report
from .results import EvalFolder, config_hash
from .workers import (
    Cancelled,
    Episode,
    EpisodeLimits,
    EpisodeRefused,
    HarnessError,
    ModelService,
    Spawner,
    Worker,
    prune_files,
)

# A worker (robot node with its renderer, agent node; on a twin its physics and cameras too)
# holds about this much memory.
WORKER_GIB = 2.0
ATTEMPTS = 2


def default_workers(cores_per_worker: int) -> int:
    """As many workers as the cores the process may use keep busy, as far as free memory
    allows."""
    cpus = len(os.sched_getaffinity(0))
    free_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES") / 2**30
    return max(1, min(cpus // cores_per_worker, int(free_gib // WORKER_GIB)))


class Interrupted(Exception):
    pass


@dataclass
class EvalConfig:
    folder: Path
    episodes: list  # [Episode]
    bringup_args: dict  # the robot's bring-up arguments: planner, model, am_backend, ...
    suites: object  # robots.LiberoSuites | robots.TwinSuites
    workers: int
    limits: EpisodeLimits
    keep: str = "failed"  # videos and bags of: failed | all | none
    record: bool = False
    startup_timeout: float = 300.0
    retry_errors: bool = False
    cluster: str = ""  # a Ray cluster's address ('auto': the local one); '' runs here
    cell_resources: dict = field(default_factory=dict)  # a cell's Ray resource request
    model_resources: dict = field(default_factory=dict)  # a node's model node's request

    def settings(self) -> dict:
        """What decides an episode's outcome: the configuration results are filed under."""
        return {**self.bringup_args, "max_turns": self.limits.max_turns,
                "max_episode_steps": self.limits.max_episode_steps}


class EpisodeQueue:
    """Episodes to run; a worker gets the next one of the task it has loaded when there is
    one (switching tasks rebuilds the simulator), else the first left."""

    def __init__(self, episodes):
        self._items = list(episodes)
        self._lock = threading.Lock()

    def take(self, loaded: Optional[tuple]) -> Optional[Episode]:
        with self._lock:
            for i, e in enumerate(self._items):
                if (e.suite, e.task_id) == loaded:
                    return self._items.pop(i)
            return self._items.pop(0) if self._items else None


class Progress:
    """Episodes done, success so far and ETA: a live line on a terminal, else a line per
    finished episode."""

    def __init__(self, total: int, earlier: int, out=sys.stdout):
        self.total, self.earlier, self.out = total, earlier, out
        self.done = self.successes = self.errors = self.running = 0
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._tty = out.isatty()
        self._stop = threading.Event()
        if self._tty:
            threading.Thread(target=self._refresh, daemon=True).start()

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        judged = self.done - self.errors
        rate = f"{100 * self.successes / judged:.0f}%" if judged else "—"
        eta = (_clock(elapsed / self.done * (self.total - self.done)) if self.done
               else "—")
        width = 20
        filled = int(width * self.done / self.total) if self.total else width
        return (f"[eval] {'#' * filled}{'.' * (width - filled)} {self.done}/{self.total} "
                f"episodes · success {self.successes}/{judged} ({rate}) · errors "
                f"{self.errors} · {self.running} running · {_clock(elapsed)} elapsed · "
                f"ETA {eta}")

    def say(self, text: str) -> None:
        with self._lock:
            if self._tty:
                self.out.write("\r\033[K")
            self.out.write(text + "\n")
            if self._tty:
                self.out.write(self.line())
            self.out.flush()

    def episode_started(self) -> None:
        with self._lock:
            self.running += 1

    def episode_ended(self, record: Optional[dict], text: str) -> None:
        with self._lock:
            self.running -= 1
            if record is not None:
                self.done += 1
                self.successes += record["outcome"] == "success"
                self.errors += record["outcome"] == "error"
        self.say(text if self._tty or record is None else f"{text}\n{self.line()}")

    def _refresh(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                self.out.write("\r\033[K" + self.line())
                self.out.flush()

    def close(self) -> None:
        self._stop.set()
        if self._tty:
            self.out.write("\r\033[K" + self.line() + "\n")
            self.out.flush()


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return (f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
            if seconds >= 3600 else f"{seconds // 60}:{seconds % 60:02d}")


class Evaluation:
    def __init__(self, config: EvalConfig):
        self.config = config
        self.folder = EvalFolder(config.folder)
        self._stop = threading.Event()
        self._crashed: list = []
        self._run_id = f"eval_{os.getpid()}"
        self._hosts = None  # the model nodes of a cluster's nodes (cluster.ModelHosts)

    # --- the nodes ---------------------------------------------------------------------------
    def _model(self, namespace: str = "", robot: str = "") -> tuple[Optional[NodeSpec], str]:
        """The shared model node to start (if any) and the name agents should use: in
        ``namespace`` (default the evaluation's), reading its action space from ``robot``
        (default worker 0's)."""
        args = self.config.bringup_args
        if args["action_model"]:
            return None, args["action_model"]
        if args["am_backend"] == "none":
            return None, ""
        namespace = namespace or self._run_id
        # The model reads its action space from one robot (they all declare the same);
        # each goal then names the robot whose observation it predicts from.
        given = {"am_backend": args["am_backend"], "am_checkpoint": args["am_checkpoint"],
                 "am_endpoint": args["am_endpoint"], "am_model_io": args["am_model_io"],
                 "namespace": namespace,
                 "robot_namespace": robot or self._worker_namespace(0)}
        spec = describe("action_model", given)[0]
        spec.parameters.update(self.config.suites.model_parameters(args))
        return spec, f"/{namespace}/action_model"

    def _worker_namespace(self, index: int) -> str:
        return f"{self._run_id}_w{index}"

    def _worker_args(self, namespace: str, model_name: str) -> dict:
        """A worker's bring-up arguments: the evaluation's, under its own namespace, using
        the shared model, its run folders named by each goal."""
        return {**self.config.bringup_args, "namespace": namespace,
                "action_model": model_name, "am_backend": "none",
                "output_dir": str(self.folder.episodes_path), "dashboard": "false",
                "record": "false", "max_turns": str(self.config.limits.max_turns),
                "max_episode_steps": str(self.config.limits.max_episode_steps)}

    # --- the loop ----------------------------------------------------------------------------
    def run(self) -> int:
        cfg = self.config
        self.folder.open(cfg.settings(), {"command": sys.argv, "workers": cfg.workers,
                                          "cluster": cfg.cluster or None,
                                          "episodes_selected": len(cfg.episodes)})
        digest = config_hash(cfg.settings())
        finished = {r["episode"]: r for r in self.folder.records()}
        todo = [e for e in cfg.episodes if e.key not in finished
                or (cfg.retry_errors and finished[e.key]["outcome"] == "error")]
        earlier = len(cfg.episodes) - len(todo)
        print(f"[eval] {self.folder.path}: {len(cfg.episodes)} episodes selected, {earlier} "
              f"already recorded, {len(todo)} to run", flush=True)
        code = 0
        if todo:
            code = self._run_episodes(todo, digest, earlier)
        selected = {e.key for e in cfg.episodes}
        records = [r for r in self.folder.records() if r["episode"] in selected]
        report = write_report(records, self.folder.path, self._title(),
                              description=self._description())
        overall = report["overall"]
        print(f"[eval] report: {self.folder.path / 'report.md'} (success "
              f"{overall['successes']}/{overall['episodes']}, {overall['errors']} errors)",
              flush=True)
        if code == 0 and overall["errors"]:
            code = 1
        return code

    def _run_episodes(self, todo: list, digest: str, earlier: int) -> int:
        cfg = self.config
        n = max(1, min(cfg.workers, len(todo)))
        queue = EpisodeQueue(todo)
        logs = self.folder.path / "logs"
        rclpy.init(args=[])  # our argv is the harness's, not ROS arguments
        previous = {s: signal.signal(s, lambda *_: self._stop.set())
                    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        # On a cluster the model nodes run on the cells' hosts (cluster.ModelHosts).
        model_spec, model_name = self._model() if not cfg.cluster else (None, "")
        spawn = Spawner()
        model = ModelService(model_spec, logs, spawn)
        progress = Progress(len(todo), earlier)
        workers = []
        try:
            model.ensure_running()
            for i in range(n):
                workers.append(self._worker(i, model_name, model, logs))
            robot = cfg.suites.robot_label(cfg.bringup_args)
            what = f"{n} worker(s), each a robot ({robot}) and an agent" + (
                ", sharing one action-model node" if model_spec else "") + (
                f", as Ray actors on the cluster at {cfg.cluster} ({cfg.cell_resources} "
                "each; the workers on one node share its action-model node)"
                if cfg.cluster else "")
            progress.say(f"[eval] starting {what}; logs in {logs}")
            threads = [threading.Thread(target=self._drain_guarded,
                                        args=(w, queue, progress, digest),
                                        name=f"eval-worker-{w.index}") for w in workers]
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(0.2)
        finally:
            progress.close()
            for w in workers:
                w.close()
            if self._hosts is not None:
                self._hosts.close()
            model.stop()
            spawn.close()
            for s, handler in previous.items():
                signal.signal(s, handler)
            rclpy.try_shutdown()
        if self._crashed:
            print(f"[eval] the harness failed ({'; '.join(self._crashed)}); finished episodes "
                  "are recorded, run the same command again to finish the rest", flush=True)
            return 1
        if self._stop.is_set():
            print("[eval] interrupted: finished episodes are recorded; run the same command "
                  "again to finish the rest", flush=True)
            return 130
        return 0

    def _worker(self, index: int, model_name: str, model: ModelService, logs: Path):
        cfg = self.config
        ns = self._worker_namespace(index)
        if not cfg.cluster:
            station = cfg.suites.station(index, self._worker_args(ns, model_name), logs)
            return Worker(index, ns, station, logs, model, cfg.record, self._stop)
        from .cluster import ModelHosts, RayWorker

        if self._hosts is None:
            self._hosts = ModelHosts(lambda host_ns, robot: self._model(host_ns, robot)[0],
                                     f"{self._run_id}_node", cfg.model_resources)
        suites = sorted({e.suite for e in cfg.episodes})
        return RayWorker(index, ns, suites, self._worker_args(ns, ""), cfg.record,
                         cfg.cell_resources, self._hosts, self._stop)

    def _drain_guarded(self, worker: Worker, *args) -> None:
        """A worker thread that fails stops the evaluation instead of vanishing."""
        try:
            self._drain(worker, *args)
        except Exception as err:  # noqa: BLE001 - reported, and the evaluation stops
            self._crashed.append(f"worker {worker.index}: {type(err).__name__}: {err}")
            traceback.print_exc()
            self._stop.set()

    def _drain(self, worker: Worker, queue: EpisodeQueue, progress: Progress,
               digest: str) -> None:
        loaded = None
        while not self._stop.is_set():
            episode = queue.take(loaded)
            if episode is None:
                return
            loaded = (episode.suite, episode.task_id)
            progress.episode_started()
            try:
                record = self._episode(worker, episode, progress)
            except Interrupted:
                progress.episode_ended(None, f"[eval] {episode.key}: interrupted, not recorded")
                return
            record.update(episode=episode.key, suite=episode.suite, task_id=episode.task_id,
                          init_state_index=episode.init_state_index, seed=episode.seed,
                          worker=worker.index, config_hash=digest,
                          finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
            run_dir = Path(record["run_dir"])
            if run_dir.exists():
                keep = self.config.keep == "all" or (
                    self.config.keep == "failed" and record["outcome"] != "success")
                if not keep:
                    prune_files(run_dir)
                    record["video"] = None
            self.folder.append(record)
            detail = record.get("error") or record.get("summary", "")
            progress.episode_ended(record, f"[eval] {episode.key}: {record['outcome']} "
                                           f"({record['wall_time_s']:.1f} s, worker "
                                           f"{worker.index}) {detail[:160]}")

    def _episode(self, worker: Worker, episode: Episode, progress: Progress) -> dict:
        run_dir = self.folder.episodes_path / episode.folder
        errors = []
        started = time.monotonic()
        for attempt in range(1, ATTEMPTS + 1):
            if run_dir.exists():  # an earlier attempt's, or a killed evaluation's, files
                shutil.rmtree(run_dir)
            try:
                if not worker.serves(episode):
                    t0 = time.monotonic()
                    worker.start(episode, self.config.startup_timeout)
                    progress.say(f"[eval] worker {worker.index} ready "
                                 f"({time.monotonic() - t0:.1f} s)"
                                 + (f" on {worker.host}" if worker.host else ""))
                t0 = time.monotonic()
                record = worker.run(episode, run_dir, self.config.limits)
                return {**record, "attempts": attempt, "run_dir": str(run_dir),
                        "wall_time_s": round(time.monotonic() - t0, 3)}
            except Cancelled:
                raise Interrupted from None
            except EpisodeRefused as err:
                errors.append(str(err))
                break
            except Exception as err:  # noqa: BLE001 - a harness bug must not lose the episode
                if not isinstance(err, HarnessError):
                    with open(self.folder.path / "logs" / "harness-errors.log", "a") as log:
                        log.write(f"{episode.key} attempt {attempt}:\n{traceback.format_exc()}\n")
                    err = f"{type(err).__name__}: {err} (traceback in logs/harness-errors.log)"
                errors.append(f"attempt {attempt}: {err}")
                progress.say(f"[eval] worker {worker.index}, {episode.key} attempt {attempt}: "
                             f"{err}; restarting the worker")
                worker.stop()
        return {"outcome": "error", "error": "; ".join(errors), "attempts": len(errors),
                "run_dir": str(run_dir), "wall_time_s": round(time.monotonic() - started, 3),
                "native_success": None, "operator_verdict": None}

    def _title(self) -> str:
        a = self.config.bringup_args
        planner = a["planner"] or ("api" if a["model"] else "scripted")
        model = f" ({a['model']})" if a["model"] else ""
        am = a["action_model"] or a["am_backend"]
        return (f"RPent evaluation: planner {planner}{model}, action model {am}, "
                f"{self.config.suites.robot_label(a)}")

    def _description(self) -> str:
        c = self.folder.config()
        return (f"Configuration {c.get('config_hash', '')}, commit "
                f"{(c.get('git_commit') or 'unknown')[:12]}; step cap "
                f"{self.config.limits.max_episode_steps}, turn cap "
                f"{self.config.limits.max_turns}. Settings and package versions: config.json.")
