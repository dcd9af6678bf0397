"""The parameters every robot node has, simulated or real: its frames, workspace, per-step
limits, publishing and operator. An embodiment's settings class derives from
:class:`RobotSettings`, overriding the defaults that are its own (its frames and workspace,
``operator`` for a simulator) and adding its parameters; the robot node declares the whole
class at start-up (:func:`rpent_contract.params.declare_settings`)."""
from __future__ import annotations

from dataclasses import dataclass

from .settings import non_negative, one_of, parameter, positive, vector


def _frame_prefix(value):
    return "must not start with '/': tf2 frame ids have no leading slash" \
        if value.startswith("/") else None


OPERATORS = ("human", "auto")


@dataclass(frozen=True)
class RobotSettings:
    frame_prefix: str = parameter(
        "", "Prefix of every frame this robot publishes, so several robots share one tf tree; "
        "default '<namespace>/' for a namespaced node, '' otherwise", check=_frame_prefix,
        at_startup=True)
    base_frame: str = parameter("base_link", "Frame of ee_pose, workspace and goals "
                                "(frame_prefix is added)")
    ee_frame: str = parameter("ee_link", "End-effector frame (frame_prefix is added)")
    workspace_min: tuple = parameter((-1.0, -1.0, 0.0), "Workspace box lower corner (x, y, z) "
                                     "in base_frame", "m", vector(3))
    workspace_max: tuple = parameter((1.0, 1.0, 1.5), "Workspace box upper corner (x, y, z) "
                                     "in base_frame", "m", vector(3))
    max_translation_step: float = parameter(0.02, "Largest move_to translation per control "
                                            "step", "m", positive)
    max_rotation_step: float = parameter(0.1, "Largest move_to rotation per control step",
                                         "rad", positive)
    move_to_timeout: float = parameter(30.0, "Default move_to budget in robot time", "s",
                                       positive)
    external_cameras: tuple = parameter(
        ("",), "Cameras another driver publishes (realsense2_camera, usb_cam ...), its topics "
        "remapped onto camera/<name>/image_raw and camera_info: listed in get_robot_info so "
        "the agent and models use them; [''] = none")
    publish_rate: float = parameter(0.0, "Rate of state and camera topics; 0 = the control "
                                    "rate", "Hz", non_negative)
    state_timeout: float = parameter(
        0.5, "A measurement older than this (a robot that stopped answering) makes robot_state "
        "report an error, and pauses joint_states, ee_pose, tf and the cameras until a new one "
        "arrives", "s", positive)
    robot_description_file: str = parameter(
        "", "URDF published on robot_description; its links go on tf at the measured joint "
        "positions; default the one the embodiment's package ships; '' = none",
        at_startup=True)
    operator: str = parameter(
        "human", "Who answers operator requests: 'human' (rpent operator, the Foxglove "
        "layout's operator panel) or, in simulation, 'auto' (verdict = the simulator's success "
        "check, scene reset = simulator reset)", check=one_of(*OPERATORS))
    operator_timeout: float = parameter(600.0, "Default wait for an operator's answer", "s",
                                        positive)
