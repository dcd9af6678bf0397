"""The one way our node executables run: construct, spin until Ctrl-C, always clean up."""
from __future__ import annotations

import signal
import sys
from typing import Callable, Optional

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.signals import SignalHandlerOptions

# launch ends a node with SIGINT then SIGTERM; a closed terminal sends SIGHUP.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_node(make_node: Callable, *, name: str, args=None, num_threads: int = 1,
             close: Callable = lambda node: None, startup_errors=(ValueError,),
             drain: Optional[Callable] = None) -> int:
    """Spin ``make_node()`` until shutdown and return the process exit code.

    A start-up error of the kinds in ``startup_errors`` (a bad parameter, a refused
    configuration) prints the reason and returns 2 instead of a traceback. ``close(node)``
    runs before the node is destroyed, whatever ended the spin. ``drain(node, executor)``,
    when given, runs after SIGINT, SIGTERM or SIGHUP with ROS still up, to spin in what
    had already been sent to the node; further signals are then ignored.
    """
    if drain is None:
        rclpy.init(args=args)
    else:
        # rclpy's own handlers would shut ROS down at the signal, before the drain.
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
        for signum in STOP_SIGNALS:
            signal.signal(signum, _raise_interrupt)
    try:
        node = make_node()
    except startup_errors as err:
        print(f"[{name}] cannot start: {err}", file=sys.stderr)
        rclpy.try_shutdown()
        return 2
    except (KeyboardInterrupt, ExternalShutdownException):
        rclpy.try_shutdown()
        return 0
    except Exception:
        if rclpy.ok():
            raise
        # Ctrl-C or SIGTERM while still starting (waiting for a robot, loading a model): what
        # failed is that wait on a shut-down context, not the node.
        print(f"[{name}] stopped while starting", file=sys.stderr)
        return 0
    executor = (MultiThreadedExecutor(num_threads=num_threads) if num_threads > 1
                else SingleThreadedExecutor())
    executor.add_node(node)
    try:
        if drain is None:
            executor.spin()
        else:
            # spin_once, not spin: a signal is handled between waits, and an idle node's
            # wait might never end.
            while rclpy.ok():
                executor.spin_once(timeout_sec=0.1)
    except KeyboardInterrupt:
        if drain is not None:
            for signum in STOP_SIGNALS:
                signal.signal(signum, signal.SIG_IGN)
            drain(node, executor)
    except ExternalShutdownException:
        pass
    finally:
        close(node)
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


def _raise_interrupt(signum, _frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)
