"""Segmentation results as the contract carries them (``Segment`` service), and how a text
query names an object.

A detection is a boolean mask over one camera image with a label and a score. Simulators
serve ``sim/segment`` from their own segmentation rendering and the perception node serves
``perception/segment`` from a model; both answer with the same message, built here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from .images import image_to_numpy, numpy_to_image

# Words that say nothing about which object is meant.
_FILLER = frozenset({"the", "a", "an", "of", "to", "on", "in", "into", "onto", "up", "it",
                     "and", "please", "object"})


@dataclass
class Detection:
    label: str
    score: float  # 0..1
    mask: np.ndarray  # (H, W) bool, True on the object

    def box(self) -> tuple[int, int, int, int]:
        """(x_offset, y_offset, width, height) of the mask's bounding box, px."""
        rows, cols = np.nonzero(self.mask)
        if rows.size == 0:
            return 0, 0, 0, 0
        return (int(cols.min()), int(rows.min()), int(cols.max() - cols.min() + 1),
                int(rows.max() - rows.min() + 1))


def spoken(name: str) -> str:
    """'alphabet_soup_1' -> 'alphabet soup' (how instructions name simulator objects)."""
    return re.sub(r"_\d+$", "", name).replace("_", " ").lower()


def _words(text: str) -> frozenset:
    return frozenset(w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _FILLER)


def match_names(query: str, names: Iterable[str]) -> list[tuple[str, float]]:
    """The object names a query refers to, best first, with a score in (0, 1].

    A name matches when its words and the query's (fillers such as 'the' dropped) contain
    one another: 'basket' finds basket_1, 'the black bowl' finds akita_black_bowl_1 and
    _2; the score is the share of words they have in common.
    """
    wanted = _words(query)
    if not wanted:
        return []
    matches = []
    for name in names:
        have = _words(spoken(name))
        if have and (have <= wanted or wanted <= have):
            matches.append((name, len(have & wanted) / len(have | wanted)))
    return sorted(matches, key=lambda m: -m[1])


def fill_segment_response(response, detections: Iterable[Detection], header):
    """Put detections into a ``Segment`` response (masks as mono8, 255 on the object)."""
    from sensor_msgs.msg import RegionOfInterest

    response.header = header
    for det in detections:
        mask = numpy_to_image(np.where(det.mask, 255, 0).astype(np.uint8), "mono8")
        mask.header = header
        response.masks.append(mask)
        roi = RegionOfInterest()
        roi.x_offset, roi.y_offset, roi.width, roi.height = det.box()
        response.boxes.append(roi)
        response.scores.append(float(det.score))
        response.labels.append(det.label)
    response.success = True
    return response


def detections_from_response(response) -> list[Detection]:
    return [Detection(label, float(score), image_to_numpy(mask) > 127)
            for label, score, mask in zip(response.labels, response.scores, response.masks)]


@dataclass
class LocatedObject:
    """One object a ``Locate`` answer found."""
    label: str
    score: float
    position: np.ndarray  # (3,) m, in the answer's frame (the robot's base)
    extent: np.ndarray  # (3,) m
    camera: str
    partial: bool


def located_from_response(response) -> list[LocatedObject]:
    return [LocatedObject(label, float(score), np.array([p.point.x, p.point.y, p.point.z]),
                          np.array([e.x, e.y, e.z]), camera, bool(partial))
            for label, score, p, e, camera, partial in zip(
                response.labels, response.scores, response.points, response.extents,
                response.cameras, response.partial)]
