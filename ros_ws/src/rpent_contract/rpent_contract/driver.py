"""The embodiment behind a robot node: a plain-Python interface, no rclpy.

:class:`~rpent_contract.robot_node.RobotContractNode` does the ROS side (parameters,
topics, actions, validation, one-motion-at-a-time); a driver only moves a robot and
reports its state. Drivers are called from the node's executor threads, one motion at
a time; a driver whose library is thread-bound (an EGL context, a serial port) owns a
worker thread and hands calls to it.
"""
from __future__ import annotations

import enum
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from .control_space import ControlSpaceSpec


@dataclass(frozen=True)
class Lens:
    """How a calibrated camera's raw images depart from the pinhole model, as ROS
    ``camera_info`` says it: distortion model and coefficients (D), rectification (R,
    row-major 3x3) and the rectified image's projection (P, row-major 3x4)."""

    model: str
    d: tuple
    r: tuple
    p: tuple


@dataclass
class CameraImage:
    """One upright RGB frame with pinhole intrinsics in pixels (ROS convention: pixel
    centres at integer coordinates)."""

    rgb: np.ndarray
    fx: float
    fy: float
    cx: float
    cy: float
    depth: Optional[np.ndarray] = None  # (H, W) float32 m along the optical axis, aligned to rgb
    # Where the optical frame is, in the base frame, when the robot knows (published on tf)
    position: Optional[np.ndarray] = None
    orientation: Optional[np.ndarray] = None  # x, y, z, w
    # A calibrated camera's distortion; None = undistorted (a simulator's renders)
    lens: Optional[Lens] = None


@dataclass
class TaskInfo:
    instruction: str = ""
    suite: str = ""
    task_name: str = ""
    task_id: int = -1
    episode_id: str = ""
    max_steps: int = 0
    success: bool = False  # the verdict agents read
    success_is_native: bool = False  # whether ``success`` comes from the simulator's own check
    done: bool = False
    # Simulation only: the simulator's own check even when it is withheld from ``success``
    # (a non-privileged simulated robot), for evaluation.
    native_success: bool = False


@dataclass
class RobotSnapshot:
    """State of the robot at one instant, in SI units and the base frame."""

    joint_names: Sequence[str]
    joint_positions: np.ndarray
    ee_position: np.ndarray
    ee_orientation: np.ndarray  # x, y, z, w
    gripper_width: float
    episode_step: int = 0
    joint_velocities: Optional[np.ndarray] = None
    errors: Sequence[str] = ()
    images: dict = field(default_factory=dict)  # camera name -> CameraImage
    task: TaskInfo = field(default_factory=TaskInfo)
    # ROS time (ns) the state was measured; None = now (a simulator paused between steps).
    # A driver that keeps its last state while the robot is unreachable keeps this stamp, so
    # the node can tell a repeated measurement from a new one.
    stamp_ns: Optional[int] = None
    # The base's pose (position, quaternion x, y, z, w) in a fixed ``world`` frame, where the
    # robot has one (a simulator's world, which its models' training data used): published
    # as the frame ``world`` on /tf_static.
    base_in_world: Optional[tuple] = None


@dataclass
class RobotDescription:
    embodiment: str
    simulated: bool
    joint_names: Sequence[str]
    camera_names: Sequence[str]
    control_spaces: Sequence[ControlSpaceSpec]
    control_rate: float  # Hz
    gripper_max_width: float  # m
    max_chunk_steps: int = 1000
    sim_services: Sequence[str] = ()
    depth_camera_names: Sequence[str] = ()  # cameras that also publish an aligned depth image
    # A simulator that renders a state's frames only when someone looks (see FrameDemand)
    frames_on_demand: bool = False

    def __post_init__(self):
        if self.sim_services and not self.simulated:
            raise ValueError(f"{self.embodiment}: sim_services {list(self.sim_services)} "
                             "need a simulated robot; a real one cannot answer them")


