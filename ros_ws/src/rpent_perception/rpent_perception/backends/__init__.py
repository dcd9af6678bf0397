"""Segmentation backends: text query + camera image -> detections.

A backend is plain Python (no rclpy). The perception node picks one with its ``backend``
parameter; ``perception_node.main(backend=...)`` serves any other
:class:`SegmentationBackend` behind the same services.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np


class SegmentationError(RuntimeError):
    """The backend could not segment; the message says why and what to do."""


class SegmentationBackend(ABC):
    name = "custom"

    @abstractmethod
    def segment(self, camera: str, rgb: np.ndarray, query: str) -> list:
        """``Detection``s (masks the size of ``rgb``) of what ``query`` names, best first."""

    def close(self) -> None:
        """Release connections."""
