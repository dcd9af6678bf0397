"""The Feetech bus emulator at the packet level and the SO-101 kinematics (no ROS)."""
from __future__ import annotations

import os
import select
import time

import numpy as np
import pytest

from rpent_common.processes import wait_until
from rpent_twins.feetech_emulator import FeetechBusEmulator, _checksum, so101_calibration


@pytest.fixture
def bus():
    with FeetechBusEmulator(so101_calibration(), {"elbow_flex": -20.0}) as emulator:
        fd = os.open(emulator.port, os.O_RDWR | os.O_NOCTTY)
        try:
            yield emulator, fd
        finally:
            os.close(fd)


def _packet(sid, inst, params=b""):
    body = bytes([sid, len(params) + 2, inst]) + bytes(params)
    return b"\xff\xff" + body + bytes([_checksum(body)])


def _reply(fd, size, timeout=1.0):
    data, deadline = b"", time.monotonic() + timeout
    while len(data) < size and time.monotonic() < deadline:
        if select.select([fd], [], [], 0.05)[0]:
            data += os.read(fd, size - len(data))
    return data


def test_read_answers_with_a_checksummed_status_packet(bus):
    emulator, fd = bus
    os.write(fd, _packet(3, 0x02, [3, 2]))  # READ Model_Number
    reply = _reply(fd, 8)
    assert reply[:5] == bytes([0xFF, 0xFF, 3, 4, 0])
    assert int.from_bytes(reply[5:7], "little") == 777
    assert reply[7] == _checksum(reply[2:7])


def test_bad_checksum_and_silenced_servo_get_no_answer(bus):
    emulator, fd = bus
    bad = bytearray(_packet(1, 0x01))
    bad[-1] ^= 0xFF
    os.write(fd, bytes(bad))
    assert _reply(fd, 6, timeout=0.2) == b""
    emulator.silence(["shoulder_pan"])
    os.write(fd, _packet(1, 0x01))
    assert _reply(fd, 6, timeout=0.2) == b""
    emulator.restore()
    os.write(fd, _packet(1, 0x01))
    assert len(_reply(fd, 6)) == 6


def test_sync_write_moves_servos_toward_goal_and_sync_read_reports_it(bus):
    emulator, fd = bus
    os.write(fd, _packet(3, 0x03, [40, 1]))  # torque on: holds the present position
    assert len(_reply(fd, 6)) == 6
    start = emulator.present_steps("elbow_flex")
    goal = start + 300
    os.write(fd, _packet(0xFE, 0x83, [42, 2, 3, goal & 0xFF, goal >> 8]))  # SYNC_WRITE
    # The broadcast gets no answer: the servo reaching its goal is what says it was taken.
    wait_until(lambda: emulator.present_steps("elbow_flex") == goal, 5,
               what="elbow_flex reaching its goal")
    os.write(fd, _packet(0xFE, 0x82, [56, 2, 1, 3]))  # SYNC_READ servos 1 and 3
    reply = _reply(fd, 16)
    assert len(reply) == 16 and reply[2] == 1 and reply[10] == 3
    assert int.from_bytes(reply[13:15], "little") == goal
    assert emulator.present_steps("elbow_flex") == goal


def test_forward_and_inverse_kinematics_agree():
    from rpent_hw.so101.kinematics import SO101Kinematics

    kin = SO101Kinematics()
    q = np.radians([10.0, -25.0, 35.0, 50.0, 15.0])
    position, quat = kin.forward(q)
    assert np.linalg.norm(quat) == pytest.approx(1.0)
    solved, pos_err, rot_err = kin.inverse(position, quat, np.radians([0, -30, 30, 60, 0]))
    assert pos_err < 1e-6 and rot_err < 1e-3
    np.testing.assert_allclose(kin.forward(solved)[0], position, atol=1e-6)
