"""LIBERO robot node: a LIBERO / LIBERO-PRO / LIBERO-Plus task served over the robot contract.

    ros2 run rpent_env_sim libero_node --ros-args -p suite:=libero_object -p task_id:=0

Control space ``libero_osc_delta`` is LIBERO's native action: 7 normalised values
(dx, dy, dz, droll, dpitch, dyaw in [-1, 1], scaled by the OSC controller, and a gripper
command, -1 open / +1 close). The simulator lives on one worker thread (its EGL context
is thread-bound), so ROS callbacks stay responsive while it steps. Physics advances only
when a motion steps it: an idle or stopped robot holds still by construction.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from rpent_contract import params
from rpent_contract.control_space import ControlSpaceSpec
from rpent_contract.driver import (
    CameraImage,
    ChunkOutcome,
    FrameDemand,
    GripperOutcome,
    Motion,
    MoveOutcome,
    ResetRequest,
    RobotDescription,
    RobotDriver,
    RobotSnapshot,
    TaskInfo,
)
from rpent_contract.names import OBJECT_POSES_SERVICE, SEGMENT_SERVICE
from rpent_contract.perception import Detection, match_names
from rpent_contract.robot_node import RobotContractNode, spin_robot_node

from .cartesian_controller import (
    OSC_POSE_MAX_POS_DELTA,
    OSC_POSE_MAX_ROT_DELTA,
    move_to as osc_move_to,
    pose_error,
)
from .libero_sim import LiberoSim, SimObservation, panda_urdf, suite_tasks
from .settings import LiberoSettings

GRIPPER_OPEN, GRIPPER_CLOSE, GRIPPER_HOLD = -1.0, 1.0, 0.0
# Franka hand: fingers travel 0.04 m each.
GRIPPER_MAX_WIDTH = 0.08
# The native gripper command ramps by a quarter per step, so the fingers may not move for
# the first RAMP_STEPS steps of a reversal. After that they have stalled (on an object or at
# a limit) when the width changes less than STALL_EPS per step for STALL_STEPS steps.
RAMP_STEPS, STALL_EPS, STALL_STEPS, GRIPPER_MAX_STEPS = 8, 2e-4, 3, 40

LIBERO_OSC_DELTA = ControlSpaceSpec(
    name="libero_osc_delta",
    labels=("dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper"),
    units=("1",) * 7,
    lower=(-1.0,) * 7,
    upper=(1.0,) * 7,
    relative=True,
    step_scale=(OSC_POSE_MAX_POS_DELTA,) * 3 + (OSC_POSE_MAX_ROT_DELTA,) * 3,
    frame_id="base_link",
    description=(
        "LIBERO's native OSC_POSE delta: translation and axis-angle rotation, each in "
        "[-1, 1] and scaled by step_scale (m, rad) per control step, in the base frame; "
        "gripper -1 opens, +1 closes, 0 keeps the current command."),
)


@functools.lru_cache(maxsize=None)
def _task_list(suite: str) -> tuple:
    """``suite``, (instruction, recorded initial states, LIBERO-Plus dimension) of each of its
    tasks by task id, and the suites a reset can switch to: read once per suite, from the
    benchmark's files (the instructions their episodes give)."""
    return (suite, [(task.instruction, task.n_init_states, task.dimension)
                    for task in suite_tasks(suite)],
            LiberoSim.available_suites(ready_only=True))


