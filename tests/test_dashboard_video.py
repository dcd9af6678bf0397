"""The agent's episode.mp4 plays in a browser: H.264 ('avc1' sample entry) in yuv420p, the
index (moov) ahead of the media data, every frame there, at the control rate."""
from __future__ import annotations

import struct

import cv2
import numpy as np

from rpent_agent.video import EpisodeVideo

CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl"}


def _boxes(data: bytes, start: int = 0, end: int | None = None):
    """(type, payload start, payload end) of the ISO-BMFF boxes in data[start:end]."""
    pos, end = start, len(data) if end is None else end
    while pos + 8 <= end:
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        header = 8
        if size == 1:
            size, header = struct.unpack(">Q", data[pos + 8:pos + 16])[0], 16
        elif size == 0:
            size = end - pos
        yield kind, pos + header, pos + size
        pos += size


def mp4_layout(path) -> tuple[list[bytes], bytes]:
    """Top-level box order and the first video sample entry type (stsd's first entry)."""
    data = path.read_bytes()
    top = [kind for kind, _, _ in _boxes(data)]

    def sample_entry(start, end):
        for kind, s, e in _boxes(data, start, end):
            if kind == b"stsd":   # version/flags (4) and entry count (4), then entries
                return next(_boxes(data, s + 8, e))[0]
            if kind in CONTAINERS and (found := sample_entry(s, e)):
                return found
        return None

    return top, sample_entry(0, len(data))


def test_episode_video_is_browser_playable_h264(tmp_path):
    video = EpisodeVideo(fps=20)
    for step in range(40):
        agentview = np.zeros((65, 97, 3), np.uint8)          # odd sizes: yuv420p needs even
        agentview[10:30, step:step + 10] = (255, 0, 0)
        wrist = np.full((33, 49, 3), 90, np.uint8)           # another height: scaled to 65
        video.offer(step, {"agentview": agentview, "wrist": wrist}, step / 20)
        video.offer(step, {"agentview": agentview, "wrist": wrist}, step / 20)  # one frame
    out = video.write(tmp_path / "episode.mp4")

    top, entry = mp4_layout(out)
    assert entry == b"avc1", f"sample entry {entry!r}: not H.264, browsers will not play it"
    assert top.index(b"moov") < top.index(b"mdat"), f"index after the data ({top}): a " \
        "browser must download the whole file before it can start playing"
    cap = cv2.VideoCapture(str(out))
    try:
        assert cap.get(cv2.CAP_PROP_FPS) == 20
        frames = []
        while (ok := cap.read())[0]:
            frames.append(ok[1])
    finally:
        cap.release()
    assert len(frames) == 40
    assert frames[0].shape[0] % 2 == 0 and frames[0].shape[0] >= 65
    assert frames[0][20, 5, 2] > 180 and frames[0][20, 5, 0] < 80   # red survives (BGR)
