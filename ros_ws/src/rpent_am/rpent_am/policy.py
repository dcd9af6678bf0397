"""The policy backend interface: observation in, action chunk out. No ROS here.

A backend is one model behind ``predict``: a LeRobot checkpoint, a remote policy server,
or a model-free expert. The node turns ROS observations into :class:`PolicyObservation`,
calls :meth:`PolicyBackend.predict` and checks the chunk against :class:`ModelMeta`
before it leaves the node.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from rpent_contract.control_space import ControlSpaceSpec


class BackendError(RuntimeError):
    """The model failed or answered something unusable; the message says what to do."""


@dataclass
class PolicyObservation:
    """What a policy is conditioned on, in contract terms."""

    images: dict  # contract camera name -> HxWx3 uint8 RGB, upright
    state: np.ndarray  # float64, ordered as ``state_names``
    state_names: Sequence[str]
    stamp_ns: int = 0  # acquisition time (ROS clock) of the state
    robot: str = ""  # namespace of the robot it was observed on (one model, several robots)

    def value(self, name: str) -> float:
        try:
            return float(self.state[list(self.state_names).index(name)])
        except ValueError:
            raise BackendError(
                f"observation has no state entry '{name}' (has: {', '.join(self.state_names)})"
            ) from None


@dataclass
class ModelMeta:
    backend: str
    checkpoint: str
    checkpoint_id: str
    action_space: ControlSpaceSpec
    chunk_size: int
    required_cameras: Sequence[str] = ()
    state_names: Sequence[str] = ()
    image_height: int = 0  # 0: any size
    image_width: int = 0
    control_rate: float = 20.0
    default_timeout: float = 30.0
    extra: dict = field(default_factory=dict)


class PolicyBackend(ABC):
    """One model. ``session`` isolates the state of stateful policies between clients."""

    @property
    @abstractmethod
    def meta(self) -> ModelMeta: ...

    @abstractmethod
    def predict(self, observation: PolicyObservation, instruction: str,
                session: str) -> np.ndarray:
        """Return a (horizon, action_dim) chunk in ``meta.action_space``."""

    def reset(self, session: Optional[str] = None) -> None:
        """Forget the state of one session (None: every session). Stateless: nothing to do."""

    def close(self) -> None:
        """Release the model / connection."""
