"""A session's poses as the error model sees them: readings and what acts on the arm at each."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(eq=False)
class PoseSet:
    """The joint readings of one session, shared by every observation block of that session.

    ``q`` (N, dof) rad (m for prismatic joints); ``pose_ids`` (N,); ``payload_kg`` (N,); ``torques``
    (N, dof) N m the torque each joint holds (gravity, modelled or measured; needed only by a
    compliance group); ``tip_shift`` (N, 3) m a fixed base-frame correction of the tip (a learned
    residual model's, applied to every sensor alike); ``sensor``: the session's tracker frame name.
    Identity matters: blocks that share a PoseSet share one forward-kinematics pass.
    """

    q: np.ndarray
    pose_ids: list[str]
    payload_kg: np.ndarray
    sensor: str = "s0"
    torques: np.ndarray | None = None
    tip_shift: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.q = np.atleast_2d(np.asarray(self.q, float))
        self.payload_kg = np.broadcast_to(np.asarray(self.payload_kg, float), (len(self.q),)).copy()

    def __len__(self) -> int:
        return len(self.q)

    def with_tip_shift(self, shift: np.ndarray | None) -> "PoseSet":
        return replace(self, tip_shift=None if shift is None else np.asarray(shift, float))

    def with_torques(self, torques: np.ndarray | None) -> "PoseSet":
        return replace(self, torques=None if torques is None else np.asarray(torques, float))

    def label(self, row: int) -> str:
        """A pose's readable label: its id, prefixed by the sensor after the first session."""
        return self.pose_ids[row] if self.sensor == "s0" else f"{self.sensor}:{self.pose_ids[row]}"
