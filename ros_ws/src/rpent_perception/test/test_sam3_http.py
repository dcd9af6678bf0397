"""The sam3_http backend against the original SAM3 server's ``segment`` on loopback, on both
of its transports: the best mask comes back decoded and the right size, what the server
received is what was sent, and every way a server can fail gives an error that says what
went wrong."""
from __future__ import annotations

import pickle
import socket
import threading

import numpy as np
import pytest

from rpent_contract.images import encode_png
from rpent_contract.rpc import RpcServer, read_frame, write_frame
from rpent_contract.sam3_wire import Sam3Server
from rpent_perception.backends import SegmentationError
from rpent_perception.backends.sam3_http import Sam3HttpBackend

H, W = 48, 64
TRANSPORTS = ["http", "socket"]


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


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_best_mask_and_the_request_the_server_received(image, transport):
    with Sam3Server(two_boxes, transport=transport) as server:
        backend = Sam3HttpBackend(server.endpoint, min_score=0.25)
        detections = backend.segment("front", image, "  red mug ")
        backend.close()
    assert len(detections) == 1  # the server answers its single best candidate
    best = detections[0]
    assert best.score == 0.9 and best.mask.shape == (H, W)
    assert best.mask.sum() == 15 * 27 and best.box() == (3, 5, 27, 15)
    sent, text, min_score = server.requests[0]
    np.testing.assert_array_equal(sent, image)  # lossless PNG, RGB order kept
    assert (text, min_score) == ("red mug", 0.25)


def test_below_min_score_or_nothing_found_is_no_detection(image):
    with Sam3Server(lambda rgb, text: [] if text == "cat" else two_boxes(rgb, text)) as server:
        strict = Sam3HttpBackend(server.endpoint, min_score=0.95)
        assert strict.segment("front", image, "mug") == []
        assert strict.segment("front", image, "cat") == []
        strict.close()


class Scripted(RpcServer):
    """A server whose ``segment`` checks the request as the real one does, then answers
    ``reply`` (a result, or an exception to fail the call with)."""

    def __init__(self, reply, transport="http"):
        checker = Sam3Server(two_boxes)
        checker.close()

        def segment(*args, **kwargs):
            checker.segment(*args, **kwargs)
            if isinstance(reply, Exception):
                raise reply
            return reply

        super().__init__({"segment": segment}, transport=transport)


def mask_png(h=H, w=W):
    return encode_png(np.full((h, w), 255, np.uint8))


@pytest.mark.parametrize("reply, message", [
    (RuntimeError("CUDA out of memory"), r"segment failed on .*: CUDA out of memory"),
    ({"score": 0.5}, "no boolean 'found'"),
    ("masks", "no boolean 'found'"),
    ({"found": True, "score": 0.5, "mask_shape": [H, W], "mask_png_base64": "not png"},
     "mask_png_base64: .*not base64"),
    ({"found": True, "score": 0.5, "mask_shape": [10, 10], "mask_png_base64": mask_png(10, 10)},
     "is 10x10 px but the image sent was 64x48"),
    ({"found": True, "score": 0.5, "mask_shape": [H, W + 1], "mask_png_base64": mask_png()},
     "mask_shape says 65x48"),
    ({"found": True, "score": 7, "mask_shape": [H, W], "mask_png_base64": mask_png()},
     r"not a number in \[0, 1\]"),
    ({"found": True, "score": 0.5, "mask_png_base64": mask_png()}, "mask_shape None"),
])
def test_bad_answers_give_clear_errors(image, reply, message):
    with Scripted(reply) as server:
        backend = Sam3HttpBackend(server.endpoint)
        with pytest.raises(SegmentationError, match=message):
            backend.segment("front", image, "mug")
        backend.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_server_that_does_not_answer_in_time_is_reported(image, transport):
    release = threading.Event()

    def hang(rgb, text):
        release.wait(10)
        return []

    with Sam3Server(hang, transport=transport) as server:
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

    with Sam3Server(only_known) as server:
        backend = Sam3HttpBackend(server.endpoint)
        try:
            with pytest.raises(SegmentationError, match="this server segments only frames"):
                backend.segment("front", image, "mug")
        finally:
            backend.close()


def test_no_server_at_the_endpoint_is_reported():
    for transport in TRANSPORTS:
        with Sam3Server(two_boxes, transport=transport) as server:
            endpoint = server.endpoint
        with pytest.raises(SegmentationError, match="cannot reach the SAM3 server"):
            Sam3HttpBackend(endpoint, connect_timeout=1.0)
    with pytest.raises(SegmentationError, match=r"not \[http\|socket\]://HOST:PORT"):
        Sam3HttpBackend("grpc://127.0.0.1:1")


PNG = encode_png(np.zeros((4, 4, 3), np.uint8))


@pytest.mark.parametrize("kwargs, why", [
    ({"image_base64": "", "text_prompt": "mug"}, "image_base64 is empty"),
    ({"image_base64": "%%%", "text_prompt": "mug"}, "not base64"),
    ({"image_base64": None, "text_prompt": "mug"}, "valid string"),
    ({"image_base64": PNG}, "exactly one of text_prompt or point"),
    ({"image_base64": PNG, "text_prompt": " "}, "exactly one of text_prompt or point"),
    ({"image_base64": PNG, "text_prompt": "mug", "point": [1, 1]}, "exactly one"),
    ({"image_base64": PNG, "point": [1, 9]}, "outside image shape"),
    ({"image_base64": PNG, "point": [1]}, "2 integers"),
    ({"image_base64": PNG, "point": [1, 1]}, "instance interactivity is not enabled"),
    ({"image_base64": PNG, "text_prompt": "mug", "min_score": 1.5}, "min_score"),
    ({"image_base64": PNG, "text": "mug"}, "unexpected keyword argument 'text'"),
])
def test_the_server_refuses_malformed_requests(kwargs, why):
    with Sam3Server(two_boxes) as server:
        answer = server.answer({"method": "segment", "args": (), "kwargs": kwargs})
    assert answer["ok"] is False and why in answer["error"], answer


def test_the_socket_transport_refuses_a_pickle_that_is_not_data(image):
    """A reply that would run code when unpickled is refused before it is built, and a
    request that would is dropped by the server unread."""
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    answered = {"ok": True, "result": {"found": False}}

    def evil_server():
        with socket.create_server(("127.0.0.1", 0)) as listener:
            ports.append(listener.getsockname()[1])
            ready.set()
            for _ in range(2):  # healthz, then segment
                conn, _ = listener.accept()
                with conn:
                    request = read_frame(conn)
                    reply = answered if request["method"] == "healthz" else \
                        {"ok": True, "result": Evil()}
                    body = pickle.dumps(reply)
                    conn.sendall(len(body).to_bytes(4, "big") + body)

    ports, ready = [], threading.Event()
    thread = threading.Thread(target=evil_server, daemon=True)
    thread.start()
    assert ready.wait(5)
    backend = Sam3HttpBackend(f"socket://127.0.0.1:{ports[0]}", timeout=5.0)
    with pytest.raises(SegmentationError, match="builtins.print, which is not data"):
        backend.segment("front", image, "mug")
    thread.join(5)

    with Sam3Server(two_boxes, transport="socket") as server:
        port = int(server.endpoint.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            write_frame(conn, {"method": "segment", "args": (Evil(),), "kwargs": {}})
            assert conn.recv(1) == b""  # closed unanswered
    assert server.requests == []
