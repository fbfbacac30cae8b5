"""One robust least-squares solver for every observation model.

The fit runs in the reduced space of identifiable combinations (``theta = theta_ref + basis @ z``)
with the blocks' analytic Jacobians, by Levenberg-Marquardt on the normal equations of the reduced
problem (a few dozen well scaled columns; the basis carries the column scaling, so its condition
number is that of the identifiable part, tens): a calibration starts a fraction of a millimetre
from its minimum, where the model is nearly linear, so three or four steps converge where a
general trust-region method spent a dozen evaluations and an SVD each. A Huber loss (iteratively
reweighted) keeps gross errors from pulling the first rounds; units (tracker points, board corners,
probe poses) whose whitened residual exceeds ``outlier_threshold`` robust standard deviations are
flagged, and the fit is redone without them with a plain quadratic loss, which gives the parameter
covariance.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import scipy.optimize
import scipy.special
from threadpoolctl import ThreadpoolController

from calib.fit.identifiability import RANK_TOLERANCE, Identifiability, analyse
from calib.fit.physical import arm_reach
from calib.model.error_model import ErrorModel
from calib.sensors.blocks import ObservationBlock, stack, unit_count
from rigs.errors import InputError


@dataclass
class Outlier:
    block: str
    label: str  # "pose/target"
    residual_sigma: float  # whitened residual norm over the robust scale


@dataclass
class SolveResult:
    """``theta`` (P,), ``covariance`` (P, P) in the identifiable subspace (what the data say, given
    the rule that fixed the rest), ``rule`` (P, P) what the rule's assumption about the arm leaves
    open along the other directions (``rule_covariance``)."""

    theta: np.ndarray
    covariance: np.ndarray
    identifiability: Identifiability
    variance_factor: float  # a-posteriori sigma^2 of whitened residuals (1 when the noise model is right)
    outliers: list[Outlier]
    blocks: list[ObservationBlock]  # the blocks without outliers
    evaluations: int
    seconds: float
    combination_covariance: np.ndarray = field(repr=False, default=None)
    rule: np.ndarray = field(repr=False, default=None)

    @property
    def standard_deviations(self) -> np.ndarray:
        """(P,) what the data determine: a prediction of poses like the fitted ones is this good."""
        return np.sqrt(np.clip(np.diag(self.covariance), 0.0, None))

    @property
    def value_standard_deviations(self) -> np.ndarray:
        """(P,) how well each value itself is known: the data's part and the rule's (a reflector the
        poses cannot tell from the last link is known as well as the URDF knows that link)."""
        rule = 0.0 if self.rule is None else np.diag(self.rule)
        return np.sqrt(np.clip(np.diag(self.covariance) + rule, 0.0, None))


def unit_norms(residuals: np.ndarray, units: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Squared whitened norm (count,) and row count (count,) per unit."""
    return np.bincount(units, residuals ** 2, count), np.bincount(units, minlength=count)


