"""Before any fit: enough measurements, and poses varied enough, for what the arm's structure identifies.

The structure comes from the same sensors at poses spread over the joint ranges (each sensor makes
blocks of fake measurements there: only the Jacobian's structure matters); the data must give at
least two measurements per identifiable combination (too little redundancy leaves no way to
estimate the noise or spot outliers), and its condition number must stay within
``DEGENERATE_CONDITION_RATIO`` of the spread poses' (else it determines the arm only near where it
was measured). Sensors that cannot make such blocks (cameras need a view of the board) are checked
on the data's own rank.
"""

from __future__ import annotations

import math

import numpy as np

from calib.fit.identifiability import Identifiability, analyse
from calib.model.error_model import ErrorModel
from calib.model.poses import PoseSet
from calib.sensors.blocks import stack
from rigs.errors import InputError

MIN_RESIDUALS_PER_PARAMETER = 2  # fewer leaves too little redundancy to estimate noise and spot outliers
STRUCTURAL_POSES = 60
STRUCTURAL_SEED = 12345
DEGENERATE_CONDITION_RATIO = 100.0


def spread_poses(model: ErrorModel) -> PoseSet:
    """Poses drawn uniformly over the joint ranges (seeded): what a well spread pose set looks like."""
    rng = np.random.default_rng(STRUCTURAL_SEED)
    chain = model.chain
    low = np.where(np.isfinite(chain.lower), chain.lower, -np.pi)
    high = np.where(np.isfinite(chain.upper), chain.upper, np.pi)
    q = rng.uniform(low, high, (STRUCTURAL_POSES, chain.dof))
    return PoseSet(q, [""] * STRUCTURAL_POSES, np.zeros(STRUCTURAL_POSES))


def structural_identifiability(model: ErrorModel, theta0: np.ndarray, structural_blocks: list) -> Identifiability:
    _, jac, _ = stack(structural_blocks, model, theta0)
    return analyse(jac, model.free, model.names, model.describe, words=False)


def check_pose_set(model: ErrorModel, theta0: np.ndarray, blocks: list, structural: Identifiability | None,
                   poses: int, rows_per_pose: float, holdout: float, joint_readings: np.ndarray
                   ) -> tuple[float | None, Identifiability]:
    """Refuse too few or degenerate poses (InputError with the number needed); returns the data's
    condition number over the spread poses' (None when checked on the data's own rank) and the
    data's identifiability at ``theta0`` (the solver starts from it).

    ``structural``: identifiability of the spread poses (None: use the data's); ``poses`` and
    ``rows_per_pose`` count the data; ``joint_readings`` (N, dof) every calibration pose.
    """
    residuals, jac, _ = stack(blocks, model, theta0)
    seen = analyse(jac, model.free, model.names, model.describe, words=False)
    reference = structural if structural is not None else seen
    needed = MIN_RESIDUALS_PER_PARAMETER * reference.rank
    if len(residuals) < needed:
        held = f" after holding out {holdout:.0%}" if holdout else ""
        raise InputError(f"too few poses: {poses} calibration poses{held} give {len(residuals)} measurements for "
                         f"{reference.rank} identifiable parameters; at least {math.ceil(needed / max(rows_per_pose, 1e-9))} "
                         f"calibration poses are needed.")
    if structural is None:
        return None, seen
    values = seen.singular_values[:structural.rank]
    condition = values[0] / values[-1] if len(values) and values[-1] > 0 else np.inf
    ratio = float(condition / structural.condition_number)
    if seen.rank < structural.rank or ratio > DEGENERATE_CONDITION_RATIO:
        spread = np.degrees(np.asarray(joint_readings).std(axis=0))
        raise InputError(f"degenerate pose set: the poses barely separate the {structural.rank} parameter "
                         f"combinations this arm allows (condition number {condition:.3g}, {ratio:.0f} times that of "
                         f"poses spread over the joint ranges; joint spread {np.round(spread, 1).tolist()} deg); "
                         f"record poses spread over each joint's range.")
    return ratio, seen
