"""Services and action servers that answer every request, however many arrive at once.

rclpy's default request queue holds ten: a burst beyond that (a panicking client calling
``stop`` fifty times, a policy streaming goals, a cancel among many) was dropped by DDS with
no answer at all. Every server of the project is created here, with :data:`REQUEST_QOS`, and its feedback with :data:`FEEDBACK_QOS`.
"""
from __future__ import annotations

import traceback

from rclpy.action import ActionServer

from .qos import FEEDBACK_QOS, REQUEST_QOS

# How long a finished goal (its request and result) is kept for its client to fetch; our
# clients ask for the result as soon as a goal is accepted. rclpy's default, 15 min, kept
# every goal of a streamed run: a model node held ~100 kB per predict goal, a robot node's
# memory grew by about 0.7 MB an episode, and every status message listed all of them, so
# each client parsed hundreds of entries per goal event (step p99 30 -> 180 ms in 9 min of
# bench/soak.py).
RESULT_KEEP_S = 30.0


def action_server(node, action_type, name: str, *, execute_callback, **kwargs) -> ActionServer:
    kwargs.setdefault("result_timeout", RESULT_KEEP_S)
    kwargs.setdefault("feedback_pub_qos_profile", FEEDBACK_QOS)
    return _CancelsTogether(node, action_type, name,
                            execute_callback=_answering(node, name, action_type,
                                                        execute_callback),
                            goal_service_qos_profile=REQUEST_QOS,
                            result_service_qos_profile=REQUEST_QOS,
                            cancel_service_qos_profile=REQUEST_QOS, **kwargs)


def service(node, srv_type, name: str, callback, callback_group=None, coalesce: bool = False):
    """``coalesce``: one answer serves every request waiting when it is made (requests that
    all mean the same, as ``stop`` does), so a burst is answered in one or two executor rounds
    rather than one round per request."""
    if not coalesce:
        return node.create_service(srv_type, name, callback, qos_profile=REQUEST_QOS,
                                   callback_group=callback_group)
    server = []

    def answer_all(request, response):
        response = callback(request, response)
        for header in _waiting(server[0]):
            server[0].send_response(response, header)
        return response

    server.append(node.create_service(srv_type, name, answer_all, qos_profile=REQUEST_QOS,
                                      callback_group=callback_group))
    return server[0]


def _waiting(srv):
    """The headers of the requests waiting on ``srv``, taken as the executor takes them."""
    while True:
        with srv.handle:
            taken = srv.handle.service_take_request(srv.srv_type.Request)
        if taken[1] is None:  # (None, None): nothing waiting
            return
        yield taken[1]


class _CancelsTogether(ActionServer):
    """rclpy takes one cancel request per executor round, and a round costs about a
    millisecond or two in a busy node: the last of fifty cancels sent at once waited for all
    the others. This server takes every cancel waiting in the round the first is taken, and
    handles them in order."""

    def take_data(self):
        data = super().take_data()
        if "cancel" in data:
            more = []
            while True:
                with self._lock:
                    taken = self._handle.take_cancel_request(
                        self._action_type.Impl.CancelGoalService.Request)
                if not all(taken):  # (None, None): nothing waiting
                    break
                more.append(taken)
            data["more_cancels"] = more
        return data

    async def execute(self, taken_data):
        more = taken_data.pop("more_cancels", ())
        await super().execute(taken_data)
        for each in more:
            await self._execute_cancel_request(each)


def _answering(node, name: str, action_type, execute):
    """``execute``, but a goal whose callback raises still ends aborted with the reason:
    rclpy would abort it with an empty result, and the client would never learn why."""
    def run(goal_handle):
        try:
            return execute(goal_handle)
        except Exception as err:
            if not node.context.ok():
                # Ctrl-C shut ROS down under a running goal: its client is going too, and
                # the goal's feedback and result publishers no longer work.
                return action_type.Result()
            node.get_logger().error(f"{name} failed: {err}\n{traceback.format_exc()}")
            result = action_type.Result()
            text = (f"{name} failed inside {node.get_fully_qualified_name()} "
                    f"({type(err).__name__}: {err}); the node keeps serving, and its log has "
                    "the traceback to report")
            for field in ("message", "summary"):
                if hasattr(result, field):
                    setattr(result, field, text)
                    break
            if goal_handle.is_active:
                goal_handle.abort()
            return result
    return run
