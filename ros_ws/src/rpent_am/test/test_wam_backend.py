"""The rpent_wam backend against the original RPent's WAM workers (Cosmos Policy and
Fast-WAM's LIBERO adapters behind the wam.* routes) on loopback, on both RPC transports:
what each model is fed, the chunk, the foreseen images and value, and every refusal."""
import dataclasses

import numpy as np
import pytest

from rpent_am.backends.wam import WamBackend
from rpent_am.model_io import SHIPPED
from rpent_am.policy import BackendError, PolicyObservation, Prediction
from rpent_contract.control_space import ControlSpaceSpec
from rpent_testkit.wam_servers import WamServer, cosmos3, cosmos_policy, fast_wam

LIBERO = ControlSpaceSpec(name="libero_osc_delta", labels=tuple("xyzabcg"), units=("1",) * 7,
                          lower=(-1.0,) * 7, upper=(1.0,) * 7, relative=True)
TRANSPORTS = ["http", "socket"]
IO = SHIPPED["wam_libero"]


def observation(size=256) -> PolicyObservation:
    rng = np.random.default_rng(3)
    half = np.sqrt(0.5)
    state = {"world_ee_x": 0.1, "world_ee_y": -0.2, "world_ee_z": 1.1,
             # the grip site pointing down, as LIBERO's Panda holds it
             "world_ee_qx": half, "world_ee_qy": half, "world_ee_qz": 0.0, "world_ee_qw": 0.0,
             "panda_finger_joint1": 0.03, "panda_finger_joint2": 0.029}
    return PolicyObservation(
        images={c: rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
                for c in ("agentview", "robot0_eye_in_hand")},
        state=np.array(list(state.values())), state_names=tuple(state))


def rows(values, n):
    return np.tile(np.resize(np.asarray(values, np.float64) * 0.1, 7), (n, 1))


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_cosmos_gets_its_9d_state_and_foresees_each_camera_and_a_value(transport):
    caps, model = cosmos_policy(lambda proprio, images, text: rows(proprio, 16),
                                predict_future=True)
    obs = observation()
    with WamServer(model, caps, transport=transport) as server:
        backend = WamBackend(server.endpoint, action_space=LIBERO, io=IO)
        prediction = backend.predict(obs, "put the bowl on the plate", "s")
        backend.reset("s")
        backend.close()
    assert isinstance(prediction, Prediction) and server.resets == 1
    meta = backend.meta
    assert (meta.chunk_size, meta.predicts_future, meta.predicts_value) == (16, True, True)
    assert meta.checkpoint == "nvidia/Cosmos-Policy-LIBERO-Predict2-2B"
    proprio, images = model.encoded[0]
    q_site = obs.state[3:7]
    np.testing.assert_allclose(proprio[:2], [0.03, -0.029], rtol=1e-6)
    np.testing.assert_allclose(proprio[2:5], [0.1, -0.2, 1.1], rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(proprio[5:]), 1.0, rtol=1e-6)
    assert proprio[5] > 0  # the hemisphere robosuite signs the hand's quaternion in
    assert not np.allclose(np.abs(proprio[5:]), np.abs(q_site))  # the hand, not the site
    np.testing.assert_array_equal(images["primary_image"], obs.images["agentview"])  # upright
    np.testing.assert_allclose(prediction.actions, rows(proprio, 16), rtol=1e-6)
    assert set(prediction.future_images) == {"agentview", "robot0_eye_in_hand"}
    np.testing.assert_array_equal(prediction.future_images["robot0_eye_in_hand"],
                                  obs.images["robot0_eye_in_hand"])
    assert prediction.value == pytest.approx(0.5)
    request = server.requests[0]
    assert request["state"]["eef_position"].dtype == np.float32
    assert (request["embodiment"], request["action_space"]) == \
        ("libero_7d", "libero.osc_pose.delta.v1")


def predicted(caps, model, obs, instruction, **options) -> tuple:
    """(backend, prediction) of one predict through a worker expected to be ``caps``'s."""
    with WamServer(model, caps, **options) as server:
        backend = WamBackend(server.endpoint, action_space=LIBERO, io=IO,
                             expected_backend=caps["backend"])
        prediction = backend.predict(obs, instruction, "s")
        backend.close()
    return backend, prediction


def test_fast_wam_turns_the_same_observation_into_its_own_8d_state():
    """Its axis-angle of the xyzw quaternion is the one openpi's LIBERO state uses, so the
    two pipelines agree on the same robot."""
    caps, model = fast_wam(lambda state, images, text: np.full((16, 7), 0.25), execute_steps=8)
    obs = observation()
    backend, prediction = predicted(caps, model, obs, "open the drawer",
                                    meta_route="wam.capabilities")
    state8, images = model.encoded[0]
    np.testing.assert_allclose(state8, SHIPPED["pi05_libero"].state_vector(obs), atol=1e-6)
    np.testing.assert_array_equal(images["primary"], obs.images["agentview"][:, ::-1])
    assert prediction.actions.shape == (8, 7) and backend.meta.chunk_size == 8
    np.testing.assert_allclose(prediction.actions[:, -1], 0.5)  # 1 - 2 * 0.25
    assert prediction.future_images == {} and prediction.value is None
    assert not backend.meta.predicts_future


