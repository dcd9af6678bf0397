"""Twin bring-ups as a user starts them, for the twin tests."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from rpent_common.processes import free_port_pair

ARMS = ["franka", "so101"]


def start(arm: str, log: Path, *args: str) -> tuple[subprocess.Popen, int, list]:
    """A twin bring-up, its output into ``log``; returns (process, twin port, bring-up
    arguments)."""
    port = free_port_pair()
    given = ["twin:=true", f"twin_port:={port}", *args]
    if arm == "franka":
        from rpent_twins.franky_sim import free_loopback_address

        given.append(f"twin_host:={free_loopback_address()}")
    with open(log, "w") as out:  # a file: a pipe nobody reads would stall the run when full
        proc = subprocess.Popen([sys.executable, "-m", "rpent.start", arm, *given],
                                stdout=out, stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    proc.log = log
    return proc, port, given


def stop(proc: subprocess.Popen, timeout: float = 60.0) -> str:
    """Ctrl-C the run (SIGKILL if it does not end in time); its output."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
    return proc.log.read_text()


def twin_host(given: list) -> str:
    return next((a.split(":=", 1)[1] for a in given if a.startswith("twin_host:=")),
                "127.0.0.1")
