"""The rpent_http and rpent_vla backends against the original RPent's VLA servers on
loopback, on both RPC transports: what the server received is what the model needs, the
chunk comes back whole, sessions reach a session-aware server, and every refusal, failure
and silence gives an error with the server's reason."""
import http.client
import json
import socket
import threading

import numpy as np
import pytest

from rpent_am.backends.rpent_http import RpentHttpBackend, RpentVlaBackend
from rpent_am.model_io import ImageInput, ModelIO, StateTerm
from rpent_am.policy import BackendError, ModelMeta, PolicyBackend, PolicyObservation
from rpent_contract.control_space import ControlSpaceSpec
from rpent_contract.images import encode_png
from rpent_contract.rpc import RpcServer, UnsafePayload, from_json, to_json
from rpent_testkit.vla_servers import Pi05Server, VlaFacadeServer

SPACE = ControlSpaceSpec(name="osc7", labels=tuple("abcdefg"), units=("1",) * 7,
                         lower=(-1.0,) * 7, upper=(1.0,) * 7, relative=True,
                         step_scale=(0.05,) * 3 + (0.5,) * 3)
NAMES = tuple(f"s{i}" for i in range(7))
TRANSPORTS = ["http", "socket"]


def io(main="main", wrist="wrist", state_key="state", prompt_key="instruction") -> ModelIO:
    return ModelIO("test", images=(ImageInput("front", main), ImageInput("side", wrist)),
                   state=tuple(StateTerm("value", entry=n) for n in NAMES),
                   state_key=state_key, prompt_key=prompt_key)


class Recorder(PolicyBackend):
    """A model whose chunk shows what reached it: row i = state * (i + 1)."""

    meta = ModelMeta("recorder", "ckpt", "ckpt-1", SPACE, 8)

    def __init__(self):
        self.calls, self.resets = [], []

    def predict(self, observation, instruction, session):
        self.calls.append((observation, instruction, session))
        return np.outer(np.arange(1, 9), observation.state[:7])

    def reset(self, session=None):
        self.resets.append(session)


def observation():
    rng = np.random.default_rng(1)
    return PolicyObservation(images={"front": rng.integers(0, 255, (48, 64, 3), dtype=np.uint8),
                                     "side": rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)},
                             state=np.linspace(-0.5, 0.5, 7), state_names=NAMES)


def pi05(endpoint, **kwargs):
    return RpentHttpBackend(endpoint, action_space=SPACE, io=kwargs.pop("io", io()), **kwargs)


FACADE = dict(images=("video.front", "video.side"), state_key="state.robot",
              prompt_key="annotation.task", actions={"action.arm": 6, "action.gripper": 1})


def facade_io():
    return io("video.front", "video.side", "state.robot", "annotation.task")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_pi05_server_gets_its_inputs_and_the_chunk_comes_back(transport):
    model = Recorder()
    with Pi05Server(model, transport=transport) as server:
        backend = pi05(server.endpoint, chunk_size=3, timeout=5.0)
        obs = observation()
        chunk = backend.predict(obs, "stack the cups", "client-a")
        backend.close()
    np.testing.assert_allclose(chunk, np.outer(np.arange(1, 4), obs.state), rtol=1e-6)
    instruction, images, state, mode = server.requests[0]
    assert (instruction, mode) == ("stack the cups", "eval")
    np.testing.assert_array_equal(images["main"], obs.images["front"])  # lossless PNG
    np.testing.assert_array_equal(images["wrist"], obs.images["side"])
    assert state.dtype == np.float32
    np.testing.assert_allclose(state, obs.state, rtol=1e-6)
    assert backend.meta.backend == "rpent_http" and backend.meta.required_cameras == \
        ("front", "side")


def test_pi05_needs_a_main_image():
    with Pi05Server(Recorder()) as server:
        with pytest.raises(BackendError, match="takes 'main' \\(required\\)"):
            pi05(server.endpoint, io=io(main="left"))


@pytest.mark.parametrize("kwargs, why", [
    ({"instruction": "x", "images": {}, "state": [[0.0]]}, "'images.main' is required"),
    ({"instruction": "x", "images": {"main": {"format": "jpeg", "data": "AA=="}},
      "state": [[0.0]]}, "only 'png'"),
    ({"instruction": "x", "images": {"main": {"format": "png"}}, "state": [[0.0]]},
     "missing base64 'data'"),
    ({"instruction": "x", "images": {"main": {"data": encode_png(np.zeros((4, 4), np.uint8))}},
      "state": [0.0]}, "state must be [B, state_dim]"),
    ({"instruction": "x"}, "missing 2 required positional arguments"),
])
def test_the_pi05_server_refuses_what_the_original_refuses(kwargs, why):
    with Pi05Server(Recorder()) as server:
        answer = server.answer({"method": "predict", "args": (), "kwargs": kwargs})
    assert answer["ok"] is False and why in answer["error"], answer


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_session_aware_facade_keeps_each_clients_memory(transport):
    model = Recorder()
    with VlaFacadeServer(model, transport=transport, **FACADE) as server:
        backend = RpentVlaBackend(server.endpoint, action_space=SPACE, io=facade_io(),
                                  action_keys=("action.arm", "action.gripper"), timeout=5.0)
        obs = observation()
        np.testing.assert_allclose(backend.predict(obs, "open the drawer", "a"),
                                   np.outer(np.arange(1, 9), obs.state), rtol=1e-6)
        backend.predict(obs, "open the drawer", "a")
        backend.predict(obs, "open the drawer", "b")
        backend.reset("a")
        backend.predict(obs, "open the drawer", "a")
        backend.close()
    options = [opts for _, opts in server.requests]
    assert [(o["session_ids"][0], o["reset_memory"][0]) for o in options] == \
        [("a", True), ("a", False), ("b", True), ("a", True)]
    # A fresh session is reset by the server; reset("a") reached it as vla.reset_session.
    assert model.resets == ["a", "b", "a", "a"]
    sent, _ = server.requests[0]
    assert sent["video.front"].shape == (1, 1, 48, 64, 3) and sent["video.front"].dtype == np.uint8
    assert sent["state.robot"].shape == (1, 1, 7) and sent["annotation.task"] == ["open the drawer"]
    assert [call[2] for call in model.calls] == ["a", "a", "b", "a"]


