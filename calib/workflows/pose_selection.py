"""Choosing calibration poses: a D-optimal subset of many random valid candidates.

Each candidate pose contributes the rows of the calibration Jacobian for its reflectors, projected
on the parameter combinations the arm's structure makes identifiable (column-scaled, as in the
fit). A greedy pass picks, one at a time, the pose that most increases log det of the information
matrix (matrix determinant lemma), then an exchange pass swaps poses while that still gains. A
recalibration then needs few poses, each of which teaches something.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calib.fit.identifiability import analyse
from calib.model.error_model import ErrorModel
from calib.model.poses import PoseSet
from calib.sensors.blocks import stack
from calib.sensors.tracker_points import PointObservations
from rigs.kinematics import ArmModel


@dataclass
class Selection:
    indices: np.ndarray  # (n,) chosen candidate rows
    log_det: float  # of the information matrix of the identifiable combinations
    rank: int  # identifiable combinations


def candidate_jacobians(chain: ArmModel, q: np.ndarray, targets: dict[str, np.ndarray],
                        tracker_T_base: np.ndarray) -> tuple[np.ndarray, int]:
    """Per-candidate Jacobian blocks (M, 3 T, r) on the identifiable combinations, and r."""
    names = sorted(targets)
    model = ErrorModel.for_sensors(chain, ["s0"], names, {"s0": tracker_T_base}, targets=targets)
    theta = model.initial_vector()
    rows = np.repeat(np.arange(len(q)), len(names))
    labels = names * len(q)
    fake = np.zeros((len(rows), 3))
    poses = PoseSet(q, [""] * len(q), np.zeros(len(q)))
    block = PointObservations("s0", poses, rows, labels, fake, np.repeat(np.eye(3)[None], len(rows), 0), [""] * len(rows))
    _, jacobian, _ = stack([block], model, theta)
    info = analyse(jacobian, model.free, model.names, model.describe, words=False)
    # Rows on the combinations: J @ basis (basis carries the column scaling).
    projected = jacobian @ info.basis  # (3 T M, r)
    return projected.reshape(len(q), 3 * len(names), info.rank), info.rank


def d_optimal(blocks: np.ndarray, count: int, exchange_rounds: int = 2) -> Selection:
    """Greedy then exchange D-optimal choice of ``count`` of the candidate blocks (M, k, r)."""
    candidates, _, rank = blocks.shape
    count = min(count, candidates)
    # A tiny prior keeps the first steps defined; it is the same for every choice.
    prior = 1e-6 * np.trace(np.einsum("mkr,mks->rs", blocks, blocks)) / candidates / rank
    information = prior * np.eye(rank)
    chosen: list[int] = []
    available = np.ones(candidates, bool)
    for _ in range(count):
        inverse = np.linalg.inv(information)
        # log det(M + A^T A) - log det(M) = log det(I + A M^-1 A^T)
        gains = np.array([np.linalg.slogdet(np.eye(blocks.shape[1]) + a @ inverse @ a.T)[1] if ok else -np.inf
                          for a, ok in zip(blocks, available)])
        best = int(np.argmax(gains))
        chosen.append(best)
        available[best] = False
        information = information + blocks[best].T @ blocks[best]
    for _ in range(exchange_rounds):
        improved = False
        for slot in range(len(chosen)):
            base = information - blocks[chosen[slot]].T @ blocks[chosen[slot]]
            current = np.linalg.slogdet(information)[1]
            inverse = np.linalg.inv(base)
            gains = np.array([np.linalg.slogdet(np.eye(blocks.shape[1]) + a @ inverse @ a.T)[1] if ok else -np.inf
                              for a, ok in zip(blocks, available)])
            best = int(np.argmax(gains))
            if np.linalg.slogdet(base)[1] + gains[best] > current + 1e-9:
                available[chosen[slot]] = True
                available[best] = False
                chosen[slot] = best
                information = base + blocks[best].T @ blocks[best]
                improved = True
        if not improved:
            break
    return Selection(np.array(chosen), float(np.linalg.slogdet(information)[1]), rank)


def log_det(blocks: np.ndarray, indices: np.ndarray) -> float:
    """log det of the information of the chosen blocks (for comparing with random choices)."""
    information = np.einsum("mkr,mks->rs", blocks[indices], blocks[indices])
    return float(np.linalg.slogdet(information)[1])
