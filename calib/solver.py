"""One robust least-squares solver for every observation model.

The fit runs in the reduced space of identifiable combinations (``theta = theta_ref + basis @ z``)
with scipy's trust-region least squares and the blocks' analytic Jacobians; a Huber loss keeps
gross errors from pulling the first rounds; units (tracker points, board corners) whose whitened
residual exceeds ``outlier_threshold`` robust standard deviations are flagged, and the fit is redone
without them with a plain quadratic loss, which gives the parameter covariance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import scipy.optimize
import scipy.stats

from calib.error_model import ErrorModel
from calib.identifiability import Identifiability, analyse
from calib.observations import ObservationBlock, stack
from rigs.errors import InputError


@dataclass
class Outlier:
    block: str
    label: str  # "pose/target"
    residual_sigma: float  # whitened residual norm over the robust scale


@dataclass
class SolveResult:
    """``theta`` (P,), ``covariance`` (P, P) in the identifiable subspace, per-unit whitened norms."""

    theta: np.ndarray
    covariance: np.ndarray
    identifiability: Identifiability
    variance_factor: float  # a-posteriori sigma^2 of whitened residuals (1 when the noise model is right)
    outliers: list[Outlier]
    blocks: list[ObservationBlock]  # the blocks without outliers
    evaluations: int
    seconds: float
    combination_covariance: np.ndarray = field(repr=False, default=None)

    @property
    def standard_deviations(self) -> np.ndarray:
        return np.sqrt(np.clip(np.diag(self.covariance), 0.0, None))


def unit_norms(residuals: np.ndarray, units: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Squared whitened norm (count,) and row count (count,) per unit."""
    return np.bincount(units, residuals ** 2, count), np.bincount(units, minlength=count)


def robust_sigma(squared: np.ndarray, rows: np.ndarray) -> float:
    """Per-row standard deviation from per-unit squared norms, robust to outliers (median of chi^2)."""
    ratio = squared / scipy.stats.chi2.median(np.maximum(rows, 1))
    return max(float(np.sqrt(np.median(ratio))), 1e-12)  # noise-free data must not divide by zero


class RobustSolver:
    """Configure once; ``solve(blocks, model, theta0)`` fits.

    ``jacobian``: "analytic" (the blocks' own) or "finite-difference" (scipy's 2-point scheme on the
    same residuals; for benchmarks). ``outlier_threshold``: k in "flag beyond k robust sigma".
    """

    def __init__(self, outlier_threshold: float = 5.0, huber: float = 1.345, max_evaluations: int = 200,
                 jacobian: str = "analytic", progress: Callable[[str], None] | None = None):
        if jacobian not in ("analytic", "finite-difference"):
            raise ValueError(jacobian)
        self.outlier_threshold = outlier_threshold
        self.huber = huber
        self.max_evaluations = max_evaluations
        self.jacobian = jacobian
        self.progress = progress or (lambda message: None)

    def _least_squares(self, blocks, model, theta_ref, basis, z0, loss, scale):
        def residuals(z):
            return stack(blocks, model, theta_ref + basis @ z, jacobian=False)[0]

        def jacobian(z):
            return stack(blocks, model, theta_ref + basis @ z, jacobian=True)[1] @ basis

        result = scipy.optimize.least_squares(
            residuals, z0, jac=jacobian if self.jacobian == "analytic" else "2-point", method="trf",
            loss=loss, f_scale=scale, max_nfev=self.max_evaluations, x_scale=1.0, xtol=1e-12, ftol=1e-12, gtol=1e-10)
        if result.status <= 0 or not np.all(np.isfinite(result.x)):
            raise InputError(f"the calibration did not converge within {self.max_evaluations} evaluations "
                             f"({result.message.rstrip('.')}); check the data for mixed-up poses or units.")
        return result

    def solve(self, blocks: list[ObservationBlock], model: ErrorModel, theta0: np.ndarray) -> SolveResult:
        from threadpoolctl import threadpool_limits

        # The matrices are tall and thin (thousands x tens): BLAS threads only add contention.
        with threadpool_limits(limits=1, user_api="blas"):
            return self._solve(blocks, model, theta0)

    def _solve(self, blocks: list[ObservationBlock], model: ErrorModel, theta0: np.ndarray) -> SolveResult:
        import time

        start = time.perf_counter()
        free = model.free
        residuals, jac, units = stack(blocks, model, theta0)
        ident = analyse(jac, free, model.names)
        unit_count = sum(len(b.unit_labels) for b in blocks)
        squared, rows = unit_norms(residuals, units, unit_count)
        sigma = robust_sigma(squared, rows)
        z = np.zeros(ident.rank)
        evaluations = 0
        # Two robust rounds: the first scale reflects the nominal model's error, the second the noise.
        for round_number in range(2):
            self.progress(f"robust round {round_number + 1}")
            result = self._least_squares(blocks, model, theta0, ident.basis, z, "huber", self.huber * max(sigma, 1e-12))
            z, evaluations = result.x, evaluations + result.nfev
            residuals, _, units = stack(blocks, model, theta0 + ident.basis @ z, jacobian=False)
            squared, rows = unit_norms(residuals, units, unit_count)
            sigma = robust_sigma(squared, rows)

        outliers: list[Outlier] = []
        kept = blocks
        for _ in range(3):
            residuals, _, units = stack(kept, model, theta0 + ident.basis @ z, jacobian=False)
            count = sum(len(b.unit_labels) for b in kept)
            squared, rows = unit_norms(residuals, units, count)
            if not outliers:
                sigma = robust_sigma(squared, rows)
            score = np.sqrt(squared) / sigma
            flagged = score > self.outlier_threshold
            if not flagged.any():
                break
            new_blocks, offset = [], 0
            for block in kept:
                n = len(block.unit_labels)
                mine = flagged[offset:offset + n]
                outliers += [Outlier(block.name, block.unit_labels[i], float(score[offset + i])) for i in np.flatnonzero(mine)]
                new_blocks.append(block.subset(~mine))
                offset += n
            kept = new_blocks
            self.progress(f"refit without {len(outliers)} outliers")
            result = self._least_squares(kept, model, theta0, ident.basis, z, "linear", 1.0)
            z, evaluations = result.x, evaluations + result.nfev
        if not outliers:
            result = self._least_squares(kept, model, theta0, ident.basis, z, "linear", 1.0)
            z, evaluations = result.x, evaluations + result.nfev

        theta = theta0 + ident.basis @ z
        residuals, jac, units = stack(kept, model, theta)
        final = analyse(jac, free, model.names)
        reduced = jac @ final.basis
        dof = max(len(residuals) - final.rank, 1)
        variance_factor = float(residuals @ residuals / dof)
        combination_covariance = variance_factor * np.linalg.inv(reduced.T @ reduced)
        covariance = final.basis @ combination_covariance @ final.basis.T
        return SolveResult(theta, covariance, final, variance_factor, outliers, kept, evaluations,
                           time.perf_counter() - start, combination_covariance)
