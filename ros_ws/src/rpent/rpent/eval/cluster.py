"""``rpent eval --cluster``: the evaluation's workers as Ray actors ("cells") on a cluster.

The driver (the ``rpent eval`` process) keeps everything an evaluation owns: the episode
queue, ``results.jsonl``, resuming, the progress line and the report. Each cell is an actor
that holds one worker of the evaluation (its robot, its agent, and its perception when the
bring-up starts one) on whatever node Ray places it, with the CPUs it asks for. The cells
of one node share that node's action-model node, which a model host (an actor pinned to
the node, with the GPUs the model asks for) runs. A cell's ROS graph stays on its host (DDS
discovery is limited to localhost there), so no DDS traffic crosses hosts; an episode's run
folder comes back to the driver's evaluation folder as an archive when the episode ends.

A cell whose node disappears fails its episode as a harness error; the driver's usual retry
then starts a new cell wherever Ray finds room and runs the episode again. Every cell checks
at start that its node runs the same git commit and package versions as the driver.

Ray is optional (the ``cluster`` extra); nothing here is imported without ``--cluster``.
"""
from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

from rpent_contract.extras import require

from .results import _git_commit, package_versions
from .workers import Cancelled, Episode, EpisodeLimits, HarnessError

# How often the driver looks at the evaluation's stop event while a cell works.
POLL_S = 0.2
# How long a node's model host may take to be placed and start its model node.
MODEL_HOST_TIMEOUT_S = 120.0


def identity() -> dict:
    """What must be the same on every node for episodes to be comparable."""
    import platform

    return {"git_commit": _git_commit(), "python": platform.python_version(),
            "packages": package_versions()}


def differences(mine: dict, theirs: dict) -> list:
    """Human-readable differences between two :func:`identity` answers."""
    found = [f"{key}: {theirs.get(key)} here, {mine.get(key)} on the driver"
             for key in ("git_commit", "python") if mine.get(key) != theirs.get(key)]
    packages, other = mine.get("packages", {}), theirs.get("packages", {})
    found += [f"{name} {other.get(name)} here, {packages.get(name)} on the driver"
              for name in sorted(set(packages) | set(other))
              if packages.get(name) != other.get(name)]
    return found


