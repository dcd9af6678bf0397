"""The operator's desk on ROS: the ``request_operator_verdict`` and ``request_scene_reset``
action servers, the ``operator/answer`` service and the latched list of waiting requests
(:class:`~rpent_contract.operator.OperatorDesk` keeps the list).

With ``operator:=auto`` (simulation only) the simulator answers: its success check gives the
verdict, and its reset puts the scene back.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np
from builtin_interfaces.msg import Time
from rclpy.action import CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup

from rpent_interfaces.action import RequestOperatorVerdict, RequestSceneReset
from rpent_interfaces.msg import OperatorRequest, OperatorRequests
from rpent_interfaces.srv import AnswerOperator

from .driver import ResetRequest, RobotDriver, RobotSnapshot
from .names import ANSWER_SERVICE, REQUESTS_TOPIC, SCENE_RESET_ACTION, VERDICT_ACTION
from .operator import SCENE_RESET, VERDICT, Answer, OperatorDesk
from .qos import LATCHED_QOS
from .serving import action_server, service
from .state_publisher import StatePublisher


class OperatorServer:
    """Serves operator requests for the robot. ``who``: 'human' or 'auto';
    ``reset_episode(request)`` starts a new episode once the scene is back, as the reset
    service does, returning (snapshot or None, message)."""

    def __init__(self, node, driver: RobotDriver, publisher: StatePublisher, *, who: str,
                 timeout: float,
                 reset_episode: Callable[[ResetRequest], tuple[Optional[RobotSnapshot], str]]):
        self._node, self._driver, self._publisher = node, driver, publisher
        self._who, self._timeout, self._reset_episode = who, timeout, reset_episode
        self._requests_pub = node.create_publisher(OperatorRequests, REQUESTS_TOPIC,
                                                   LATCHED_QOS)
        self._desk = OperatorDesk(self._publish_requests)
        self._publish_requests([])
        # Waiting for a person takes minutes: a group of its own keeps motions and services
        # answering meanwhile (one request of each kind waits at a time).
        waiting = ReentrantCallbackGroup()
        self._servers = [
            action_server(node, action_type, name, execute_callback=execute,
                          goal_callback=lambda _goal: GoalResponse.ACCEPT,
                          cancel_callback=lambda _goal: CancelResponse.ACCEPT,
                          callback_group=waiting)
            for action_type, name, execute in (
                (RequestOperatorVerdict, VERDICT_ACTION, self._request_verdict),
                (RequestSceneReset, SCENE_RESET_ACTION, self._request_scene_reset))
        ]
        service(node, AnswerOperator, ANSWER_SERVICE, self._answer_operator,
                callback_group=ReentrantCallbackGroup())

    def _publish_requests(self, pending: list) -> None:
        msg = OperatorRequests()
        msg.header.stamp = self._node.get_clock().now().to_msg()
        for r in pending:
            item = OperatorRequest(request_id=r.request_id, text=r.text, episode_id=r.episode_id)
            item.kind = (OperatorRequest.KIND_VERDICT if r.kind == VERDICT
                         else OperatorRequest.KIND_SCENE_RESET)
            item.stamp, item.deadline = _stamp_s(r.asked_at), _stamp_s(r.deadline)
            msg.pending.append(item)
        self._requests_pub.publish(msg)

    def _wait_operator(self, goal_handle, kind: str, text: str, timeout: float, feedback_type,
                       auto: Callable[[], Answer]):
        """(the operator's Answer, "") or (None, why not); ``auto()`` answers in simulation
        with operator:=auto."""
        if self._who == "auto":
            return auto(), ""
        if not np.isfinite(timeout) or timeout < 0:
            return None, f"timeout must be a finite number of seconds >= 0, not {timeout}"
        episode = self._driver.snapshot().task.episode_id
        try:
            request = self._desk.ask(kind, text, episode, timeout or self._timeout)
        except ValueError as err:
            return None, str(err)
        self._node.get_logger().warning(
            f"waiting for the operator ({kind.replace('_', ' ')} {request.request_id}): {text!r}; "
            f"answer with: rpent operator answer {'yes|no' if kind == VERDICT else 'done'}")

        def tick(waited: float) -> None:
            fb = feedback_type()
            fb.request_id, fb.waited = request.request_id, float(waited)
            goal_handle.publish_feedback(fb)

        tick(0.0)
        answer = self._desk.wait(request, lambda: goal_handle.is_cancel_requested, tick)
        if answer is not None:
            return answer, ""
        if goal_handle.is_cancel_requested:
            return None, "canceled before the operator answered"
        return None, (f"no operator answered within {timeout or self._timeout:g} s; "
                      "answer with 'rpent operator' (or the Foxglove layout's operator panel) "
                      "while the request waits, or give a longer timeout")

    def _end_request(self, goal_handle, result, answered: bool):
        if not answered and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        elif answered:
            goal_handle.succeed()
        else:
            goal_handle.abort()
        return result

    def _request_verdict(self, goal_handle):
        goal, result = goal_handle.request, RequestOperatorVerdict.Result()
        answer, result.message = self._wait_operator(
            goal_handle, VERDICT, goal.question, goal.timeout, RequestOperatorVerdict.Feedback,
            lambda: Answer(bool(self._driver.snapshot().task.native_success),
                           "the simulator's success check", "simulation"))
        if answer is None:
            return self._end_request(goal_handle, result, False)
        snap = self._driver.snapshot()
        result.answered, result.success = True, answer.success
        result.comment, result.answered_by = answer.comment, answer.answered_by
        result.episode_id = snap.task.episode_id
        verdict = "achieved" if answer.success else "not achieved"
        if snap.task.success_is_native:
            result.message = (f"{answer.answered_by}: task {verdict}; this robot judges "
                              "success itself, so task_status keeps its own verdict")
        else:
            self._publisher.set_verdict(snap.task.episode_id, answer.success, snap)
            result.message = f"{answer.answered_by}: task {verdict}"
        if answer.comment:
            result.message += f" ({answer.comment})"
        self._node.get_logger().info(f"operator verdict: {result.message}")
        return self._end_request(goal_handle, result, True)

    def _request_scene_reset(self, goal_handle):
        goal, result = goal_handle.request, RequestSceneReset.Result()
        answer, result.message = self._wait_operator(
            goal_handle, SCENE_RESET, goal.note, goal.timeout, RequestSceneReset.Feedback,
            lambda: Answer(True, "the simulator put the scene back", "simulation"))
        if answer is None:
            return self._end_request(goal_handle, result, False)
        result.comment, result.answered_by = answer.comment, answer.answered_by
        if not answer.success:
            result.message = (f"the operator did not put the scene back"
                              f"{': ' + answer.comment if answer.comment else ''}")
            return self._end_request(goal_handle, result, True)
        snap, message = self._reset_episode(ResetRequest())
        result.done = snap is not None
        if snap is None:
            result.message = f"the scene was put back, but the robot's {message}"
        else:
            result.episode_id = snap.task.episode_id
            result.message = f"scene reset by the {answer.answered_by}; new episode started"
        return self._end_request(goal_handle, result, True)

    def _answer_operator(self, request, response):
        try:
            answered = self._desk.answer(request.request_id,
                                         Answer(bool(request.success), request.comment))
        except ValueError as err:
            response.accepted, response.message = False, str(err)
            return response
        response.accepted = True
        response.message = (f"{answered.kind.replace('_', ' ')} {answered.request_id} answered "
                            f"{'yes' if request.success else 'no'}")
        return response


def _stamp_s(seconds: float) -> Time:
    whole = int(seconds)
    return Time(sec=whole, nanosec=int((seconds - whole) * 1e9))
