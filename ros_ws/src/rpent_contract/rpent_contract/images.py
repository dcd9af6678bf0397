"""numpy <-> sensor_msgs Image / CompressedImage without cv_bridge.

cv_bridge is not installable everywhere this runs (PyPI-wheel ROS), and the conversions
the contract needs are small: rgb8, bgr8, mono8 and 16UC1, honouring each row's
``step`` padding and the message's byte order, plus JPEG/PNG CompressedImage.
"""
from __future__ import annotations

import array
import sys

import numpy as np

# encoding -> (numpy dtype, channels)
ENCODINGS = {
    "rgb8": (np.uint8, 3),
    "bgr8": (np.uint8, 3),
    "rgba8": (np.uint8, 4),
    "bgra8": (np.uint8, 4),
    "mono8": (np.uint8, 1),
    "8UC1": (np.uint8, 1),
    "8UC3": (np.uint8, 3),
    "mono16": (np.uint16, 1),
    "16UC1": (np.uint16, 1),
    "32FC1": (np.float32, 1),
}


class ImageConversionError(ValueError):
    """The image cannot be converted; the message says what is wrong with it."""


def _octets(pixels: np.ndarray) -> array.array:
    """A uint8[] field's value: Humble's generated setter checks every byte of ``bytes``
    in Python (63 ms for one 640x480 frame, too slow for a 30 Hz camera) but takes an
    ``array.array('B')`` as is; Jazzy converts to one anyway."""
    return array.array("B", pixels.tobytes())


def _layout(encoding: str):
    try:
        return ENCODINGS[encoding]
    except KeyError:
        raise ImageConversionError(
            f"unsupported image encoding '{encoding}'; supported: {', '.join(ENCODINGS)}"
        ) from None


def image_to_numpy(msg) -> np.ndarray:
    """Return the pixels of a sensor_msgs/Image as an HxW (1 channel) or HxWxC array.

    Row padding (``step`` larger than width * pixel size) is dropped and big-endian data
    is converted to native order. The result never aliases the message buffer.
    """
    dtype, channels = _layout(msg.encoding)
    dtype = np.dtype(dtype)
    if msg.is_bigendian != (sys.byteorder == "big"):
        dtype = dtype.newbyteorder()
    row_bytes = msg.width * channels * dtype.itemsize
    if msg.step < row_bytes:
        raise ImageConversionError(
            f"image step {msg.step} is smaller than width*channels*bytes = {row_bytes}"
        )
    # bytearray, not bytes: the result may be a view of this copy and must be writable.
    buf = np.frombuffer(bytearray(msg.data), dtype=np.uint8)
    if buf.size < msg.step * msg.height:
        raise ImageConversionError(
            f"image data has {buf.size} bytes, expected step*height = {msg.step * msg.height}"
        )
    rows = buf[: msg.step * msg.height].reshape(msg.height, msg.step)[:, :row_bytes]
    pixels = np.ascontiguousarray(rows).view(dtype).reshape(msg.height, msg.width, channels)
    pixels = pixels.astype(dtype.newbyteorder("="), copy=False)
    return pixels[:, :, 0] if channels == 1 else pixels


def numpy_to_image(array: np.ndarray, encoding: str = "rgb8", msg=None):
    """Fill (or create) a sensor_msgs/Image from an HxW or HxWxC array, tightly packed."""
    from sensor_msgs.msg import Image

    dtype, channels = _layout(encoding)
    array = np.asarray(array)
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] != channels:
        raise ImageConversionError(
            f"encoding '{encoding}' needs {channels} channel(s), got array of shape {array.shape}"
        )
    if array.dtype != np.dtype(dtype):
        raise ImageConversionError(
            f"encoding '{encoding}' needs dtype {np.dtype(dtype).name}, got {array.dtype.name}"
        )
    msg = msg if msg is not None else Image()
    msg.height, msg.width = int(array.shape[0]), int(array.shape[1])
    msg.encoding = encoding
    msg.is_bigendian = sys.byteorder == "big"
    msg.step = msg.width * channels * array.dtype.itemsize
    msg.data = _octets(np.ascontiguousarray(array))
    return msg


