"""Real-arm robot nodes and the safety layer shared by every real arm."""
