"""The simulator's own segmentation (ground truth), through the robot's ``sim/segment``."""
from __future__ import annotations

from typing import Callable

import numpy as np

from . import SegmentationBackend


class SimSegmentation(SegmentationBackend):
    """``segment(camera, query)`` asks the simulator, which renders the current scene itself:
    the image handed in only fixes the size the masks must have."""

    name = "sim"

    def __init__(self, ask: Callable[[str, str], list]):
        self._ask = ask

    def segment(self, camera: str, rgb: np.ndarray, query: str) -> list:
        return self._ask(camera, query)
