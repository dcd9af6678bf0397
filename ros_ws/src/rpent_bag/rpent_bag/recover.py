"""A bag its recorder never closed (killed, out of power) as a closed bag.

Such a bag folder has no metadata.yaml and its MCAP file no summary, so no reader opens it.
The recorder's MCAP writer keeps messages in memory until a chunk of about 1 MiB is full,
then writes the chunk whole: every complete chunk in the file is intact, and only the
chunk being filled when the recorder died is lost. This copies every message of the
complete chunks, in order, into a new bag that ``ros2 bag``, rosbags and ``rpent``
commands read.

    rpent recover-bag runs/<time>/bag [--out runs/<time>/bag_recovered]
"""
from __future__ import annotations

import argparse
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rpent_bag import definitions
from rpent_bag.bagfile import BagError
from rpent_bag.recorder import HUMBLE_METADATA_VERSION


@dataclass
class Recovered:
    messages: dict = field(default_factory=dict)  # topic -> messages copied
    cut: str = ""  # where the source ended early, and why; empty: it ended cleanly


def recover(bag: Path, out: Path, progress: Callable[[str], None] = print) -> Recovered:
    """Copy the complete chunks of the unclosed bag ``bag`` into the new bag ``out``."""
    from mcap.exceptions import McapError
    from mcap.records import Channel, Message, Schema
    from mcap.stream_reader import StreamReader
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.rosbag2.metadata import parse_qos

    bag, out = Path(bag), Path(out)
    if (bag / "metadata.yaml").is_file():
        raise BagError(f"{bag} was closed (it has metadata.yaml): read it as it is")
    files = sorted(bag.glob("*.mcap"))
    if not files:
        raise BagError(f"{bag} holds no .mcap file; pass the bag folder the recorder made "
                       "(runs/<time>/bag)")
    if out.exists():
        raise BagError(f"{out} exists; pass a new folder with --out")
    store = definitions.typestore_for()
    result = Recovered()
    with Writer(out, version=HUMBLE_METADATA_VERSION,
                storage_plugin=StoragePlugin.MCAP) as writer:
        connections = {}  # topic -> the new bag's connection
        for path in files:
            schemas, channels = {}, {}  # this file's ids
            with path.open("rb") as f:
                try:
                    for record in StreamReader(f).records:
                        if isinstance(record, Schema):
                            schemas[record.id] = record
                        elif isinstance(record, Channel):
                            channels[record.id] = record
                        elif isinstance(record, Message):
                            channel = channels[record.channel_id]
                            conn = connections.get(channel.topic)
                            if conn is None:
                                schema = schemas[channel.schema_id]
                                qos = channel.metadata.get("offered_qos_profiles", "")
                                conn = connections[channel.topic] = definitions.add_connection(
                                    writer, store, channel.topic, schema.name,
                                    schema.data.decode(), parse_qos(qos) if qos else ())
                            writer.write(conn, record.log_time, record.data)
                            result.messages[channel.topic] = \
                                result.messages.get(channel.topic, 0) + 1
                except (McapError, struct.error, ValueError) as err:
                    # A killed writer leaves its last record short: everything before it
                    # is whole, and nothing after it was written.
                    result.cut = f"{path.name} ends inside a record ({err or type(err).__name__})"
            progress(f"{path.name}: {sum(result.messages.values())} messages so far"
                     + (f"; {result.cut}" if result.cut else ""))
        writer.set_custom_data("rpent.recovered_from", str(bag.resolve()))
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="rpent recover-bag",
        description="Make a closed bag of a bag its recorder never closed (a killed "
                    "recorder): every message up to the last complete chunk.")
    parser.add_argument("bag", type=Path, help="the unclosed bag folder (runs/<time>/bag)")
    parser.add_argument("--out", type=Path, help="the new bag folder (default: "
                        "<bag>_recovered next to it)")
    args = parser.parse_args(argv)
    out = args.out or args.bag.with_name(args.bag.name + "_recovered")
    try:
        result = recover(args.bag, out)
    except BagError as err:
        print(f"rpent recover-bag: {err}", file=sys.stderr)
        return 2
    for topic, count in sorted(result.messages.items()):
        print(f"  {topic}: {count}")
    print(f"wrote {out}: {sum(result.messages.values())} messages on "
          f"{len(result.messages)} topics")
    return 0


if __name__ == "__main__":
    sys.exit(main())
