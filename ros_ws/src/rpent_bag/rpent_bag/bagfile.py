"""Read a rosbag2 directory (MCAP or SQLite) with rosbags: connections, raw messages in
time order, and a typestore built from the definitions stored in the bag itself (so custom
types decode without their package)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator, Optional

from rpent_bag import definitions


class BagError(ValueError):
    """The bag cannot be read as asked; the message says what to do."""


def open_reader(path: Path | str):
    from rosbags.rosbag2 import Reader

    path = Path(path)
    if not (path / "metadata.yaml").is_file() and any(path.glob("*.mcap")):
        raise BagError(f"{path} was never closed (its recorder was killed): make a closed "
                       f"copy of it with: rpent recover-bag {path}")
    if not (path / "metadata.yaml").is_file():
        raise BagError(f"{path} is not a rosbag2 directory (no metadata.yaml); pass the folder "
                       f"the recorder created, e.g. runs/<time>/bag")
    return Reader(path)


def select(reader, topics: Optional[Iterable[str]]):
    """The reader's connections on the given topics (all when None); unknown names fail."""
    if topics is None:
        return list(reader.connections)
    wanted = {t if t.startswith("/") else "/" + t for t in topics}
    known = {c.topic for c in reader.connections}
    missing = wanted - known
    if missing:
        raise BagError(f"topics {sorted(missing)} are not in the bag; it has {sorted(known)}")
    return [c for c in reader.connections if c.topic in wanted]


def typestore(connections):
    store = definitions.typestore_for()
    for conn in connections:
        if conn.msgtype not in store.fielddefs:
            definitions.register(store, conn.msgtype, conn.msgdef.data)
    return store


def messages(reader, connections) -> Iterator[tuple]:
    """(connection, timestamp_ns, raw CDR bytes) in timestamp order."""
    for conn, stamp, data in reader.messages(connections=connections):
        yield conn, stamp, bytes(data)
