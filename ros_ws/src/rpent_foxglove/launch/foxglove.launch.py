"""Start the Foxglove bridge.

Launch arguments (name, default, what):
  namespace        ''      namespace of the robot whose topics are bridged
  params_file      <rpent>/config/foxglove_bridge.yaml
  port             8765
  legacy_port      8764    the foxglove.websocket.v1 protocol (Foxglove Studio 1.x); -1: none
  official_bridge  false   true: run foxglove_bridge (the official C++ package) instead,
                           when it is installed

Example:
  ros2 launch rpent_foxglove foxglove.launch.py port:=8766
"""
import os

from ament_index_python.packages import (PackageNotFoundError, get_package_share_directory)
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue


def _bridge(context):
    official = LaunchConfiguration("official_bridge").perform(context).lower() in ("true", "1")
    port = ParameterValue(LaunchConfiguration("port"), value_type=int)
    legacy_port = ParameterValue(LaunchConfiguration("legacy_port"), value_type=int)
    if official:
        try:
            get_package_share_directory("foxglove_bridge")
        except PackageNotFoundError:
            raise RuntimeError("official_bridge:=true but foxglove_bridge is not installed; "
                               "apt install ros-$ROS_DISTRO-foxglove-bridge or drop the argument")
        return [Node(package="foxglove_bridge", executable="foxglove_bridge",
                     namespace=LaunchConfiguration("namespace"), output="screen",
                     parameters=[{"port": port, "address": "127.0.0.1"}])]
    return [Node(package="rpent_foxglove", executable="bridge", name="foxglove_bridge",
                 namespace=LaunchConfiguration("namespace"), output="screen", emulate_tty=True,
                 parameters=[LaunchConfiguration("params_file"),
                             {"port": port, "legacy_port": legacy_port}])]


def generate_launch_description():
    try:
        default_params = os.path.join(get_package_share_directory("rpent"), "config",
                                      "foxglove_bridge.yaml")
    except PackageNotFoundError:
        default_params = ""
    return LaunchDescription([
        DeclareLaunchArgument("namespace", default_value=""),
        DeclareLaunchArgument("params_file", default_value=default_params),
        DeclareLaunchArgument("port", default_value="8765"),
        DeclareLaunchArgument("legacy_port", default_value="8764"),
        DeclareLaunchArgument("official_bridge", default_value="false"),
        OpaqueFunction(function=_bridge),
    ])
