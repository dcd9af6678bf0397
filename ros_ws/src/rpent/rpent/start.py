"""Start a bring-up without ``ros2 launch`` (the PyPI-wheel setup, CI).

    python -m rpent.start libero_sim task_id:=3 dashboard:=true
    python -m rpent.start --list                  # bring-ups and their arguments

It starts exactly the nodes :mod:`rpent.bringup` describes, with the same parameters a
launch file would pass, prefixes each node's output with its name, stops everything on
Ctrl-C, SIGTERM, SIGHUP (a closed terminal, a dropped SSH session) or when the agent
finishes, and exits with the agent's exit code. Its nodes never outlive it: were it killed
outright, the kernel interrupts them. It is not a launch system: no events, no
substitutions, no composition.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Optional

from rpent_common.processes import die_with_parent
from rpent_contract.contributions import ContributionError

from .bringup import NodeSpec, bringups, describe

STOP_TIMEOUT = 15.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def say(text: str, end: str = "\n") -> None:
    """Print, unless the terminal is gone (SIGHUP): output is then dropped, but the pipes
    keep being drained so no node blocks on a full one while it shuts down."""
    try:
        sys.stdout.write(text + end)
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


class Running:
    """One node process whose output is copied to ours, each line prefixed with its name."""

    def __init__(self, spec: NodeSpec, out_lock: threading.Lock):
        self.spec = spec
        self.label = f"{spec.namespace}/{spec.name}".lstrip("/")
        self.proc = subprocess.Popen(spec.argv(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=die_with_parent, text=True, bufsize=1)
        self._lock = out_lock
        self._pump = threading.Thread(target=self._copy_output, daemon=True)
        self._pump.start()

    def _copy_output(self):
        for line in self.proc.stdout:
            with self._lock:
                say(f"[{self.label}] {line}", end="")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)

    def wait_output(self) -> None:
        self._pump.join(5)


def run(bringup: str, given: dict) -> int:
    specs = describe(bringup, given)
    lock = threading.Lock()
    started: list[Running] = []
    received: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _frame: received.append(signum))
                for s in STOP_SIGNALS}
    code: Optional[int] = None
    try:
        for spec in specs:
            started.append(Running(spec, lock))
        names = ", ".join(r.label for r in started)
        say(f"[rpent.start] {bringup}: started {names}")
        required = [r for r in started if r.spec.required]
        while code is None and not received:
            for r in started:
                rc = r.proc.poll()
                if rc is None:
                    continue
                code, why = r.spec.exit_outcome(rc)
                if not r.spec.required:
                    say(f"[rpent.start] {why}; stopping the run")
                break
            if not required and all(r.proc.poll() is not None for r in started):
                code = 0
            time.sleep(0.1)
        if received and code is None:
            say(f"[rpent.start] {signal.Signals(received[0]).name}: stopping every node")
            code = 128 + received[0]  # as a shell reports a process ended by that signal
    finally:
        for s in STOP_SIGNALS:  # a second Ctrl-C must not cut the clean-up short
            signal.signal(s, signal.SIG_IGN)
        for r in started:
            r.stop()
        deadline = time.monotonic() + STOP_TIMEOUT
        for r in started:
            try:
                r.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                say(f"[rpent.start] {r.label} did not stop in {STOP_TIMEOUT:g} s: killed")
                r.kill()
                r.proc.wait(5)
            r.wait_output()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return code


def _usage() -> str:
    lines = ["usage: python -m rpent.start BRINGUP [name:=value ...]", ""]
    for b in bringups().values():
        lines.append(f"{b.name}: {b.summary}")
        lines += [f"    {a.name:<18} {a.default!r:<16} {a.help}" for a in b.arguments]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "--list"):
        try:
            print(_usage())
        except ContributionError as err:
            print(f"[rpent.start] {err}", file=sys.stderr)
            return 2
        return 0 if argv else 2
    given = {}
    for item in argv[1:]:
        name, sep, value = item.partition(":=")
        if not sep:
            print(f"[rpent.start] arguments are name:=value (as with ros2 launch), got '{item}'",
                  file=sys.stderr)
            return 2
        given[name] = value
    try:
        return run(argv[0], given)
    except (ValueError, FileNotFoundError, ContributionError) as err:
        print(f"[rpent.start] {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