def to_rgb(array: np.ndarray, encoding: str) -> np.ndarray:
    """Convert pixels decoded with :func:`image_to_numpy` to HxWx3 uint8 RGB."""
    if encoding in ("rgb8", "8UC3"):
        return array
    if encoding == "bgr8":
        return array[:, :, ::-1].copy()
    if encoding == "rgba8":
        return array[:, :, :3].copy()
    if encoding == "bgra8":
        return array[:, :, 2::-1].copy()
    if encoding in ("mono8", "8UC1"):
        return np.repeat(array[:, :, None], 3, axis=2)
    raise ImageConversionError(f"cannot turn '{encoding}' into RGB for a model; send rgb8")


def rgb_to_compressed(rgb: np.ndarray, fmt: str = "jpeg", quality: int = 90, msg=None):
    """Encode HxWx3 uint8 RGB into a sensor_msgs/CompressedImage (jpeg or png)."""
    import cv2
    from sensor_msgs.msg import CompressedImage

    if fmt not in ("jpeg", "png"):
        raise ImageConversionError(f"unsupported compressed format '{fmt}'; use jpeg or png")
    params = [cv2.IMWRITE_JPEG_QUALITY, int(quality)] if fmt == "jpeg" else []
    ok, encoded = cv2.imencode("." + ("jpg" if fmt == "jpeg" else "png"),
                               np.ascontiguousarray(rgb[:, :, ::-1]), params)
    if not ok:
        raise ImageConversionError(f"OpenCV could not encode a {rgb.shape} image as {fmt}")
    msg = msg if msg is not None else CompressedImage()
    msg.format = fmt
    msg.data = _octets(encoded)
    return msg


def compressed_to_rgb(msg) -> np.ndarray:
    """Decode a sensor_msgs/CompressedImage (jpeg/png, colour or mono) to HxWx3 uint8 RGB."""
    import cv2

    try:
        decoded = cv2.imdecode(np.frombuffer(bytes(msg.data), dtype=np.uint8), cv2.IMREAD_COLOR)
    except cv2.error:  # e.g. empty data: OpenCV asserts instead of returning None
        decoded = None
    if decoded is None:
        raise ImageConversionError(
            f"could not decode CompressedImage (format '{msg.format}', {len(msg.data)} bytes)"
        )
    return decoded[:, :, ::-1].copy()


def encode_png(image: np.ndarray) -> str:
    """HxWx3 uint8 RGB (or HxW uint8 mono) -> base64 PNG text, as JSON model servers take."""
    import base64

    import cv2

    image = np.asarray(image)
    mono = image.ndim == 2
    if image.dtype != np.uint8 or not (mono or (image.ndim == 3 and image.shape[2] == 3)):
        raise ImageConversionError(
            f"images must be HxWx3 uint8 RGB or HxW uint8 mono, got {image.dtype} {image.shape}")
    ok, png = cv2.imencode(".png", image if mono else cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    if not ok:
        raise ImageConversionError("PNG encoding failed")
    return base64.b64encode(png.tobytes()).decode("ascii")


def decode_png(text: str, mono: bool = False) -> np.ndarray:
    """base64 PNG text -> HxWx3 uint8 RGB (``mono``: HxW uint8, the first channel)."""
    import base64
    import binascii

    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise ImageConversionError(f"image is not base64: {exc}") from None
    return decode_png_bytes(data, mono)


def decode_png_bytes(data: bytes, mono: bool = False) -> np.ndarray:
    """PNG bytes -> HxWx3 uint8 RGB (``mono``: HxW uint8, the first channel)."""
    import cv2

    buffer = np.frombuffer(data, dtype=np.uint8)
    image = cv2.imdecode(buffer, cv2.IMREAD_UNCHANGED if mono else cv2.IMREAD_COLOR) \
        if buffer.size else None
    if image is None:
        raise ImageConversionError("image is not a decodable PNG")
    if mono:
        return image if image.ndim == 2 else image[:, :, 0]
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
