"""The perception node's services as blocking calls, for the agent's tools."""
from __future__ import annotations

import cv2
import numpy as np

from rpent_contract.client import ContractTimeout, ask
from rpent_contract.perception import detections_from_response, located_from_response
from rpent_interfaces.srv import BackProject, Locate, Segment

_COLOURS = [(230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180),
            (70, 240, 240), (240, 50, 230), (210, 245, 60)]


class PerceptionClient:
    """``name`` is the perception node, relative to ``node``'s namespace (the robot's)."""

    def __init__(self, node, name: str = "perception"):
        self.name = name
        self._segment = node.create_client(Segment, f"{name}/segment")
        self._locate = node.create_client(Locate, f"{name}/locate")
        self._back_project = node.create_client(BackProject, f"{name}/back_project")

    def wait_ready(self, timeout: float) -> None:
        for client in (self._segment, self._locate, self._back_project):
            if not client.wait_for_service(timeout_sec=timeout):
                raise ContractTimeout(
                    f"perception service '{client.srv_name}' not available after {timeout:g} "
                    "s; start the perception node (perception_node) in the robot's namespace "
                    "or unset the agent's perception parameter")

    def segment(self, camera: str, query: str, timeout: float):
        """(detections, message); detections is empty when nothing matched or it failed."""
        response = ask(self._segment, Segment.Request(camera=camera, query=query), timeout,
                       f"{self.name}/segment")
        return detections_from_response(response), response.message, response.success

    def locate(self, query: str, camera: str, timeout: float):
        """(objects best first, message)."""
        response = ask(self._locate, Locate.Request(query=query, camera=camera), timeout,
                       f"{self.name}/locate")
        return located_from_response(response), response.message

    def back_project(self, camera: str, u: float, v: float, timeout: float):
        """(base-frame point as a 3-array, or None when it cannot be told, message)."""
        response = ask(self._back_project, BackProject.Request(camera=camera, u=u, v=v),
                       timeout, f"{self.name}/back_project")
        p = response.point.point
        return (np.array([p.x, p.y, p.z]) if response.success else None), response.message


def annotate(rgb: np.ndarray, detections) -> np.ndarray:
    """The image with each detection's mask tinted, its box drawn and its label written."""
    out = rgb.astype(np.float32)
    for i, det in enumerate(detections):
        colour = np.array(_COLOURS[i % len(_COLOURS)], dtype=np.float32)
        if det.mask.shape == rgb.shape[:2]:
            out[det.mask] = 0.5 * out[det.mask] + 0.5 * colour
    out = out.astype(np.uint8)
    scale = max(0.3, rgb.shape[0] / 512)
    for i, det in enumerate(detections):
        colour = tuple(int(c) for c in _COLOURS[i % len(_COLOURS)])
        x, y, w, h = det.box()
        if w and h:
            cv2.rectangle(out, (x, y), (x + w - 1, y + h - 1), colour, 1)
            cv2.putText(out, f"{i + 1}", (x, max(8, y - 2)), cv2.FONT_HERSHEY_SIMPLEX, scale,
                        colour, 1, cv2.LINE_AA)
    return out
