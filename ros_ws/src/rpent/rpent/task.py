"""``rpent task``: start and cancel the runs of a serving agent (a bring-up with
``serve:=true``), as the dashboard's Start and Cancel buttons do.

    rpent task start "put the soup in the basket"   # no instruction: the robot's own task
    rpent task start --max-turns 10
    rpent task start --suite libero_spatial --task-id 3 --init-state 2   # that task's own instruction
    rpent task cancel

``--agent`` names the agent node (``/agent``; ``/robot1/agent`` for ``namespace:=robot1``);
the ROS domain is ``ROS_DOMAIN_ID``'s. A run goes on after ``start`` returns: follow it on
the dashboard or ``agent/log``; its files go to a folder of its own in the session's.
"""
from __future__ import annotations

import argparse
import sys


def _call(agent: str, service: str, srv_type, request, timeout: float,
          answer_timeout: float = 0.0):
    """The agent's answer to one call (within ``answer_timeout`` s once the agent is found,
    ``timeout`` when 0), or SystemExit with what to do when none comes."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from rpent_contract.client import ContractTimeout, spin_in_thread, wait_future

    rclpy.init(args=[], signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("rpent_task", use_global_arguments=False)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spin = spin_in_thread(executor, "task")
    name = f"{agent.rstrip('/')}/{service}"
    try:
        client = node.create_client(srv_type, name)
        if not client.wait_for_service(timeout_sec=timeout):
            raise SystemExit(f"no agent serves {name} (waited {timeout:g} s): start a bring-up "
                             "with serve:=true, and check --agent and ROS_DOMAIN_ID")
        answer_timeout = answer_timeout or timeout
        try:
            return wait_future(client.call_async(request), answer_timeout, name)
        except ContractTimeout:
            raise SystemExit(f"{name} did not answer within {answer_timeout:g} s; is the "
                             "agent still running (ros2 node list)?") from None
    finally:
        executor.shutdown()
        spin.join(5)
        node.destroy_node()
        rclpy.try_shutdown()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="rpent task", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agent", default="/agent", help="the agent node (default /agent)")
    p.add_argument("--timeout", type=float, default=10.0,
                   help="s to wait for the agent and its answer (default 10; a start that "
                        "names a task waits at least 60 s for the robot's reset)")
    sub = p.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="start a run")
    start.add_argument("instruction", nargs="?", default="",
                       help="what to do (default: the robot's current task)")
    start.add_argument("--max-turns", type=int, default=0,
                       help="model turns before the run ends (default: the agent's)")
    start.add_argument("--suite", default="",
                       help="reset the robot to a task of this suite first (simulators)")
    start.add_argument("--task-id", type=int, default=-1,
                       help="reset the robot to this task first (default: the current one)")
    start.add_argument("--init-state", type=int, default=-1,
                       help="the task's recorded initial state to reset to (default: the "
                            "robot's choice)")
    sub.add_parser("cancel", help="cancel the run in progress")
    opts = p.parse_args(argv)
    if opts.command == "start" and opts.max_turns < 0:
        p.error("--max-turns must be >= 0 (0: the agent's own)")
    if not opts.timeout > 0:
        p.error("--timeout must be > 0 s")
    if opts.command == "start":
        from rpent_contract.driver import names_a_task
        from rpent_interfaces.srv import StartRun

        reply = _call(opts.agent, "start_run", StartRun, StartRun.Request(
            instruction=opts.instruction, max_turns=opts.max_turns, suite=opts.suite,
            task_id=opts.task_id, init_state_index=opts.init_state), opts.timeout,
            max(opts.timeout, 60.0) if names_a_task(opts.suite, opts.task_id, opts.init_state)
            else opts.timeout)
        ok = reply.accepted
    else:
        from std_srvs.srv import Trigger

        reply = _call(opts.agent, "cancel_run", Trigger, Trigger.Request(), opts.timeout)
        ok = reply.success
    print(reply.message, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
