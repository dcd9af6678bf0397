"""A Feetech STS servo bus on a pseudo-terminal: the SO-101's six STS3215 servos, emulated
at the protocol level so the unmodified LeRobot ``SO101Follower`` / ``FeetechMotorsBus``
(and Feetech's ``scservo_sdk`` under it) connect, check calibration, read and write.

    python -m rpent_twins.feetech_emulator --calibration-dir /tmp/cal --robot-id emu
    # prints the port (/dev/pts/N) to give the node as `port`

What it speaks (Feetech protocol 0, as scservo_sdk sends it): packets
``FF FF id len instruction params... checksum`` with ``checksum = ~(id + len + ... ) & 0xFF``;
PING (also broadcast), READ, WRITE, REG_WRITE / ACTION, SYNC_READ and SYNC_WRITE. A packet
with a bad checksum or for another id is ignored, as a servo would. Each servo has the STS
control table LeRobot uses (EEPROM writes honoured only while ``Lock`` is 0), status packets
follow ``Response_Status_Level``, and multi-byte values are little-endian with Feetech's
sign-magnitude encoding (Homing_Offset bit 11, positions / speeds bit 15).

Motion model: a position servo with torque on moves its shaft toward
``Goal_Position + Homing_Offset`` (clamped to the position limits) at ``Goal_Velocity``
steps/s, or at ``max_speed`` when that is 0 (the STS3215's no-load speed at 12 V,
about 0.222 s / 60 deg), with no overshoot; enabling torque first sets the goal to the
present position so the arm holds where it is. Present_Position = shaft - Homing_Offset,
as on the real servo. There is no load, gravity or collision: a kinematic servo.

Fault injection for tests: :meth:`FeetechBusEmulator.silence` makes servos stop answering
(a cut cable or a browned-out servo); :meth:`FeetechBusEmulator.restore` brings them back.
:class:`FeetechBusProcess` runs the emulator in a process of its own with the same hooks.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import threading
import time
import tty
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

BROADCAST_ID = 0xFE
PING, READ, WRITE, REG_WRITE, ACTION, SYNC_READ, SYNC_WRITE = 0x01, 0x02, 0x03, 0x04, 0x05, \
    0x82, 0x83
RESOLUTION = 4096
STS3215_MODEL = 777
FIRMWARE = (3, 10)
# STS3215 at 12 V: 0.222 s per 60 degrees, no load.
STS3215_MAX_SPEED = 60.0 / 0.222 * RESOLUTION / 360.0  # steps/s

# Control table addresses (lerobot/motors/feetech/tables.py, STS/SMS series).
ADDR = dict(fw_major=0, fw_minor=1, model=3, id=5, baud=6, return_delay=7, status_level=8,
            min_limit=9, max_limit=11, max_torque=16, p=21, d=22, i=23, homing=31, mode=33,
            torque=40, acceleration=41, goal=42, goal_time=44, goal_velocity=46,
            torque_limit=48, lock=55, present=56, velocity=58, load=60, voltage=62,
            temperature=63, moving=66, current=69)
EEPROM_END = 40  # addresses below are EEPROM: written only while Lock is 0

SO101_MOTORS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll",
                "gripper")


@dataclass(frozen=True)
class ServoCalibration:
    """What ``lerobot-calibrate`` writes into a servo and into the calibration file."""

    id: int
    homing_offset: int
    range_min: int
    range_max: int


def so101_calibration() -> dict[str, ServoCalibration]:
    """A plausible SO-101 calibration: each joint's range centred on 2047, as
    ``lerobot-calibrate`` leaves it (the middle of the range is LeRobot's 0 deg and the
    so101_new_calib model's zero), spans matching the model's joint limits, and
    homing offsets like a real arm's."""
    spans = {  # degrees from the middle, from so101_new_calib joint limits
        "shoulder_pan": (-110.0, 110.0), "shoulder_lift": (-100.0, 100.0),
        "elbow_flex": (-96.8, 96.8), "wrist_flex": (-95.0, 95.0),
        "wrist_roll": (-180.0, 180.0), "gripper": (-55.0, 55.0)}
    offsets = (-1018, 1425, -352, 871, -1720, 1102)
    cal = {}
    for i, (name, (lo, hi)) in enumerate(spans.items()):
        lo_t, hi_t = (int(round(2047 + d * (RESOLUTION - 1) / 360.0)) for d in (lo, hi))
        if name == "wrist_roll":  # LeRobot records the roll servo as a full turn
            lo_t, hi_t = 0, RESOLUTION - 1
        cal[name] = ServoCalibration(i + 1, offsets[i], lo_t, hi_t)
    return cal


def write_calibration_file(directory: Path, robot_id: str,
                           calibration: dict[str, ServoCalibration]) -> Path:
    """The calibration file LeRobot reads (``<calibration_dir>/<robot_id>.json``)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{robot_id}.json"
    path.write_text(json.dumps({name: {"id": c.id, "drive_mode": 0,
                                       "homing_offset": c.homing_offset,
                                       "range_min": c.range_min, "range_max": c.range_max}
                                for name, c in calibration.items()}, indent=4))
    return path


def _encode_sign(value: int, sign_bit: int) -> int:
    return (-value | (1 << sign_bit)) if value < 0 else value


def _decode_sign(value: int, sign_bit: int) -> int:
    return -(value & ((1 << sign_bit) - 1)) if value & (1 << sign_bit) else value


def _checksum(body: Iterable[int]) -> int:
    return ~sum(body) & 0xFF


class Servo:
    """One STS3215: its control table and its shaft."""

    def __init__(self, cal: ServoCalibration, position_steps: float, max_speed: float):
        self.mem = bytearray(256)
        self._max_speed = max_speed
        m = self.mem
        m[ADDR["fw_major"]], m[ADDR["fw_minor"]] = FIRMWARE
        self._put(ADDR["model"], 2, STS3215_MODEL)
        m[ADDR["id"]], m[ADDR["status_level"]], m[ADDR["return_delay"]] = cal.id, 1, 0
        self._put(ADDR["min_limit"], 2, cal.range_min)
        self._put(ADDR["max_limit"], 2, cal.range_max)
        self._put(ADDR["max_torque"], 2, 1000)
        self._put(ADDR["torque_limit"], 2, 1000)
        m[ADDR["p"]], m[ADDR["d"]] = 32, 32
        self._put(ADDR["homing"], 2, _encode_sign(cal.homing_offset, 11))
        m[ADDR["voltage"]], m[ADDR["temperature"]] = 120, 31  # 12.0 V, 31 C
        self.shaft = float(position_steps) + cal.homing_offset
        self.speed = 0.0
        self._t = time.monotonic()
        self._refresh_present()
        self._put(ADDR["goal"], 2, self._get(ADDR["present"], 2))

    @property
    def id(self) -> int:
        return self.mem[ADDR["id"]]

    def _put(self, addr: int, size: int, value: int) -> None:
        self.mem[addr:addr + size] = int(value).to_bytes(size, "little")

    def _get(self, addr: int, size: int) -> int:
        return int.from_bytes(self.mem[addr:addr + size], "little")

    def _homing(self) -> int:
        return _decode_sign(self._get(ADDR["homing"], 2), 11)

    def present_steps(self) -> int:
        self.advance()
        return _decode_sign(self._get(ADDR["present"], 2), 15)

    def _refresh_present(self) -> None:
        self._put(ADDR["present"], 2, _encode_sign(int(round(self.shaft - self._homing())), 15))
        self._put(ADDR["velocity"], 2, _encode_sign(int(round(self.speed)), 15))
        self.mem[ADDR["moving"]] = 1 if abs(self.speed) > 0.5 else 0

    def advance(self) -> None:
        """Move the shaft for the time since the last call."""
        now = time.monotonic()
        dt, self._t = now - self._t, now
        if self.mem[ADDR["torque"]] != 1 or self.mem[ADDR["mode"]] != 0:
            self.speed = 0.0
        else:
            goal = _decode_sign(self._get(ADDR["goal"], 2), 15)
            lo, hi = self._get(ADDR["min_limit"], 2), self._get(ADDR["max_limit"], 2)
            if lo < hi:
                goal = min(max(goal, lo), hi)
            target = goal + self._homing()
            speed = self._get(ADDR["goal_velocity"], 2) or self._max_speed
            step = max(-speed * dt, min(speed * dt, target - self.shaft))
            self.shaft += step
            self.speed = step / dt if dt > 0 else 0.0
        self._refresh_present()

    def read(self, addr: int, size: int) -> bytes:
        self.advance()
        return bytes(self.mem[addr:addr + size])

    def write(self, addr: int, data: bytes) -> None:
        self.advance()
        locked = self.mem[ADDR["lock"]] == 1
        for offset, byte in enumerate(data):
            a = addr + offset
            if a >= len(self.mem) or (a < EEPROM_END and locked) or a in (0, 1, 3, 4) \
                    or ADDR["present"] <= a < ADDR["present"] + 15:  # read-only registers
                continue
            if a == ADDR["torque"] and byte == 1 and self.mem[a] != 1:
                # Torque on holds the present position instead of jumping to a stale goal.
                self._put(ADDR["goal"], 2, self._get(ADDR["present"], 2))
            self.mem[a] = byte


class FeetechBusEmulator:
    """The servos of one arm behind a pty; serve on a thread until :meth:`stop`."""

    def __init__(self, calibration: Optional[dict[str, ServoCalibration]] = None,
                 start_degrees: Optional[dict[str, float]] = None,
                 max_speed: float = STS3215_MAX_SPEED,
                 servo_factory: Optional[Callable[[str, ServoCalibration, float], Servo]] = None):
        """``servo_factory(name, calibration, start steps)`` makes each servo: kinematic
        ones by default, physics-driven ones for the SO-101 twin."""
        calibration = calibration or so101_calibration()
        make = servo_factory or (lambda name, cal, steps: Servo(cal, steps, max_speed))
        start_degrees = start_degrees or {}
        self._lock = threading.Lock()
        self.servos: dict[int, Servo] = {}
        self.names: dict[str, int] = {}
        for name, cal in calibration.items():
            mid = (cal.range_min + cal.range_max) / 2.0
            # LeRobot degrees: (present - mid) * 360 / 4095.
            steps = mid + start_degrees.get(name, 0.0) * (RESOLUTION - 1) / 360.0
            self.servos[cal.id] = make(name, cal, steps)
            self.names[name] = cal.id
        self._silent: set[int] = set()
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)
        self.port = os.ttyname(self._slave)
        self._buf = bytearray()
        self._stop = threading.Event()
        self.packets = 0  # instruction packets answered or applied
        self._thread = threading.Thread(target=self._serve, name="feetech-emulator", daemon=True)

    def start(self) -> "FeetechBusEmulator":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
        for fd in (self._master, self._slave):
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # --- test hooks ------------------------------------------------------------------------
    def silence(self, names: Optional[Iterable[str]] = None) -> None:
        """These servos (default: all) stop answering and ignore every packet."""
        with self._lock:
            self._silent |= {self.names[n] for n in (names or self.names)}

    def restore(self) -> None:
        with self._lock:
            self._silent.clear()

    def present_degrees(self) -> dict[str, float]:
        """Present positions in LeRobot units (degrees; gripper 0-100 of its range)."""
        out = {}
        with self._lock:
            for name, sid in self.names.items():
                servo = self.servos[sid]
                lo, hi = servo._get(ADDR["min_limit"], 2), servo._get(ADDR["max_limit"], 2)
                p = servo.present_steps()
                out[name] = (100.0 * (p - lo) / (hi - lo) if name == "gripper"
                             else (p - (lo + hi) / 2.0) * 360.0 / (RESOLUTION - 1))
        return out

    def torque_enabled(self) -> dict[str, bool]:
        with self._lock:
            return {n: self.servos[i].mem[ADDR["torque"]] == 1 for n, i in self.names.items()}

    def present_steps(self, name: str) -> int:
        """Present_Position register of one servo, encoder steps."""
        with self._lock:
            return self.servos[self.names[name]].present_steps()

    # --- protocol --------------------------------------------------------------------------
    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._master], [], [], 0.05)
                if not ready:
                    continue
                data = os.read(self._master, 4096)
            except OSError:
                if self._stop.is_set():
                    return
                time.sleep(0.01)
                continue
            self._buf += data
            for packet in self._packets():
                reply = self._handle(packet)
                if reply:
                    os.write(self._master, reply)

    def _packets(self):
        buf = self._buf
        while True:
            start = buf.find(b"\xff\xff")
            if start < 0:
                del buf[:max(0, len(buf) - 1)]
                return
            del buf[:start]
            if len(buf) < 4:
                return
            total = buf[3] + 4
            if len(buf) < total:
                return
            packet = bytes(buf[:total])
            if packet[-1] != _checksum(packet[2:-1]):
                del buf[:2]  # not a packet start after all: resynchronise
                continue
            del buf[:total]
            yield packet[2], packet[4], packet[5:-1]

    def _status(self, sid: int, data: bytes = b"") -> bytes:
        body = bytes([sid, len(data) + 2, 0]) + data
        return b"\xff\xff" + body + bytes([_checksum(body)])

    def _handle(self, packet) -> bytes:
        sid, inst, params = packet
        with self._lock:
            alive = {i: s for i, s in self.servos.items() if i not in self._silent}
            if sid != BROADCAST_ID and sid not in alive:
                return b""
            self.packets += 1
            if inst == PING:
                ids = sorted(alive) if sid == BROADCAST_ID else [sid]
                return b"".join(self._status(i) for i in ids)
            if inst == READ and sid != BROADCAST_ID and len(params) == 2:
                return self._status(sid, alive[sid].read(params[0], params[1]))
            if inst in (WRITE, REG_WRITE) and params:
                targets = alive.values() if sid == BROADCAST_ID else [alive[sid]]
                for servo in targets:
                    servo.write(params[0], params[1:])
                if sid == BROADCAST_ID or alive[sid].mem[ADDR["status_level"]] == 0:
                    return b""
                return self._status(sid)
            if inst == ACTION:
                return b""
            if inst == SYNC_WRITE and len(params) >= 2:
                addr, size = params[0], params[1]
                for k in range(2, len(params) - size, size + 1):
                    servo = alive.get(params[k])
                    if servo is not None:
                        servo.write(addr, params[k + 1:k + 1 + size])
                return b""
            if inst == SYNC_READ and len(params) >= 2:
                addr, size = params[0], params[1]
                return b"".join(self._status(i, alive[i].read(addr, size))
                                for i in params[2:] if i in alive)
        return b""


def _serve_in_child(conn, calibration, start_degrees, max_speed) -> None:
    with FeetechBusEmulator(calibration, start_degrees, max_speed) as bus:
        conn.send(bus.port)
        while True:
            request = conn.recv()
            if request is None:
                return
            name, args = request
            conn.send(getattr(bus, name)(*args))


class FeetechBusProcess:
    """:class:`FeetechBusEmulator` in a process of its own, with the same test hooks.

    The servos must answer within scservo_sdk's ~50 ms packet timeout; a thread in a
    process busy with rclpy and pytest can miss that, a process of its own does not
    (and is also what a real bus is: another device)."""

    def __init__(self, calibration: Optional[dict[str, ServoCalibration]] = None,
                 start_degrees: Optional[dict[str, float]] = None,
                 max_speed: float = STS3215_MAX_SPEED):
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")  # no fork of an rclpy process
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve_in_child, name="feetech-emulator", daemon=True,
                                 args=(child, calibration or so101_calibration(),
                                       start_degrees or {}, max_speed))
        self._proc.start()
        if not self._conn.poll(30):
            self.stop()
            raise RuntimeError("the Feetech bus emulator process did not start within 30 s")
        self.port = self._conn.recv()
        self._lock = threading.Lock()

    def _call(self, name: str, *args):
        with self._lock:
            self._conn.send((name, args))
            if not self._conn.poll(10):
                raise RuntimeError(f"the Feetech bus emulator did not answer {name}")
            return self._conn.recv()

    def silence(self, names: Optional[Iterable[str]] = None) -> None:
        self._call("silence", list(names) if names else None)

    def restore(self) -> None:
        self._call("restore")

    def present_degrees(self) -> dict[str, float]:
        return self._call("present_degrees")

    def torque_enabled(self) -> dict[str, bool]:
        return self._call("torque_enabled")

    def present_steps(self, name: str) -> int:
        return self._call("present_steps", name)

    def stop(self) -> None:
        if self._proc.is_alive():
            try:
                self._conn.send(None)
            except OSError:
                pass
            self._proc.join(5)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calibration-dir", type=Path,
                        help="also write the matching LeRobot calibration file here")
    parser.add_argument("--robot-id", default="so101_emulated")
    args = parser.parse_args(argv)
    cal = so101_calibration()
    with FeetechBusEmulator(cal) as bus:
        if args.calibration_dir:
            print(f"calibration: {write_calibration_file(args.calibration_dir, args.robot_id, cal)}")
        print(f"port: {bus.port}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
