"""What an evaluation's episodes run on: LIBERO suites, or the tasks of an arm's twin.

A suite family chooses the episodes, the bring-up a worker starts and how an episode
begins; a station is one worker's robot of that family.

* LIBERO: a worker's nodes serve any task, a reset loads the suite, task and recorded
  initial state of the episode.
* A twin (``franka_tabletop``, ``so101_tabletop`` or a scene YAML of ``rpent_twins``): a
  worker is the arm's bring-up on its twin (``twin:=true``) for one task, since the robot
  node carries the task's instruction. An episode is a reset of the robot (its arm home,
  through its safety layer) and then the twin's items placed from the episode's placement
  seed, its initial state. Besides the operator's verdict the agent asks for, each episode
  records the twin's own success check, as a LIBERO episode records the simulator's.
"""
from __future__ import annotations

import functools
import os
import re
import warnings
from pathlib import Path
from typing import Optional

from rpent.bringup import arm_model_parameters, describe

from .workers import Episode

# What ``--init-states all`` selects on a twin: placement seeds 0-49, as many initial states
# as LIBERO records per task.
TWIN_INIT_STATES = 50
# A twin worker (physics, two rendered cameras, robot, perception, agent) keeps about two
# cores busy; a LIBERO worker about one.
TWIN_WORKER_CORES = 2


def parse_indices(spec: str, count: int, what: str) -> list[int]:
    """``all``, ``3``, ``0-9`` or ``0,2,5-7`` -> sorted indices, each below ``count``."""
    if spec == "all":
        return list(range(count))
    chosen = set()
    for part in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if not match:
            raise ValueError(f"{what} '{spec}' is not a selection like all, 3, 0-9 or 0,2,5-7")
        low = int(match[1])
        chosen.update(range(low, int(match[2] or low) + 1))
    bad = sorted(i for i in chosen if not 0 <= i < count)
    if bad:
        raise ValueError(f"{what} {bad} out of range: valid 0..{count - 1}")
    return sorted(chosen)


# --- LIBERO ----------------------------------------------------------------------------------
def _libero():
    from rpent_env_sim import libero_sim

    # LIBERO's task parser (lark) warns about deprecated modules while the suites load.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        libero_sim.LiberoSim.available_suites()
    return libero_sim


def _dimensions(spec: str, suite: str, catalog: list):
    """The LIBERO-Plus dimensions ``--dimensions`` chooses (None: every task)."""
    if spec == "all":
        return None
    known = sorted({task.dimension for task in catalog if task.dimension})
    if not known:
        raise ValueError(f"--dimensions: {suite} perturbs nothing; only LIBERO-Plus suites "
                         "(liberoplus_*) have perturbation dimensions")
    wanted = {d.strip() for d in spec.split(",") if d.strip()}
    unknown = sorted(wanted - set(known))
    if unknown:
        raise ValueError(f"--dimensions: {suite} has no {unknown}; its dimensions: "
                         f"{', '.join(known)}")
    return wanted


