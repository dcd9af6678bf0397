"""Record the run when ``record:=true``: include this from a bring-up launch file.

Launch arguments (name, default, what):
  record     false                 write a bag
  run_dir    runs/<time>           the run folder; the bag goes to <run_dir>/bag
  namespace  ''                    namespace of the robot whose topics are recorded

Uses ``ros2 bag record -s mcap`` where rosbag2 is installed (on Humble it writes what
Humble reads); otherwise the rpent_bag recorder node, which writes the same layout.
"""
import shutil
import time

from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from rpent_bag.record_node import DEFAULT_TOPICS


def _recorder(context):
    if LaunchConfiguration("record").perform(context).lower() not in ("true", "1"):
        return []
    run_dir = LaunchConfiguration("run_dir").perform(context) or f"runs/{time.strftime('%Y%m%d-%H%M%S')}"
    ns = LaunchConfiguration("namespace").perform(context).strip("/")
    bag = f"{run_dir}/bag"
    try:
        get_package_share_directory("rosbag2_storage_mcap")
        have_rosbag2 = shutil.which("ros2") is not None
    except PackageNotFoundError:
        have_rosbag2 = False
    if have_rosbag2:
        prefix = f"/{ns}/" if ns else "/"
        # One regex for all: the camera names are not known here.
        names = "|".join(t.replace("*", ".*") for t in DEFAULT_TOPICS)
        regex = f"^{prefix}({names})$"
        return [ExecuteProcess(
            cmd=["ros2", "bag", "record", "-s", "mcap", "-o", bag, "--include-hidden-topics",
                 "-e", regex],
            output="screen", sigterm_timeout="30")]
    return [Node(package="rpent_bag", executable="recorder", name="recorder", namespace=ns,
                 output="screen", parameters=[{"bag_path": bag}], sigterm_timeout="30")]


def generate_launch_description():
    return LaunchDescription([
        DeclareLaunchArgument("record", default_value="false"),
        DeclareLaunchArgument("run_dir", default_value=""),
        DeclareLaunchArgument("namespace", default_value=""),
        OpaqueFunction(function=_recorder),
    ])
