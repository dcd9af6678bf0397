"""The offline planner: no LLM. Follows a plan file (a list of tool calls) or, without
one, the pick-and-place heuristic: let the action model try first where there is one, and
whether it stops short or fails (refused chunks, a model that goes away), find the two
objects the instruction names (among the simulator's objects, or with the perception tools
where object poses are withheld), run the shared pick-and-place plan through the tools,
then read the verdict (the simulator's, or the operator's where the robot gives none)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import yaml

from rpent_am.pick_place import (
    arm_joint_count,
    hand_orientation,
    height_scale,
    objects_in_instruction,
    phrases_in_instruction,
    pick_and_place,
    placing_base,
)

from . import PlannerConfigError


class PlanStepFailed(Exception):
    pass


def load_plan(path) -> list[dict]:
    """A YAML or JSON list of ``{tool: name, args: {...}}``."""
    path = Path(path)
    if not path.is_file():
        raise PlannerConfigError(f"plan file {path} not found; give an existing YAML/JSON file")
    steps = yaml.safe_load(path.read_text())
    if not isinstance(steps, list) or not all(
            isinstance(s, dict) and isinstance(s.get("tool"), str)
            and isinstance(s.get("args", {}), dict) for s in steps):
        raise PlannerConfigError(
            f"plan file {path} must be a list of {{tool: <name>, args: {{...}}}} entries")
    return steps


class ScriptedPlanner:
    """``policy_chunks``: chunks the action model may execute before the heuristic takes
    over (each runs at least 5 steps)."""
    name = "scripted"

    def __init__(self, plan_file: str = "", success_wait: float = 2.0, policy_chunks: int = 80):
        self.plan = load_plan(plan_file) if plan_file else None
        self.success_wait = success_wait
        self.policy_chunks = policy_chunks

    def _step(self, toolkit, tool: str, args: dict, must_succeed: bool = True):
        run = toolkit.run
        if run.turns >= run.max_turns:
            run.end("max_turns", f"used all {run.max_turns} turns without finishing")
            raise PlanStepFailed("max turns")
        run.turns += 1
        toolkit.listener(kind="turn", text=f"{tool} {json.dumps(args)}")
        result = toolkit.call(tool, args)
        if run.finished is not None or run.cancel.is_set():
            raise PlanStepFailed(tool)
        if not result.ok and must_succeed:
            run.end("failure", f"step {run.turns} ({tool}) failed: {result.text}")
            raise PlanStepFailed(tool)
        return result

    def run(self, toolkit) -> None:
        try:
            if self.plan is not None:
                for step in self.plan:
                    self._step(toolkit, step["tool"], step.get("args", {}))
                toolkit.run.end("failure", "the plan file ended without calling finish")
            else:
                self._pick_and_place(toolkit)
        except PlanStepFailed:
            pass

    def _pick_and_place(self, toolkit) -> None:
        run = toolkit.run
        if "get_object_poses" not in toolkit.tools and "locate" not in toolkit.tools:
            run.end("failure", "the scripted heuristic needs the simulator's object poses or "
                    "the perception tools (the agent's perception parameter), and this run "
                    "has neither; give a plan file (plan_file) or use an LLM planner")
            return
        start = self._step(toolkit, "observe", {})
        if "run_policy" in toolkit.tools:
            # An action model is the first thing to try; the heuristic is the fallback.
            policy = self._step(toolkit, "run_policy", {"instruction": run.instruction,
                                                        "max_chunks": self.policy_chunks},
                                must_succeed=False)
            if policy.data.get("task_success"):
                self._step(toolkit, "finish", {"status": "success", "summary":
                           "the action model carried out the task; the task reports success"})
                return
            if policy.ok and "get_object_poses" not in toolkit.tools:
                # The robot judges no success of its own: the operator judges the policy's.
                verdict = self._step(toolkit, "request_operator_verdict", {
                    "question": f"The action model ran to its end. Is the task achieved: "
                                f"'{run.instruction}'?"}, must_succeed=False)
                if verdict.data.get("success"):
                    self._step(toolkit, "finish", {"status": "success", "summary":
                               "the action model carried out the task; the operator says "
                               "it is achieved"})
                    return
            if not policy.ok:
                # The heuristic's grasp starts from an open hand, whatever the policy left.
                self._step(toolkit, "gripper", {"action": "open"})
            start = self._step(toolkit, "observe", {})
        try:
            obj, target, obj_position, target_position = self._find(toolkit)
        except ValueError as err:
            self._step(toolkit, "finish", {"status": "failure", "summary": str(err)})
            return
        # Keep the hand as it starts (pointing down), as the pick-and-place plan expects.
        orientation = hand_orientation(start.data["position"], start.data["orientation"],
                                       arm_joint_count(toolkit.info.control_spaces))

        def move(phase, position, tolerance):
            r = self._step(toolkit, "move_to", {"x": float(position[0]), "y": float(position[1]),
                                                "z": float(position[2]),
                                                "rpy": orientation(position),
                                                "tolerance": float(tolerance)})
            return np.asarray(r.data["position"])

        def grip(phase, close):
            # An opening that something stops short (a container's wall) has still let go:
            # the plan goes on, and the verdict judges where the object ended up.
            self._step(toolkit, "gripper", {"action": "close" if close else "open"},
                       must_succeed=close)
            state = toolkit.observer.state()
            p = state.ee_pose.position
            return np.array([p.x, p.y, p.z])

        info = toolkit.info
        pick_and_place(obj_position, target_position, move, grip,
                       height_scale((info.workspace_min.x, info.workspace_min.y,
                                     info.workspace_min.z),
                                    (info.workspace_max.x, info.workspace_max.y,
                                     info.workspace_max.z)))
        if "get_object_poses" not in toolkit.tools:
            # Perception found the objects, so the robot gives no verdict of its own: the
            # operator (a person, or the simulator standing in for one) judges.
            verdict = self._step(toolkit, "request_operator_verdict", {
                "question": f"I picked the {obj} and placed it in/on the {target}. Is the "
                            f"task achieved: '{run.instruction}'?"})
            achieved = verdict.data["success"]
            self._step(toolkit, "finish", {
                "status": "success" if achieved else "failure",
                "summary": f"picked {obj} and placed it in/on {target}; the operator says the "
                           f"task is {'achieved' if achieved else 'not achieved'}"})
            return
        deadline = time.monotonic() + self.success_wait
        while time.monotonic() < deadline and not self._success(toolkit):
            time.sleep(0.05)
        if self._success(toolkit):
            self._step(toolkit, "finish", {"status": "success", "summary":
                       f"picked {obj} and placed it on {target}; the task reports success"})
        else:
            self._step(toolkit, "finish", {"status": "failure", "summary":
                       f"picked {obj} and placed it on {target}, but the task does not "
                       "report success"})

    def _find(self, toolkit):
        """(object, target, object position, target position) the instruction names."""
        instruction = toolkit.run.instruction
        if "get_object_poses" in toolkit.tools:
            poses = self._step(toolkit, "get_object_poses", {}).data["poses"]
            obj, target = objects_in_instruction(instruction, poses)
            return obj, target, poses[obj][0], poses[target][0]
        obj, target = (self._step(toolkit, "locate", {"query": phrase}).data["objects"][0]
                       for phrase in phrases_in_instruction(instruction))
        return obj.label, target.label, obj.position, placing_base(target.position,
                                                                   target.extent)

    @staticmethod
    def _success(toolkit) -> bool:
        task = toolkit.observer.task()
        return bool(task is not None and task.success)
