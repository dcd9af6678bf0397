"""Tabletop scenes of the arms' twins: a table, objects and containers placed from a seed,
the tasks set on them and their success checks. Plain Python over MuJoCo (no rclpy).

A scene file (``scenes/<arm>_tabletop.yaml``) declares everything in the robot's base frame
(x forward, y left, z up, metres; the table top is where the base stands):

* ``table``: its centre, size and top;
* ``robot``: parameters of the robot node that go with this bench (at least
  ``workspace_min`` / ``workspace_max``, the box its safety layer keeps the hand in on this
  table; a home pose or a tool centre point where the arm needs one);
* ``cameras``: each camera's optical frame (z forward, x right, y down) on a mount frame of
  the robot (its base, or the hand for a wrist camera), as ``camera_extrinsics`` gives it
  to the robot node, and its vertical field of view;
* ``items``: objects (box, cylinder) and containers (bowl, plate), each with its size,
  colour, mass and the ranges its position and yaw are drawn from;
* ``tasks``: an instruction and the goals that make it achieved, each
  ``[relation, item, item]`` with relation ``in`` (inside a bowl), ``on`` (resting on a
  plate or an object), ``left_of`` / ``right_of`` (beside it on the table, seen from the
  robot).

:func:`add_to_mjcf` adds the table, items and cameras to a MuJoCo model being built;
:class:`SceneState` then places the items from a seed and judges the tasks on a live
``MjData``.
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import yaml

from rpent_contract.geometry import matrix_to_quaternion, quaternion_to_matrix

SCENES_DIR = Path(__file__).parent / "scenes"
SHAPES = ("box", "cylinder", "bowl", "plate")
RELATIONS = ("in", "on", "left_of", "right_of")
# Items a draw puts closer than this (between their footprints) would touch.
CLEARANCE = 0.03
# An item moving faster than this (m/s) is not resting anywhere yet.
AT_REST = 0.05
BOWL_WALLS = 12


class SceneError(ValueError):
    pass


@dataclass(frozen=True)
class Item:
    name: str  # body name; its words ('red cube' for red_cube) are what perception is asked
    shape: str
    size: tuple  # box: half extents; cylinder: radius, half height; bowl: radius, height;
    #              plate: radius, half thickness
    rgba: tuple
    mass: float
    x: tuple  # (min, max) of the position drawn, m
    y: tuple
    yaw: tuple  # (min, max), rad

    @property
    def container(self) -> bool:
        return self.shape in ("bowl", "plate")

    @property
    def footprint(self) -> float:
        """Radius of the circle the item covers on the table, m."""
        if self.shape == "box":
            return math.hypot(self.size[0], self.size[1])
        return self.size[0]

    @property
    def height(self) -> float:
        if self.shape == "box":
            return 2 * self.size[2]
        if self.shape == "bowl":
            return self.size[1]
        return 2 * self.size[1]

    @property
    def origin_height(self) -> float:
        """Height of the body origin above its bottom: objects have it at their centre (where
        a grasp takes them), containers at their bottom."""
        return 0.0 if self.container else self.height / 2.0

    @property
    def words(self) -> str:
        return self.name.replace("_", " ")


@dataclass(frozen=True)
class Goal:
    relation: str
    item: str
    other: str


@dataclass(frozen=True)
class Task:
    name: str
    instruction: str
    goals: tuple


@dataclass(frozen=True)
class Camera:
    name: str
    mount: str  # 'base' or 'hand'
    position: np.ndarray  # optical frame in the mount frame, m
    quaternion: np.ndarray  # x, y, z, w
    fovy_deg: float


@dataclass(frozen=True)
class Scene:
    arm: str
    source: str
    table_center: tuple
    table_size: tuple
    table_top: float
    robot_parameters: dict
    cameras: tuple
    items: tuple
    tasks: tuple

    def item(self, name: str) -> Item:
        for item in self.items:
            if item.name == name:
                return item
        raise SceneError(f"{self.source}: no item '{name}'; items: "
                         f"{', '.join(i.name for i in self.items)}")

    def task(self, name: str) -> Task:
        for task in self.tasks:
            if task.name == name:
                return task
        raise SceneError(f"no task '{name}' in {self.source}; tasks: "
                         f"{', '.join(t.name for t in self.tasks)}")

    def camera(self, name: str) -> Camera:
        for camera in self.cameras:
            if camera.name == name:
                return camera
        raise SceneError(f"no camera '{name}' in {self.source}")

    def camera_extrinsics(self, frames: dict) -> list:
        """The robot node's ``camera_extrinsics`` entries, in the order of ``cameras``;
        ``frames`` maps a mount ('base', 'hand') to the robot's frame name."""
        return [" ".join([frames[c.mount], *(f"{v:.6g}" for v in c.position),
                          *(f"{v:.7g}" for v in c.quaternion)]) for c in self.cameras]


