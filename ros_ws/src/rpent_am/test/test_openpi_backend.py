"""OpenPIBackend against a protocol-level OpenPI server: openpi-client runs for real."""
import threading
import time

import numpy as np
import pytest
from openpi_client import msgpack_numpy
from websockets.sync.server import serve

from rpent_am.backends.openpi_backend import OpenPIBackend
from rpent_am.policy import BackendError, PolicyObservation
from rpent_contract.control_space import ControlSpaceSpec

SPACE = ControlSpaceSpec(name="osc7", labels=tuple("abcdefg"), units=("1",) * 7,
                         lower=(-1.0,) * 7, upper=(1.0,) * 7, relative=True)
STATE_NAMES = ("ee_x", "ee_y", "ee_z", "ax", "ay", "az", "f1", "f2", "extra")


class FakeOpenPIServer:
    """Speaks what serve_policy.py speaks: metadata frame, then obs -> {"actions": ...}.

    ``answer(obs)`` builds each reply; ``handshake_delay`` holds back the metadata frame.
    """

    def __init__(self, answer=None, handshake_delay=0.0, metadata=None):
        self.answer = answer or (lambda obs: {"actions": np.tile(
            obs["observation/state"][:7].astype(np.float64), (10, 1)) * 0.1})
        self.handshake_delay, self.metadata = handshake_delay, metadata or {"model": "fake-pi05"}
        self.received = []
        self._server = serve(self._handle, "127.0.0.1", 0, compression=None, max_size=None)
        self.port = self._server.socket.getsockname()[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _handle(self, conn):
        time.sleep(self.handshake_delay)
        conn.send(msgpack_numpy.packb(self.metadata))
        for frame in conn:
            obs = msgpack_numpy.unpackb(frame)
            self.received.append(obs)
            reply = self.answer(obs)
            conn.send(reply if isinstance(reply, str) else msgpack_numpy.packb(reply))

    def close(self):
        self._server.shutdown()
        self._thread.join(timeout=5)


@pytest.fixture
def server():
    servers = []

    def make(**kw):
        servers.append(FakeOpenPIServer(**kw))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def observation(h=128, w=160):
    rng = np.random.default_rng(0)
    return PolicyObservation(
        images={"agentview": rng.integers(0, 255, (h, w, 3), dtype=np.uint8),
                "robot0_eye_in_hand": rng.integers(0, 255, (h, w, 3), dtype=np.uint8)},
        state=np.arange(1, 10, dtype=np.float64) / 10, state_names=STATE_NAMES)


def backend(srv, **kw):
    kw.setdefault("state_names", STATE_NAMES[:8])
    return OpenPIBackend("127.0.0.1", srv.port, action_space=SPACE, timeout=2.0,
                         connect_timeout=2.0, **kw)


def test_predict_round_trip_maps_libero_keys(server):
    srv = server()
    be = backend(srv, chunk_size=5)
    try:
        assert be.meta.extra["server_metadata"] == {"model": "fake-pi05"}
        assert be.meta.required_cameras == ("agentview", "robot0_eye_in_hand")
        chunk = be.predict(observation(), "put the bowl on the plate", "s1")
    finally:
        be.close()
    obs = srv.received[0]
    assert set(obs) == {"observation/image", "observation/wrist_image", "observation/state",
                        "prompt"}
    assert obs["prompt"] == "put the bowl on the plate"
    assert obs["observation/image"].shape == (224, 224, 3)
    assert obs["observation/image"].dtype == np.uint8
    np.testing.assert_allclose(obs["observation/state"], np.arange(1, 9) / 10, rtol=1e-6)
    assert chunk.shape == (5, 7)
    np.testing.assert_allclose(chunk[0], np.arange(1, 8) / 100, rtol=1e-6)


def test_custom_key_mapping_and_native_size(server):
    srv = server(answer=lambda obs: {"actions": np.zeros((4, 7), np.float32)})
    be = OpenPIBackend("127.0.0.1", srv.port, action_space=SPACE, cameras={"agentview": "img"},
                       state_key="qpos", prompt_key="task", image_size=0, timeout=2.0)
    try:
        assert be.predict(observation(), "go", "s").shape == (4, 7)
    finally:
        be.close()
    assert set(srv.received[0]) == {"img", "qpos", "task"}
    assert srv.received[0]["img"].shape == (128, 160, 3)
    assert srv.received[0]["qpos"].shape == (9,)


def test_missing_camera_is_a_clear_error(server):
    be = backend(server())
    obs = observation()
    del obs.images["robot0_eye_in_hand"]
    try:
        with pytest.raises(BackendError, match="robot0_eye_in_hand"):
            be.predict(obs, "go", "s")
    finally:
        be.close()


@pytest.mark.parametrize("reply, match", [
    ({"nothing": 1}, "no 'actions'"),
    ({"actions": np.zeros((10, 6))}, r"shape \(10, 6\)"),
    ({"actions": np.full((10, 7), np.nan)}, "non-finite"),
    ("Traceback: model exploded", "model exploded"),
])
def test_bad_answers_raise(server, reply, match):
    srv = server(answer=lambda obs: reply)
    be = backend(srv)
    try:
        with pytest.raises(BackendError, match=match):
            be.predict(observation(), "go", "s")
    finally:
        be.close()


def test_server_down_says_what_to_check(server):
    srv = server()
    port = srv.port
    srv.close()
    with pytest.raises(BackendError, match=f"127.0.0.1:{port}.*serve_policy"):
        OpenPIBackend("127.0.0.1", port, action_space=SPACE, connect_timeout=2.0)


def test_missing_handshake_times_out(server):
    srv = server(handshake_delay=3.0)
    start = time.monotonic()
    with pytest.raises(BackendError, match="no OpenPI handshake"):
        OpenPIBackend("127.0.0.1", srv.port, action_space=SPACE, connect_timeout=0.5)
    assert time.monotonic() - start < 2.0


def test_inference_timeout_then_reconnects(server):
    calls = []

    def answer(obs):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(2.0)
        return {"actions": np.zeros((10, 7))}

    srv = server(answer=answer)
    be = OpenPIBackend("127.0.0.1", srv.port, action_space=SPACE, timeout=0.5,
                       state_names=None)
    try:
        start = time.monotonic()
        with pytest.raises(BackendError, match="within 0.5 s"):
            be.predict(observation(), "go", "s")
        assert time.monotonic() - start < 1.8
        assert be.predict(observation(), "go", "s").shape == (10, 7)
    finally:
        be.close()