def test_a_facade_wanting_a_frame_history_is_refused_with_what_it_needs():
    with VlaFacadeServer(Recorder(), history=(-6, -4, -2, 0), **FACADE) as server:
        with pytest.raises(BackendError, match="history of 4 frames"):
            RpentVlaBackend(server.endpoint, action_space=SPACE, io=facade_io())


def test_action_keys_the_server_does_not_answer_are_named():
    with VlaFacadeServer(Recorder(), **FACADE) as server:
        backend = RpentVlaBackend(server.endpoint, action_space=SPACE, io=facade_io(),
                                  action_keys=("action.arm", "action.base"))
        with pytest.raises(BackendError, match=r"lacks \['action.base'\]"):
            backend.predict(observation(), "go", "s")


class Broken(PolicyBackend):
    meta = Recorder.meta

    def predict(self, observation, instruction, session):
        raise RuntimeError("CUDA out of memory")


def scripted(result):
    """A server whose predict answers ``result`` after the real server's checks."""
    checker = Pi05Server(Recorder())
    checker.close()

    def predict(*args, **kwargs):
        checker.predict(*args, **kwargs)
        return result

    return RpcServer({"predict": predict})


@pytest.mark.parametrize("server, match", [
    (lambda: Pi05Server(Broken()), r"predict failed on http://.*: CUDA out of memory"),
    (lambda: RpcServer({}), r"unknown RPC method: 'predict'"),
    (lambda: scripted({"chunk": []}), "has no 'actions'"),
    (lambda: scripted({"actions": [[0.0] * 7] * 4}), r"shape \(4, 7\)"),
    (lambda: scripted({"actions": [[[0.0] * 6] * 4]}), r"shape \(4, 6\); expected \(horizon, 7\)"),
    (lambda: scripted({"actions": [[[np.nan] * 7]]}), "non-finite"),
    (lambda: scripted({"actions": [[[0.0] * 7]], "shape": [1, 2, 7]}), "its 'shape' says"),
])
def test_a_failed_or_malformed_answer_fails_with_the_reason(server, match):
    with server() as srv:
        backend = pi05(srv.endpoint, timeout=5.0)
        with pytest.raises(BackendError, match=match):
            backend.predict(observation(), "go", "s")
        backend.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_server_that_is_down_hangs_or_drops_the_call_is_reported(transport):
    release = threading.Event()

    class Hang(Recorder):
        def predict(self, observation, instruction, session):
            release.wait(10)
            return super().predict(observation, instruction, session)

    with Pi05Server(Hang(), transport=transport) as server:
        backend = pi05(server.endpoint, timeout=0.5, connect_timeout=2.0)
        try:
            with pytest.raises(BackendError, match="no answer .* within 0.5 s"):
                backend.predict(observation(), "go", "s")
        finally:
            release.set()
    with pytest.raises(BackendError, match="cannot reach the VLA server"):
        backend.predict(observation(), "go", "s")
    with pytest.raises(BackendError, match="cannot reach the VLA server"):
        pi05(server.endpoint, connect_timeout=1.0)

    # A peer that takes the request and closes the connection without answering.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        done = threading.Event()

        def drop():
            listener.settimeout(0.2)
            while not done.is_set():  # the HTTP client tries twice, the socket one once
                try:
                    conn, _ = listener.accept()
                except socket.timeout:
                    continue
                conn.recv(1 << 16)
                conn.close()

        peer = threading.Thread(target=drop, daemon=True)
        peer.start()
        try:
            with pytest.raises(BackendError, match="cannot reach the VLA server"):
                pi05(f"{transport}://127.0.0.1:{port}", connect_timeout=2.0)
        finally:
            done.set()
            peer.join(5)


def test_http_arrays_travel_tagged_and_only_data_is_admitted():
    value = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": [np.int64(3), "x"]}
    wire = json.loads(json.dumps(to_json(value)))
    assert wire["a"] == {"__ndarray__": wire["a"]["__ndarray__"], "dtype": "float32",
                         "shape": [2, 3]}
    back = from_json(wire)
    np.testing.assert_array_equal(back["a"], value["a"])
    assert back["b"] == [3, "x"]
    with pytest.raises(UnsafePayload, match="dtype object"):
        to_json(np.array([None]))
    with pytest.raises(UnsafePayload, match="not data"):
        from_json({"__ndarray__": "", "dtype": "object", "shape": [0]})


def test_the_http_transport_answers_200_with_the_envelope_and_404_elsewhere():
    with RpcServer({"echo": lambda x: x}) as server:
        host, port = server.endpoint[len("http://"):].split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        conn.request("POST", "/call", json.dumps({"method": "nope", "args": [], "kwargs": {}}))
        response = conn.getresponse()
        answer = json.loads(response.read())
        assert response.status == 200 and answer["ok"] is False
        assert answer["error"] == "unknown RPC method: 'nope'"
        assert "Traceback" in answer["traceback"]
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        conn.request("POST", "/predict", "{}")
        response = conn.getresponse()
        assert response.status == 404 and response.read() == b""
