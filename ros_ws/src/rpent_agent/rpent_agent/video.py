"""The episode video: one frame per executed control step, all cameras side by side.

Frames are taken from the camera topics when the robot's episode step advances, so the
video shows the motion at the control rate and skips the time the planner spends thinking.
A camera slower than the control rate (``camera_rate``) has its frames held over the steps
between them, so the video still lasts as long as the motion did.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Optional

import cv2
import numpy as np

from rpent_bag.video import write_mp4


class EpisodeVideo:
    def __init__(self, fps: float, max_frames: int = 20_000):
        self.fps = fps
        self.max_frames = max_frames
        self._frames: list[np.ndarray] = []
        self._last_step: Optional[int] = None
        self._lock = threading.Lock()
        self.dropped = 0

    def offer(self, step: int, images: dict) -> None:
        """Record ``images`` (camera -> RGB array) if the episode advanced to ``step``."""
        if not images or step == self._last_step:
            return
        with self._lock:
            last, self._last_step = self._last_step, step
            # The steps since the last frame; a new episode (a lower step) starts afresh.
            repeat = step - last if last is not None and step > last else 1
            room = self.max_frames - len(self._frames)
            if repeat > room:
                self.dropped += repeat - max(room, 0)
                repeat = room
            if repeat <= 0:
                return
            height = max(im.shape[0] for im in images.values())
            tiles = [im if im.shape[0] == height else cv2.resize(
                im, (int(im.shape[1] * height / im.shape[0]), height)) for im in images.values()]
            self._frames.extend([np.concatenate(tiles, axis=1)] * repeat)

    def __len__(self) -> int:
        return len(self._frames)

    def write(self, path) -> Optional[Path]:
        """Write an H.264 MP4 (plays in browsers); None when no frame was recorded."""
        with self._lock:
            frames, self._frames = self._frames, []
        if not frames:
            return None
        h, w = frames[0].shape[:2]
        # A camera may change size mid-run; the video keeps the first frame's size.
        write_mp4(path, (f if f.shape[:2] == (h, w) else cv2.resize(f, (w, h)) for f in frames),
                  self.fps)
        return Path(path)
