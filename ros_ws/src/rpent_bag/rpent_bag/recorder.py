"""Write a rosbag2 (MCAP storage) from serialized CDR messages on a thread of its own.

The bag is what ``ros2 bag record -s mcap`` on Humble would write: metadata version 8
(Humble's reader refuses newer versions), the publishers' QoS in ``offered_qos_profiles``,
and each type's full ``ros2msg`` definition in the MCAP schema so custom types decode
without their package installed. Callers hand over bytes and return at once; the writer
thread is the only one touching the file.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from rpent_bag import definitions
from rpent_bag.dropqueue import DropOldestQueue

# Humble's rosbag2 reads metadata versions up to 8; rosbags writes 8 or 9.
HUMBLE_METADATA_VERSION = 8


@dataclass
class RecorderStats:
    written: dict = field(default_factory=dict)   # topic -> messages written
    dropped: int = 0                              # messages lost to a full queue
    errors: list = field(default_factory=list)


class BagRecorder:
    """Serialized messages in, a rosbag2 MCAP directory out.

    ``add_topic`` and ``write`` never block and never touch the file; ``close`` drains the
    queue, writes the summary and metadata.yaml, and is safe to call more than once.
    """

    def __init__(self, path: Path | str, queue_size: int = 1000,
                 version: int = HUMBLE_METADATA_VERSION):
        from rosbags.rosbag2 import StoragePlugin, Writer

        self.path = Path(path)
        if self.path.exists():
            raise FileExistsError(f"{self.path} exists; choose a new bag directory "
                                  f"(rosbag2 never appends to a bag)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = Writer(self.path, version=version, storage_plugin=StoragePlugin.MCAP)
        self._writer.open()
        self._store = definitions.typestore_for()
        self._connections: dict[str, object] = {}
        self._queue = DropOldestQueue(queue_size)
        self.stats = RecorderStats()
        self._closed = threading.Event()
        self._close_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="bag-writer", daemon=True)
        self._thread.start()

    # --- producer side (any thread) ------------------------------------------------------
    def add_topic(self, topic: str, type_name: str, offered_qos: Sequence = (),
                  definition: Optional[str] = None) -> None:
        """Declare a topic; ``definition`` defaults to the installed ros2msg text."""
        type_name = definitions.normalize(type_name)
        text = definition or definitions.full_text(type_name)
        self._queue.put(("topic", topic, type_name, tuple(offered_qos), text))

    def write(self, topic: str, stamp_ns: int, data: bytes) -> None:
        if not self._queue.put(("msg", topic, stamp_ns, data)):
            self.stats.dropped = self._queue.dropped

    @property
    def topics(self) -> set:
        return set(self._connections)

    # --- writer thread ------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            item = self._queue.get(timeout=0.5)
            if item is None:
                if self._queue.closed:
                    return
                continue
            try:
                if item[0] == "topic":
                    self._add_connection(*item[1:])
                else:
                    _, topic, stamp, data = item
                    conn = self._connections.get(topic)
                    if conn is None:
                        raise KeyError(f"message on undeclared topic {topic}")
                    self._writer.write(conn, stamp, data)
                    self.stats.written[topic] = self.stats.written.get(topic, 0) + 1
            except Exception as err:  # a bad message must not end the recording
                if len(self.stats.errors) < 100:
                    self.stats.errors.append(str(err))

    def _add_connection(self, topic, type_name, offered_qos, text) -> None:
        if topic in self._connections:
            return
        self._connections[topic] = definitions.add_connection(
            self._writer, self._store, topic, type_name, text, offered_qos)
        self.stats.written.setdefault(topic, 0)

    # --- shutdown -----------------------------------------------------------------------
    def close(self, timeout: float = 30.0) -> RecorderStats:
        """Write everything queued, then the MCAP summary and metadata.yaml."""
        with self._close_lock:
            if self._closed.is_set():
                return self.stats
            self._queue.close()
            self._thread.join(timeout)
            self.stats.dropped = self._queue.dropped
            self._writer.set_custom_data("rpent.dropped_messages", str(self.stats.dropped))
            self._writer.set_custom_data("rpent.closed_at", time.strftime("%Y-%m-%dT%H:%M:%S%z"))
            self._writer.close()
            self._closed.set()
            return self.stats

    @property
    def backlog(self) -> int:
        return len(self._queue)


class StampThinning:
    """Keeps a stamped message (``std_msgs/Header`` first, as in every image) when its stamp
    enters a new period of 1/``rate`` s, read from the serialized CDR without decoding it.

    Deciding by the stamp, not by arrival, keeps the same instants on every camera that
    stamps its frames alike, so the images a bag keeps still pair up with one another and
    with the robot state of their step. Stamps that go back (a reset restarting simulated
    time) are judged the same way: a period other than the last one kept is kept.
    """

    def __init__(self, rate: float):
        if not rate > 0:
            raise ValueError(f"rate must be > 0 Hz, got {rate}")
        self._period_ns = max(1, round(1e9 / rate))
        self._last: dict[str, int] = {}

    def keep(self, topic: str, data: bytes) -> bool:
        if len(data) < 12:
            return True  # not a stamped message: nothing to thin by
        # 4 bytes of encapsulation (its second byte: 1 little-endian, 0 big-endian), then
        # the header's int32 sec and uint32 nanosec.
        order = "little" if data[1] & 1 else "big"
        stamp = (int.from_bytes(data[4:8], order, signed=True) * 1_000_000_000
                 + int.from_bytes(data[8:12], order))
        period = stamp // self._period_ns
        if self._last.get(topic) == period:
            return False
        self._last[topic] = period
        return True
