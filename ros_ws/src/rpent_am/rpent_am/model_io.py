"""What a model is fed, prepared exactly as in its training: typed configuration.

A trained policy works only on inputs prepared the way its training data was: which
cameras under which keys, turned which way, at which size, and a state vector composed
of particular quantities in particular frames. :class:`ModelIO` says all of that for one
model; :meth:`ModelIO.inputs` turns a contract observation (upright RGB images, named
robot_state entries) into the model's inputs. No ROS here.

Shipped configurations (``model_io:=<name>`` on the action-model node), written from the
sources of the stacks that trained them:

* ``pi05_libero``: openpi's ``pi05_libero`` served by ``scripts/serve_policy.py``, fed as
  openpi's ``examples/libero/main.py`` feeds it;
* ``lerobot_libero``: LeRobot's LIBERO checkpoints (pi0.5, SmolVLA), fed as
  ``lerobot-eval`` feeds them: ``LeRobotEnv``'s LIBERO observation through
  ``LiberoProcessorStep``; each checkpoint's own processor does the rest (normalisation,
  resize to the model's size, tokenisation) inside the backend;
* ``rpent_pi05_libero``: the original RPent's pi0.5 VLA server (the ``rpent_http``
  backend), fed as its LIBERO environment feeds it;
* ``wam_libero``: the original RPent's world-action-model workers on LIBERO (Cosmos
  Policy, Fast-WAM; the ``rpent_wam`` backend): its physical observation, from which each
  worker encodes its model's own inputs (Cosmos: a 9-D state with the xyzw quaternion;
  Fast-WAM: 8-D with its axis-angle, images turned 180 degrees).

The first three take LIBERO's images turned 180 degrees from the simulator's raw (bottom-up) render,
which the LIBERO datasets were recorded with; contract images are upright (the raw render
flipped top to bottom), so that is a left-right mirror of them; ``wam_libero`` takes
them upright, as the workers' physical observation does. All take the state
``robot0_eef_pos`` (the grip site in the world frame), ``robot0_eef_quat`` (the hand body,
``robot0_right_hand``, in the world frame, as MuJoCo signs it) as axis-angle, and
``robot0_gripper_qpos`` (robosuite's finger joints: the second negative when open).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from rpent_contract.geometry import quaternion_multiply, quaternion_to_axis_angle

from .observation import WORLD_PREFIX
from .policy import BackendError, PolicyObservation

STATE_KINDS = ("value", "position", "axis_angle", "quaternion")
FRAMES = ("base", "world")
# A pose's entries in robot_state, by frame: base = the robot's base frame (ee_pose), world
# = the frame the robot names ``world`` on /tf_static (a simulator's world).
_PREFIX = {"base": "", "world": WORLD_PREFIX}


@dataclass(frozen=True)
class StateTerm:
    """One part of the state vector.

    ``kind``:
      * ``value``: the robot_state entry ``entry`` (a joint name, ``gripper_width``, ...)
        times ``scale``;
      * ``position``: the end effector's position in ``frame`` (3 values);
      * ``axis_angle`` / ``quaternion``: its orientation in ``frame`` (3 / 4 values, xyzw),
        of the frame ``orientation_offset`` (xyzw) places in the end-effector frame, with
        the quaternion's sign taken so that it points the way ``hemisphere`` does (a
        rotation has two quaternions, and a model trained on one sign sees another as a
        far-away state).

    ``name`` files the term under a named vector, for models that take their state as
    several (a world-action model's ``eef_position``, ``gripper_qpos``...); terms sharing a
    name go side by side, in order.
    """
    kind: str
    entry: str = ""
    name: str = ""
    scale: float = 1.0
    frame: str = "base"
    orientation_offset: tuple = (0.0, 0.0, 0.0, 1.0)
    hemisphere: tuple = (0.0, 0.0, 0.0, 1.0)

    def __post_init__(self):
        if self.kind not in STATE_KINDS:
            raise ValueError(f"state term kind '{self.kind}' is not one of "
                             f"{', '.join(STATE_KINDS)}")
        if self.kind == "value" and not self.entry:
            raise ValueError("a 'value' state term needs entry: the robot_state entry to read")
        if self.frame not in FRAMES:
            raise ValueError(f"state term frame '{self.frame}' is not one of {', '.join(FRAMES)}")
        for name in ("orientation_offset", "hemisphere"):
            q = np.asarray(getattr(self, name), dtype=float)
            if q.shape != (4,) or not np.all(np.isfinite(q)) or np.linalg.norm(q) < 1e-9:
                raise ValueError(f"state term {name} must be a quaternion x, y, z, w")

    def entries(self) -> list:
        p = _PREFIX[self.frame]
        if self.kind == "value":
            return [self.entry]
        if self.kind == "position":
            return [f"{p}ee_x", f"{p}ee_y", f"{p}ee_z"]
        return [f"{p}ee_qx", f"{p}ee_qy", f"{p}ee_qz", f"{p}ee_qw"]

    def values(self, obs: PolicyObservation) -> np.ndarray:
        raw = np.array([obs.value(name) for name in self.entries()], dtype=np.float64)
        if self.kind == "value":
            return raw * self.scale
        if self.kind == "position":
            return raw
        q = quaternion_multiply(raw, np.asarray(self.orientation_offset, dtype=float))
        q = q / np.linalg.norm(q)
        if np.dot(q, self.hemisphere) < 0:
            q = -q
        return q if self.kind == "quaternion" else quaternion_to_axis_angle(q)


@dataclass(frozen=True)
class ImageInput:
    """One camera as a model input. ``mirror`` flips left-right and ``rotate`` turns the
    upright contract image counter-clockwise (0, 90, 180, 270 degrees), in that order; a
    ``size`` (height, width) other than (0, 0) resizes it the way openpi-client's
    ``resize_with_pad`` does (aspect kept, bilinear, black padding)."""
    camera: str
    key: str
    mirror: bool = False
    rotate: int = 0
    size: tuple = (0, 0)

    def __post_init__(self):
        if self.rotate not in (0, 90, 180, 270):
            raise ValueError(f"image '{self.camera}': rotate must be 0, 90, 180 or 270")
        if len(self.size) != 2 or any(int(v) < 0 for v in self.size) or \
                (0 in self.size and tuple(self.size) != (0, 0)):
            raise ValueError(f"image '{self.camera}': size must be (height, width) > 0, or "
                             "(0, 0) to keep the camera's size")

    def prepare(self, rgb: np.ndarray) -> np.ndarray:
        image = np.asarray(rgb)
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise BackendError(f"camera '{self.camera}' gave a {image.dtype} image of shape "
                               f"{image.shape}; expected HxWx3 uint8 RGB")
        if self.mirror:
            image = image[:, ::-1]
        image = np.rot90(image, self.rotate // 90)
        if tuple(self.size) != (0, 0):
            # openpi-client's own: openpi's LIBERO example resizes with it.
            from openpi_client.image_tools import resize_with_pad

            image = resize_with_pad(image, *map(int, self.size))
        return np.ascontiguousarray(image)


@dataclass(frozen=True)
class ModelIO:
    """A model's inputs: ``images`` under their keys, the state vector of ``state`` under
    ``state_key``, the instruction under ``prompt_key``. ``camera_size`` (height, width),
    when set, is the resolution the model's cameras were trained at: other sizes are
    refused rather than fed."""
    name: str
    images: tuple = ()
    state: tuple = ()
    state_key: str = "observation.state"
    prompt_key: str = "prompt"
    camera_size: tuple = (0, 0)
    description: str = ""

    @property
    def cameras(self) -> tuple:
        return tuple(dict.fromkeys(i.camera for i in self.images))

    @property
    def state_size(self) -> int:
        return sum(self.part_sizes().values())

    def entries(self) -> list:
        """The robot_state entries the state vector is built from, in order."""
        return list(dict.fromkeys(e for term in self.state for e in term.entries()))

    def state_vector(self, obs: PolicyObservation) -> np.ndarray:
        if not self.state:
            return np.zeros(0)
        return np.concatenate([term.values(obs) for term in self.state])

    def state_parts(self, obs: PolicyObservation) -> dict:
        """The state as named vectors: name -> its terms side by side (a term without a name
        goes under ``state_key``)."""
        parts: dict = {}
        for term in self.state:
            parts.setdefault(term.name or self.state_key, []).append(term.values(obs))
        return {name: np.concatenate(values) for name, values in parts.items()}

    def part_sizes(self) -> dict:
        """name -> length of each named state vector."""
        sizes: dict = {}
        for term in self.state:
            key = term.name or self.state_key
            sizes[key] = sizes.get(key, 0) + \
                {"value": 1, "position": 3, "axis_angle": 3, "quaternion": 4}[term.kind]
        return sizes

    def inputs(self, obs: PolicyObservation) -> dict:
        """key -> model input: each image (HxWx3 uint8) and the state (float64)."""
        out = {}
        for spec in self.images:
            if spec.camera not in obs.images:
                raise BackendError(
                    f"observation lacks camera '{spec.camera}' that feeds {spec.key} of "
                    f"{self.name} (has: {', '.join(obs.images) or 'none'})")
            image = obs.images[spec.camera]
            if tuple(self.camera_size) != (0, 0) and \
                    tuple(image.shape[:2]) != tuple(self.camera_size):
                raise BackendError(
                    f"camera '{spec.camera}' gives {image.shape[0]}x{image.shape[1]} images; "
                    f"{self.name} was trained on {self.camera_size[0]}x{self.camera_size[1]}: "
                    f"set the robot's image_height/image_width to that")
            out[spec.key] = spec.prepare(image)
        if self.state:
            out[self.state_key] = self.state_vector(obs)
        return out

    @classmethod
    def simple(cls, name: str, cameras: Mapping[str, str], state_names: Sequence[str],
               state_key: str = "observation.state", prompt_key: str = "prompt") -> "ModelIO":
        """Cameras and robot_state entries fed as they are: a model trained on data this
        project recorded (``rpent export-dataset``)."""
        return cls(name, images=tuple(ImageInput(c, k) for c, k in cameras.items()),
                   state=tuple(StateTerm("value", entry=n) for n in state_names),
                   state_key=state_key, prompt_key=prompt_key)

    @classmethod
    def from_dict(cls, data: dict, name: str = "") -> "ModelIO":
        data = dict(data)
        unknown = set(data) - {"name", "images", "state", "state_key", "prompt_key",
                               "camera_size", "description"}
        if unknown:
            raise ValueError(f"unknown model_io field(s) {', '.join(sorted(unknown))}")
        try:
            images = tuple(ImageInput(**{**i, "size": tuple(i.get("size", (0, 0)))})
                           for i in data.pop("images", ()))
            state = tuple(StateTerm(**{k: tuple(v) if isinstance(v, list) else v
                                       for k, v in t.items()}) for t in data.pop("state", ()))
        except TypeError as err:
            raise ValueError(f"model_io: {err}") from None
        data["camera_size"] = tuple(data.get("camera_size", (0, 0)))
        return cls(name=data.pop("name", name), images=images, state=state, **data)


def load(spec: str) -> ModelIO:
    """A shipped configuration by name, or a YAML file of :class:`ModelIO`'s fields."""
    if spec in SHIPPED:
        return SHIPPED[spec]
    path = Path(spec).expanduser()
    if not path.is_file():
        raise ValueError(f"model_io '{spec}' is neither a shipped configuration "
                         f"({', '.join(SHIPPED)}) nor a YAML file")
    import yaml

    try:
        return ModelIO.from_dict(yaml.safe_load(path.read_text()) or {}, name=path.stem)
    except (yaml.YAMLError, ValueError) as err:
        raise ValueError(f"model_io file {path}: {err}") from None


# robosuite's robot0_eef_quat is the hand body's orientation; the contract's end effector
# is the grip site, turned 90 degrees about z from it in LIBERO's Panda (measured from the
# simulator: conj(q_site) * q_hand is constant).
_LIBERO_HAND_IN_SITE = (0.0, 0.0, math.sqrt(0.5), math.sqrt(0.5))
# MuJoCo's sign of the hand quaternion near LIBERO's working poses (gripper down): x > 0.
_LIBERO_HEMISPHERE = (1.0, 0.0, 0.0, 0.0)
_LIBERO_STATE = (
    StateTerm("position", frame="world"),
    StateTerm("axis_angle", frame="world", orientation_offset=_LIBERO_HAND_IN_SITE,
              hemisphere=_LIBERO_HEMISPHERE),
    StateTerm("value", entry="panda_finger_joint1"),
    # robosuite's second finger joint counts closing as +; the contract's, opening.
    StateTerm("value", entry="panda_finger_joint2", scale=-1.0),
)

SHIPPED: dict = {io.name: io for io in (
    ModelIO(
        "pi05_libero",
        images=(ImageInput("agentview", "observation/image", mirror=True, size=(224, 224)),
                ImageInput("robot0_eye_in_hand", "observation/wrist_image", mirror=True,
                           size=(224, 224))),
        state=_LIBERO_STATE, state_key="observation/state", prompt_key="prompt",
        camera_size=(256, 256),
        description="openpi pi05_libero (examples/libero/main.py: 256 px renders turned "
                    "180 degrees, resize_with_pad to 224, eef pos + axis-angle + gripper "
                    "qpos)"),
    ModelIO(
        "lerobot_libero",
        images=(ImageInput("agentview", "observation.images.image", mirror=True),
                ImageInput("robot0_eye_in_hand", "observation.images.image2", mirror=True)),
        state=_LIBERO_STATE, state_key="observation.state", prompt_key="task",
        camera_size=(256, 256),
        description="LeRobot LIBERO checkpoints, pi0.5 and SmolVLA (LiberoEnv at 256 px "
                    "+ LiberoProcessorStep; the checkpoint's processor does the rest)"),
    ModelIO(
        "rpent_pi05_libero",
        images=(ImageInput("agentview", "main", mirror=True),
                ImageInput("robot0_eye_in_hand", "wrist", mirror=True)),
        state=_LIBERO_STATE, state_key="state", prompt_key="instruction",
        camera_size=(256, 256),
        description="the original RPent's pi0.5 VLA server (its LIBERO environment's 256 px "
                    "renders turned 180 degrees as main and wrist; eef pos + axis-angle + "
                    "gripper qpos; the server resizes)"),
    ModelIO(
        "wam_libero",
        images=(ImageInput("agentview", "primary"), ImageInput("robot0_eye_in_hand", "wrist")),
        state=(StateTerm("position", frame="world", name="eef_position"),
               StateTerm("quaternion", frame="world", orientation_offset=_LIBERO_HAND_IN_SITE,
                         hemisphere=_LIBERO_HEMISPHERE, name="eef_quaternion_xyzw"),
               StateTerm("value", entry="panda_finger_joint1", name="gripper_qpos"),
               StateTerm("value", entry="panda_finger_joint2", scale=-1.0,
                         name="gripper_qpos")),
        state_key="state", prompt_key="instruction", camera_size=(256, 256),
        description="the original RPent's WAM workers on LIBERO (Cosmos Policy, Fast-WAM, Cosmos3): "
                    "upright 256 px primary and wrist images; eef_position, "
                    "eef_quaternion_xyzw (robot0_eef_quat), gripper_qpos in the world frame"),
)}
