"""``rpent operator``: answer what the agent asks the person at the robot.

    rpent operator                       # wait for requests and prompt for each answer
    rpent operator list                  # what is waiting now
    rpent operator answer yes            # answer the request that is waiting
    rpent operator answer no --comment "the can fell off" --id 3fa2c1d0
    rpent operator answer done --wait 300   # wait up to 300 s for a request, then answer it

``yes`` / ``done`` answer a verdict request "the task is achieved" and a scene-reset
request "the scene is put back"; ``no`` the opposite. ``--namespace`` names the robot
(as in the bring-ups' ``namespace:=``); the ROS domain is ``ROS_DOMAIN_ID``'s.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time

YES = ("yes", "y", "done", "success", "ok")
NO = ("no", "n", "failure", "failed", "not")


def _parse_answer(word: str) -> bool:
    word = word.strip().lower()
    if word in YES:
        return True
    if word in NO:
        return False
    raise ValueError(f"answer '{word}' is neither yes ({', '.join(YES)}) nor no "
                     f"({', '.join(NO)})")


class OperatorConsole:
    """The robot's pending requests (``operator/requests``) and its ``operator/answer``."""

    def __init__(self, namespace: str):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        from rpent_contract.client import spin_in_thread
        from rpent_contract.qos import LATCHED_QOS
        from rpent_contract.names import ANSWER_SERVICE, REQUESTS_TOPIC
        from rpent_interfaces.msg import OperatorRequests
        from rpent_interfaces.srv import AnswerOperator

        from rclpy.signals import SignalHandlerOptions

        # Ctrl-C must reach the prompt as KeyboardInterrupt, not only stop rclpy.
        rclpy.init(args=[], signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node("rpent_operator", namespace=namespace,
                                      use_global_arguments=False)
        self._changed = threading.Condition()
        self.pending: list = []
        self.heard = False  # whether the robot's request list has arrived at all
        self.node.create_subscription(OperatorRequests, REQUESTS_TOPIC, self._on_requests,
                                      LATCHED_QOS)
        self._answer = self.node.create_client(AnswerOperator, ANSWER_SERVICE)
        self._answer_type = AnswerOperator
        self._executor = SingleThreadedExecutor()
        self._executor.add_node(self.node)
        self._spin = spin_in_thread(self._executor, "operator")

    def _on_requests(self, msg) -> None:
        with self._changed:
            self.pending, self.heard = list(msg.pending), True
            self._changed.notify_all()

    def wait_for(self, predicate, timeout) -> bool:
        """Wait until ``predicate(self)`` holds; ``timeout`` s, None = for ever."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout)

    def answer(self, request_id: str, success: bool, comment: str, timeout: float = 10.0):
        from rpent_contract.client import wait_future

        if not self._answer.wait_for_service(timeout_sec=timeout):
            raise TimeoutError(f"the robot's {self._answer.srv_name} service is not available; "
                               "check ROS_DOMAIN_ID and --namespace (ros2 service list)")
        # Not asked again when no reply comes: a second answer would find the request gone
        # and report a failure for an answer that was taken.
        return wait_future(self._answer.call_async(self._answer_type.Request(
            request_id=request_id, success=success, comment=comment)), timeout,
            self._answer.srv_name)

    def close(self) -> None:
        import rclpy

        self._executor.shutdown()
        self._spin.join(5)
        self.node.destroy_node()
        rclpy.try_shutdown()


def describe(request) -> str:
    from rpent_interfaces.msg import OperatorRequest

    kind = "verdict" if request.kind == OperatorRequest.KIND_VERDICT else "scene reset"
    left = request.deadline.sec + request.deadline.nanosec * 1e-9 - time.time()
    return f"[{kind} {request.request_id}] {request.text} (times out in {max(0, left):.0f} s)"


def _list(console: OperatorConsole, opts) -> int:
    if not console.wait_for(lambda c: c.heard, opts.wait):
        print(f"no robot answered on {console.node.get_namespace()} within {opts.wait:g} s; "
              "check ROS_DOMAIN_ID and --namespace", file=sys.stderr)
        return 1
    for request in console.pending:
        print(describe(request))
    if not console.pending:
        print("nothing is waiting for the operator")
    return 0


def _answer(console: OperatorConsole, opts) -> int:
    success = _parse_answer(opts.answer)
    wanted = (lambda c: any(r.request_id == opts.id for r in c.pending)) if opts.id \
        else (lambda c: len(c.pending) > 0)
    if opts.wait > 0:
        print(f"waiting up to {opts.wait:g} s for a request...", file=sys.stderr, flush=True)
    if not console.wait_for(wanted, max(opts.wait, 2.0)):
        print(f"no request {opts.id or ''} is waiting for the operator"
              f"{' after ' + format(opts.wait, 'g') + ' s' if opts.wait else ''}; "
              "see 'rpent operator list'", file=sys.stderr)
        return 1
    request_id = opts.id or console.pending[0].request_id
    reply = console.answer(request_id, success, opts.comment)
    print(reply.message, file=sys.stdout if reply.accepted else sys.stderr)
    return 0 if reply.accepted else 1


def _interactive(console: OperatorConsole, opts) -> int:
    from rpent_interfaces.msg import OperatorRequest

    verdict_kind = OperatorRequest.KIND_VERDICT
    print(f"waiting for requests from the robot on {console.node.get_namespace()} "
          "(Ctrl-C to quit)", flush=True)
    answered: set = set()
    while True:
        console.wait_for(lambda c: any(r.request_id not in answered for r in c.pending), None)
        request = next(r for r in list(console.pending) if r.request_id not in answered)
        print(describe(request), flush=True)
        prompt = "task achieved? [y/n] + comment: " if request.kind == verdict_kind \
            else "scene put back? [y=done/n] + comment: "
        while True:
            word, _, comment = input(prompt).strip().partition(" ")
            try:
                success = _parse_answer(word)
                break
            except ValueError as err:
                print(err, flush=True)
        reply = console.answer(request.request_id, success, comment.strip())
        answered.add(request.request_id)
        print(reply.message, flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="rpent operator", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--namespace", "-n", default="", help="the robot's namespace")
    sub = p.add_subparsers(dest="command")
    ls = sub.add_parser("list", help="print the requests waiting now")
    ls.add_argument("--wait", type=float, default=5.0,
                    help="s to wait for the robot's request list (default 5)")
    an = sub.add_parser("answer", help="answer a waiting request")
    an.add_argument("answer", help="yes/done (achieved, put back) or no")
    an.add_argument("--id", default="", help="the request (default: the one waiting)")
    an.add_argument("--comment", default="", help="words passed back to the agent")
    an.add_argument("--wait", type=float, default=0.0,
                    help="s to wait for a request to come (default 0: it must be waiting)")
    opts = p.parse_args(argv)
    if opts.command == "answer":
        try:
            _parse_answer(opts.answer)
        except ValueError as err:
            p.error(str(err))
    console = OperatorConsole(opts.namespace)
    try:
        run = {"list": _list, "answer": _answer}.get(opts.command, _interactive)
        return run(console, opts)
    except (KeyboardInterrupt, EOFError):
        return 130
    except TimeoutError as err:
        print(err, file=sys.stderr)
        return 1
    finally:
        console.close()


if __name__ == "__main__":
    sys.exit(main())
