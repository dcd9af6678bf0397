"""rpent export-dataset: recorded LIBERO runs become a LeRobot dataset that LeRobot loads,
trains on, and whose checkpoint the lerobot action-model backend serves.

The slow tests share one recording (dataset_bags.record_episodes): two episodes of the
scripted expert through ChunkExecutor, one solved, one cut short by its step budget, with
the rows the robot's execute_chunk feedback reports executed kept aside. The dataset is
checked against those, exactly, and against the bag as mcap-ros2-support decodes it,
independently of the exporter's reader.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from dataset_bags import Episode, copy_bag, record_episodes, write_bag
from rpent import export_dataset
from rpent.cli import main as rpent_main
from rpent.export_dataset import ExportConfig, ExportError, export, plan_episodes, read_run
from rpent_bag.latency import Step, chunk_latencies, read_bag

CAMERAS = ("agentview", "robot0_eye_in_hand")


@pytest.fixture(scope="module")
def recorded(rclpy_context, node_factory, tmp_path_factory):
    bag = tmp_path_factory.mktemp("run") / "bag"
    truths = record_episodes(
        lambda package, executable, params, name: node_factory(package, executable, params,
                                                               name=name),
        bag, [Episode(max_steps=400), Episode(max_steps=30, init_state_index=1)])
    solved, cut = truths
    assert solved.success and not cut.success, truths
    return bag, truths


@pytest.fixture(scope="module")
def png_dataset(recorded, tmp_path_factory):
    out = tmp_path_factory.mktemp("datasets") / "soup_png"
    lines = []
    summary = export(ExportConfig((recorded[0],), out, images="png"), lines.append)
    return out, summary, lines


def load(out, **kwargs):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    # torchcodec wants a system FFmpeg this machine may not have; PyAV brings its own.
    return LeRobotDataset(f"rpent/{out.name}", root=out, video_backend="pyav", **kwargs)


def provenance(out) -> list:
    return [json.loads(line) for line in (out / "meta" / "rpent_episodes.jsonl").open()]


def bag_contents(bag):
    """robot_state by stamp, camera images by (camera, stamp), and each episode's first
    task_status stamp, decoded with mcap-ros2-support."""
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    states, images, starts = {}, {}, {}
    topics = ["/robot_state", "/task_status"] + [f"/camera/{c}/image_raw" for c in CAMERAS]
    with open(bag / "bag.mcap", "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        for _, channel, _, msg in reader.iter_decoded_messages(topics=topics):
            stamp = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
            if channel.topic == "/robot_state":
                states[stamp] = msg
            elif channel.topic == "/task_status":
                starts.setdefault(msg.episode_id, stamp)
            else:
                rgb = np.frombuffer(msg.data, np.uint8).reshape(msg.height, msg.width, 3)
                images[(channel.topic.split("/")[2], stamp)] = rgb
    return states, images, starts


def state_vector(msg) -> np.ndarray:
    p, q = msg.ee_pose.position, msg.ee_pose.orientation
    return np.array([p.x, p.y, p.z, q.x, q.y, q.z, q.w, msg.gripper_width,
                     *msg.joint_positions], dtype=np.float32)


def pixels(chw) -> np.ndarray:
    """A LeRobot image (float CHW in [0, 1]) as the uint8 HWC it was written from."""
    return (chw.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)


@pytest.mark.slow
def test_export_holds_the_executed_steps_as_recorded(recorded, png_dataset):
    bag, truths = recorded
    out, summary, lines = png_dataset
    ds = load(out)
    episodes = provenance(out)
    assert ds.num_episodes == summary.episodes == 2
    assert [e["episode_id"] for e in episodes] == [t.episode_id for t in truths]
    assert ds.fps == 20 and ds.num_frames == summary.frames
    assert ds.meta.features["observation.state"]["names"][:8] == [
        "ee_x", "ee_y", "ee_z", "ee_qx", "ee_qy", "ee_qz", "ee_qw", "gripper_width"]
    assert set(ds.meta.camera_keys) == {f"observation.images.{c}" for c in CAMERAS}
    # Progress: a line per bag and per episode, with the running frame count.
    assert lines[0].startswith("[1/1] read ") and "frames/s" in lines[-1], lines

    solved, cut = episodes
    # Both episodes: every step the robot executed, from the reset on, nothing left out
    # (the solved one up to its success, the other up to its step budget).
    for episode, truth in zip(episodes, truths):
        assert (episode["first_step"], episode["last_step"]) == (0, len(truth.actions) - 1)
        assert episode["left_out"] == {}, episode
    assert solved["success"] and not cut["success"]
    assert len(truths[1].actions) >= 20

    states, images, starts = bag_contents(bag)
    ends = sorted(starts.values())[1:] + [float("inf")]
    windows = {e: (s, min(x for x in ends if x > s)) for e, s in starts.items()}
    index = 0
    for episode, truth in zip(episodes, truths):
        lo, hi = windows[episode["episode_id"]]
        for step in range(episode["first_step"], episode["last_step"] + 1):
            frame = ds[index]
            index += 1
            assert frame["task"] == truth.instruction
            # Exactly the row the robot executed at this step.
            np.testing.assert_array_equal(frame["action"].numpy(),
                                          truth.actions[step].astype(np.float32),
                                          err_msg=f"{episode['episode_id']} step {step}")
            # The observation it acted on: a robot_state of this episode reporting ``step``
            # steps executed, with its camera images (LIBERO publishes the same state and
            # images for as long as the step count stays).
            seen = [s for s, m in states.items() if lo <= s < hi and m.episode_step == step]
            assert any(
                np.array_equal(frame["observation.state"].numpy(), state_vector(states[s]))
                and all((c, s) in images and np.array_equal(
                    pixels(frame[f"observation.images.{c}"]), images[(c, s)]) for c in CAMERAS)
                for s in seen), (episode["episode_id"], step)
            # The expert stops at the success: only the last step achieves it.
            assert bool(frame["next.success"]) == (episode["success"]
                                                   and step == episode["last_step"])
    assert index == ds.num_frames


@pytest.mark.slow
def test_success_only_keeps_the_solved_episode(recorded, tmp_path, capsys):
    out = tmp_path / "solved"
    assert export_dataset.main([str(recorded[0]), "--out", str(out), "--success-only",
                                "--images", "png"]) == 0
    printed = capsys.readouterr().out
    assert "skipped episode" in printed and "not successful (--success-only)" in printed
    ds = load(out)
    assert ds.num_episodes == 1
    assert [e["episode_id"] for e in provenance(out)] == [recorded[1][0].episode_id]
    assert ds.num_frames == len(recorded[1][0].actions)
    assert bool(ds[ds.num_frames - 1]["next.success"])


@pytest.mark.slow
def test_video_export_decodes_close_to_the_bag(recorded, png_dataset, tmp_path):
    out = tmp_path / "soup_video"
    export(ExportConfig((recorded[0],), out), lambda line: None)
    video, lossless = load(out), load(png_dataset[0])
    assert set(video.meta.video_keys) == {f"observation.images.{c}" for c in CAMERAS}
    assert video.num_frames == lossless.num_frames
    for i in (0, video.num_frames // 2, video.num_frames - 1):
        a, b = video[i], lossless[i]
        np.testing.assert_array_equal(a["action"].numpy(), b["action"].numpy())
        for c in CAMERAS:
            key = f"observation.images.{c}"
            error = np.abs(pixels(a[key]).astype(int) - pixels(b[key]).astype(int)).mean()
            assert error < 4.0, (i, c, error)  # AV1 at LeRobot's quality


@pytest.mark.slow
def test_a_ros2_bag_record_sqlite_bag_exports_the_same(recorded, png_dataset, tmp_path):
    """``ros2 bag record`` on Humble: SQLite storage and no message definitions in the bag
    (the installed ones decode it)."""
    sqlite = copy_bag(recorded[0], tmp_path / "sqlite_bag", keep=lambda t: "depth" not in t)
    assert (sqlite / "sqlite_bag.db3").exists()
    out = tmp_path / "from_sqlite"
    summary = export(ExportConfig((sqlite,), out, images="png"), lambda line: None)
    mine, theirs = load(out), load(png_dataset[0])
    assert summary.frames == mine.num_frames == theirs.num_frames
    for i in range(0, mine.num_frames, 17):
        a, b = mine[i], theirs[i]
        for key in ("action", "observation.state", "next.success",
                    *(f"observation.images.{c}" for c in CAMERAS)):
            assert np.array_equal(a[key].numpy(), b[key].numpy()), (i, key)
        assert a["task"] == b["task"]


@pytest.mark.slow
def test_rpent_latency_times_every_applied_chunk_of_the_recording(recorded, capsys):
    bag, truths = recorded
    steps, inference, period = read_bag(bag)
    chunks = chunk_latencies(steps, inference)
    assert period == pytest.approx(0.05), "the chunks' step period is LIBERO's 20 Hz"
    # Every step the executor saw executed belongs to one timed chunk.
    assert sum(c.steps for c in chunks) == sum(len(t.actions) for t in truths)
    for c in chunks:
        assert c.observation < c.produced <= c.received <= c.first_applied, c
        assert c.inference_ms is not None and c.inference_ms >= 0, c
    assert rpent_main(["latency", str(bag), "--chunks"]) == 0
    out = capsys.readouterr().out
    assert f"{len(chunks)} chunks applied, control period 50.0 ms" in out
    assert "observation -> first step applied" in out and "inference + one period" in out


def test_chunk_latencies_group_steps_by_chunk_and_skip_steps_no_model_made():
    ms = 1_000_000
    steps = [Step(applied=130 * ms, observation=10 * ms, produced=60 * ms, received=70 * ms),
             Step(applied=80 * ms, observation=10 * ms, produced=60 * ms, received=70 * ms),
             Step(applied=90 * ms, observation=0, produced=0, received=85 * ms),  # move_to
             Step(applied=200 * ms, observation=120 * ms, produced=170 * ms,
                  received=180 * ms)]
    first, second = chunk_latencies(steps, {60 * ms: 45.0})
    assert (first.first_applied, first.steps, first.total_ms) == (80 * ms, 2, 70.0)
    assert first.inference_ms == 45.0 and second.inference_ms is None
    assert (second.first_applied, second.steps) == (200 * ms, 1)


@pytest.mark.slow
def test_lerobot_trains_on_it_and_the_bringup_serves_the_checkpoint(recorded, node_factory,
                                                                    tmp_path):
    """LeRobot's own training entry point, a few steps of a small ACT on the CPU with no
    network, on a dataset whose camera and state are the lerobot backend's defaults; then
    the checkpoint behind the model node as `am_backend:=lerobot am_checkpoint:=...`
    starts it (no cameras or state_names given)."""
    from rpent_am.client import ActionModelClient
    from rpent_contract.client import RobotClient

    out = tmp_path / "soup_default_features"
    export(ExportConfig((recorded[0],), out, images="png",
                        state_names=("ee_x", "ee_y", "ee_z", "gripper_width"),
                        cameras=(("agentview", "observation.images.image"),)),
           lambda line: None)
    train = tmp_path / "train"
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", WANDB_MODE="disabled")
    result = subprocess.run(
        [sys.executable, "-m", "lerobot.scripts.lerobot_train",
         f"--dataset.repo_id=rpent/{out.name}", f"--dataset.root={out}",
         "--policy.type=act", "--policy.device=cpu", "--policy.push_to_hub=false",
         "--policy.pretrained_backbone_weights=null",  # no ImageNet download
         "--policy.chunk_size=10", "--policy.n_action_steps=10", "--policy.dim_model=64",
         "--policy.n_heads=2", "--policy.dim_feedforward=128", "--policy.n_encoder_layers=1",
         "--policy.n_decoder_layers=1", "--policy.n_vae_encoder_layers=1",
         "--policy.latent_dim=8", "--steps=3", "--batch_size=2", "--num_workers=0",
         "--save_freq=3", "--log_freq=1", "--wandb.enable=false", f"--output_dir={train}"],
        env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    checkpoint = train / "checkpoints" / "last" / "pretrained_model"
    assert (checkpoint / "model.safetensors").exists()

    # The parameters bringup.py gives the model node for am_backend / am_checkpoint.
    proc = node_factory("rpent_am", "am_node", {"backend": "lerobot",
                                                "checkpoint": str(checkpoint)},
                        name="trained_model", remaps={"__node": "trained_model"})
    robot = RobotClient()
    try:
        model = ActionModelClient(robot.node, model="/trained_model")
        try:
            meta = model.connect(robot.wait_ready(60), timeout=120)
        except Exception:
            pytest.fail(proc.log_tail())
        assert meta.backend == "lerobot" and meta.chunk_size == 10
        chunk = model.predict(recorded[1][0].instruction, client_id="trained", timeout=60)
        assert chunk.shape == (10, 7) and np.all(np.isfinite(chunk))
    finally:
        robot.close()
        proc.stop()

    # ... and evaluated by the harness: an agent that only runs the policy, the robot's
    # verdict as the outcome (three training steps do not solve the task).
    plan = tmp_path / "policy_only.yaml"
    plan.write_text(yaml.safe_dump([
        {"tool": "run_policy", "args": {"instruction": recorded[1][0].instruction,
                                        "max_chunks": 3}},
        {"tool": "finish", "args": {"status": "failure", "summary": "the policy ran"}}]))
    evaluation = tmp_path / "eval"
    result = subprocess.run(
        [sys.executable, "-m", "rpent.eval", "--suites", "libero_object", "--tasks", "0",
         "--init-states", "0", "--workers", "1", "--out", str(evaluation),
         "planner:=scripted", f"plan_file:={plan}", "am_backend:=lerobot",
         f"am_checkpoint:={checkpoint}"], env=env, capture_output=True, text=True, timeout=900)
    results = evaluation / "results.jsonl"
    lines = results.read_text().splitlines() if results.exists() else []
    assert len(lines) == 1, result.stdout[-3000:] + result.stderr[-3000:]
    record = json.loads(lines[0])
    assert record["outcome"] == "failure" and not record["native_success"], record
    transcript = json.loads((Path(record["run_dir"]) / "transcript.json").read_text())
    ran = [e for e in transcript["events"] if e["kind"] == "tool_result"
           and e["tool"] == "run_policy"]
    assert ran and ran[0]["ok"] and record["steps"] >= 10, (ran, record)


# --- bad input: no simulator needed ---------------------------------------------------------
def robot_state():
    from rpent_interfaces.msg import RobotState

    msg = RobotState(joint_names=["j1"], joint_positions=[0.0])
    msg.header.stamp.sec = 1
    return msg


def camera_image():
    from sensor_msgs.msg import Image

    msg = Image(height=2, width=2, encoding="rgb8", step=6, data=bytes(12))
    msg.header.stamp.sec = 1
    return msg


def executed(step: int, sec: int, episode_id="e"):
    from rpent_interfaces.msg import ExecutedAction

    msg = ExecutedAction(episode_id=episode_id, episode_step=step,
                         control_space="libero_osc_delta", action=[step + 0.5] * 7)
    msg.header.stamp.sec = sec
    return msg


def export_error(tmp_path, bag, **kwargs) -> str:
    with pytest.raises(ExportError) as err:
        export(ExportConfig((bag,), tmp_path / "out", **kwargs), lambda line: None)
    assert not (tmp_path / "out").exists()
    return str(err.value)


def test_a_bag_without_cameras_is_refused_with_what_to_record(tmp_path):
    bag = write_bag(tmp_path / "bag", [("/robot_state", robot_state())])
    message = export_error(tmp_path, bag)
    assert "no camera images" in message and "camera/*/image_raw" in message


def test_a_bag_without_executed_actions_is_refused_with_what_to_record(tmp_path):
    from rpent_interfaces.msg import TaskStatus

    bag = write_bag(tmp_path / "bag", [
        ("/robot_state", robot_state()), ("/camera/front/image_raw", camera_image()),
        ("/task_status", TaskStatus(episode_id="e", instruction="do it"))])
    message = export_error(tmp_path, bag)
    assert "no messages on /executed_actions" in message and "no executed action" in message
    assert "record:=true" in message and "ros2 bag record" in message  # how to record it


def test_each_executed_step_pairs_with_the_observation_of_its_step(tmp_path):
    """A synthetic bag: steps 0-1 and 3-6 executed through execute_chunk, step 2 by another
    motion (no ExecutedAction), step 6's observation without its image; step 3 measured
    twice before it ran."""
    from rpent_interfaces.msg import TaskStatus

    def state(step, sec, nanosec=0, width=0.0):
        msg = robot_state()
        msg.header.stamp.sec, msg.header.stamp.nanosec = sec, nanosec
        msg.episode_step, msg.gripper_width = step, width
        return msg

    def image(sec, nanosec=0):
        msg = camera_image()
        msg.header.stamp.sec, msg.header.stamp.nanosec = sec, nanosec
        return msg

    task = TaskStatus(episode_id="e", instruction="do it")
    task.header.stamp.sec = 1
    messages = [("/task_status", task)]
    for k in range(7):
        messages.append(("/robot_state", state(k, 10 + 2 * k)))
        if k != 6:
            messages.append(("/camera/front/image_raw", image(10 + 2 * k)))
        if k == 3:  # measured again before the step ran: the newer one is its observation
            messages += [("/robot_state", state(3, 16, 500, width=0.25)),
                         ("/camera/front/image_raw", image(16, 500))]
        if k != 2:
            messages.append(("/executed_actions", executed(k, 11 + 2 * k)))
    done = TaskStatus(episode_id="e", instruction="do it", step=6, success=True)
    done.header.stamp.sec = 23
    messages += [("/task_status", done), ("/robot_state", state(7, 24)),
                 ("/camera/front/image_raw", image(24)),
                 ("/executed_actions", executed(0, 25, episode_id="not recorded"))]
    bag = write_bag(tmp_path / "bag", messages)
    [plan] = plan_episodes(read_run(bag, ExportConfig((bag,), tmp_path / "out")))
    assert (plan.episode_id, plan.instruction) == ("e", "do it")
    # 0-1 and 3-5 are complete; 3-5 is the longer run.
    assert [f.sample.step for f in plan.frames] == [3, 4, 5]
    for f in plan.frames:
        np.testing.assert_array_equal(f.step.action, [f.sample.step + 0.5] * 7)
        assert f.step.space == "libero_osc_delta"
    assert plan.frames[0].sample.stamp == 16 * 10**9 + 500
    assert plan.frames[0].sample.state[7] == np.float32(0.25)
    assert [f.success for f in plan.frames] == [False, False, True]
    assert plan.left_out == {export_dataset.OTHER_MOTION: 1, export_dataset.NO_OBSERVATION: 1,
                             export_dataset.OUTSIDE_RUN: 2}


def test_unreadable_bags_are_refused_with_the_reason(tmp_path):
    assert "not a rosbag2 directory" in export_error(tmp_path, tmp_path / "missing")
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "metadata.yaml").write_text("rosbag2_bagfile_information: [not, a, bag]\n")
    message = export_error(tmp_path, damaged)
    assert "cannot read" in message and "metadata.yaml" in message


def test_command_line_errors_say_what_to_do(tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    assert export_dataset.main([str(tmp_path), "--out", str(tmp_path / "taken")]) == 2
    assert "exists; choose a new folder" in capsys.readouterr().err
    assert export_dataset.main([str(tmp_path / "missing"), "--out", str(tmp_path / "d")]) == 2
    assert "not a rosbag2 directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        export_dataset.main([str(tmp_path), "--out", str(tmp_path / "d"), "--cameras", "front"])
    assert "agentview=observation.images.image" in capsys.readouterr().err
    assert export_dataset.main([str(tmp_path), "--out", str(tmp_path / "d"),
                                "--cameras", "front=image"]) == 2
    assert "observation.images.<name>" in capsys.readouterr().err
