"""The one way our node executables run: construct, spin until Ctrl-C, always clean up."""
from __future__ import annotations

import faulthandler
import signal
import sys
import threading
from typing import Callable

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

from .executors import MultiThreadedExecutor
from .params import check_all_known

# Longest a node may take from the end of its spin to the end of its process: its clean-up
# is bounded, so a process still there is held by a thread that never ends (Python joins
# them at exit), and a node that outlives its starter must not go on serving a robot.
SHUTDOWN_DEADLINE_S = 30.0


def run_node(make_node: Callable, *, name: str, args=None, num_threads: int = 1,
             close: Callable = lambda node: None, startup_errors=(ValueError,),
             shutdown_deadline: float = SHUTDOWN_DEADLINE_S) -> int:
    """Spin ``make_node()`` until shutdown and return the process exit code.

    A start-up error of the kinds in ``startup_errors`` (a bad parameter, one the node does
    not have, a refused configuration) prints the reason and returns 2 instead of a
    traceback. ``close(node)`` runs before the node is destroyed, whatever ended the spin.
    A process still alive ``shutdown_deadline`` s after its run ended (its spin, or its
    start-up cut short by Ctrl-C or an error) prints every thread's stack (what held it) and
    exits with status 1.
    """
    rclpy.init(args=args)
    node = None
    try:
        node = make_node()
        check_all_known(node)
    except startup_errors as err:
        _stopping(shutdown_deadline)
        print(f"[{name}] cannot start: {err}", file=sys.stderr)
        _close(node, close)
        return 2
    except (KeyboardInterrupt, ExternalShutdownException):
        _stopping(shutdown_deadline)
        _close(node, close)
        return 0
    except Exception:
        _stopping(shutdown_deadline)
        if rclpy.ok():
            raise
        # Ctrl-C or SIGTERM while still starting (waiting for a robot, loading a model): what
        # failed is that wait on a shut-down context, not the node.
        print(f"[{name}] stopped while starting", file=sys.stderr)
        return 0
    try:
        executor = (MultiThreadedExecutor(num_threads=num_threads) if num_threads > 1
                    else SingleThreadedExecutor())
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        _stopping(shutdown_deadline)
        _close(node, close)
    return 0


def _stopping(deadline: float) -> None:
    """The run is ending, however it ends (a Ctrl-C still starting included): ignore further
    interrupts, and exit with every thread's stack if the process is still there
    ``deadline`` s from now."""
    _ignore_interrupts()
    faulthandler.dump_traceback_later(deadline, exit=True)


def _close(node, close: Callable) -> None:
    if node is not None:
        close(node)
        node.destroy_node()
    rclpy.try_shutdown()


def _ignore_interrupts() -> None:
    """From now on a Ctrl-C must not cut the clean-up short with a traceback: under
    ``ros2 launch`` a terminal's Ctrl-C reaches every node twice (from the terminal, then
    from launch)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
