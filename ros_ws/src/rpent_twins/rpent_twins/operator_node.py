"""The twin's operator: answers the robot's operator requests as a person at the bench would,
through the same ``operator/answer`` service ``rpent operator`` uses.

    ros2 run rpent_twins operator_node --ros-args -r __ns:=/ -p twin_port:=8767

* a verdict request (``request_operator_verdict``) is answered from the twin's success
  check of its current task (the twin port's ``judge``), with what it saw as the comment;
* a scene reset (``request_scene_reset``) re-places the items from the next seed (the twin
  port's ``reset_scene``) and answers that the scene is back; the robot then starts a new
  episode.

A person can take over: leave this node out (the bring-up's ``operator:=human``) and answer
with ``rpent operator`` or the Foxglove layout's operator panel.
"""
from __future__ import annotations

import threading

from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node

from rpent_contract import params
from rpent_contract.client import ContractTimeout, ask
from rpent_contract.names import ANSWER_SERVICE, REQUESTS_TOPIC
from rpent_contract.node_main import run_node
from rpent_contract.qos import LATCHED_QOS
from rpent_interfaces.msg import OperatorRequest, OperatorRequests
from rpent_interfaces.srv import AnswerOperator

from .settings import OperatorSettings
from .twin_port import TwinPortError, wait_for_twin

ANSWERED_BY = "the twin's operator"


class TwinOperatorNode(Node):
    def __init__(self):
        super().__init__("twin_operator")
        settings = params.declare_settings(self, OperatorSettings)
        self.timeout = settings.answer_timeout
        self.twin = wait_for_twin(settings.twin_host, settings.twin_port,
                                  settings.startup_timeout)
        group = ReentrantCallbackGroup()
        self._answer = self.create_client(AnswerOperator, ANSWER_SERVICE, callback_group=group)
        self._seen: set = set()
        self._lock = threading.Lock()
        self.create_subscription(OperatorRequests, REQUESTS_TOPIC, self._on_requests,
                                 LATCHED_QOS, callback_group=group)
        self.get_logger().info(f"the twin's operator answers "
                               f"{self.resolve_topic_name(REQUESTS_TOPIC)} from the twin on "
                               f"{settings.twin_host}:{settings.twin_port}")

    def _on_requests(self, msg: OperatorRequests) -> None:
        for request in msg.pending:
            with self._lock:
                if request.request_id in self._seen:
                    continue
                self._seen.add(request.request_id)
            try:
                success, comment = self._decide(request)
                answer = ask(self._answer, AnswerOperator.Request(
                    request_id=request.request_id, success=success,
                    comment=f"{ANSWERED_BY}: {comment}"), self.timeout, ANSWER_SERVICE)
            except (TwinPortError, ContractTimeout) as err:
                self.get_logger().error(f"request {request.request_id} left unanswered: {err}; "
                                        "answer it with 'rpent operator'")
                continue
            log = self.get_logger().info if answer.accepted else self.get_logger().warning
            log(f"{request.request_id}: {answer.message} ({comment})")

    def _decide(self, request) -> tuple[bool, str]:
        if request.kind == OperatorRequest.KIND_VERDICT:
            judged = self.twin.call("judge")
            return bool(judged["achieved"]), judged["why"]
        scene = self.twin.call("reset_scene")
        return True, f"items re-placed for task {scene['task']} from seed {scene['seed']}"

    def shutdown(self) -> None:
        self.twin.close()


def main(args=None):
    raise SystemExit(run_node(TwinOperatorNode, name="twin_operator", args=args, num_threads=2,
                              close=TwinOperatorNode.shutdown,
                              startup_errors=(ValueError, TwinPortError)))


if __name__ == "__main__":
    main()
