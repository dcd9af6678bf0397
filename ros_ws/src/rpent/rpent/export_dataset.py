"""Recorded runs (rosbag2, MCAP or SQLite) -> a LeRobot dataset (codebase v3.0).

    rpent export-dataset runs/*/bag --out datasets/soup [--success-only] [--images png]

Every robot episode in the bags (``task_status.episode_id``) becomes one dataset episode
whose task is the episode's instruction. A frame is one executed control step ``k`` of the
episode: the action the robot applied at it, as the robot published it on
``executed_actions`` (``rpent_interfaces/msg/ExecutedAction``, one per step of every
execute_chunk goal, with the episode and the ``episode_step`` it was applied at), paired
with the observation it acted on: the ``robot_state`` of that episode reporting
``episode_step == k`` (the latest such measurement not after the step was applied) and each
``camera/<name>/image_raw`` with the same header stamp. Frames are at the robot's control
rate (the model chunks' step period where the bag has them, else the rate the steps were
applied at).

Steps without a frame are left out and counted in the summary: steps of move_to and
gripper_command (they publish no ExecutedAction) and steps whose observation was not
recorded (robot_state published slower than the robot stepped); each episode keeps its
longest run of consecutive steps that have both. ``next.success`` of a frame is the task's
success once its step ran (task_status ``success`` or ``native_success``); an episode
succeeded when its last frame did. ``meta/rpent_episodes.jsonl`` says where each episode
came from (bag, episode id, robot steps, what was left out).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from rpent_am.observation import POSE_STATE, ObservationError, state_from_robot_state
from rpent_bag import bagfile
from rpent_bag.video import image_rgb, recorded_fps
from rpent_contract.extras import MissingExtra, require
from rpent_contract.names import ROBOT_STATE_TOPIC, TASK_STATUS_TOPIC

IMAGE_STORAGE = ("video", "png")
IMAGE_FEATURE = "observation.images."
ROBOT_STATE_TYPE = "rpent_interfaces/msg/RobotState"
TASK_STATUS_TYPE = "rpent_interfaces/msg/TaskStatus"
EXECUTED_TYPE = "rpent_interfaces/msg/ExecutedAction"
CHUNK_TYPE = "rpent_interfaces/action/Predict_FeedbackMessage"
IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")
RECORD_HINT = ("record the run with the recorder's default topics (`record:=true`; they "
               "include robot_state, task_status, executed_actions and the cameras), or name "
               "those topics to `ros2 bag record`")

# Why a robot step is not a frame, as the summary words it.
OTHER_MOTION = "without an executed action (move_to / gripper_command steps publish none)"
NO_OBSERVATION = "without a recorded observation (robot_state and every camera) of their step"
OUTSIDE_RUN = "outside the episode's longest run of consecutive complete steps"


class ExportError(ValueError):
    """The bags cannot be exported as asked; the message says what to do."""


@dataclass(frozen=True)
class ExportConfig:
    bags: tuple
    out: Path
    repo_id: str = ""              # '' = rpent/<name of out>
    success_only: bool = False     # keep only episodes whose task succeeded
    images: str = "video"          # video: MP4 (LeRobot's default, lossy) | png: lossless
    fps: int = 0                   # 0 = the recorded control rate
    namespace: Optional[str] = None  # robot namespace in the bags; None = the only robot
    state_names: tuple = ()        # () = ee pose, gripper width, then the robot's joints
    # (contract camera, image feature) pairs, the action-model node's `cameras` mapping;
    # () = every camera, as observation.images.<camera>
    cameras: tuple = ()

    def __post_init__(self):
        if not self.bags:
            raise ExportError("no bags given; pass one or more rosbag2 folders (runs/*/bag)")
        if self.images not in IMAGE_STORAGE:
            raise ExportError(f"images '{self.images}' is not one of {', '.join(IMAGE_STORAGE)}")
        if self.fps < 0:
            raise ExportError(f"fps must be > 0 (or 0 for the recorded rate), got {self.fps}")
        keys = [key for _, key in self.cameras]
        if any(not key.startswith(IMAGE_FEATURE) for key in keys) or len(set(keys)) < len(keys):
            raise ExportError(f"cameras {dict(self.cameras)}: each camera needs an image feature "
                              f"of its own, named {IMAGE_FEATURE}<name>")

    def feature_of(self, camera: str) -> Optional[str]:
        """The image feature of a contract camera; None when it is not exported."""
        if not self.cameras:
            return IMAGE_FEATURE + camera
        return dict(self.cameras).get(camera)

    @property
    def dataset_repo_id(self) -> str:
        return self.repo_id or f"rpent/{Path(self.out).resolve().name}"


# --- what one bag holds ------------------------------------------------------------------
@dataclass
class Sample:
    """One robot_state: the state after ``step`` steps of the episode, stamped ``stamp``."""
    stamp: int
    step: int
    state: np.ndarray


@dataclass
class TaskMark:
    stamp: int
    episode_id: str
    instruction: str
    step: int
    success: bool


@dataclass
class Step:
    """One executed step as the robot published it (executed_actions)."""
    stamp: int             # when it was applied
    episode_id: str
    step: int              # the episode_step of the observation it acted on
    action: np.ndarray
    space: str


@dataclass
class RunRecord:
    """Everything but the pixels of one bag, in recording order."""
    bag: Path
    cameras: dict          # image feature -> camera topic
    state_names: tuple
    samples: list
    marks: list
    steps: list            # Step, in recording order
    image_stamps: dict     # image feature -> set of header stamps
    image_shapes: dict     # image feature -> (height, width, 3)
    fps: float             # control rate


@dataclass
class Frame:
    sample: Sample
    step: Step
    success: bool


@dataclass
class EpisodePlan:
    episode_id: str
    instruction: str
    frames: list
    left_out: Counter

    @property
    def success(self) -> bool:
        return bool(self.frames) and self.frames[-1].success


def _stamp(t) -> int:
    return int(t.sec) * 1_000_000_000 + int(t.nanosec)


def _topics(reader, namespace: Optional[str], bag: Path) -> dict:
    """The contract topics of the bag's robot: role -> connections."""
    by_type: dict = {}
    for conn in reader.connections:
        by_type.setdefault(conn.msgtype, []).append(conn)
    robots = sorted({c.topic[: -len("/robot_state")] for c in by_type.get(ROBOT_STATE_TYPE, [])
                     if c.topic.endswith("/robot_state")})
    if namespace is not None:
        ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
        if ns not in robots:
            raise ExportError(f"{bag} has no {ns}/robot_state (robots: "
                              f"{', '.join(r or '/' for r in robots) or 'none'}); pass the "
                              f"namespace of one of them with --namespace")
    elif len(robots) == 1:
        ns = robots[0]
    elif not robots:
        raise ExportError(f"{bag} has no robot_state topic, so it is not a recorded robot run; "
                          f"{RECORD_HINT}")
    else:
        raise ExportError(f"{bag} holds several robots ({', '.join(r or '/' for r in robots)}); "
                          f"pick one with --namespace")

    def one(topic: str, msgtype: str, what: str):
        conns = [c for c in by_type.get(msgtype, []) if c.topic == f"{ns}/{topic}"]
        if not conns or not sum(c.msgcount for c in conns):
            raise ExportError(f"{bag} has no messages on {ns}/{topic}, so {what}; {RECORD_HINT}")
        return conns

    def one_executed():
        conns = [c for c in by_type.get(EXECUTED_TYPE, [])
                 if c.topic == f"{ns}/executed_actions" and c.msgcount]
        if not conns:
            raise ExportError(
                f"{bag} has no messages on {ns}/executed_actions, so no executed action is "
                f"known: the robot publishes there every step it executes; record that topic "
                f"(a default of the recorder, so `record:=true` does; with `ros2 bag record`, "
                f"name {ns}/executed_actions), and let the action model drive the robot "
                f"through execute_chunk (run_policy, ChunkExecutor)")
        return conns

    cameras = {}
    for msgtype in IMAGE_TYPES:
        for c in by_type.get(msgtype, []):
            parts = c.topic[len(ns):].split("/")
            if (c.topic.startswith(ns + "/camera/") and len(parts) == 4
                    and parts[3] == "image_raw" and c.msgcount):
                cameras[parts[2]] = c
    if not cameras:
        raise ExportError(f"{bag} has no camera images ({ns}/camera/<name>/image_raw), which "
                          f"every frame needs; record the robot's camera topics "
                          f"(camera/*/image_raw, a default of the recorder)")
    # The model's chunks only say the control rate (their step period); optional.
    chunks = [c for c in by_type.get(CHUNK_TYPE, [])
              if c.topic.endswith("predict/_action/feedback") and c.msgcount]
    return {
        "state": one(ROBOT_STATE_TOPIC, ROBOT_STATE_TYPE, "there are no observations"),
        "task": one(TASK_STATUS_TOPIC, TASK_STATUS_TYPE, "episodes and instructions are unknown"),
        "executed": one_executed(),
        "chunk": chunks,
        "cameras": cameras,
    }