def connect(address: str) -> dict:
    """Join the Ray cluster at ``address`` ('auto': the one ``ray start`` runs here);
    return its resources."""
    ray = require("cluster", "rpent eval --cluster", "ray")
    if not ray.is_initialized():
        try:
            ray.init(address=address, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise ValueError(f"cannot join the Ray cluster at '{address}' ({err}); start one "
                             "with ray start --head (in a shell with scripts/env.sh sourced) "
                             "or give its address") from None
    return ray.cluster_resources()


def _join_host(driver: dict, what: str) -> Path:
    """In a new actor: refuse a node that runs other code than the driver, keep ROS discovery
    on this host, and return a scratch folder for ``what``."""
    wrong = differences(driver, identity())
    if wrong:
        raise ValueError(f"this node does not run what the driver runs: {'; '.join(wrong)}; "
                         "install the same commit and packages on every node")
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ["ROS_LOCALHOST_ONLY"] = "1"  # Humble's name for it
    return Path(tempfile.mkdtemp(prefix=f"rpent-{what}-"))


def _where() -> tuple:
    """(a label for messages, the Ray node id) of the calling actor."""
    import socket

    import ray

    node = ray.get_runtime_context().get_node_id()
    return f"{socket.gethostname()} (Ray node {node[:12]})", node


class ModelHost:
    """The action-model node shared by the cells of one Ray node, in an actor pinned there."""

    def __init__(self, spec, driver: dict):
        from .workers import ModelService, Spawner

        self.scratch = _join_host(driver, "model")
        self._spawn = Spawner()
        self._model = ModelService(spec, self.scratch / "logs", self._spawn)

    def ensure_running(self) -> None:
        """Start the node, or start it again if it died."""
        self._model.ensure_running()

    def dead(self) -> Optional[str]:
        return self._model.dead()

    def close(self) -> None:
        self._model.stop()
        self._spawn.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


class ModelHosts:
    """The driver's model hosts, one per Ray node that runs cells, created as cells land."""

    def __init__(self, spec_for, prefix: str, resources: dict):
        self._spec_for, self._prefix, self._resources = spec_for, prefix, resources
        self._hosts: dict = {}  # Ray node id -> (actor, the model node's full name)
        self._made = 0  # hosts made so far: each gets a namespace of its own
        self._lock = threading.Lock()

    def model_on(self, node: str, robot: str) -> str:
        """The name of the model node on Ray node ``node``, (re)started if needed; a new one
        reads its action space from the robot in namespace ``robot`` (on that node). ''
        when the evaluation runs no model."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        with self._lock:
            if node not in self._hosts:
                namespace = f"{self._prefix}{self._made}"
                self._made += 1
                spec = self._spec_for(namespace, robot)
                if spec is None:
                    return ""
                host = ray.remote(max_restarts=0, **self._resources)(ModelHost).options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
                ).remote(spec, identity())
                self._hosts[node] = (host, f"/{namespace}/action_model")
            host, name = self._hosts[node]
        try:
            ray.get(host.ensure_running.remote(), timeout=MODEL_HOST_TIMEOUT_S)
        except ray.exceptions.RayError as err:
            with self._lock:
                self._hosts.pop(node, None)
            ray.kill(host)
            why = (f"Ray found no room for it there in {MODEL_HOST_TIMEOUT_S:g} s (it asks "
                   f"{self._resources}; see ray status)"
                   if isinstance(err, ray.exceptions.GetTimeoutError)
                   else str(err).strip().splitlines()[-1])
            raise HarnessError(f"the action-model host on Ray node {node[:12]} failed: "
                               f"{why}") from None
        return name

    def dead(self, node: str) -> Optional[str]:
        import ray

        with self._lock:
            held = self._hosts.get(node)
        if held is None:
            return None
        try:
            return ray.get(held[0].dead.remote(), timeout=60.0)
        except ray.exceptions.RayError as err:
            return f"the action-model host on Ray node {node[:12]} is gone ({type(err).__name__})"

    def close(self) -> None:
        import ray

        with self._lock:
            hosts, self._hosts = list(self._hosts.values()), {}
        for host, _name in hosts:
            try:
                ray.get(host.close.remote(), timeout=60.0)
            except ray.exceptions.RayError:
                pass  # its node is gone, and the model with it
            ray.kill(host)


class Cell:
    """One worker of the evaluation inside a Ray actor (see :class:`RayWorker`)."""

    def __init__(self, index: int, namespace: str, suite_names: list, worker_args: dict,
                 record: bool, driver: dict):
        import rclpy

        from .robots import suites_for
        from .workers import ModelService, Spawner, Worker

        self.scratch = _join_host(driver, f"cell{index}")
        rclpy.init(args=[])
        self._stopping = threading.Event()
        self._spawn = Spawner()
        self._model = ModelService(None, self.scratch / "logs", self._spawn)
        station = suites_for(suite_names).station(index, worker_args, self.scratch / "logs")
        self._worker = Worker(index, namespace, station, self.scratch / "logs", self._model,
                              record, self._stopping)

    def where(self) -> tuple:
        return _where()

    def use_model(self, name: str) -> None:
        """Drive through the action-model node ``name`` (its node's, see ModelHosts)."""
        self._worker.station.args["action_model"] = name

    def serves(self, episode: Episode) -> bool:
        return self._worker.serves(episode)

    def dead(self) -> Optional[str]:
        return self._worker.dead()

    def start(self, episode: Episode, timeout: float) -> None:
        self._stopping.clear()
        self._worker.start(episode, timeout)

    def run(self, episode: Episode, limits: EpisodeLimits) -> tuple:
        """(record, the run folder as a tar archive, the folder's path here)."""
        self._stopping.clear()
        run_dir = self.scratch / "episodes" / episode.folder
        shutil.rmtree(run_dir, ignore_errors=True)
        try:
            record = self._worker.run(episode, run_dir, limits)
        finally:
            archive = _pack(run_dir)
            shutil.rmtree(run_dir, ignore_errors=True)
        return record, archive, str(run_dir)

    def interrupt(self) -> None:
        """The evaluation is stopping: the call in progress raises Cancelled."""
        self._stopping.set()

    def stop(self) -> None:
        self._worker.stop()

    def close(self) -> None:
        import rclpy

        self._worker.close()
        self._spawn.close()
        rclpy.try_shutdown()
        shutil.rmtree(self.scratch, ignore_errors=True)


def _pack(folder: Path) -> bytes:
    buffer = io.BytesIO()
    if folder.is_dir():
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            tar.add(folder, arcname=".")
    return buffer.getvalue()


def _unpack(archive: bytes, folder: Path) -> None:
    if not archive:
        return
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        tar.extractall(folder, filter="data")


class RayWorker:
    """The driver's handle on one cell, with the interface of ``workers.Worker`` that the
    evaluation loop uses; the cell is created on the first :meth:`start` and again after a
    :meth:`stop` (a lost node included)."""

    def __init__(self, index: int, namespace: str, suite_names: list, worker_args: dict,
                 record: bool, resources: dict, models: ModelHosts,
                 stopping: threading.Event):
        self.index, self.namespace = index, namespace
        self._cell_args = (suite_names, worker_args, record, identity())
        self._resources, self._models, self._stopping = resources, models, stopping
        self._actor = None
        self.cells = 0
        self.host = self.node = self._ns = ""

    def _call(self, method: str, *args, timeout: Optional[float] = None):
        """Call the cell, watching the evaluation's stop event; a lost cell is a harness
        error (the episode is retried in a new cell)."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        ref = getattr(self._actor, method).remote(*args)
        deadline = None if timeout is None else time.monotonic() + timeout
        interrupted = False
        try:
            while True:
                ready, _ = ray.wait([ref], timeout=POLL_S)
                if ready:
                    return ray.get(ref)
                if self._stopping.is_set() and not interrupted:
                    interrupted = True
                    self._actor.interrupt.remote()
                if deadline is not None and time.monotonic() > deadline:
                    raise GetTimeoutError
        except RayTaskError as err:  # the cell's own exception (HarnessError, Cancelled...)
            raise (err.cause if isinstance(err.cause, Exception) else err) from None
        except GetTimeoutError:
            raise HarnessError(f"worker {self.index} on {self.host or 'its node'} did not "
                               f"answer {method} in {timeout:g} s") from None
        except RayActorError as err:
            self._actor = None
            if not self.host:  # it never started: its creation failed, and says why
                lines = [line.strip() for line in str(err).splitlines() if line.strip()]
                raise HarnessError(f"worker {self.index}'s Ray actor could not start: "
                                   f"{lines[-1] if lines else type(err).__name__}") from None
            raise HarnessError(f"worker {self.index}'s Ray actor on {self.host} was lost "
                               f"({type(err).__name__}: {str(err).splitlines()[0]}); the "
                               "episode is retried in a new one") from None

    def serves(self, episode: Episode) -> bool:
        return self._actor is not None and self._call("serves", episode, timeout=60.0)

    def dead(self) -> Optional[str]:
        if self._actor is None:
            return "not started"
        try:
            return self._call("dead", timeout=60.0) or self._models.dead(self.node)
        except HarnessError as err:
            return str(err)

    def start(self, episode: Episode, timeout: float) -> None:
        import ray

        if self._stopping.is_set():
            raise Cancelled
        if self._actor is None:
            # A thread of its own answers interrupt() while run() or start() works.
            cell = ray.remote(max_restarts=0, max_concurrency=2, **self._resources)(Cell)
            self.cells += 1
            # A new cell may land on the host of a lost one whose nodes still run: a
            # namespace of its own keeps the two apart.
            self._ns = self.namespace if self.cells == 1 else f"{self.namespace}_{self.cells}"
            suites, args, record, driver = self._cell_args
            self._actor = cell.options(scheduling_strategy="SPREAD").remote(
                self.index, self._ns, suites, {**args, "namespace": self._ns}, record, driver)
            self.host = ""
            self.host, self.node = self._call("where", timeout=timeout)
            self._call("use_model", self._models.model_on(self.node, self._ns), timeout=60.0)
        else:
            self._models.model_on(self.node, self._ns)  # restarted if it died
        self._call("start", episode, timeout, timeout=timeout + 30.0)

    def run(self, episode: Episode, run_dir: Path, limits: EpisodeLimits) -> dict:
        record, archive, remote_dir = self._call("run", episode, limits,
                                                 timeout=limits.timeout + 60.0)
        _unpack(archive, run_dir)
        why = self._models.dead(self.node)
        if why:  # as on one machine: a model that died during the run is the harness's fault
            raise HarnessError(f"during the run of {episode.key}: {why}")
        if record.get("video"):
            record["video"] = record["video"].replace(remote_dir, str(run_dir), 1)
        record["host"] = self.host
        return record

    def stop(self) -> None:
        if self._actor is None:
            return
        import ray

        try:
            self._call("stop", timeout=60.0)
            self._call("close", timeout=60.0)
        except HarnessError:
            pass  # lost or stuck: killing it below ends whatever it started
        if self._actor is not None:
            ray.kill(self._actor)
        self._actor = None

    def close(self) -> None:
        self.stop()
