"""The shared pick-and-place plan (rpent_am.pick_place) run directly on LiberoSim.

Each move steps the Cartesian controller until the hand is within tolerance; each
grip holds the pose while the gripper command ramps. Run directly for a reliability
sweep over initial states:
    python scripted_pick_place.py [suite] [task_id] [object] [target] [n_init_states]
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np

from rpent_am.pick_place import pick_and_place
from rpent_env_sim.cartesian_controller import (
    GRIPPER_CLOSE,
    GRIPPER_OPEN,
    move_to,
    within_tolerance,
)
from rpent_env_sim.libero_sim import LiberoSim

CLOSE_STEPS = 12  # the Panda gripper command ramps -1 -> +1 in 8 steps, then the fingers squeeze
OPEN_STEPS = 10
MAX_STEPS_PER_MOVE = 150
ORIENTATION_TOL = 0.1  # rad

# The task this script is verified on: libero_object task 0,
# "pick up the alphabet soup and place it in the basket".
DEFAULT_TASK = ("libero_object", 0, "alphabet_soup_1", "basket_1")


@dataclass
class PickPlaceResult:
    success: bool
    steps: int
    wall_s: float
    phase_steps: dict[str, int] = field(default_factory=dict)


def scripted_pick_place(
    sim: LiberoSim, obj_name: str, target_name: str, render: bool = False
) -> PickPlaceResult:
    """Pick `obj_name` and drop it above `target_name`; `success` is the task's
    native success predicate after the retreat."""
    poses = sim.object_poses()
    for name in (obj_name, target_name):
        if name not in poses:
            raise ValueError(
                f"{name!r} is not an object of {sim.task_name}; known: {sorted(poses)}"
            )
    obj_pos, target_pos = poses[obj_name][0], poses[target_name][0]
    obs = sim.observe(render=False)
    down = obs.ee_orientation.copy()
    start_step, start = obs.step, time.perf_counter()
    phases: dict[str, int] = {}

    gripper = GRIPPER_OPEN

    def move(name: str, position: np.ndarray, tol: float) -> np.ndarray:
        nonlocal obs
        first = obs.step
        for _ in range(MAX_STEPS_PER_MOVE):
            if within_tolerance(
                obs.ee_position, obs.ee_orientation, position, down, tol, ORIENTATION_TOL
            ):
                break
            obs = sim.step(
                move_to(obs.ee_position, obs.ee_orientation, position, down, gripper), render=render
            )
        phases[name] = obs.step - first
        return obs.ee_position

    def grip(name: str, close: bool) -> np.ndarray:
        nonlocal obs, gripper
        gripper = GRIPPER_CLOSE if close else GRIPPER_OPEN
        position, first = obs.ee_position.copy(), obs.step
        for _ in range(CLOSE_STEPS if close else OPEN_STEPS):
            obs = sim.step(
                move_to(obs.ee_position, obs.ee_orientation, position, down, gripper), render=render
            )
        phases[name] = obs.step - first
        return obs.ee_position

    pick_and_place(obj_pos, target_pos, move, grip)
    return PickPlaceResult(
        success=obs.success,
        steps=obs.step - start_step,
        wall_s=time.perf_counter() - start,
        phase_steps=phases,
    )


def _sweep(suite: str, task_id: int, obj: str, target: str, n_init: int) -> None:
    with LiberoSim(suite, task_id) as sim:
        print(f"{suite}/{task_id}: {sim.instruction} ({sim.n_init_states} initial states)")
        results = []
        for index in range(min(n_init, sim.n_init_states)):
            sim.reset(init_state_index=index)
            result = scripted_pick_place(sim, obj, target)
            results.append(result)
            print(
                f"  init {index:2d}: success={result.success} steps={result.steps} "
                f"wall={result.wall_s:.2f}s {result.phase_steps}"
            )
        ok = sum(r.success for r in results)
        print(
            f"success {ok}/{len(results)}, "
            f"steps median {np.median([r.steps for r in results]):.0f} "
            f"max {max(r.steps for r in results)}"
        )


if __name__ == "__main__":
    args = sys.argv[1:]
    suite, task_id, obj, target = DEFAULT_TASK
    if len(args) >= 4:
        suite, task_id, obj, target = args[0], int(args[1]), args[2], args[3]
    _sweep(suite, task_id, obj, target, int(args[4]) if len(args) >= 5 else 50)
