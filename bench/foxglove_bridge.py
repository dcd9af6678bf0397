"""Foxglove bridge throughput and latency: a LIBERO robot (2 cameras at 256x256, joint
states, 20 Hz) -> bridge -> a Foxglove WebSocket client on loopback.

    source scripts/env.sh && python bench/foxglove_bridge.py [--seconds 15]

Latency is client arrival time minus the robot's header stamp (same clock: one machine),
so it covers DDS, the bridge and the WebSocket. Dropped = frames the robot stamped (20 Hz
grid between the first and last stamp seen) that never reached the client. Runs raw CDR
images and JPEG CompressedImage on the SDK's port (foxglove.sdk.v1), then raw CDR images on
the foxglove.websocket.v1 port (legacy_port) with a client that offers only that protocol.
"""
from __future__ import annotations

import argparse
import asyncio
import re
import struct
import tempfile

import numpy as np

from rpent_common.processes import wait_until
from rpent_foxglove.client import FoxgloveClient
from rpent_testkit.processes import NodeProcess, isolate_ros_graph

CAMS = ["agentview", "robot0_eye_in_hand"]
RATE = 20.0


def header_stamp(cdr: bytes) -> float:
    sec, nsec = struct.unpack_from("<iI", cdr, 4)   # after the 4-byte CDR encapsulation
    return sec + nsec * 1e-9


async def measure(url: str, topics: list[str], seconds: float, subprotocols: list) -> dict:
    async with FoxgloveClient(url, subprotocols=subprotocols) as client:
        await client.wait_for_topics(topics, 60)
        await client.subscribe(topics)
        await client.collect(2.0)   # warm-up
        msgs = await client.collect(seconds)
    out = {}
    for t in topics:
        ms = [m for m in msgs if m.topic == t]
        if not ms:
            out[t] = None
            continue
        stamps = sorted({header_stamp(m.data) for m in ms})
        expected = int(round((stamps[-1] - stamps[0]) * RATE)) + 1
        lat = np.array([m.received - header_stamp(m.data) for m in ms]) * 1e3
        out[t] = dict(n=len(ms), hz=len(ms) / seconds, mbps=sum(len(m.data) for m in ms) / seconds / 1e6,
                      p50=np.percentile(lat, 50), p99=np.percentile(lat, 99),
                      dropped=max(0, expected - len(stamps)), expected=expected)
    return out


def run(seconds: float, jpeg: bool, logs: str, v1: bool = False) -> dict:
    bridge = NodeProcess("rpent_foxglove", "bridge", {
        "port": 0, "stats_period": 0.0, "legacy_port": 0 if v1 else -1,
        "jpeg_topics": ["camera/*/image_raw"] if jpeg else [""]}, logs,
        name=f"bench_bridge_{int(jpeg)}_{int(v1)}")
    try:
        listening = r"ws://127\.0\.0\.1:(\d+)" + (
            r" \(foxglove\.sdk\.v1\) and ws://127\.0\.0\.1:(\d+)" if v1 else "")
        port = wait_until(lambda: (m := re.search(listening, bridge.log_tail(200)))
                          and int(m.group(2 if v1 else 1)), 60, what="the bridge")
        suffix = "/compressed" if jpeg else ""
        topics = [f"/camera/{c}/image_raw{suffix}" for c in CAMS] + ["/joint_states"]
        subprotocols = ["foxglove.websocket.v1"] if v1 else ["foxglove.sdk.v1"]
        return asyncio.run(measure(f"ws://127.0.0.1:{port}", topics, seconds, subprotocols))
    finally:
        bridge.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    isolate_ros_graph()
    with tempfile.TemporaryDirectory() as logs:
        robot = NodeProcess("rpent_env_sim", "libero_node",
                            {"image_height": 256, "image_width": 256, "cameras": CAMS}, logs,
                            name="bench_robot")
        try:
            wait_until(lambda: "ready" in robot.log_tail(), 180, what="the robot")
            for jpeg, v1 in ((False, False), (True, False), (False, True)):
                figures = run(args.seconds, jpeg, logs, v1)
                print(f"\n{'JPEG CompressedImage' if jpeg else 'raw CDR Image'} on "
                      f"{'foxglove.websocket.v1' if v1 else 'foxglove.sdk.v1'} "
                      f"({args.seconds:g} s, robot at {RATE:g} Hz):")
                for topic, f in figures.items():
                    if f is None:
                        print(f"  {topic:48s} no messages")
                        continue
                    print(f"  {topic:48s} {f['hz']:5.1f} Hz {f['mbps']:6.2f} MB/s  "
                          f"latency p50 {f['p50']:6.1f} ms p99 {f['p99']:6.1f} ms  "
                          f"dropped {f['dropped']}/{f['expected']}")
        finally:
            robot.stop()


if __name__ == "__main__":
    main()
