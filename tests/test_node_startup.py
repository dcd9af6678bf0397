"""A robot node with a bad parameter refuses to start and says which one and why."""
from __future__ import annotations

import pytest

from rpent_common.processes import wait_until


@pytest.mark.parametrize("parameters, expected", [
    ({"suite": "libero_nope"}, "parameter 'suite' = 'libero_nope': must be one of"),
    ({"image_height": 4}, "parameter 'image_height' = 4: must be in [16, 2048]"),
    ({"workspace_min": [0.0, 0.0]}, "parameter 'workspace_min'"),
    ({"workspace_min": [0.5, 0.0, 0.0], "workspace_max": [0.1, 1.0, 1.0]}, "must be below max"),
    ({"max_translation_step": -0.1}, "parameter 'max_translation_step' = -0.1: must be a finite"),
    ({"task_id": 10000}, "task"),
    ({"render_device": -2}, "parameter 'render_device' = -2: must be -1 or a device index"),
    ({"render_device": 64}, "render_device 64: this machine has "),
])
def test_libero_node_refuses_bad_parameters(node_factory, parameters, expected):
    proc = node_factory("rpent_env_sim", "libero_node", parameters, name="bad_params")
    wait_until(lambda: not proc.alive(), 120, what="the node to exit")
    assert proc.proc.returncode == 2
    assert expected in proc.log_tail(), proc.log_tail()


def test_the_bridge_refuses_to_listen_beyond_loopback_unless_told_to(node_factory):
    """Anyone who reaches the bridge may answer the operator's questions: listening on every
    interface takes allow_remote:=true (not exercised here: tests stay on loopback)."""
    proc = node_factory("rpent_foxglove", "bridge", {"host": "0.0.0.0", "port": 0},
                        name="remote_bridge")
    wait_until(lambda: not proc.alive(), 60, what="the bridge to exit")
    assert proc.proc.returncode == 2
    assert "parameter 'host' = '0.0.0.0': 0.0.0.0 is beyond loopback" in proc.log_tail(), \
        proc.log_tail()
    assert "allow_remote:=true" in proc.log_tail()


def test_the_bridge_says_which_port_is_taken(node_factory):
    """A busy foxglove.websocket.v1 port stops the bridge at once with both ports named."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = node_factory("rpent_foxglove", "bridge", {"port": 0, "legacy_port": port},
                            name="busy_v1_bridge")
        wait_until(lambda: not proc.alive(), 60, what="the bridge to exit")
    assert proc.proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:0 and {port} ([Errno 98]" in proc.log_tail(), \
        proc.log_tail()
    assert "address already in use" in proc.log_tail()


@pytest.mark.parametrize("package, executable, parameters, expected", [
    ("rpent_env_sim", "libero_node", {"tsk_id": 3}, "'tsk_id' (did you mean 'task_id'?)"),
    ("rpent_foxglove", "bridge", {"port": 0, "legacy_prot": -1},
     "'legacy_prot' (did you mean 'legacy_port'?)"),
    ("rpent_bag", "recorder", {"image_rat": 2.0}, "'image_rat' (did you mean 'image_rate'?)"),
    ("rpent_agent", "agent_node", {"max_turn": 3}, "'max_turn' (did you mean 'max_turns'?)"),
])
def test_a_misspelt_parameter_stops_the_node_with_the_name_it_meant(node_factory, package,
                                                                    executable, parameters,
                                                                    expected):
    """ROS ignores a parameter the node never declared, so `tsk_id:=3` would run task 0.
    (The model node checks the same once its backend is built, which takes a robot.)"""
    proc = node_factory(package, executable, parameters, name="misspelt")
    wait_until(lambda: not proc.alive(), 120, what="the node to exit")
    assert proc.proc.returncode == 2, proc.log_tail()
    assert f"has no parameter {expected}" in proc.log_tail(), proc.log_tail()
