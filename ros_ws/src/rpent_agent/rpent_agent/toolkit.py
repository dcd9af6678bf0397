"""The tools the planner drives the robot with, built from what the robot and model report.

Plain Python over three objects: a :class:`~rpent_contract.client.RobotClient` (every tool
is one bounded contract call), an observer that holds the newest state and camera frames
(:mod:`rpent_agent.observer`), and optionally a ``ChunkExecutor`` for the action model.
Every call returns a :class:`ToolResult` (text, plus the current camera images unless turned
off); failures (a refused goal, a timeout, a peer that is gone) come back as readable text
with ``ok=False`` and never raise into the planner's loop.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import cv2
import numpy as np
from action_msgs.msg import GoalStatus

from rpent_contract.client import ContractTimeout
from rpent_contract.contributions import TOOLS, ContributionError, contributions
from rpent_contract.geometry import (
    quaternion_multiply,
    quaternion_to_rpy,
    rotation_angle,
    rpy_to_quaternion,
)
from rpent_contract.names import OBJECT_POSES_SERVICE

from .code_policy import CodeRunner
from .code_sandbox import PRELOADED
from .memory import MemoryDir, MemoryRefused
from .recipes import Recipe, opening_section

FINISH_STATUSES = ("success", "failure", "stuck")
# Tools that set the robot moving: when a run ends with one still in flight, it is stopped.
MOTION_TOOLS = ("move_to", "rotate_wrist", "gripper", "run_policy", "run_code")
# Asked of a person, not done by the robot: separate tools even in code mode.
OPERATOR_TOOLS = ("request_operator_verdict", "request_scene_reset")


@dataclass(frozen=True)
class CodeSettings:
    """Code-as-policy mode: where snippets are saved, and each one's limits."""
    folder: Path
    timeout: float = 120.0
    max_calls: int = 100


@dataclass
class ToolResult:
    text: str
    ok: bool = True
    images: list = field(default_factory=list)  # [(camera name, PNG bytes)]
    data: dict = field(default_factory=dict)  # structured values for scripted planners, never sent
    cameras: Optional[list] = None  # whose images to attach (None: every camera's)


@dataclass
class Tool:
    name: str
    description: str
    parameters: dict  # JSON schema of the arguments
    handler: Callable[..., ToolResult]
    images: bool = True  # attach the camera images to the result
    # The handler reports the robot's data: it waits for data measured after the call
    # before it runs (other tools with images wait after they ran, for the data they left).
    reads_robot: bool = False
    # It sets the robot moving: a run that ends while it runs stops the robot.
    moves: bool = False


@dataclass
class Timeouts:
    """Seconds each kind of tool waits for the robot before it reports a timeout; for
    move_to, gripper and run_policy, seconds without progress (a motion that goes on is
    bounded by the robot's own limits and the step budgets, not by how fast this machine
    steps it)."""
    move: float = 60.0
    gripper: float = 20.0
    policy: float = 120.0
    service: float = 10.0


@dataclass
class RunState:
    """One run_task: budgets, counters and how it ended (``finished``)."""
    instruction: str
    max_turns: int
    max_steps: int
    turns: int = 0
    tool_calls: int = 0
    steps_used: int = 0
    input_tokens: int = 0  # all of the prompt, cached parts included
    cache_read_tokens: int = 0  # of input_tokens: read from the provider's prompt cache
    cache_write_tokens: int = 0  # of input_tokens: written to it
    output_tokens: int = 0
    finished: Optional[tuple] = None  # (status, summary)
    cancel: threading.Event = field(default_factory=threading.Event)
    cancel_reason: str = "canceled by the caller"

    def end(self, status: str, summary: str) -> None:
        if self.finished is None:
            self.finished = (status, summary)

    def count_tokens(self, input_tokens, cache_read=0, cache_write=0, output_tokens=0) -> None:
        """Add a response's usage; ``input_tokens`` includes the cached parts, and a
        provider's None counts as 0."""
        self.input_tokens += input_tokens or 0
        self.cache_read_tokens += cache_read or 0
        self.cache_write_tokens += cache_write or 0
        self.output_tokens += output_tokens or 0


def _fmt(v, digits=3) -> str:
    return "[" + ", ".join(f"{x:.{digits}f}" for x in v) + "]"


def encode_png(rgb: np.ndarray) -> bytes:
    ok, buf = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
    if not ok:
        raise RuntimeError("PNG encoding failed")
    return buf.tobytes()


