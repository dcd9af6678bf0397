"""What filling a sensor_msgs/Image costs when message fields are checked, as Humble always
checks ``uint8[]`` fields and Jazzy does with ROS_PYTHON_CHECK_FIELDS=1: ``bytes`` are
checked byte by byte in Python, the ``array.array('B')`` that rpent_contract.images assigns
is taken as is.

source scripts/env.sh && python bench/image_fields.py
"""
from __future__ import annotations

import os
import time

# Read by the generated message modules when they are first imported.
os.environ["ROS_PYTHON_CHECK_FIELDS"] = "1"

import numpy as np  # noqa: E402
from sensor_msgs.msg import Image  # noqa: E402

from rpent_contract.images import numpy_to_image  # noqa: E402

SIZES = {"128x128 rgb8 (LIBERO camera)": (128, 128), "640x480 rgb8 (USB camera)": (480, 640)}


def per_frame_ms(fill, repeats: int) -> float:
    fill()
    start = time.perf_counter()
    for _ in range(repeats):
        fill()
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    print("| frame | bytes assigned, ms | numpy_to_image, ms | 30 Hz budget used by bytes |")
    print("|---|---|---|---|")
    for label, (height, width) in SIZES.items():
        pixels = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
        repeats = 20 if width > 200 else 200

        def as_bytes():
            msg = Image(height=height, width=width, encoding="rgb8", step=width * 3)
            msg.data = pixels.tobytes()

        slow = per_frame_ms(as_bytes, repeats)
        fast = per_frame_ms(lambda: numpy_to_image(pixels, "rgb8"), repeats)
        print(f"| {label} | {slow:.2f} | {fast:.3f} | {slow / (1000 / 30):.0%} |")


if __name__ == "__main__":
    main()
