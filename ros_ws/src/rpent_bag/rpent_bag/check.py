"""Check that a bag holds what was published, before training on it or trusting a replay.

    rpent check-bag runs/*/bag

Per topic: the messages the bag lists, how many of them are there and decode with the
definitions stored in the bag. Across topics: messages the recorder dropped for a full
queue (its ``rpent.dropped_messages``), and the executed steps the robot numbered
(``executed_actions``, one per control step an episode ran) that are missing. Exit 0 when
every bag passes, 1 when one has a problem (each is printed), 2 when one cannot be opened.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rpent_bag import bagfile
from rpent_bag.bagfile import BagError

EXECUTED_TYPE = "rpent_interfaces/msg/ExecutedAction"


@dataclass
class TopicCheck:
    msgtype: str
    listed: int  # what metadata.yaml says the bag holds
    read: int = 0
    undecodable: int = 0
    first_error: str = ""


@dataclass
class BagCheck:
    topics: dict = field(default_factory=dict)  # topic -> TopicCheck
    problems: list = field(default_factory=list)


def check(bag: Path) -> BagCheck:
    result = BagCheck()
    steps: dict = {}  # (topic, episode_id) -> executed steps seen
    with bagfile.open_reader(bag) as reader:
        store = bagfile.typestore(reader.connections)
        for conn in reader.connections:
            result.topics.setdefault(conn.topic, TopicCheck(conn.msgtype, 0)).listed += \
                conn.msgcount
        for conn, _, data in bagfile.messages(reader, reader.connections):
            topic = result.topics[conn.topic]
            topic.read += 1
            try:
                msg = store.deserialize_cdr(data, conn.msgtype)
            except Exception as err:  # noqa: BLE001 - any failure is the finding
                topic.undecodable += 1
                topic.first_error = topic.first_error or f"{type(err).__name__}: {err}"
                continue
            if conn.msgtype == EXECUTED_TYPE:
                steps.setdefault((conn.topic, msg.episode_id), set()).add(int(msg.episode_step))
    for name, topic in sorted(result.topics.items()):
        if topic.read != topic.listed:
            result.problems.append(f"{name}: {topic.read} messages of the {topic.listed} the "
                                   "bag lists; the file is damaged")
        if topic.undecodable:
            result.problems.append(f"{name}: {topic.undecodable} messages do not decode as "
                                   f"{topic.msgtype} ({topic.first_error})")
    for (name, episode), seen in sorted(steps.items()):
        missing = sorted(set(range(min(seen), max(seen) + 1)) - seen)
        if missing:
            result.problems.append(f"{name}: episode {episode} lacks {len(missing)} executed "
                                   f"steps between {min(seen)} and {max(seen)} "
                                   f"({_ranges(missing)})")
    dropped = int(_custom_data(bag).get("rpent.dropped_messages", 0))
    if dropped:
        result.problems.append(f"the recorder dropped {dropped} messages for a full queue; "
                               "record with a larger queue_size or fewer topics")
    return result


def _custom_data(bag: Path) -> dict:
    info = yaml.safe_load((bag / "metadata.yaml").read_text()) or {}
    return info.get("rosbag2_bagfile_information", {}).get("custom_data") or {}


def _ranges(numbers: list) -> str:
    """[3, 4, 5, 9] -> '3-5, 9'."""
    spans, start = [], numbers[0]
    for prev, n in zip(numbers, numbers[1:] + [None]):
        if n != prev + 1:
            spans.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = n
    return ", ".join(spans)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="rpent check-bag",
        description="Check recorded bags: every listed message there and decodable, none "
                    "dropped by the recorder, no executed step missing.")
    parser.add_argument("bags", nargs="+", type=Path, help="bag folders (runs/*/bag)")
    args = parser.parse_args(argv)
    code = 0
    for bag in args.bags:
        try:
            result = check(bag)
        except BagError as err:
            print(f"rpent check-bag: {err}", file=sys.stderr)
            code = 2
            continue
        print(f"{bag}:")
        for name, topic in sorted(result.topics.items()):
            print(f"  {name:<48} {topic.read:>7} / {topic.listed:<7} {topic.msgtype}")
        for problem in result.problems:
            print(f"  PROBLEM {problem}")
        print(f"  {'ok' if not result.problems else f'{len(result.problems)} problem(s)'}")
        if result.problems and code == 0:
            code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
