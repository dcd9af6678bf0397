"""The robot contract shared by simulated and real robot nodes."""