def _open(bag: Path):
    try:
        reader = bagfile.open_reader(bag)
        reader.open()
        return reader
    except bagfile.BagError as err:
        raise ExportError(str(err)) from None
    except Exception as err:  # rosbags raises its own types for damaged files
        raise ExportError(f"cannot read {bag} as a rosbag2 bag ({type(err).__name__}: {err}); "
                          f"check that the recording was closed (Ctrl-C, not kill -9) and "
                          f"that metadata.yaml and the storage file are intact") from None


class _Collector:
    """Turns the messages of one bag into a RunRecord, one role at a time."""

    def __init__(self, bag: Path, cameras: dict, state_names: Sequence[str]):
        self.bag, self.cameras, self.names = bag, cameras, tuple(state_names)
        self.samples, self.marks, self.steps, self.periods = [], [], [], []
        self.image_stamps = {name: set() for name in cameras}
        self.image_shapes: dict = {}

    def camera(self, camera, _received, msg) -> None:
        name, msgtype = camera
        self.image_stamps[name].add(_stamp(msg.header.stamp))
        if name not in self.image_shapes:
            self.image_shapes[name] = image_rgb(msgtype, msg).shape

    def state(self, _name, _received, msg) -> None:
        self.names = self.names or (*POSE_STATE, *msg.joint_names)
        try:
            state = state_from_robot_state(msg, self.names)
        except ObservationError as err:
            raise ExportError(f"{self.bag}: {err}; pass --state-names from those") from None
        self.samples.append(Sample(_stamp(msg.header.stamp), int(msg.episode_step), state))

    def task(self, _name, _received, msg) -> None:
        self.marks.append(TaskMark(_stamp(msg.header.stamp), msg.episode_id, msg.instruction,
                                   int(msg.step), bool(msg.success or msg.native_success)))

    def executed(self, _name, _received, msg) -> None:
        self.steps.append(Step(_stamp(msg.header.stamp), msg.episode_id, int(msg.episode_step),
                               np.asarray(msg.action, dtype=np.float64), msg.control_space))

    def chunk(self, _name, _received, msg) -> None:
        if msg.feedback.chunk.step_period > 0:
            self.periods.append(float(msg.feedback.chunk.step_period))

    def record(self) -> RunRecord:
        # The chunks' step period is the control rate the actions are for; without chunks,
        # the rate the robot applied its steps at (its control rate when it runs in real
        # time; robot_state is published at its own publish_rate).
        fps = 1.0 / float(np.median(self.periods)) if self.periods else recorded_fps(
            sorted(s.stamp for s in self.steps))
        return RunRecord(self.bag, self.cameras, self.names, self.samples, self.marks,
                         self.steps, self.image_stamps, self.image_shapes, fps)


