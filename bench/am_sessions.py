"""Memory of the action-model node over many ``predict`` goals without a client_id.

    source scripts/env.sh && python bench/am_sessions.py [--goals 1000] [--backend lerobot]

Every goal carries its own observation (no robot needed) and names no client_id, the way a
one-shot client asks. ``--backend lerobot`` serves a tiny random-weight ACT checkpoint
(rpent_testkit.tiny_act) through the LeRobot backend, whose sessions are policy copies;
``--backend hungry`` a model-free backend that keeps ``--session-kib`` per session. The
node's VmRSS is printed as the goals go, and the session count it reports at the end.

To measure another version of the node, put its package first on the path, e.g.
``git archive HEAD ros_ws/src/rpent_am | tar -x -C /tmp/am_before`` and
``PYTHONPATH=/tmp/am_before/ros_ws/src/rpent_am:$PYTHONPATH python bench/am_sessions.py``.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from rpent_am.policy import ModelMeta, PolicyBackend, PolicyObservation
from rpent_env_sim.libero_node import LIBERO_OSC_DELTA
from rpent_testkit.processes import isolate_ros_graph

STATE = ("ee_x", "ee_y", "ee_z", "ee_qx", "ee_qy", "ee_qz", "ee_qw", "gripper_width")


class Hungry(PolicyBackend):
    """Keeps ``kib`` KiB of state per session until reset, like a stateful policy."""

    meta = ModelMeta("hungry", "none", "hungry", LIBERO_OSC_DELTA, 10, state_names=STATE)

    def __init__(self, kib: int):
        self._kib, self._sessions = kib, {}

    def predict(self, observation, instruction, session):
        self._sessions.setdefault(session, np.ones(self._kib * 128))  # 8 bytes each
        return np.zeros((10, 7))

    def reset(self, session=None):
        if session is None:
            self._sessions.clear()
        else:
            self._sessions.pop(session, None)


def _lerobot(folder: str) -> PolicyBackend:
    from rpent_testkit import tiny_act
    from rpent_am.backends.lerobot_backend import LeRobotBackend
    from rpent_am.model_io import ModelIO

    return LeRobotBackend(folder, action_space=LIBERO_OSC_DELTA,
                          io=ModelIO.simple("tiny_act", tiny_act.CAMERAS, STATE), device="cpu")


def _serve(kind: str, folder: str, kib: int) -> None:
    from rpent_am.am_node import main

    backend = _lerobot(folder) if kind == "lerobot" else Hungry(kib)
    main(args=["--ros-args", "--log-level", "warn"], backend=backend)


def vm_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"process {pid} has no VmRSS")


def observation(kind: str) -> PolicyObservation:
    rng = np.random.default_rng(0)
    cameras = ("agentview", "robot0_eye_in_hand") if kind == "lerobot" else ()
    images = {c: rng.integers(0, 255, (128, 128, 3), dtype=np.uint8) for c in cameras}
    return PolicyObservation(images, rng.normal(size=len(STATE)) * 0.1, STATE, time.time_ns())


def run(goals: int, kind: str, kib: int) -> None:
    from action_model import model_in_process

    import rpent_am
    from rpent_testkit import tiny_act
    from rpent_am.observation import to_msg
    from rpent_interfaces.action import Predict

    with tempfile.TemporaryDirectory() as tmp:
        folder = str(tiny_act.build(Path(tmp) / "act")) if kind == "lerobot" else ""
        with model_in_process(_serve, (kind, folder, kib), "bench_sessions") as (model, server):
            meta = model.meta(timeout=120)
            goal = Predict.Goal(instruction="pick", mode=Predict.Goal.MODE_SINGLE, timeout=30.0)
            to_msg(observation(kind), goal.observation)
            print(f"rpent_am from {Path(rpent_am.__file__).parent}; backend {meta.backend} "
                  f"({meta.checkpoint_id}); {goals} predict goals without client_id")
            started = time.perf_counter()
            for i in range(goals + 1):
                if i % max(1, goals // 4) == 0:
                    print(f"  after {i:5d} goals: VmRSS {vm_rss_mib(server.pid):8.1f} MiB")
                if i == goals:
                    break
                status, result = model.send(goal).result(60)
                if not result.last_chunk.horizon:
                    raise SystemExit(f"predict failed: {result.message}")
            took = time.perf_counter() - started
            print(f"  {goals / took:.0f} goals/s; reset(''): {model.reset('').message}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--goals", type=int, default=1000)
    parser.add_argument("--backend", choices=("lerobot", "hungry"), default="lerobot")
    parser.add_argument("--session-kib", type=int, default=256,
                        help="state the hungry backend keeps per session")
    args = parser.parse_args()
    isolate_ros_graph()
    run(args.goals, args.backend, args.session_kib)


if __name__ == "__main__":
    main()
