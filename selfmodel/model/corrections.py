"""Joint placement corrections a self-model carries: what the placement fit (selfmodel.learn.placement)
found for each movable joint, how well each component is known, and the tolerance they promise."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

COMPONENTS = ("dx", "dy", "dz", "wx", "wy", "wz")



TOLERANCE = np.array([1e-3] * 3 + [np.radians(0.2)] * 3)  # what a determined correction promises



DETERMINED = TOLERANCE / 3  # standard deviation below which a component counts as determined



@dataclass
class JointCorrections:
    """Fitted placement corrections of the movable joints (chain order), and how well each is known."""

    joint_names: list[str]
    deltas: np.ndarray  # (J, 6) m and rad
    std: np.ndarray  # (J, 6) standard deviation, m and rad
    points: int  # surface points that agreed with the description at the end (inliers)
    rms_mm: float  # their point-to-plane RMS
    held: bool = False  # the placements were held where they started, nothing fitted

    @property
    def determined(self) -> np.ndarray:
        """(J, 6) bool: the data fix this component to within a third of the tolerance."""
        return self.std <= DETERMINED

    def to_json(self) -> dict:
        return {"convention": "parent_T_child = origin @ exp6(delta) @ motion(q); delta = [dx, dy, dz, wx, wy, wz], m and rad",
                "tolerance": TOLERANCE.tolist(), "determined_below_std": DETERMINED.tolist(),
                "points": self.points, "rms_mm": self.rms_mm, "held": self.held,
                "joints": {name: {"delta": self.deltas[i].tolist(), "std": self.std[i].tolist(),
                                  "determined": self.determined[i].tolist()}
                           for i, name in enumerate(self.joint_names)}}

    @classmethod
    def from_json(cls, table: dict, joint_names: list[str]) -> "JointCorrections":
        joints = table["joints"]
        return cls(list(joint_names), np.array([joints[n]["delta"] for n in joint_names], dtype=float),
                   np.array([joints[n]["std"] for n in joint_names], dtype=float), int(table["points"]),
                   float(table["rms_mm"]), bool(table.get("held", False)))

    def summary(self) -> str:
        """One sentence: how many components are determined, and the largest determined correction."""
        if self.held:
            return "joint placements held where they started: no correction fitted from depth"
        determined = self.determined
        count = int(determined.sum())
        moved = np.where(determined, np.abs(self.deltas) / TOLERANCE, 0.0)
        j, k = np.unravel_index(int(np.argmax(moved)), moved.shape)
        value = self.deltas[j, k] * (1000 if k < 3 else 180 / np.pi)
        unit = "mm" if k < 3 else "deg"
        return (f"{count} of {determined.size} joint correction components determined from depth; largest "
                f"{self.joint_names[j]} {COMPONENTS[k]} {value:+.2f} {unit}")
