"""Plain-Python helpers the RPent packages share that are not the robot contract; imports
no rclpy and no other RPent package."""
