"""Dataset export speed: rpent export-dataset over a 10-episode bag set, as PNG frames and as
video, in frames per second.

The bag set: two LIBERO episodes (libero_object task 0, the scripted expert through
ChunkExecutor, as tests/test_export_dataset.py records them) recorded once into one bag,
then copied into ``--copies`` bag folders (5 x 2 = 10 episodes). Recording is not timed.

    source scripts/env.sh && python bench/export_dataset.py [--copies 5]
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from dataset_bags import Episode, record_episodes  # noqa: E402
from rpent.export_dataset import ExportConfig, export  # noqa: E402
from rpent_testkit.processes import NodeProcess, isolate_ros_graph  # noqa: E402


def record(folder: Path) -> Path:
    import rclpy

    isolate_ros_graph()
    rclpy.init()
    folder.mkdir()
    started = []

    def start(package, executable, params, name):
        started.append(NodeProcess(package, executable, params, folder, name=name))
        return started[-1]

    try:
        record_episodes(start, folder / "bag", [Episode(400, 0), Episode(400, 1)])
    finally:
        for proc in started:
            proc.stop()
        rclpy.try_shutdown()
    return folder / "bag"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--copies", type=int, default=5, help="bag folders (2 episodes each)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t = time.monotonic()
        bag = record(tmp / "recording")
        print(f"recorded 2 episodes in {time.monotonic() - t:.0f} s")
        bags = tuple(Path(shutil.copytree(bag, tmp / f"bag{i}")) for i in range(args.copies))
        size = sum(f.stat().st_size for b in bags for f in b.iterdir()) / 1e6
        for images in ("png", "video"):
            summary = export(ExportConfig(bags, tmp / f"dataset_{images}", images=images),
                             lambda line: None)
            print(f"{images:5s}: {summary.episodes} episodes, {summary.frames} frames from "
                  f"{len(bags)} bags ({size:.0f} MB) in {summary.seconds:.1f} s = "
                  f"{summary.frames_per_second:.0f} frames/s")


if __name__ == "__main__":
    main()
