"""Code as policy: the model writes Python that calls the robot's tools as ``robo.<tool>(...)``.

:class:`CodeRunner` runs each snippet in one long-lived sandbox process
(:mod:`rpent_agent.code_sandbox`: no files, network or processes of its own), answers its
``robo`` calls through the toolkit (so every call is checked, logged and counted as any tool
call is), and holds each snippet to a time limit and a number of robot calls. Variables
persist from snippet to snippet within a run; a snippet stopped hard (past its time limit
by more than a grace period) costs them, and the next snippet is told so. Every snippet,
what it printed, its error and its robot calls are saved under ``code_policy/``.
"""
from __future__ import annotations

import dataclasses
import json
import queue
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

# After the time limit the sandbox stops the snippet itself; past this grace it is killed.
KILL_GRACE_S = 5.0
START_TIMEOUT_S = 30.0
FINISHED = "the run finished (robo.finish): nothing after it runs"


def jsonable(value):
    """Tool data as plain JSON values for the sandbox (arrays as lists, dataclasses and
    objects with attributes as dicts)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "__dict__"):
        return {k: jsonable(v) for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)


class CodeRunner:
    """``call(tool, arguments) -> ToolResult`` runs a robot tool; ``allowed`` names the tools
    a snippet may call; ``is_finished()`` tells that the run has ended (``robo.finish``)."""

    def __init__(self, call: Callable, allowed, folder: Path, is_finished: Callable[[], bool],
                 timeout: float = 120.0, max_calls: int = 100):
        self._call, self._allowed, self._is_finished = call, set(allowed), is_finished
        self.folder = Path(folder)
        self.timeout, self.max_calls = timeout, max_calls
        self._proc: Optional[subprocess.Popen] = None
        self._lines: queue.Queue = queue.Queue()
        self._count = 0
        self._lost_note = ""

    # --- the sandbox process -------------------------------------------------------------
    def _start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        log = open(self.folder / "sandbox.log", "ab")  # noqa: SIM115 - the child's stderr
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "rpent_agent.code_sandbox"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=log, cwd=tempfile.gettempdir(), close_fds=True,
            start_new_session=True)
        log.close()
        self._lines = queue.Queue()
        threading.Thread(target=self._read, args=(self._proc, self._lines), daemon=True,
                         name="code-sandbox").start()
        ready = self._next(time.monotonic() + START_TIMEOUT_S)
        if ready is None or not ready.get("ready"):
            self.close()
            raise RuntimeError(f"the code sandbox did not start; see {self.folder}/sandbox.log")

    @staticmethod
    def _read(proc, lines: queue.Queue) -> None:
        for line in proc.stdout:
            lines.put(json.loads(line))
        lines.put(None)  # the process ended

    def _next(self, deadline: float) -> Optional[dict]:
        try:
            return self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None

    def _send(self, message: dict) -> None:
        self._proc.stdin.write((json.dumps(message) + "\n").encode())
        self._proc.stdin.flush()

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(5)
        self._proc = None

    # --- snippets ------------------------------------------------------------------------
    def run(self, code: str):
        """Run one snippet; returns (ok, text for the model)."""
        self._count += 1
        name = f"snippet_{self._count:03d}"
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"{name}.py").write_text(code)
        notes = [self._lost_note] if self._lost_note else []
        self._lost_note = ""
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        calls: list = []
        started = time.monotonic()
        deadline = started + self.timeout
        self._send({"run": code, "timeout": self.timeout})
        done = None
        while done is None:
            message = self._next(deadline + KILL_GRACE_S)
            if message is None:  # hung in native code, or it died: variables are gone
                self.close()
                why = (f"the snippet ran past its time limit ({self.timeout:g} s) and did not "
                       "stop; it was killed")
                done = {"output": "", "error": why}
                self._lost_note = ("the previous snippet was killed: variables from earlier "
                                   "snippets are gone")
                break
            if "done" in message:
                done = message["done"]
            elif "call" in message:
                self._send(self._answer(message, calls, deadline))
        record = {"seconds": round(time.monotonic() - started, 3), **done, "calls": calls}
        (self.folder / f"{name}.json").write_text(json.dumps(record, indent=1))
        if done["error"] == FINISHED:
            done["error"] = None
            notes.append(FINISHED)
        text = "\n".join(notes + [
            f"{name}: {len(calls)} robot call(s), {record['seconds']:.1f} s",
            "output:\n" + (done["output"].rstrip() or "(nothing printed)")]
            + ([f"error:\n{done['error']}"] if done["error"] else []))
        return done["error"] is None, text

    def _answer(self, message: dict, calls: list, deadline: float) -> dict:
        tool, arguments = message["call"], message.get("args") or {}
        if self._is_finished():
            return {"stop": FINISHED}
        if time.monotonic() > deadline:
            return {"stop": f"the snippet ran past its time limit ({self.timeout:g} s)"}
        if len(calls) >= self.max_calls:
            return {"stop": f"the snippet used its {self.max_calls} robot calls "
                            "(code_max_calls); end it and write another"}
        if tool not in self._allowed:
            result = {"ok": False, "text": f"robo.{tool} does not exist; robo offers "
                                           f"{', '.join(sorted(self._allowed))}", "data": {}}
        elif not isinstance(arguments, dict):
            result = {"ok": False, "text": "pass tool arguments by keyword", "data": {}}
        else:
            answer = self._call(tool, arguments)
            result = {"ok": answer.ok, "text": answer.text, "data": jsonable(answer.data)}
        calls.append({"tool": tool, "arguments": arguments, "ok": result["ok"],
                      "text": result["text"][:500]})
        if self._is_finished():
            return {"stop": FINISHED}
        return {"result": result}
