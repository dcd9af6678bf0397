"""Start a bring-up without ``ros2 launch`` (the PyPI-wheel setup, CI).

    python -m rpent.start libero_sim task_id:=3 dashboard:=true
    python -m rpent.start --list                  # bring-ups and their arguments

It starts exactly the nodes :mod:`rpent.bringup` describes, with the same parameters a
launch file would pass, prefixes each node's output with its name, stops everything on
Ctrl-C or when the agent finishes, and exits with the agent's exit code. It is not a
launch system: no events, no substitutions, no composition.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Optional

from .bringup import BRINGUPS, NodeSpec, describe

STOP_TIMEOUT = 15.0


class Running:
    """One node process whose output is copied to ours, each line prefixed with its name."""

    def __init__(self, spec: NodeSpec, out_lock: threading.Lock):
        self.spec = spec
        self.label = f"{spec.namespace}/{spec.name}".lstrip("/")
        self.proc = subprocess.Popen(spec.argv(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     text=True, bufsize=1)
        self._lock = out_lock
        self._pump = threading.Thread(target=self._copy_output, daemon=True)
        self._pump.start()

    def _copy_output(self):
        for line in self.proc.stdout:
            with self._lock:
                sys.stdout.write(f"[{self.label}] {line}")
                sys.stdout.flush()

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
    interrupted = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: interrupted.set())
    signal.signal(signal.SIGTERM, lambda *_: interrupted.set())
    code: Optional[int] = None
    try:
        for spec in specs:
            started.append(Running(spec, lock))
        names = ", ".join(r.label for r in started)
        print(f"[rpent.start] {bringup}: started {names}", flush=True)
        required = [r for r in started if r.spec.required]
        while code is None and not interrupted.is_set():
            for r in started:
                rc = r.proc.poll()
                if rc is None:
                    continue
                if r.spec.required:
                    code = rc
                else:
                    print(f"[rpent.start] {r.label} exited with code {rc}; stopping the run "
                          f"(its output above says why)", flush=True)
                    code = rc or 1
                break
            if not required and all(r.proc.poll() is not None for r in started):
                code = 0
            time.sleep(0.1)
        if interrupted.is_set() and code is None:
            print("[rpent.start] interrupted: stopping every node", flush=True)
            code = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut cleanup
        for r in started:
            r.stop()
        deadline = time.monotonic() + STOP_TIMEOUT
        for r in started:
            try:
                r.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"[rpent.start] {r.label} did not stop in {STOP_TIMEOUT:g} s: killed",
                      flush=True)
                r.kill()
                r.proc.wait(5)
            r.wait_output()
        signal.signal(signal.SIGINT, previous)
    return code


def _usage() -> str:
    lines = ["usage: python -m rpent.start BRINGUP [name:=value ...]", ""]
    for b in BRINGUPS.values():
        lines.append(f"{b.name}: {b.summary}")
        lines += [f"    {a.name:<18} {a.default!r:<16} {a.help}" for a in b.arguments]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "--list"):
        print(_usage())
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
    except (ValueError, FileNotFoundError) as err:
        print(f"[rpent.start] {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
