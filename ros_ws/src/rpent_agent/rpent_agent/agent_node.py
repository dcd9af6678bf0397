"""The agent node ``agent``: serves ``~/run_task`` (and, for callers that cannot hold an
action goal, ``~/start_run`` and ``~/cancel_run``) and publishes ``~/events``.

A run: the planner (api / scripted / mcp) drives the toolkit until finish, the turn or
step budget, cancel or an error; the run folder then gets transcript.json, result.json and
episode.mp4. With the ``instruction`` parameter the node runs that task once at start-up
and exits (status 0 when the run ends in success, else 1). SIGINT or SIGTERM cancels the
run in progress, which still writes its files (status canceled); the node then exits with
128 + the signal's number (0 when it was serving with no run in progress).
"""
from __future__ import annotations

import json
import signal
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Optional

import rclpy
from rclpy.action import CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from rpent_common.processes import node_executable, wait_until
from rpent_contract import params
from rpent_contract.client import RobotClient, shutdown_executor, signals_held
from rpent_contract.contributions import ContributionError
from rpent_contract.driver import names_a_task
from rpent_contract.executors import MultiThreadedExecutor
from rpent_contract.serving import action_server
from rcl_interfaces.msg import Log
from std_msgs.msg import String
from rpent_interfaces.action import RunTask
from rpent_interfaces.msg import AgentEvent, RunStatus, TaskStatus
from rpent_interfaces.srv import StartRun
from std_srvs.srv import Trigger
from visualization_msgs.msg import MarkerArray

from . import agentlog, recipes
from .markers import SceneMarkers
from .memory import MemoryDir, lasting_folder
from .observer import RobotObserver
from .planners import choose
from .prompts import SYSTEM_PROMPT, contributed_prompt, language_prompt
from .settings import AgentSettings
from .toolkit import CodeSettings, RunState, Timeouts, Toolkit
from .transcript import Transcript
from .video import CallClips, EpisodeVideo

SUCCESS_SOURCE = {TaskStatus.SOURCE_NONE: "no verdict", TaskStatus.SOURCE_NATIVE: "native",
                  TaskStatus.SOURCE_OPERATOR: "operator"}
STATUS = {"success": RunTask.Result.STATUS_SUCCESS, "failure": RunTask.Result.STATUS_FAILURE,
          "stuck": RunTask.Result.STATUS_STUCK, "max_turns": RunTask.Result.STATUS_MAX_TURNS,
          "error": RunTask.Result.STATUS_ERROR, "canceled": RunTask.Result.STATUS_CANCELED}
EVENT_KIND = {"reasoning": AgentEvent.KIND_REASONING, "tool_call": AgentEvent.KIND_TOOL_CALL,
              "tool_result": AgentEvent.KIND_TOOL_RESULT, "finish": AgentEvent.KIND_FINISH,
              "error": AgentEvent.KIND_ERROR}


