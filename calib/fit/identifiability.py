"""Which parameter combinations the data can determine, said in numbers and in words.

The stacked Jacobian's columns are scaled to unit norm (so metres and radians compare), then an
SVD gives the rank, the condition number and an orthonormal basis of the identifiable
combinations; a pivoted QR picks which parameters to call independent, so each dependent one can
be named together with the parameters it cannot be told apart from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.linalg

from calib.model.parameters import ParameterInfo

RANK_TOLERANCE = 1e-9  # relative singular value below which a direction is structurally blind


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

    def summary(self) -> dict:
        return {"parameters": self.free_count, "rank": self.rank, "condition_number": float(self.condition_number),
                "not_identifiable": self.free_count - self.rank, "directions": list(self.descriptions)}


def analyse(jacobian: np.ndarray, free: np.ndarray, names: list[ParameterInfo],
            describe: Callable[[ParameterInfo], str] = lambda info: info.name,
            tolerance: float = RANK_TOLERANCE, words: bool = True) -> Identifiability:
    """Identifiability of the free parameters from a whitened Jacobian (m, P); ``describe`` puts a
    parameter in words (the error model's groups know how); ``words=False`` skips the sentences
    (a check that only needs the rank)."""
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
    condition = float(singular_values[0] / singular_values[rank - 1]) if rank else float("inf")
    basis = np.zeros((len(names), rank))
    basis[free_index] = scale[:, None] * vt[:rank].T
    null_basis = np.zeros((len(names), len(free_index) - rank))
    null_basis[free_index] = scale[:, None] * vt[rank:].T
    combinations = np.zeros((rank, len(names)))
    # z = V_r^T S^-1 theta: the inverse scaling maps parameters back to the scaled coordinates.
    combinations[:, free_index] = vt[:rank] * np.where(blind, 0.0, norms)[None, :]

    descriptions, dependent = [], []
    independent = pivots[:rank]
    for position, column in enumerate(pivots[rank:], start=rank):
        info = names[free_index[column]]
        dependent.append(info.name)
        if not words:
            continue
        if blind[column]:
            descriptions.append(f"{describe(info)} has no effect on any measurement.")
            continue
        # The dependent column in terms of the independent ones: R11 c = R12 (from the pivoted QR).
        coefficients = scipy.linalg.solve_triangular(r_factor[:rank, :rank], r_factor[:rank, position])
        order = np.argsort(-np.abs(coefficients))
        partners = [describe(names[free_index[independent[i]]]) for i in order[:3] if abs(coefficients[i]) > 0.2]
        if not partners:
            partners = [describe(names[free_index[independent[order[0]]]])]
        descriptions.append(f"{describe(info)} is not separable from {', '.join(partners)}.")
    return Identifiability(rank, len(free_index), condition, singular_values, basis, combinations, dependent, descriptions,
                           null_basis)