def read_run(bag, config: ExportConfig) -> RunRecord:
    """Read everything the export needs from one bag except the image pixels."""
    bag = Path(bag)
    reader = _open(bag)
    try:
        roles = _topics(reader, config.namespace, bag)
        recorded = roles.pop("cameras")
        missing = [name for name, _ in config.cameras if name not in recorded]
        if missing:
            raise ExportError(f"{bag} has no camera {', '.join(missing)} (it has "
                              f"{', '.join(sorted(recorded))}); map those in --cameras")
        cameras = {config.feature_of(name): c for name, c in recorded.items()
                   if config.feature_of(name)}
        collect = _Collector(bag, {key: c.topic for key, c in cameras.items()},
                             config.state_names)
        handlers = {c.topic: (getattr(collect, role), None) for role, conns in roles.items()
                    for c in conns}
        handlers.update({c.topic: (collect.camera, (key, c.msgtype))
                         for key, c in cameras.items()})
        conns = [c for conns in roles.values() for c in conns] + list(cameras.values())
        store = bagfile.typestore(conns)
        try:
            for conn, received, data in bagfile.messages(reader, conns):
                handle, name = handlers[conn.topic]
                handle(name, received, store.deserialize_cdr(data, conn.msgtype))
        except ExportError:
            raise
        except Exception as err:
            raise ExportError(f"cannot read a message of {bag} ({type(err).__name__}: {err}); "
                              f"the bag is damaged: re-record the run, or export the other "
                              f"bags without it") from None
    finally:
        reader.close()
    return collect.record()


