"""What every real arm's node adds to the robot contract: the safety layer's parameters and
the operator approval gate's service (``safety/approve``) and topic (``safety/pending``)."""
from __future__ import annotations

from std_msgs.msg import String
from std_srvs.srv import SetBool

from rpent_contract import params
from rpent_contract.names import APPROVE_SERVICE, PENDING_TOPIC
from rpent_contract.qos import LATCHED_QOS
from rpent_contract.robot_node import RobotContractNode
from rpent_contract.serving import service

from .cameras import declare_camera_mounts, declare_cameras
from .safety import ApprovalGate, SafetyLimits, declare_approval_gate


class ArmNode(RobotContractNode):
    """Base of real-arm nodes; their driver exposes its :class:`ApprovalGate` as ``approval``."""

    def __init__(self, node_name: str, **kwargs):
        super().__init__(node_name, **kwargs)
        gate = self.driver.approval
        service(self, SetBool, APPROVE_SERVICE,
                lambda req, res: self._answer(gate, req, res))
        self._pending_pub = self.create_publisher(String, PENDING_TOPIC, LATCHED_QOS)
        self._pending = None
        self.create_timer(0.1, lambda: self._publish_pending(gate))

    def declare_arm(self, rate: float, rate_help: str, max_goal_translation: float,
                    velocity_scale: bool = False) -> tuple:
        """What every arm declares first: its control rate (Hz, ``rate`` by default), the
        safety limits, the approval gate and its cameras (``camera_mounts`` put them on tf).
        Returns (control rate, SafetyLimits, ApprovalGate, cameras)."""
        d = lambda *a, **k: params.declare(self, *a, **k)  # noqa: E731
        rate = d("control_rate", rate, rate_help,
                 lambda v: None if 0 < v <= 200 else "must be in (0, 200] Hz")
        limits = self.declare_safety_limits(max_goal_translation, velocity_scale)
        approval = declare_approval_gate(d)
        cameras = declare_cameras(d)
        self.camera_mounts = declare_camera_mounts(d, cameras, self._base_link,
                                                   self.get_logger(), self.external_cameras)
        return rate, limits, approval, cameras

    def declare_safety_limits(self, max_goal_translation: float,
                              velocity_scale: bool = False) -> SafetyLimits:
        """The safety layer's limits: the contract's workspace and step limits plus these."""
        d = lambda *a, **k: params.declare(self, *a, **k)  # noqa: E731
        extra = {}
        if velocity_scale:
            extra["velocity_scale"] = d(
                "velocity_scale", 1.0, "Safety scaling of every motion's velocity/acceleration/"
                "jerk", lambda v: None if 0 < v <= 1 else "must be in (0, 1]")
        return SafetyLimits(
            workspace=self.workspace,
            max_translation_step=self.max_translation_step,
            max_rotation_step=self.max_rotation_step,
            max_goal_translation=d("max_goal_translation", max_goal_translation,
                                   "Farthest a goal may move the end effector from its start, m",
                                   params.positive),
            max_goal_rotation=d("max_goal_rotation", 1.6,
                                "Largest rotation of the end effector in one goal, rad",
                                params.positive),
            watchdog_timeout=d("watchdog_timeout", 0.5,
                               "Stop the arm when a chunk's next command is this late, s",
                               params.positive),
            **extra)

    def _answer(self, gate: ApprovalGate, request, response):
        response.success, response.message = gate.answer(bool(request.data))
        return response

    def _publish_pending(self, gate: ApprovalGate) -> None:
        pending = gate.pending
        if pending != self._pending:
            self._pending = pending
            self._pending_pub.publish(String(data=pending))
