"""Shared fixtures: an isolated ROS graph, rclpy, and node processes."""
from __future__ import annotations


import pytest


from rpent_contract.processes import NodeProcess, isolate_ros_graph  # noqa: E402

DOMAIN = isolate_ros_graph()


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
