"""The agent's memory folder: notes the model reads and writes between turns (and runs).

Every path is resolved inside the folder; anything that would leave it (``..``, an
absolute path, a symlink pointing out) is refused, so a model cannot touch other files.
"""
from __future__ import annotations

from pathlib import Path


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
        return candidate

    def list(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())

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
        target.write_bytes(data)
        return len(data)
