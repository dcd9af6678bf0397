"""What the agent is told about LIBERO's Panda, on top of rpent's own prompt."""
from rpent_agent.prompts import PromptBundle

PROMPT = PromptBundle(
    sections=("On this LIBERO Panda, check with distance_to that the fingers are within 1 cm "
              "of an object before you close the gripper on it.",),
    embodiments=("libero_panda",),
    examples=("get_object_poses -> move_to 5 cm above the object -> distance_to the object "
              "-> move_to it -> gripper close",))
