"""Turn a bring-up description into a ROS 2 LaunchDescription (used by launch/*.launch.py).

Everything about a run — nodes, parameters, remaps — comes from :mod:`rpent.bringup`;
this module only translates, so ``ros2 launch`` and :mod:`rpent.start` cannot drift.
"""
from __future__ import annotations

from .bringup import BRINGUPS, NodeSpec


def launch_node(spec: NodeSpec):
    from launch.actions import ExecuteProcess, Shutdown
    from launch_ros.actions import Node

    if spec.command:
        return ExecuteProcess(cmd=spec.command, name=spec.name, output="screen",
                              sigterm_timeout="30")
    return Node(
        package=spec.package, executable=spec.executable, name=spec.name,
        namespace=spec.namespace or None,
        parameters=[*spec.params_files, spec.parameters],
        remappings=list(spec.remappings.items()),
        output="screen", emulate_tty=True,
        # The run ends with the agent, or when any other node dies (a robot node that
        # cannot start), as it does under rpent.start.
        on_exit=Shutdown(reason=f"{spec.name} finished" if spec.required else
                         f"{spec.name} exited; its output above says why"),
    )


def launch_description(bringup: str):
    from launch import LaunchDescription
    from launch.actions import DeclareLaunchArgument, OpaqueFunction
    from launch.substitutions import LaunchConfiguration

    b = BRINGUPS[bringup]

    def nodes(context):
        values = {a.name: LaunchConfiguration(a.name).perform(context) for a in b.arguments}
        return [launch_node(spec) for spec in b.nodes(values)]

    return LaunchDescription(
        [DeclareLaunchArgument(a.name, default_value=a.default, description=a.help)
         for a in b.arguments] + [OpaqueFunction(function=nodes)])
