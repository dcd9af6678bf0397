"""numpy <-> sensor_msgs Image / CompressedImage conversions (rpent_contract.images)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sensor_msgs.msg import CompressedImage, Image  # noqa: E402

from rpent_contract.images import (  # noqa: E402
    ImageConversionError,
    compressed_to_rgb,
    image_to_numpy,
    numpy_to_image,
    rgb_to_compressed,
    to_rgb,
)

RNG = np.random.default_rng(1234)


def _random(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


def _raw_image(height, width, encoding, step, data, is_bigendian=0):
    msg = Image()
    msg.height, msg.width = height, width
    msg.encoding = encoding
    msg.step = step
    msg.is_bigendian = is_bigendian
    msg.data = bytes(data)
    return msg


# ---------------------------------------------------------------- raw round trips


@pytest.mark.parametrize(
    "encoding, shape, dtype",
    [
        ("rgb8", (5, 7, 3), np.uint8),
        ("bgr8", (4, 6, 3), np.uint8),
        ("mono8", (3, 9), np.uint8),
        ("16UC1", (6, 5), np.uint16),
    ],
)
def test_round_trip_preserves_pixels_and_dtype(encoding, shape, dtype):
    array = _random(shape, dtype)
    msg = numpy_to_image(array, encoding)
    assert isinstance(msg, Image)
    assert (msg.height, msg.width) == shape[:2]
    assert msg.encoding == encoding
    assert msg.step == shape[1] * (shape[2] if len(shape) == 3 else 1) * np.dtype(dtype).itemsize
    assert len(msg.data) == msg.step * msg.height
    out = image_to_numpy(msg)
    assert out.dtype == np.dtype(dtype)
    assert out.shape == shape
    np.testing.assert_array_equal(out, array)


def test_16uc1_round_trip_keeps_values_above_255():
    array = np.array([[0, 255, 256], [1000, 40000, 65535]], dtype=np.uint16)
    out = image_to_numpy(numpy_to_image(array, "16UC1"))
    np.testing.assert_array_equal(out, array)
    assert out.dtype == np.uint16


def test_decoded_array_is_writable_and_does_not_alias_the_message():
    # Tightly packed (no padding copy) is the case that used to come back read-only.
    array = _random((2, 3, 3), np.uint8)
    msg = numpy_to_image(array, "rgb8")
    out = image_to_numpy(msg)
    assert out.flags.writeable
    out[:] = 0
    np.testing.assert_array_equal(image_to_numpy(msg), array)


def test_numpy_to_image_fills_a_given_message():
    msg = Image()
    returned = numpy_to_image(np.zeros((2, 2), np.uint8), "mono8", msg=msg)
    assert returned is msg
    assert (msg.height, msg.width, msg.step) == (2, 2, 2)


def test_numpy_to_image_rejects_wrong_channels_and_dtype():
    with pytest.raises(ImageConversionError, match="channel"):
        numpy_to_image(np.zeros((2, 2, 3), np.uint8), "mono8")
    with pytest.raises(ImageConversionError, match="dtype"):
        numpy_to_image(np.zeros((2, 2), np.uint16), "mono8")
    with pytest.raises(ImageConversionError, match="unsupported image encoding 'yuv422'"):
        numpy_to_image(np.zeros((2, 2), np.uint8), "yuv422")


# ---------------------------------------------------------------- step padding


def test_row_padding_is_dropped_rgb8():
    height, width, pad = 3, 4, 5
    pixels = _random((height, width, 3), np.uint8)
    rows = [pixels[r].tobytes() + bytes([0xAB, 0xCD, 0xEF, 0x12, 0x34]) for r in range(height)]
    step = width * 3 + pad
    msg = _raw_image(height, width, "rgb8", step, b"".join(rows))
    out = image_to_numpy(msg)
    assert out.shape == (height, width, 3)
    np.testing.assert_array_equal(out, pixels)


def test_row_padding_is_dropped_16uc1():
    height, width, pad = 4, 3, 2
    pixels = _random((height, width), np.uint16)
    little = pixels.astype("<u2")
    rows = [little[r].tobytes() + bytes([0xFF] * pad) for r in range(height)]
    msg = _raw_image(height, width, "16UC1", width * 2 + pad, b"".join(rows), is_bigendian=0)
    out = image_to_numpy(msg)
    assert out.dtype == np.uint16
    np.testing.assert_array_equal(out, pixels)


def test_trailing_bytes_after_last_row_are_ignored():
    pixels = _random((2, 3), np.uint8)
    msg = _raw_image(2, 3, "mono8", 3, pixels.tobytes() + b"\x99\x99")
    np.testing.assert_array_equal(image_to_numpy(msg), pixels)


# ---------------------------------------------------------------- byte order


def test_big_endian_16uc1_decodes_to_the_right_values():
    pixels = np.array([[1, 256, 0x1234], [0xABCD, 65535, 2]], dtype=np.uint16)
    data = pixels.astype(">u2").tobytes()
    assert data[:2] == b"\x00\x01"  # really big-endian on the wire
    msg = _raw_image(2, 3, "16UC1", 6, data, is_bigendian=1)
    out = image_to_numpy(msg)
    np.testing.assert_array_equal(out, pixels)
    assert out.dtype == np.uint16
    assert out.dtype.byteorder in ("=", "|") or out.dtype.isnative


def test_big_endian_16uc1_with_padding():
    pixels = np.array([[0x0102, 0x0304], [0x0506, 0xFFFE]], dtype=np.uint16)
    rows = [pixels[r].astype(">u2").tobytes() + b"\x77\x77\x77" for r in range(2)]
    msg = _raw_image(2, 2, "16UC1", 7, b"".join(rows), is_bigendian=1)
    np.testing.assert_array_equal(image_to_numpy(msg), pixels)


def test_little_endian_flag_is_honoured():
    pixels = np.array([[0x0102]], dtype=np.uint16)
    msg = _raw_image(1, 1, "16UC1", 2, b"\x02\x01", is_bigendian=0)
    np.testing.assert_array_equal(image_to_numpy(msg), pixels)
    msg_be = _raw_image(1, 1, "16UC1", 2, b"\x02\x01", is_bigendian=1)
    np.testing.assert_array_equal(image_to_numpy(msg_be), np.array([[0x0201]], np.uint16))


# ---------------------------------------------------------------- to_rgb


def test_to_rgb_swaps_bgr_channels():
    bgr = _random((3, 4, 3), np.uint8)
    rgb = to_rgb(bgr, "bgr8")
    np.testing.assert_array_equal(rgb[:, :, 0], bgr[:, :, 2])
    np.testing.assert_array_equal(rgb[:, :, 1], bgr[:, :, 1])
    np.testing.assert_array_equal(rgb[:, :, 2], bgr[:, :, 0])
    assert rgb.flags["C_CONTIGUOUS"]


def test_to_rgb_after_decoding_a_bgr8_message():
    rgb = _random((2, 2, 3), np.uint8)
    msg = numpy_to_image(rgb[:, :, ::-1].copy(), "bgr8")
    np.testing.assert_array_equal(to_rgb(image_to_numpy(msg), msg.encoding), rgb)


def test_to_rgb_rgb8_unchanged_and_mono_replicated():
    rgb = _random((2, 3, 3), np.uint8)
    np.testing.assert_array_equal(to_rgb(rgb, "rgb8"), rgb)
    mono = _random((2, 3), np.uint8)
    out = to_rgb(mono, "mono8")
    assert out.shape == (2, 3, 3)
    for c in range(3):
        np.testing.assert_array_equal(out[:, :, c], mono)


def test_to_rgb_rgba_and_bgra_drop_alpha():
    rgba = _random((2, 2, 4), np.uint8)
    np.testing.assert_array_equal(to_rgb(rgba, "rgba8"), rgba[:, :, :3])
    bgra = rgba
    expected = np.stack([bgra[:, :, 2], bgra[:, :, 1], bgra[:, :, 0]], axis=2)
    np.testing.assert_array_equal(to_rgb(bgra, "bgra8"), expected)


def test_to_rgb_refuses_depth():
    with pytest.raises(ImageConversionError, match="16UC1"):
        to_rgb(np.zeros((2, 2), np.uint16), "16UC1")


# ---------------------------------------------------------------- malformed messages


def test_too_short_data_raises():
    msg = _raw_image(4, 4, "rgb8", 12, bytes(12 * 4 - 1))
    with pytest.raises(ImageConversionError, match=r"47 bytes.*expected step\*height = 48"):
        image_to_numpy(msg)


def test_step_smaller_than_row_raises():
    msg = _raw_image(2, 4, "rgb8", 11, bytes(11 * 2))
    with pytest.raises(ImageConversionError, match=r"step 11 is smaller .* 12"):
        image_to_numpy(msg)


def test_step_smaller_than_row_16bit_counts_bytes():
    # 3 pixels of 16UC1 are 6 bytes; a step of 3 (pixels, not bytes) is wrong.
    msg = _raw_image(1, 3, "16UC1", 3, bytes(6))
    with pytest.raises(ImageConversionError, match="step 3"):
        image_to_numpy(msg)


def test_unknown_encoding_raises_naming_it():
    msg = _raw_image(1, 1, "yuv422", 2, bytes(2))
    with pytest.raises(ImageConversionError, match="unsupported image encoding 'yuv422'") as info:
        image_to_numpy(msg)
    assert "rgb8" in str(info.value)  # lists what is supported
    assert isinstance(info.value, ValueError)


# ---------------------------------------------------------------- compressed


def _smooth_rgb(height=48, width=64):
    y, x = np.mgrid[0:height, 0:width]
    return np.stack(
        [(x * 255 // (width - 1)), (y * 255 // (height - 1)), ((x + y) * 2) % 256], axis=2
    ).astype(np.uint8)


def test_jpeg_round_trip_is_close():
    rgb = _smooth_rgb()
    msg = rgb_to_compressed(rgb, "jpeg", quality=95)
    assert isinstance(msg, CompressedImage)
    assert msg.format == "jpeg"
    assert bytes(msg.data[:2]) == b"\xff\xd8"  # JPEG SOI marker
    out = compressed_to_rgb(msg)
    assert out.shape == rgb.shape and out.dtype == np.uint8
    err = np.abs(out.astype(int) - rgb.astype(int)).mean(axis=(0, 1))
    assert np.all(err < 6), err  # per channel: a channel swap would give tens


def test_jpeg_keeps_channel_order():
    rgb = np.zeros((16, 16, 3), np.uint8)
    rgb[:, :, 0] = 220  # pure-ish red
    out = compressed_to_rgb(rgb_to_compressed(rgb, "jpeg"))
    assert out[:, :, 0].mean() > 200 and out[:, :, 2].mean() < 30


def test_png_round_trip_is_exact():
    rgb = _random((13, 17, 3), np.uint8)
    msg = rgb_to_compressed(rgb, "png")
    assert msg.format == "png"
    assert bytes(msg.data[:8]) == b"\x89PNG\r\n\x1a\n"
    np.testing.assert_array_equal(compressed_to_rgb(msg), rgb)


def test_unsupported_compressed_format_raises():
    with pytest.raises(ImageConversionError, match="'bmp'"):
        rgb_to_compressed(np.zeros((2, 2, 3), np.uint8), "bmp")


def test_garbage_compressed_image_raises():
    msg = CompressedImage()
    msg.format = "jpeg"
    msg.data = bytes(RNG.integers(0, 256, size=200, dtype=np.uint8))
    with pytest.raises(ImageConversionError, match=r"could not decode.*'jpeg'.*200 bytes"):
        compressed_to_rgb(msg)


def test_empty_compressed_image_raises_conversion_error():
    msg = CompressedImage()
    msg.format = "jpeg"
    with pytest.raises(ImageConversionError, match="0 bytes"):
        compressed_to_rgb(msg)
