"""A tool for every robot: how far the hand is from a point."""
import math

from rpent_agent.toolkit import Tool, ToolResult


def tools(toolkit):
    """The tools this package adds to a run's toolkit (none where they would not apply)."""
    def distance_to(x, y, z):
        target = [float(x), float(y), float(z)]
        if not all(math.isfinite(v) for v in target):
            raise ValueError("x, y and z must be finite numbers of metres")
        state = toolkit.observer.state()
        if state is None:
            return ToolResult("no robot state yet; observe, then try again", ok=False)
        p = state.ee_pose.position
        offset = [t - h for t, h in zip(target, (p.x, p.y, p.z))]
        return ToolResult(
            f"the point is {math.dist(target, (p.x, p.y, p.z)):.3f} m from the end effector "
            f"(offset x {offset[0]:+.3f}, y {offset[1]:+.3f}, z {offset[2]:+.3f} m in "
            f"{toolkit.info.base_frame})", data={"offset": offset})

    number = {"type": "number"}
    return [Tool("distance_to", "How far the end effector is from a point (x, y, z in metres, "
                 "robot base frame), with the offset along each axis.",
                 {"type": "object", "properties": {"x": number, "y": number, "z": number},
                  "required": ["x", "y", "z"]},
                 distance_to, images=False, reads_robot=True)]