# --- which observation each executed step acted on -------------------------------------
def plan_episodes(run: RunRecord) -> list:
    """The frames each episode of ``run`` can export, and why the other steps cannot."""
    if not run.marks:
        return []
    starts, episodes, index = [], [], {}
    for mark in run.marks:
        if mark.episode_id not in index:
            index[mark.episode_id] = len(episodes)
            episodes.append((mark.episode_id, mark.instruction))
            starts.append(mark.stamp)
    starts = np.array(starts, dtype=np.int64)
    # robot_state names no episode: an episode starts when the reset that made it published
    # its first task_status.
    samples = [[] for _ in episodes]
    for s in run.samples:
        i = int(np.searchsorted(starts, s.stamp, side="right")) - 1
        if i >= 0:
            samples[i].append(s)
    steps = [{} for _ in episodes]
    for step in run.steps:
        if step.episode_id in index:
            steps[index[step.episode_id]].setdefault(step.step, step)
    successes = [[] for _ in episodes]
    for mark in run.marks:
        if mark.success:
            successes[index[mark.episode_id]].append(mark.step)
    complete = set.intersection(*run.image_stamps.values())
    return [_plan(eid, instruction, samples[i], steps[i], min(successes[i], default=None),
                  complete) for i, (eid, instruction) in enumerate(episodes)]


def _plan(episode_id, instruction, samples, steps, success_step, with_images) -> EpisodePlan:
    """``steps``: episode_step -> Step; ``samples``: the episode's robot_state in time
    order; ``success_step``: the first step count task_status reported success at."""
    left_out = Counter()
    last_step = max([s.step for s in samples] + [n + 1 for n in steps], default=0)
    left_out[OTHER_MOTION] = last_step - len(steps)
    observed = {}
    for s in samples:
        # The latest measurement of the step before it was applied (a robot may publish
        # several while it waits for the next goal), with every camera's image.
        if s.stamp in with_images and s.step in steps and s.stamp <= steps[s.step].stamp:
            observed[s.step] = s
    left_out[NO_OBSERVATION] = len(steps) - len(observed)
    run = _longest_run(sorted(observed))
    left_out[OUTSIDE_RUN] = len(observed) - len(run)
    frames = [Frame(observed[n], steps[n], success_step is not None and success_step <= n + 1)
              for n in run]
    return EpisodePlan(episode_id, instruction, frames, +left_out)


def _longest_run(steps: list) -> list:
    """The longest stretch of consecutive numbers in sorted ``steps`` (the first of equals)."""
    best, size, start = 0, 0, 0
    for i in range(1, len(steps) + 1):
        if i == len(steps) or steps[i] != steps[i - 1] + 1:
            if i - start > size:
                best, size = start, i - start
            start = i
    return steps[best:best + size]


# --- writing -----------------------------------------------------------------------------
def features(run: RunRecord, plan: EpisodePlan, images: str) -> dict:
    """The LeRobot features of an episode's frames."""
    step = plan.frames[0].step
    out = {key: {"dtype": {"video": "video", "png": "image"}[images], "shape": shape,
                 "names": ["height", "width", "channels"]}
           for key, shape in sorted(run.image_shapes.items())}
    out["observation.state"] = {"dtype": "float32", "shape": (len(run.state_names),),
                                "names": list(run.state_names)}
    # The control space's column labels are not in a bag; its name says what they are.
    out["action"] = {"dtype": "float32", "shape": (len(step.action),),
                     "names": [f"{step.space}.{i}" for i in range(len(step.action))]}
    out["next.success"] = {"dtype": "bool", "shape": (1,), "names": None}
    return out


