"""LIBERO-Plus's suites (the liberoplus extra) beside LIBERO's: every task is listed with
its perturbation dimension, what needs LIBERO-Plus's own asset pack is refused with what
to install, and a perturbed task reaches what the robot sees and is asked, on the real
simulator of both packages in one process."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("liberoplus", reason="LIBERO-Plus is not installed: "
                                         "scripts/setup.sh --extras liberoplus")

from rpent_env_sim.libero_sim import LiberoSim, suite_tasks  # noqa: E402

DIMENSIONS = {"camera", "robot", "language", "light", "background", "noise", "layout"}


@pytest.fixture(scope="module")
def spatial():
    return suite_tasks("liberoplus_spatial")


def _base(name: str) -> str:
    return name.split("_view_")[0].split("_language_")[0]


def _first(tasks, dimension):
    return next(t for t in tasks if t.dimension == dimension)


def test_its_suites_list_every_task_with_its_dimension(spatial):
    assert {"liberoplus_spatial", "liberoplus_object", "liberoplus_goal",
            "liberoplus_10"} <= set(LiberoSim.available_suites())
    assert len(spatial) == 2402 and {t.dimension for t in spatial} == DIMENSIONS
    for task in spatial:
        pack = task.dimension in ("light", "background") or "_add_" in task.name
        assert bool(task.problems) == pack, task.name
        if pack:
            assert "LIBERO-Plus's asset pack" in task.problems[0]
            assert "liberoplus-download-assets" in task.problems[0]
        else:
            assert task.n_init_states >= 1 and task.instruction
    assert not {t.dimension for t in suite_tasks("libero_spatial")} - {""}


def test_what_needs_its_asset_pack_is_refused_with_what_to_install(spatial):
    light = _first(spatial, "light")
    with pytest.raises(FileNotFoundError, match=r"asset pack \(its light scenes.*"
                                                r"liberoplus-download-assets"):
        LiberoSim("liberoplus_spatial", task_id=light.task_id)


@pytest.mark.slow
def test_a_perturbation_reaches_what_the_robot_sees_and_is_asked(spatial):
    """The same scene and initial state as LIBERO's task: sensor noise corrupts the agentview
    camera only, a camera perturbation moves that camera, a language perturbation rewords
    the instruction."""
    libero = {t.name: t for t in suite_tasks("libero_spatial")}
    noise = next(t for t in spatial if t.dimension == "noise" and _base(t.name) in libero)
    camera = next(t for t in spatial if t.dimension == "camera"
                  and _base(t.name) == _base(noise.name))
    language = next(t for t in spatial if t.dimension == "language"
                    and _base(t.name) == _base(noise.name))
    original = libero[_base(noise.name)]

    def look(suite, task):
        sim = LiberoSim(suite, task_id=task.task_id, image_height=96, image_width=96)
        try:
            obs = sim.observe()
            return sim.instruction, {name: frame.rgb for name, frame in obs.images.items()}
        finally:
            sim.close()

    asked, seen = look("libero_spatial", original)
    noisy_asked, noisy = look("liberoplus_spatial", noise)
    _, moved = look("liberoplus_spatial", camera)
    reworded, _ = look("liberoplus_spatial", language)

    assert np.array_equal(noisy["robot0_eye_in_hand"], seen["robot0_eye_in_hand"])
    assert np.abs(noisy["agentview"].astype(int) - seen["agentview"]).mean() > 2.0
    assert np.abs(moved["agentview"].astype(int) - seen["agentview"]).mean() > 5.0
    assert noisy_asked == asked and reworded != asked and reworded


def test_an_evaluation_chooses_tasks_by_dimension(spatial):
    from rpent.eval.robots import LiberoSuites

    suites = LiberoSuites()
    episodes = suites.select(["liberoplus_spatial"], "0-999", "0", "0", "language,camera")
    chosen = {t.task_id for t in spatial if t.task_id < 1000
              and t.dimension in ("language", "camera")}
    assert {e.task_id for e in episodes} == chosen and len(episodes) == len(chosen)
    with pytest.raises(ValueError, match="its dimensions: background, camera, language"):
        suites.select(["liberoplus_spatial"], "all", "0", "0", "lighting")
    with pytest.raises(ValueError, match="LIBERO-Plus's asset pack"):
        suites.select(["liberoplus_spatial"], "all", "0", "0", "light")
    with pytest.raises(ValueError, match="only LIBERO-Plus suites"):
        suites.select(["libero_spatial"], "all", "0", "0", "camera")
    listing = "\n".join(suites.listing())
    assert "--dimensions 'light'" in listing and "none runnable" in listing


@pytest.mark.slow
def test_the_robot_node_serves_its_tasks_and_lists_what_each_perturbs(rclpy_context,
                                                                       node_factory, spatial):
    """A LIBERO node on a LIBERO-Plus suite: its task list names each task's dimension for
    a viewer's run panel, a reset to a perturbed task runs it, and one needing the asset pack
    is refused with what to install while the current task runs on."""
    from rpent_contract.client import RobotClient, next_message
    from rpent_contract.names import TASKS_TOPIC
    from rpent_contract.qos import LATCHED_QOS
    from rpent_interfaces.msg import TaskList

    camera, language, light = (_first(spatial, d) for d in ("camera", "language", "light"))
    node_factory("rpent_env_sim", "libero_node", {
        "suite": "liberoplus_spatial", "task_id": camera.task_id, "image_height": 64,
        "image_width": 64}, name="libero_sim")
    client = RobotClient()
    try:
        client.wait_ready(120)
        tasks = next_message(client.node, TaskList, TASKS_TOPIC, LATCHED_QOS, 60)
        assert tasks.suite == "liberoplus_spatial" and len(tasks.dimensions) == len(spatial)
        assert tasks.dimensions[camera.task_id] == "camera"
        assert tasks.instructions[language.task_id] == language.instruction
        refused = client.reset(task_id=light.task_id, init_state_index=0)
        assert not refused.success and "LIBERO-Plus's asset pack" in refused.message
        reset = client.reset(task_id=language.task_id, init_state_index=0)
        assert reset.success and reset.instruction == language.instruction, reset.message
    finally:
        client.close()
