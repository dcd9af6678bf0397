"""Bring-up: only the action-model node (for a GPU host).

Launch arguments (name, default, what):
  am_backend         lerobot          scripted | lerobot | openpi | rpent_http | rpent_vla | rpent_wam
  am_checkpoint      ''               LeRobot checkpoint folder
  am_endpoint        ''               policy server for openpi / rpent_*
  am_model_io        ''               what the model is fed (lerobot, openpi, rpent_*): pi05_libero, lerobot_libero, rpent_pi05_libero, wam_libero or a YAML file; empty: the backend's default
  am_python          ''               Python interpreter that runs the model node (a venv's bin/python with the model's own packages); empty: this one
  am_device          ''               torch device of the model (am_backend:=lerobot), e.g. cuda:1; empty: cuda if available, else cpu
  robot_namespace    ''               robot whose topics give the latest observation
  namespace          ''               namespace of the model node

Examples:
  ros2 launch rpent action_model.launch.py am_checkpoint:=/models/pi05_libero namespace:=gpu
  ros2 launch rpent action_model.launch.py am_backend:=openpi am_endpoint:=127.0.0.1:8000

Nodes and parameters come from rpent.bringup, shared with `python -m rpent.start`.
"""
from rpent.launch_files import launch_description


def generate_launch_description():
    return launch_description("action_model")
