"""Export a camera topic of a recorded run to MP4.

    ros2 run rpent_bag export_video runs/<time>/bag --topic /camera/agentview/image_raw -o agentview.mp4

Frames are decoded from the bag's own definitions (sensor_msgs/Image in any encoding
rpent_contract.images reads, or CompressedImage) and written at the recorded frame rate
(median frame interval) as H.264 (see :func:`write_mp4`, also used for the agent's
episode.mp4).
"""
from __future__ import annotations

import argparse
import sys
from fractions import Fraction
from pathlib import Path
from typing import Iterable, Optional

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
            yield stamp, image_rgb(conn.msgtype, store.deserialize_cdr(data, conn.msgtype))


def image_rgb(msgtype: str, msg) -> np.ndarray:
    """HxWx3 uint8 RGB of a deserialized sensor_msgs/Image or CompressedImage."""
    if msgtype.endswith("CompressedImage"):
        return compressed_to_rgb(msg)
    return to_rgb(image_to_numpy(msg), msg.encoding)


def recorded_fps(stamps: list[int]) -> float:
    if len(stamps) < 2:
        return 1.0
    interval = float(np.median(np.diff(stamps))) / 1e9
    return 1.0 / interval if interval > 0 else 1.0


def write_mp4(path: Path | str, frames: Iterable[np.ndarray], fps: float) -> int:
    """Write HxWx3 uint8 RGB frames, all of one size, to an MP4; return the frame count.

    H.264 in yuv420p with the index at the front (faststart) is the one combination every
    browser's <video> plays; OpenCV's pip wheels cannot encode H.264 (their FFmpeg has no
    H.264 encoder), PyAV's wheels bundle libx264. yuv420p needs even sizes: an odd row or
    column is padded black.
    """
    try:
        import av
    except ImportError:
        raise RuntimeError("writing MP4 video needs PyAV: pip install av (or make setup)") \
            from None
    path = Path(path)
    count = 0
    with av.open(str(path), "w", format="mp4", options={"movflags": "+faststart"}) as out:
        stream = None
        for rgb in frames:
            if stream is None:
                h, w = rgb.shape[:2]
                stream = out.add_stream("libx264", rate=Fraction(fps).limit_denominator(1001))
                stream.width, stream.height = w + w % 2, h + h % 2
                stream.pix_fmt = "yuv420p"
            elif rgb.shape[:2] != (h, w):
                raise ImageConversionError(f"frame {count} is {rgb.shape[1]}x{rgb.shape[0]}, "
                                           f"the first was {w}x{h}; all frames of a video "
                                           f"must have one size")
            padded = np.pad(rgb, ((0, h % 2), (0, w % 2), (0, 0)))
            out.mux(stream.encode(av.VideoFrame.from_ndarray(padded, format="rgb24")))
            count += 1
        if stream is not None:
            out.mux(stream.encode())
    return count


def export(bag_path, topic: str, out: Path | str, fps: Optional[float] = None) -> dict:
    """Write the topic's frames to ``out``; return frames, fps and size."""
    out = Path(out)
    collected = list(frames(bag_path, topic))
    if not collected:
        raise bagfile.BagError(f"{topic} has no messages in {bag_path}")
    fps = fps or recorded_fps([s for s, _ in collected])
    h, w = collected[0][1].shape[:2]
    out.parent.mkdir(parents=True, exist_ok=True)
    write_mp4(out, (rgb for _, rgb in collected), fps)
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
