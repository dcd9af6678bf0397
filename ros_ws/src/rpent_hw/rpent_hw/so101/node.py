"""The SO-101 robot node: its parameters, declared and checked at start-up, and the robot
contract served for its driver.

    ros2 run rpent_hw so101_node --ros-args --params-file config/so101.yaml
"""
from __future__ import annotations

from rpent_contract.driver import RobotDriver
from rpent_contract.extras import require
from rpent_contract.robot_node import spin_robot_node

from ..arm_node import ArmNode
from ..safety import SafetyLayer
from .driver import SO101Driver
from .kinematics import model_path
from .settings import SO101NodeSettings, SO101Settings


class SO101Node(ArmNode):
    settings_type = SO101NodeSettings

    def __init__(self):
        super().__init__("so101")

    def default_robot_description_file(self, settings: dict) -> str:
        # The URDF next to the MJCF the kinematics use: same links, joints and zeros.
        try:
            path = model_path().with_name("so101_new_calib.urdf")
        except ValueError:
            return ""
        return str(path) if path.is_file() else ""

    def create_driver(self) -> RobotDriver:
        require("so101", "the SO-101 node", "lerobot.robots.so_follower")
        settings = self.settings
        limits, approval, cameras = self.arm_parts()
        return SO101Driver(SO101Settings(
            port=settings.port, robot_id=settings.robot_id,
            calibration_dir=settings.calibration_dir, control_rate=settings.control_rate,
            max_relative_target=settings.max_relative_target,
            max_translation_step=self.max_translation_step,
            max_rotation_step=self.max_rotation_step, frame_id=self.base_frame,
            safety=SafetyLayer(limits), approval=approval, home=settings.home,
            max_joint_step=settings.max_joint_step, ik_tolerance=settings.ik_position_tolerance,
            gripper_max_width=settings.gripper_max_width,
            settle_timeout=settings.settle_timeout,
            max_target_lead=settings.max_target_lead,
            max_target_lag=settings.max_target_lag,
            disable_torque_on_exit=settings.disable_torque_on_exit,
            instruction=settings.instruction, connect_timeout=settings.connect_timeout,
            tcp_offset=settings.tcp_offset, cameras=cameras), self.get_logger())


def main(args=None):
    raise SystemExit(spin_robot_node(SO101Node, args=args))


if __name__ == "__main__":
    main()