class AgentNode(Node):
    def __init__(self, **kwargs):
        super().__init__("agent", **kwargs)
        self.settings = settings = params.declare_settings(self, AgentSettings)
        self.timeouts = Timeouts(move=settings.move_timeout, gripper=settings.gripper_timeout,
                                 policy=settings.policy_timeout,
                                 service=settings.service_timeout)
        params.check_all_known(self)

        self.planner_name, why = choose(settings.planner, settings.model, settings.base_url)
        self.get_logger().info(why)
        if self.settings.policy_mode == "code" and self.planner_name == "scripted" and \
                not self.settings.plan_file:
            raise params.ParameterError(
                "policy_mode code needs a model that writes the code (planner api, mcp, "
                "claude_code or codex) or a plan_file of run_code steps; the scripted "
                "heuristic calls tools")

        self._run_lock = threading.Lock()
        self._goals: list = []  # run_task goals not yet ended, for a shutdown to wait on
        # Goals may arrive on several threads; a run's tools starting to answer notifies it.
        self._goals_lock = threading.Condition()
        self._toolkit: Optional[Toolkit] = None
        # Runs accepted whose tools do not answer yet (under _goals_lock): a client told its
        # run started may call a tool, or cancel, before the run is set up.
        self._starting = 0
        self._interrupted: Optional[str] = None  # the signal's name, once one came
        self.robot: Optional[RobotClient] = None
        try:
            with signals_held():
                self.robot = RobotClient(namespace=self.settings.robot_namespace,
                                         node_name="agent_robot_client")
            self.info = self.robot.wait_ready(self.settings.startup_timeout)
            self.observer = RobotObserver(self.robot.node, self.info.camera_names,
                                          state_rate=self.info.control_rate)
            self.observer.wait_ready(self.settings.startup_timeout)
            self.executor_, self.model_meta = self._connect_action_model(settings.action_model)
            self.skills = self._connect_skills()
            self.perception_client = self._connect_perception()
            # What installed packages add (rpent_contract.contributions): one that is broken
            # stops the node now, naming it, rather than every run.
            self._new_toolkit(RunState("", 1, 0)).close()
            contributed_prompt(self.info.embodiment)
            self.planner = self._make_planner()
        except TimeoutError as err:
            self.robot.close()  # set: constructing it raises no TimeoutError
            raise TimeoutError(
                f"{err}. Start the robot node (and the action model and perception node, if "
                "action_model / perception are set) first, and check robot_namespace "
                f"('{self.settings.robot_namespace}') and ROS_DOMAIN_ID") from None
        except BaseException:  # a signal during start-up too: the client's thread must stop
            if self.robot is not None:
                self.robot.close()
            raise
        # Latched, with room for a whole run (a turn is a reasoning event and a call and a
        # result per tool call): a viewer or recorder that starts late gets the run's log.
        history = rclpy.qos.QoSProfile(
            depth=max(1000, 10 * self.settings.max_turns),
            reliability=rclpy.qos.ReliabilityPolicy.RELIABLE,
            durability=rclpy.qos.DurabilityPolicy.TRANSIENT_LOCAL)
        self._events = self.create_publisher(AgentEvent, "~/events", history)
        # The same events as readable lines, for viewers' log panels and bags, and as the
        # states of the run's timeline (each tool call a span, then its outcome).
        self._log = self.create_publisher(Log, "~/log", history)
        self._activity = self.create_publisher(String, "~/activity", history)
        # What runs now (or how the last run ended), for a viewer's run panel.
        self._run_status = self.create_publisher(RunStatus, "~/run_status", rclpy.qos.QoSProfile(
            depth=1, reliability=rclpy.qos.ReliabilityPolicy.RELIABLE,
            durability=rclpy.qos.DurabilityPolicy.TRANSIENT_LOCAL))
        self._run_status_lock = threading.Lock()
        self._show_run(RunStatus(state="idle", task_id=-1))
        # The 3D scene of the run (target, found objects): each message is the whole scene.
        self._scene = SceneMarkers(self.info.base_frame)
        self._scene_lock = threading.Lock()  # tools may run on several threads (MCP)
        self._markers = self.create_publisher(MarkerArray, "~/markers", rclpy.qos.QoSProfile(
            depth=1, reliability=rclpy.qos.ReliabilityPolicy.RELIABLE,
            durability=rclpy.qos.DurabilityPolicy.TRANSIENT_LOCAL))
        self._server = action_server(
            self, RunTask, "~/run_task", execute_callback=self._execute,
            goal_callback=self._on_goal, cancel_callback=self._on_cancel,
            callback_group=ReentrantCallbackGroup())
        self.create_service(StartRun, "~/start_run", self._on_start_run,
                            callback_group=ReentrantCallbackGroup())
        self.create_service(Trigger, "~/cancel_run", self._on_cancel_run,
                            callback_group=ReentrantCallbackGroup())
        self.get_logger().info(
            f"agent ready: planner {self.planner_name}, robot {self.info.embodiment}, tools "
            f"{', '.join(self._new_toolkit(RunState('', 1, 0)).tools)}")

    # --- set-up --------------------------------------------------------------------------
    def _connect_action_model(self, name: str):
        if not name:
            return None, None
        from rpent_am.chunk_executor import ChunkExecutor
        from rpent_am.client import ActionModelClient

        model = ActionModelClient(self.robot.node, name)
        meta = model.connect(self.info, timeout=self.settings.startup_timeout)
        return ChunkExecutor(self.robot, model,
                             robot_namespace=self.settings.robot_namespace), meta

    def _connect_skills(self) -> list:
        """(skill, its executor, its model's meta) for each skill of skills_file."""
        if not self.settings.skills_file:
            return []
        from .skills import load_skills

        models = {"": (self.executor_, self.model_meta),
                  self.settings.action_model: (self.executor_, self.model_meta)}
        skills = []
        for skill in load_skills(self.settings.skills_file):
            if skill.model not in models:
                models[skill.model] = self._connect_action_model(skill.model)
            executor, meta = models[skill.model]
            if executor is None:
                raise params.ParameterError(
                    f"skill '{skill.name}' names no model and the agent has no action_model: "
                    "set action_model, or the skill's model in skills_file")
            skills.append((skill, executor, meta))
        return skills

    def _connect_perception(self):
        if not self.settings.perception:
            return None
        from rpent_perception.client import PerceptionClient

        client = PerceptionClient(self.robot.node, self.settings.perception)
        client.wait_ready(self.settings.startup_timeout)
        return client

    def _make_planner(self):
        prompt = SYSTEM_PROMPT + language_prompt(self.settings.language)
        if self.planner_name == "api":
            from .planners.api import ApiPlanner, build_model
            return ApiPlanner(build_model(self.settings.model, self.settings.base_url),
                              max_history_images=self.settings.max_history_images,
                              retries=self.settings.model_retries,
                              run_timeout=self.settings.run_timeout,
                              tool_retries=self.settings.tool_retries,
                              prompt_cache=self.settings.prompt_cache, system_prompt=prompt)
        if self.planner_name in ("mcp", "claude_code", "codex"):
            server = (self.settings.mcp_host, self.settings.mcp_port, self.settings.run_timeout)
            if self.planner_name == "claude_code":
                from .planners.claude_code import ClaudeCodePlanner
                planner = ClaudeCodePlanner(self._current_toolkit, self.settings.model,
                                            self.settings.base_url, *server,
                                            token=self.settings.mcp_token,
                                            system_prompt=prompt)
            elif self.planner_name == "codex":
                from .planners.codex import CodexPlanner
                planner = CodexPlanner(self._current_toolkit, self.settings.model,
                                       self.settings.base_url, *server,
                                       cli=self.settings.codex_cli,
                                       token=self.settings.mcp_token,
                                       system_prompt=prompt)
            else:
                from .planners.mcp import McpPlanner
                planner = McpPlanner(self._current_toolkit, *server, token=self.settings.mcp_token)
            url = planner.start(self._new_toolkit(RunState("", 1, 0)).describe())
            # A token made up here is printed, for clients of the operator's choosing; one
            # given is not repeated into the logs.
            token = "<mcp_token>" if self.settings.mcp_token else planner.token
            self.get_logger().info(f"MCP server for external agents at {url}" + (
                f"; every client must send the header 'Authorization: Bearer {token}'"
                if planner.token else ""))
            return planner
        from .planners.scripted import ScriptedPlanner
        return ScriptedPlanner(self.settings.plan_file, policy_chunks=self.settings.policy_chunks)

    def _memory_folder(self, run_dir: Path) -> Path:
        if self.settings.memory_dir == "auto":
            task = self.observer.task()
            return lasting_folder(self.info.embodiment, task.suite if task is not None else "")
        folder = self.settings.memory_dir
        return Path(folder).resolve() if folder else run_dir / "memory"

    def _new_toolkit(self, run, memory=None, listener=None, run_dir=None,
                     shown=()) -> Toolkit:
        code = None
        if self.settings.policy_mode == "code":
            code = CodeSettings(Path(run_dir or self.settings.output_dir) / "code_policy",
                                self.settings.code_timeout, self.settings.code_max_calls)
        return Toolkit(self.robot, self.info, self.observer, run,
                       memory=memory or MemoryDir(
                           self._memory_folder(Path(self.settings.output_dir))),
                       executor=self.executor_, model_meta=self.model_meta,
                       perception=self.perception_client, skills=self.skills,
                       timeouts=self.timeouts, images=self.settings.images, code=code,
                       recipes=shown, **({"listener": listener} if listener else {}))

    # --- action server -------------------------------------------------------------------
    def _busy(self) -> Optional[str]:
        """Why no run can start now, or None."""
        if self._interrupted:
            return f"the agent is shutting down ({self._interrupted}); start it again"
        if self._run_lock.locked():
            return "a run is in progress; cancel it first"
        return None

    def _refusal(self, instruction: str) -> Optional[str]:
        """Why a run of ``instruction`` cannot start now, or None."""
        return self._busy() or (None if instruction.strip() else "the instruction is empty")

    def _on_goal(self, goal):
        why = self._refusal(goal.instruction)
        if why:
            self.get_logger().warn(f"run_task refused: {why}")
            return GoalResponse.REJECT
        self._run_accepted()
        return GoalResponse.ACCEPT

    def _run_accepted(self) -> None:
        with self._goals_lock:
            self._starting += 1

    def _current_toolkit(self) -> Optional[Toolkit]:
        """The toolkit of the run in progress, or None; a run accepted and still being set up
        is waited for (up to RUN_SETUP_WAIT s), so its client's first call finds it."""
        with self._goals_lock:
            self._goals_lock.wait_for(lambda: self._toolkit is not None or not self._starting,
                                      RUN_SETUP_WAIT)
            return self._toolkit

    def _on_cancel(self, _goal_handle):
        toolkit = self._toolkit
        if toolkit is not None:
            threading.Thread(target=toolkit.cancel, daemon=True).start()
        return CancelResponse.ACCEPT

    # --- the same, as services (a viewer's buttons, `rpent task`) -------------------------
    def _on_start_run(self, request, response):
        why = self._busy() or (
            "max_turns must be >= 0 (0: the agent's own)" if request.max_turns < 0 else None)
        # Taken here, not in the run's thread: a second start must be refused, not queued.
        if why is None and not self._run_lock.acquire(blocking=False):
            why = "a run is in progress; cancel it first"
        if why is None:
            instruction, why = self._start_instruction(request)
            if why:
                self._run_lock.release()
        if why:
            self.get_logger().warn(f"start_run refused: {why}")
            response.accepted, response.message = False, why
            return response

        self._run_accepted()

        def run():
            try:
                _, announce = self._run(instruction, request.max_turns)
            finally:
                self._run_lock.release()
            announce()
        threading.Thread(target=run, name="run", daemon=True).start()
        response.accepted, response.message = True, f"run started: '{instruction}'"
        return response

    def _start_instruction(self, request) -> tuple:
        """(instruction, why the run cannot start) of a start_run: a task it names is reset
        to first, through the robot's own checks; no instruction: the task's."""
        if names_a_task(request.suite, request.task_id, request.init_state_index):
            try:
                reset = self.robot.reset(suite=request.suite, task_id=request.task_id,
                                         init_state_index=request.init_state_index,
                                         timeout=self.timeouts.service * 6)
            except Exception as err:  # noqa: BLE001 - a robot that does not answer
                return "", f"the robot did not reset to the task: {err}"
            if not reset.success:
                return "", f"the robot refused the task: {reset.message}"
            # The run reads its task (suite, task id: its recipes, its panel) from
            # task_status, which reaches this node on its own after the reset's answer.
            try:
                wait_until(lambda: getattr(self.observer.task(), "episode_id", None)
                           == reset.episode_id, self.timeouts.service,
                           what="the robot's task_status of the new episode")
            except TimeoutError as err:
                return "", f"{err}; is the robot still publishing task_status?"
            task_instruction = reset.instruction
        else:
            task = self.observer.task()
            task_instruction = task.instruction if task else ""
        instruction = request.instruction.strip() or task_instruction
        return instruction, None if instruction else "the instruction is empty"

    def _on_cancel_run(self, _request, response):
        toolkit = self._current_toolkit()
        if toolkit is None:
            response.success, response.message = False, "no run is in progress"
            return response
        threading.Thread(target=toolkit.cancel, args=("canceled by agent/cancel_run",),
                         daemon=True).start()
        response.success, response.message = True, "the run is being canceled"
        return response

    def interrupt(self, signal_name: str) -> bool:
        """Cancel the run in progress (the process got ``signal_name``); it still writes
        its files. True when a run was in progress."""
        self._interrupted = signal_name
        toolkit = self._toolkit
        if toolkit is not None:
            toolkit.cancel(f"interrupted by {signal_name}", INTERRUPT_STOP_TIMEOUT)
        return self._run_lock.locked()

    def wait_idle(self, executor, timeout: float) -> bool:
        """Spin ``executor`` until no run is in progress (its files written, its run_task
        goal ended) or ``timeout``."""
        deadline = time.monotonic() + timeout

        def busy():
            with self._goals_lock:
                return self._run_lock.locked() or any(g.is_active for g in self._goals)

        while busy() and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
        if busy():
            return False
        # rclpy sends an ended goal's result to the callers waiting for it from a task it
        # queues on the executor after the execute callback returns: without these spins
        # the process would exit with the result unsent.
        drain_end = min(deadline, time.monotonic() + RESULT_DRAIN_S)
        while time.monotonic() < drain_end:
            executor.spin_once(timeout_sec=0.05)
        return True

    def _execute(self, goal_handle):
        with self._goals_lock:
            self._goals = [g for g in self._goals if g.is_active] + [goal_handle]
        g = goal_handle.request

        def feedback(turn, last_tool, text):
            goal_handle.publish_feedback(RunTask.Feedback(turn=turn, last_tool=last_tool,
                                                          text=text[:2000]))

        result = self.run_task(g.instruction, g.max_turns, g.max_episode_steps, feedback,
                               run_dir=g.run_dir, accepted=True)
        if result.status == RunTask.Result.STATUS_CANCELED and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        elif result.status in (RunTask.Result.STATUS_ERROR, RunTask.Result.STATUS_CANCELED):
            # Canceled by a signal to this node, not by the caller: to the action, aborted.
            goal_handle.abort()
        else:
            goal_handle.succeed()
        return result

    # --- a run ---------------------------------------------------------------------------
    def run_task(self, instruction: str, max_turns: int = 0, max_steps: int = 0,
                 feedback=lambda *_: None, run_dir: str = "",
                 accepted: bool = False) -> RunTask.Result:
        """``accepted``: the run of a goal already counted as accepted."""
        if not accepted:
            self._run_accepted()
        with self._run_lock:
            result, announce = self._run(instruction, max_turns, max_steps, feedback, run_dir)
        announce()
        return result

    def _run(self, *args, **kwargs):
        """A run, the run lock held by the caller and the run counted as accepted
        (``_run_accepted``); arguments as ``_run_body``'s, 0 and empty: this node's settings.

        Returns the result and the function that publishes the run's finish event, for the
        caller to call once it has let go of the run lock: a viewer that starts the next run
        on that event must find the node free and the run's files written."""
        answering = []  # the run's toolkit once its tools answer
        try:
            return self._run_body(answering, *args, **kwargs)
        finally:
            if not answering:  # its set-up failed: nothing is starting any more
                self._tools_answer(None)

    def _tools_answer(self, toolkit: Optional[Toolkit]) -> None:
        with self._goals_lock:
            self._toolkit = toolkit
            self._starting -= 1
            self._goals_lock.notify_all()

    def _run_body(self, answering: list, instruction: str, max_turns: int = 0,
                  max_steps: int = 0, feedback=lambda *_: None, run_dir: str = ""):
        max_turns = max_turns or self.settings.max_turns
        max_steps = max_steps or self.settings.max_episode_steps
        run_dir = run_dir or self.settings.run_dir
        run_id = uuid.uuid4().hex[:8]
        run_dir = Path(run_dir).resolve() if run_dir else \
            Path(self.settings.output_dir).resolve() / (datetime.now().strftime("%Y%m%d-%H%M%S") +
                                               f"_{run_id}")
        run_dir.mkdir(parents=True, exist_ok=True)
        transcript = Transcript(run_dir / "transcript.json", run_id, {
            "instruction": instruction, "planner": self.planner_name, "model": self.settings.model,
            "robot": self.info.embodiment, "max_turns": max_turns, "max_episode_steps": max_steps})
        run = RunState(instruction, max_turns, max_steps)
        last = {"tool": ""}
        video = EpisodeVideo(self.info.control_rate or 20.0) if self.settings.video else None
        clips = CallClips(video, run_dir / "clips") if video is not None else None

        def listener(kind, tool_name="", arguments=None, text="", ok=True, duration=0.0,
                     data=None, publish=True, **extra):
            args_json = json.dumps(arguments) if arguments is not None else ""
            clip = None
            if clips is not None and kind in ("tool_call", "tool_result") and \
                    toolkit.moves(tool_name):
                clip = clips.start(tool_name) if kind == "tool_call" else clips.end(tool_name)
            if clip is not None:
                extra["clip"] = str(clip.relative_to(run_dir))
            transcript.event(kind=kind, turn=run.turns, tool=tool_name, arguments=arguments,
                             text=text, ok=ok, duration=round(duration, 4), **extra)
            if kind == "tool_call":
                last["tool"] = tool_name
            if kind in ("turn", "tool_call", "tool_result"):
                self._show_run(panel, turn=run.turns, tool_calls=run.tool_calls,
                               tool=tool_name if kind == "tool_call" else "")
            self._draw(kind, tool_name, arguments, data)
            if clip is not None:
                # Where to watch this motion, once the run has written its clips.
                text = f"{text}\n[clip: {run_dir / extra['clip']}]"
            if kind == "turn":
                feedback(run.turns, last["tool"], text)
            elif kind in EVENT_KIND and publish:
                self._publish(run_id, run.turns, kind, tool_name, args_json, text, ok, duration)

        memory = MemoryDir(self._memory_folder(run_dir))
        task = self.observer.task()
        suite, task_id = (task.suite, int(task.task_id)) if task is not None else ("", -1)
        known, unreadable = recipes.read_all(memory.root)
        for line in unreadable:
            self.get_logger().warning(f"memory folder {memory.root}: {line}")
        shown = recipes.best(known, instruction, suite, task_id)
        toolkit = self._new_toolkit(run, memory, listener, run_dir, shown)
        panel = RunStatus(run_id=run_id, instruction=instruction, state="running",
                          max_turns=max_turns, suite=suite, task_id=task_id,
                          run_dir=str(run_dir))
        self.get_logger().info(f"run {run_id}: '{instruction}' ({run_dir})")
        with self._scene_lock:
            self._markers.publish(self._scene.clear(self.get_clock().now().to_msg()))
        self._tools_answer(toolkit)
        answering.append(toolkit)
        self._show_run(panel)  # running: from now on the run's tools answer
        if self._interrupted:  # the signal came while the run was being set up
            toolkit.cancel(f"interrupted by {self._interrupted}", INTERRUPT_STOP_TIMEOUT)
        try:
            if self.settings.reset_episode:
                self.robot.reset(timeout=self.timeouts.service * 6)
            self.observer.video = video
            if not run.cancel.is_set():
                self.planner.run(toolkit)
        except Exception as err:  # noqa: BLE001 - a failed run is reported, the node keeps serving
            listener(kind="error", text=f"{type(err).__name__}: {err}")
            run.end("error", f"the run failed: {type(err).__name__}: {err}")
        finally:
            self._toolkit = None
            self.observer.video = None
        ended_calls = toolkit.end_calls(INTERRUPT_STOP_TIMEOUT if self._interrupted
                                        else self.timeouts.service)
        toolkit.close()
        if run.cancel.is_set():
            run.finished = ("canceled", f"{run.cancel_reason}; the robot was told to stop")
        elif run.finished is None:
            run.end("error", "the planner returned without an outcome")
        status, summary = run.finished
        task = self.observer.settled_task(self.get_clock().now().nanoseconds)
        task_success = bool(task is not None and task.success)
        source = task.success_source if task is not None else TaskStatus.SOURCE_NONE
        finish_text, finish_ok = f"{status}: {summary}", status == "success"
        listener(kind="finish", text=finish_text, ok=finish_ok, publish=False)
        result = RunTask.Result(
            status=STATUS[status], summary=summary, task_success=task_success,
            success_source=source,
            turns=run.turns, tool_calls=run.tool_calls, input_tokens=run.input_tokens,
            output_tokens=run.output_tokens, transcript_path=str(run_dir / "transcript.json"),
            run_dir=str(run_dir))
        outcome = {"status": status, "summary": summary, "task_success": task_success,
                   "success_source": SUCCESS_SOURCE[source],
                   "turns": run.turns, "tool_calls": run.tool_calls, "steps": run.steps_used,
                   "input_tokens": run.input_tokens,
                   "cached_input_tokens": run.cache_read_tokens,
                   "uncached_input_tokens": run.input_tokens - run.cache_read_tokens,
                   "cache_write_tokens": run.cache_write_tokens,
                   "output_tokens": run.output_tokens,
                   # Tool calls still running when the run ended: motions stopped, the
                   # rest waited for.
                   "calls_at_end": ended_calls,
                   "recipes_seen": [r.name for r in shown]}
        if toolkit.history and not run.cancel.is_set():
            # A canceled run was ended by someone, which says nothing about the task.
            recipe = recipes.from_calls(
                toolkit.history, instruction=instruction, robot=self.info.embodiment,
                status=status, task_success=task_success, suite=suite, task_id=task_id,
                run_id=run_id, turns=run.turns, steps=run.steps_used)
            try:
                outcome["recipe"] = recipes.write(memory, recipe)
            except (OSError, ValueError) as err:  # a lost recipe must not lose the result
                outcome["recipe_error"] = f"{type(err).__name__}: {err}"
        extra = {}
        if self.planner_name == "api":
            from .planners.api import messages_json
            extra["messages"] = messages_json(self.planner.messages)
        if video is not None:
            try:
                outcome["clips"] = [str(p.relative_to(run_dir)) for p in clips.write()]
            except Exception as err:  # noqa: BLE001 - lost clips must not lose the episode
                outcome["clips_error"] = str(err)
            try:
                path = video.write(run_dir / "episode.mp4")
                outcome["video"] = str(path) if path else None
                if video.dropped:
                    outcome["video_frames_left_out"] = video.dropped
            except Exception as err:  # noqa: BLE001 - a lost video must not lose the result
                outcome["video_error"] = str(err)
        transcript.finish(outcome, extra)
        (run_dir / "result.json").write_text(json.dumps(outcome, indent=1))
        self._show_run(panel, state=status, tool="", turn=run.turns, tool_calls=run.tool_calls)
        self.get_logger().info(f"run {run_id} ended: {status} ({summary}); task success "
                               f"{task_success}; {run.turns} turns")
        return result, lambda: self._publish(run_id, run.turns, "finish", "", "", finish_text,
                                             finish_ok, 0.0)

    def _show_run(self, panel: RunStatus, **changes) -> None:
        """Publish the run panel with ``changes``; tools of one run may end on several
        threads (MCP), and each message must be one moment's panel."""
        with self._run_status_lock:
            for field, value in changes.items():
                setattr(panel, field, value)
            panel.header.stamp = self.get_clock().now().to_msg()
            self._run_status.publish(panel)

    def _draw(self, kind, tool_name, arguments, data) -> None:
        if tool_name not in ("move_to", "locate", "get_object_poses"):
            return  # most events (turns, reasoning, other tools) draw nothing
        stamp = self.get_clock().now().to_msg()
        with self._scene_lock:  # each message the whole scene, the newest published last
            markers = None
            if kind == "tool_call" and tool_name == "move_to":
                markers = self._scene.update_target(stamp, arguments)
            elif kind == "tool_result" and data and tool_name == "locate":
                markers = self._scene.update_located(stamp, data["objects"])
            elif kind == "tool_result" and data and tool_name == "get_object_poses":
                markers = self._scene.update_known(stamp, data["poses"])
            if markers is not None:
                self._markers.publish(markers)

    def _publish(self, run_id, turn, kind, tool_name, args_json, text, ok, duration):
        msg = AgentEvent(run_id=run_id, turn=turn, kind=EVENT_KIND[kind], tool_name=tool_name,
                         arguments_json=args_json, text=text[:8000], ok=bool(ok),
                         duration=float(duration))
        now = self.get_clock().now()
        msg.header.stamp = now.to_msg()
        self._events.publish(msg)
        self._log.publish(agentlog.log_line(now.nanoseconds, msg))
        state = agentlog.activity(msg)
        if state is not None:
            self._activity.publish(String(data=state))

    def destroy_node(self):
        if hasattr(self.planner, "stop"):
            self.planner.stop()
        self.robot.close()
        return super().destroy_node()