class LiberoSuites:
    bringup = "libero_sim"
    owned: dict = {}
    worker_cores = 1

    def select(self, suites: list, tasks: str, init_states: str, seeds: str,
               dimensions: str = "all") -> list:
        suite_tasks = _libero().suite_tasks
        episodes = []
        seed_values = parse_indices(seeds, 10**6, "--seeds")
        for suite in suites:
            catalog = suite_tasks(suite)
            wanted = _dimensions(dimensions, suite, catalog)
            for task_id in parse_indices(tasks, len(catalog), f"--tasks of {suite}"):
                task = catalog[task_id]
                if wanted is not None and task.dimension not in wanted:
                    continue
                if task.problems:
                    raise ValueError(
                        f"{suite} task {task_id} cannot run here, the installed benchmark "
                        f"lacks {'; '.join(task.problems)}; choose other --tasks (rpent eval "
                        "--list shows which are complete)")
                for index in parse_indices(init_states, task.n_init_states,
                                           f"--init-states of {suite} task {task_id}"):
                    episodes += [Episode(suite, task_id, index, s) for s in seed_values]
        return episodes

    @staticmethod
    def listing() -> list:
        libero_sim = _libero()
        lines = []
        for suite in libero_sim.LiberoSim.available_suites():
            tasks = libero_sim.suite_tasks(suite)
            runnable = [t for t in tasks if not t.problems]
            states = sorted({t.n_init_states for t in runnable})
            note = "" if len(runnable) == len(tasks) else \
                f" ({len(tasks) - len(runnable)} not runnable here)"
            lines.append(f"{suite:<28} {len(runnable):>3} tasks{note}, initial states per "
                         f"task: {', '.join(map(str, states)) or '-'}")
            for dimension in sorted({t.dimension for t in tasks if t.dimension}):
                ids = [t.task_id for t in tasks if t.dimension == dimension]
                refused = [t for t in tasks if t.dimension == dimension and t.problems]
                lines.append(f"  --dimensions {dimension!r:<32} {len(ids):>4} tasks"
                             + (f", none runnable: needs {refused[0].problems[0]}"
                                if len(refused) == len(ids) else ""))
        return lines

    def station(self, index: int, args: dict, folder: Path) -> "LiberoStation":
        return LiberoStation(args)

    @staticmethod
    def robot_label(args: dict) -> str:
        return f"LIBERO, privileged {args['privileged']}"

    @staticmethod
    def model_parameters(args: dict) -> dict:
        return {}


class LiberoStation:
    def __init__(self, args: dict):
        self.args = args

    def specs(self, episode: Episode) -> list:
        return describe("libero_sim", {
            **self.args, "suite": episode.suite, "task_id": str(episode.task_id),
            "seed": str(episode.seed), "init_state_index": str(episode.init_state_index)})

    def serves(self, episode: Episode) -> bool:
        return True  # a reset loads any task

    def reset(self, client, episode: Episode, timeout: float):
        return client.reset(episode.suite, episode.task_id, episode.seed,
                            episode.init_state_index, timeout=timeout)

    def judge(self) -> Optional[bool]:
        return None  # the robot's task_status holds the simulator's verdict

    def task_name(self, episode: Episode) -> str:
        return ""  # the robot's task_status names it

    def close(self) -> None:
        pass


# --- twins -----------------------------------------------------------------------------------
def twin_scene_path(suite: str) -> Optional[Path]:
    """The scene file of a twin suite, or None when ``suite`` names no twin scene."""
    from rpent_twins.scene import SCENES_DIR

    if suite.endswith((".yaml", ".yml")):
        return Path(suite).resolve()  # the twin's processes may start elsewhere
    shipped = SCENES_DIR / f"{suite}.yaml"
    return shipped if shipped.is_file() else None


class TwinSuites:
    worker_cores = TWIN_WORKER_CORES

    def __init__(self, arm: str):
        self.arm = arm
        self.bringup = arm
        # Each worker's twin gets its own task, placement, loopback address and ports.
        self.owned = {"twin": "(always true)", "twin_scene": "--suites",
                      "twin_task": "--tasks", "twin_seed": "--init-states",
                      "twin_port": "(one per worker)", "twin_host": "(one per worker)"}

    @staticmethod
    @functools.lru_cache(maxsize=None)  # read once: every episode of a run sees one scene
    def scene(suite: str):
        from rpent_twins.scene import load_scene

        return load_scene(str(twin_scene_path(suite)))

    def select(self, suites: list, tasks: str, init_states: str, seeds: str,
               dimensions: str = "all") -> list:
        if dimensions != "all":
            raise ValueError("--dimensions: only LIBERO-Plus suites (liberoplus_*) have "
                             "perturbation dimensions")
        if seeds != "0":
            raise ValueError("--seeds: a twin's physics has no seed of its own; its episodes "
                             "differ by where the items start, chosen with --init-states "
                             "(placement seeds)")
        episodes = []
        for suite in suites:
            scene = self.scene(suite)
            for task_id in parse_indices(tasks, len(scene.tasks), f"--tasks of {suite}"):
                episodes += [Episode(suite, task_id, index) for index in parse_indices(
                    init_states, TWIN_INIT_STATES, f"--init-states of {suite}")]
        return episodes

    @staticmethod
    def listing() -> list:
        from rpent_twins.scene import SCENES_DIR, load_scene

        lines = []
        for path in sorted(SCENES_DIR.glob("*.yaml")):
            scene = load_scene(str(path))
            lines.append(f"{path.stem:<28} {len(scene.tasks):>3} tasks on the {scene.arm} twin, "
                         f"initial states per task: {TWIN_INIT_STATES} (placement seeds)")
            lines += [f"    {i}: {t.name} ({t.instruction})" for i, t in enumerate(scene.tasks)]
        return lines

    def station(self, index: int, args: dict, folder: Path) -> "TwinStation":
        return TwinStation(self, args, folder / f"w{index}.twin")

    def robot_label(self, args: dict) -> str:
        return f"the {self.arm} twin"

    def model_parameters(self, args: dict) -> dict:
        return arm_model_parameters(self.arm, args)


