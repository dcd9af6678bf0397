"""SAM3's HTTP wire, both ends' names in one place: text-prompted segmentation as the
perception node's ``sam3_http`` backend asks for it (see that module for the protocol),
and :class:`Sam3HttpServer`, its server side around any segmentation function. The server
checks every request the way a strict server would; it is the client's test peer and the
arms' twins' ground-truth segmenter.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .http_json import JsonHttpServer
from .images import ImageConversionError, decode_png, encode_png


@dataclass(frozen=True)
class Sam3HttpWire:
    call_path: str = "/call"
    health_path: str = "/healthz"
    segment_method: str = "sam3.segment"
    method: str = "method"
    params: str = "params"
    result: str = "result"
    error: str = "error"
    image: str = "image"
    text: str = "text"
    masks: str = "masks"
    boxes: str = "boxes"
    scores: str = "scores"


# segment(rgb, text) -> [(mask (H, W) bool, score)]
SegmentFn = Callable[[np.ndarray, str], list]


class Sam3HttpServer(JsonHttpServer):
    """The protocol's server side around ``segment``; refuses malformed requests with 400.

    ``with Sam3HttpServer(fn) as server: server.endpoint`` serves on a free loopback port.
    ``requests`` keeps every decoded request (image, text) for tests to inspect.
    """

    def __init__(self, segment: SegmentFn, host: str = "127.0.0.1", port: int = 0,
                 wire: Sam3HttpWire = Sam3HttpWire()):
        super().__init__(host, port, call_path=wire.call_path, health_path=wire.health_path,
                         error=wire.error)
        self._segment, self._wire = segment, wire
        self.requests: list = []

    def handle(self, body: dict) -> tuple[int, dict]:
        w = self._wire
        if body.get(w.method) != w.segment_method:
            return 404, {w.error: f"unknown method {body.get(w.method)!r}"}
        params = body.get(w.params)
        if not isinstance(params, dict) or set(params) != {w.image, w.text}:
            return 400, {w.error: f"params must be exactly {{{w.image!r}, {w.text!r}}}"}
        if not isinstance(params[w.text], str) or not params[w.text].strip():
            return 400, {w.error: f"'{w.text}' must be a non-empty string"}
        try:
            image = decode_png(params[w.image])
        except ImageConversionError as err:
            return 400, {w.error: f"'{w.image}': {err}"}
        self.requests.append((image, params[w.text]))
        try:
            found = self._segment(image, params[w.text])
        except ValueError as err:  # the segmenter cannot answer for this image
            return 422, {w.error: str(err)}
        return 200, {w.result: {
            w.masks: [encode_png(np.where(mask, 255, 0).astype(np.uint8)) for mask, _ in found],
            w.boxes: [_box(mask) for mask, _ in found],
            w.scores: [float(score) for _, score in found]}}


def _box(mask: np.ndarray) -> list:
    rows, cols = np.nonzero(mask)
    if rows.size == 0:
        return [0, 0, 0, 0]
    return [int(cols.min()), int(rows.min()), int(cols.max()), int(rows.max())]
