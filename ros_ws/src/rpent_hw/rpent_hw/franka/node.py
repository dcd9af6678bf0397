"""The Franka FR3 robot node: its parameters, declared and checked at start-up, and the
robot contract served for its driver.

    ros2 run rpent_hw franka_node --ros-args --params-file config/franka.yaml
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from rpent_contract.driver import RobotDriver
from rpent_contract.extras import require
from rpent_contract.robot_node import spin_robot_node

from ..arm_node import ArmNode
from ..safety import SafetyLayer
from .driver import FrankaDriver
from .settings import FrankaNodeSettings, FrankaSettings, make_control_spaces


class FrankaNode(ArmNode):
    settings_type = FrankaNodeSettings

    def __init__(self):
        super().__init__("franka")

    def default_robot_description_file(self, settings: dict) -> str:
        # franky-sim ships Franka's FR3 + Hand URDF (from franka_description); its joint and
        # link names are the ones this node publishes.
        spec = importlib.util.find_spec("franky_sim")
        if spec is None or not spec.submodule_search_locations:
            return ""
        path = Path(spec.submodule_search_locations[0]) / "assets" / "fr3.urdf"
        return str(path) if path.is_file() else ""

    def create_driver(self) -> RobotDriver:
        require("franka", "the Franka node", "franky")
        settings = self.settings
        limits, approval, cameras = self.arm_parts(settings.velocity_scale)
        rate = settings.control_rate
        return FrankaDriver(FrankaSettings(
            host=settings.robot_ip, gripper=settings.gripper, realtime=settings.realtime_mode,
            dynamics_factor=settings.relative_dynamics_factor, control_rate=rate,
            # State is read as often as it is published (publish_rate 0 = the control rate).
            state_rate=max(rate, settings.publish_rate),
            spaces=tuple(make_control_spaces(self.max_translation_step, self.max_rotation_step,
                                             settings.max_joint_step, self.base_frame)),
            safety=SafetyLayer(limits), approval=approval, home_joints=settings.home_joints,
            instruction=settings.instruction, settle_velocity=settings.settle_velocity,
            settle_timeout=settings.settle_timeout,
            max_target_lead=settings.max_target_lead,
            max_target_lag=settings.max_target_lag, connect_timeout=settings.connect_timeout,
            reflex_retries=settings.reflex_retries, gripper_speed=settings.gripper_speed,
            gripper_force=settings.gripper_force, cameras=cameras), self.get_logger())


def main(args=None):
    raise SystemExit(spin_robot_node(FrankaNode, args=args))


if __name__ == "__main__":
    main()