class LiberoDriver(RobotDriver):
    """A LIBERO task as a robot.

    ``privileged=False`` runs it as a real arm would be run: no object poses from the
    simulator and no native success for the agent (``success`` waits for an operator, and
    chunks do not stop on success); the simulator's verdict still goes out as
    ``TaskStatus.native_success`` for evaluation.
    """

    def __init__(self, *, suite: str, task_id: int, seed: int, init_state_index: int,
                 cameras, image_height: int, image_width: int, render_quality: str,
                 max_episode_steps: int, real_time: bool, privileged: bool = True,
                 base_frame: str = "base_link", camera_rate: float = 0.0,
                 render_device: int = -1):
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="libero-sim")
        self._real_time = real_time
        self._privileged = privileged
        self._lock = threading.Lock()
        # Until a node says who looks, every due step is rendered.
        self._demand = lambda: FrameDemand.WATCHED
        self._sim: LiberoSim = self._call(
            LiberoSim, suite=suite, task_id=task_id, seed=seed,
            init_state_index=init_state_index, cameras=cameras, image_height=image_height,
            image_width=image_width, render_quality=render_quality,
            max_episode_steps=max_episode_steps, render_device=render_device)
        self._max_episode_steps = max_episode_steps
        # Simulated time, like a real camera's frame rate: a frame every this many steps.
        rate = float(self._sim.control_rate_hz)
        self._frame_every = max(1, round(rate / camera_rate)) if camera_rate > 0 else 1
        self._description = RobotDescription(
            embodiment="libero_panda",
            simulated=True,
            joint_names=list(self._sim.arm_joint_names) + list(self._sim.gripper_joint_names),
            camera_names=list(self._sim.camera_names),
            control_spaces=[dataclasses.replace(LIBERO_OSC_DELTA, frame_id=base_frame)],
            control_rate=float(self._sim.control_rate_hz),
            gripper_max_width=GRIPPER_MAX_WIDTH,
            max_chunk_steps=max_episode_steps,
            # Segmentation is what a perception model would see, not privileged state, so
            # a non-privileged robot serves it too.
            sim_services=[OBJECT_POSES_SERVICE, SEGMENT_SERVICE] if privileged
            else [SEGMENT_SERVICE],
            depth_camera_names=list(self._sim.camera_names),
            frames_on_demand=True,
        )
        self._episode_id = ""
        self._call(lambda: self._new_episode(self._sim.observe(render=True)))

    # --- plumbing ------------------------------------------------------------------------
    def _call(self, fn, *args, **kwargs):
        return self._worker.submit(fn, *args, **kwargs).result()

    def _new_episode(self, obs: SimObservation) -> RobotSnapshot:
        self._episode_id = uuid.uuid4().hex[:12]
        return self._update(obs)

    def _frames_due(self, step: int) -> bool:
        """Whether the state after ``step`` steps is rendered: asked for, or watched and at
        the camera's rate. Called on the simulator's thread, just before it measures."""
        demand = self._demand()
        return demand == FrameDemand.REQUESTED or (
            demand == FrameDemand.WATCHED and step % self._frame_every == 0)

    def _update(self, obs: SimObservation) -> RobotSnapshot:
        sim = self._sim
        success = bool(obs.success) and self._privileged
        snap = RobotSnapshot(
            joint_names=self._description.joint_names,
            joint_positions=np.concatenate([obs.arm_joint_positions, obs.gripper_joint_positions]),
            ee_position=obs.ee_position,
            ee_orientation=obs.ee_orientation,
            gripper_width=float(obs.gripper_width),
            episode_step=obs.step,
            base_in_world=obs.base_in_world,
            # Only this state's own frames: a step nobody looked at has none.
            images={name: CameraImage(f.rgb, f.fx, f.fy, f.cx, f.cy, depth=f.depth,
                                      position=f.position, orientation=f.orientation)
                    for name, f in obs.images.items()},
            task=TaskInfo(
                instruction=sim.instruction, suite=sim.suite, task_name=sim.task_name,
                task_id=sim.task_id, episode_id=self._episode_id,
                max_steps=self._max_episode_steps, success=success,
                success_is_native=self._privileged, done=bool(success or obs.truncated),
                native_success=bool(obs.success)),
        )
        with self._lock:
            self._latest = snap
        return snap

    def _advance(self, action: np.ndarray) -> RobotSnapshot:
        # On the simulator's thread, so snapshots are made in the order of the states.
        return self._update(self._sim.step(action, render=self._frames_due(
            self._sim.step_count + 1)))

    def _step(self, action: np.ndarray, motion: Motion, index: int) -> RobotSnapshot:
        started = time.monotonic()
        snap = self._call(self._advance, action)
        motion.feedback(snap, index)
        if self._real_time:
            time.sleep(max(0.0, 1.0 / self._description.control_rate
                           - (time.monotonic() - started)))
        return snap

    def _episode_over(self) -> bool:
        return self._latest.episode_step >= self._max_episode_steps

    # --- RobotDriver ---------------------------------------------------------------------
    @property
    def description(self) -> RobotDescription:
        return self._description

    def snapshot(self) -> RobotSnapshot:
        with self._lock:
            return self._latest

    def on_frame_demand(self, demand) -> None:
        self._demand = demand

    def render(self) -> RobotSnapshot:
        return self._call(lambda: self._update(self._sim.observe(render=True)))

    def execute_chunk(self, space, actions, motion, stop_on_success) -> ChunkOutcome:
        snap, done = self._latest, 0
        if stop_on_success and snap.task.success:
            # Already achieved: a chunk sent while the last one was ending must not undo it.
            return ChunkOutcome(0, snap, stopped_on_success=True)
        for i, action in enumerate(actions):
            if motion.stopped:
                break
            if self._episode_over():
                return ChunkOutcome(done, snap, episode_end=True)
            snap = self._step(action, motion, i)
            done += 1
            if stop_on_success and snap.task.success:
                return ChunkOutcome(done, snap, stopped_on_success=True)
        return ChunkOutcome(done, snap)

    def move_to(self, position, orientation, *, position_only, max_translation_step,
                max_rotation_step, position_tolerance, orientation_tolerance, max_steps,
                motion) -> MoveOutcome:
        snap, steps = self._latest, 0
        # Position-only targets keep whatever orientation the hand has when the move starts.
        target_quat = snap.ee_orientation.copy() if position_only else orientation
        max_trans = min(max_translation_step, OSC_POSE_MAX_POS_DELTA)
        max_rot = min(max_rotation_step, OSC_POSE_MAX_ROT_DELTA)

        def reached(s):
            pos_err, rot_err = pose_error(s.ee_position, s.ee_orientation, position, target_quat)
            return pos_err <= position_tolerance and rot_err <= orientation_tolerance, pos_err, rot_err

        done, pos_err, rot_err = reached(snap)
        while not done and not motion.stopped and steps < max_steps and not self._episode_over():
            action = osc_move_to(snap.ee_position, snap.ee_orientation, position, target_quat,
                                 GRIPPER_HOLD, max_pos_step=max_trans, max_rot_step=max_rot)
            snap = self._step(action, motion, steps)
            steps += 1
            done, pos_err, rot_err = reached(snap)
        message = ""
        if not done and self._episode_over():
            message = "episode step cap reached; call reset to start a new episode"
        return MoveOutcome(done, snap, pos_err, rot_err, steps, message)

    def gripper(self, width, max_effort, motion) -> GripperOutcome:
        # The native gripper command is a direction (the fingers ramp while it is held),
        # so drive towards the width until reached or until the fingers stop moving.
        snap, tolerance = self._latest, 0.004
        hold_still, steps = 0, 0
        while not motion.stopped and steps < GRIPPER_MAX_STEPS and not self._episode_over():
            error = snap.gripper_width - width
            if abs(error) <= tolerance:
                return GripperOutcome(snap.gripper_width, True, False, snap,
                                      message=f"gripper at {snap.gripper_width:.4f} m")
            command = GRIPPER_CLOSE if error > 0 else GRIPPER_OPEN
            before = snap.gripper_width
            snap = self._step(np.array([0, 0, 0, 0, 0, 0, command], float), motion, steps)
            steps += 1
            hold_still = hold_still + 1 if abs(snap.gripper_width - before) < STALL_EPS else 0
            if hold_still >= STALL_STEPS and steps >= RAMP_STEPS:
                return GripperOutcome(
                    snap.gripper_width, False, True, snap,
                    message=f"fingers stalled at {snap.gripper_width:.4f} m "
                            f"(target {width:.4f} m): holding an object or at their limit")
        return GripperOutcome(snap.gripper_width, abs(snap.gripper_width - width) <= tolerance,
                              False, snap, message=f"gripper at {snap.gripper_width:.4f} m")

    def hold(self) -> None:
        # Nothing to do: the simulated arm only moves while a motion steps the physics.
        return None

    def reset(self, request: ResetRequest, motion: Motion) -> RobotSnapshot:
        # Instant: the simulator sets its state; there is no motion to stop.
        if request.suite and request.suite != self._sim.suite:
            self._call(self._switch_suite, request)
        # On the simulator's thread, so no snapshot of the new state goes out under the old
        # episode.
        return self._call(lambda: self._new_episode(self._sim.reset(
            task_id=None if request.task_id < 0 else request.task_id,
            init_state_index=None if request.init_state_index < 0 else request.init_state_index,
            seed=None if request.seed < 0 else request.seed, render=self._frames_due(0))))

    def _switch_suite(self, request: ResetRequest) -> None:
        old = self._sim
        self._sim = LiberoSim(
            suite=request.suite, task_id=max(request.task_id, 0), seed=max(request.seed, 0),
            init_state_index=max(request.init_state_index, 0), cameras=old.camera_names,
            image_height=old.image_height, image_width=old.image_width,
            render_quality=old.render_quality, max_episode_steps=self._max_episode_steps,
            render_device=old.render_device)
        old.close()

    def segment(self, camera: str, query: str) -> list:
        labels, names = self._call(self._sim.segmentation, camera)
        detections = []
        for name, score in match_names(query, names):
            mask = labels == names.index(name)
            if mask.any():
                detections.append(Detection(name, score, mask))
        return detections

    def object_poses(self) -> dict:
        if not self._privileged:
            raise RuntimeError("object poses are withheld: this robot runs with "
                               "privileged:=false")
        return self._call(self._sim.object_poses)

    def scene_objects(self) -> dict:
        return self._call(self._sim.scene_objects)

    def task_list(self) -> tuple:
        return _task_list(self._sim.suite)

    def close(self) -> None:
        try:
            self._call(self._sim.close)
        finally:
            self._worker.shutdown(wait=True)


