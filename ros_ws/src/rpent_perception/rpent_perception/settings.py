"""The perception node's settings: every parameter it has, with its default, unit, range and
help, in one place; the node declares its parameters from :class:`PerceptionSettings`."""
from __future__ import annotations

from dataclasses import dataclass

from rpent_contract.settings import in_range, one_of, parameter, positive

BACKENDS = ("sim", "sam3_http")


@dataclass(frozen=True)
class PerceptionSettings:
    backend: str = parameter("sim", "sim (the simulator's own segmentation) or sam3_http (a "
                             "SAM3 server at sam3_endpoint)", check=one_of(*BACKENDS))
    sam3_endpoint: str = parameter("", "SAM3 server for backend sam3_http, http://HOST:PORT "
                                   "or socket://HOST:PORT (its --transport)")
    max_age: float = parameter(2.0, "longest wait for camera data newer than a request "
                               "before refusing it as stale", "s", positive)
    min_score: float = parameter(0.3, "detections scoring below this are dropped",
                                 check=in_range(0, 1))
    timeout: float = parameter(30.0, "longest a segmentation may take", "s", positive)
    startup_timeout: float = parameter(60.0, "longest wait for the robot (and the SAM3 "
                                       "server) at start-up", "s", positive)
