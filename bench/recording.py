"""Recording: a LIBERO robot (2 cameras of 256x256 or --image-size, 20 Hz) recorded by the
recorder node for a while, stopped with SIGINT, as `record:=true` records (no depth), then with
`record_depth:=true`, then with `record_image_rate:=5`; prints per-topic counts against the
robot's rate, messages the recorder dropped, bag size per minute and write throughput.

    source scripts/env.sh && python bench/recording.py [--seconds 30] [--image-size 128]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml

from rpent import bringup
from rpent.bringup import recorder as recorder_spec
from rpent_common.processes import wait_until
from rpent_testkit.processes import NodeProcess, isolate_ros_graph


# What each bring-up setting starts (the rpent_bag recorder, as without rosbag2).
VARIANTS = {"record:=true": {},
            "record_depth:=true": {"depth": True},
            "record_image_rate:=5": {"record_image_rate": 5.0}}


def record(tmp: Path, seconds: float, variant: str, size: int) -> None:
    bag = tmp / "bag"
    spec = recorder_spec("", str(bag), **VARIANTS[variant])
    robot = NodeProcess("rpent_env_sim", "libero_node",
                        {"image_height": size, "image_width": size}, tmp, name="bench_robot")
    recorder = NodeProcess(spec.package, spec.executable, spec.parameters, tmp,
                           name="bench_recorder", params_file=spec.params_files[0])
    try:
        wait_until(lambda: "recording /camera/robot0_eye_in_hand/image_raw [" in
                   recorder.log_tail(100), 180, what="the recorder to subscribe")
        time.sleep(seconds)
        t = time.monotonic()
        recorder.stop()
        close_s = time.monotonic() - t
    finally:
        robot.stop()
        recorder.stop()
    meta = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    duration = meta["duration"]["nanoseconds"] / 1e9
    size = sum(f.stat().st_size for f in bag.iterdir())
    print(f"{variant}: recorded {duration:.1f} s, "
          f"{meta['message_count']} messages, {size / 1e6:.0f} MB "
          f"({size / 1e6 / duration * 60:.0f} MB/min, {size / 1e6 / duration:.1f} MB/s), "
          f"dropped {meta['custom_data']['rpent.dropped_messages']}, "
          f"SIGINT to closed bag {close_s:.2f} s", flush=True)
    for t in sorted(meta["topics_with_message_count"], key=lambda x: x["topic_metadata"]["name"]):
        n = t["message_count"]
        print(f"  {t['topic_metadata']['name']:44s} {n:6d}  {n / duration:5.1f} Hz")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--image-size", type=int, default=256, help="camera width and height")
    args = parser.parse_args()
    isolate_ros_graph()
    bringup._have_rosbag2_mcap = lambda: False  # what is measured is this recorder
    for variant in VARIANTS:
        with tempfile.TemporaryDirectory() as tmp:
            record(Path(tmp), args.seconds, variant, args.image_size)


if __name__ == "__main__":
    main()
