"""A URDF of a robot from its compiled MuJoCo model (no ROS).

The simulator's own kinematics and geometry: bodies become links, hinge and slide joints
become revolute and prismatic joints with the model's ranges, bodies without a joint are
fixed to their parent, and sites can be added as fixed links (the end effector). Visual
geoms (no contacts) become visuals; meshes are written as binary STL from the *compiled*
vertices, which already carry MuJoCo's scaling and re-centring, so a viewer draws exactly
what the simulator renders. A link's mesh geoms of one colour become one STL, placed in the
link's frame: a robot modelled in many small pieces (robosuite's Panda: 52) then needs a
few files a link (its 11 links: 24), fewer than a browser viewer may fetch at once from a
Foxglove server (32). Files are content-addressed: several simulators writing the same
robot at once write the same bytes to the same names.
"""
from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Callable, Mapping

import mujoco
import numpy as np

from rpent_contract.geometry import quaternion_to_matrix, quaternion_to_rpy, wxyz_to_xyzw

# The model's type arrays hold plain ints.
_BOX, _SPHERE, _CYLINDER, _MESH = (int(mujoco.mjtGeom.mjGEOM_BOX),
                                   int(mujoco.mjtGeom.mjGEOM_SPHERE),
                                   int(mujoco.mjtGeom.mjGEOM_CYLINDER),
                                   int(mujoco.mjtGeom.mjGEOM_MESH))
_JOINTS = {int(mujoco.mjtJoint.mjJNT_HINGE): "revolute",
           int(mujoco.mjtJoint.mjJNT_SLIDE): "prismatic"}


def _name(model, kind, index: int) -> str:
    return mujoco.mj_id2name(model, kind, index) or f"{kind.name.lower()}_{index}"


def _origin(parent: ET.Element, position, quat_wxyz) -> None:
    rpy = quaternion_to_rpy(wxyz_to_xyzw(quat_wxyz))
    ET.SubElement(parent, "origin", xyz=" ".join(f"{float(v):.9g}" for v in position),
                  rpy=" ".join(f"{float(v):.9g}" for v in rpy))


def _atomic_write(path: Path, data: bytes) -> None:
    if path.exists():
        return
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _triangles(model, geom: int) -> np.ndarray:
    """A mesh geom's triangles in its body's frame: (F, 3 corners, 3)."""
    mesh = model.geom_dataid[geom]
    vertices = model.mesh_vert[model.mesh_vertadr[mesh]:
                               model.mesh_vertadr[mesh] + model.mesh_vertnum[mesh]]
    faces = model.mesh_face[model.mesh_faceadr[mesh]:
                            model.mesh_faceadr[mesh] + model.mesh_facenum[mesh]]
    rotation = quaternion_to_matrix(wxyz_to_xyzw(model.geom_quat[geom]))
    return vertices[faces] @ rotation.T + model.geom_pos[geom]


def _stl(triangles: np.ndarray) -> bytes:
    triangles = np.asarray(triangles, dtype=np.float32)
    normals = np.cross(triangles[:, 1] - triangles[:, 0], triangles[:, 2] - triangles[:, 0])
    normals /= np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-12)
    records = np.zeros(len(triangles), dtype=[("n", "<f4", 3), ("v", "<f4", (3, 3)),
                                              ("attr", "<u2")])
    records["n"], records["v"] = normals, triangles
    return b"\0" * 80 + struct.pack("<I", len(triangles)) + records.tobytes()


