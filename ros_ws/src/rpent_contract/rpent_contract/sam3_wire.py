"""The original RPent SAM3 server's ``segment`` method, both ends' facts in one place, and
:class:`Sam3Server`, its server side around any segmentation function: the perception
node's ``sam3_http`` backend's test peer and the arms' twins' ground-truth segmenter.

On either RPC transport (:mod:`rpent_contract.rpc`)::

    segment(image_base64, *, text_prompt=None, point=None, min_score=0.2)

* ``image_base64``: base64 (strict alphabet) of an image file (PNG here), read as RGB;
* exactly one prompt: ``text_prompt`` (stripped, non-empty) or ``point`` ``[row, col]``
  inside the image;
* ``min_score`` in [0, 1].

The answer is the single best candidate, fields left out when absent: ``found`` (bool),
``score``, ``box`` (``[x_min, y_min, x_max, y_max]`` px), ``mask_png_base64`` (an 8-bit
grey PNG, 255 on the object) with ``mask_shape`` ``[height, width]``, and ``reason`` when
nothing was found (no candidate, top score below ``min_score``, empty mask). A bad request
fails the call with the server's validation message.
"""
from __future__ import annotations

import base64
import binascii
from typing import Callable, Optional

import numpy as np

from .images import ImageConversionError, decode_png_bytes, encode_png
from .rpc import RpcServer

METHOD = "segment"
DEFAULT_MIN_SCORE = 0.2

# segment(rgb, text) -> [(mask (H, W) bool, score)]; point(rgb, row, col) -> the same
SegmentFn = Callable[[np.ndarray, str], list]
PointFn = Callable[[np.ndarray, int, int], list]


def box_of(mask: np.ndarray) -> list:
    rows, cols = np.nonzero(mask)
    return [float(cols.min()), float(rows.min()), float(cols.max()), float(rows.max())]


class Sam3Server(RpcServer):
    """``segment`` around ``segment_text`` (and ``segment_point``, without which a point
    prompt fails as a server without instance interactivity does). ``requests`` keeps each
    decoded request (image, text prompt or point, min_score) for tests to inspect."""

    def __init__(self, segment_text: SegmentFn, *, segment_point: Optional[PointFn] = None,
                 transport: str = "http", host: str = "127.0.0.1", port: int = 0):
        super().__init__({METHOD: self.segment}, transport=transport, host=host, port=port)
        self._text, self._point = segment_text, segment_point
        self.requests: list = []

    def segment(self, image_base64, *, text_prompt=None, point=None,
                min_score=DEFAULT_MIN_SCORE) -> dict:
        if not isinstance(image_base64, str):
            raise ValueError("image_base64: Input should be a valid string")
        has_text = isinstance(text_prompt, str) and bool(text_prompt.strip())
        if text_prompt is not None and not isinstance(text_prompt, str):
            raise ValueError("text_prompt: Input should be a valid string")
        if point is not None and (not isinstance(point, (list, tuple)) or len(point) != 2 or
                                  not all(isinstance(v, int) and not isinstance(v, bool)
                                          for v in point)):
            raise ValueError("point: a list of 2 integers [row, col]")
        if has_text == (point is not None):
            raise ValueError("provide exactly one of text_prompt or point")
        if isinstance(min_score, bool) or not isinstance(min_score, (int, float)) or \
                not 0.0 <= min_score <= 1.0:
            raise ValueError("min_score: Input should be a number in [0, 1]")
        try:
            raw = base64.b64decode(image_base64, validate=True)
        except (binascii.Error, ValueError) as err:
            raise ValueError(f"image_base64 is not base64: {err}") from None
        if not raw:
            raise ValueError("image_base64 is empty")
        try:
            image = decode_png_bytes(raw)
        except ImageConversionError as err:
            raise ValueError(f"invalid image data: {err}") from None
        height, width = image.shape[:2]
        if has_text:
            self.requests.append((image, text_prompt.strip(), float(min_score)))
            candidates = self._text(image, text_prompt.strip())
        else:
            row, col = point
            if not (0 <= row < height and 0 <= col < width):
                raise ValueError(f"point [row, col] {list(point)} is outside image shape "
                                 f"[{height}, {width}]")
            self.requests.append((image, (row, col), float(min_score)))
            if self._point is None:
                raise RuntimeError("SAM3 instance interactivity is not enabled")
            candidates = self._point(image, row, col)
        return self._best(candidates, float(min_score))

    @staticmethod
    def _best(candidates: list, min_score: float) -> dict:
        if not candidates:
            return {"found": False, "reason": "SAM3 returned no candidate"}
        mask, score = max(candidates, key=lambda c: c[1])
        mask = np.asarray(mask, bool)
        score = float(score)
        box = box_of(mask) if mask.any() else None
        answer = {"score": score, **({"box": box} if box else {})}
        if score < min_score:
            return {"found": False, **answer,
                    "reason": f"top score {score:.3f} is below min_score {min_score:.3f}"}
        if not mask.any():
            return {"found": False, **answer, "reason": "SAM3 returned an empty mask"}
        return {"found": True, **answer,
                "mask_png_base64": encode_png(np.where(mask, 255, 0).astype(np.uint8)),
                "mask_shape": [int(mask.shape[0]), int(mask.shape[1])]}