def robust_sigma(squared: np.ndarray, rows: np.ndarray) -> float:
    """Per-row standard deviation from per-unit squared norms, robust to outliers (median of chi^2)."""
    # The median of a chi-square with k degrees of freedom: 2 P^-1(k/2, 1/2).
    ratio = squared / (2.0 * scipy.special.gammaincinv(np.maximum(rows, 1) / 2.0, 0.5))
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
        if self.jacobian == "analytic":
            # From the nominal arm (z = 0) reweighted steps are safer; from a fitted start, Newton's.
            return _levenberg_marquardt(blocks, model, theta_ref, basis, z0, scale if loss == "huber" else None,
                                        self.max_evaluations, newton=bool(np.any(z0)))

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

    def solve(self, blocks: list[ObservationBlock], model: ErrorModel, theta0: np.ndarray,
              identifiability: Identifiability | None = None) -> SolveResult:
        """Fit ``blocks`` from ``theta0``; ``identifiability``: the analysis at ``theta0`` when the
        caller has it (the pose-set check does)."""
        # The matrices are tall and thin (thousands x tens): BLAS threads only add contention.
        with blas_single_thread():
            return self._solve(blocks, model, theta0, identifiability)

    def _gauge(self, blocks, model: ErrorModel, theta0: np.ndarray, theta: np.ndarray,
               final: Identifiability, jac: np.ndarray) -> np.ndarray:
        """Among the solutions the data cannot tell apart, the one the stated rule picks.

        The fit moves along the combinations identifiable at its start; a calibration that starts
        far from its minimum (cameras placed by hand-eye, a crashed arm) can drift along directions
        that turn out unseen at the minimum, by an amount that depends on the solver's path, and a
        partial sweep lets the unmodelled error push the fit along combinations it sees too faintly
        to determine (``final``: the analysis at ``theta`` with the residuals' scale, of ``jac``, the
        whitened Jacobian there). The rule for
        those directions: the arm's parameters (placements, zero offsets, compliance) keep their
        start (the URDF's, or a previous calibration's) as closely as the data allow; of what is
        left, each reflector's offset and each probe's origin take the shortest value consistent
        with the data (no sensor offset grows along what the poses cannot see); the sensors' frames
        absorb the rest. A last plain refit along the determined combinations removes what
        curvature the move left.
        """
        null = final.null_basis
        free = model.free
        if null is None or not null.shape[1]:
            return theta
        rows = arm_parameters(model) & free
        # Scaled coordinates: null's columns are orthonormal where u = theta * column norm.
        norms = np.linalg.norm(jac, axis=0)
        difference = (theta - theta0)[rows] * norms[rows]
        moved = null[rows] * norms[rows][:, None]
        w, left = _least_change(moved, -difference, np.eye(null.shape[1]))
        # Negligible moves leave the fit as it is (a refit for nothing could only add round-off).
        changes = np.abs(moved @ w).max(initial=0.0) > 1e-9 * max(np.abs(difference).max(initial=0.0), 1e-300)
        offsets, values = _offset_rows(model, theta)
        if offsets is not None and left.shape[1]:
            # Shortest offsets among what keeps the arm: minimise |values + along (w + left k)|.
            along = offsets @ null
            k, _ = _least_change(along @ left, -(values + along @ w), np.eye(left.shape[1]))
            shorter = along @ left @ k
            if np.abs(shorter).max(initial=0.0) > OFFSET_RESOLUTION_M:
                w, changes = w + left @ k, True
        if not changes:
            return theta  # the fit already sits where the rule says
        step = null @ w
        shifted = theta + step
        refined = _levenberg_marquardt(blocks, model, shifted, final.basis, np.zeros(final.rank), None,
                                       self.max_evaluations)
        return shifted + final.basis @ refined.x

    def _solve(self, blocks: list[ObservationBlock], model: ErrorModel, theta0: np.ndarray,
               identifiability: Identifiability | None) -> SolveResult:
        start = time.perf_counter()
        free = model.free
        residuals, jac, units = stack(blocks, model, theta0, jacobian=identifiability is None)
        ident = identifiability or analyse(jac, free, model.names, model.describe)
        squared, rows = unit_norms(residuals, units, unit_count(blocks))
        sigma = robust_sigma(squared, rows)
        z = np.zeros(ident.rank)
        evaluations = 0
        # Two robust rounds: the first scale reflects the nominal model's error, the second the noise.
        for round_number in range(2):
            self.progress(f"robust round {round_number + 1}")
            result = self._least_squares(blocks, model, theta0, ident.basis, z, "huber", self.huber * max(sigma, 1e-12))
            z, evaluations = result.x, evaluations + result.nfev
            residuals, _, units = stack(blocks, model, theta0 + ident.basis @ z, jacobian=False)
            squared, rows = unit_norms(residuals, units, unit_count(blocks))
            sigma = robust_sigma(squared, rows)

        outliers: list[Outlier] = []
        kept = blocks
        for _ in range(3):
            residuals, _, units = stack(kept, model, theta0 + ident.basis @ z, jacobian=False)
            squared, rows = unit_norms(residuals, units, unit_count(kept))
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
        judged = on_the_arm(model)
        # The rule fixes what the data leave open; a move along an undetermined combination can
        # make another one faint, so the analysis is redone where the rule put the fit.
        for _ in range(GAUGE_ROUNDS):
            residuals, jac, units = stack(kept, model, theta)
            variance_factor = float(residuals @ residuals / max(len(residuals) - ident.rank, 1))
            final = analyse(jac, free, model.names, model.describe, noise=np.sqrt(variance_factor), judged=judged)
            gauged = self._gauge(kept, model, theta0, theta, final, jac)
            if gauged is theta:
                break
            theta = gauged
        else:
            residuals, jac, units = stack(kept, model, theta)
            final = analyse(jac, free, model.names, model.describe,
                            noise=np.sqrt(float(residuals @ residuals / max(len(residuals) - final.rank, 1))),
                            judged=judged)
        reduced = jac @ final.basis
        dof = max(len(residuals) - final.rank, 1)
        variance_factor = float(residuals @ residuals / dof)
        combination_covariance = variance_factor * np.linalg.inv(reduced.T @ reduced)
        covariance = final.basis @ combination_covariance @ final.basis.T
        return SolveResult(theta, covariance, final, variance_factor, outliers, kept, evaluations,
                           time.perf_counter() - start, combination_covariance,
                           rule_covariance(model, final, jac, theta))


