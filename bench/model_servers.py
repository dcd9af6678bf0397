"""What ``predict`` over ROS adds to each model server's own call.

    source scripts/env.sh && python bench/model_servers.py [--rounds 200]

For each remote backend (the original RPent's pi0.5 VLA server, its ``vla.*`` facade and a
WAM worker, each on both RPC transports, an OpenPI server) and its protocol-level test server answering a
constant 50x7 chunk: the bare call (the backend's ``predict`` in this process: encoding,
transport, the server's decoding and checks) against the same observation sent as a
``predict`` goal to a model node serving that backend (two 256x256 RGB images and an
8-value state in the goal). The in-process model line is the ROS transport's own cost.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from action_model import CAMERAS, STATE, Trivial, observation, ros_round_trips
from rpent_testkit.processes import isolate_ros_graph

CASES = ("in-process model", "rpent_http http", "rpent_http socket", "rpent_vla http",
         "rpent_vla socket", "rpent_wam http", "rpent_wam socket", "openpi")
# A WAM's named state vectors, from the bench observation's entries.
WAM_STATE = {"eef_position": STATE[:3], "eef_quaternion_xyzw": STATE[3:7],
             "gripper_qpos": STATE[7:]}


def _backend(case: str, endpoint: str):
    from rpent_am.model_io import ModelIO
    from rpent_env_sim.libero_node import LIBERO_OSC_DELTA

    if case == "in-process model":
        return Trivial()
    kind = case.split()[0]
    if kind == "openpi":
        from rpent_am.backends.openpi_backend import OpenPIBackend

        host, port = endpoint.rsplit(":", 1)
        io = ModelIO.simple("bench", {"agentview": "observation/image",
                                      "robot0_eye_in_hand": "observation/wrist_image"},
                            STATE, state_key="observation/state")
        return OpenPIBackend(host, int(port), action_space=LIBERO_OSC_DELTA, io=io)
    from rpent_am.backends.rpent_http import RpentHttpBackend, RpentVlaBackend

    if kind == "rpent_wam":
        from rpent_am.backends.wam import WamBackend
        from rpent_am.model_io import ImageInput, StateTerm

        io = ModelIO("bench", images=(ImageInput("agentview", "primary"),
                                      ImageInput("robot0_eye_in_hand", "wrist")),
                     state=tuple(StateTerm("value", entry=e, name=name)
                                 for name, entries in WAM_STATE.items() for e in entries))
        return WamBackend(endpoint, action_space=LIBERO_OSC_DELTA, io=io)
    if kind == "rpent_http":
        io = ModelIO.simple("bench", {"agentview": "main", "robot0_eye_in_hand": "wrist"},
                            STATE, state_key="state", prompt_key="instruction")
        return RpentHttpBackend(endpoint, action_space=LIBERO_OSC_DELTA, io=io)
    io = ModelIO.simple("bench", {c: f"video.{c}" for c in CAMERAS}, STATE,
                        state_key="state.robot", prompt_key="annotation.human.task_description")
    return RpentVlaBackend(endpoint, action_space=LIBERO_OSC_DELTA, io=io)


def _serve(case: str, endpoint: str) -> None:
    from rpent_am.am_node import main

    main(args=["--ros-args", "--log-level", "warn"], backend=_backend(case, endpoint))


class _Server:
    """The case's test server around the trivial model; ``endpoint`` says where."""

    def __init__(self, case: str):
        self._close, self.endpoint = (lambda: None), ""
        if case == "in-process model":
            return
        if case == "openpi":
            from rpent_am.backends.openpi_backend import OpenPIServer

            server = OpenPIServer(answer=lambda obs: {"actions": np.zeros((50, 7))})
            self._close, self.endpoint = server.close, f"127.0.0.1:{server.port}"
            return
        from rpent_testkit.vla_servers import Pi05Server, VlaFacadeServer
        from rpent_testkit.wam_servers import WamServer, capabilities

        kind, wire = case.split()
        if kind == "rpent_wam":
            server = WamServer(lambda request: {"actions": np.zeros((50, 7), np.float32)},
                               capabilities("bench", "bench", {k: len(v) for k, v in
                                                               WAM_STATE.items()}, 50),
                               transport=wire)
        elif kind == "rpent_http":
            server = Pi05Server(Trivial(), transport=wire)
        else:
            server = VlaFacadeServer(
                Trivial(), images=[f"video.{c}" for c in CAMERAS], state_key="state.robot",
                prompt_key="annotation.human.task_description",
                actions={"action.arm": 6, "action.gripper": 1}, transport=wire)
        server.start()
        self._close, self.endpoint = server.close, server.endpoint

    def close(self) -> None:
        self._close()


def percentiles(seconds) -> tuple:
    ms = np.asarray(seconds) * 1e3
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def measure(case: str, rounds: int) -> tuple:
    obs = observation()
    server = _Server(case)
    try:
        backend = _backend(case, server.endpoint)
        bare = []
        for i in range(rounds + 5):
            t0 = time.perf_counter()
            backend.predict(obs, "pick", "bench")
            if i >= 5:
                bare.append(time.perf_counter() - t0)
        backend.close()
        ros = ros_round_trips(_serve, (case, server.endpoint), obs, rounds)
    finally:
        server.close()
    return percentiles(bare), percentiles(ros)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=CASES)
    args = parser.parse_args()
    isolate_ros_graph()
    print(f"predict, 2 x 256x256 RGB + 8 state in, 50x7 out, {args.rounds} rounds, ms "
          "(p50 / p95)")
    print(f"  {'backend':20s} {'bare call':>17s} {'over ROS':>17s} {'added by ROS':>17s}")
    for case in args.cases:
        (b50, b95), (r50, r95) = measure(case, args.rounds)
        print(f"  {case:20s} {b50:7.2f} / {b95:7.2f} {r50:7.2f} / {r95:7.2f} "
              f"{r50 - b50:7.2f} / {r95 - b95:7.2f}", flush=True)


if __name__ == "__main__":
    main()
