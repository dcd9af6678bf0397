"""Start the LIBERO robot node.

Launch arguments (name, default, what):
  namespace     ''                   namespace of the robot's topics, actions and services
  params_file   <rpent>/config/libero_sim.yaml   node parameters
  suite         libero_object        LIBERO / LIBERO-PRO suite
  task_id       0                    task index in the suite

Example:
  ros2 launch rpent libero_sim.launch.py suite:=libero_spatial task_id:=3 namespace:=robot1
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def generate_launch_description():
    default_params = os.path.join(get_package_share_directory("rpent"), "config", "libero_sim.yaml")
    return LaunchDescription([
        DeclareLaunchArgument("namespace", default_value=""),
        DeclareLaunchArgument("params_file", default_value=default_params),
        DeclareLaunchArgument("suite", default_value="libero_object"),
        DeclareLaunchArgument("task_id", default_value="0"),
        Node(
            package="rpent_env_sim",
            executable="libero_node",
            name="libero_sim",
            namespace=LaunchConfiguration("namespace"),
            output="screen",
            emulate_tty=True,
            parameters=[
                LaunchConfiguration("params_file"),
                {
                    "suite": LaunchConfiguration("suite"),
                    "task_id": ParameterValue(LaunchConfiguration("task_id"), value_type=int),
                },
            ],
        ),
    ])
