"""What the two twins share around their physics loop: the scene's items, the twin port,
and a record of how the physics kept up with the wall clock.

The physics loop (franky-sim's 1 kHz loop, or the SO-101 bus emulator's) calls
:meth:`TwinHost.between_steps` after every step; requests from the twin port that read or
change the scene wait for that call, so they never race a step.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Optional

import numpy as np

from .scene import Scene, SceneState
from .twin_port import TwinPortServer

READY = "twin ready:"


class WallClock:
    """Simulated time against wall time: the real-time factor and the share of the wall
    time spent stepping (the rest is the loop's own sleep, or waiting for the CPU)."""

    def __init__(self):
        self.started = time.monotonic()
        self.steps, self.busy = 0, 0.0

    def stepped(self, seconds: float, steps: int = 1) -> None:
        self.steps += steps
        self.busy += seconds

    def report(self, sim_time: float) -> str:
        wall = max(1e-9, time.monotonic() - self.started)
        return (f"physics: {self.steps} steps, {sim_time:.1f} s simulated in {wall:.1f} s: "
                f"real-time factor {sim_time / wall:.2f}; stepping took "
                f"{100.0 * self.busy / wall:.0f} % of the wall time")


class TwinHost:
    """The scene of a running physics model and the twin port's answers about it."""

    def __init__(self, scene: Scene, model, data, xml: str, task: str, seed: int,
                 snapshot_every: int = 1):
        self.scene = scene
        self.items = SceneState(scene, model, data)
        self._model, self._data, self._xml = model, data, xml
        self.task = scene.task(task) if task else scene.tasks[0]
        self.seed = seed
        self.items.place(seed)
        self._requests: "queue.Queue" = queue.Queue()
        self._lock = threading.Lock()
        self._snapshot = (float(data.time), np.array(data.qpos))
        self._every, self._count = max(1, snapshot_every), 0
        self.clock = WallClock()
        self._port: Optional[TwinPortServer] = None

    # --- physics side ------------------------------------------------------------------------
    def between_steps(self) -> None:
        """Run what the port asked, and keep the newest state for the cameras."""
        while True:
            try:
                fn, done, out = self._requests.get_nowait()
            except queue.Empty:
                break
            try:
                out.append(fn())
            except Exception as err:  # handed to the asking thread, which reports it
                out.append(err)
            done.set()
        self._count += 1
        if self._count >= self._every:
            self._count = 0
            with self._lock:
                self._snapshot = (float(self._data.time), np.array(self._data.qpos))

    def _in_physics(self, fn: Callable, timeout: float = 10.0):
        done, out = threading.Event(), []
        self._requests.put((fn, done, out))
        if not done.wait(timeout):
            raise ValueError(f"the physics loop did not come round within {timeout:g} s")
        if isinstance(out[0], Exception):
            raise ValueError(str(out[0]))
        return out[0]

    # --- port side ---------------------------------------------------------------------------
    def serve(self, host: str, port: int) -> TwinPortServer:
        self._port = TwinPortServer({
            "model": lambda: {"xml": self._xml},
            "state": self._state,
            "scene": lambda: self._in_physics(self._describe),
            "reset_scene": self._reset_scene,
            "judge": lambda: self._in_physics(self._judge),
        }, host, port).start()
        return self._port

    def close(self) -> None:
        if self._port is not None:
            self._port.close()

    def _state(self) -> dict:
        with self._lock:
            t, qpos = self._snapshot
        return {"time": t, "qpos": qpos.tolist()}

    def _describe(self) -> dict:
        return {"task": self.task.name, "instruction": self.task.instruction,
                "seed": self.seed, "tasks": [t.name for t in self.scene.tasks],
                "items": {name: {"position": p.tolist(), "orientation": q.tolist()}
                          for name, (p, q) in self.items.poses().items()}}

    def _judge(self) -> dict:
        achieved, why = self.items.judge(self.task)
        return {"achieved": achieved, "why": why, "task": self.task.name}

    def _reset_scene(self, task: str = "", seed: Optional[int] = None) -> dict:
        chosen = self.scene.task(task) if task else self.task
        new_seed = self.seed + 1 if seed is None else int(seed)

        def reset():
            self.items.place(new_seed)
            self.task, self.seed = chosen, new_seed
            return self._describe()
        return self._in_physics(reset)
