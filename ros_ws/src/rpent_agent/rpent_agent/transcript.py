"""The run's transcript: every event (model text, tool call, result, timing, tokens) and,
for LLM planners, the model's own message history, written as one JSON file."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Optional


class Transcript:
    def __init__(self, path, run_id: str, meta: dict):
        self.path = Path(path)
        self.run_id = run_id
        self._lock = threading.Lock()
        self._t0 = time.time()
        self.doc: dict[str, Any] = {"run_id": run_id, "started": self._t0, **meta,
                                    "events": [], "messages": [], "result": None}

    def event(self, **fields) -> None:
        with self._lock:
            fields["t"] = round(time.time() - self._t0, 4)
            self.doc["events"].append(fields)

    def set_messages(self, messages: list) -> None:
        """The model's conversation, already JSON-ready (images replaced by placeholders)."""
        with self._lock:
            self.doc["messages"] = messages

    def finish(self, result: dict, extra: Optional[dict] = None) -> Path:
        with self._lock:
            self.doc["result"] = result
            self.doc["ended"] = time.time()
            self.doc["duration_s"] = round(self.doc["ended"] - self._t0, 3)
            self.doc.update(extra or {})
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.doc, indent=1, default=_jsonable))
            tmp.replace(self.path)
        return self.path


def _jsonable(value):
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)