_NUMBER = {"type": "number"}


class Toolkit:
    def __init__(self, robot, info, observer, run: RunState, *, memory: Optional[MemoryDir] = None,
                 executor=None, model_meta=None, perception=None, skills=(),
                 timeouts: Timeouts = Timeouts(), images: bool = True,
                 listener: Callable[..., None] = lambda **_: None,
                 code: Optional[CodeSettings] = None, recipes: Sequence[Recipe] = ()):
        self.robot, self.info, self.observer, self.run = robot, info, observer, run
        self.recipes = list(recipes)  # shown in the opening
        # Every call as it ended: {"tool", "arguments", "ok", "result"}, for the run's recipe.
        self.history: list[dict] = []
        self.memory, self.executor, self.model_meta = memory, executor, model_meta
        # (Skill, its ChunkExecutor, its model's ModelMeta) for each configured skill.
        self.skills = list(skills)
        self._executors = list(dict.fromkeys(
            [e for e in [executor] + [e for _, e, _ in self.skills] if e is not None]))
        self.perception = perception
        self.timeouts, self.images, self.listener = timeouts, images, listener
        # Every tool; what the model is offered (``tools``) is all of them, or in code mode
        # run_code and the operator requests, with the rest behind robo.<tool>(...).
        self._catalog: dict[str, Tool] = {t.name: t for t in self._build()}
        self._motion_tools = set(MOTION_TOOLS) | {skill.name for skill, _, _ in self.skills} \
            | {t.name for t in self._catalog.values() if t.moves}
        self.tools: dict[str, Tool] = dict(self._catalog)
        self._code = None
        if code is not None:
            self._code = CodeRunner(
                lambda name, arguments: self.call(name, arguments, inner=True),
                [n for n in self._catalog if n not in OPERATOR_TOOLS], code.folder,
                lambda: self.run.finished is not None, code.timeout, code.max_calls)
            self.tools = {"run_code": self._run_code_tool(code)}
            self.tools.update({n: self._catalog[n] for n in OPERATOR_TOOLS})
        # Tool calls still running: an MCP client may call finish while a move_to of its
        # own is in flight, and a planner's deadline may abandon a call mid-motion.
        self._calls_lock = threading.Lock()
        self._in_flight: dict[int, dict] = {}

    # --- catalogue -----------------------------------------------------------------------
    def _build(self) -> list[Tool]:
        info = self.info
        lo, hi = info.workspace_min, info.workspace_max
        box = f"x {lo.x:.2f}..{hi.x:.2f}, y {lo.y:.2f}..{hi.y:.2f}, z {lo.z:.2f}..{hi.z:.2f} m"
        tools = [
            Tool("observe", "Look at the robot: the camera images (camera: only that one's) "
                 "and a summary of the state (end-effector pose, gripper width, episode step, "
                 "task status).",
                 {"type": "object", "properties": {
                     "camera": {"type": "string", "enum": list(info.camera_names)}}},
                 self._observe, reads_robot=True),
            Tool("move_to", f"Move the end effector (the point between the fingertips) in a "
                 f"straight bounded-speed motion to a position in the {info.base_frame} frame "
                 f"(workspace: {box}). Give rpy (roll, pitch, yaw in rad, fixed x-y-z axes) to "
                 "also rotate the hand; without it only the position is controlled. Blocks "
                 "until reached or refused.",
                 {"type": "object", "properties": {
                     "x": _NUMBER, "y": _NUMBER, "z": _NUMBER,
                     "rpy": {"type": "array", "items": _NUMBER, "minItems": 3, "maxItems": 3},
                     "tolerance": {"type": "number", "description": "m, default 0.01"}},
                  "required": ["x", "y", "z"]}, self._move_to),
            Tool("rotate_wrist", "Turn the hand by angle rad (right-handed) about the end "
                 "effector's z axis (on the Panda and FR3, the direction the fingers point), "
                 "keeping its position. Blocks until turned or refused.",
                 {"type": "object", "properties": {
                     "angle": {"type": "number", "minimum": -3.14159, "maximum": 3.14159}},
                  "required": ["angle"]}, self._rotate_wrist, reads_robot=True),
            Tool("gripper", f"Open, close or set the gripper to a width in metres "
                 f"(0 = closed, {info.gripper_max_width:.3f} = open). Reports whether the "
                 "fingers stalled on an object (holding it).",
                 {"type": "object", "properties": {
                     "action": {"type": "string", "enum": ["open", "close", "width"]},
                     "width": {"type": "number", "description": "m, for action 'width'"}},
                  "required": ["action"]}, self._gripper),
            Tool("request_operator_verdict", "Ask the person running the robot whether the "
                 "task is achieved, e.g. when you believe it is done and want it confirmed. "
                 "Waits (minutes if need be) for the answer, which becomes the task's verdict.",
                 {"type": "object", "properties": {"question": {"type": "string"}},
                  "required": ["question"]}, self._request_verdict, images=False),
            Tool("request_scene_reset", "Ask the person running the robot to put the objects "
                 "back where they started (say what in note), e.g. after knocking something "
                 "over. Waits for them; then the robot resets (arm to its start pose) and a new "
                 "episode starts.",
                 {"type": "object", "properties": {"note": {"type": "string"}},
                  "required": ["note"]}, self._request_scene_reset),
            Tool("finish", "End the run: status 'success' when the task is done, 'failure' "
                 "when it cannot be done, 'stuck' when you cannot make progress; summary says "
                 "what happened.",
                 {"type": "object", "properties": {
                     "status": {"type": "string", "enum": list(FINISH_STATUSES)},
                     "summary": {"type": "string"}},
                  "required": ["status", "summary"]}, self._finish, images=False),
        ]
        if OBJECT_POSES_SERVICE in info.sim_services:
            tools.append(Tool(
                "get_object_poses", "SIMULATION ONLY: ground-truth positions (m) and "
                f"orientations (quaternion xyzw) of the task's objects in {info.base_frame}.",
                {"type": "object", "properties": {}}, self._object_poses))
        if self.perception is not None:
            cameras = list(info.camera_names)
            tools += [
                Tool("segment", "Find what a text query names (e.g. 'alphabet soup', 'basket') "
                     "in one camera's current image. Returns the image with each detection "
                     "tinted, boxed and numbered, and each detection's label, score and box "
                     "in pixels.",
                     {"type": "object", "properties": {
                         "camera": {"type": "string", "enum": cameras},
                         "query": {"type": "string"}},
                      "required": ["camera", "query"]}, self._segment, images=False),
                Tool("locate", f"Where is an object? Finds what a text query names in the "
                     f"cameras and gives its position in the {info.base_frame} frame (m: the "
                     "centre of its visible part, from depth) and its size. Objects partly "
                     "out of view are marked.",
                     {"type": "object", "properties": {
                         "query": {"type": "string"},
                         "camera": {"type": "string", "enum": cameras,
                                    "description": "only this camera; default all"}},
                      "required": ["query"]}, self._locate),
                Tool("back_project", f"Where is what a camera shows at a pixel? Gives the "
                     f"point in the {info.base_frame} frame (m) on the surface seen at pixel "
                     "(u, v) of that camera's image as the results show it: u the column from "
                     "the left edge, v the row from the top, both from 0.",
                     {"type": "object", "properties": {
                         "camera": {"type": "string", "enum": cameras},
                         "u": _NUMBER, "v": _NUMBER},
                      "required": ["camera", "u", "v"]}, self._back_project),
            ]
        if self.executor is not None:
            meta = self.model_meta
            tools.append(Tool(
                "run_policy", f"Let the action model ({meta.backend}) act on a short "
                f"instruction, e.g. 'pick up the red mug'. It runs up to max_chunks chunks of "
                f"{meta.chunk_size} steps, stopping early when the task succeeds."
                + (" The model also predicts what the cameras will see after each chunk: the "
                   "result shows its prediction for the last chunk beside the real views."
                   if meta.predicts_future else ""),
                {"type": "object", "properties": {
                    "instruction": {"type": "string"},
                    "max_chunks": {"type": "integer", "minimum": 1, "maximum": 200}},
                 "required": ["instruction", "max_chunks"]}, self._run_policy))
        for skill, executor, meta in self.skills:
            arguments = skill.arguments
            tools.append(Tool(
                skill.name, f"{skill.description} (The action model {meta.backend} acts on "
                f"'{skill.instruction}', up to {skill.max_chunks} chunks of {meta.chunk_size} "
                "steps, stopping early when the task succeeds.)",
                {"type": "object", "properties": {a: {"type": "string"} for a in arguments},
                 "required": list(arguments)},
                self._skill_handler(skill, executor)))
        if self.memory is not None:
            tools += [
                Tool("memory_list", "List the files in your memory folder.",
                     {"type": "object", "properties": {}}, self._memory_list, images=False),
                Tool("memory_read", "Read a file from your memory folder.",
                     {"type": "object", "properties": {"path": {"type": "string"}},
                      "required": ["path"]}, self._memory_read, images=False),
                Tool("memory_write", "Write (replace) a text file in your memory folder.",
                     {"type": "object", "properties": {"path": {"type": "string"},
                                                       "content": {"type": "string"}},
                      "required": ["path", "content"]}, self._memory_write, images=False),
            ]
        names = [t.name for t in tools]
        clash = sorted({skill.name for skill, _, _ in self.skills if names.count(skill.name) > 1})
        if clash:
            raise ValueError(f"skills named as the agent's own tools: {', '.join(clash)}; "
                             "rename them in skills_file")
        return tools + self._contributed_tools(set(names))

    def _contributed_tools(self, taken: set) -> list[Tool]:
        """The tools installed packages add for this robot (entry point group
        ``rpent.tools``: a function of this toolkit returning Tools, none where they do not
        apply). Their calls take the same path as the built-in tools'."""
        tools = []
        for each in contributions(TOOLS):
            try:
                provided = list(each.value(self))
            except Exception as err:  # noqa: BLE001 - a third party's code, named below
                raise ContributionError(f"{each} failed to make its tools: "
                                        f"{type(err).__name__}: {err}") from err
            for tool in provided:
                if not isinstance(tool, Tool):
                    raise ContributionError(f"{each} returned a {type(tool).__name__}, not an "
                                            "rpent_agent.toolkit.Tool")
                if tool.name in taken:
                    raise ContributionError(f"{each} adds a tool named '{tool.name}', which "
                                            "exists already: rename it in that package")
                taken.add(tool.name)
                tools.append(tool)
        return tools

    def _run_code_tool(self, code: CodeSettings) -> Tool:
        def signature(tool: Tool) -> str:
            props, required = tool.parameters["properties"], tool.parameters.get("required", [])
            args = [n if n in required else f"{n}=None" for n in props]
            return f"robo.{tool.name}({', '.join(args)}): {tool.description.split('. ')[0]}."

        api = "\n".join(signature(t) for n, t in self._catalog.items()
                        if n not in OPERATOR_TOOLS)
        return Tool(
            "run_code", "Run Python that drives the robot. Call the robot's tools as functions "
            "with keyword arguments; each returns a result with .ok, .text (what the tool "
            "says) and .data (its values, e.g. .data['position']). Variables persist between "
            f"snippets; print what you want to read back. A snippet may take {code.timeout:g} "
            f"s and {code.max_calls} robot calls. Modules: {', '.join(PRELOADED)} (np and "
            "math, json, random are imported already); files, network and processes are not "
            "there. End the run with robo.finish(status=..., summary=...); ask the operator "
            "with the separate tools.\n" + api,
            {"type": "object", "properties": {"code": {"type": "string"}},
             "required": ["code"]}, self._run_code)

    def _run_code(self, code) -> ToolResult:
        ok, text = self._code.run(str(code))
        return ToolResult(text, ok=ok)

    def close(self) -> None:
        """Release what the run held (the code sandbox)."""
        if self._code is not None:
            self._code.close()

    # --- dispatch ------------------------------------------------------------------------
    def call(self, name: str, arguments: Optional[dict] = None, *,
             inner: bool = False) -> ToolResult:
        """Run one tool; never raises. ``inner``: a call from a code snippet (any tool of the
        catalogue; the snippet gets no images)."""
        arguments = dict(arguments or {})
        run = self.run
        self.listener(kind="tool_call", tool_name=name, arguments=arguments)
        start = time.monotonic()
        tool = (self._catalog if inner else self.tools).get(name)
        with self._calls_lock:
            refusal = self._refusal(name, tool)
            if refusal is None:
                run.tool_calls += 1
                call = {"tool": name, "arguments": arguments, "done": threading.Event()}
                self._in_flight[id(call)] = call
        if refusal is not None:
            result = refusal
        else:
            if tool.reads_robot:
                self.observer.catch_up()
            try:
                result = self._invoke(tool, arguments)
            finally:
                with self._calls_lock:
                    del self._in_flight[id(call)]
            call["result"] = result
            call["done"].set()
            if run.max_steps and run.steps_used >= run.max_steps and run.finished is None:
                run.end("max_turns", f"episode step budget of {run.max_steps} steps used "
                        f"({run.steps_used} steps)")
                result.text += (f"\nThe episode step budget ({run.max_steps}) is used up; "
                                "the run ends here.")
            if tool.images and not inner:
                # The robot's data (state, images) is what these results are about: never
                # present an old one as current. Only a warning: a loaded machine may delay
                # the state for a while, and the motion tools notice a robot that is gone.
                if not tool.reads_robot:
                    self.observer.catch_up()
                stale = self.observer.staleness()
                if stale is not None:
                    result.text = f"WARNING: {stale}.\n{result.text}"
                if self.images:
                    result.images = self._camera_pngs(result.cameras) + result.images
        duration = time.monotonic() - start
        with self._calls_lock:
            self.history.append({"tool": name, "arguments": arguments, "ok": result.ok,
                                 "result": result.text})
        self.listener(kind="tool_result", tool_name=name, text=result.text, ok=result.ok,
                      duration=duration, images=len(result.images), data=result.data)
        return result

    def moves(self, name: str) -> bool:
        """Whether the tool ``name`` moves the robot."""
        return name in self._motion_tools

    def _refusal(self, name: str, tool: Optional[Tool]) -> Optional[ToolResult]:
        if self.run.finished is not None:
            return ToolResult(f"the run has already ended ({self.run.finished[0]}); no more "
                              "tools can be called", ok=False)
        if self.run.cancel.is_set():
            return ToolResult("the run was canceled; stop calling tools", ok=False)
        if tool is None:
            return ToolResult(f"unknown tool '{name}'; available: {', '.join(self.tools)}",
                              ok=False)
        return None

    def end_calls(self, timeout: float) -> list[dict]:
        """Once the run has ended: stop every motion still in flight and wait (up to
        ``timeout`` s) for every tool call still running. Returns what each one was and how
        it ended, for the run's files."""
        with self._calls_lock:
            pending = list(self._in_flight.values())
        deadline = time.monotonic() + timeout
        stop_note = None
        # A goal sent just after a stop would still run: stop again while a motion is left.
        while any(c["tool"] in self._motion_tools and not c["done"].is_set() for c in pending):
            for each in self._executors:
                each.cancel()
            stop_note = self._stop_robot(max(0.1, min(self.timeouts.service,
                                                      deadline - time.monotonic())))
            for call in pending:
                call["done"].wait(max(0.0, min(1.0, deadline - time.monotonic())))
            if time.monotonic() >= deadline:
                break
        for call in pending:
            call["done"].wait(max(0.0, deadline - time.monotonic()))
        ended = []
        for call in pending:
            result = call.get("result")
            stopped = stop_note is not None and call["tool"] in self._motion_tools
            entry = {"tool": call["tool"], "arguments": call["arguments"],
                     "ended_by": "stopped" if stopped else "waited for"}
            if stopped:
                entry["stop"] = stop_note
            if result is None:
                entry["outcome"] = (f"still running {timeout:g} s after the run ended; check "
                                    "the robot (observe, or its stop service)")
            else:
                entry["outcome"], entry["ok"] = result.text, result.ok
            self.listener(kind="run_end_call", tool_name=call["tool"],
                          arguments=call["arguments"], text=entry["outcome"],
                          ok=result is not None and result.ok, ended_by=entry["ended_by"])
            ended.append(entry)
        return ended

    def _invoke(self, tool: Tool, arguments: dict) -> ToolResult:
        try:
            return tool.handler(**arguments)
        except TypeError as err:
            return ToolResult(f"{tool.name}: bad arguments {json.dumps(arguments)} ({err}); "
                              f"expected {json.dumps(tool.parameters['properties'])}", ok=False)
        except (MemoryRefused, ValueError) as err:
            return ToolResult(f"{tool.name} refused: {err}", ok=False)
        except ContractTimeout as err:
            # A canceled run has already told the robot to stop, within its caller's time.
            stopped = ("The run was canceled and the robot told to stop."
                       if self.run.cancel.is_set() else self._stop_robot())
            return ToolResult(f"{tool.name} timed out: {err}. {stopped}", ok=False)
        except Exception as err:  # noqa: BLE001 - a dead peer or broken driver is reported
            return ToolResult(f"{tool.name} failed: {type(err).__name__}: {err}. Check the robot "
                              "with observe before trying again.", ok=False)

    def _stop_robot(self, timeout: Optional[float] = None) -> str:
        try:
            self.robot.stop(timeout=self.timeouts.service if timeout is None else timeout)
            return "The robot was told to stop; observe before the next motion."
        except Exception as err:  # noqa: BLE001
            return f"Stopping the robot failed too ({err}); the robot may be unreachable."

    def _camera_pngs(self, cameras: Optional[list] = None) -> list:
        return [(name, encode_png(rgb)) for name, rgb in self.observer.frames().items()
                if cameras is None or name in cameras]

    def _steps_left(self) -> int:
        return max(0, self.run.max_steps - self.run.steps_used) if self.run.max_steps else 0

    def _count_steps(self, steps: int) -> None:
        self.run.steps_used += int(steps)

    # --- tools ---------------------------------------------------------------------------
    def state_summary(self) -> str:
        state, task = self.observer.state(), self.observer.task()
        lines = [f"task: {self.run.instruction}"]
        if task is not None:
            cap = f"/{task.max_steps}" if task.max_steps else ""
            done = "; episode done" if task.done else ""
            lines.append(f"episode step {task.step}{cap}; task success: "
                         f"{'yes' if task.success else 'no'}{done}")
        if state is not None:
            p, q = state.ee_pose.position, state.ee_pose.orientation
            mode = {0: "idle", 1: "moving", 2: "stopped", 3: "error"}.get(state.mode, "?")
            lines.append(f"end effector: position {_fmt([p.x, p.y, p.z])} m, rpy "
                         f"{_fmt(quaternion_to_rpy([q.x, q.y, q.z, q.w]), 2)} rad "
                         f"({self.info.base_frame}); gripper {state.gripper_width:.3f} m; "
                         f"mode {mode}")
            if state.errors:
                lines.append("faults: " + "; ".join(state.errors))
        if self.run.max_steps:
            lines.append(f"agent step budget left: {self._steps_left()}")
        return "\n".join(lines)

    def _pose_data(self) -> dict:
        state = self.observer.state()
        if state is None:
            return {}
        p, q = state.ee_pose.position, state.ee_pose.orientation
        return {"position": [p.x, p.y, p.z], "orientation": [q.x, q.y, q.z, q.w],
                "gripper_width": state.gripper_width}

    def _observe(self, camera=None) -> ToolResult:
        if camera is not None and camera not in self.info.camera_names:
            raise ValueError(f"unknown camera '{camera}'; cameras: "
                             f"{', '.join(self.info.camera_names)}")
        return ToolResult(self.state_summary(), data=self._pose_data(),
                          cameras=None if camera is None else [camera])

    def _rotate_wrist(self, angle) -> ToolResult:
        angle = float(angle)
        if not np.isfinite(angle) or abs(angle) > np.pi:
            raise ValueError(f"angle {angle} rad is not within [-pi, pi]; turn further in "
                             "two calls")
        state = self.observer.state()
        if state is None:
            raise ValueError("no robot_state has arrived yet; observe, then try again")
        p, q = state.ee_pose.position, state.ee_pose.orientation
        start = [q.x, q.y, q.z, q.w]
        target = quaternion_multiply(start, [0.0, 0.0, np.sin(angle / 2), np.cos(angle / 2)])
        result = self._move_to(p.x, p.y, p.z, rpy=list(quaternion_to_rpy(target)))
        if "orientation" in result.data:
            turned = rotation_angle(start, result.data["orientation"])
            result.text = f"turned {turned:.3f} rad of {abs(angle):.3f}: {result.text}"
        return result

    def _move_to(self, x, y, z, rpy=None, tolerance=None) -> ToolResult:
        options = {}
        if tolerance is not None:
            options["position_tolerance"] = float(tolerance)
        orientation = None
        if rpy is not None:
            if len(rpy) != 3:
                raise ValueError("rpy must be 3 numbers (roll, pitch, yaw in rad)")
            orientation = rpy_to_quaternion(*map(float, rpy))
            options["orientation_tolerance"] = 0.1
        status, result = self.robot.move_to([float(x), float(y), float(z)], orientation,
                                            timeout=self.timeouts.move, **options)
        self._count_steps(result.steps)
        fp = result.final_pose
        where = (f"hand at {_fmt([fp.position.x, fp.position.y, fp.position.z])} m, position "
                 f"error {result.position_error * 1000:.1f} mm, {result.steps} steps")
        data = {"position": [fp.position.x, fp.position.y, fp.position.z],
                "orientation": [fp.orientation.x, fp.orientation.y, fp.orientation.z,
                                fp.orientation.w], "reached": result.reached}
        if status == GoalStatus.STATUS_SUCCEEDED and result.reached:
            return ToolResult(f"reached the target; {where}", data=data)
        if status == GoalStatus.STATUS_ABORTED and result.steps == 0:
            return ToolResult(f"move_to refused by the robot: {result.message}. Choose a target "
                              "inside the workspace and limits.", ok=False, data=data)
        return ToolResult(f"move_to did not reach the target ({_status(status)}): "
                          f"{result.message}; {where}", ok=False, data=data)

    def _gripper(self, action, width=None) -> ToolResult:
        if action == "open":
            target = self.info.gripper_max_width
        elif action == "close":
            target = 0.0
        elif action == "width":
            if width is None:
                raise ValueError("action 'width' needs width in metres")
            target = float(width)
        else:
            raise ValueError(f"action must be open, close or width, not '{action}'")
        status, result = self.robot.gripper(target, timeout=self.timeouts.gripper)
        data = {"position": result.position, "stalled": result.stalled}
        if status != GoalStatus.STATUS_SUCCEEDED:
            return ToolResult(f"gripper command failed ({_status(status)}): {result.message}",
                              ok=False, data=data)
        held = ("; the fingers stalled on something (holding an object)" if result.stalled
                else "")
        return ToolResult(f"gripper at {result.position:.3f} m (target {target:.3f}){held}",
                          data=data)

    def _object_poses(self) -> ToolResult:
        poses = self.robot.object_poses(timeout=self.timeouts.service)
        lines = [f"{name}: position {_fmt(p)} m, orientation {_fmt(q)}"
                 for name, (p, q) in poses.items()]
        return ToolResult("\n".join(lines) or "the simulator reports no objects",
                          data={"poses": poses})

    def _segment(self, camera, query) -> ToolResult:
        from rpent_perception.client import annotate

        detections, message, ok = self.perception.segment(str(camera), str(query),
                                                          self.timeouts.service)
        if not ok:
            return ToolResult(f"segment failed: {message}", ok=False)
        lines = [message] + [
            f"{i + 1}. {d.label}: score {d.score:.2f}, box x {x} y {y} w {w} h {h} px, "
            f"{int(d.mask.sum())} px"
            for i, (d, (x, y, w, h)) in enumerate((d, d.box()) for d in detections)]
        images = []
        frame = self.observer.frames().get(camera)
        if frame is not None and self.images:
            images = [(f"{camera} segmentation", encode_png(annotate(frame, detections)))]
        return ToolResult("\n".join(lines), images=images,
                          data={"detections": detections})

    def _locate(self, query, camera="") -> ToolResult:
        objects, message = self.perception.locate(str(query), str(camera or ""),
                                                  self.timeouts.service)
        if not objects:
            return ToolResult(f"locate found nothing: {message}", ok=False,
                              data={"objects": []})
        lines = [message] + [
            f"{o.label}: position {_fmt(o.position)} m, size {_fmt(o.extent, 2)} m "
            f"(score {o.score:.2f}, seen by {o.camera}"
            f"{'; partly out of view, so the centre is of the part seen' if o.partial else ''})"
            for o in objects]
        return ToolResult("\n".join(lines), data={"objects": objects})

    def _back_project(self, camera, u, v) -> ToolResult:
        point, message = self.perception.back_project(str(camera), float(u), float(v),
                                                      self.timeouts.service)
        if point is None:
            return ToolResult(f"back_project could not tell: {message}", ok=False)
        return ToolResult(f"{camera} pixel ({float(u):g}, {float(v):g}) is at {_fmt(point)} m "
                          f"in {self.info.base_frame}", data={"position": point.tolist()})

    def _run_policy(self, instruction, max_chunks) -> ToolResult:
        return self._policy(self.executor, str(instruction), int(max_chunks))

    def _skill_handler(self, skill, executor) -> Callable[..., ToolResult]:
        def run(**arguments) -> ToolResult:
            return self._run_skill(skill, executor, arguments)
        return run

    def _run_skill(self, skill, executor, arguments: dict) -> ToolResult:
        instruction = skill.instruction_for(arguments)
        result = self._policy(executor, instruction, skill.max_chunks)
        result.text = f"{skill.name} ('{instruction}'): {result.text}"
        return result

    def _policy(self, executor, instruction: str, max_chunks: int) -> ToolResult:
        steps = self._steps_left() if self.run.max_steps else 10_000
        if steps <= 0:
            return ToolResult("no episode steps left for the policy", ok=False)
        report = executor.run(instruction, max_steps=steps, max_chunks=max_chunks,
                              timeout=self.timeouts.policy)
        self._count_steps(report.steps_executed)
        text = (f"policy ended: {report.outcome} ({report.message}); {report.steps_executed} "
                f"steps from {report.chunks_executed}/{report.chunks_received} chunks; task "
                f"success: {'yes' if report.task_success else 'no'}")
        ok = report.outcome in ("task_success", "chunks_done", "max_steps")
        # A world-action model's expectation of the last chunk, beside the cameras' real
        # view after it (attached to every motion tool's result), for the model to compare.
        images = [(f"{camera} as the policy predicted it", encode_png(rgb))
                  for camera, rgb in report.foreseen_images.items()] if self.images else []
        if images:
            text += ("; the policy's predicted views after its last chunk are attached "
                     "(compare them with the cameras' real views)")
        if report.foreseen_value is not None:
            text += f"; the policy's value estimate: {report.foreseen_value:.3f}"
        return ToolResult(text, ok=ok, images=images,
                          data={"outcome": report.outcome, "task_success": report.task_success,
                                "foreseen_value": report.foreseen_value})

    def _request_verdict(self, question) -> ToolResult:
        _status, result = self.robot.request_verdict(
            str(question), idle_timeout=self.timeouts.service * 6, cancel=self.run.cancel)
        comment = f" ({result.comment})" if result.comment else ""
        data = {"answered": result.answered, "success": result.success}
        if not result.answered:
            return ToolResult(f"no verdict: {result.message}", ok=False, data=data)
        verdict = "the task is achieved" if result.success else "the task is NOT achieved"
        return ToolResult(f"{result.answered_by} says {verdict}{comment}", data=data)

    def _request_scene_reset(self, note) -> ToolResult:
        _status, result = self.robot.request_scene_reset(
            str(note), idle_timeout=self.timeouts.service * 6, cancel=self.run.cancel)
        if not result.done:
            return ToolResult(f"scene not reset: {result.message}", ok=False)
        comment = f" ({result.comment})" if result.comment else ""
        return ToolResult(f"{result.message}{comment}; episode {result.episode_id}")

    def _finish(self, status, summary) -> ToolResult:
        if status not in FINISH_STATUSES:
            raise ValueError(f"status must be one of {', '.join(FINISH_STATUSES)}")
        self.run.end(status, str(summary))
        return ToolResult(f"run finished: {status}")

    def _memory_list(self) -> ToolResult:
        files = self.memory.list()
        return ToolResult("\n".join(files) if files else "the memory folder is empty")

    def _memory_read(self, path) -> ToolResult:
        return ToolResult(self.memory.read(str(path)))

    def _memory_write(self, path, content) -> ToolResult:
        n = self.memory.write(str(path), str(content))
        return ToolResult(f"wrote {n} bytes to {path}")

    def cancel(self, reason: str = "canceled by the caller",
               timeout: Optional[float] = None) -> None:
        """Stop the run: no more tools, the policy and the robot stop."""
        self.run.cancel_reason = reason
        self.run.cancel.set()
        for each in self._executors:
            each.cancel()
        self._stop_robot(timeout)

    def opening(self) -> str:
        """What a run's first message says: the task, what its memory folder holds, and the
        recipes of earlier runs of similar tasks."""
        text = f"Task: {self.run.instruction}"
        index = self.memory.index() if self.memory is not None else ""
        if index:
            text += ("\n\nYour memory folder holds, from earlier runs (newest first; "
                     f"memory_read opens a file):\n{index}")
        recipes = opening_section(self.recipes)
        return text + f"\n\n{recipes}" if recipes else text

    def describe(self) -> list[dict[str, Any]]:
        return [{"name": t.name, "description": t.description, "parameters": t.parameters}
                for t in self.tools.values()]


def _status(status: int) -> str:
    return {GoalStatus.STATUS_ABORTED: "aborted", GoalStatus.STATUS_CANCELED: "canceled",
            GoalStatus.STATUS_SUCCEEDED: "succeeded"}.get(status, f"status {status}")
