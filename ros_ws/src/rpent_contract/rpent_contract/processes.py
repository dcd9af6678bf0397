"""Run node executables as child processes: bounded start-up, logs to a file, clean stop.

Used by the tests and the bench scripts; the processes get a ROS graph of their own.
"""
from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Optional, Sequence


_DOMAIN_CLAIM: Optional[int] = None  # the lock file's descriptor, held while this process lives


def xdist_worker_index() -> Optional[int]:
    """0, 1, ... in a pytest-xdist worker (PYTEST_XDIST_WORKER=gw0, gw1, ...); else None."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None


def _claim_domain(low: int = 20, high: int = 99) -> int:
    """A domain in [low, high] no other process of this machine has claimed: the first whose
    lock file (in the temp folder) this process can lock. The kernel drops the lock when the
    process ends, however it ends. pytest-xdist workers start their search one apart from a
    point their run shares, so they take different domains even without lock files."""
    global _DOMAIN_CLAIM
    import fcntl
    import tempfile

    index = xdist_worker_index()
    seed = os.environ.get("PYTEST_XDIST_TESTRUNUID") if index is not None else None
    span = high - low + 1
    start = random.Random(seed or os.getpid()).randrange(span) + (index or 0)
    for i in range(span):
        domain = low + (start + i) % span
        path = os.path.join(tempfile.gettempdir(), f"rpent-ros-domain-{domain}.lock")
        try:  # an existing file without O_CREAT: fs.protected_regular refuses that on
            fd = os.open(path, os.O_RDONLY)  # another user's file in /tmp
        except FileNotFoundError:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
            except OSError:
                continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        _DOMAIN_CLAIM = fd
        return domain
    return low + start % span  # no lock file could be made: unclaimed, as before


def isolate_ros_graph() -> int:
    """Give this test session a ROS domain of its own, on loopback only; return the domain.

    ``RPENT_TEST_DOMAIN`` fixes it (under pytest-xdist, worker N uses it + N + 1); otherwise
    a free one in 20-99 is claimed (:func:`_claim_domain`), so parallel test workers, and
    other sessions on the machine, never share a graph."""
    if _DOMAIN_CLAIM is not None:
        return int(os.environ["ROS_DOMAIN_ID"])
    fixed, index = os.environ.get("RPENT_TEST_DOMAIN"), xdist_worker_index()
    if fixed is not None:
        domain = int(fixed) + (index + 1 if index is not None else 0)
    else:
        domain = _claim_domain()
    os.environ["ROS_DOMAIN_ID"] = str(domain)
    if os.environ.get("ROS_DISTRO", "") in ("humble", "iron"):
        os.environ["ROS_LOCALHOST_ONLY"] = "1"
    else:
        os.environ.pop("ROS_LOCALHOST_ONLY", None)
        os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    return domain


def node_executable(package: str, executable: str) -> str:
    """Path `ros2 run <package> <executable>` would run."""
    from ament_index_python.packages import get_package_prefix

    path = Path(get_package_prefix(package)) / "lib" / package / executable
    if not path.exists():
        raise FileNotFoundError(f"{path} not found; build the workspace (scripts/setup.sh)")
    return str(path)


def _yaml(value) -> str:
    """A parameter value as the YAML rcl parses after ``-p name:=``, keeping its type
    (strings stay strings even when empty or when they look like numbers)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_yaml(v) for v in value) + "]"
    return repr(value)


def ros_args(parameters: dict, namespace: str = "", remaps: Optional[dict] = None,
             params_files: Sequence = ()) -> list[str]:
    """``--ros-args``: parameter files first, then single values (which override them)."""
    args = ["--ros-args"]
    for path in params_files:
        args += ["--params-file", str(path)]
    if namespace:
        args += ["-r", f"__ns:=/{namespace.strip('/')}"]
    for key, value in parameters.items():
        args += ["-p", f"{key}:={_yaml(value)}"]
    for src, dst in (remaps or {}).items():
        args += ["-r", f"{src}:={dst}"]
    return args


def die_with_parent() -> None:
    """Runs in the child before exec: the kernel sends it SIGINT when its parent dies, so
    a killed harness never leaves nodes driving a robot (SIGINT: a recorder still closes
    its bag). Linux only; elsewhere the parent's own clean-up is all there is.

    A blocked signal stays blocked through exec, and a parent may block the very signals
    that stop its children (Ray's workers block SIGINT): the child unblocks them."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGINT)  # PR_SET_PDEATHSIG


try:  # loaded before any fork: the child must not import or allocate before exec
    import ctypes

    _PRCTL = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


class LoggedProcess:
    """A command in its own process group, its output in a log file, stopped cleanly.

    It dies with the thread that started it (see :func:`die_with_parent`): start it from
    a thread that outlives it.
    """

    def __init__(self, cmd: Sequence[str], log_path: Path, name: str):
        self.name = name
        self.log_path = Path(log_path)
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(list(cmd), stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=die_with_parent)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        if not self._log.closed:  # stop() closes it; the file stays readable
            self._log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self, timeout: float = 15.0, signum: int = signal.SIGINT) -> Optional[int]:
        """``signum`` (a clean shutdown: Ctrl-C, or SIGTERM from a service manager), then
        SIGKILL the whole group if it does not exit in time."""
        if self.alive():
            os.killpg(self.proc.pid, signum)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        try:  # children the node left behind
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._log.close()
        return self.proc.returncode


class NodeProcess(LoggedProcess):
    """A node executable as a :class:`LoggedProcess`, its log ``<log_dir>/<name>.log``."""

    def __init__(self, package: str, executable: str, parameters: dict, log_dir: Path,
                 namespace: str = "", name: Optional[str] = None,
                 params_file: Optional[str] = None, remaps: Optional[dict] = None):
        name = name or executable
        files = [params_file] if params_file else []
        cmd = [node_executable(package, executable)] + ros_args(parameters, namespace, remaps,
                                                                files)
        super().__init__(cmd, Path(log_dir) / f"{name}.log", name)


def wait_until(predicate, timeout: float, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what} not met within {timeout:g} s")


def answered_once(call, what: str, timeout: float = 60.0, retry_after: float = 3.0):
    """``call()`` (a request that returns a future) again until one future is answered;
    return that answer. A server drops answers to a client it has not discovered yet, and
    a client's wait for the server sees only the request side: a burst measured before one
    answer came back would count those drops."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        future = call()
        try:
            return wait_until(future.done, retry_after, what=what) and future.result()
        except TimeoutError:
            continue
    raise TimeoutError(f"{what} never answered within {timeout:g} s")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now, for a server a test or benchmark starts next
    (another process may take it in between; servers that can, bind port 0 instead)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_port_pair(host: str = "127.0.0.1") -> int:
    """A free TCP port whose successor is free too (a twin's port and its SAM3 server)."""
    while True:
        port = free_port(host)
        try:
            with socket.socket() as s:
                s.bind((host, port + 1))
            return port
        except OSError:
            continue
