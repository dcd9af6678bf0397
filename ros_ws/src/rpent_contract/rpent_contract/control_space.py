"""Control spaces: what one row of an action chunk means, and its bounds."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class ControlSpaceSpec:
    """Plain-Python twin of rpent_interfaces/msg/ControlSpace."""

    name: str
    labels: tuple[str, ...]
    units: tuple[str, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    relative: bool
    description: str = ""
    frame_id: str = ""
    # Metres / radians per unit of the first six columns of a relative Cartesian space.
    step_scale: tuple[float, ...] = field(default_factory=tuple)
    # Absolute spaces: largest change per column between consecutive steps.
    max_step_change: tuple[float, ...] = field(default_factory=tuple)

    def __post_init__(self):
        n = len(self.labels)
        for what in ("units", "lower", "upper"):
            if len(getattr(self, what)) != n:
                raise ValueError(f"control space '{self.name}': {what} must have {n} entries")
        if any(lo > hi for lo, hi in zip(self.lower, self.upper)):
            raise ValueError(f"control space '{self.name}': a lower bound exceeds its upper bound")
        if self.max_step_change and len(self.max_step_change) != n:
            raise ValueError(f"control space '{self.name}': max_step_change must have {n} entries")
        if self.step_scale and len(self.step_scale) != 6:
            raise ValueError(f"control space '{self.name}': step_scale needs 6 entries (xyz, rpy)")

    @property
    def dim(self) -> int:
        return len(self.labels)

    def to_msg(self):
        from rpent_interfaces.msg import ControlSpace

        return ControlSpace(
            name=self.name, dim=self.dim, labels=list(self.labels), units=list(self.units),
            lower=[float(v) for v in self.lower], upper=[float(v) for v in self.upper],
            relative=self.relative, step_scale=[float(v) for v in self.step_scale],
            max_step_change=[float(v) for v in self.max_step_change],
            frame_id=self.frame_id, description=self.description,
        )

    @classmethod
    def from_msg(cls, msg) -> "ControlSpaceSpec":
        return cls(
            name=msg.name, labels=tuple(msg.labels), units=tuple(msg.units),
            lower=tuple(msg.lower), upper=tuple(msg.upper), relative=msg.relative,
            description=msg.description, frame_id=msg.frame_id, step_scale=tuple(msg.step_scale),
            max_step_change=tuple(msg.max_step_change),
        )


def find_space(spaces: Sequence[ControlSpaceSpec], name: str) -> ControlSpaceSpec:
    for space in spaces:
        if space.name == name:
            return space
    raise KeyError(name)


def chunk_to_array(chunk) -> np.ndarray:
    """rpent_interfaces/ActionChunk -> (horizon, action_dim) float64 array (unvalidated shape)."""
    data = np.asarray(chunk.data, dtype=np.float64)
    if chunk.horizon * chunk.action_dim != data.size:
        raise ValueError(
            f"chunk declares {chunk.horizon}x{chunk.action_dim} = "
            f"{chunk.horizon * chunk.action_dim} values but carries {data.size}"
        )
    return data.reshape(chunk.horizon, chunk.action_dim)


def array_to_chunk(actions: np.ndarray, control_space: str, msg=None):
    """(horizon, action_dim) array -> rpent_interfaces/ActionChunk (data row-major)."""
    from rpent_interfaces.msg import ActionChunk

    actions = np.asarray(actions, dtype=np.float64)
    if actions.ndim != 2:
        raise ValueError(f"an action chunk is 2-D (horizon, action_dim), got shape {actions.shape}")
    msg = msg if msg is not None else ActionChunk()
    msg.control_space = control_space
    msg.horizon, msg.action_dim = int(actions.shape[0]), int(actions.shape[1])
    msg.data = actions.ravel().tolist()
    return msg


def stale_prefix(observation_ns: int, step_stamps_ns) -> int:
    """How many of the steps stamped ``step_stamps_ns`` were executed after the observation
    a chunk was conditioned on: the chunk's first actions that are already in the past."""
    return int(np.count_nonzero(np.asarray(step_stamps_ns, dtype=np.int64) > observation_ns))
