"""Robot implementations the contract suite runs against.

Adding a robot node to the suite is adding a RobotUnderTest here; a robot that talks to
an emulator (franky-sim for the Franka) names a factory for it in ``emulator``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

CONFIG = Path(__file__).resolve().parents[2] / "config"


class Emulator:
    """Something a robot node connects to, started before the node and stopped after the
    module; ``parameters`` are added to the node's (e.g. the address it serves on)."""

    parameters: dict

    def stop(self) -> None: ...


class FrankySimEmulator(Emulator):
    """franky-sim on a free loopback address, plus a camera playing a generated video."""

    def __init__(self, log_dir: Path):
        from rpent_twins.franky_sim import SIM_PARAMETERS, FrankySimProcess

        video = write_test_video(log_dir / "camera.avi")
        self.sim = FrankySimProcess(log_dir).start()
        self.parameters = {**SIM_PARAMETERS, "robot_ip": self.sim.host, "cameras": ["scene"],
                           "camera_sources": [str(video)], "camera_width": 96,
                           "camera_height": 72}

    def stop(self) -> None:
        self.sim.stop()


class FeetechEmulator(Emulator):
    """The SO-101's Feetech servo bus on a pty, with the matching LeRobot calibration file."""

    def __init__(self, log_dir: Path):
        from rpent_twins.feetech_emulator import (FeetechBusProcess, so101_calibration,
                                               write_calibration_file)

        calibration = so101_calibration()
        write_calibration_file(log_dir, "so101_contract", calibration)
        # Starts near home, so reset has a short way to go.
        self.bus = FeetechBusProcess(calibration, {"shoulder_lift": -25.0, "elbow_flex": 25.0,
                                                   "wrist_flex": 60.0})
        self.parameters = {"port": self.bus.port, "calibration_dir": str(log_dir),
                           "robot_id": "so101_contract"}

    def stop(self) -> None:
        self.bus.stop()


def write_test_video(path: Path, frames: int = 20) -> Path:
    """A short MJPG clip of moving bars: a capture source for camera tests."""
    import cv2

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 20.0, (96, 72))
    for i in range(frames):
        img = np.zeros((72, 96, 3), np.uint8)
        img[:, (i * 4) % 96:(i * 4) % 96 + 16] = (40, 180, 250)
        img[20:40, :, 2] = 200
        writer.write(img)
    writer.release()
    if not path.exists() or path.stat().st_size == 0:
        raise RuntimeError(f"OpenCV could not write {path} (no MJPG encoder?)")
    return path


@dataclass
class RobotUnderTest:
    id: str
    package: str
    executable: str
    parameters: dict = field(default_factory=dict)
    params_file: Optional[Path] = None
    startup_timeout: float = 180.0
    emulator: Optional[Callable[[Path], Emulator]] = None

    def wiggle(self, info, steps: int) -> tuple[str, np.ndarray]:
        from rpent_testkit.bursts import wiggle

        return wiggle(info, steps)


ROBOTS = [
    RobotUnderTest(
        id="libero",
        package="rpent_env_sim",
        executable="libero_node",
        # The shipped config, so the suite also proves it loads and is coherent.
        params_file=CONFIG / "libero_sim.yaml",
    ),
    RobotUnderTest(
        id="franka",
        package="rpent_hw",
        executable="franka_node",
        params_file=CONFIG / "franka.yaml",
        startup_timeout=60.0,
        emulator=FrankySimEmulator,
    ),
    RobotUnderTest(
        id="so101",
        package="rpent_hw",
        executable="so101_node",
        params_file=CONFIG / "so101.yaml",
        startup_timeout=60.0,
        emulator=FeetechEmulator,
    ),
]
