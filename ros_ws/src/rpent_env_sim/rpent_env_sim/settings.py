"""The LIBERO node's parameters: the robot contract's (:class:`RobotSettings`) with the
simulator's defaults, and the task, cameras and pacing of the simulation.
``config/libero_sim.yaml`` is written from :class:`LiberoSettings`
(``python -m rpent_env_sim.settings config/libero_sim.yaml``)."""
from __future__ import annotations

from dataclasses import dataclass

from rpent_contract.robot_settings import RobotSettings
from rpent_contract.settings import (
    at_least,
    in_range,
    non_negative,
    one_of,
    parameter,
    with_default,
    write_params_file,
)

RENDER_QUALITIES = ("low", "high")


def _suite(value):
    # The suites installed decide; the simulator (MuJoCo, LIBERO) is loaded to ask them only
    # when a value is checked, so reading these settings (the bring-ups do) needs neither.
    from .libero_sim import LiberoSim

    return one_of(*LiberoSim.available_suites())(value)


@dataclass(frozen=True)
class LiberoSettings(RobotSettings):
    # Base frame = robot0_base; the table top is near z = 0 and objects sit on it.
    workspace_min: tuple = with_default(RobotSettings, "workspace_min", (0.05, -0.55, -0.05))
    workspace_max: tuple = with_default(RobotSettings, "workspace_max", (0.95, 0.55, 0.75))
    operator: str = with_default(RobotSettings, "operator", "auto")
    suite: str = parameter("libero_object", "LIBERO / LIBERO-PRO / LIBERO-Plus suite",
                           check=_suite)
    task_id: int = parameter(0, "Task index in the suite", check=at_least(0))
    seed: int = parameter(0, "Simulator seed", check=at_least(0))
    init_state_index: int = parameter(0, "Index of the benchmark's recorded initial state",
                                      check=at_least(0))
    cameras: tuple = parameter(("agentview", "robot0_eye_in_hand"), "MuJoCo cameras published "
                               "as camera/<name>/image_raw",
                               check=lambda v: None if v else "needs at least one camera")
    image_height: int = parameter(128, "Camera image height", "px", in_range(16, 2048))
    image_width: int = parameter(128, "Camera image width", "px", in_range(16, 2048))
    render_quality: str = parameter("low", "low (fast: no anti-aliasing / reflections) or high "
                                    "(LIBERO's look)", check=one_of(*RENDER_QUALITIES))
    render_device: int = parameter(-1, "EGL device (GPU index) the cameras render on; -1: "
                                   "MUJOCO_EGL_DEVICE_ID, else the first",
                                   check=lambda v: None if v >= -1 else
                                   "must be -1 or a device index")
    max_episode_steps: int = parameter(600, "Episode step cap",
                                       check=lambda v: None if v > 0 else "must be > 0")
    real_time: bool = parameter(False, "Pace steps to the control rate (else run as fast as "
                                "the CPU allows)")
    privileged: bool = parameter(
        True, "Offer the simulator's object poses and native success to the agent; false runs "
        "the task as on a real arm (success is then only in task_status.native_success, for "
        "evaluation)")
    camera_rate: float = parameter(
        0.0, "Camera frame rate in simulated time, as a real camera's; 0 = every control "
        "step. Frames are rendered only for steps someone looks at (a camera subscriber, a "
        "camera/trigger)", "Hz", non_negative)


PARAMS_HEADER = """\
# Parameters of the LIBERO robot node (rpent_env_sim/libero_node), node name `libero_sim`,
# at their defaults; written by `python -m rpent_env_sim.settings config/libero_sim.yaml`
# from rpent_env_sim/settings.py, where each is declared. Copy it to change a value:
#   ros2 run rpent_env_sim libero_node --ros-args --params-file config/libero_sim.yaml
# The `/**` key applies to the node whatever its name and namespace, so the same file
# serves a namespaced robot (robot1/libero_sim) as well.
"""


if __name__ == "__main__":
    write_params_file(LiberoSettings, PARAMS_HEADER)
