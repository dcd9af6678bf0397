"""LeRobotBackend on a tiny ACT policy with random weights, saved and loaded the LeRobot way."""
import numpy as np
import pytest

from rpent_am.model_io import ModelIO
from rpent_am.policy import BackendError, PolicyObservation
from rpent_contract.control_space import ControlSpaceSpec
from rpent_testkit import tiny_act

pytestmark = pytest.mark.slow

SPACE = ControlSpaceSpec(name="osc7", labels=tuple("abcdefg"), units=("1",) * 7,
                         lower=(-1.0,) * 7, upper=(1.0,) * 7, relative=True)
STATE = ("ee_x", "ee_y", "ee_z", "ax", "ay", "az", "f1", "f2")
CAMERAS = tiny_act.CAMERAS
ACTION_MEAN, ACTION_STD = 0.25, 0.01


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return tiny_act.build(tmp_path_factory.mktemp("act_tiny"), image_size=64,
                          action_mean=ACTION_MEAN, action_std=ACTION_STD)


def observation(seed=0):
    rng = np.random.default_rng(seed)
    return PolicyObservation(
        images={cam: rng.integers(0, 255, (64, 64, 3), dtype=np.uint8) for cam in CAMERAS},
        state=rng.normal(size=8), state_names=STATE)


def fed(cameras=CAMERAS, state=STATE):
    return ModelIO.simple("test", cameras, state)


def backend(folder, action_space=SPACE, io=None, **kw):
    # Imported when a test runs: LeRobot loads torch, 8 s that every pytest process (each
    # xdist worker too) would pay while collecting, even when these tests are deselected.
    from rpent_am.backends.lerobot_backend import LeRobotBackend

    return LeRobotBackend(str(folder), action_space=action_space, io=io or fed(), **kw)


def test_predict_through_saved_checkpoint(checkpoint):
    be = backend(checkpoint)
    try:
        assert be.meta.chunk_size == 10  # ACT's n_action_steps
        assert (be.meta.image_height, be.meta.image_width) == (64, 64)
        assert be.meta.extra["policy_type"] == "act"
        chunk = be.predict(observation(), "pick up the bowl", "s1")
        assert chunk.shape == (10, 7) and np.all(np.isfinite(chunk))
        # The post-processor un-normalised: actions sit around the dataset mean.
        assert abs(chunk.mean() - ACTION_MEAN) < 20 * ACTION_STD
        np.testing.assert_allclose(be.predict(observation(), "pick up the bowl", "s1"), chunk,
                                   rtol=1e-5, atol=1e-6)
        assert not np.allclose(be.predict(observation(seed=1), "pick up the bowl", "s1"), chunk)
        assert backend(checkpoint, chunk_size=20).predict(observation(), "x", "s").shape == (20, 7)
    finally:
        be.close()


def test_sessions_share_weights_and_reset(checkpoint):
    be = backend(checkpoint)
    try:
        a = be.predict(observation(), "go", "a")
        b = be.predict(observation(), "go", "b")
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        pa, pb = be._sessions["a"], be._sessions["b"]
        assert pa is not pb
        assert next(pa.parameters()).data_ptr() == next(pb.parameters()).data_ptr()
        be.reset("a")
        assert set(be._sessions) == {"b"}
        be.predict(observation(), "go", "a")
        assert be._sessions["a"] is not pa
        be.reset()
        assert not be._sessions
    finally:
        be.close()


def test_configuration_mismatches_are_clear(checkpoint, tmp_path):
    with pytest.raises(BackendError, match="observation.images.front"):
        backend(checkpoint, io=fed({"agentview": "x"}))
    with pytest.raises(BackendError, match="8 entries; test makes 3"):
        backend(checkpoint, io=fed(state=STATE[:3]))
    six = ControlSpaceSpec(name="six", labels=tuple("abcdef"), units=("1",) * 6,
                           lower=(-1.0,) * 6, upper=(1.0,) * 6, relative=True)
    with pytest.raises(BackendError, match="6 entries"):
        backend(checkpoint, action_space=six)
    with pytest.raises(BackendError, match="not a LeRobot checkpoint"):
        backend(tmp_path)
    be = backend(checkpoint)
    obs = observation()
    del obs.images["robot0_eye_in_hand"]
    with pytest.raises(BackendError, match="robot0_eye_in_hand"):
        be.predict(obs, "go", "s")


def test_a_batch_gives_each_request_the_chunk_it_gets_alone(checkpoint):
    from rpent_am.policy import Request

    be = backend(checkpoint)
    try:
        assert be.batching  # ACT's chunk depends on the observation alone
        requests = [Request(observation(seed=i), f"task {i}", f"s{i}") for i in range(8)]
        alone = [be.predict(r.observation, r.instruction, r.session) for r in requests]
        batched = be.predict_batch(requests)
        assert len(batched) == 8
        for one, many in zip(alone, batched):
            # One forward pass over 8 items may sum in another order than over 1.
            np.testing.assert_allclose(many, one, rtol=1e-5, atol=1e-6)
        assert not np.allclose(batched[0], batched[1])
        short = observation()
        short.state, short.state_names = short.state[:5], STATE[:5]  # no observation.state
        answers = be.predict_batch([requests[0], Request(short, "x", "bad"), requests[2]])
        assert isinstance(answers[1], BackendError)
        np.testing.assert_allclose(answers[2], alone[2], rtol=1e-5, atol=1e-6)
    finally:
        be.close()


def libero_observation(seed=0) -> PolicyObservation:
    """What lerobot_libero reads of a LIBERO robot: 256 px cameras, world pose, fingers."""
    rng = np.random.default_rng(seed)
    half = np.sqrt(0.5)
    state = {"world_ee_x": 0.1, "world_ee_y": -0.2, "world_ee_z": 1.1, "world_ee_qx": half,
             "world_ee_qy": half, "world_ee_qz": 0.0, "world_ee_qw": 0.0,
             "panda_finger_joint1": 0.03, "panda_finger_joint2": 0.029}
    return PolicyObservation(
        images={c: rng.integers(0, 255, (256, 256, 3), dtype=np.uint8)
                for c in ("agentview", "robot0_eye_in_hand")},
        state=np.array(list(state.values())), state_names=tuple(state))


def test_smolvla_built_offline_answers_through_lerobot_libero(tmp_path, monkeypatch):
    """LeRobot's SmolVLA (a tiny VLM and action expert, random weights, its tokenizer and
    processors) loads from its checkpoint with the hub out of reach and answers a chunk
    from LeRobot's LIBERO inputs."""
    from rpent_am.model_io import SHIPPED
    from rpent_am.policy import Request
    from rpent_testkit import tiny_smolvla

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    folder = tiny_smolvla.build(tmp_path / "smolvla", chunk_size=10)
    be = backend(folder, io=SHIPPED["lerobot_libero"])
    try:
        assert be.meta.extra["policy_type"] == "smolvla" and be.meta.chunk_size == 10
        assert set(be.meta.required_cameras) == {"agentview", "robot0_eye_in_hand"}
        chunk = be.predict(libero_observation(), "pick the alphabet soup and place it in the "
                           "basket", "s1")
        assert chunk.shape == (10, 7) and np.all(np.abs(chunk) < 1.0)
        assert be.batching
        answers = be.predict_batch([Request(libero_observation(i), "turn on the stove", f"s{i}")
                                    for i in range(2)])
        assert [a.shape for a in answers] == [(10, 7), (10, 7)]
    finally:
        be.close()
