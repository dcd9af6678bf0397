"""Contract messages <-> policy observations, and the checks against a model's metadata."""
from __future__ import annotations

import contextlib
from typing import Optional, Sequence

import numpy as np

from rpent_contract.geometry import WORLD_FRAME, compose, pose_from_msg, stamp_to_ns
from rpent_contract.images import image_to_numpy, numpy_to_image, to_rgb
from rpent_contract.tf_tree import TfTree

from .policy import BackendError, ModelMeta, PolicyObservation, Prediction

# robot_state entries of the end effector in the robot's world frame: world_ee_x, ...
WORLD_PREFIX = "world_"
# State entries every robot can provide from robot_state, besides its joint names.
POSE_STATE = {
    "ee_x": lambda s: s.ee_pose.position.x, "ee_y": lambda s: s.ee_pose.position.y,
    "ee_z": lambda s: s.ee_pose.position.z, "ee_qx": lambda s: s.ee_pose.orientation.x,
    "ee_qy": lambda s: s.ee_pose.orientation.y, "ee_qz": lambda s: s.ee_pose.orientation.z,
    "ee_qw": lambda s: s.ee_pose.orientation.w, "gripper_width": lambda s: s.gripper_width,
}


class ObservationError(ValueError):
    """An observation does not fit the model; nothing was predicted."""


def state_from_robot_state(msg, names: Sequence[str], frames: Optional[TfTree] = None,
                           frame_wait: float = 0.0) -> np.ndarray:
    """Pick ``names`` out of a RobotState: ee pose / gripper entries, joint names, or the ee
    pose in the robot's world frame (``world_ee_x`` ..., from the static frames in
    ``frames``, waiting up to ``frame_wait`` s for the world frame: a robot's latched
    /tf_static reaches a node that has just discovered it some time after its robot_state
    can, and the first goal must not fail)."""
    joints = dict(zip(msg.joint_names, msg.joint_positions))
    world = None
    values = []
    for name in names:
        if name in POSE_STATE:
            values.append(POSE_STATE[name](msg))
        elif name in joints:
            values.append(joints[name])
        elif name.startswith(WORLD_PREFIX) and name[len(WORLD_PREFIX):] in POSE_STATE:
            if world is None:
                world = _ee_in_world(msg, frames, frame_wait)
            values.append(world[name[len(WORLD_PREFIX):]])
        else:
            raise ObservationError(
                f"the model needs state '{name}', which robot_state does not carry "
                f"(has {', '.join(list(POSE_STATE) + list(joints))}, and the world_ entries "
                "where the robot has a world frame)")
    return np.asarray(values, dtype=np.float64)


def _ee_in_world(msg, frames: Optional[TfTree], wait: float) -> dict:
    base = None
    if frames is not None:
        with contextlib.suppress(LookupError):
            base = frames.lookup_above(WORLD_FRAME, msg.header.frame_id, timeout=wait)
    if base is None:
        raise ObservationError(
            f"the model needs the end effector in the robot's world frame, and no "
            f"'{WORLD_FRAME}' frame above '{msg.header.frame_id}' came on /tf_static"
            f"{f' within {wait:g} s' if wait else ''}: only a robot with a world (a "
            "simulator) publishes one; serve a model_io without world_ state entries for "
            "this robot")
    p, q = compose(*base, *pose_from_msg(msg.ee_pose))
    return dict(zip(("ee_x", "ee_y", "ee_z", "ee_qx", "ee_qy", "ee_qz", "ee_qw"),
                    [*p, *q]))


def from_msg(msg) -> PolicyObservation:
    """rpent_interfaces/Observation -> PolicyObservation."""
    if len(msg.camera_names) != len(msg.images):
        raise ObservationError(
            f"observation has {len(msg.images)} images but {len(msg.camera_names)} camera names")
    if len(msg.state) != len(msg.state_names):
        raise ObservationError(
            f"observation has {len(msg.state)} state values but {len(msg.state_names)} names")
    images = {name: to_rgb(image_to_numpy(img), img.encoding)
              for name, img in zip(msg.camera_names, msg.images)}
    return PolicyObservation(images, np.asarray(msg.state, dtype=np.float64),
                             list(msg.state_names), stamp_to_ns(msg.header.stamp))


def to_msg(obs: PolicyObservation, msg=None):
    """PolicyObservation -> rpent_interfaces/Observation (images rgb8)."""
    from rpent_interfaces.msg import Observation

    msg = msg if msg is not None else Observation()
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(obs.stamp_ns), 1_000_000_000)
    msg.camera_names = list(obs.images)
    msg.images = [numpy_to_image(rgb, "rgb8") for rgb in obs.images.values()]
    msg.state = [float(v) for v in obs.state]
    msg.state_names = list(obs.state_names)
    return msg


def check_observation(obs: PolicyObservation, meta: ModelMeta) -> PolicyObservation:
    """Refuse an observation the model cannot use; reorder its state as the model expects."""
    missing = [c for c in meta.required_cameras if c not in obs.images]
    if missing:
        raise ObservationError(
            f"the model needs camera(s) {', '.join(missing)}; the observation has "
            f"{', '.join(obs.images) or 'none'}")
    for name in meta.required_cameras:
        rgb = obs.images[name]
        if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
            raise ObservationError(f"camera '{name}' must be HxWx3 uint8 RGB, got "
                                   f"{rgb.shape} {rgb.dtype}")
    if not np.all(np.isfinite(obs.state)):
        raise ObservationError("observation state contains non-finite values")
    try:
        state = np.array([obs.state[list(obs.state_names).index(n)] for n in meta.state_names])
    except ValueError:
        absent = [n for n in meta.state_names if n not in obs.state_names]
        raise ObservationError(f"the model needs state entries {', '.join(absent)}, "
                               f"the observation has {', '.join(obs.state_names)}") from None
    return PolicyObservation(obs.images, state.astype(np.float64), list(meta.state_names),
                             obs.stamp_ns, obs.robot)


def check_foresight(prediction: Prediction, meta: ModelMeta) -> Prediction:
    """What a model foresaw must be what its metadata promises: images HxWx3 uint8 RGB of
    the cameras it names, a finite value."""
    if prediction.future_images and not meta.predicts_future:
        raise BackendError("backend returned a foreseen observation its metadata does not "
                           "promise (predicts_future is false)")
    if prediction.value is not None and not meta.predicts_value:
        raise BackendError("backend returned a value its metadata does not promise "
                           "(predicts_value is false)")
    for camera, image in prediction.future_images.items():
        image = np.asarray(image)
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3 or not image.size:
            raise BackendError(f"backend foresaw camera '{camera}' as a {image.dtype} array of "
                               f"shape {image.shape}; expected HxWx3 uint8 RGB")
    if prediction.value is not None and not np.isfinite(prediction.value):
        raise BackendError(f"backend returned a non-finite value ({prediction.value})")
    return prediction


def check_chunk_shape(actions, meta: ModelMeta) -> np.ndarray:
    """The model's own answer must fit its metadata before it goes anywhere."""
    actions = np.asarray(actions, dtype=np.float64)
    dim = meta.action_space.dim
    if actions.ndim != 2 or actions.shape[1] != dim or actions.shape[0] == 0:
        raise BackendError(
            f"backend returned a chunk of shape {actions.shape}; its metadata promises "
            f"(horizon, {dim}) in '{meta.action_space.name}'")
    if not np.all(np.isfinite(actions)):
        raise BackendError("backend returned non-finite actions")
    return actions
