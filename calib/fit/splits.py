"""Which poses a fit learns from and which it is judged on: a fixed hold-out, or folds.

Splits go by pose, never by measurement: a pose's reflectors, probe pose and board corners stay
together, across every session fitted together.
"""

from __future__ import annotations

import numpy as np


def holdout_rows(counts: list[int], holdout: float, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(fit rows, held rows) per session: a random fraction ``holdout`` of all poses across sessions."""
    rng = np.random.default_rng(seed)
    total = sum(counts)
    held = set(rng.permutation(total)[: int(round(holdout * total))].tolist())
    fit_rows, held_rows, offset = [], [], 0
    for count in counts:
        rows = np.arange(count)
        mask = np.array([offset + r in held for r in rows], bool)
        fit_rows.append(rows[~mask])
        held_rows.append(rows[mask])
        offset += count
    return fit_rows, held_rows


DEFAULT_FOLDS = 5
LEAVE_ONE_OUT_BELOW = 40  # poses: below this, every pose is its own fold


def fold_count(poses: int, folds: int | None) -> int:
    """The number of folds for ``poses`` poses: ``folds`` when given (at most one pose a fold),
    else leave-one-pose-out below ``LEAVE_ONE_OUT_BELOW`` poses and ``DEFAULT_FOLDS`` above."""
    if folds is None:
        return poses if poses < LEAVE_ONE_OUT_BELOW else DEFAULT_FOLDS
    return min(int(folds), poses)


def fold_rows(counts: list[int], folds: int, seed: int) -> list[list[np.ndarray]]:
    """Per fold, per session: the pose rows it holds out. The poses of all sessions are shuffled
    (seeded) and dealt round-robin, so the folds are disjoint, cover every pose and differ in size
    by at most one."""
    total = sum(counts)
    order = np.random.default_rng(seed).permutation(total)
    fold_of = np.empty(total, int)
    fold_of[order] = np.arange(total) % folds
    starts = np.cumsum([0] + list(counts))
    return [[np.flatnonzero(fold_of[starts[i]:starts[i + 1]] == f) for i in range(len(counts))] for f in range(folds)]


def describe_folds(folds: int, poses: int) -> str:
    if folds == poses:
        return f"leave-one-pose-out cross-validation over {poses} poses"
    per = sorted({poses // folds, -(-poses // folds)})
    return f"{folds}-fold cross-validation by pose ({' or '.join(map(str, per))} poses a fold, {poses} poses)"
