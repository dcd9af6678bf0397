"""The process code-as-policy snippets run in: ``python -m rpent_agent.code_sandbox``.

It reaches nothing but the agent that started it: JSON lines on stdin/stdout. Each snippet
runs in one namespace that lives as long as the process (variables persist within a run),
with ``robo`` in it: ``robo.<tool>(**arguments)`` sends the call to the agent, which runs the
tool and answers. Before any snippet runs the process gives up the rest of the machine for
good: an audit hook refuses opening files, sockets, subprocesses, ``exec``, ``ctypes`` and
the like, the file-descriptor limit stops new descriptors of any kind, and the file-size
limit stops writing files. Modules a snippet may use are loaded before that
(:data:`PRELOADED`); importing any other is refused.

Messages: ``{"run": code, "timeout": s}`` -> any number of ``{"call": tool, "args": {...}}``
each answered by ``{"result": {...}}`` (or ``{"stop": reason}``, which ends the snippet)
-> ``{"done": {"output": printed text, "error": text or null}}``.
"""
from __future__ import annotations

import cmath  # noqa: F401 - loaded for snippets: nothing can be loaded later
import collections  # noqa: F401
import contextlib
import copy  # noqa: F401
import dataclasses  # noqa: F401
import functools  # noqa: F401
import io
import itertools  # noqa: F401
import json
import linecache
import math
import os
import random
import re  # noqa: F401
import resource
import signal
import statistics  # noqa: F401
import sys
import time  # noqa: F401
import traceback

import numpy as np
import numpy.fft  # noqa: F401 - numpy loads these on first use, from disk
import numpy.linalg  # noqa: F401
import numpy.random  # noqa: F401

SNIPPET = "<snippet>"
# Audit events that would reach past the agent: files, network, processes, native code.
REFUSED_PREFIXES = ("open", "socket.", "subprocess.", "os.exec", "os.spawn", "os.posix_spawn",
                    "os.fork", "os.system", "os.kill", "os.remove", "os.rename", "os.rmdir",
                    "os.mkdir", "os.symlink", "os.link", "os.truncate", "os.chmod", "os.chown",
                    "os.listdir", "os.scandir", "os.chdir", "os.putenv", "os.unsetenv",
                    "shutil.", "ctypes.", "_ctypes.", "gc.get_", "sys._getframe",
                    "sys.setprofile", "sys.settrace", "sys.addaudithook", "code.__new__",
                    "marshal.", "pty.", "urllib.", "http.", "ftplib.", "smtplib.", "webbrowser.",
                    "resource.")


PRELOADED = ("math", "cmath", "statistics", "random", "numpy (np, with linalg, fft, random)",
             "json", "re", "itertools", "functools", "collections", "copy", "dataclasses",
             "time")


class SnippetStopped(BaseException):
    """Ends a snippet from outside its control: ``except Exception`` does not catch it."""


class Result:
    """What a tool answered: ``ok``, ``text`` (what the model would read) and ``data``."""

    def __init__(self, ok: bool, text: str, data: dict):
        self.ok, self.text, self.data = ok, text, data

    def __getitem__(self, key):
        return self.data[key]

    def __repr__(self) -> str:
        return f"Result(ok={self.ok}, text={self.text!r})"


class Robo:
    """``robo.<tool>(**arguments)``: a tool call through the agent."""

    def __init__(self, channel):
        self._channel = channel

    def __getattr__(self, tool: str):
        if tool.startswith("_"):
            raise AttributeError(tool)

        def call(**arguments):
            reply = self._channel.ask({"call": tool, "args": arguments})
            if "stop" in reply:
                raise SnippetStopped(reply["stop"])
            result = reply["result"]
            return Result(result["ok"], result["text"], result.get("data", {}))
        call.__name__ = tool
        return call


class Channel:
    def __init__(self, reader, writer):
        self._reader, self._writer = reader, writer
        self.waiting = False  # for an answer: a time limit is the agent's to enforce then

    def send(self, message: dict) -> None:
        self._writer.write((json.dumps(message) + "\n").encode())
        self._writer.flush()

    def ask(self, message: dict) -> dict:
        self.send(message)
        self.waiting = True
        try:
            line = self._reader.readline()
        finally:
            self.waiting = False
        if not line:
            raise SnippetStopped("the agent went away")
        return json.loads(line)


def _refuse(event: str, args) -> None:
    if event == "import":
        raise ImportError(f"module '{args[0]}' is not available in a snippet; these are: "
                          f"{', '.join(PRELOADED)}")
    if event.startswith(REFUSED_PREFIXES):
        raise PermissionError(f"not allowed in a snippet ({event}): a snippet reaches the "
                              "robot and its data only through robo.<tool>(...)")


def _lock_down() -> None:
    """No new file descriptors, no file writes, then the audit hook: for good."""
    highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 1, highest + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    sys.addaudithook(_refuse)


def _run(code: str, timeout: float, namespace: dict, channel: Channel) -> dict:
    output = io.StringIO()
    lines = code.splitlines(keepends=True)
    linecache.cache[SNIPPET] = (len(code), None, lines, SNIPPET)

    def expire(_signum, _frame):
        if not channel.waiting:
            raise SnippetStopped(f"the snippet ran past its time limit ({timeout:g} s)")

    signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    error = None
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            exec(compile(code, SNIPPET, "exec"), namespace)  # noqa: S102 - the sandbox's job
    except SnippetStopped as stop:
        error = str(stop)
    except SyntaxError as err:
        error = "".join(traceback.format_exception_only(type(err), err)).strip()
    except BaseException as err:  # noqa: BLE001 - the model reads what went wrong
        frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == SNIPPET]
        error = "".join(traceback.format_list(frames)
                        + traceback.format_exception_only(type(err), err)).strip()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return {"output": output.getvalue(), "error": error}


def main() -> None:
    reader = sys.stdin.buffer
    writer = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    # Whatever the snippet prints is captured; nothing else may write to the channel.
    sys.stdout = sys.stderr
    channel = Channel(reader, writer)
    namespace = {"__name__": "__snippet__", "robo": Robo(channel), "np": np, "math": math,
                 "json": json, "random": random}
    _lock_down()
    channel.send({"ready": True})
    for line in reader:
        message = json.loads(line)
        channel.send({"done": _run(message["run"], float(message["timeout"]), namespace,
                                   channel)})


if __name__ == "__main__":
    main()
