"""Before any fit: enough measurements, and poses varied enough, for what the arm's structure identifies.

The structure comes from the same sensors at poses spread over the joint ranges (each sensor makes
blocks of fake measurements there: only the Jacobian's structure matters); the data must give at
least two measurements per identifiable combination (too little redundancy leaves no way to
estimate the noise or spot outliers), and its condition number is compared with the spread poses'. Beyond
``DEGENERATE_CONDITION_RATIO`` times theirs (or with fewer identifiable combinations) the data
determine the arm only near where it was measured: that is reported in a sentence and the fit goes
on along what the data do determine (the validity envelope says where), unless the user asked for
a full calibration (``require_full``), which refuses it. Sensors that cannot make such blocks (cameras need a view of the board) are checked
on the data's own rank.
"""

from __future__ import annotations

import math

import numpy as np

from calib.fit.identifiability import Identifiability, analyse
from calib.model.error_model import ErrorModel
from calib.model.poses import PoseSet
from calib.sensors.blocks import stack
from rigs.errors import InputError, setting

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
                   poses: int, rows_per_pose: float, holdout: float, joint_readings: np.ndarray,
                   require_full: bool = False) -> tuple[float | None, Identifiability, str | None]:
    """Refuse too few poses (InputError with the number needed), and degenerate ones when
    ``require_full``; returns the data's condition number over the spread poses' (None when checked
    on the data's own rank), the data's identifiability at ``theta0`` (the solver starts from it)
    and, for a degenerate pose set that is fitted anyway, the sentence that says so.

    ``structural``: identifiability of the spread poses (None: use the data's); ``poses`` and
    ``rows_per_pose`` count the data; ``joint_readings`` (N, dof) every calibration pose.
    """
    residuals, jac, _ = stack(blocks, model, theta0)
    seen = analyse(jac, model.free, model.names, model.describe, words=False)
    reference = structural if structural is not None and structural.rank <= seen.rank else seen
    needed = MIN_RESIDUALS_PER_PARAMETER * reference.rank
    if len(residuals) < needed:
        held = f" after holding out {holdout:.0%}" if holdout else ""
        raise InputError(f"too few poses: {poses} calibration poses{held} give {len(residuals)} measurements for "
                         f"{reference.rank} identifiable parameters; at least {math.ceil(needed / max(rows_per_pose, 1e-9))} "
                         f"calibration poses are needed.")
    if structural is None:
        return None, seen, None
    values = seen.singular_values[:structural.rank]
    condition = values[0] / values[-1] if len(values) and values[-1] > 0 else np.inf
    ratio = float(condition / structural.condition_number)
    if seen.rank < structural.rank or ratio > DEGENERATE_CONDITION_RATIO:
        spread = np.degrees(np.asarray(joint_readings).std(axis=0))
        if seen.rank < structural.rank:
            words = (f"the poses determine {seen.rank} of the {structural.rank} parameter combinations that poses "
                     f"spread over the joint ranges would (joint spread {np.round(spread, 1).tolist()} deg)")
        else:
            words = (f"the poses barely separate the {structural.rank} parameter combinations this arm allows "
                     f"(condition number {condition:.3g}, {ratio:.0f} times that of poses spread over the joint "
                     f"ranges; joint spread {np.round(spread, 1).tolist()} deg)")
        if require_full:
            raise InputError(f"degenerate pose set ({setting('require_full')}): {words}; record poses spread over each "
                             f"joint's range, or leave out {setting('require_full')} to fit what these poses determine.")
        return ratio, seen, (f"partial pose set: {words}; what they do not determine keeps its nominal value "
                             f"(the identifiability directions name it) and the calibration holds only near these "
                             f"poses (see the validity envelope).")
    return ratio, seen, None
