"""Bring-up of RPent: the run descriptions and the starter used where `ros2 launch` is absent."""
