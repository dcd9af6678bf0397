"""The agent's events as readable log lines (rcl_interfaces/msg/Log, what a viewer's Log
panel shows), and as the states of a timeline (``agent/activity``: the tool being called,
then how it ended). The agent publishes them beside ``agent/events``, so a viewer, the
Foxglove bridge and any recorder (``ros2 bag record`` too) get them as they get any topic,
and the one layout shows a live run and a bag alike."""
from __future__ import annotations

LOG_TYPE = "rcl_interfaces/msg/Log"

# AgentEvent kinds (rpent_interfaces/AgentEvent) -> labels and rcl_interfaces/Log levels.
_KINDS = {0: ("reasoning", 20), 1: ("tool_call", 20), 2: ("tool_result", 20),
          3: ("finish", 20), 4: ("error", 40)}


def log_line(stamp_ns: int, event):
    """One AgentEvent (a deserialized message) as an rcl_interfaces/msg/Log."""
    from rcl_interfaces.msg import Log

    label, level = _KINDS.get(event.kind, (f"kind {event.kind}", 0))
    if event.kind == 1:
        body = f"{event.tool_name}({event.arguments_json})"
    elif event.kind == 2:
        body = (f"{event.tool_name} -> {'ok' if event.ok else 'FAILED'} in "
                f"{event.duration:.2f} s: {event.text}")
        level = 20 if event.ok else 30
    else:
        body = event.text
    msg = Log(level=level, name="agent", msg=f"[turn {event.turn}] {label}: {body}")
    msg.stamp.sec, msg.stamp.nanosec = divmod(stamp_ns, 10**9)
    return msg


def activity(event):
    """What the run's timeline shows from ``event`` on: the tool while it is called, then
    ``<tool>: ok`` or ``<tool>: failed`` until the next call, and ``finished: <status>`` at
    the end; None for events that change nothing (reasoning)."""
    if event.kind == 1:
        return event.tool_name
    if event.kind == 2:
        return f"{event.tool_name}: {'ok' if event.ok else 'failed'}"
    if event.kind == 3:
        return f"finished: {event.text.split(':', 1)[0]}"
    if event.kind == 4:
        return "error"
    return None
