"""RpentHttpBackend against RpentHttpServer, and against misbehaving HTTP peers."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from rpent_am.backends.rpent_http import (
    RpentHttpBackend,
    RpentHttpServer,
    RpentHttpWire,
    decode_png,
    encode_png,
)
from rpent_am.policy import BackendError, ModelMeta, PolicyBackend, PolicyObservation
from rpent_contract.control_space import ControlSpaceSpec

SPACE = ControlSpaceSpec(name="osc7", labels=tuple("abcdefg"), units=("1",) * 7,
                         lower=(-1.0,) * 7, upper=(1.0,) * 7, relative=True,
                         step_scale=(0.05,) * 3 + (0.5,) * 3)


class Recorder(PolicyBackend):
    """A model whose chunk shows what reached it: row i = state[:7] * (i + 1)."""

    def __init__(self):
        self.calls, self.resets = [], []
        self._meta = ModelMeta(backend="recorder", checkpoint="ckpt", checkpoint_id="ckpt-1",
                               action_space=SPACE, chunk_size=8, required_cameras=("front",),
                               state_names=tuple(f"s{i}" for i in range(7)))

    @property
    def meta(self):
        return self._meta

    def predict(self, observation, instruction, session):
        self.calls.append((observation, instruction, session))
        return np.outer(np.arange(1, 9), observation.state[:7])

    def reset(self, session=None):
        self.resets.append(session)


def observation():
    rng = np.random.default_rng(1)
    return PolicyObservation(images={"front": rng.integers(0, 255, (48, 64, 3), dtype=np.uint8),
                                     "side": rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)},
                             state=np.linspace(-0.5, 0.5, 7), state_names=[f"s{i}" for i in range(7)])


@pytest.fixture
def served():
    model = Recorder()
    with RpentHttpServer(model) as srv:
        yield model, srv


def test_png_round_trip_is_lossless():
    image = observation().images["front"]
    np.testing.assert_array_equal(decode_png(encode_png(image)), image)


def test_round_trip_meta_predict_reset(served):
    model, srv = served
    be = RpentHttpBackend(srv.endpoint, timeout=5.0)
    try:
        assert be.meta.action_space == SPACE
        assert be.meta.chunk_size == 8 and be.meta.checkpoint_id == "ckpt-1"
        assert be.meta.backend == "rpent_http"
        obs = observation()
        chunk = be.predict(obs, "stack the cups", "client-a")
        np.testing.assert_allclose(chunk, np.outer(np.arange(1, 9), obs.state))
        got, instruction, session = model.calls[0]
        assert (instruction, session) == ("stack the cups", "client-a")
        np.testing.assert_array_equal(got.images["front"], obs.images["front"])
        assert set(got.images) == {"front", "side"}
        assert tuple(got.state_names) == tuple(obs.state_names)
        be.reset("client-a")
        be.reset()
        assert model.resets == ["client-a", "default"]
    finally:
        be.close()


def test_camera_mapping_and_chunk_cut(served):
    model, srv = served
    be = RpentHttpBackend(srv.endpoint, cameras={"side": "front"}, chunk_size=3, timeout=5.0)
    try:
        assert be.predict(observation(), "go", "s").shape == (3, 7)
        np.testing.assert_array_equal(model.calls[0][0].images["front"],
                                      observation().images["side"])
        assert set(model.calls[0][0].images) == {"front"}
    finally:
        be.close()


def test_server_down_is_a_clear_error():
    srv = RpentHttpServer(Recorder())
    endpoint = srv.endpoint
    srv.close()
    with pytest.raises(BackendError, match="cannot reach.*running"):
        RpentHttpBackend(endpoint, connect_timeout=2.0)


def test_server_stopping_mid_session(served):
    _, srv = served
    be = RpentHttpBackend(srv.endpoint, timeout=5.0, connect_timeout=2.0)
    srv.close()
    try:
        with pytest.raises(BackendError, match="cannot reach"):
            be.predict(observation(), "go", "s")
    finally:
        be.close()


class Peer:
    """An HTTP server whose /call answer is ``reply(body) -> (status, bytes)``."""

    def __init__(self, reply, delay=0.0):
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status, data):
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except BrokenPipeError:
                    pass  # the client timed out and left (test_timeout)

            def do_GET(self):
                self._send(200, b'{"status": "ok"}')

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if body["method"] == "vla.predict":
                    time.sleep(delay)
                self._send(*reply(body))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def answer_predict(result):
    def reply(body):
        if body["method"] == "vla.predict":
            return 200, json.dumps({"result": result}).encode() if not isinstance(result, bytes) \
                else result
        return 404, b'{"error": "unknown method"}'
    return reply


@pytest.fixture
def peer():
    peers = []

    def make(reply, delay=0.0):
        peers.append(Peer(reply, delay))
        return peers[-1]

    yield make
    for p in peers:
        p.close()


def test_without_meta_route_configuration_is_used(peer):
    p = peer(answer_predict({"actions": np.zeros((10, 7)).tolist()}))
    with pytest.raises(BackendError, match="action_space= and chunk_size="):
        RpentHttpBackend(p.endpoint)
    be = RpentHttpBackend(p.endpoint, action_space=SPACE, chunk_size=5, checkpoint="pi05-libero")
    try:
        assert be.meta.chunk_size == 5 and be.meta.checkpoint == "pi05-libero"
        assert be.predict(observation(), "go", "s").shape == (5, 7)
        be.reset("s")  # no reset route: a stateless model, nothing to do
    finally:
        be.close()


@pytest.mark.parametrize("result, match", [
    (b"<html>502 Bad Gateway</html>", "not a JSON object"),
    ({"nothing": 1}, "no 'actions'"),
    ({"actions": [[0.0] * 6] * 10}, r"shape \(10, 6\)"),
    ({"actions": [[0.0] * 7, [0.0] * 6]}, "not a numeric array"),
    ({"actions": [[float("nan")] * 7]}, "non-finite"),
])
def test_bad_answers_raise(peer, result, match):
    p = peer(answer_predict(result))
    be = RpentHttpBackend(p.endpoint, action_space=SPACE, chunk_size=5)
    try:
        with pytest.raises(BackendError, match=match):
            be.predict(observation(), "go", "s")
    finally:
        be.close()


def test_server_error_message_is_passed_on(peer):
    p = peer(lambda body: (500, b'{"error": "CUDA out of memory"}'))
    with pytest.raises(BackendError, match="HTTP 500.*CUDA out of memory"):
        RpentHttpBackend(p.endpoint, action_space=SPACE, chunk_size=5)


@pytest.mark.serial  # given up within 1.8 s of a 0.5 s timeout
def test_timeout(peer):
    p = peer(answer_predict({"actions": np.zeros((10, 7)).tolist()}), delay=2.0)
    be = RpentHttpBackend(p.endpoint, action_space=SPACE, chunk_size=5, timeout=0.5)
    try:
        start = time.monotonic()
        with pytest.raises(BackendError, match="within 0.5 s"):
            be.predict(observation(), "go", "s")
        assert time.monotonic() - start < 1.8
    finally:
        be.close()


def test_server_rejects_bad_requests(served):
    _, srv = served
    status, answer = srv.handle({"method": "vla.predict", "params": {"images": {}}})
    assert status == 400 and "state" in answer["error"]
    status, answer = srv.handle({"method": "vla.predict", "params": {
        "images": {"front": "not base64!"}, "state": [0.0] * 7}})
    assert status == 400 and "base64" in answer["error"]
    assert srv.handle({"method": "vla.nope"})[0] == 404


def test_wire_names_are_configurable():
    wire = RpentHttpWire(call_path="/rpc", predict_method="policy.act", actions="chunk")
    model = Recorder()
    with RpentHttpServer(model, wire=wire) as srv:
        be = RpentHttpBackend(srv.endpoint, wire=wire, timeout=5.0)
        try:
            assert be.predict(observation(), "go", "s").shape == (8, 7)
        finally:
            be.close()
        with pytest.raises(BackendError, match="HTTP 404"):
            RpentHttpBackend(srv.endpoint, action_space=SPACE, chunk_size=5).predict(
                observation(), "go", "s")
