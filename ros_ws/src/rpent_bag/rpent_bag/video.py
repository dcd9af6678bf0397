"""Export a camera topic of a recorded run to MP4.

    ros2 run rpent_bag export_video runs/<time>/bag --topic /camera/agentview/image_raw -o agentview.mp4

Frames are decoded from the bag's own definitions (sensor_msgs/Image in any encoding
rpent_contract.images reads, or CompressedImage) and written at the recorded frame rate
(median frame interval) with ffmpeg (H.264, yuv420p: plays in browsers), or with OpenCV's
MPEG-4 writer where ffmpeg is not installed.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import numpy as np

from rpent_bag import bagfile
from rpent_contract.images import ImageConversionError, compressed_to_rgb, image_to_numpy, to_rgb


def frames(bag_path, topic: str):
    """(timestamp_ns, HxWx3 uint8 RGB) of every image on ``topic``."""
    with bagfile.open_reader(bag_path) as reader:
        conns = bagfile.select(reader, [topic])
        kinds = {c.msgtype for c in conns}
        if not kinds <= {"sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage"}:
            raise bagfile.BagError(f"{topic} carries {sorted(kinds)}, not sensor_msgs/Image or "
                                   f"CompressedImage; pick a camera topic")
        store = bagfile.typestore(conns)
        for conn, stamp, data in bagfile.messages(reader, conns):
            msg = store.deserialize_cdr(data, conn.msgtype)
            if conn.msgtype.endswith("CompressedImage"):
                yield stamp, compressed_to_rgb(msg)
            else:
                yield stamp, to_rgb(image_to_numpy(msg), msg.encoding)


def recorded_fps(stamps: list[int]) -> float:
    if len(stamps) < 2:
        return 1.0
    interval = float(np.median(np.diff(stamps))) / 1e9
    return 1.0 / interval if interval > 0 else 1.0


def export(bag_path, topic: str, out: Path | str, fps: Optional[float] = None) -> dict:
    """Write the topic's frames to ``out``; return frames, fps and size."""
    out = Path(out)
    collected = list(frames(bag_path, topic))
    if not collected:
        raise bagfile.BagError(f"{topic} has no messages in {bag_path}")
    stamps = [s for s, _ in collected]
    fps = fps or recorded_fps(stamps)
    h, w = collected[0][1].shape[:2]
    out.parent.mkdir(parents=True, exist_ok=True)
    if shutil.which("ffmpeg"):
        cmd = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-y",
               "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}", "-r", f"{fps:.6f}",
               "-i", "-", "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2",
               "-c:v", "libx264", "-pix_fmt", "yuv420p", "-movflags", "+faststart", str(out)]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        for _, rgb in collected:
            if rgb.shape[:2] != (h, w):
                proc.kill()
                raise ImageConversionError(f"frame size changed from {w}x{h} to "
                                           f"{rgb.shape[1]}x{rgb.shape[0]} within {topic}")
            proc.stdin.write(np.ascontiguousarray(rgb).tobytes())
        _, err = proc.communicate(timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"ffmpeg failed ({proc.returncode}): {err.decode(errors='replace')}")
    else:
        import cv2

        writer = cv2.VideoWriter(str(out), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
        if not writer.isOpened():
            raise RuntimeError(f"OpenCV cannot write {out}; install ffmpeg")
        for _, rgb in collected:
            writer.write(np.ascontiguousarray(rgb[:, :, ::-1]))
        writer.release()
    return {"frames": len(collected), "fps": fps, "width": w, "height": h, "path": str(out)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bag", help="rosbag2 directory (contains metadata.yaml)")
    parser.add_argument("--topic", required=True, help="camera topic, e.g. /camera/agentview/image_raw")
    parser.add_argument("-o", "--output", required=True, help="MP4 file to write")
    parser.add_argument("--fps", type=float, help="frame rate (default: the recorded rate)")
    args = parser.parse_args(argv)
    try:
        info = export(args.bag, args.topic, args.output, args.fps)
    except (bagfile.BagError, ImageConversionError, RuntimeError) as err:
        print(f"[export_video] {err}", file=sys.stderr)
        return 2
    print(f"wrote {info['frames']} frames {info['width']}x{info['height']} "
          f"at {info['fps']:.2f} fps to {info['path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
