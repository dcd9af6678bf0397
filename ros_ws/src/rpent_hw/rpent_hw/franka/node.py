"""The Franka FR3 robot node: its parameters, declared and checked at start-up, and the
robot contract served for its driver.

    ros2 run rpent_hw franka_node --ros-args --params-file config/franka.yaml
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from rpent_contract import params
from rpent_contract.driver import RobotDriver
from rpent_contract.extras import require
from rpent_contract.robot_node import spin_robot_node

from ..arm_node import ArmNode
from ..safety import SafetyLayer
from .driver import FrankaDriver
from .settings import (
    GRIPPER_MAX_FORCE,
    JOINT_LOWER,
    JOINT_UPPER,
    FrankaSettings,
    make_control_spaces,
)


class FrankaNode(ArmNode):
    def __init__(self):
        # Base frame fr3_link0; the default box keeps the hand above the table in front.
        super().__init__("franka", default_workspace=((0.25, -0.45, 0.05), (0.80, 0.45, 0.80)),
                         default_frames=("fr3_link0", "fr3_hand_tcp"))

    def default_robot_description_file(self) -> str:
        # franky-sim ships Franka's FR3 + Hand URDF (from franka_description); its joint and
        # link names are the ones this node publishes.
        spec = importlib.util.find_spec("franky_sim")
        if spec is None or not spec.submodule_search_locations:
            return ""
        path = Path(spec.submodule_search_locations[0]) / "assets" / "fr3.urdf"
        return str(path) if path.is_file() else ""

    def create_driver(self) -> RobotDriver:
        require("franka", "the Franka node", "franky")
        rate, limits, approval, cameras = self.declare_arm(
            20.0, "Chunk rate and state publish rate, Hz", max_goal_translation=0.5,
            velocity_scale=True)
        d = lambda *a, **k: params.declare(self, *a, **k)  # noqa: E731
        host = d("robot_ip", "172.16.0.2", "Franka control (FCI) address",
                 lambda v: None if v else "must not be empty")
        safety_layer = SafetyLayer(limits)
        driver = FrankaDriver(FrankaSettings(
            host=host,
            gripper=d("gripper", True, "Use the Franka Hand"),
            realtime=d("realtime_mode", "enforce",
                       "enforce: refuse to run without a realtime kernel (hardware); ignore: "
                       "run anyway (franky-sim, development)", params.one_of("enforce", "ignore")),
            dynamics_factor=d("relative_dynamics_factor", 0.2,
                              "franky relative dynamics factor of every motion",
                              lambda v: None if 0 < v <= 1 else "must be in (0, 1]"),
            control_rate=rate,
            # State is read as often as it is published (publish_rate 0 = the control rate).
            state_rate=max(rate, self.publish_rate),
            spaces=tuple(make_control_spaces(
                self.max_translation_step, self.max_rotation_step,
                d("max_joint_step", 0.05, "Largest joint change per step of joint_position, rad",
                  params.positive), self.base_frame)),
            safety=safety_layer, approval=approval,
            home_joints=tuple(d("home_joints", [0.0, 0.0, 0.0, -1.57, 0.0, 1.57, 0.785],
                                "Joint configuration reset moves to, rad", _home_check)),
            instruction=d("instruction", "", "Task instruction published on task_status"),
            settle_velocity=d("settle_velocity", 1e-3,
                              "A motion ends once every joint is slower than this, rad/s",
                              params.positive),
            settle_timeout=d("settle_timeout", 3.0, "Longest wait for the arm to come to rest, s",
                             params.positive),
            connect_timeout=d("connect_timeout", 15.0, "Keep trying to reach the arm for this "
                              "long at start-up (it may come up after the node), s",
                              params.non_negative),
            reflex_retries=d("reflex_retries", 2, "Times per chunk the arm's abort of a "
                             "late command stream (communication_constraints_violation, a "
                             "discontinuity, franky's planner failing) is recovered from and "
                             "the row sent again; 0 fails the chunk at once",
                             lambda v: None if v >= 0 else "must be >= 0"),
            gripper_speed=d("gripper_speed", 0.05, "Finger speed, m/s", params.positive),
            gripper_force=d("gripper_force", 20.0, "Grasp force when a goal gives none, N",
                            lambda v: None if 0 < v <= GRIPPER_MAX_FORCE
                            else f"must be in (0, {GRIPPER_MAX_FORCE:g}] N"),
            cameras=cameras), self.get_logger())
        return driver


def _home_check(value):
    """home_joints: 7 finite angles inside the FR3's joint limits."""
    why = params.vector(7)(value)
    if why:
        return why
    outside = [f"joint {i + 1}: {v:g} not in [{lo:g}, {hi:g}]"
               for i, (v, lo, hi) in enumerate(zip(value, JOINT_LOWER, JOINT_UPPER))
               if not lo <= v <= hi]
    return f"outside the FR3 joint limits ({'; '.join(outside)})" if outside else None


def main(args=None):
    raise SystemExit(spin_robot_node(FrankaNode, args=args))


if __name__ == "__main__":
    main()
