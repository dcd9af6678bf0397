"""franky-sim (MuJoCo FR3 speaking the libfranka protocol) for tests, benches and demos.

    python -m rpent_twins.franky_sim --hostname 127.0.0.1     # serve on 127.0.0.1:1337/1338

Same server as the ``franky-sim`` command (which needs ``-s mujoco`` when Genesis is not
installed) with one change: the wrist joints' damping. franky-sim's default (200 Nm s/rad
on joints 5-7) is beyond what its explicit 1 ms PD update can stabilise for the wrist's
small inertia, so joint 7 chatters by ~1e-4 rad forever after any motion; 80 settles.

:class:`FrankySimProcess` runs it as a child process on a free loopback address (one
client per simulated robot, so parallel sessions each get their own address).
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from rpent_contract.extras import MissingExtra, require

WRIST_DAMPING = 80.0
# What a franka_node needs against this simulator, over config/franka.yaml's hardware
# defaults: no PREEMPT_RT kernel here, and a simulated arm that settles to ~1e-6 rad/s
# (the contract's "did not move" checks are that strict).
SIM_PARAMETERS = {"realtime_mode": "ignore", "settle_velocity": 2e-6}
READY = "franky-sim ready on "


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hostname", default="127.0.0.1", help="loopback address to serve on")
    parser.add_argument("--wrist-damping", type=float, default=WRIST_DAMPING)
    args = parser.parse_args(argv)

    try:
        franky_sim = require("franka", "franky-sim", "franky_sim")
    except MissingExtra as err:
        raise SystemExit(f"error: {err}") from None
    from franky_sim.mujoco_simulator import MUJOCO_DEFAULT_KV, MujocoSimulator

    kv = tuple(MUJOCO_DEFAULT_KV[:4]) + (args.wrist_damping,) * 3
    with MujocoSimulator() as sim:
        robot = sim.add_robot(kv=kv)
        with franky_sim.SimulationServer(sim, hostname_candidates=[args.hostname]) as server:
            print(READY + robot.hostname, flush=True)
            try:
                server.run_forever()
            except KeyboardInterrupt:
                pass


def free_loopback_address(rng: Optional[random.Random] = None) -> str:
    """A 127.0.0.x address whose franky ports (1337, 1338) are free; pytest-xdist worker N
    draws from 127.0.N+1.x instead, so two workers never race for one address between this
    check and franky-sim binding it."""
    from rpent_contract.processes import xdist_worker_index

    rng = rng or random.Random()
    index = xdist_worker_index()
    subnet = 0 if index is None else 1 + index % 254
    for _ in range(50):
        host = f"127.0.{subnet}.{rng.randint(2, 250)}"
        try:
            for port in (1337, 1338):
                with socket.socket() as s:
                    s.bind((host, port))
        except OSError:
            continue
        return host
    raise RuntimeError("no free loopback address for franky-sim")


class FrankySimProcess:
    """franky-sim in its own process group; ``start`` waits (bounded) until it serves."""

    def __init__(self, log_dir: Path, host: Optional[str] = None):
        self.host = host or free_loopback_address()
        self.log_path = Path(log_dir) / f"franky_sim_{self.host}.log"
        self.proc: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 60.0) -> "FrankySimProcess":
        log = open(self.log_path, "a")
        offset = log.tell()  # a restart appends; look for READY in the new part only
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rpent_twins.franky_sim", "--hostname", self.host],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=env)
        log.close()
        deadline = time.monotonic() + timeout
        while READY not in self.log_path.read_text(errors="replace")[offset:]:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"franky-sim did not start on {self.host}:\n{tail}")
            time.sleep(0.1)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """Die abruptly (SIGKILL), as a robot losing power or network would."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        if not self.alive():
            return
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


if __name__ == "__main__":
    main()
