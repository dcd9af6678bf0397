"""The multi-threaded executor every node and client of the project spins with.

rclpy's MultiThreadedExecutor (Humble, Jazzy) hands each ready callback to a thread pool and
goes back to its wait set at once. A task still waiting in the pool's queue counts as ready
again, so while the pool's threads are all busy every wake-up (each message, each callback
ending) hands every queued task to the pool once more; they return at once when they finally
run, behind the real work. A burst of fifty answers queued behind three busy threads turned
into thousands of such hand-overs, and its last answers waited hundreds of milliseconds
(ros2/rclpy#1452, fixed in Rolling only). Here a queued task counts as executing until a
thread takes it, so it is handed over once.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from rclpy.executors import MultiThreadedExecutor as _RclpyMultiThreadedExecutor
from rclpy.task import Task


def _run_queued(task: Task) -> None:
    # Taken by a thread: the task runs now, and rclpy's own bookkeeping takes over.
    task._executing = False
    task()


class _TaskPool(ThreadPoolExecutor):
    def submit(self, fn, /, *args, **kwargs):
        if isinstance(fn, Task) and not args and not kwargs:
            # What rclpy reads (Task.executing) to leave a task out of its next round.
            fn._executing = True
            return super().submit(_run_queued, fn)
        return super().submit(fn, *args, **kwargs)


class MultiThreadedExecutor(_RclpyMultiThreadedExecutor):
    """rclpy's MultiThreadedExecutor, each ready task handed to its threads once."""

    def __init__(self, num_threads=None, *, context=None):
        super().__init__(num_threads, context=context)
        # rclpy's pool has started no thread yet: it starts them on the first submit.
        threads = self._executor._max_workers
        self._executor.shutdown(wait=False)
        self._executor = _TaskPool(threads)