def scene_path(arm_or_path: str) -> Path:
    """A scene file: a path, or the name of an arm whose tabletop scene ships here."""
    path = Path(arm_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise SceneError(f"scene file {path} not found")
        return path
    shipped = SCENES_DIR / f"{arm_or_path}_tabletop.yaml"
    if not shipped.is_file():
        arms = sorted(p.stem.split("_")[0] for p in SCENES_DIR.glob("*.yaml"))
        raise SceneError(f"no tabletop scene for '{arm_or_path}'; give a scene YAML file or "
                         f"one of: {', '.join(arms)}")
    return shipped


def load_scene(arm_or_path: str) -> Scene:
    path = scene_path(arm_or_path)
    raw = yaml.safe_load(path.read_text())
    where = str(path)
    try:
        return _parse(raw, where)
    except (KeyError, TypeError, ValueError) as err:
        if isinstance(err, SceneError):
            raise
        raise SceneError(f"{where}: {type(err).__name__}: {err}") from None


def _vector(value, n: int, what: str) -> tuple:
    v = tuple(float(x) for x in value)
    if len(v) != n or not all(math.isfinite(x) for x in v):
        raise SceneError(f"{what} must be {n} finite numbers, not {value!r}")
    return v


def _range(value, what: str) -> tuple:
    lo, hi = _vector(value, 2, what)
    if lo > hi:
        raise SceneError(f"{what}: {lo} > {hi}")
    return lo, hi


def _look_at(position: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Quaternion (x, y, z, w) of an optical frame at ``position`` looking at ``target`` with
    the image's up as close to +z as it can be."""
    z = target - position
    z /= np.linalg.norm(z)
    x = np.cross(z, [0.0, 0.0, 1.0])
    if np.linalg.norm(x) < 1e-6:
        x = np.array([0.0, -1.0, 0.0])
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    return matrix_to_quaternion(np.column_stack([x, y, z]))


def _parse(raw: dict, where: str) -> Scene:
    table = raw["table"]
    cameras = []
    for name, c in raw["cameras"].items():
        if c["mount"] not in ("base", "hand"):
            raise SceneError(f"camera {name}: mount must be base or hand")
        position = np.array(_vector(c["position"], 3, f"camera {name} position"))
        if "look_at" in c:
            quat = _look_at(position, np.array(_vector(c["look_at"], 3, "look_at")))
        else:
            quat = np.array(_vector(c["quaternion"], 4, f"camera {name} quaternion"))
            quat /= np.linalg.norm(quat)
        cameras.append(Camera(name, c["mount"], position, quat, float(c["fovy_deg"])))
    items = []
    for name, spec in raw["items"].items():
        shape = spec["shape"]
        if shape not in SHAPES:
            raise SceneError(f"item {name}: shape must be one of {', '.join(SHAPES)}")
        n = {"box": 3, "cylinder": 2, "bowl": 2, "plate": 2}[shape]
        items.append(Item(name, shape, _vector(spec["size"], n, f"item {name} size"),
                          _vector(spec["rgba"], 4, f"item {name} rgba"), float(spec["mass"]),
                          _range(spec["x"], f"item {name} x"), _range(spec["y"], f"item {name} y"),
                          _range(spec.get("yaw", [0.0, 0.0]), f"item {name} yaw")))
    names = {i.name for i in items}
    tasks = []
    for t in raw["tasks"]:
        goals = []
        for g in t["goals"]:
            relation, a, b = g
            if relation not in RELATIONS:  # YAML reads a bare on as true: quote it
                raise SceneError(f"task {t['name']}: relation '{relation}' is not one of "
                                 f"{', '.join(RELATIONS)}")
            for item in (a, b):
                if item not in names:
                    raise SceneError(f"task {t['name']}: no item '{item}'")
            goals.append(Goal(relation, a, b))
        tasks.append(Task(t["name"], t["instruction"], tuple(goals)))
    if len({t.name for t in tasks}) != len(tasks):
        raise SceneError(f"{where}: two tasks share a name")
    robot = dict(raw["robot"])
    for corner in ("workspace_min", "workspace_max"):
        robot[corner] = list(_vector(robot[corner], 3, f"robot {corner}"))
    return Scene(raw["arm"], where, _vector(table["center"], 2, "table center"),
                 _vector(table["size"], 2, "table size"), float(table["top"]), robot,
                 tuple(cameras), tuple(items), tuple(tasks))


# --- MJCF ---------------------------------------------------------------------------------
def _fmt(values) -> str:
    return " ".join(f"{float(v):.6g}" for v in values)


def mujoco_camera_quat(optical_quat: np.ndarray) -> np.ndarray:
    """w, x, y, z of a MuJoCo camera (looking along -z, y up) whose image is the optical
    frame ``optical_quat`` (x, y, z, w; z forward, y down)."""
    m = quaternion_to_matrix(optical_quat) @ np.diag([1.0, -1.0, -1.0])
    x, y, z, w = matrix_to_quaternion(m)
    return np.array([w, x, y, z])


def add_to_mjcf(scene: Scene, worldbody: ET.Element, hand_body: Optional[ET.Element],
                contact: dict) -> None:
    """Add the table, the items (each a free body) and the cameras to an MJCF tree.

    ``hand_body``: the hand's body element, where wrist cameras go; ``contact``: MJCF geom
    attributes (friction, solref, condim ...) for the items, tuned per arm so that its
    gripper holds them through a lift and a place."""
    cx, cy = scene.table_center
    sx, sy = scene.table_size
    thickness = 0.04
    ET.SubElement(worldbody, "geom", name="table", type="box",
                  pos=_fmt([cx, cy, scene.table_top - thickness / 2]),
                  size=_fmt([sx / 2, sy / 2, thickness / 2]), rgba="0.62 0.5 0.38 1",
                  friction="1 0.005 0.0001")
    for item in scene.items:
        body = ET.SubElement(worldbody, "body", name=item.name,
                             pos=_fmt([np.mean(item.x), np.mean(item.y),
                                       scene.table_top + item.origin_height]))
        ET.SubElement(body, "freejoint", name=f"{item.name}_joint")
        common = dict(rgba=_fmt(item.rgba), **contact)
        if item.shape == "box":
            ET.SubElement(body, "geom", name=item.name, type="box", size=_fmt(item.size),
                          mass=f"{item.mass:g}", **common)
        elif item.shape == "cylinder":
            ET.SubElement(body, "geom", name=item.name, type="cylinder", size=_fmt(item.size),
                          mass=f"{item.mass:g}", **common)
        elif item.shape == "plate":
            r, half = item.size
            ET.SubElement(body, "geom", name=item.name, type="cylinder", size=_fmt([r, half]),
                          pos=_fmt([0, 0, half]), mass=f"{item.mass:g}", **common)
        else:  # bowl: a floor and a ring of walls, one body
            r, h = item.size
            wall = 0.006
            part = item.mass / (BOWL_WALLS + 1)
            ET.SubElement(body, "geom", name=item.name, type="cylinder",
                          size=_fmt([r, wall / 2]), pos=_fmt([0, 0, wall / 2]),
                          mass=f"{part:g}", **common)
            half_width = r * math.tan(math.pi / BOWL_WALLS) + wall / 2
            for k in range(BOWL_WALLS):
                a = 2 * math.pi * k / BOWL_WALLS
                ET.SubElement(body, "geom", name=f"{item.name}_wall{k}", type="box",
                              size=_fmt([wall / 2, half_width, h / 2]),
                              pos=_fmt([r * math.cos(a), r * math.sin(a), h / 2]),
                              euler=_fmt([0, 0, a]), mass=f"{part:g}", **common)
    for camera in scene.cameras:
        parent = worldbody if camera.mount == "base" else hand_body
        if parent is None:
            raise SceneError(f"camera {camera.name} is mounted on the hand, and this model "
                             "has no hand body")
        ET.SubElement(parent, "camera", name=camera.name, pos=_fmt(camera.position),
                      quat=_fmt(mujoco_camera_quat(camera.quaternion)),
                      fovy=f"{camera.fovy_deg:g}")


# --- a live scene -------------------------------------------------------------------------
class SceneState:
    """The items of ``scene`` in a compiled model: placing them, reading their poses and
    judging tasks. Not thread-safe: call it where the physics steps (between steps)."""

    def __init__(self, scene: Scene, model, data):
        import mujoco

        self._mj = mujoco
        self.scene, self.model, self.data = scene, model, data
        self._qpos, self._qvel = {}, {}
        for item in scene.items:
            joint = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, f"{item.name}_joint")
            if joint < 0:
                raise SceneError(f"the model has no body for item '{item.name}'")
            self._qpos[item.name] = int(model.jnt_qposadr[joint])
            self._qvel[item.name] = int(model.jnt_dofadr[joint])

    def place(self, seed: int) -> dict:
        """Draw every item's position and yaw from its ranges (containers first, then the
        objects, none within CLEARANCE of another) and put it there at rest."""
        rng = np.random.default_rng(seed)
        order = sorted(self.scene.items, key=lambda i: not i.container)
        for _ in range(100):  # a draw that boxed an item in starts over
            placed = self._draw(order, rng)
            if placed is not None:
                break
        else:
            raise SceneError(f"seed {seed}: the items do not fit in their ranges beside each "
                             f"other ({self.scene.source}); widen the ranges")
        for item, xy, yaw in placed:
            a = self._qpos[item.name]
            self.data.qpos[a:a + 3] = [xy[0], xy[1], self.scene.table_top + item.origin_height]
            self.data.qpos[a + 3:a + 7] = [math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)]
            v = self._qvel[item.name]
            self.data.qvel[v:v + 6] = 0.0
        self._mj.mj_forward(self.model, self.data)
        return self.poses()

    @staticmethod
    def _draw(order, rng) -> Optional[list]:
        placed: list = []
        for item in order:
            for _ in range(100):
                xy = np.array([rng.uniform(*item.x), rng.uniform(*item.y)])
                if all(np.linalg.norm(xy - p) > item.footprint + other.footprint + CLEARANCE
                       for other, p, _ in placed):
                    placed.append((item, xy, rng.uniform(*item.yaw)))
                    break
            else:
                return None
        return placed

    def poses(self) -> dict:
        """name -> (position, quaternion x, y, z, w) in the base frame."""
        out = {}
        for item in self.scene.items:
            a = self._qpos[item.name]
            w, x, y, z = self.data.qpos[a + 3:a + 7]
            out[item.name] = (np.array(self.data.qpos[a:a + 3]), np.array([x, y, z, w]))
        return out

    def speed(self, name: str) -> float:
        v = self._qvel[name]
        return float(np.linalg.norm(self.data.qvel[v:v + 3]))

    def holds(self, goal: Goal) -> tuple[bool, str]:
        """Whether one goal holds now, and what was seen."""
        a, b = self.scene.item(goal.item), self.scene.item(goal.other)
        poses = self.poses()
        pa, pb = poses[a.name][0], poses[b.name][0]
        bottom_a = pa[2] - a.origin_height
        apart = float(np.linalg.norm(pa[:2] - pb[:2]))
        if self.speed(a.name) > AT_REST:
            return False, f"the {a.words} is still moving"
        top = self.scene.table_top
        if goal.relation == "in":
            inside = apart < b.footprint and bottom_a < pb[2] + b.height
            return inside, (f"the {a.words} is in the {b.words}" if inside else
                            f"the {a.words} is {apart:.3f} m from the {b.words}'s centre, "
                            f"{bottom_a - top:.3f} m above the table")
        if goal.relation == "on":
            b_top = pb[2] - b.origin_height + b.height
            reach = b.footprint if b.container else max(b.footprint, a.footprint) * 0.8
            on = apart < reach and abs(bottom_a - b_top) < 0.02
            return on, (f"the {a.words} is on the {b.words}" if on else
                        f"the {a.words} is {apart:.3f} m from the {b.words}'s centre, its "
                        f"bottom {bottom_a - b_top:+.3f} m from the {b.words}'s top")
        side = 1.0 if goal.relation == "left_of" else -1.0
        # Beyond the other's edge on that side, level with it (within 10 cm in x), near it
        # (10 cm between them at most) and standing on the table.
        beside = (side * (pa[1] - pb[1]) > b.footprint and abs(pa[0] - pb[0]) < 0.1
                  and apart < a.footprint + b.footprint + 0.1 and bottom_a < top + 0.01)
        words = goal.relation.replace("_", " ")
        return beside, (f"the {a.words} is {words} the {b.words}" if beside else
                        f"the {a.words} is not {words} the {b.words} on the table (offset "
                        f"x {pa[0] - pb[0]:+.3f}, y {pa[1] - pb[1]:+.3f} m)")

    def judge(self, task: Task) -> tuple[bool, str]:
        """(achieved, why): every goal of the task holds."""
        results = [self.holds(g) for g in task.goals]
        return all(ok for ok, _ in results), "; ".join(why for _, why in results)
