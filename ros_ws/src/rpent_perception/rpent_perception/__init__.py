"""Perception for the agent: segmentation backends behind one ROS interface, and where
what they find is in the robot's base frame."""
