"""ModelIO as configuration: YAML files, refusals, and what each image and state term does.
(The shipped LIBERO configurations against openpi's and LeRobot's own code:
test_model_io_libero.py.)"""
from __future__ import annotations

import numpy as np
import pytest

from rpent_am.model_io import ImageInput, ModelIO, StateTerm, load
from rpent_am.policy import BackendError, PolicyObservation

YAML = """
images:
  - {camera: agentview, key: observation.images.front, mirror: true, size: [8, 8]}
state:
  - {kind: position, frame: base}
  - {kind: axis_angle, frame: base, hemisphere: [1, 0, 0, 0]}
  - {kind: value, entry: gripper_width, scale: 10}
state_key: observation.state
prompt_key: task
"""
NAMES = ["ee_x", "ee_y", "ee_z", "ee_qx", "ee_qy", "ee_qz", "ee_qw", "gripper_width"]


def observation(image, state=(0.1, 0.2, 0.3, 0.0, 0.0, 0.0, -1.0, 0.05)):
    return PolicyObservation({"agentview": image}, np.array(state), NAMES)


def test_a_yaml_file_describes_a_model(tmp_path):
    path = tmp_path / "front.yaml"
    path.write_text(YAML)
    io = load(str(path))
    assert io.name == "front" and io.cameras == ("agentview",) and io.prompt_key == "task"
    assert io.entries() == NAMES and io.state_size == 7
    image = np.zeros((4, 8, 3), np.uint8)
    image[:, :4] = 255  # left half white
    inputs = io.inputs(observation(image))
    front = inputs["observation.images.front"]
    assert front.shape == (8, 8, 3)  # padded top and bottom
    assert front[4, 0].sum() == 0 and front[4, 7].sum() == 3 * 255  # mirrored
    assert not front[0].any() and not front[7].any()
    # identity quaternion (w = -1 as given): the hemisphere of x > 0 has no preference
    # between +-q here (x = 0), so the given sign stays: 2 acos(-1) about no axis -> zeros.
    np.testing.assert_allclose(inputs["observation.state"], [0.1, 0.2, 0.3, 0, 0, 0, 0.5])


@pytest.mark.parametrize("text, match", [
    ("images: [{camera: a, key: b, turn: 90}]", "turn"),
    ("state: [{kind: speed}]", "kind 'speed'"),
    ("state: [{kind: value}]", "needs entry"),
    ("state: [{kind: position, frame: map}]", "frame 'map'"),
    ("images: [{camera: a, key: b, rotate: 45}]", "rotate must be"),
    ("images: [{camera: a, key: b, size: [224, 0]}]", "size must be"),
    ("cameras: [a]", "unknown model_io field"),
])
def test_a_malformed_file_is_refused_with_what_is_wrong(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        load(str(path))


def test_an_unknown_name_lists_the_shipped_ones():
    with pytest.raises(ValueError, match="pi05_libero, lerobot_libero"):
        load("pi0_droid")


def test_rotation_turns_counter_clockwise_after_mirroring():
    image = np.zeros((2, 3, 3), np.uint8)
    image[0, 0] = 255  # top left
    turned = ImageInput("a", "k", rotate=90).prepare(image)
    assert turned.shape == (3, 2, 3) and turned[2, 0].sum() == 3 * 255  # now bottom left
    both = ImageInput("a", "k", mirror=True, rotate=180).prepare(image)
    assert both[1, 0].sum() == 3 * 255  # top right, then turned half way: bottom left


def test_the_quaternion_sign_follows_the_hemisphere():
    """Two quaternions of one rotation give axis-angle vectors 2 pi apart: a model sees the
    one it was trained on."""
    q = np.array([0.999, 0.0, 0.0, -0.0447])
    q /= np.linalg.norm(q)
    obs = PolicyObservation({}, np.concatenate([np.zeros(3), q, [0.0]]), NAMES)
    towards_x = StateTerm("axis_angle", hemisphere=(1.0, 0.0, 0.0, 0.0)).values(obs)
    towards_w = StateTerm("axis_angle").values(obs)
    assert towards_x[0] > 3.0 and towards_w[0] < -3.0
    np.testing.assert_allclose(np.linalg.norm(towards_x - towards_w), 2 * np.pi, atol=1e-6)


def test_cameras_at_another_resolution_than_trained_are_refused():
    io = ModelIO("m", images=(ImageInput("agentview", "img"),), camera_size=(256, 256))
    with pytest.raises(BackendError, match="trained on 256x256"):
        io.inputs(observation(np.zeros((128, 128, 3), np.uint8)))
    with pytest.raises(BackendError, match="lacks camera 'agentview'"):
        io.inputs(PolicyObservation({}, np.zeros(8), NAMES))


def test_the_world_frame_is_waited_for_and_its_absence_explained():
    """A model node that has just discovered a robot may hear its robot_state before the
    robot's latched /tf_static: the state waits for the world frame a bounded time."""
    import threading

    from geometry_msgs.msg import TransformStamped
    from tf2_msgs.msg import TFMessage

    from rpent_am.observation import ObservationError, state_from_robot_state
    from rpent_contract.tf_tree import TfTree
    from rpent_interfaces.msg import RobotState

    msg = RobotState()
    msg.header.frame_id = "pi/base_link"
    msg.ee_pose.position.x, msg.ee_pose.orientation.w = 0.5, 1.0
    frames = TfTree()
    with pytest.raises(ObservationError, match="no 'world' frame above 'pi/base_link'.*0.1 s"):
        state_from_robot_state(msg, ["world_ee_x"], frames, frame_wait=0.1)
    world = TransformStamped()
    world.header.frame_id, world.child_frame_id = "pi/world", "pi/base_link"
    world.transform.translation.x, world.transform.rotation.w = -0.6, 1.0
    late = threading.Timer(0.2, frames.add_static, [TFMessage(transforms=[world])])
    late.start()
    try:
        state = state_from_robot_state(msg, ["world_ee_x", "ee_x"], frames, frame_wait=10.0)
    finally:
        late.cancel()
    np.testing.assert_allclose(state, [-0.1, 0.5])
