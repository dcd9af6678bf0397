"""franky-sim (MuJoCo FR3 speaking the libfranka protocol) for tests, benches and demos.

    python -m rpent_twins.franky_sim --hostname 127.0.0.1     # serve on 127.0.0.1:1337/1338
    python -m rpent_twins.franky_sim --hostname 127.0.0.2 --scene franka --task cube_in_bowl
        # the Franka twin: the arm on a table with objects (rpent_twins.scene), its cameras
        # in the model, and the twin port (rpent_twins.twin_port) on 127.0.0.2:8767

Same server as the ``franky-sim`` command (which needs ``-s mujoco`` when Genesis is not
installed) with two changes:

* the wrist joints' damping. franky-sim's default (200 Nm s/rad on joints 5-7) is beyond
  what its explicit 1 ms PD update can stabilise for the wrist's small inertia, so joint 7
  chatters by ~1e-4 rad forever after any motion; 80 settles.
* the reflex a real FR3 has and franky-sim does not: on SIGUSR1 the running motion is
  aborted as an FR3 aborts it when its commands arrive late (a busy controller PC): the
  Move command is answered "aborted by reflex", and the robot reports
  ``communication_constraints_violation`` in reflex mode until automatic error recovery.

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


# The items' contact with the Franka Hand's pads: firm (little sinking under the grasp
# force) and with torsional friction, so a grasped item neither slips nor spins out through
# a lift, a carry and a place.
FRANKA_ITEM_CONTACT = {"friction": "1.5 0.02 0.0002", "condim": "4",
                       "solref": "0.004 1", "solimp": "0.95 0.99 0.001"}
# The floor under the twin's table (franky-sim puts its ground where the robot stands).
FLOOR_Z = -0.75


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hostname", default="127.0.0.1", help="loopback address to serve on")
    parser.add_argument("--wrist-damping", type=float, default=WRIST_DAMPING)
    parser.add_argument("--scene", default="", help="tabletop scene: 'franka' (the shipped "
                        "one) or a scene YAML file; none: the bare arm")
    parser.add_argument("--task", default="", help="the scene's task (default: its first)")
    parser.add_argument("--seed", type=int, default=0, help="draws the items' placement")
    parser.add_argument("--twin-port", type=int, default=0,
                        help="TCP port of the twin port on --hostname (with --scene)")
    args = parser.parse_args(argv)

    try:
        franky_sim = require("franka", "franky-sim", "franky_sim")
    except MissingExtra as err:
        raise SystemExit(f"error: {err}") from None
    from franky_sim.mujoco_simulator import MUJOCO_DEFAULT_KV, MujocoSimulator

    scene = None
    if args.scene:
        from .scene import SceneError, load_scene

        try:
            scene = load_scene(args.scene)
            if args.task:  # an unknown task is refused before the physics starts
                scene.task(args.task)
        except SceneError as err:
            raise SystemExit(f"error: {err}") from None
    kv = tuple(MUJOCO_DEFAULT_KV[:4]) + (args.wrist_damping,) * 3
    with MujocoSimulator() as sim:
        robot = sim.add_robot(kv=kv)
        if scene is not None:
            xml = _add_scene(sim, scene)
        with franky_sim.SimulationServer(sim, hostname_candidates=[args.hostname]) as server:
            Reflexes(robot.server, sim)
            host = None
            if scene is not None:
                host = _serve_twin(sim, scene, xml, args)
            print(READY + robot.hostname, flush=True)
            try:
                server.run_forever()
            except KeyboardInterrupt:
                pass
            finally:
                if host is not None:
                    host.close()
                    print(host.clock.report(float(sim.data.time)), flush=True)


# The index of the error a late command stream raises among the robot state's 41 error
# flags: research_interface::robot::Error::kCommunicationConstraintsViolation.
COMMUNICATION_CONSTRAINTS_VIOLATION = 25


class Reflexes:
    """The FR3's reflex on a late command stream, on demand (SIGUSR1), for franky-sim's robot
    server: what a node must survive on a busy real-time PC, reproduced on cue."""

    def __init__(self, server, sim):
        from franky_sim.franka_robot_protocol import (AutomaticErrorRecoveryCommand,
                                                      MoveStatus, RobotCommand, RobotMode)
        from franky_sim.franka_server import BaseCommand

        self._server, self._pending, self.active = server, False, False
        self._reflex_mode = RobotMode.kReflex
        self._abort = lambda motion: BaseCommand.send_response(
            server._tcp_socket, RobotCommand.kMove, motion, MoveStatus.kReflexAborted)
        errors = [False] * 41
        errors[COMMUNICATION_CONSTRAINTS_VIOLATION] = True
        self._errors = tuple(errors)
        # The robot's state goes out with the reflex while it lasts.
        server._get_state_bytes = self._state_bytes
        recover = AutomaticErrorRecoveryCommand.handle

        def handle(command, robot_server):
            self.active = False
            recover(command, robot_server)
        AutomaticErrorRecoveryCommand.handle = handle
        sim.register_pre_step_callback(lambda _sim: self._step())
        signal.signal(signal.SIGUSR1, lambda *_: setattr(self, "_pending", True))

    def _step(self) -> None:
        """In the simulator's loop: abort the running motion, if any, when asked."""
        if not self._pending:
            return
        self._pending = False
        motion = self._server.current_motion_id
        if not motion:
            return
        self.active = True
        self._server.stop_motion(send_preemption_signal=False)
        self._server.reset_current_motion_id()
        self._abort(motion)
        print(f"reflex: motion {motion} aborted (communication_constraints_violation)",
              flush=True)

    def _state_bytes(self) -> bytes:
        state = self._server.robot_state
        if self.active:
            state = state.replace(robot_mode=self._reflex_mode, errors=self._errors,
                                  reflex_reason=self._errors)
        return state.pack_state()


def _add_scene(sim, scene) -> str:
    """The table, items and cameras in franky-sim's model before it compiles; the MJCF."""
    import xml.etree.ElementTree as ET

    from .scene import add_to_mjcf

    for geom in sim.worldbody.iter("geom"):
        if geom.get("name") == "ground":
            geom.set("pos", f"0 0 {FLOOR_Z}")
    hand = next(b for b in sim.worldbody.iter("body") if b.get("name") == "robot0_hand")
    add_to_mjcf(scene, sim.worldbody, hand, FRANKA_ITEM_CONTACT)
    return ET.tostring(sim.scene, encoding="unicode")


def _serve_twin(sim, scene, xml: str, args):
    """Twin port on --hostname; scene requests and the camera state between steps."""
    from .twin_host import TwinHost
    from .twin_port import DEFAULT_PORT

    host = TwinHost(scene, sim.model, sim.data, xml, args.task, args.seed, snapshot_every=10)
    timer = {"t": time.perf_counter()}

    def before(_sim):
        timer["t"] = time.perf_counter()

    def after(_sim):
        host.clock.stepped(time.perf_counter() - timer["t"])
        host.between_steps()

    sim.register_pre_step_callback(before)
    sim.register_post_step_callback(after)
    host.serve(args.hostname, args.twin_port or DEFAULT_PORT)
    return host


def free_loopback_address(rng: Optional[random.Random] = None) -> str:
    """A 127.0.0.x address whose franky ports (1337, 1338) are free; pytest-xdist worker N
    draws from 127.0.N+1.x instead, so two workers never race for one address between this
    check and franky-sim binding it."""
    from rpent_common.processes import xdist_worker_index

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

    def reflex(self) -> None:
        """Abort the running motion with the reflex a late command stream causes
        (:class:`Reflexes`)."""
        os.kill(self.proc.pid, signal.SIGUSR1)

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
