"""Raw LiberoSim stepping rate, without ROS: the ceiling any wrapper can reach.

source scripts/env.sh && python bench/libero_raw.py
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from rpent_env_sim.libero_sim import LiberoSim

# A small constant motion: the arm drifts ~1 mm per step, so a few hundred
# steps stay inside the workspace and the physics has contacts to resolve.
_ACTION = np.array([0.02, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0])


def _summary(durations_s: list[float]) -> dict:
    ms = np.asarray(durations_s) * 1e3
    return {
        "steps_per_s": float(len(ms) / (ms.sum() / 1e3)),
        "ms_per_step_p50": float(np.percentile(ms, 50)),
        "ms_per_step_p99": float(np.percentile(ms, 99)),
    }


def raw_step_rate(
    suite: str,
    task_id: int,
    cameras: Sequence[str],
    h: int,
    w: int,
    render_quality: str,
    n_steps: int,
    render: bool = True,
) -> dict:
    """Time `n_steps` LiberoSim.step calls (rendering `cameras` at h x w unless
    render=False or no cameras); the first 5 steps are warm-up and not counted."""
    with LiberoSim(
        suite,
        task_id,
        cameras=cameras,
        image_height=h,
        image_width=w,
        render_quality=render_quality,
        max_episode_steps=n_steps + 5,
    ) as sim:
        render = render and bool(cameras)
        for _ in range(5):
            sim.step(_ACTION, render=render)
        durations = []
        for _ in range(n_steps):
            start = time.perf_counter()
            sim.step(_ACTION, render=render)
            durations.append(time.perf_counter() - start)
    return _summary(durations)


def reset_time(suite: str, task_id: int, n_resets: int = 5) -> dict:
    """Seconds to build the simulator, and per reset() (init state, 15 settle steps, a render)."""
    start = time.perf_counter()
    sim = LiberoSim(suite, task_id)
    build_s = time.perf_counter() - start
    durations = []
    try:
        for index in range(n_resets):
            start = time.perf_counter()
            sim.reset(init_state_index=index % sim.n_init_states)
            durations.append(time.perf_counter() - start)
    finally:
        sim.close()
    return {
        "build_s": build_s,
        "reset_s_p50": float(np.median(durations)),
        "reset_s_max": float(max(durations)),
    }


def main() -> None:
    suite, task_id, n_steps = "libero_object", 0, 100
    cameras = ("agentview", "robot0_eye_in_hand")
    print(f"{suite} task {task_id}, {n_steps} steps each")
    no_render = raw_step_rate(suite, task_id, cameras, 128, 128, "low", n_steps, render=False)
    print(f"  no render              : {no_render}")
    for quality in ("low", "high"):
        figures = raw_step_rate(suite, task_id, cameras, 128, 128, quality, n_steps)
        print(f"  2 cams 128x128 {quality:<5}  : {figures}")
    print(f"  reset                  : {reset_time(suite, task_id)}")


if __name__ == "__main__":
    main()
