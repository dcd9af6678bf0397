"""Recording at full rate: a LIBERO robot (2 cameras at 256x256, 20 Hz) recorded by the
recorder node for a while, stopped with SIGINT; prints per-topic counts against the
robot's rate, messages the recorder dropped, bag size and write throughput.

    source scripts/env.sh && python bench/recording.py [--seconds 30]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml

from rpent_contract.processes import NodeProcess, isolate_ros_graph, wait_until


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    isolate_ros_graph()
    with tempfile.TemporaryDirectory() as tmp:
        bag = Path(tmp) / "bag"
        robot = NodeProcess("rpent_env_sim", "libero_node",
                            {"image_height": 256, "image_width": 256}, tmp, name="bench_robot")
        recorder = NodeProcess("rpent_bag", "recorder", {"bag_path": str(bag)}, tmp,
                               name="bench_recorder")
        try:
            wait_until(lambda: "recording /camera/robot0_eye_in_hand/image_raw [" in
                       recorder.log_tail(100), 180, what="the recorder to subscribe")
            time.sleep(args.seconds)
            t = time.monotonic()
            recorder.stop()
            close_s = time.monotonic() - t
        finally:
            robot.stop()
            recorder.stop()
        meta = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
        duration = meta["duration"]["nanoseconds"] / 1e9
        size = sum(f.stat().st_size for f in bag.iterdir())
        print(f"recorded {duration:.1f} s, {meta['message_count']} messages, "
              f"{size / 1e6:.0f} MB ({size / 1e6 / duration:.1f} MB/s), "
              f"dropped {meta['custom_data']['rpent.dropped_messages']}, "
              f"SIGINT to closed bag {close_s:.2f} s")
        for t in sorted(meta["topics_with_message_count"], key=lambda x: x["topic_metadata"]["name"]):
            n = t["message_count"]
            print(f"  {t['topic_metadata']['name']:44s} {n:6d}  {n / duration:5.1f} Hz")


if __name__ == "__main__":
    main()