def write_urdf(model, robot_name: str, root_body: str, directory: Path, *,
               rename: Callable[[str], str], flip_joints=(), sites: Mapping[str, str] = None
               ) -> Path:
    """Write the URDF of ``root_body``'s subtree of ``model`` (an ``mujoco.MjModel``) into
    ``directory`` (meshes under ``meshes/``) and return its path.

    ``rename`` maps MuJoCo body and joint names to URDF link and joint names (the root
    body's link is ``rename(root_body)``); joints in ``flip_joints`` (MuJoCo names) get
    their axis and range negated, for a robot whose published joint positions count the
    other way; ``sites`` maps MuJoCo site names to the links they become.
    """
    body_kind, joint_kind = mujoco.mjtObj.mjOBJ_BODY, mujoco.mjtObj.mjOBJ_JOINT
    root = mujoco.mj_name2id(model, body_kind, root_body)
    if root < 0:
        raise ValueError(f"the MuJoCo model has no body '{root_body}'")
    directory = Path(directory)
    (directory / "meshes").mkdir(parents=True, exist_ok=True)
    sites = dict(sites or {})
    robot = ET.Element("robot", name=robot_name)
    materials: dict = {}
    order = [root]
    for body in order:  # grows while it is walked: breadth first, parents before children
        order += [b for b in range(model.nbody) if model.body_parentid[b] == body and b != body]
    for body in order:
        name = _name(model, body_kind, body)
        link = ET.SubElement(robot, "link", name=rename(name))
        meshes: dict = {}  # colour -> the link's mesh triangles of that colour

        def add_visual(geometry, attributes, colour, origin=None):
            visual = ET.SubElement(link, "visual")
            if origin is not None:
                _origin(visual, *origin)
            ET.SubElement(ET.SubElement(visual, "geometry"), geometry, **attributes)
            material = ET.SubElement(visual, "material", name=materials.setdefault(
                colour, f"color_{len(materials)}"))
            ET.SubElement(material, "color", rgba=colour)

        for geom in range(model.body_geomadr[body],
                          model.body_geomadr[body] + model.body_geomnum[body]):
            if model.geom_contype[geom] or model.geom_conaffinity[geom]:
                continue  # a collision geom: viewers draw the visuals
            rgba = model.mat_rgba[model.geom_matid[geom]] if model.geom_matid[geom] >= 0 \
                else model.geom_rgba[geom]
            colour = " ".join(f"{float(v):.4g}" for v in rgba)
            if int(model.geom_type[geom]) == _MESH:
                meshes.setdefault(colour, []).append(_triangles(model, geom))
                continue
            shape = _primitive(model, geom)
            if shape is not None:
                add_visual(*shape, colour, (model.geom_pos[geom], model.geom_quat[geom]))
        for colour, parts in meshes.items():
            data = _stl(np.concatenate(parts))
            path = directory / "meshes" / \
                f"{rename(name)}_{materials.setdefault(colour, f'color_{len(materials)}')}-" \
                f"{hashlib.sha256(data).hexdigest()[:12]}.stl"
            _atomic_write(path, data)
            add_visual("mesh", {"filename": f"meshes/{path.name}"}, colour)
        if body != root:
            _joint(robot, model, body, rename, flip_joints, joint_kind, body_kind)
    for site, link in sites.items():
        index = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, site)
        if index < 0:
            raise ValueError(f"the MuJoCo model has no site '{site}'")
        body = model.site_bodyid[index]
        if body not in order:
            raise ValueError(f"site '{site}' is not on the robot under '{root_body}'")
        ET.SubElement(robot, "link", name=link)
        joint = ET.SubElement(robot, "joint", name=f"{link}_joint", type="fixed")
        ET.SubElement(joint, "parent", link=rename(_name(model, body_kind, body)))
        ET.SubElement(joint, "child", link=link)
        _origin(joint, model.site_pos[index], model.site_quat[index])
    ET.indent(robot)
    text = ET.tostring(robot, encoding="unicode").encode()
    path = directory / f"{robot_name}-{hashlib.sha256(text).hexdigest()[:12]}.urdf"
    _atomic_write(path, text)
    return path


def _primitive(model, geom: int):
    """(URDF geometry element, attributes) of a box, sphere or cylinder geom; None for the
    shapes URDF lacks."""
    kind, size = int(model.geom_type[geom]), model.geom_size[geom]
    if kind == _BOX:
        return "box", {"size": " ".join(f"{2 * float(v):.9g}" for v in size)}
    if kind == _SPHERE:
        return "sphere", {"radius": f"{float(size[0]):.9g}"}
    if kind == _CYLINDER:
        return "cylinder", {"radius": f"{float(size[0]):.9g}",
                            "length": f"{2 * float(size[1]):.9g}"}
    return None


def _joint(robot: ET.Element, model, body: int, rename, flip_joints, joint_kind,
           body_kind) -> None:
    name = _name(model, body_kind, body)
    parent = rename(_name(model, body_kind, model.body_parentid[body]))
    count, first = model.body_jntnum[body], model.body_jntadr[body]
    if count > 1:
        raise ValueError(f"body '{name}' has {count} joints; URDF allows one per link")
    position = np.array(model.body_pos[body], dtype=float)
    if count == 0:
        joint = ET.SubElement(robot, "joint", name=f"{rename(name)}_joint", type="fixed")
        axis = None
    else:
        jname = _name(model, joint_kind, first)
        if int(model.jnt_type[first]) not in _JOINTS:
            raise ValueError(f"joint '{jname}' is a {mujoco.mjtJoint(model.jnt_type[first]).name}"
                             " joint; URDF has only revolute and prismatic ones here")
        if abs(model.qpos0[model.jnt_qposadr[first]]) > 1e-12:
            raise ValueError(f"joint '{jname}' has a reference position (ref); the URDF would "
                             "place its link wrongly")
        # URDF turns or slides a link about its own origin, so a joint off its body's
        # origin has no URDF form.
        if np.linalg.norm(model.jnt_pos[first]) > 1e-12:
            raise ValueError(f"joint '{jname}' is not at its body's origin")
        kind = _JOINTS[int(model.jnt_type[first])]
        if not model.jnt_limited[first]:
            if kind == "prismatic":
                raise ValueError(f"slide joint '{jname}' has no range; URDF needs one")
            kind = "continuous"
        joint = ET.SubElement(robot, "joint", name=rename(jname), type=kind)
        sign = -1.0 if jname in flip_joints else 1.0
        axis = sign * np.array(model.jnt_axis[first], dtype=float)
        lo, hi = sorted(sign * np.array(model.jnt_range[first], dtype=float))
    ET.SubElement(joint, "parent", link=parent)
    ET.SubElement(joint, "child", link=rename(name))
    _origin(joint, position, model.body_quat[body])
    if axis is not None:
        ET.SubElement(joint, "axis", xyz=" ".join(f"{v:.9g}" for v in axis))
    if joint.get("type") in ("revolute", "prismatic"):
        # The simulator's model has position limits only; URDF wants effort and velocity
        # too, and 0 says "not given".
        ET.SubElement(joint, "limit", lower=f"{lo:.9g}", upper=f"{hi:.9g}", effort="0",
                      velocity="0")
