"""SAM3 as the original RPent serves it (its ``sam3_server``), over either transport of its
RPC: ``http://HOST:PORT`` (its default) or ``socket://HOST:PORT``.

The call is ``segment(image_base64=<PNG of the camera image>, text_prompt=<query>,
min_score=<threshold>)`` and the answer the single best mask with its score and box
(:mod:`rpent_contract.sam3_wire` has the full wire and its server side). A query the
server finds nothing for (or only below ``min_score``) gives no detection.
"""
from __future__ import annotations

import numpy as np

from rpent_contract.images import ImageConversionError, decode_png, encode_png
from rpent_contract.perception import Detection
from rpent_contract.rpc import RpcClient, RpcFailed
from rpent_contract.sam3_wire import DEFAULT_MIN_SCORE, METHOD

from . import SegmentationBackend, SegmentationError


class Sam3HttpBackend(SegmentationBackend):
    name = "sam3_http"

    def __init__(self, endpoint: str, *, timeout: float = 30.0, connect_timeout: float = 5.0,
                 min_score: float = DEFAULT_MIN_SCORE):
        self._rpc = RpcClient(endpoint, server="SAM3 server", timeout=timeout,
                              connect_timeout=connect_timeout, error=SegmentationError)
        self.endpoint, self._min_score = self._rpc.endpoint, float(min_score)
        try:
            self._rpc.call("healthz", timeout=connect_timeout)
        except RpcFailed as err:
            raise SegmentationError(f"{err}: the SAM3 server is up but not ready; check its "
                                    "log") from None

    def segment(self, camera: str, rgb: np.ndarray, query: str) -> list:
        try:
            answer = self._rpc.call(METHOD, kwargs={"image_base64": encode_png(rgb),
                                                    "text_prompt": query,
                                                    "min_score": self._min_score})
        except RpcFailed as err:
            raise SegmentationError(str(err)) from None
        where = f"{METHOD} answer from {self.endpoint}"
        if not isinstance(answer, dict) or not isinstance(answer.get("found"), bool):
            raise SegmentationError(f"{where} has no boolean 'found': check that the endpoint "
                                    "is a SAM3 server")
        if not answer["found"]:
            return []
        score, shape = answer.get("score"), answer.get("mask_shape")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or \
                not 0.0 <= score <= 1.0:
            raise SegmentationError(f"{where}: score {score!r} is not a number in [0, 1]")
        if not isinstance(shape, list) or len(shape) != 2 or \
                not all(isinstance(v, int) and v > 0 for v in shape):
            raise SegmentationError(f"{where}: mask_shape {shape!r} is not [height, width]")
        try:
            mask = decode_png(answer.get("mask_png_base64") or "", mono=True) > 0
        except ImageConversionError as err:
            raise SegmentationError(f"{where}: mask_png_base64: {err}") from None
        if list(mask.shape) != shape:
            raise SegmentationError(f"{where}: the mask is {mask.shape[1]}x{mask.shape[0]} px "
                                    f"but mask_shape says {shape[1]}x{shape[0]}")
        if mask.shape != rgb.shape[:2]:
            raise SegmentationError(
                f"{where}: the mask is {mask.shape[1]}x{mask.shape[0]} px but the image sent was "
                f"{rgb.shape[1]}x{rgb.shape[0]}: masks must match it")
        return [Detection(query, float(score), mask)]

    def close(self) -> None:
        self._rpc.close()
