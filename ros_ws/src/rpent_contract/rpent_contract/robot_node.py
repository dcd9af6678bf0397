"""RobotContractNode: the ROS side of every robot node (sim or real).

It declares the node's parameters (its ``settings_type``: the contract's frames, workspace,
per-step limits and operator, and the embodiment's own), builds
the embodiment's :class:`~rpent_contract.driver.RobotDriver` (a subclass's
:meth:`RobotContractNode.create_driver`) and composes the parts that serve the contract
(see ARCHITECTURE.md, "The robot contract"):

* :class:`~rpent_contract.state_publisher.StatePublisher`: state, tf, description, cameras;
* :class:`~rpent_contract.motion_server.MotionServer`: the motions, ``stop`` and ``reset``;
* :class:`~rpent_contract.operator_server.OperatorServer`: the operator's requests;
* :class:`~rpent_contract.sim_services.SimServices`: for a simulated driver only.

The node itself answers ``get_robot_info``.
"""
from __future__ import annotations

from typing import Optional

from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node

from rpent_interfaces.srv import GetRobotInfo

from . import params
from .description import RobotModel
from .driver import RobotDriver
from .motion_server import MotionLimits, MotionServer
from .names import GET_ROBOT_INFO_SERVICE
from .node_main import run_node
from .operator_server import OperatorServer
from .robot_settings import RobotSettings
from .serving import service
from .sim_services import SimServices
from .state_publisher import StatePublisher
from .validation import Workspace


def default_frame_prefix(namespace: str) -> str:
    """'<namespace>/' for a namespaced node, '' otherwise (tf2 frame ids have no leading
    slash)."""
    namespace = namespace.strip("/")
    return f"{namespace}/" if namespace else ""