def test_cosmos3_gets_both_views_without_a_state_and_its_workers_budget():
    """The Cosmos3 worker (its port 8118 in the original system) asks for no state and
    advertises the SGLang service's HTTP timeout plus 30 s, which the node waits for."""
    caps, model = cosmos3(lambda view, text: np.full((16, 7), 0.1), http_timeout_s=600)
    obs = observation()
    backend, prediction = predicted(caps, model, obs, "put both pots on the stove",
                                    transport="socket")
    assert (backend.meta.chunk_size, backend.meta.default_timeout) == (16, 630.0)
    assert backend.meta.checkpoint_id == "cosmos3:nvidia/cosmos3-nano-libero10-sdg-export-S2_s43"
    view, text = model.encoded[0]
    np.testing.assert_array_equal(view[:, :256], obs.images["agentview"])
    np.testing.assert_array_equal(view[:, 256:], obs.images["robot0_eye_in_hand"])
    assert text == "put both pots on the stove"
    np.testing.assert_allclose(prediction.actions, 0.1, rtol=1e-6)
    assert prediction.future_images == {} and prediction.value is None
    with WamServer(model, caps) as server, pytest.raises(BackendError, match="cosmos3"):
        WamBackend(server.endpoint, action_space=LIBERO, io=IO, expected_backend="fast_wam")


def cosmos(**kw):
    return cosmos_policy(lambda p, i, t: np.zeros((16, 7)), **kw)


def test_a_future_given_as_frames_of_different_sizes_foresees_the_last():
    caps, model = cosmos(predict_future=True)
    first, last = np.full((64, 64, 3), 1, np.uint8), np.full((128, 96, 3), 2, np.uint8)
    answer = {"actions": np.zeros((16, 7), np.float32),
              "future_observation": {"wrist": [first, last]}}
    with WamServer(lambda request: (model(request), answer)[1], caps) as server:
        prediction = WamBackend(server.endpoint, action_space=LIBERO, io=IO).predict(
            observation(), "go", "s")
    assert list(prediction.future_images) == ["robot0_eye_in_hand"]
    np.testing.assert_array_equal(prediction.future_images["robot0_eye_in_hand"], last)


@pytest.mark.parametrize("change, match", [
    (lambda c: c["control"].update(action_space="libero.joint_pos.v1"), "WAM control mismatch"),
    (lambda c: c.update(backend="dreamzero"), "expected backend 'cosmos_policy', got 'dreamzero'"),
    (lambda c: c.update(uses_sessions=True), "keeps a session per client"),
    (lambda c: c["camera_roles"].append("extra"), r"camera role\(s\) \['extra'\]"),
    (lambda c: c["state_schema"].update(joint_positions=7), "needs state"),
    (lambda c: c.pop("control"), "without a 'control' dictionary"),
])
def test_a_worker_that_does_not_fit_is_refused_at_start_up(change, match):
    caps, model = cosmos()
    change(caps)
    with WamServer(model, caps) as server:
        with pytest.raises(BackendError, match=match):
            WamBackend(server.endpoint, action_space=LIBERO, io=IO,
                       expected_backend="cosmos_policy")


def test_an_action_space_without_a_wam_contract_is_refused():
    arm = ControlSpaceSpec(name="ee_delta", labels=tuple("xyzabcg"), units=("1",) * 7,
                           lower=(-1.0,) * 7, upper=(1.0,) * 7, relative=True)
    with pytest.raises(BackendError, match="no WAM control contract .* 'ee_delta'"):
        WamBackend("http://127.0.0.1:1", action_space=arm, io=IO)


@pytest.mark.parametrize("answer, match", [
    ({"actions": np.zeros((16, 6), np.float32)}, r"shape \(16, 6\); expected \(horizon, 7\)"),
    ({"actions": np.zeros((5, 7), np.float32)}, "answered 5 actions; .* predicts 16"),
    ({"actions": np.full((16, 7), np.nan, np.float32)}, "non-finite actions"),
    ({"chunk": []}, "has no 'actions'"),
])
def test_a_malformed_prediction_fails_with_the_reason(answer, match):
    caps, model = cosmos()
    with WamServer(lambda request: (model(request), answer)[1], caps) as server:
        backend = WamBackend(server.endpoint, action_space=LIBERO, io=IO)
        with pytest.raises(BackendError, match=match):
            backend.predict(observation(), "go", "s")


def test_the_workers_own_refusals_reach_the_goal():
    caps, model = cosmos()
    with WamServer(model, caps) as server:
        with pytest.raises(BackendError, match="trained on 256x256: set the robot's"):
            WamBackend(server.endpoint, action_space=LIBERO, io=IO).predict(
                observation(size=128), "go", "s")
        # Without the node's own check of the camera size, the worker refuses the image.
        backend = WamBackend(server.endpoint, action_space=LIBERO,
                             io=dataclasses.replace(IO, camera_size=(0, 0)))
        with pytest.raises(BackendError, match="must be an RGB image shaped"):
            backend.predict(observation(size=128), "go", "s")
        with pytest.raises(BackendError, match="instruction must be a non-empty string"):
            backend.predict(observation(), "", "s")
        request = {"images": {}, "state": {}, "instruction": "x", "embodiment": "libero_7d",
                   "action_space": "libero.osc_pose.delta.v1"}
        answer = server.answer({"method": "wam.predict", "args": (request,), "kwargs": {}})
    assert answer["ok"] is False
    assert answer["error"] == "images.primary must have non-empty [H, W, 3] uint8 RGB shape"