def summary(result, dashboard_url: str = "", dashboard_layout: str = "") -> str:
    """What a person wants to read when a run ends: verdicts, files, how to watch it."""
    run_dir = Path(result.run_dir)
    status = {v: k for k, v in STATUS.items()}.get(result.status, str(result.status))
    lines = [
        "",
        f"  agent status   : {status} ({result.summary})",
        f"  task success   : {'yes' if result.task_success else 'no'} "
        f"({SUCCESS_SOURCE[result.success_source]})",
        f"  turns / tools  : {result.turns} / {result.tool_calls}",
        f"  run folder     : {run_dir}",
        f"  transcript     : {result.transcript_path}",
    ]
    if (run_dir / "episode.mp4").exists():
        lines.append(f"  video          : {run_dir / 'episode.mp4'}")
    bag = run_dir / "bag"
    if dashboard_url:
        layout = f", with the layout {dashboard_layout}" if dashboard_layout else ""
        lines.append(f"  dashboard      : {dashboard_url} (Lichtblick or Foxglove{layout})")
    if bag.exists():
        lines += [f"  bag            : {bag}",
                  f"  watch it       : {node_executable('rpent_bag', 'replay')} {bag}  (with a "
                  "dashboard running: dashboard:=true, or the rpent_foxglove bridge)"]
    elif not dashboard_url:
        lines.append("  watch it live  : add dashboard:=true (and record:=true to replay it "
                     "later), then open the dashboard's address in Lichtblick or Foxglove")
    return "\n".join(lines)


