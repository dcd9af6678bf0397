"""The twins' nodes' settings: every parameter the camera node and the operator node have,
with its default, unit, range and help, in one place; each node declares its parameters
from its class here."""
from __future__ import annotations

from dataclasses import dataclass

from rpent_contract.settings import at_least, parameter, positive

from .twin_port import DEFAULT_PORT


def _tcp_port(value):
    return None if 0 < value < 65536 else "must be a TCP port"


@dataclass(frozen=True)
class TwinPortSettings:
    """How a node reaches the twin port (the simulator's side of the bench)."""
    twin_host: str = parameter("127.0.0.1", "Address of the twin port")
    twin_port: int = parameter(DEFAULT_PORT, "TCP port of the twin port", check=_tcp_port)
    startup_timeout: float = parameter(60.0, "Longest wait for the twin port", "s", positive)


@dataclass(frozen=True)
class OperatorSettings(TwinPortSettings):
    answer_timeout: float = parameter(10.0, "Longest wait for the robot to take an answer",
                                      "s", positive)


@dataclass(frozen=True)
class CameraSettings(TwinPortSettings):
    scene: str = parameter("franka", "Scene of the twin: an arm's shipped tabletop (franka, "
                           "so101) or a scene YAML file")
    width: int = parameter(320, "Image width", "px", at_least(16))
    height: int = parameter(240, "Image height", "px", at_least(16))
    rate: float = parameter(2.0, "Frames per second of every camera (wall clock)", "Hz",
                            positive)
    exposure: float = parameter(1.0, "Gain on the colour image (1 = as rendered)",
                                check=positive)
    depth_max: float = parameter(10.0, "Depth beyond this is published as 0 (no measurement)",
                                 "m", positive)
    frame_prefix: str = parameter("", "Prefix of the optical frames, as the robot node's "
                                  "frame_prefix (default '<namespace>/' for a namespaced node, "
                                  "'' otherwise)", at_startup=True)
    sam3_port: int = parameter(0, "TCP port of the ground-truth SAM3 server on 127.0.0.1; 0 = "
                               "none", check=lambda v: None if 0 <= v < 65536
                               else "must be a TCP port or 0")
