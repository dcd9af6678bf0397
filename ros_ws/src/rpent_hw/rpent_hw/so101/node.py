"""The SO-101 robot node: its parameters, declared and checked at start-up, and the robot
contract served for its driver.

    ros2 run rpent_hw so101_node --ros-args --params-file config/so101.yaml
"""
from __future__ import annotations

from rpent_contract import params
from rpent_contract.driver import RobotDriver
from rpent_contract.extras import require
from rpent_contract.robot_node import spin_robot_node

from ..arm_node import ArmNode
from ..safety import SafetyLayer
from .driver import SO101Driver
from .kinematics import model_path
from .settings import SO101Settings


class SO101Node(ArmNode):
    def __init__(self):
        # Base frame base_link (model "base"); the box keeps the jaws above the table in front.
        super().__init__("so101", default_workspace=((0.10, -0.30, 0.02), (0.42, 0.30, 0.35)),
                         default_frames=("base_link", "gripper_frame_link"))

    def default_robot_description_file(self) -> str:
        # The URDF next to the MJCF the kinematics use: same links, joints and zeros.
        try:
            path = model_path().with_name("so101_new_calib.urdf")
        except ValueError:
            return ""
        return str(path) if path.is_file() else ""

    def create_driver(self) -> RobotDriver:
        require("so101", "the SO-101 node", "lerobot.robots.so_follower")
        rate, limits, approval, cameras = self.declare_arm(
            30.0, "Bus read+write cycles, chunk steps and state topics, Hz",
            max_goal_translation=0.3)
        d = lambda *a, **k: params.declare(self, *a, **k)  # noqa: E731
        port = d("port", "/dev/ttyACM0", "Serial port of the servo bus (lerobot-find-port)",
                 lambda v: None if v else "must not be empty")
        max_joint_step = d("max_joint_step", 4.0,
                           "Largest joint change per control step of any motion, degrees",
                           params.positive)
        return SO101Driver(SO101Settings(
            port=port,
            robot_id=d("robot_id", "so101_follower", "LeRobot robot id: names the calibration "
                       "file <calibration_dir>/<robot_id>.json",
                       lambda v: None if v and "/" not in v else "must be a non-empty file name"),
            calibration_dir=d("calibration_dir", "", "LeRobot calibration folder; '' = LeRobot's "
                              "default (~/.cache/huggingface/lerobot/calibration/robots/"
                              "so_follower)"),
            control_rate=rate,
            max_relative_target=d("max_relative_target", 0.0,
                                  "LeRobot's per-write clip of every joint target to this many "
                                  "degrees from the present position; 0 = off",
                                  params.non_negative),
            max_translation_step=self.max_translation_step,
            max_rotation_step=self.max_rotation_step, frame_id=self.base_frame,
            safety=SafetyLayer(limits), approval=approval,
            home=tuple(d("home", [0.0, -30.0, 30.0, 60.0, 0.0, 50.0],
                         "Pose reset moves to: five joints in degrees, gripper 0-100",
                         params.vector(6))),
            max_joint_step=max_joint_step,
            ik_tolerance=d("ik_position_tolerance", 0.005,
                           "Refuse Cartesian targets the IK cannot reach this closely, m",
                           params.positive),
            gripper_max_width=d("gripper_max_width", 0.07,
                                "Jaw opening at gripper 100 (widths scale linearly), m",
                                params.positive),
            settle_timeout=d("settle_timeout", 3.0,
                             "Longest wait for the arm to come to rest after a motion, s",
                             params.positive),
            disable_torque_on_exit=d("disable_torque_on_exit", True,
                                     "Switch the servos off when the node exits (LeRobot's "
                                     "default; the arm then drops under gravity)"),
            instruction=d("instruction", "", "Task instruction published on task_status"),
            connect_timeout=d("connect_timeout", 15.0, "Keep trying to reach the bus for this "
                              "long at start-up (it may come up after the node), s",
                              params.non_negative),
            tcp_offset=tuple(d("tcp_offset", [0.0, 0.0, 0.0], "Tool centre point in the "
                               "gripper_frame_link frame (LeRobot's IK target, at the fixed "
                               "jaw's tip; z points across the jaws), m: ee_pose, the ee "
                               "frame on tf, move_to and ee_delta are of this point",
                               params.vector(3))),
            cameras=cameras), self.get_logger())


def main(args=None):
    raise SystemExit(spin_robot_node(SO101Node, args=args))


if __name__ == "__main__":
    main()