OFFSET_RESOLUTION_M = 1e-7  # a shorter offset by less than this is no change worth a refit
def arm_parameters(model: ErrorModel) -> np.ndarray:
    """(P,) bool: the arm's own parameters (placements, zero offsets, compliance)."""
    mask = np.zeros(model.size, bool)
    for group in model.groups.values():
        if group.arm:
            mask[group.slice] = True
    return mask


def on_the_arm(model: ErrorModel) -> np.ndarray:
    """(P,) bool: the arm's parameters and those of what is mounted on its flange (reflectors, probe,
    board). Whether the data determine a combination is judged by these: a frame standing in the
    room (a tracker, a camera) sits metres away, where millimetres along the line of sight are a
    fair uncertainty of the data (a camera's distance trades with its focal length), not a fit that
    ran along what the poses cannot see."""
    mask = arm_parameters(model)
    for key in ("target", "probe", "board"):
        group = model.group(key)
        if group is not None:
            mask[group.slice] = True
    return mask


GAUGE_ROUNDS = 3  # the analysis, the rule's move and the refit, until the rule no longer moves the fit


def _least_change(matrix: np.ndarray, target: np.ndarray, space: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(w, left): the shortest ``w`` minimising ``|matrix @ w - target|``, and an orthonormal basis
    (columns, in ``space``'s coordinates) of the directions that leave ``matrix @ w`` unchanged."""
    if not matrix.size:
        return np.zeros(matrix.shape[1]), space
    u, values, vt = np.linalg.svd(matrix, full_matrices=True)
    tolerance = RANK_TOLERANCE * max(values.max(initial=0.0), 1e-300)
    rank = int(np.sum(values > tolerance))
    w = vt[:rank].T @ ((u[:, :rank].T @ target) / values[:rank])
    return w, space @ vt[rank:].T


def _offset_rows(model: ErrorModel, theta: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The sensor offsets from the flange as a linear map of a small change of ``theta``: (rows
    (3k, P), values (3k,) in m): each reflector's offset, each probe's origin (to first order
    through its frame's right Jacobian)."""
    rows, values = [], []
    reflectors = model.group("target")
    if reflectors is not None:
        for name in reflectors.owners:
            block = np.zeros((3, model.size))
            block[:, reflectors.owner_slice(name)] = np.eye(3)
            rows.append(block)
            values.append(reflectors.offset(theta, name))
    probes = model.group("probe")
    if probes is not None:
        for name in probes.owners:
            frame = probes.transform(theta, name)
            # d(origin) = R (v part of the frame's twist change), the twist change = J d(xi).
            block = np.zeros((3, model.size))
            block[:, probes.owner_slice(name)] = frame[:3, :3] @ probes.right_jacobian(theta, name)[:3]
            rows.append(block)
            values.append(frame[:3, 3])
    if not rows:
        return None, None
    return np.vstack(rows), np.concatenate(values)


# What the rule assumes of the arm where the data leave it open, and of the joints a sweep held
# still: its URDF (or previous calibration) holds each joint's placement to this much (1 sd), per
# translation component and per rotation and zero offset. Arms leave the factory 0.5-3 mm off at
# the tool before calibration; 2 mrad a joint over about a metre of arm is the upper half of that.
ARM_TOLERANCE_M = 1e-3
ARM_TOLERANCE_RAD = 2e-3


def rule_covariance(model: ErrorModel, final: Identifiability, jac: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """(P, P) the uncertainty the rule leaves in what it fixed.

    Where the data cannot separate the tool (or a frame) from the arm, the rule keeps the arm at
    its start and gives the rest to the sensors; had the arm been off its start by d, the solution
    would have been ``G d`` further along the directions the data leave open. So the values carry
    ``G Sigma G^T`` with Sigma the arm's tolerance (``ARM_TOLERANCE_M``, ``ARM_TOLERANCE_RAD``) on top
    of what the data say: a reflector the poses cannot tell from the last link is known as well as
    the URDF knows that link, not to the micrometre. Where the tool trades with another sensor's
    frame alone (a one-joint sweep cannot tell the tool's offset along the axis from the tracker's),
    the rule's shortest offset is a choice, not a measurement: there the tool is only known to lie
    within the arm's reach, and its offsets carry that (one standard deviation: the arm's length).
    A joint the sweep held still is fixed at its start, yet off it by the same tolerance, and what
    the data see of that lands in the fitted values; so each held parameter's response adds to the
    term too. Being what poses like the fitted ones cannot tell apart, the term changes no
    prediction of such a pose, so predictions leave it out; it is what a stated value (a
    reflector's offset, a probe's mount) does not know."""
    null = final.null_basis
    covariance = np.zeros((model.size, model.size))
    arm = arm_parameters(model)
    units = np.array([info.unit for info in model.names])
    tolerance = np.where(units == "m", ARM_TOLERANCE_M, np.where(units == "rad", ARM_TOLERANCE_RAD, 0.0))
    rows = arm & model.free
    norms = np.linalg.norm(jac, axis=0)
    has_null = null is not None and null.shape[1] > 0
    moved = null[rows] * norms[rows][:, None] if has_null else None
    held = arm & ~model.free & (tolerance > 0) & (norms > 0)
    if held.any() and final.basis is not None and final.basis.shape[1]:
        # A joint held still keeps its URDF placement and zero, but the real arm is off them by its
        # tolerance too, and whatever the data see of that lands in the fitted values (a reflector
        # absorbs the held wrist's placement errors). Had a held parameter been off by d, the fit
        # would have moved by -pinv(J B) J_held d along the determined combinations B, and the rule
        # would then have kept the moving arm at its start along the open ones.
        response = -final.basis @ np.linalg.lstsq(jac @ final.basis, jac[:, held], rcond=None)[0]
        if has_null and rows.any():
            w = np.linalg.pinv(moved, rcond=RANK_TOLERANCE) @ (-response[rows] * norms[rows][:, None])
            response = response + null @ w
        covariance += (response * tolerance[held] ** 2) @ response.T
    if not has_null:
        return covariance
    if rows.any():
        # w = pinv(moved) (norms d): the move along the open directions that takes the arm to start + d.
        gain = null @ (np.linalg.pinv(moved, rcond=RANK_TOLERANCE) * norms[rows][None, :])
        covariance += (gain * tolerance[rows] ** 2) @ gain.T
    _, left = _least_change(moved, np.zeros(len(moved)), np.eye(null.shape[1]))
    offsets, _ = _offset_rows(model, theta)
    if offsets is not None and left.shape[1]:
        along = offsets @ null @ left
        if np.abs(along).max(initial=0.0) > 0:
            directions = null @ left
            # Offsets along these directions get the arm's length as standard deviation: A C A^T = reach^2 P.
            inner = np.linalg.pinv(along.T @ along, rcond=RANK_TOLERANCE, hermitian=True)
            covariance += arm_reach(model.chain) ** 2 * (directions @ inner @ directions.T)
    return covariance


def runaway(model: ErrorModel, start: np.ndarray, theta: np.ndarray) -> str:
    """What ran away in a fit that did not converge: the length parameter (m) that moved furthest
    from its start, in words (", <parameter> moved 2.3 m from its start ..."), or "" when none moved."""
    moved = np.abs(np.asarray(theta) - np.asarray(start))
    lengths = np.array([info.unit == "m" for info in model.names]) & np.isfinite(moved)
    if not lengths.any() or moved[lengths].max() <= 0:
        return ""
    index = int(np.flatnonzero(lengths)[np.argmax(moved[lengths])])
    return (f": {model.describe(model.names[index])} moved {moved[index]:.3g} m from its start, further than the "
            f"poses hold it (a direction they barely separate from the rest)")


def fold_solutions(blocks: list[ObservationBlock], model: ErrorModel, theta: np.ndarray, basis: np.ndarray,
                   held_out: list) -> list[np.ndarray]:
    """theta (P,) refitted without each fold's units, from the fit of all of them at ``theta``.

    ``held_out``: per fold, a function ``block -> (units,) bool`` naming the units it leaves out.
    Plain least squares (outliers already gone) along the identifiable combinations ``basis``: one
    Gauss-Newton step from the full fit, on the normal equations without the fold's rows,
    ``(H - A_f^T A_f) dz = -(g - A_f^T r_f)`` with ``H, g`` of every row. Over the micrometres a fold
    moves a calibration the model is linear to better than 1 %, so the step lands within nanometres
    of the iterated refit (the tests check it against one)."""
    with blas_single_thread():
        residuals, jac, _ = stack(blocks, model, theta)
        reduced = jac @ basis
        normal, gradient = reduced.T @ reduced, reduced.T @ residuals
        solutions = []
        for leaves in held_out:
            rows = np.concatenate([np.asarray(leaves(b), bool)[b.unit_index] for b in blocks]) if blocks else np.zeros(0, bool)
            part, part_residuals = reduced[rows], residuals[rows]
            matrix = normal - part.T @ part
            right = gradient - part.T @ part_residuals
            try:
                step = -np.linalg.solve(matrix, right)
            except np.linalg.LinAlgError:
                step = -np.linalg.lstsq(matrix, right, rcond=None)[0]
            solutions.append(theta + basis @ step)
    return solutions


def blas_single_thread():
    """One BLAS thread: the matrices are tall and thin (thousands x tens), threads only contend."""
    return _controller().limit(limits=1, user_api="blas")


@functools.cache
def _controller() -> ThreadpoolController:
    return ThreadpoolController()  # finding the BLAS libraries once, not at every solve


def _solve_normal(matrix: np.ndarray, gradient: np.ndarray) -> np.ndarray:
    """The step -matrix^-1 gradient (least squares where the matrix is singular)."""
    try:
        return -np.linalg.solve(matrix, gradient)
    except np.linalg.LinAlgError:
        return -np.linalg.lstsq(matrix, gradient, rcond=None)[0]


@dataclass
class _Minimum:
    x: np.ndarray
    nfev: int


# Converged when a step would lower the cost by less than this fraction of it (the data's noise
# sets the cost: 1e-10 of it moves a fitted RMS by 5e-11 of itself, far below any figure).
RELATIVE_COST_TOLERANCE = 1e-10
# A full step the quadratic model says gains less than this fraction, yet the cost refuses: the
# minimum as far as the arithmetic (and Huber's kink) can resolve it.
RESOLUTION = 1e-8
SWITCH_TO_NEWTON = 1e-3  # reweighted steps converge only linearly; near the minimum Newton's are better


def _levenberg_marquardt(blocks, model, theta_ref, basis, z0, huber_scale: float | None,
                         max_evaluations: int, newton: bool = True) -> _Minimum:
    """Minimise the (Huber, when ``huber_scale`` is given; scipy's definition) cost of the stacked
    whitened residuals over ``z`` (theta = theta_ref + basis z).

    ``newton``: start with Huber's own curvature (quadratic convergence near the minimum); otherwise
    with the reweighted least-squares one, which takes safer steps far from it (from the nominal
    arm), switching to Huber's own once a step gains less than ``SWITCH_TO_NEWTON`` of the cost."""
    count = 0

    def evaluate(z):
        nonlocal count
        count += 1
        residuals, jac, _ = stack(blocks, model, theta_ref + basis @ z)
        return residuals, jac @ basis

    def cost_and_weights(residuals):
        """Cost, gradient weights rho'(r^2) and curvature weights (Huber's second derivative along a
        row is 0 beyond the scale: a clipped row pulls with constant force, it adds no curvature)."""
        if huber_scale is None:
            ones = np.ones_like(residuals)
            return 0.5 * float(residuals @ residuals), ones, ones
        scaled = (residuals / huber_scale) ** 2
        inside = scaled <= 1.0
        rho = np.where(inside, scaled, 2.0 * np.sqrt(scaled) - 1.0)
        weights = np.where(inside, 1.0, 1.0 / np.sqrt(np.maximum(scaled, 1.0)))
        return 0.5 * huber_scale ** 2 * float(rho.sum()), weights, (inside.astype(float) if newton_curvature else weights)

    newton_curvature = newton

    z = np.asarray(z0, float).copy()
    residuals, reduced = evaluate(z)
    cost, weights, curvature = cost_and_weights(residuals)
    damping = 0.0
    while True:
        if not np.isfinite(cost):
            raise InputError("the calibration diverged (non-finite residuals); check the data for mixed-up poses or units.")
        gradient = reduced.T @ (weights * residuals)
        normal = reduced.T @ (curvature[:, None] * reduced)
        diagonal = np.maximum(np.diag(normal), 1e-300)
        # Converged when the undamped (Gauss-Newton) step's predicted decrease is negligible; a
        # damped step is short by design and says nothing about convergence.
        gauss_newton = _solve_normal(normal, gradient)
        predicted = -float(gradient @ gauss_newton) - 0.5 * float(gauss_newton @ normal @ gauss_newton)
        if predicted <= RELATIVE_COST_TOLERANCE * max(cost, 1e-300):
            return _Minimum(z, count)
        while True:
            step = gauss_newton if damping == 0.0 else _solve_normal(normal + damping * np.diag(diagonal), gradient)
            if count >= max_evaluations:
                raise InputError(f"the calibration did not converge within {max_evaluations} evaluations"
                                 f"{runaway(model, theta_ref + basis @ np.asarray(z0, float), theta_ref + basis @ z)}; "
                                 f"check the data for mixed-up poses or units.")
            new_residuals, new_reduced = evaluate(z + step)
            new_cost, new_weights, new_curvature = cost_and_weights(new_residuals)
            if np.isfinite(new_cost) and new_cost <= cost:
                break
            if damping == 0.0 and predicted <= RESOLUTION * max(cost, 1e-300):
                return _Minimum(z, count)
            damping = max(10.0 * damping, 1e-6)
            if damping > 1e12:  # no step lowers the cost: a minimum as far as the arithmetic can tell
                return _Minimum(z, count)
        z = z + step
        gained = (cost - new_cost) / max(cost, 1e-300)
        undamped = damping == 0.0
        residuals, reduced, cost, weights, curvature = new_residuals, new_reduced, new_cost, new_weights, new_curvature
        damping = damping / 10.0 if damping > 1e-6 else 0.0
        if undamped and gained <= RELATIVE_COST_TOLERANCE:  # a full step that changes nothing: converged
            return _Minimum(z, count)
        if not newton_curvature and gained < SWITCH_TO_NEWTON:
            newton_curvature = True
            cost, weights, curvature = cost_and_weights(residuals)
