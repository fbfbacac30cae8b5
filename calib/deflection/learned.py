"""A learned residual for any sensor: per-pose tip shifts from the blocks, features, corrections.

The rigid (or compliant) fit leaves each pose a residual; whatever sensor saw the pose, a base-frame
shift ``d`` of the tip explains it best in least squares (``tip_translation_rows`` of each block:
for reflectors, the mean residual of the pose's points; for a probe, its position residual; for
board corners, the shift that moves them onto the measured pixels). The ensemble learns ``d`` from
the pose's features and adds its guarded prediction to the tip of every later evaluation
(:meth:`calib.model.poses.PoseSet.with_tip_shift`), so every sensor sees the correction alike.
"""

from __future__ import annotations

import numpy as np

from calib.deflection.residual_model import ResidualModel, features
from calib.deflection.torques import GravityTorques
from calib.model.error_model import ErrorModel
from calib.model.poses import PoseSet
from rigs.kinematics import ArmModel


def tip_shifts(blocks: list, model: ErrorModel, theta: np.ndarray) -> dict[int, tuple[PoseSet, np.ndarray, np.ndarray]]:
    """Per pose set (by identity): (pose set, rows (n,), base-frame shifts (n, 3) m) that best explain
    the blocks' residuals at ``theta``; poses whose measurements cannot fix a shift are left out."""
    parts: dict[int, list] = {}
    sets = {}
    for block in blocks:
        error, derivative, rows = block.tip_translation_rows(model, theta)
        parts.setdefault(id(block.poses), []).append((error, derivative, rows))
        sets[id(block.poses)] = block.poses
    out = {}
    for key, items in parts.items():
        error = np.concatenate([e for e, _, _ in items])
        derivative = np.concatenate([d for _, d, _ in items])
        rows = np.concatenate([r for _, _, r in items])
        poses, where = np.unique(rows, return_inverse=True)
        normal = np.zeros((len(poses), 3, 3))
        np.add.at(normal, where, derivative[:, :, None] * derivative[:, None, :])
        right = np.zeros((len(poses), 3))
        np.add.at(right, where, derivative * error[:, None])
        determined = np.linalg.cond(normal) < 1e8
        shifts = np.linalg.solve(normal[determined], right[determined][..., None])[..., 0]
        out[key] = (sets[key], poses[determined], shifts)
    return out


class Featurizer:
    """Features of poses under a calibrated chain: ``(q (n, dof), payload_kg (n,)) -> (n, 5 dof)``
    (see :func:`calib.deflection.residual_model.features`); torques from the chain's gravity model.
    ``of(poses)`` gives every pose of a pose set, computed once (folds reuse them)."""

    def __init__(self, chain: ArmModel, payload_com: np.ndarray | None):
        self.chain = chain
        self.torques = GravityTorques(chain, payload_com)
        self._by_set: dict[int, tuple[PoseSet, np.ndarray]] = {}

    def __call__(self, q: np.ndarray, payload_kg: np.ndarray) -> np.ndarray:
        return features(self.chain, q, self.torques(q, payload_kg))

    def of(self, poses: PoseSet) -> np.ndarray:
        key = id(poses)
        if key not in self._by_set or self._by_set[key][0] is not poses:
            self._by_set[key] = (poses, self(poses.q, poses.payload_kg))
        return self._by_set[key][1]


def training_set(blocks: list, model: ErrorModel, theta: np.ndarray, featurizer: Featurizer) -> tuple[np.ndarray, np.ndarray]:
    """Features (N, F) and tip shifts (N, 3) m of every pose the blocks measure."""
    raw, targets = [], []
    for poses, rows, shifts in tip_shifts(blocks, model, theta).values():
        raw.append(featurizer.of(poses)[rows])
        targets.append(shifts)
    return np.concatenate(raw), np.concatenate(targets)


def corrected(poses: PoseSet, residual: ResidualModel | None, featurizer: Featurizer) -> PoseSet:
    """``poses`` with the learned tip shift of every pose (unchanged without a model)."""
    if residual is None:
        return poses
    return poses.with_tip_shift(residual.predict(featurizer.of(poses))[0])
