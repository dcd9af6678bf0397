"""Shared fixtures: an isolated ROS graph, rclpy, and node processes."""
from __future__ import annotations


from pathlib import Path

import pytest


from rpent_testkit.processes import NodeProcess, isolate_ros_graph  # noqa: E402

DOMAIN = isolate_ros_graph()
FRANKA_CONFIG = Path(__file__).resolve().parents[1] / "config" / "franka.yaml"


@pytest.fixture(scope="session")
def rclpy_context():
    import rclpy

    rclpy.init()
    yield
    rclpy.try_shutdown()


@pytest.fixture(scope="module")
def node_factory(tmp_path_factory):
    """Start node processes for a test module; every one is stopped when the module ends."""
    started: list[NodeProcess] = []
    log_dir = tmp_path_factory.mktemp("nodes")

    def start(package, executable, parameters=None, namespace="", name=None,
              params_file=None, remaps=None) -> NodeProcess:
        proc = NodeProcess(package, executable, parameters or {}, log_dir, namespace, name,
                           params_file, remaps)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture(scope="session")
def example_package(tmp_path_factory) -> Path:
    """examples/rpent_example installed as pip installs any package (built from a copy, so
    parallel sessions never build in the checkout), into a folder that is on no path until
    a test puts it there. Returns that folder."""
    import shutil
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("example_package")
    source = shutil.copytree(Path(__file__).resolve().parents[1] / "examples" / "rpent_example",
                             root / "source")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", "--target", str(root / "site"),
                    str(source)], check=True, timeout=120)
    return root / "site"


@pytest.fixture(scope="module")
def franka(rclpy_context, node_factory, tmp_path_factory):
    """franky-sim + the Franka node (config/franka.yaml) + a client, for a test module; the
    sim is stopped even when a test fails. Yields (client, sim, node)."""
    from rpent_contract.client import RobotClient
    from rpent_twins.franky_sim import SIM_PARAMETERS, FrankySimProcess

    sim = FrankySimProcess(tmp_path_factory.mktemp("franky_sim")).start()
    client = None
    try:
        node = node_factory("rpent_hw", "franka_node", {**SIM_PARAMETERS, "robot_ip": sim.host},
                            name="franka", params_file=FRANKA_CONFIG)
        client = RobotClient()
        client.wait_ready(60)
        yield client, sim, node
    finally:
        if client is not None:
            client.close()
        sim.stop()
