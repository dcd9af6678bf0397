"""OpenPIBackend against a protocol-level OpenPI server that checks what a pi05_libero
server checks: openpi-client runs for real."""
import time

import numpy as np
import pytest

from rpent_am.backends.openpi_backend import OpenPIBackend, OpenPIServer
from rpent_am.model_io import SHIPPED, ModelIO
from rpent_am.policy import BackendError, PolicyObservation
from rpent_contract.control_space import ControlSpaceSpec

SPACE = ControlSpaceSpec(name="osc7", labels=tuple("abcdefg"), units=("1",) * 7,
                         lower=(-1.0,) * 7, upper=(1.0,) * 7, relative=True)
PI05_LIBERO = SHIPPED["pi05_libero"]


@pytest.fixture
def server():
    servers = []

    def make(**kw):
        servers.append(OpenPIServer(**kw))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def observation(h=256, w=256):
    rng = np.random.default_rng(0)
    names = PI05_LIBERO.entries()
    return PolicyObservation(
        images={"agentview": rng.integers(0, 255, (h, w, 3), dtype=np.uint8),
                "robot0_eye_in_hand": rng.integers(0, 255, (h, w, 3), dtype=np.uint8)},
        state=np.array([-0.2, 0.0, 1.17, 0.0, 0.0, 0.0, 1.0, 0.04, 0.04][:len(names)]),
        state_names=names)


def backend(srv, **kw):
    return OpenPIBackend("127.0.0.1", srv.port, action_space=SPACE, timeout=2.0,
                         connect_timeout=2.0, **kw)


def test_a_pi05_libero_server_gets_what_openpis_libero_example_sends(server):
    srv = server()
    be = backend(srv, chunk_size=5)
    obs = observation()
    try:
        assert be.meta.extra["server_metadata"] == {"model": "fake-pi05"}
        assert be.meta.required_cameras == ("agentview", "robot0_eye_in_hand")
        assert list(be.meta.state_names) == PI05_LIBERO.entries()
        chunk = be.predict(obs, "put the bowl on the plate", "s1")
    finally:
        be.close()
    sent = srv.received[0]
    assert set(sent) == {"observation/image", "observation/wrist_image", "observation/state",
                         "prompt"}
    assert sent["prompt"] == "put the bowl on the plate"
    expected = PI05_LIBERO.inputs(obs)
    for key in ("observation/image", "observation/wrist_image"):
        assert sent[key].dtype == np.uint8 and sent[key].shape == (224, 224, 3)
        np.testing.assert_array_equal(sent[key], expected[key])
    # world position, axis-angle of the hand (identity turned 90 degrees about z here), fingers
    np.testing.assert_allclose(sent["observation/state"],
                               [-0.2, 0.0, 1.17, 0.0, 0.0, np.pi / 2, 0.04, -0.04], atol=1e-12)
    assert chunk.shape == (5, 7)
    np.testing.assert_allclose(chunk[0], sent["observation/state"][:7] * 0.1)


def test_what_a_pi05_libero_server_refuses_comes_back_as_its_error(server):
    """A model_io that does not fit the server (a 9-entry state) is refused by it."""
    srv = server()
    names = ("ee_x", "ee_y", "ee_z", "ee_qx", "ee_qy", "ee_qz", "ee_qw", "gripper_width", "x")
    fed = ModelIO.simple("nine", {"agentview": "observation/image",
                                  "robot0_eye_in_hand": "observation/wrist_image"},
                         names, state_key="observation/state")
    be = backend(srv, io=fed)
    obs = PolicyObservation(observation().images, np.arange(9) / 10.0, names)
    try:
        with pytest.raises(BackendError, match="expected 8 floats"):
            be.predict(obs, "go", "s")
    finally:
        be.close()


def test_cameras_at_another_size_than_the_models_are_refused(server):
    be = backend(server())
    try:
        with pytest.raises(BackendError, match="trained on 256x256.*image_height"):
            be.predict(observation(128, 128), "go", "s")
    finally:
        be.close()


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


@pytest.mark.serial  # given up within 2 s of a 0.5 s timeout
def test_missing_handshake_times_out(server):
    srv = server(handshake_delay=3.0)
    start = time.monotonic()
    with pytest.raises(BackendError, match="no OpenPI handshake"):
        OpenPIBackend("127.0.0.1", srv.port, action_space=SPACE, connect_timeout=0.5)
    assert time.monotonic() - start < 2.0


@pytest.mark.serial  # given up within 1.8 s of a 0.5 s timeout
def test_inference_timeout_then_reconnects(server):
    calls = []

    def answer(obs):
        calls.append(1)
        if len(calls) == 1:
            time.sleep(2.0)
        return {"actions": np.zeros((10, 7))}

    srv = server(answer=answer)
    be = OpenPIBackend("127.0.0.1", srv.port, action_space=SPACE, timeout=0.5)
    try:
        start = time.monotonic()
        with pytest.raises(BackendError, match="within 0.5 s"):
            be.predict(observation(), "go", "s")
        assert time.monotonic() - start < 1.8
        assert be.predict(observation(), "go", "s").shape == (10, 7)
    finally:
        be.close()
