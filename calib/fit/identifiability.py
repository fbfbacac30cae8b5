"""Which parameter combinations the data can determine, said in numbers and in words.

The stacked Jacobian's columns are scaled to unit norm (so metres and radians compare), then an
SVD gives the rank, the condition number and an orthonormal basis of the identifiable
combinations; a pivoted QR picks which parameters to call independent, so each dependent one can
be named together with the parameters it cannot be told apart from.

Given the residuals' scale, a combination can also be *determined* or not: a combination the
poses do see, but so faintly that one standard deviation of it moves a length parameter by more
than ``UNDETERMINED_LENGTH_M`` or an angle by more than ``UNDETERMINED_ANGLE_RAD``, says nothing
about the arm (its errors are tenths of a millimetre; such a combination only carries the
unmodelled error, amplified). A run that sweeps two joints of seven holds the other five within a
tenth of a degree: the tool's offset and the distal links' placements then trade along two such
combinations, 20-40 mm apart at one standard deviation, where every combination of a full sweep,
cameras included, stays under about 1 mm. Those combinations join the unseen ones, and the fit
fixes them by its stated rule instead of by the noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.linalg

from calib.model.parameters import ParameterInfo

RANK_TOLERANCE = 1e-9  # relative singular value below which a direction is structurally blind
# A combination whose one standard deviation moves a length by more than this, or an angle by more
# than UNDETERMINED_ANGLE_RAD, is not determined by the data (the figures above: 20-40 mm and 11-35
# mrad for the two-joint sweeps, at most 1.1 mm and 0.9 mrad for full sweeps and cameras).
UNDETERMINED_LENGTH_M = 0.005
UNDETERMINED_ANGLE_RAD = 0.005


@dataclass
class Identifiability:
    """Rank analysis of a whitened Jacobian restricted to the free parameters.

    ``basis`` (P, r): parameter-space directions of the identifiable combinations (column scaling
    included, zero rows for fixed parameters): ``theta = theta_ref + basis @ z``.
    ``combinations`` (r, P): rows map a parameter vector to the combinations, ``z = combinations @ theta``.
    ``singular_values`` (n_free,) of the column-scaled Jacobian. ``null_basis`` (P, n_free - r): the
    directions no measurement sees, in the same scaled coordinates (orthonormal there).
    """

    rank: int
    free_count: int
    condition_number: float
    singular_values: np.ndarray
    basis: np.ndarray
    combinations: np.ndarray
    dependent: list[str]  # parameter names left at their reference values
    descriptions: list[str]  # one sentence per non-identifiable direction
    null_basis: np.ndarray | None = None
    undetermined: int = 0  # of the directions in null_basis, how many the data see but cannot determine
    # (their sentences lead ``descriptions``)

    def summary(self) -> dict:
        return {"parameters": self.free_count, "rank": self.rank, "condition_number": float(self.condition_number),
                "not_identifiable": self.free_count - self.rank, "not_determined": list(self.descriptions[:self.undetermined]),
                "directions": list(self.descriptions)}


def analyse(jacobian: np.ndarray, free: np.ndarray, names: list[ParameterInfo],
            describe: Callable[[ParameterInfo], str] = lambda info: info.name,
            tolerance: float = RANK_TOLERANCE, words: bool = True, noise: float | None = None,
            judged: np.ndarray | None = None) -> Identifiability:
    """Identifiability of the free parameters from a whitened Jacobian (m, P); ``describe`` puts a
    parameter in words (the error model's groups know how); ``words=False`` skips the sentences
    (a check that only needs the rank). ``noise``: the whitened residuals' standard deviation (the
    square root of the variance factor) at a fit; with it, combinations the data do not determine
    (see the module's docstring) count as not identifiable too, judged by how far they move the
    parameters ``judged`` (P,) bool (default: all)."""
    free_index = np.flatnonzero(free)
    columns = jacobian[:, free_index]
    norms = np.linalg.norm(columns, axis=0)
    blind = norms <= tolerance * max(norms.max(initial=0.0), 1e-300)
    scale = np.where(blind, 0.0, 1.0 / np.where(blind, 1.0, norms))
    scaled = columns * scale
    # Pivoted QR once (it also names the dependent parameters below), then the SVD of the small
    # triangle: scaled[:, pivots] = Q R, so scaled's singular values are R's and V[pivots] = R's.
    r_factor, pivots = scipy.linalg.qr(scaled, mode="r", pivoting=True)
    r_factor = r_factor[:scaled.shape[1]]
    _, singular_values, triangle_vt = np.linalg.svd(r_factor, full_matrices=True)  # (n, n): the null space too
    vt = np.empty_like(triangle_vt)
    vt[:, pivots] = triangle_vt
    rank = int(np.sum(singular_values > tolerance * singular_values[0])) if singular_values.size else 0
    judged = np.ones(len(names), bool) if judged is None else np.asarray(judged, bool)
    weak, spreads = _undetermined(names, free_index, scale, singular_values[:rank], vt[:rank], noise,
                                  judged[free_index])
    kept = [i for i in range(rank) if i not in weak]
    order = kept + weak + list(range(rank, len(free_index)))  # determined, then seen but undetermined, then unseen
    vt, singular_values_kept = vt[order], singular_values[kept]
    structural_rank, rank = rank, len(kept)
    condition = float(singular_values_kept[0] / singular_values_kept[-1]) if rank else float("inf")
    basis = np.zeros((len(names), rank))
    basis[free_index] = scale[:, None] * vt[:rank].T
    null_basis = np.zeros((len(names), len(free_index) - rank))
    null_basis[free_index] = scale[:, None] * vt[rank:].T
    combinations = np.zeros((rank, len(names)))
    # z = V_r^T S^-1 theta: the inverse scaling maps parameters back to the scaled coordinates.
    combinations[:, free_index] = vt[:rank] * np.where(blind, 0.0, norms)[None, :]

    descriptions, dependent = [], []
    for position in range(len(weak)):
        moves = np.abs(scale * vt[rank + position]) * spreads[position][0]
        top = np.argsort(-moves)[:3]
        info = names[free_index[top[0]]]
        dependent.append(info.name)
        if words:
            partners = [describe(names[free_index[i]]) for i in top[1:] if moves[i] > 0.2 * moves[top[0]]]
            descriptions.append(f"{describe(info)} is not determined by the poses"
                                + (f", it trades with {', '.join(partners)}" if partners else "")
                                + f" (one standard deviation: {spreads[position][1]}).")
    independent = pivots[:structural_rank]
    for position, column in enumerate(pivots[structural_rank:], start=structural_rank):
        info = names[free_index[column]]
        dependent.append(info.name)
        if not words:
            continue
        if blind[column]:
            descriptions.append(f"{describe(info)} has no effect on any measurement.")
            continue
        # The dependent column in terms of the independent ones: R11 c = R12 (from the pivoted QR).
        coefficients = scipy.linalg.solve_triangular(r_factor[:structural_rank, :structural_rank],
                                                     r_factor[:structural_rank, position])
        order = np.argsort(-np.abs(coefficients))
        partners = [describe(names[free_index[independent[i]]]) for i in order[:3] if abs(coefficients[i]) > 0.2]
        if not partners:
            partners = [describe(names[free_index[independent[order[0]]]])]
        descriptions.append(f"{describe(info)} is not separable from {', '.join(partners)}.")
    return Identifiability(rank, len(free_index), condition, singular_values, basis, combinations, dependent, descriptions,
                           null_basis, len(weak))


def _undetermined(names: list[ParameterInfo], free_index: np.ndarray, scale: np.ndarray, singular_values: np.ndarray,
                  vt: np.ndarray, noise: float | None, judged: np.ndarray) -> tuple[list[int], list[tuple[float, str]]]:
    """Which of the seen combinations (rows of ``vt``, scaled coordinates) the data do not
    determine, by the moves of the ``judged`` free parameters, and per such combination (its
    standard deviation in scaled coordinates, the largest move of one standard deviation in words)."""
    if noise is None or not len(singular_values):
        return [], []
    units = np.array([names[i].unit if judged[k] else "" for k, i in enumerate(free_index)])
    weak, spreads = [], []
    for i, value in enumerate(singular_values):
        spread = noise / value
        moves = np.abs(scale * vt[i]) * spread
        length = float(moves[units == "m"].max(initial=0.0))
        angle = float(moves[units == "rad"].max(initial=0.0))
        if length > UNDETERMINED_LENGTH_M or angle > UNDETERMINED_ANGLE_RAD:
            weak.append(i)
            spreads.append((spread, f"{length * 1e3:.3g} mm" if length / UNDETERMINED_LENGTH_M >= angle / UNDETERMINED_ANGLE_RAD
                            else f"{np.degrees(angle):.2g} deg"))
    return weak, spreads
