"""Where a calibration's data lie: the joint ranges (and payloads) its poses covered.

A first tracker recording often moves only some joints (the rest held still). What such data
determine is the arm inside the ranges it saw: a joint that did not move keeps its nominal zero
offset and placement (the reflectors and the next moving joint absorb them), and a prediction
with that joint elsewhere is not backed by any measurement. So a calibration records its validity
envelope, per joint the range of readings its fit poses covered (widened by ``MARGIN``), and the
payloads; ``predict``, ``correct`` and ``validate`` say when a pose lies outside it.

    envelope = Envelope.of(q, payload_kg, joint_names, prismatic)   # q (N, dof) readings
    envelope.outside(q_new)        # (M,) bool
    envelope.warning(q_new, what)  # one sentence or None
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rigs.errors import InputError

# A joint whose readings span less than this did not move: its parameters are not excited (rad; m
# for a prismatic joint). Encoder noise of a held joint is microradians, a real sweep degrees.
STILL_SPAN = np.radians(0.5)
STILL_SPAN_PRISMATIC = 1e-3
# Readings beyond the covered range by less than this fraction of the span, or than MARGIN (rad; m
# for prismatic), still count as inside: kinematic parameters are global, a few degrees past the
# last pose of a sweep are as well determined as inside it.
MARGIN = np.radians(1.0)
MARGIN_PRISMATIC = 2e-3
MARGIN_FRACTION = 0.1


def joint_list(names: list[str]) -> str:
    """'joints a, b and c' in words, a run of consecutively numbered joints as 'joints x_3 to x_7'."""
    stems = [name.rstrip("0123456789") for name in names]
    numbers = [name[len(stem):] for name, stem in zip(names, stems)]
    if len(names) > 2 and len(set(stems)) == 1 and all(numbers):
        values = [int(n) for n in numbers]
        if values == list(range(values[0], values[0] + len(values))):
            return f"joints {names[0]} to {names[-1]}"
    if len(names) == 1:
        return f"joint {names[0]}"
    return "joints " + ", ".join(names[:-1]) + " and " + names[-1]


@dataclass
class Envelope:
    """Per joint the covered reading range ``lower``/``upper`` (dof,) (rad, m for prismatic) and
    whether it ``moved`` (dof,) bool; the payloads ``payload_kg`` (2,) [min, max] kg the poses held."""

    joint_names: list[str]
    lower: np.ndarray
    upper: np.ndarray
    moved: np.ndarray
    payload_kg: np.ndarray
    margin: np.ndarray  # (dof,) the tolerance beyond the range

    @classmethod
    def of(cls, q: np.ndarray, payload_kg: np.ndarray, joint_names: list[str], prismatic: np.ndarray) -> "Envelope":
        q = np.atleast_2d(np.asarray(q, float))
        prismatic = np.asarray(prismatic, bool)
        lower, upper = q.min(axis=0), q.max(axis=0)
        moved = (upper - lower) >= np.where(prismatic, STILL_SPAN_PRISMATIC, STILL_SPAN)
        payload = np.asarray(payload_kg, float)
        return cls(list(joint_names), lower, upper, moved,
                   np.array([payload.min(), payload.max()]) if payload.size else np.zeros(2),
                   np.maximum(np.where(prismatic, MARGIN_PRISMATIC, MARGIN), MARGIN_FRACTION * (upper - lower)))

    @property
    def still(self) -> list[str]:
        return [name for name, moved in zip(self.joint_names, self.moved) if not moved]

    def sentences(self) -> list[str]:
        """One sentence per group of joints the poses did not excite (empty when all moved)."""
        still = self.still
        if not still:
            return []
        listed = joint_list(still)
        return [f"{listed} did not move (readings span under {np.degrees(STILL_SPAN):g} deg): their zero offsets "
                f"and placements keep their nominal values, and the calibration holds only near the angles they "
                f"were held at."]

    def outside(self, q: np.ndarray) -> np.ndarray:
        """(M,) bool: poses q (M, dof) with a joint beyond the covered range (plus the margin)."""
        q = np.atleast_2d(np.asarray(q, float))
        return np.any((q < self.lower - self.margin) | (q > self.upper + self.margin), axis=1)

    def warning(self, q: np.ndarray, what: str, payload_kg: np.ndarray | None = None) -> str | None:
        """A sentence naming how many poses of ``what`` lie outside and the worst joint; None when none do."""
        q = np.atleast_2d(np.asarray(q, float))
        beyond = np.maximum(self.lower - self.margin - q, q - self.upper - self.margin)  # (M, dof) > 0 outside
        outside = np.any(beyond > 0, axis=1)
        heavy = np.zeros(len(q), bool)
        if payload_kg is not None:
            heavy = np.asarray(payload_kg, float) > self.payload_kg[1] + 1e-9
        if not outside.any() and not heavy.any():
            return None
        parts = []
        if outside.any():
            worst = np.unravel_index(int(np.argmax(beyond)), beyond.shape)
            joint = self.joint_names[worst[1]]
            parts.append(f"{int(outside.sum())} of {len(q)} poses of {what} lie outside the calibration's validity "
                         f"envelope (worst: {joint} at {q[worst]:.4f}, the fit covered "
                         f"[{self.lower[worst[1]]:.4f}, {self.upper[worst[1]]:.4f}])")
        if heavy.any():
            parts.append(f"{int(heavy.sum())} of {len(q)} poses of {what} carry more payload than the fit saw "
                         f"(up to {self.payload_kg[1]:g} kg)")
        return "; ".join(parts) + ": predictions there are not backed by the calibration data."

    def document(self) -> dict:
        """The ``validity`` entry of calibration.yaml."""
        return {"description": "joint readings the fit poses covered (rad, m for prismatic); predict, correct and "
                               "validate warn for poses beyond them by more than margin",
                "joints": {name: {"min": float(lo), "max": float(hi), "moved": bool(m), "margin": float(g)}
                           for name, lo, hi, m, g in zip(self.joint_names, self.lower, self.upper, self.moved,
                                                         self.margin)},
                "payload_kg": [float(v) for v in self.payload_kg],
                "not_excited": self.sentences()}

    @classmethod
    def from_document(cls, entry, joint_names: list[str], where: str) -> "Envelope":
        if not isinstance(entry, dict) or not isinstance(entry.get("joints"), dict):
            raise InputError(f"{where}: key 'validity' should be a mapping with joints.")
        lower, upper, moved, margin = [], [], [], []
        for name in joint_names:
            joint = entry["joints"].get(name)
            try:
                lo, hi, g = float(joint["min"]), float(joint["max"]), float(joint.get("margin", MARGIN))
                still = joint.get("moved", True)
            except (KeyError, TypeError, ValueError):
                raise InputError(f"{where}: key 'validity.joints.{name}' should hold numbers min, max and margin.") from None
            if not (np.isfinite([lo, hi, g]).all() and lo <= hi and g >= 0) or not isinstance(still, bool):
                raise InputError(f"{where}: key 'validity.joints.{name}' should have min <= max, margin >= 0 and "
                                 f"moved true or false.")
            lower.append(lo), upper.append(hi), moved.append(still), margin.append(g)
        payload = entry.get("payload_kg", [0.0, 0.0])
        try:
            payload = np.array(payload, float).reshape(2)
        except (TypeError, ValueError):
            raise InputError(f"{where}: key 'validity.payload_kg' should be [min, max] kg.") from None
        return cls(list(joint_names), np.array(lower), np.array(upper), np.array(moved, bool), payload,
                   np.array(margin))
