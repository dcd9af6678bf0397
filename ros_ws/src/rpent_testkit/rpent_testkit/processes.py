"""A ROS graph of its own for a test session or benchmark, node executables started in
it, and requests retried until a server that has just come up answers."""
from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Optional

from rpent_common.processes import (
    LoggedProcess,
    node_executable,
    ros_args,
    wait_until,
    xdist_worker_index,
)

_DOMAIN_CLAIM: Optional[int] = None  # the lock file's descriptor, held while this process lives


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
