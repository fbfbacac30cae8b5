"""The observation-block protocol the solver stacks, and the stacking.

A block holds measurements of one kind taken at the poses of one :class:`~calib.model.poses.PoseSet`
and, for a parameter vector ``theta`` of an :class:`~calib.model.error_model.ErrorModel`, returns

- ``residuals`` (m,): (measured - predicted) times the measurement's square-root information, so
  each row is dimensionless with unit variance under the noise model;
- ``jacobian`` (m, P): d residuals / d theta, analytic;

and describes itself by ``unit_index`` (m,) (which measurement unit each row belongs to: a tracker
point has 3 rows, a board corner 2, a probe pose 6; robust weights and outlier flags act on whole
units), ``unit_labels`` (one readable label per unit, "p0007/smr2"), ``unit_pose`` (the pose row of
each unit: hold-out splits and folds go by pose) and ``groups`` (the parameter groups it reads
besides the arm). ``subset(keep)`` returns a block of only the kept units; ``on(poses)`` the same
measurements on another pose set (the same readings with a learned tip shift, say).

For the learned residual model a block also gives ``tip_translation_rows``: its residuals over the
block's typical noise (one constant per block, so a pose seen by one kind of sensor gets a plain
least-squares shift in that sensor's units) and their derivative (m, 3) with respect to a
base-frame shift of the tip at each unit's pose, so a per-pose shift can be solved from any sensor.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from calib.model.error_model import ErrorModel, TipEvaluation
from calib.model.poses import PoseSet


class ObservationBlock(Protocol):
    name: str
    poses: PoseSet
    groups: tuple[str, ...]
    unit_index: np.ndarray
    unit_labels: list[str]
    unit_pose: np.ndarray

    def evaluate_at(self, model: ErrorModel, theta: np.ndarray, tip: TipEvaluation, jacobian: bool
                    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(residuals (m,), jacobian (m, P) or None) given the tip at this block's pose rows."""

    def subset(self, keep: np.ndarray) -> "ObservationBlock":
        """A block of only the units where ``keep`` (units,) bool is true."""

    def on(self, poses: PoseSet) -> "ObservationBlock":
        """The same measurements taken at ``poses`` (same rows)."""


def pose_rows_used(blocks: list) -> dict[int, np.ndarray]:
    """Per pose set (by identity): the sorted rows any block reads."""
    rows: dict[int, list] = {}
    for block in blocks:
        rows.setdefault(id(block.poses), []).append(np.asarray(block.unit_pose, int))
    return {key: np.unique(np.concatenate(parts)) for key, parts in rows.items()}


def tips_for(blocks: list, model: ErrorModel, theta: np.ndarray, jacobian: bool) -> dict[int, TipEvaluation]:
    """One forward-kinematics pass per pose set the blocks share."""
    state = model.arm_state(theta)
    sets = {id(b.poses): b.poses for b in blocks}
    return {key: model.tip(state, sets[key], rows, jacobian) for key, rows in pose_rows_used(blocks).items()}


def evaluate(block, model: ErrorModel, theta: np.ndarray, jacobian: bool = True):
    """One block's (residuals, jacobian or None)."""
    tip = tips_for([block], model, theta, jacobian)[id(block.poses)]
    return block.evaluate_at(model, theta, tip, jacobian)


def stack(blocks: list, model: ErrorModel, theta: np.ndarray, jacobian: bool = True):
    """Residuals (m,), Jacobian (m, P) or None, and the global unit index (m,) of several blocks."""
    tips = tips_for(blocks, model, theta, jacobian)
    residuals, jacobians, units = [], [], []
    offset = 0
    for block in blocks:
        r, j = block.evaluate_at(model, theta, tips[id(block.poses)], jacobian)
        residuals.append(r)
        jacobians.append(j)
        units.append(block.unit_index + offset)
        offset += len(block.unit_labels)
    if not blocks:
        return np.zeros(0), (np.zeros((0, model.size)) if jacobian else None), np.zeros(0, int)
    return (np.concatenate(residuals), np.vstack(jacobians) if jacobian else None, np.concatenate(units))


def unit_count(blocks: list) -> int:
    return sum(len(b.unit_labels) for b in blocks)


def keep_units(blocks: list, keep) -> list:
    """Each block subset to its units for which ``keep(block) -> (units,) bool`` holds; empty ones dropped."""
    out = []
    for block in blocks:
        mask = np.asarray(keep(block), bool)
        if mask.any():
            out.append(block.subset(mask) if not mask.all() else block)
    return out


def by_pose(blocks: list, rows_by_set: dict[int, np.ndarray]) -> list:
    """The blocks' units measured at the given pose rows (per pose set, by identity)."""
    return keep_units(blocks, lambda b: np.isin(b.unit_pose, rows_by_set.get(id(b.poses), np.zeros(0, int))))


def without_labels(blocks: list, labels: set[str]) -> list:
    """The blocks without the units named in ``labels`` (outliers)."""
    if not labels:
        return list(blocks)
    return keep_units(blocks, lambda b: np.array([label not in labels for label in b.unit_labels], bool))
