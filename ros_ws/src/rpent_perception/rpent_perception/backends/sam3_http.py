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

:class:`rpent_contract.sam3_wire.Sam3HttpServer` speaks the same protocol around any
segmentation function: the client's test peer, and the arms' twins' ground-truth server.
"""
from __future__ import annotations

import numpy as np

from rpent_contract.http_json import JsonHttpClient
from rpent_contract.images import ImageConversionError, decode_png, encode_png
from rpent_contract.perception import Detection
from rpent_contract.sam3_wire import Sam3HttpWire

from . import SegmentationBackend, SegmentationError


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