class Motion:
    """What a running motion needs from the node: whether to stop, and where to report.

    A stopped motion either halts the arm (``stop``: cancel, the stop service, another kind
    of goal) or hands it over (``hand_over``: a new chunk continues the stream), in which
    case the driver stops commanding but leaves the arm moving for the successor to take
    over without a stop in between. A ``stop`` after a hand-over still halts.
    """

    def __init__(self, feedback: Callable[[RobotSnapshot, int], None] = lambda s, i: None,
                 continuous: bool = False):
        self._stop = threading.Event()
        self.reason = ""
        self._feedback = feedback
        self.continuous = continuous  # a stream segment that a successor may take over
        self._handed_over = False
        self._lock = threading.Lock()

    def stop(self, reason: str) -> None:
        with self._lock:
            self._handed_over = False
            if not self._stop.is_set():
                self.reason = reason
                self._stop.set()

    def hand_over(self, reason: str) -> None:
        with self._lock:
            if not self._stop.is_set():
                self.reason, self._handed_over = reason, True
                self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    @property
    def handed_over(self) -> bool:
        """Stopped only to let the next chunk continue the motion: do not halt."""
        return self._handed_over

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` s; wake at once when the motion is stopped."""
        return self._stop.wait(timeout)

    def feedback(self, snapshot: RobotSnapshot, step: int) -> None:
        self._feedback(snapshot, step)


@dataclass
class ChunkOutcome:
    steps_executed: int
    snapshot: RobotSnapshot
    stopped_on_success: bool = False
    episode_end: bool = False
    fault: str = ""


@dataclass
class MoveOutcome:
    reached: bool
    snapshot: RobotSnapshot
    position_error: float
    orientation_error: float
    steps: int
    message: str = ""


@dataclass
class GripperOutcome:
    width: float
    reached: bool
    stalled: bool
    snapshot: RobotSnapshot
    effort: float = 0.0
    message: str = ""


class FrameDemand(enum.IntEnum):
    """Who looks at a simulator's cameras at the state it is about to measure, so that it
    renders only frames someone uses (rendering costs far more than physics on a CPU)."""

    NONE = 0       # nobody: render nothing
    WATCHED = 1    # camera subscribers: frames at the camera's own rate (``camera_rate``)
    REQUESTED = 2  # a consumer asked for this measurement's frames (``camera/trigger``)


def names_a_task(suite: str, *indices: int) -> bool:
    """Whether a reset or a run's start names a task: the contract's requests keep the
    current suite, task, seed or initial state where they leave it empty or negative."""
    return bool(suite) or any(index >= 0 for index in indices)


@dataclass
class ResetRequest:
    suite: str = ""
    task_id: int = -1
    seed: int = -1
    init_state_index: int = -1

    def names_a_task(self) -> bool:
        return names_a_task(self.suite, self.task_id, self.seed, self.init_state_index)


class RobotDriver(ABC):
    """One embodiment. Raise ``ValueError`` for requests it cannot honour (nothing moves)."""

    @property
    @abstractmethod
    def description(self) -> RobotDescription: ...

    @abstractmethod
    def snapshot(self) -> RobotSnapshot:
        """The latest state (cheap: may be cached from the last control step)."""

    @abstractmethod
    def execute_chunk(self, space: ControlSpaceSpec, actions: np.ndarray, motion: Motion,
                      stop_on_success: bool) -> ChunkOutcome:
        """Run validated rows at the control rate; check ``motion.stopped`` every step."""

    @abstractmethod
    def move_to(self, position: np.ndarray, orientation: np.ndarray, *, position_only: bool,
                max_translation_step: float, max_rotation_step: float,
                position_tolerance: float, orientation_tolerance: float, max_steps: int,
                motion: Motion) -> MoveOutcome: ...

    @abstractmethod
    def gripper(self, width: float, max_effort: float, motion: Motion) -> GripperOutcome: ...

    @abstractmethod
    def hold(self) -> None:
        """Halt now and hold the current position."""

    @abstractmethod
    def reset(self, request: ResetRequest, motion: Motion) -> Optional[RobotSnapshot]:
        """Start a new episode. An arm that moves to get there is a motion like any other:
        it passes the safety layer and approval, reports ``motion.feedback`` and, once
        ``motion`` is stopped, halts within a control period and returns None (no new
        episode)."""

    def on_frame_demand(self, demand: Callable[[], FrameDemand]) -> None:
        """A simulator that renders on demand calls ``demand()`` before each measurement it
        makes and renders that state's frames only when someone looks. Drivers whose
        cameras run by themselves (real arms) ignore it."""

    def render(self) -> RobotSnapshot:
        """The current state with its camera frames (``frames_on_demand`` drivers)."""
        raise NotImplementedError("this robot's cameras run by themselves")

    def state_in_space(self, space_name: str) -> Optional[np.ndarray]:
        """Current state in an absolute control space's columns (anchors its step limits)."""
        return None

    def segment(self, camera: str, query: str) -> list:
        """Sim only: ``Detection``s of what ``query`` names, from the simulator's own
        segmentation of ``camera``'s current view."""
        raise NotImplementedError("this robot has no segmentation rendering (real hardware)")

    def object_poses(self) -> dict:
        """Sim only: name -> (position, quaternion xyzw) in the base frame."""
        raise NotImplementedError("this robot has no privileged object poses (real hardware)")

    def task_list(self) -> tuple:
        """Sim only: (the suite it runs, [(instruction, recorded initial states, what it
        perturbs or '')] by task id, [the suites a reset can switch to])."""
        raise NotImplementedError("this robot has no task list (real hardware)")

    def scene_objects(self) -> dict:
        """Sim only, for viewers: name -> (position, quaternion xyzw, centre, half sizes):
        each object's pose in the base frame and the box it fills, axis-aligned in its own
        frame, m (the table among them, where the scene has one)."""
        raise NotImplementedError("this robot has no scene model (real hardware)")

    def close(self) -> None:
        """Release the robot / simulator."""
