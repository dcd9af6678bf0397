"""A robot node with a bad parameter refuses to start and says which one and why."""
from __future__ import annotations

import pytest

from rpent_contract.processes import wait_until


@pytest.mark.parametrize("parameters, expected", [
    ({"suite": "libero_nope"}, "parameter 'suite' = 'libero_nope': must be one of"),
    ({"image_height": 4}, "parameter 'image_height' = 4: must be in [16, 2048]"),
    ({"workspace_min": [0.0, 0.0]}, "parameter 'workspace_min'"),
    ({"workspace_min": [0.5, 0.0, 0.0], "workspace_max": [0.1, 1.0, 1.0]}, "must be below max"),
    ({"max_translation_step": -0.1}, "parameter 'max_translation_step' = -0.1: must be a finite"),
    ({"task_id": 10000}, "task"),
])
def test_libero_node_refuses_bad_parameters(node_factory, parameters, expected):
    proc = node_factory("rpent_env_sim", "libero_node", parameters, name="bad_params")
    wait_until(lambda: not proc.alive(), 120, what="the node to exit")
    assert proc.proc.returncode == 2
    assert expected in proc.log_tail(), proc.log_tail()