# s a tool call or a cancel_run waits for a run that is being set up to answer it.
RUN_SETUP_WAIT = 5.0

# s a stop (and the wait for the motions it ends) may take once the process is told to go:
# launch and rpent.start kill what has not exited a few seconds after their SIGINT.
INTERRUPT_STOP_TIMEOUT = 2.0
# s the run in progress may take to end and write its files after a signal.
INTERRUPT_WAIT = 8.0
# s a node told to go keeps spinning after its last run ended, to send that run's result.
RESULT_DRAIN_S = 0.5


def _raise_interrupt(signum, _frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(args=None):
    # rclpy's own handlers would shut the context down at once, and with it the robot client
    # that has to stop the arm: a signal instead cancels the run, which ends as usual.
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _raise_interrupt)
    node = executor = None
    code = 0
    try:
        try:
            node = AgentNode()
        # Bad parameters, an incompatible action model, a robot that never answered, an
        # installed package's broken contribution.
        except (ValueError, TimeoutError, ContributionError) as err:
            rclpy.logging.get_logger("agent").fatal(str(err))
            code = 2
            return code
        executor = MultiThreadedExecutor(num_threads=4)
        executor.add_node(node)
        if node.settings.instruction or node.settings.run_at_startup:
            instruction = node.settings.instruction or node.observer.task().instruction
            done = {}
            worker = threading.Thread(target=lambda: done.update(
                result=node.run_task(instruction)), daemon=True)
            worker.start()
            try:
                while worker.is_alive() and rclpy.ok():
                    executor.spin_once(timeout_sec=0.1)
            except KeyboardInterrupt as err:
                code = _interrupted(node, executor, str(err) or "SIGINT")
                worker.join(INTERRUPT_WAIT)
            result = done.get("result")
            if result is not None:
                print(summary(result, node.settings.dashboard_url,
                              node.settings.dashboard_layout), flush=True)
            if not code:
                code = 0 if result is not None and \
                    result.status == RunTask.Result.STATUS_SUCCESS else 1
        else:
            # spin_once, not spin: a signal is handled between waits, not after the next
            # callback (which may never come to an idle node).
            while rclpy.ok():
                executor.spin_once(timeout_sec=0.1)
    except KeyboardInterrupt as err:
        code = _interrupted(node, executor, str(err) or "SIGINT")
    except ExternalShutdownException:
        pass
    finally:
        if executor is not None:
            shutdown_executor(executor)
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return code


def _interrupted(node, executor, signal_name: str) -> int:
    """A signal: cancel the run in progress and let it write its files. The exit status is
    128 + the signal's number when a run or the start-up was cut short (as a shell reports
    a process the signal ended), else 0: the node was only serving."""
    # A second signal (launch escalates to SIGTERM) must not cut the files short.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    code = 128 + signal.Signals[signal_name].value
    if node is None or executor is None:
        return code
    if not node.interrupt(signal_name):
        return 0
    if not node.wait_idle(executor, INTERRUPT_WAIT):
        node.get_logger().error(
            f"the run did not end within {INTERRUPT_WAIT:g} s of {signal_name}; its files may "
            "be missing. Check the robot is stopped (its stop service)")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
