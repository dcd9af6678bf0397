"""The URDF a simulated robot publishes draws what the simulator simulates: each link's
mesh pieces of one colour in one file, where MuJoCo has them."""
import xml.etree.ElementTree as ET

import mujoco
import numpy as np

from rpent_env_sim.mjcf_urdf import write_urdf

XML = """
<mujoco>
  <asset>
    <mesh name="wedge" vertex="0 0 0  0.1 0 0  0 0.1 0  0 0 0.1  0.05 0.05 0.02"/>
    <material name="red" rgba="1 0 0 1"/>
    <material name="grey" rgba="0.5 0.5 0.5 1"/>
  </asset>
  <worldbody>
    <body name="base">
      <geom type="mesh" mesh="wedge" material="red" contype="0" conaffinity="0"
            pos="0.1 0 0" euler="0 0 90"/>
      <geom type="mesh" mesh="wedge" material="red" contype="0" conaffinity="0"
            pos="0 0.2 0" euler="90 0 30"/>
      <geom type="mesh" mesh="wedge" material="grey" contype="0" conaffinity="0"
            pos="0 0 0.3"/>
      <geom type="box" size="0.01 0.02 0.03" material="grey" contype="0" conaffinity="0"
            pos="0.5 0 0"/>
      <geom type="sphere" size="0.05"/>
      <body name="arm" pos="0 0 0.5" euler="0 20 0">
        <joint name="swing" type="hinge" axis="0 0 1"/>
        <geom type="mesh" mesh="wedge" material="grey" contype="0" conaffinity="0"
              pos="0.05 0 0" euler="0 45 0"/>
      </body>
    </body>
  </worldbody>
</mujoco>"""


def _read_stl(path) -> np.ndarray:
    data = path.read_bytes()
    count = int(np.frombuffer(data[80:84], "<u4")[0])
    records = np.frombuffer(data[84:], dtype=[("n", "<f4", 3), ("v", "<f4", (3, 3)),
                                             ("attr", "<u2")], count=count)
    return records["v"].astype(np.float64)


def _canonical(triangles) -> np.ndarray:
    flat = np.round(np.asarray(triangles).reshape(len(triangles), 9), 5)
    return flat[np.lexsort(flat.T[::-1])]


def test_each_links_pieces_of_one_colour_are_one_mesh_where_the_simulator_has_them(tmp_path):
    model = mujoco.MjModel.from_xml_string(XML)
    data = mujoco.MjData(model)
    data.qpos[:] = 0.7
    mujoco.mj_forward(model, data)
    path = write_urdf(model, "wedges", "base", tmp_path, rename=lambda n: n)
    robot = ET.parse(path).getroot()

    drawn = {}
    for link in robot.iter("link"):
        for visual in link.iter("visual"):
            colour = visual.find("material/color").get("rgba")
            mesh = visual.find("geometry/mesh")
            if mesh is None:
                drawn.setdefault(link.get("name"), []).append(
                    ("box" if visual.find("geometry/box") is not None else "?", colour))
                continue
            assert visual.find("origin") is None, "a merged mesh sits in its link's frame"
            drawn.setdefault(link.get("name"), []).append(
                (_read_stl(tmp_path / mesh.get("filename")), colour))
    # base: the red pair as one mesh, the grey piece, the box; the collision sphere is not drawn.
    assert sorted(c for _, c in drawn["base"]) == ["0.5 0.5 0.5 1", "0.5 0.5 0.5 1", "1 0 0 1"]
    assert [kind for kind, _ in drawn["base"] if isinstance(kind, str)] == ["box"]
    assert len(drawn["arm"]) == 1

    # Where MuJoCo puts each piece now, in its body's frame, from the simulated state alone.
    for body_name in ("base", "arm"):
        body = model.body(body_name).id
        expected = {}
        for geom in range(model.body_geomadr[body], model.body_geomadr[body]
                          + model.body_geomnum[body]):
            if model.geom_type[geom] != mujoco.mjtGeom.mjGEOM_MESH:
                continue
            mesh = model.geom_dataid[geom]
            vertices = model.mesh_vert[model.mesh_vertadr[mesh]:
                                       model.mesh_vertadr[mesh] + model.mesh_vertnum[mesh]]
            faces = model.mesh_face[model.mesh_faceadr[mesh]:
                                    model.mesh_faceadr[mesh] + model.mesh_facenum[mesh]]
            world = vertices[faces] @ data.geom_xmat[geom].reshape(3, 3).T + data.geom_xpos[geom]
            in_body = (world - data.xpos[body]) @ data.xmat[body].reshape(3, 3)
            colour = " ".join(f"{float(v):.4g}" for v in model.mat_rgba[model.geom_matid[geom]])
            expected.setdefault(colour, []).append(in_body)
        meshes = {c: t for t, c in drawn[body_name] if not isinstance(t, str)}
        assert meshes.keys() == expected.keys()
        for colour, parts in expected.items():
            np.testing.assert_allclose(_canonical(meshes[colour]),
                                       _canonical(np.concatenate(parts)), atol=2e-5)
