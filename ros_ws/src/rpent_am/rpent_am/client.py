"""ActionModelClient: ``predict`` / ``get_model_meta`` / ``reset`` as blocking Python calls.

Every chunk that comes back is checked (shape, finite values, bounds, control space)
against the robot's declared control spaces before anyone can send it to the robot.
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np
from action_msgs.msg import GoalStatus

from rpent_contract.client import ActionClient, ContractTimeout, GoalRun, ask
from rpent_contract.control_space import ControlSpaceSpec, chunk_to_array
from rpent_contract.validation import GoalRejected, check_chunk
from rpent_interfaces.action import Predict
from rpent_interfaces.srv import GetModelMeta, ResetPolicy


class IncompatibleModel(ValueError):
    """The model's action space is not one the robot accepts."""


class ChunkRejected(ValueError):
    """A chunk from the model failed the client-side checks; it must not reach the robot."""


def check_compatible(meta: GetModelMeta.Response, robot_info) -> ControlSpaceSpec:
    """The robot's control space the model's chunks are in, or IncompatibleModel."""
    model_space = ControlSpaceSpec.from_msg(meta.action_space)
    for space in robot_info.control_spaces:
        if space.name == model_space.name:
            robot_space = ControlSpaceSpec.from_msg(space)
            if robot_space.dim != model_space.dim:
                raise IncompatibleModel(
                    f"model '{meta.backend}' emits {model_space.dim} values per step in "
                    f"'{model_space.name}', the robot's '{space.name}' takes {robot_space.dim}")
            return robot_space
    raise IncompatibleModel(
        f"model '{meta.backend}' ({meta.checkpoint}) emits '{model_space.name}', but the robot "
        f"({robot_info.embodiment}) accepts only "
        f"{', '.join(s.name for s in robot_info.control_spaces)}; pick a model trained for "
        "this robot's control space")


class ActionModelClient:
    """Client of one action-model node, on a node someone else spins (e.g. RobotClient.node)."""

    def __init__(self, node, model: str = "/action_model"):
        """``model``: the action-model node's full name (its endpoints live under it)."""
        self.name = "/" + model.strip("/")
        prefix = self.name + "/"
        self.node = node
        self._predict = ActionClient(node, Predict, prefix + "predict")
        self._meta = node.create_client(GetModelMeta, prefix + "get_model_meta")
        self._reset = node.create_client(ResetPolicy, prefix + "reset")
        self.robot_spaces: Optional[list] = None

    def _call(self, client, request, timeout: float, what: str):
        if not client.wait_for_service(timeout_sec=timeout):
            raise ContractTimeout(f"action-model service '{what}' not available after "
                                  f"{timeout:g} s; is the action-model node running?")
        # Both services (metadata, forgetting a session) may be asked twice.
        return ask(client, request, timeout, what)

    def meta(self, timeout: float = 10.0) -> GetModelMeta.Response:
        return self._call(self._meta, GetModelMeta.Request(), timeout, "get_model_meta")

    def connect(self, robot_info, timeout: float = 30.0) -> GetModelMeta.Response:
        """Check once that the model's chunks can drive this robot; remember its spaces."""
        meta = self.meta(timeout)
        check_compatible(meta, robot_info)
        self.robot_spaces = [ControlSpaceSpec.from_msg(s) for s in robot_info.control_spaces]
        return meta

    def reset(self, client_id: str = "", timeout: float = 10.0) -> ResetPolicy.Response:
        return self._call(self._reset, ResetPolicy.Request(client_id=client_id), timeout,
                          "reset")

    def release(self, client_id: str) -> None:
        """Ask the node to forget ``client_id``'s session, without waiting: the node may be
        gone (a caller cleaning up after it died must not hang on it)."""
        if not client_id:
            raise ValueError("release() needs a client_id; reset('') forgets every client's")
        self._reset.call_async(ResetPolicy.Request(client_id=client_id))

    def probe(self):
        """Ask for the metadata once, without waiting: the future's answer says the node
        still serves (its services answer while its inference runs)."""
        return self._meta.call_async(GetModelMeta.Request())

    def forget_probe(self, future) -> None:
        self._meta.remove_pending_request(future)

    def validate(self, chunk) -> np.ndarray:
        """The chunk as a (horizon, dim) array, or ChunkRejected; needs :meth:`connect`."""
        if self.robot_spaces is None:
            raise RuntimeError("call connect(robot_info) before validating chunks")
        try:
            actions = chunk_to_array(chunk)
            check_chunk(actions, chunk.control_space, self.robot_spaces,
                        max_horizon=max(1, actions.shape[0]))
        except (ValueError, GoalRejected) as err:
            raise ChunkRejected(f"chunk {chunk.sequence} from the model refused: {err}") from None
        return actions

    def _goal(self, instruction, mode, client_id, timeout, max_chunks=0, observation=None,
              robot_namespace=""):
        goal = Predict.Goal(instruction=instruction, mode=mode, client_id=client_id,
                            timeout=float(timeout), max_chunks=max_chunks,
                            robot_namespace=robot_namespace)
        if observation is not None:
            goal.observation = observation
        return goal

    def send(self, goal, feedback: Optional[Callable] = None, timeout: float = 10.0) -> GoalRun:
        return GoalRun.send(self._predict, goal, feedback, timeout, "predict",
                            "the action-model node")

    def predict(self, instruction: str, observation=None, client_id: str = "",
                timeout: float = 0.0, robot_namespace: str = "") -> np.ndarray:
        """One validated chunk; raises RuntimeError with the node's message on failure."""
        goal = self._goal(instruction, Predict.Goal.MODE_SINGLE, client_id, timeout,
                          observation=observation, robot_namespace=robot_namespace)
        status, result = self.send(goal).result((timeout or 60.0) + 10.0)
        if status != GoalStatus.STATUS_SUCCEEDED:
            raise RuntimeError(f"predict failed: {result.message}")
        return self.validate(result.last_chunk)

    def stream(self, instruction: str, on_chunk: Callable, max_chunks: int = 0,
               client_id: str = "", timeout: float = 0.0, robot_namespace: str = "",
               whole_feedback: bool = False) -> GoalRun:
        """Start a stream; ``on_chunk(ActionChunk)`` runs for every chunk (unvalidated), or
        with ``whole_feedback`` ``on_chunk(Predict.Feedback)``: the chunk with what the
        model foresaw along with it."""
        goal = self._goal(instruction, Predict.Goal.MODE_STREAM, client_id, timeout,
                          max_chunks, robot_namespace=robot_namespace)
        if whole_feedback:
            return self.send(goal, feedback=lambda fb: on_chunk(fb.feedback))
        return self.send(goal, feedback=lambda fb: on_chunk(fb.feedback.chunk))
