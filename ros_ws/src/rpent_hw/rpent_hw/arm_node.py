"""What every real arm's node adds to the robot contract: the safety layer, cameras and
approval gate built from its settings (``arm_settings``), and the gate's service
(``safety/approve``) and topic (``safety/pending``)."""
from __future__ import annotations

from std_msgs.msg import String
from std_srvs.srv import SetBool

from rpent_contract.names import APPROVE_SERVICE, PENDING_TOPIC
from rpent_contract.qos import LATCHED_QOS
from rpent_contract.robot_node import RobotContractNode
from rpent_contract.serving import service

from .arm_settings import ArmNodeSettings
from .cameras import camera_mounts, camera_specs
from .safety import ApprovalGate, SafetyLimits


class ArmNode(RobotContractNode):
    """Base of real-arm nodes; their driver exposes its :class:`ApprovalGate` as ``approval``."""

    settings_type = ArmNodeSettings

    def __init__(self, node_name: str, **kwargs):
        super().__init__(node_name, **kwargs)
        gate = self.driver.approval
        service(self, SetBool, APPROVE_SERVICE,
                lambda req, res: self._answer(gate, req, res))
        self._pending_pub = self.create_publisher(String, PENDING_TOPIC, LATCHED_QOS)
        self._pending = None
        self.create_timer(0.1, lambda: self._publish_pending(gate))

    def arm_parts(self, velocity_scale: float = 1.0) -> tuple:
        """What every arm's driver is built with, from its settings: (SafetyLimits,
        ApprovalGate, cameras); ``camera_mounts`` then put its cameras on tf."""
        settings = self.settings
        limits = SafetyLimits(
            workspace=self.workspace, max_translation_step=self.max_translation_step,
            max_rotation_step=self.max_rotation_step,
            max_goal_translation=settings.max_goal_translation,
            max_goal_rotation=settings.max_goal_rotation,
            watchdog_timeout=settings.watchdog_timeout, velocity_scale=velocity_scale)
        approval = ApprovalGate(settings.require_approval, settings.approval_timeout)
        cameras = camera_specs(settings)
        self.camera_mounts = camera_mounts(settings, cameras, self._base_link,
                                           self.get_logger(), self.external_cameras)
        return limits, approval, cameras

    def _answer(self, gate: ApprovalGate, request, response):
        response.success, response.message = gate.answer(bool(request.data))
        return response

    def _publish_pending(self, gate: ApprovalGate) -> None:
        pending = gate.pending
        if pending != self._pending:
            self._pending = pending
            self._pending_pub.publish(String(data=pending))
