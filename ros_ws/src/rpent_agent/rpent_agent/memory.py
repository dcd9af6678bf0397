"""The agent's memory folder: notes the model reads and writes between turns (and runs).

Every path is resolved inside the folder; anything that would leave it (``..``, an
absolute path, a symlink pointing out) is refused, so a model cannot touch other files.
Several runs may share a folder (parallel evaluation workers): a file is replaced whole,
never seen half written, and a run's write leaves every other file as it was.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

INDEX_FILES = 50  # files the index at the start of a run lists, newest first
# Where runs leave their recipes (rpent_agent.recipes): shown to a run by match, not listed.
RECIPE_FOLDER = "recipes"


def data_folder() -> Path:
    """rpent's folder under the user's data folder ($XDG_DATA_HOME, else ~/.local/share)."""
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local",
                                                           "share")
    return Path(data) / "rpent"


def lasting_folder(embodiment: str, family: str) -> Path:
    """The memory that lasts across runs of one robot and task family."""
    return data_folder() / "memory" / _folder_name(embodiment) / _folder_name(family)


def _folder_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("._") or "default"


class MemoryRefused(ValueError):
    """A memory operation was refused; the message says why and what to do instead."""


class MemoryDir:
    def __init__(self, root, max_bytes: int = 256_000):
        self.root = Path(root).resolve()
        self.max_bytes = max_bytes

    def _resolve(self, path: str) -> Path:
        if not path or not path.strip():
            raise MemoryRefused("give a file name relative to the memory folder, e.g. 'notes.md'")
        candidate = (self.root / path).resolve()
        if candidate != self.root and self.root not in candidate.parents:
            raise MemoryRefused(
                f"'{path}' is outside the memory folder; use a relative path without '..', "
                "e.g. 'notes.md' or 'objects/soup.md'")
        if any(part.startswith(".") for part in candidate.relative_to(self.root).parts):
            # Hidden names are the folder's own (a file being written).
            raise MemoryRefused(f"'{path}': names starting with '.' are not allowed; e.g. "
                                "'notes.md'")
        return candidate

    def _files(self) -> list[Path]:
        """The model's files (not the hidden ones being written)."""
        if not self.root.is_dir():
            return []
        return [p for p in self.root.rglob("*") if p.is_file() and not p.name.startswith(".")]

    def list(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self._files())

    def read(self, path: str) -> str:
        target = self._resolve(path)
        if not target.is_file():
            raise MemoryRefused(f"no memory file '{path}'; memory_list shows the files there are")
        return target.read_text(errors="replace")[: self.max_bytes]

    def write(self, path: str, content: str) -> int:
        target = self._resolve(path)
        data = content.encode()
        if len(data) > self.max_bytes:
            raise MemoryRefused(f"{len(data)} bytes is over the {self.max_bytes}-byte limit per "
                               "file; keep notes short or split them")
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            os.replace(temporary, target)
        except BaseException:
            os.unlink(temporary)
            raise
        return len(data)

    def index(self) -> str:
        """What the folder holds, newest first, each file with its first line: what a run
        is shown as it starts ('' when empty). Recipes are only counted: a run is shown
        those that match its task."""
        recipes = self.root / RECIPE_FOLDER
        files = sorted((p for p in self._files() if recipes not in p.parents),
                       key=lambda p: p.stat().st_mtime, reverse=True)
        lines = []
        for path in files[:INDEX_FILES]:
            with path.open(errors="replace") as text:
                first = text.readline().strip()[:120]
            lines.append(f"- {path.relative_to(self.root)}" + (f": {first}" if first else ""))
        if len(files) > INDEX_FILES:
            lines.append(f"- ... and {len(files) - INDEX_FILES} older files (memory_list)")
        count = sum(1 for p in self._files() if recipes in p.parents)
        if count:
            lines.append(f"- {RECIPE_FOLDER}/: {count} recipes of earlier runs")
        return "\n".join(lines)
