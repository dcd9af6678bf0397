"""The robot contract's names: every topic, service and action a robot node serves, relative
to its namespace, and the frames it adds to tf. The robot node serves them and every client
(the agent, the model node, perception, the tools) finds them here; the README's contract
table lists them with their types."""
from __future__ import annotations

# Topics
ROBOT_STATE_TOPIC = "robot_state"
TASK_STATUS_TOPIC = "task_status"
EXECUTED_ACTIONS_TOPIC = "executed_actions"
JOINT_STATES_TOPIC = "joint_states"
EE_POSE_TOPIC = "ee_pose"
ROBOT_DESCRIPTION_TOPIC = "robot_description"
REQUESTS_TOPIC = "operator/requests"
# Where each executing chunk takes the end effector (visualization_msgs/Marker), for viewers.
INTENDED_PATH_TOPIC = "intended_path"
# A consumer that needs the frames of the robot's next measurement (a model about to
# predict) asks here; a simulator then renders that state even if its cameras are idle.
CAMERA_TRIGGER_TOPIC = "camera/trigger"

# Actions
EXECUTE_CHUNK_ACTION = "execute_chunk"
MOVE_TO_ACTION = "move_to"
GRIPPER_COMMAND_ACTION = "gripper_command"
RESET_EPISODE_ACTION = "reset_episode"
VERDICT_ACTION = "operator/request_verdict"
SCENE_RESET_ACTION = "operator/request_scene_reset"

# Services
RESET_SERVICE = "reset"
GET_ROBOT_INFO_SERVICE = "get_robot_info"
STOP_SERVICE = "stop"
ANSWER_SERVICE = "operator/answer"
# Served by simulated robots only.
OBJECT_POSES_SERVICE = "sim/get_object_poses"
SEGMENT_SERVICE = "sim/segment"
# Published by simulated robots, for viewers: the scene's objects and table as labelled boxes.
SCENE_MARKERS_TOPIC = "sim/scene_markers"
# ... and the tasks a reset can choose from (rpent_interfaces/TaskList, latched).
TASKS_TOPIC = "sim/tasks"
# Served and published by real arms (rpent_hw): an operator approves the pending motion.
APPROVE_SERVICE = "safety/approve"
PENDING_TOPIC = "safety/pending"


def camera_topic(camera: str, stream: str = "image_raw") -> str:
    """A camera's topic: ``stream`` is ``image_raw``, ``camera_info``, ``depth/image_raw``
    or ``depth/camera_info``."""
    return f"camera/{camera}/{stream}"


def optical_frame(camera: str) -> str:
    """A camera's optical frame on tf (z forward, x right, y down; REP-103)."""
    return f"{camera}_optical_frame"
