"""Turn a bring-up description into a ROS 2 LaunchDescription (used by launch/*.launch.py).

Everything about a run — nodes, parameters, remaps — comes from :mod:`rpent.bringup`;
this module only translates, so ``ros2 launch`` and :mod:`rpent.start` cannot drift.
"""
from __future__ import annotations

import os
import shlex
import sys

from .bringup import NodeSpec, get


class RunFailed(RuntimeError):
    """Raised from a node's exit handler: launch then stops every node and exits 1, its
    only way to report a failed run."""


def on_node_exit(spec: NodeSpec, run: dict):
    """The run ends with the agent, or when any other node dies (a robot node that cannot
    start), as under rpent.start; ``ros2 launch`` exits 0 only if the agent succeeded.
    ``run`` is shared by the run's nodes: the first failure is the one reported."""
    def handle(event, context):
        from launch.actions import Shutdown

        code, why = spec.exit_outcome(event.returncode)
        if context.is_shutdown:
            # The run is already ending: only the agent's own status still counts, unless
            # another node's failure ended it (the agent was then only told to stop).
            if spec.required and code != 0 and "failed" not in run:
                raise RunFailed(why)
            return None
        if code != 0:
            run["failed"] = why
            raise RunFailed(why)
        return [Shutdown(reason=why)]
    return handle


def launched_directly(bringup: str, command_line: list) -> bool:
    """Whether ``command_line`` (``ros2 launch rpent FILE ...``) names this bring-up's
    launch file rather than one that includes it."""
    return f"{bringup}.launch.py" in (os.path.basename(a) for a in command_line[1:]
                                      if ":=" not in a)


def launch_node(spec: NodeSpec, run: dict):
    from launch.actions import ExecuteProcess
    from launch_ros.actions import Node

    if spec.command:
        return ExecuteProcess(cmd=spec.command, name=spec.name, output="screen",
                              sigterm_timeout="30", on_exit=on_node_exit(spec, run))
    return Node(
        package=spec.package, executable=spec.executable, name=spec.name,
        namespace=spec.namespace or None, prefix=" ".join(map(shlex.quote, spec.prefix)) or None,
        parameters=[*spec.params_files, spec.parameters],
        remappings=list(spec.remappings.items()),
        output="screen", emulate_tty=True, on_exit=on_node_exit(spec, run),
    )


def launch_description(bringup: str):
    from launch import LaunchDescription
    from launch.actions import DeclareLaunchArgument, OpaqueFunction
    from launch.substitutions import LaunchConfiguration

    b = get(bringup)

    def nodes(context):
        # ros2 launch ignores an argument no launch file declares; ours refuse it, but only
        # when this is the launch file on the command line: a launch file that includes
        # ours may take arguments of its own.
        if launched_directly(bringup, sys.argv):
            b.check_command_line(context.argv)
        values = {a.name: LaunchConfiguration(a.name).perform(context) for a in b.arguments}
        run: dict = {}
        return [launch_node(spec, run) for spec in b.nodes(values)]

    return LaunchDescription(
        [DeclareLaunchArgument(a.name, default_value=a.default, description=a.help)
         for a in b.arguments] + [OpaqueFunction(function=nodes)])
