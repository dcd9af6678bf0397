"""The episode video: all cameras side by side, as long as the run took; and a clip of each
span the agent marks (a call of a tool that moves the robot).

Frames come from the camera topics, placed in time by their stamps, so the time the planner
spends thinking shows the scene held as it was. One thing is not wall time: each executed
control step lasts at least one control period, so a simulator stepping faster than real time
shows the motion at the speed the robot's controller commands it. A camera slower than the
control rate (``camera_rate``) has its frame held over the steps between its frames.
"""
from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Optional, Sequence

import cv2
import numpy as np

from rpent_bag.video import write_mp4


class EpisodeVideo:
    """``fps``: the robot's control rate. ``max_frames`` bounds the video (20 fps: 30 min);
    ``dropped`` counts the frames beyond it."""

    def __init__(self, fps: float, max_frames: int = 36_000):
        self.fps = fps
        self.max_frames = max_frames
        self._period = 1.0 / fps
        self._frames: list[np.ndarray] = []
        self._last_step: Optional[int] = None
        self._end = 0.0  # the stamp the video reaches so far
        self._held = 0.0  # time beyond the steps' periods not yet a whole frame, s
        self._lock = threading.Lock()
        self.dropped = 0

    def offer(self, step: int, images: dict, stamp: float) -> None:
        """The cameras' ``images`` (camera -> RGB array) measured at ``stamp`` (s), with the
        robot at episode step ``step``."""
        if not images:
            return
        with self._lock:
            if self._last_step is None:
                steps, held, self._end = 1, 0.0, stamp
            else:
                # A new episode (a lower step) counts as one step.
                steps = 0 if step == self._last_step else \
                    step - self._last_step if step > self._last_step else 1
                end = max(self._end + steps * self._period, stamp)
                held, self._end = end - self._end - steps * self._period, end
            self._last_step = step
            self._held += held
            holds = math.floor(self._held / self._period + 1e-9)
            self._held -= holds * self._period
            if not steps and not holds:
                return
            frame = self._tile(images)
            # Time that passed without a step shows what the cameras saw before it.
            before = self._frames[-1] if steps and self._frames else frame
            self._append(before, holds)
            self._append(frame, steps)

    def _append(self, frame: np.ndarray, count: int) -> None:
        room = self.max_frames - len(self._frames)
        self.dropped += max(0, count - max(room, 0))
        self._frames.extend([frame] * max(0, min(count, room)))

    @staticmethod
    def _tile(images: dict) -> np.ndarray:
        height = max(im.shape[0] for im in images.values())
        return np.concatenate([im if im.shape[0] == height else cv2.resize(
            im, (int(im.shape[1] * height / im.shape[0]), height)) for im in images.values()],
            axis=1)

    def __len__(self) -> int:
        with self._lock:
            return len(self._frames)

    def write_clips(self, clips: Sequence[tuple]) -> list:
        """Write each of ``clips`` ((path, first frame, end frame): what :meth:`__len__` gave
        at a span's start and at its end) as an MP4 of that span, before :meth:`write`
        takes the frames. Returns the paths written: a span without frames has no clip."""
        with self._lock:
            spans = [(path, self._frames[first:end]) for path, first, end in clips]
        return [p for p in (_write(path, frames, self.fps) for path, frames in spans)
                if p is not None]

    def write(self, path) -> Optional[Path]:
        """Write an H.264 MP4 (plays in browsers); None when no frame was recorded."""
        with self._lock:
            frames, self._frames = self._frames, []
        return _write(path, frames, self.fps)


class CallClips:
    """The spans of the run's tool calls that move the robot, in the episode video's frames:
    each becomes ``<folder>/<n>_<tool>.mp4`` (n counts them from 001) when the run ends."""

    def __init__(self, video: EpisodeVideo, folder: Path):
        self._video, self._folder = video, Path(folder)
        self._open: dict = {}  # tool -> [(clip path, first frame)], oldest first
        self._spans: list = []
        self._lock = threading.Lock()

    def start(self, tool: str) -> None:
        with self._lock:
            number = len(self._spans) + sum(map(len, self._open.values())) + 1
            self._open.setdefault(tool, []).append(
                (self._folder / f"{number:03d}_{tool}.mp4", len(self._video)))

    def end(self, tool: str) -> Optional[Path]:
        """The clip of the call of ``tool`` that ended (the oldest of several at once)."""
        with self._lock:
            started = self._open.get(tool)
            if not started:
                return None
            path, first = started.pop(0)
            self._spans.append((path, first, len(self._video)))
            return path

    def write(self) -> list:
        with self._lock:
            spans = list(self._spans)
        return self._video.write_clips(spans)


def _write(path, frames: list, fps: float) -> Optional[Path]:
    if not frames:
        return None
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    h, w = frames[0].shape[:2]
    # A camera may change size mid-run; the video keeps the first frame's size.
    write_mp4(path, (f if f.shape[:2] == (h, w) else cv2.resize(f, (w, h)) for f in frames),
              fps)
    return Path(path)
