"""Child processes run and stopped cleanly (bounded start-up, logs to a file, never
outliving their parent), the command line that starts a node with its parameters, free
ports, and waiting on a condition. The bring-up, the evaluation workers, the agent and the
tests share them."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Optional, Sequence


def xdist_worker_index() -> Optional[int]:
    """0, 1, ... in a pytest-xdist worker (PYTEST_XDIST_WORKER=gw0, gw1, ...); else None."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else None


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


def wait_until(predicate, timeout: float, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"{what} not met within {timeout:g} s")


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
