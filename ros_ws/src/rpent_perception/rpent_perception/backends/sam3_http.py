"""SAM3 over HTTP: text-prompted segmentation from a server such as the original RPent's
``sam3_server --transport http``.

That server's documentation gives the transport (JSON over POST, like RPent's action-model
servers) but not the body; the body below is this project's, and every name in it lives
in :class:`Sam3HttpWire`, so a server that spells them differently needs another wire
object, not other code:

    POST <endpoint>/call
      {"method": "sam3.segment", "params": {"image": "<base64 PNG, RGB>", "text": "<query>"}}
    -> 200 {"result": {"masks": ["<base64 PNG, nonzero on the object>", ...],
                       "boxes": [[x_min, y_min, x_max, y_max], ...],   (px, optional)
                       "scores": [float, ...]}}                         (0..1, best first)
    -> 4xx/5xx {"error": "<message>"}
    GET <endpoint>/healthz -> 200 {"status": "ok"}

:class:`Sam3HttpServer` speaks the same protocol around any segmentation function and
checks every request the way a strict server would; it is the client's test peer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from rpent_contract.http_json import JsonHttpClient, JsonHttpServer
from rpent_contract.images import ImageConversionError, decode_png, encode_png
from rpent_contract.perception import Detection

from . import SegmentationBackend, SegmentationError


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


class Sam3HttpBackend(SegmentationBackend):
    name = "sam3_http"

    def __init__(self, endpoint: str, *, timeout: float = 30.0, connect_timeout: float = 5.0,
                 wire: Sam3HttpWire = Sam3HttpWire()):
        self._wire = wire
        self._http = JsonHttpClient(endpoint, server="SAM3 server", timeout=timeout,
                                    connect_timeout=connect_timeout, error=SegmentationError)
        self.endpoint = self._http.endpoint
        status, _ = self._http.request("GET", wire.health_path, timeout=connect_timeout)
        if status != 200:
            raise SegmentationError(f"{self.endpoint}{wire.health_path} answered HTTP {status}: "
                                    "the SAM3 server is up but not ready; check its log")

    def segment(self, camera: str, rgb: np.ndarray, query: str) -> list:
        w = self._wire
        body = {w.method: w.segment_method, w.params: {w.image: encode_png(rgb), w.text: query}}
        status, answer = self._http.request("POST", w.call_path, body)
        if status != 200 or w.error in answer:
            raise SegmentationError(f"{w.segment_method} failed on {self.endpoint} (HTTP "
                                    f"{status}): {answer.get(w.error, answer)}")
        result = answer.get(w.result)
        if not isinstance(result, dict) or not isinstance(result.get(w.masks), list) \
                or not isinstance(result.get(w.scores), list):
            raise SegmentationError(
                f"{w.segment_method} answer from {self.endpoint} lacks '{w.masks}' and "
                f"'{w.scores}' lists: check that the endpoint is a SAM3 server of this protocol")
        masks, scores = result[w.masks], result[w.scores]
        if len(masks) != len(scores):
            raise SegmentationError(f"{self.endpoint} answered {len(masks)} masks but "
                                    f"{len(scores)} scores")
        detections = []
        for i, (text, score) in enumerate(zip(masks, scores)):
            try:
                mask = decode_png(text, mono=True) > 0
            except ImageConversionError as err:
                raise SegmentationError(f"mask {i} from {self.endpoint}: {err}") from None
            if mask.shape != rgb.shape[:2]:
                raise SegmentationError(
                    f"mask {i} from {self.endpoint} is {mask.shape[1]}x{mask.shape[0]} px but "
                    f"the image sent was {rgb.shape[1]}x{rgb.shape[0]}: masks must match it")
            if not isinstance(score, (int, float)) or not 0.0 <= score <= 1.0:
                raise SegmentationError(f"score {i} from {self.endpoint} is {score!r}, not a "
                                        "number in [0, 1]")
            detections.append(Detection(query, float(score), mask))
        return sorted(detections, key=lambda d: -d.score)

    def close(self) -> None:
        self._http.close()


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
        found = self._segment(image, params[w.text])
        return 200, {w.result: {
            w.masks: [encode_png(np.where(mask, 255, 0).astype(np.uint8)) for mask, _ in found],
            w.boxes: [_box(mask) for mask, _ in found],
            w.scores: [float(score) for _, score in found]}}


def _box(mask: np.ndarray) -> list:
    rows, cols = np.nonzero(mask)
    if rows.size == 0:
        return [0, 0, 0, 0]
    return [int(cols.min()), int(rows.min()), int(cols.max()), int(rows.max())]