class TwinStation:
    def __init__(self, suites: TwinSuites, args: dict, folder: Path):
        self.suites, self.args, self.folder = suites, args, folder
        self.loaded: Optional[tuple] = None
        self._host, self._port = "127.0.0.1", 0
        self._twin = None

    def specs(self, episode: Episode) -> list:
        from rpent_common.processes import free_port_pair
        from rpent_twins.franky_sim import free_loopback_address

        self.close()
        scene = self.suites.scene(episode.suite)
        # Fresh addresses at every start: a crashed twin's may still be held.
        self._host = free_loopback_address() if self.suites.arm == "franka" else "127.0.0.1"
        self._port = free_port_pair(self._host)
        self.loaded = (episode.suite, episode.task_id)
        self.folder.mkdir(parents=True, exist_ok=True)
        given = {**self.args, "twin": "true", "twin_scene": str(twin_scene_path(episode.suite)),
                 "twin_task": scene.tasks[episode.task_id].name,
                 "twin_seed": str(episode.init_state_index), "twin_port": str(self._port),
                 # The SO-101 twin's pty link and calibration file live in the run folder.
                 "run_dir": os.path.abspath(self.folder)}
        if self.suites.arm == "franka":
            given["twin_host"] = self._host
        return describe(self.suites.arm, given)

    def serves(self, episode: Episode) -> bool:
        return self.loaded == (episode.suite, episode.task_id)

    def _port_client(self):
        from rpent_twins.twin_port import wait_for_twin

        if self._twin is None:
            self._twin = wait_for_twin(self._host, self._port, timeout=30.0)
        return self._twin

    def reset(self, client, episode: Episode, timeout: float):
        # The arm goes home first, so it cannot knock over the items placed after it.
        reset = client.reset(timeout=timeout)
        if not reset.success:
            return reset
        self._port_client().call("reset_scene", task=self.task_name(episode),
                                 seed=episode.init_state_index)
        return reset

    def judge(self) -> Optional[bool]:
        return bool(self._port_client().call("judge")["achieved"])

    def task_name(self, episode: Episode) -> str:
        return self.suites.scene(episode.suite).tasks[episode.task_id].name

    def close(self) -> None:
        if self._twin is not None:
            self._twin.close()
            self._twin = None


def suites_for(names: list):
    """The suite family of an evaluation: LIBERO, or one arm's twin."""
    scenes = {n: twin_scene_path(n) for n in names}
    twins = [n for n, path in scenes.items() if path is not None]
    if not twins:
        return LiberoSuites()
    if len(twins) != len(names):
        raise ValueError(f"--suites {','.join(names)}: an evaluation runs on one robot; "
                         "give LIBERO suites or twin suites, in two evaluations")
    arms = {TwinSuites.scene(n).arm for n in twins}
    if len(arms) != 1:
        raise ValueError(f"--suites {','.join(names)}: these twin suites are of different arms "
                         f"({', '.join(sorted(arms))}); evaluate each arm on its own")
    return TwinSuites(arms.pop())


def listing() -> list:
    return LiberoSuites.listing() + TwinSuites.listing()