class RobotContractNode(Node):
    """Base class of robot nodes; subclasses name their settings class (``settings_type``)
    and implement :meth:`create_driver`."""

    settings_type = RobotSettings

    def __init__(self, node_name: str, **kwargs):
        super().__init__(node_name, **kwargs)
        self.settings = settings = params.declare_settings(self, self.settings_type, defaults={
            "frame_prefix": default_frame_prefix(self.get_namespace()),
            "robot_description_file": self.default_robot_description_file})
        self.frame_prefix = settings.frame_prefix
        self._base_link, self._ee_link = settings.base_frame, settings.ee_frame
        self.base_frame = self.frame_prefix + self._base_link
        self.ee_frame = self.frame_prefix + self._ee_link
        try:
            self.workspace = Workspace(settings.workspace_min, settings.workspace_max)
        except ValueError as err:
            raise params.ParameterError(f"workspace_min/workspace_max: {err}") from None
        self.max_translation_step = settings.max_translation_step
        self.max_rotation_step = settings.max_rotation_step
        self.external_cameras = [n for n in settings.external_cameras if n]
        self.model = self._load_model(settings.robot_description_file)
        # Cameras fixed to the robot or the room: name -> (frame it is mounted on, position,
        # quaternion x, y, z, w of its optical frame there); create_driver fills it in.
        self.camera_mounts: dict = {}

        self.driver: RobotDriver = self.create_driver()
        desc = self.driver.description
        self.description = desc
        try:
            self._check_frames(desc)
            if settings.operator == "auto" and not desc.simulated:
                raise params.ParameterError(
                    "parameter 'operator' = 'auto': must be 'human' on a real robot: nothing "
                    "but a person can judge its task or put its scene back")
        except params.ParameterError:
            self.driver.close()
            raise
        self.publisher = StatePublisher(
            self, self.driver, desc, model=self.model, frame_prefix=self.frame_prefix,
            base_link=self._base_link, ee_link=self._ee_link, camera_mounts=self.camera_mounts,
            state_timeout=settings.state_timeout,
            rate=settings.publish_rate or desc.control_rate,
            status=lambda: (self.motions.mode, self.motions.active_goal))
        self.motions = MotionServer(
            self, self.driver, desc, self.publisher, MotionLimits(
                self.workspace, self.max_translation_step, self.max_rotation_step,
                settings.move_to_timeout), self.base_frame)
        self.operator_desk = OperatorServer(
            self, self.driver, self.publisher, who=settings.operator,
            timeout=settings.operator_timeout, reset_episode=self.motions.reset_episode)
        if desc.simulated:
            SimServices(self, self.driver, desc, frame_prefix=self.frame_prefix,
                        base_frame=self.base_frame)
        service(self, GetRobotInfo, GET_ROBOT_INFO_SERVICE, self._get_robot_info,
                callback_group=ReentrantCallbackGroup())
        self.get_logger().info(
            f"{desc.embodiment} ready: control spaces "
            f"{[s.name for s in desc.control_spaces]}, cameras {list(desc.camera_names)}, "
            f"{desc.control_rate:g} Hz")

    # --- subclass hook -----------------------------------------------------------------
    def create_driver(self) -> RobotDriver:
        """Build the driver from ``self.settings``."""
        raise NotImplementedError

    def default_robot_description_file(self, settings: dict) -> str:
        """URDF of this embodiment that an installed package ships, '' if none;
        ``settings``: the parameters declared so far (its frames), by name."""
        return ""

    # --- robot model and frames ------------------------------------------------------------
    def _load_model(self, path: str) -> Optional[RobotModel]:
        if not path:
            self.get_logger().info("robot_description_file is '': no robot_description, and "
                                   "only the end effector and cameras on tf")
            return None
        try:
            model = RobotModel.from_file(path)
        except ValueError as err:
            raise params.ParameterError(f"robot_description_file: {err}") from None
        if self._base_link not in model.links:
            raise params.ParameterError(
                f"base_frame '{self._base_link}' is not a link of {path} (links: "
                f"{', '.join(model.links)}): set base_frame to the model's base link, or "
                "robot_description_file to '' to publish no model")
        return model

    def _check_frames(self, desc) -> None:
        """The model and the camera mounts fit this robot, or say which parameter to fix."""
        model = self.model
        if model is not None:
            missing = [j for j in desc.joint_names if j not in model.joint_names]
            if missing:
                raise params.ParameterError(
                    f"robot_description_file {model.source} has no moving joint(s) "
                    f"{', '.join(missing)}, which joint_states publishes: point it at this "
                    "robot's URDF, or set it to '' to publish no model")
        frames = {self._base_link, self._ee_link} | set(model.links if model else ())
        for name, (mount, _, _) in self.camera_mounts.items():
            if mount not in frames:
                raise params.ParameterError(
                    f"camera_extrinsics: camera '{name}' is mounted on '{mount}', which is not "
                    f"a frame of this robot; use one of {', '.join(sorted(frames))}")

    def _get_robot_info(self, _request, response):
        desc = self.description
        response.embodiment, response.simulated = desc.embodiment, desc.simulated
        response.base_frame, response.ee_frame = self.base_frame, self.ee_frame
        response.control_spaces = [s.to_msg() for s in desc.control_spaces]
        response.default_control_space = desc.control_spaces[0].name
        response.joint_names = list(desc.joint_names)
        response.camera_names = list(desc.camera_names) + [
            n for n in self.external_cameras if n not in desc.camera_names]
        (response.workspace_min.x, response.workspace_min.y,
         response.workspace_min.z) = (float(v) for v in self.workspace.lower)
        (response.workspace_max.x, response.workspace_max.y,
         response.workspace_max.z) = (float(v) for v in self.workspace.upper)
        response.control_rate = float(desc.control_rate)
        response.max_translation_step = float(self.max_translation_step)
        response.max_rotation_step = float(self.max_rotation_step)
        response.gripper_max_width = float(desc.gripper_max_width)
        response.sim_services = list(desc.sim_services)
        return response

    def shutdown(self) -> None:
        """Stop any motion and release the robot (before the node is destroyed)."""
        self.motions.interrupt("node shutting down")
        self.driver.close()


def spin_robot_node(node_class, args=None, num_threads: int = 6) -> int:
    """Run a robot node until Ctrl-C / shutdown; start-up errors exit 2 with the reason."""
    return run_node(node_class, name=node_class.__name__, args=args, num_threads=num_threads,
                    close=node_class.shutdown)