class LiberoNode(RobotContractNode):
    settings_type = LiberoSettings

    def __init__(self):
        super().__init__("libero_sim")

    def default_robot_description_file(self, settings: dict) -> str:
        # Generated from the simulator's Panda into the user's cache, where it outlives the
        # node: bags recorded now still find their meshes.
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        try:
            return str(panda_urdf(cache / "rpent" / "libero_panda", settings["base_frame"],
                                  settings["ee_frame"]))
        except OSError as err:
            raise params.ParameterError(
                f"cannot write the Panda's robot description under {cache}: {err}; set "
                "XDG_CACHE_HOME to a writable folder, or robot_description_file to '' to "
                "publish no model") from None

    def create_driver(self) -> RobotDriver:
        s = self.settings
        return LiberoDriver(
            suite=s.suite, task_id=s.task_id, seed=s.seed, init_state_index=s.init_state_index,
            cameras=list(s.cameras), image_height=s.image_height, image_width=s.image_width,
            render_quality=s.render_quality, render_device=s.render_device,
            max_episode_steps=s.max_episode_steps, real_time=s.real_time,
            privileged=s.privileged, camera_rate=s.camera_rate, base_frame=self.base_frame)


def main(args=None):
    raise SystemExit(spin_robot_node(LiberoNode, args=args))


if __name__ == "__main__":
    main()
