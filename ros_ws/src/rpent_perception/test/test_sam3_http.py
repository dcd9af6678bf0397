"""The sam3_http backend against a server speaking its protocol on loopback: masks come
back decoded and the right size, and every way a server can fail gives an error that says
what went wrong."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from rpent_contract.images import encode_png
from rpent_contract.sam3_wire import Sam3HttpServer
from rpent_perception.backends import SegmentationError
from rpent_perception.backends.sam3_http import Sam3HttpBackend

H, W = 48, 64


def two_boxes(rgb, text):
    """A 'model': a strong detection on the left half, a weak one in the bottom right."""
    left = np.zeros(rgb.shape[:2], bool)
    left[5:20, 3:30] = True
    corner = np.zeros(rgb.shape[:2], bool)
    corner[40:, 50:] = True
    return [(corner, 0.4), (left, 0.9)]


@pytest.fixture
def image():
    return np.random.default_rng(0).integers(0, 255, (H, W, 3), dtype=np.uint8)


def test_masks_scores_and_the_request_the_server_received(image):
    with Sam3HttpServer(two_boxes) as server:
        backend = Sam3HttpBackend(server.endpoint)
        detections = backend.segment("front", image, "red mug")
        backend.close()
    assert [d.score for d in detections] == [0.9, 0.4]  # best first
    assert all(d.label == "red mug" and d.mask.shape == (H, W) for d in detections)
    assert detections[0].mask.sum() == 15 * 27 and detections[0].box() == (3, 5, 27, 15)
    sent, text = server.requests[0]
    np.testing.assert_array_equal(sent, image)  # lossless PNG, RGB order kept
    assert text == "red mug"


class Scripted(Sam3HttpServer):
    """A server answering a fixed (status, body) to every segment call."""

    def __init__(self, status, body):
        super().__init__(two_boxes)
        self.reply = (status, body)

    def handle(self, body):
        status, checked = super().handle(body)  # the request itself must be well formed
        assert status == 200, checked
        return self.reply


def mask_png(h=H, w=W):
    return encode_png(np.full((h, w), 255, np.uint8))


@pytest.mark.parametrize("status, body, message", [
    (500, {"error": "CUDA out of memory"}, r"HTTP 500\): CUDA out of memory"),
    (200, {"result": {"scores": [0.5]}}, "lacks 'masks' and 'scores'"),
    (200, {"nothing": 1}, "lacks 'masks' and 'scores'"),
    (200, {"result": {"masks": [mask_png()], "scores": []}}, "1 masks but 0 scores"),
    (200, {"result": {"masks": ["not png"], "scores": [0.5]}}, "mask 0 .*not base64"),
    (200, {"result": {"masks": [mask_png(10, 10)], "scores": [0.5]}},
     "mask 0 .* is 10x10 px but the image sent was 64x48"),
    (200, {"result": {"masks": [mask_png()], "scores": [7]}}, "not a number in \\[0, 1\\]"),
])
def test_bad_answers_give_clear_errors(image, status, body, message):
    with Scripted(status, body) as server:
        backend = Sam3HttpBackend(server.endpoint)
        with pytest.raises(SegmentationError, match=message):
            backend.segment("front", image, "mug")
        backend.close()


def test_a_server_that_does_not_answer_in_time_is_reported(image):
    release = threading.Event()

    def hang(rgb, text):
        release.wait(10)
        return []

    with Sam3HttpServer(hang) as server:
        backend = Sam3HttpBackend(server.endpoint, timeout=0.5)
        try:
            with pytest.raises(SegmentationError, match="no answer .* within 0.5 s"):
                backend.segment("front", image, "mug")
        finally:
            release.set()
            backend.close()


def test_an_image_the_server_cannot_segment_is_refused_with_its_reason(image):
    def only_known(rgb, text):
        raise ValueError("this server segments only frames it published")

    with Sam3HttpServer(only_known) as server:
        backend = Sam3HttpBackend(server.endpoint)
        try:
            with pytest.raises(SegmentationError,
                               match=r"HTTP 422\): this server segments only frames"):
                backend.segment("front", image, "mug")
        finally:
            backend.close()


def test_no_server_at_the_endpoint_is_reported():
    with Sam3HttpServer(two_boxes) as server:
        endpoint = server.endpoint
    with pytest.raises(SegmentationError, match="cannot reach the SAM3 server"):
        Sam3HttpBackend(endpoint, connect_timeout=1.0)
    with pytest.raises(SegmentationError, match="not http://HOST:PORT"):
        Sam3HttpBackend("socket://127.0.0.1:1")


@pytest.mark.parametrize("params, why", [
    ({"image": "", "text": "mug"}, "'image'"),
    ({"image": None, "text": "mug"}, "'image'"),
    ({"text": "mug"}, "exactly"),
    ({"image": encode_png(np.zeros((4, 4, 3), np.uint8)), "text": " "}, "non-empty"),
])
def test_the_server_refuses_malformed_requests(params, why):
    server = Sam3HttpServer(two_boxes)
    try:
        status, body = server.handle({"method": "sam3.segment", "params": params})
    finally:
        server.close()
    assert status == 400 and why in body["error"]
