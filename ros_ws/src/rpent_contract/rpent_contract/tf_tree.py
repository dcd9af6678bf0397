"""Frames from /tf and /tf_static, looked up as of a time: the part of tf2 this project uses,
in plain Python (no rclpy; feed it the TFMessages a node receives).

Why not tf2_ros: the ROS 2 wheels from PyPI that this project installs ship neither tf2_ros
nor tf2_py, and the lookups needed are few. :meth:`TfTree.lookup` is tf2's
``Buffer.lookup_transform(target, source, time, timeout)`` returned as a pose of ``source``
in ``target`` (tf2 returns the same transform as a TransformStamped), with two differences:
each moving frame's transform is the one *nearest* the time, not interpolated (a robot
publishes its frames under the stamp of the data measured with them, so the nearest is
the exact one), and only frames above ``source`` can be the target (tf2 also walks down).
A static transform holds at any time, as in tf2. :meth:`TfTree.lookup_above` finds a frame
by its name in any namespace (``world`` finds ``robot1/world``).
"""
from __future__ import annotations

import threading
from typing import Callable, Optional

import numpy as np

from .geometry import compose, stamp_to_ns

IDENTITY = (np.zeros(3), np.array([0.0, 0.0, 0.0, 1.0]))


class TfTree:
    """Recent transforms of every frame to its parent.

    A camera that moves with the arm must be placed where it was when it took the picture,
    not where tf last put it (after a reset, say, which moves it at once): lookups take the
    time of the data they place and wait, up to a timeout, for a transform measured then.
    """

    HISTORY = 200  # transforms kept per moving frame: 10 s of a 20 Hz robot
    MAX_DEPTH = 64  # frames between a source and its target; a longer chain is a loop

    def __init__(self):
        # child -> [(stamp_ns, parent, translation, rotation xyzw)], oldest first; a static
        # frame holds one entry with stamp None (valid at any time).
        self._frames: dict = {}
        self._changed = threading.Condition()

    def add(self, msg, static: bool = False) -> None:
        """Take a tf2_msgs/TFMessage from /tf (``static``: from /tf_static)."""
        with self._changed:
            for tf in msg.transforms:
                t, r = tf.transform.translation, tf.transform.rotation
                entry = (None if static else stamp_to_ns(tf.header.stamp), tf.header.frame_id,
                         np.array([t.x, t.y, t.z]), np.array([r.x, r.y, r.z, r.w]))
                if static:
                    self._frames[tf.child_frame_id] = [entry]
                    continue
                history = self._frames.setdefault(tf.child_frame_id, [])
                if history and history[0][0] is None:
                    history.clear()  # a frame that moves now
                history.append(entry)
                del history[:-self.HISTORY]
            self._changed.notify_all()

    def add_static(self, msg) -> None:
        self.add(msg, static=True)

    def lookup(self, target: str, source: str, at_ns: Optional[int] = None,
               timeout: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """(position, quaternion xyzw) of frame ``source`` in frame ``target``, an ancestor
        of it, as of ``at_ns`` (None: the newest transforms), waiting up to ``timeout`` s
        for each moving frame's transform measured at or after that time."""
        return self._wait(lambda frame: frame == target, target, source, at_ns, timeout)

    def lookup_above(self, name: str, source: str, at_ns: Optional[int] = None,
                     timeout: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`lookup` in the nearest frame above ``source`` called ``name`` in any
        namespace: ``world`` is ``world`` or ``<prefix>/world``."""
        return self._wait(lambda frame: frame.rsplit("/", 1)[-1] == name, name, source,
                          at_ns, timeout)

    def _wait(self, is_target: Callable[[str], bool], target: str, source: str,
              at_ns: Optional[int], timeout: float) -> tuple[np.ndarray, np.ndarray]:
        with self._changed:
            self._changed.wait_for(lambda: self._chain(is_target, source, at_ns) is not None,
                                   timeout=timeout)
            chain = self._chain(is_target, source, at_ns)
        if chain is None:
            raise LookupError(f"no tf chain from '{source}' up to '{target}'"
                              f"{'' if at_ns is None else ' as of the data it places'} within "
                              f"{timeout:g} s (is the robot node publishing /tf and /tf_static?)")
        position, orientation = IDENTITY
        for translation, rotation in chain:
            position, orientation = compose(translation, rotation, position, orientation)
        return position, orientation

    def _chain(self, is_target, source: str, at_ns: Optional[int]) -> Optional[list]:
        chain, frame = [], source
        for _ in range(self.MAX_DEPTH):
            if is_target(frame):
                return chain
            history = self._frames.get(frame)
            if not history:
                return None  # not heard of
            if at_ns is None:
                _, parent, t, r = history[-1]
            else:
                if history[-1][0] is not None and history[-1][0] < at_ns:
                    return None  # not yet heard of at that time
                _, parent, t, r = min(history, key=lambda e: abs((e[0] or at_ns) - at_ns))
            chain.append((t, r))
            frame = parent
        return None