def _difference(first: tuple, other: tuple) -> str:
    """What differs between two (features, fps)."""
    if first[1] != other[1]:
        return f"{other[1]} fps instead of {first[1]}"
    keys = sorted(set(first[0]) ^ set(other[0]))
    if keys:
        return f"features {', '.join(keys)} are not in both"
    return "; ".join(f"{k} is {other[0][k]['shape']} {other[0][k]['names']}, not "
                     f"{first[0][k]['shape']} {first[0][k]['names']}"
                     for k in first[0] if first[0][k] != other[0][k])


def _images(run: RunRecord, stamps: set) -> dict:
    """(image feature, stamp) -> RGB of the camera images with the given stamps."""
    found = {}
    with bagfile.open_reader(run.bag) as reader:
        conns = [c for c in reader.connections if c.topic in set(run.cameras.values())]
        feature_of = {topic: key for key, topic in run.cameras.items()}
        store = bagfile.typestore(conns)
        for conn, _, data in bagfile.messages(reader, conns):
            msg = store.deserialize_cdr(data, conn.msgtype)
            stamp = _stamp(msg.header.stamp)
            if stamp in stamps:
                found[(feature_of[conn.topic], stamp)] = image_rgb(conn.msgtype, msg)
    return found


@dataclass
class ExportSummary:
    episodes: int = 0
    frames: int = 0
    skipped_episodes: int = 0     # no frame, or filtered out by success_only
    left_out: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def frames_per_second(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else 0.0


def _select(config: ExportConfig, progress: Callable[[str], None],
            summary: ExportSummary) -> list:
    """(run, episodes to write) of every bag, all read and checked before anything is
    written: a bag that does not fit fails the export without leaving half a dataset."""
    selected, first = [], None
    for i, bag in enumerate(config.bags, 1):
        run = read_run(bag, config)
        plans = plan_episodes(run)
        keep = []
        for p in plans:
            summary.left_out.update(p.left_out)
            if p.frames and (p.success or not config.success_only):
                keep.append(p)
            elif p.frames or p.left_out:
                summary.skipped_episodes += 1
                progress(f"  skipped episode {p.episode_id}: " + (
                    "not successful (--success-only)" if p.frames else
                    "no executed step with an observation"))
        for p in keep:
            shape = (features(run, p, config.images), config.fps or int(round(run.fps)))
            first = first or (shape, bag, p.episode_id)
            if shape != first[0]:
                raise ExportError(
                    f"{bag} episode {p.episode_id} does not fit {first[1]} episode {first[2]}: "
                    f"{_difference(first[0], shape)}; export bags of one robot setup "
                    f"together (or pass --state-names / --fps to make them agree)")
        progress(f"[{i}/{len(config.bags)}] read {bag}: {len(keep)} of {len(plans)} "
                 f"episode(s) to export, {sum(len(p.frames) for p in keep)} frames")
        selected.append((run, keep))
    if first is None:
        raise ExportError(
            "no episode to export: " + (
                "none of the episodes succeeded (drop --success-only to export failures too)"
                if config.success_only and summary.skipped_episodes else
                f"no executed step had an observation; {RECORD_HINT}, let the action model "
                f"drive the robot through execute_chunk (run_policy, ChunkExecutor), and "
                f"publish robot_state at least as fast as the robot steps"))
    return selected


def export(config: ExportConfig, progress: Callable[[str], None] = print) -> ExportSummary:
    """Write the dataset; ``progress`` gets a line per bag and per episode."""
    # LeRobot brings torch: imported here, a bad bag or argument is refused at once.
    require("models", "rpent export-dataset", "lerobot.datasets.lerobot_dataset")
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    out = Path(config.out)
    if out.exists():
        raise ExportError(f"{out} exists; choose a new folder for the dataset (LeRobot never "
                          f"adds to one in place)")
    summary, start = ExportSummary(), time.monotonic()
    selected = _select(config, progress, summary)
    run, plans = next((r, ps) for r, ps in selected if ps)
    fps = config.fps or int(round(run.fps))
    dataset = LeRobotDataset.create(config.dataset_repo_id, fps=fps,
                                    features=features(run, plans[0], config.images), root=out,
                                    use_videos=config.images == "video")
    total = sum(len(p.frames) for _, ps in selected for p in ps)
    provenance = []
    try:
        for run, plans in selected:
            images = _images(run, {f.sample.stamp for p in plans for f in p.frames})
            for p in plans:
                for frame in p.frames:
                    entry = {key: images[(key, frame.sample.stamp)] for key in run.cameras}
                    entry["observation.state"] = frame.sample.state.astype(np.float32)
                    entry["action"] = frame.step.action.astype(np.float32)
                    entry["next.success"] = np.array([frame.success])
                    entry["task"] = p.instruction
                    dataset.add_frame(entry)
                dataset.save_episode()
                provenance.append({
                    "episode_index": summary.episodes, "bag": str(run.bag),
                    "episode_id": p.episode_id, "success": p.success,
                    "first_step": p.frames[0].sample.step, "last_step": p.frames[-1].sample.step,
                    "left_out": dict(p.left_out)})
                summary.episodes += 1
                summary.frames += len(p.frames)
                elapsed = time.monotonic() - start
                progress(f"  episode {summary.episodes - 1} ({p.episode_id}): {len(p.frames)} "
                         f"frames, robot steps {p.frames[0].sample.step}-"
                         f"{p.frames[-1].sample.step}, {'success' if p.success else 'failure'}"
                         f" | {summary.frames}/{total} frames, {summary.frames / elapsed:.0f} "
                         f"frames/s")
    finally:
        dataset.finalize()
        (out / "meta" / "rpent_episodes.jsonl").write_text(
            "".join(json.dumps(p) + "\n" for p in provenance))
    summary.seconds = time.monotonic() - start
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="rpent export-dataset",
        description="Recorded runs (rosbag2 folders) to a LeRobot dataset: cameras, robot "
                    "state, the executed actions, the instruction as task, success per frame.")
    parser.add_argument("bags", nargs="+", help="rosbag2 folders (each holds metadata.yaml)")
    parser.add_argument("--out", required=True, help="dataset folder to create")
    parser.add_argument("--repo-id", default="",
                        help="dataset name in info (default: rpent/<out folder name>)")
    parser.add_argument("--success-only", action="store_true",
                        help="keep only the episodes whose task succeeded")
    parser.add_argument("--images", choices=IMAGE_STORAGE, default="video",
                        help="video: MP4 per camera (LeRobot's default, lossy); png: lossless "
                             "frames in the parquet files")
    parser.add_argument("--fps", type=int, default=0,
                        help="frame rate (default: the control rate the bag recorded)")
    parser.add_argument("--namespace", help="robot namespace, for bags of several robots")
    parser.add_argument("--state-names", default="",
                        help="comma-separated robot_state entries forming observation.state "
                             "(default: ee_x..ee_qw, gripper_width, then the joints)")
    parser.add_argument("--cameras", action="append", default=[], metavar="CAMERA=FEATURE",
                        help="a camera to export and its image feature, as in the model node's "
                             "cameras parameter: agentview=observation.images.image; repeat for "
                             "more (default: every camera as observation.images.<camera>)")
    args = parser.parse_args(argv)
    if any(entry.count("=") != 1 for entry in args.cameras):
        parser.error("--cameras entries look like agentview=observation.images.image")
    try:
        config = ExportConfig(
            tuple(Path(b) for b in args.bags), Path(args.out), args.repo_id, args.success_only,
            args.images, args.fps, args.namespace,
            tuple(n.strip() for n in args.state_names.split(",") if n.strip()),
            tuple(tuple(entry.split("=")) for entry in args.cameras))
        summary = export(config, lambda line: print(line, flush=True))
    except (ExportError, MissingExtra) as err:
        print(f"rpent export-dataset: {err}", file=sys.stderr)
        return 2
    print(f"wrote {summary.episodes} episode(s), {summary.frames} frames to {config.out} in "
          f"{summary.seconds:.1f} s ({summary.frames_per_second:.0f} frames/s)")
    for reason, count in sorted(summary.left_out.items()):
        print(f"  left out {count} robot step(s) {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
