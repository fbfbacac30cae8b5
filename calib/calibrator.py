"""The tracker calibration estimator: configure, ``fit(sessions)``, predict, save, load.

    calibration = KinematicCalibrator(model="full", holdout=0.2, seed=0).fit([session])
    calibration.predict(q)                    # {target: (N, 3)} m in the tracker frame
    calibration.save("cal/")                  # robot.urdf + meshes, calibration.yaml, report.html
    Calibration.load("cal/").predict(q, "smr1")

A fit reads joints.csv, tracker.csv, session.json and robot.urdf only, never ``truth/``.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pinocchio as pin
from threadpoolctl import threadpool_limits

from calib.error_model import ErrorModel
from calib.identifiability import analyse
from calib.initialise import initial_frame_and_targets
from calib.observations import TrackerObservations, stack, tracker_sqrt_information
from calib.solver import RobustSolver, SolveResult
from capture.session import Session, load_session
from rigs import urdf as urdf_io
from rigs.errors import InputError
from rigs.kinematics import ChainModel
from rigs.transforms import exp6, transform_points

MIN_RESIDUALS_PER_PARAMETER = 2  # fewer leaves too little redundancy to estimate noise and spot outliers
STRUCTURAL_POSES = 60
# A pose set whose condition number is this many times that of poses spread over the joint ranges
# determines the arm only near where it was measured.
DEGENERATE_CONDITION_RATIO = 100.0


@dataclass
class ErrorStats:
    """Statistics of 3D point errors, in millimetres."""

    n: int
    mean_mm: float
    rms_mm: float
    max_mm: float
    p95_mm: float

    @classmethod
    def of(cls, errors_m: np.ndarray) -> "ErrorStats":
        e = np.asarray(errors_m, float) * 1000.0
        if e.size == 0:
            return cls(0, float("nan"), float("nan"), float("nan"), float("nan"))
        return cls(int(e.size), float(e.mean()), float(np.sqrt(np.mean(e ** 2))), float(e.max()), float(np.percentile(e, 95)))

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def fold_placement(placement: pin.SE3, delta: np.ndarray, zero: float, subspace: np.ndarray) -> pin.SE3:
    """nominal placement -> placement @ exp6(delta) @ exp6(subspace * zero): the zero offset written in."""
    return placement * pin.exp6(pin.Motion(np.asarray(delta, float))) * pin.exp6(pin.Motion(subspace * float(zero)))


@dataclass
class Calibration:
    """A fitted calibration. Learned values are plain attributes (SI units, chain order).

    ``chain``: the calibrated :class:`ChainModel` (zero offsets folded into the placements, so it is
    evaluated at the joint readings); ``tracker_T_base``: sensor name -> (4, 4) (the first is the
    default); ``targets``: name -> (3,) m in the tip frame; ``deltas`` (dof, 6) and ``zero_offsets``
    (dof,) with their standard deviations; ``summary``: identifiability, residual statistics,
    outliers, hashes (what calibration.yaml holds).
    """

    chain: ChainModel
    joint_names: list[str]
    tracker_T_base: dict[str, np.ndarray]
    targets: dict[str, np.ndarray]
    deltas: np.ndarray
    delta_std: np.ndarray
    zero_offsets: np.ndarray
    zero_std: np.ndarray
    target_std: dict[str, np.ndarray]
    summary: dict
    source_urdf: Path | None = None  # the nominal URDF the deltas apply to (for export)
    solve: SolveResult | None = field(default=None, repr=False)
    error_model: ErrorModel | None = field(default=None, repr=False)
    history: dict = field(default_factory=dict, repr=False)  # per-point errors for the report
    tip_T_probe: dict[str, np.ndarray] = field(default_factory=dict)  # 6-DoF probe name -> (4, 4) in the tip frame (issue 9)
    # Deflection (issue 4, calib/deflection.py): joints sit at q - compliance * tau(q, payload); a learned
    # residual model adds a base-frame tip shift. None: rigid. robot.urdf always holds the rigid geometry.
    compliance: np.ndarray | None = None  # (dof,) rad/(N m)
    compliance_std: np.ndarray | None = None  # (dof,)
    residual_model: object | None = field(default=None, repr=False)  # calib.residual_model.ResidualModel
    payload_com: np.ndarray | None = None  # (3,) m, tip frame: where a payload's mass sits
    deflection: dict | None = None  # mode, comparison table (what calibration.yaml holds)

    # -- prediction -------------------------------------------------------------------------------
    def base_T_tip(self, q: np.ndarray, payload_kg: np.ndarray | float | None = None) -> np.ndarray:
        """(N, dof) joint readings -> (N, 4, 4) tip poses in the base frame (with the joints' sag
        under ``payload_kg`` (N,) or scalar kg when the calibration holds compliances)."""
        q = np.atleast_2d(q)
        if self.compliance is not None:
            from calib.compliance import gravity_torques

            q = q - self.compliance * gravity_torques(self.chain, q, payload_kg, self.payload_com)
        return self.chain.base_T_tip_batch(q)

    def tip_shift(self, q: np.ndarray, payload_kg: np.ndarray | float | None = None) -> np.ndarray:
        """(N, 3) m base-frame correction of the learned residual model (zeros without one)."""
        q = np.atleast_2d(q)
        if self.residual_model is None:
            return np.zeros((len(q), 3))
        return self.residual_model.correct(self.chain, q, payload_kg, self.payload_com)

    def predict(self, q: np.ndarray, target: str | None = None, sensor: str | None = None,
                payload_kg: np.ndarray | float | None = None):
        """Reflector positions in the tracker frame, m: (N, 3) for ``target``, else {name: (N, 3)}.

        ``payload_kg`` (N,) or scalar: the payload at each pose (0 when None), for deflection."""
        sensor = sensor or next(iter(self.tracker_T_base))
        if sensor not in self.tracker_T_base:
            raise InputError(f"sensor {sensor!r} is not in the calibration (has {', '.join(self.tracker_T_base)}).")
        poses = self.base_T_tip(q, payload_kg)
        shift = self.tip_shift(q, payload_kg)
        frame = self.tracker_T_base[sensor]
        names = [target] if target is not None else list(self.targets)
        out = {}
        for name in names:
            if name not in self.targets:
                raise InputError(f"target {name!r} is not a reflector of the calibration (has {', '.join(self.targets)}).")
            base_points = np.einsum("nij,j->ni", poses[:, :3, :3], self.targets[name]) + poses[:, :3, 3] + shift
            out[name] = transform_points(frame, base_points)
        return out[target] if target is not None else out

    def predict_probe(self, q: np.ndarray, probe: str | None = None, sensor: str | None = None,
                      payload_kg: np.ndarray | float | None = None) -> np.ndarray:
        """Poses (N, 4, 4) of a 6-DoF probe in the tracker frame (issue 9), m."""
        if not self.tip_T_probe:
            raise InputError("the calibration has no 6-DoF probe (it was fitted from reflector points only).")
        probe = probe or next(iter(self.tip_T_probe))
        sensor = sensor or next(iter(self.tracker_T_base))
        if probe not in self.tip_T_probe or sensor not in self.tracker_T_base:
            raise InputError(f"probe {probe!r} or sensor {sensor!r} is not in the calibration "
                             f"(probes {', '.join(self.tip_T_probe)}; sensors {', '.join(self.tracker_T_base)}).")
        poses = self.base_T_tip(q, payload_kg) @ self.tip_T_probe[probe]
        poses[:, :3, 3] += self.tip_shift(q, payload_kg)
        return self.tracker_T_base[sensor] @ poses

    # -- files ------------------------------------------------------------------------------------
    def save(self, folder: Path, report: bool = True) -> None:
        """Write robot.urdf (+ meshes), calibration.yaml and report.html into an existing folder."""
        from calib.export import write_calibration_yaml, write_urdf

        folder = Path(folder)
        write_urdf(self, folder)
        write_calibration_yaml(self, folder / "calibration.yaml")
        from calib.deflection import write_deflection_files

        write_deflection_files(self, folder)  # parameter covariance for `selfcal predict`, a learned residual
        if report:
            from calib.report import write_report

            write_report(self, folder / "report.html")

    @classmethod
    def load(cls, folder: Path) -> "Calibration":
        from calib.export import read_calibration

        return read_calibration(Path(folder))


def _same_robot(sessions: list[Session]) -> None:
    first = sessions[0]
    first_joints = urdf_io.joints(urdf_io.parse_urdf(first.urdf_path), first.urdf_path)
    for other in sessions[1:]:
        if (other.joint_names != first.joint_names or other.base_link != first.base_link
                or other.tip_link != first.tip_link):
            raise InputError(f"{other.path}: records a different robot than {first.path} "
                             f"(joints {other.joint_names} from {other.base_link} to {other.tip_link}); "
                             f"calibrate sessions of one robot together.")
        joints = urdf_io.joints(urdf_io.parse_urdf(other.urdf_path), other.urdf_path)
        for name in first.joint_names:
            if name not in joints or not np.allclose(joints[name].origin, first_joints[name].origin, atol=1e-9):
                raise InputError(f"{other.path}: its robot.urdf differs from {first.path}'s at joint {name!r}; "
                                 f"calibrate sessions of one robot together.")


def holdout_rows(counts: list[int], holdout: float, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(fit rows, held rows) per session: a random fraction of all poses across sessions, by pose,
    never by point (a pose's reflectors stay together)."""
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


def check_pose_set(model: ErrorModel, theta0: np.ndarray, blocks, structural, residuals: int, poses: int,
                   rows_per_pose: int, holdout: float, sessions: list[Session]) -> float:
    """Enough measurements, and poses varied enough, for what the arm's structure can identify.

    ``structural`` is the identifiability of well spread poses of this arm; ``residuals`` and
    ``poses`` count the data, ``rows_per_pose`` the measurements one pose gives. Returns the data's
    condition number over the structural one; InputError when too few or degenerate.
    """
    needed = MIN_RESIDUALS_PER_PARAMETER * structural.rank
    if residuals < needed:
        held = f" after holding out {holdout:.0%}" if holdout else ""
        raise InputError(f"too few poses: {poses} calibration poses{held} give {residuals} measurements for "
                         f"{structural.rank} identifiable parameters; at least {math.ceil(needed / rows_per_pose)} "
                         f"calibration poses are needed.")
    _, jac, _ = stack(blocks, model, theta0)
    seen = analyse(jac, model.free, model.names)
    values = seen.singular_values[:structural.rank]
    condition = values[0] / values[-1] if values[-1] > 0 else np.inf
    ratio = float(condition / structural.condition_number)
    if seen.rank < structural.rank or ratio > DEGENERATE_CONDITION_RATIO:
        spread = np.degrees(np.concatenate([s.q for s in sessions]).std(axis=0))
        raise InputError(f"degenerate pose set: the poses barely separate the {structural.rank} parameter "
                         f"combinations this arm allows (condition number {condition:.3g}, {ratio:.0f} times that of "
                         f"poses spread over the joint ranges; joint spread {np.round(spread, 1).tolist()} deg); "
                         f"record poses spread over each joint's range.")
    return ratio


def seed_from_previous(previous: Calibration, model: ErrorModel, theta0: np.ndarray, session: Session) -> np.ndarray:
    """theta0 with the previous calibration's deltas, zero offsets and reflector offsets written in.

    The solver moves only along the combinations the new data identifies, so what the new data
    cannot see keeps its previous value and the change is the smallest the data asks for.
    """
    if list(previous.joint_names) != list(model.chain.joint_names):
        raise InputError(f"the previous calibration is of another robot (joints {list(previous.joint_names)}), "
                         f"{session.path} records {list(model.chain.joint_names)}.")
    theta = theta0.copy()
    theta[model.delta_slice] = np.asarray(previous.deltas, float).ravel()
    theta[model.zero_slice] = np.asarray(previous.zero_offsets, float)
    for name, sl in model.target_slices.items():
        if name in previous.targets:
            theta[sl] = previous.targets[name]
    return theta


def data_hash(sessions: list[Session]) -> str:
    """sha256 over the measurement files of the sessions, in order (truth/ excluded)."""
    digest = hashlib.sha256()
    for session in sessions:
        for name in ("session.json", "robot.urdf", "joints.csv", "tracker.csv"):
            path = session.path / name
            if path.is_file():
                digest.update(name.encode())
                digest.update(path.read_bytes())
    return "sha256:" + digest.hexdigest()


def tracker_blocks(session: Session, sensor: str, poses: np.ndarray | None = None) -> TrackerObservations:
    """The tracker points of ``session`` (only those of pose rows ``poses`` when given)."""
    tracker = session.tracker
    if tracker is None or not len(tracker.targets):
        raise InputError(f"{session.path}: has no tracker points (tracker.csv); nothing to calibrate against.")
    keep = np.ones(len(tracker.targets), bool) if poses is None else np.isin(tracker.pose_index, poses)
    sensors = session.manifest.get("sensors", {}).get("tracker") or {}
    distance = sensors.get("distance_mpe_m")
    transverse = sensors.get("transverse_mpe_m")
    information = tracker_sqrt_information(tracker.xyz, distance, transverse, tracker.sigma)
    labels = [f"{session.pose_ids[p]}/{t}" if sensor == "s0" else f"{sensor}:{session.pose_ids[p]}/{t}"
              for p, t in zip(tracker.pose_index, tracker.targets)]
    return TrackerObservations(sensor, session.q, tracker.pose_index[keep], [t for t, k in zip(tracker.targets, keep) if k],
                               tracker.xyz[keep], information[keep], [l for l, k in zip(labels, keep) if k])


class KinematicCalibrator:
    """Kinematic calibration from laser-tracker points.

    ``model``: "full" (6-DoF placement errors and zero offsets of every chain joint) or "offsets"
    (zero offsets only); both fit the tracker pose and reflector offsets. ``holdout``: fraction of
    poses kept out of the fit and reported (0 uses all). ``seed``: the hold-out draw.
    ``outlier_threshold``: points beyond this many robust standard deviations are flagged.
    ``tip_link``: override the sessions' tip link.
    """

    def __init__(self, model: str = "full", holdout: float = 0.2, seed: int = 0, outlier_threshold: float = 5.0,
                 tip_link: str | None = None, jacobian: str = "analytic",
                 progress: Callable[[str], None] | None = None, previous: "Calibration | None" = None):
        self.model = model
        self.holdout = holdout
        self.seed = seed
        self.outlier_threshold = outlier_threshold
        self.tip_link = tip_link
        self.jacobian = jacobian
        self.progress = progress
        self.previous = previous  # recalibration: start from these deltas, zeros and reflectors

    def fit(self, sessions: list[Session | Path]) -> Calibration:
        """Fit from tracker sessions (folders or loaded :class:`Session`) of one robot."""
        if self.model not in ("full", "offsets"):
            raise InputError(f"--model must be 'full' or 'offsets', got {self.model!r}.")
        if not 0.0 <= self.holdout < 1.0:
            raise InputError(f"--holdout must be in [0, 1), got {self.holdout}.")
        if not sessions:
            raise InputError("give at least one session to calibrate from.")
        sessions = [s if isinstance(s, Session) else load_session(Path(s)) for s in sessions]
        _same_robot(sessions)
        first = sessions[0]
        tip_link = self.tip_link or first.tip_link
        chain = ChainModel.from_urdf(first.urdf_path, first.base_link, tip_link)
        if chain.joint_names != first.joint_names:
            raise InputError(f"tip_link {tip_link!r}: its chain from {first.base_link!r} moves joints {chain.joint_names}, "
                             f"but {first.path} records {first.joint_names}; the reflectors sit on the recorded tip "
                             f"{first.tip_link!r}, so calibrate to that link.")
        sensors = [f"s{i}" for i in range(len(sessions))]
        if any(s.tracker_poses is not None for s in sessions):
            from calib.pose_fit import fit_with_poses  # issue 9: 6-DoF probe poses, with or without points

            return fit_with_poses(self, sessions, chain, sensors)
        for session in sessions:
            if session.tracker is None or not len(session.tracker.targets):
                raise InputError(f"{session.path}: has no tracker points (tracker.csv); nothing to calibrate against.")

        fit_rows, held_rows = holdout_rows([len(s.pose_ids) for s in sessions], self.holdout, self.seed)

        fit_blocks = [tracker_blocks(s, name, rows) for s, name, rows in zip(sessions, sensors, fit_rows)]
        targets_seen = sorted(set().union(*[set(b.targets) for b in fit_blocks]))

        # Initial values: nominal tip poses registered to the points, reflectors by a linear solve.
        references, offsets = {}, {}
        for session, name, block in zip(sessions, sensors, fit_blocks):
            if not len(block.targets):
                raise InputError(f"{session.path}: no tracker points left for the fit after the hold-out.")
            # A recalibration registers the tracker with the previous model, so the frame agrees
            # with the seeded parameters and only the arm's real change is left to fit.
            start_chain = self.previous.chain if self.previous is not None else chain
            start_targets = dict(session.nominal_targets, **self.previous.targets) if self.previous is not None \
                else session.nominal_targets
            poses = start_chain.base_T_tip_batch(session.q)
            frame, block_offsets = initial_frame_and_targets(poses[block.pose_row], block.targets, block.xyz,
                                                             start_targets)
            references[name] = frame
            for target, xyz in block_offsets.items():
                offsets.setdefault(target, xyz)
        model = ErrorModel(chain, sensors, targets_seen, references, self.model)
        theta0 = model.initial_vector(offsets)
        if self.previous is not None:
            theta0 = seed_from_previous(self.previous, model, theta0, first)
        with threadpool_limits(limits=1, user_api="blas"):  # tall, thin matrices: threads only contend
            condition_ratio = self._check_data(model, theta0, fit_blocks, sessions)
        model, theta0, fit_blocks = self._extend_model(model, theta0, fit_blocks, sessions)

        solver = RobustSolver(self.outlier_threshold, jacobian=self.jacobian, progress=self.progress)
        result = solver.solve(fit_blocks, model, theta0)
        calibration = self._calibration(model, result, sessions, first)
        calibration.summary["identifiability"]["condition_ratio_to_spread_poses"] = condition_ratio
        self._statistics(calibration, model, result, sessions, sensors, fit_rows, held_rows, theta0, fit_blocks)
        return calibration

    def _extend_model(self, model: ErrorModel, theta0: np.ndarray, blocks: list, sessions: list[Session]):
        """Hook for extra parameters (calib/compliance.py): (model, theta0, blocks) after the data check."""
        return model, theta0, blocks

    def _blocks(self, session: Session, sensor: str, rows: np.ndarray):
        """The observation blocks of ``session``'s pose rows for the statistics (hook, as _extend_model)."""
        return tracker_blocks(session, sensor, rows)

    def _check_data(self, model: ErrorModel, theta0: np.ndarray, blocks, sessions) -> float:
        """Enough poses, and poses varied enough, for what the arm's structure can identify.

        Returns the data's condition number over that of random poses spread over the joint ranges.
        """
        # Structural rank: what a well spread pose set of this arm determines.
        rng = np.random.default_rng(12345)
        chain = model.chain
        low = np.where(np.isfinite(chain.lower), chain.lower, -np.pi)
        high = np.where(np.isfinite(chain.upper), chain.upper, np.pi)
        q = rng.uniform(low, high, (STRUCTURAL_POSES, chain.dof))
        targets = sorted(set().union(*[set(b.targets) for b in blocks]))
        probes = []
        for block in blocks:
            rows = np.repeat(np.arange(STRUCTURAL_POSES), len(targets))
            names = targets * STRUCTURAL_POSES
            fake = np.zeros((len(rows), 3))
            fake[:, 2] = 3.0  # any point a few metres away: only the Jacobian's structure matters here
            probes.append(TrackerObservations(block.sensor, q, rows, names, fake,
                                              np.repeat(np.eye(3)[None], len(rows), 0), [""] * len(rows)))
        _, jac, _ = stack(probes, model, theta0)
        structural = analyse(jac, model.free, model.names)
        residuals = sum(3 * len(b.targets) for b in blocks)
        poses = sum(len(np.unique(b.pose_row)) for b in blocks)
        return check_pose_set(model, theta0, blocks, structural, residuals, poses, 3 * max(len(targets), 1),
                              self.holdout, sessions)

    def _calibration(self, model: ErrorModel, result: SolveResult, sessions, first: Session) -> Calibration:
        state = model.state(result.theta)
        std = result.standard_deviations
        chain = model.chain.copy()
        for i, joint_id in enumerate(chain.joint_ids):
            chain.model.jointPlacements[joint_id] = fold_placement(model.chain.model.jointPlacements[joint_id],
                                                                   state.deltas[i], state.zero_offsets[i],
                                                                   model._motion_subspace[i])
        return Calibration(
            chain=chain, joint_names=list(chain.joint_names), tracker_T_base=dict(state.tracker_T_base),
            targets=state.targets, deltas=state.deltas, delta_std=std[model.delta_slice].reshape(-1, 6),
            zero_offsets=state.zero_offsets, zero_std=std[model.zero_slice],
            target_std={t: std[sl] for t, sl in model.target_slices.items()},
            summary={"model": self.model, "sessions": [str(s.path) for s in sessions], "data_hash": data_hash(sessions),
                     "base_link": first.base_link, "tip_link": chain.model.frames[chain.tip_frame].name,
                     "identifiability": result.identifiability.summary(),
                     "variance_factor": result.variance_factor, "solve_seconds": result.seconds,
                     "evaluations": result.evaluations,
                     "outliers": [{"point": o.label, "residual_sigma": round(o.residual_sigma, 2)} for o in result.outliers],
                     "sensor_std": {s: std[sl].tolist() for s, sl in model.sensor_slices.items()}},
            source_urdf=first.urdf_path, solve=result, error_model=model)

    def _statistics(self, calibration, model, result, sessions, sensors, fit_rows, held_rows, theta0, fit_blocks) -> None:
        """Residual statistics for the fit, the hold-out and the nominal model (for the report)."""
        outlier_labels = {o.label for o in result.outliers}
        scale = _fit_scale(result, model)
        held_outliers = []
        history = {"fit_before": [], "fit_after": [], "held_before": [], "held_after": [], "fit_pose_labels": [],
                   "fit_pose_errors": []}
        for session, sensor, fit, held in zip(sessions, sensors, fit_rows, held_rows):
            for kind, rows in (("fit", fit), ("held", held)):
                if not len(rows):
                    continue
                block = self._blocks(session, sensor, rows)
                keep = np.array([l not in outlier_labels for l in block.labels], bool)
                block = block.subset(keep)
                before = np.linalg.norm(block.predict(model, theta0) - block.xyz, axis=1)
                after = np.linalg.norm(block.predict(model, result.theta) - block.xyz, axis=1)
                history[f"{kind}_before"].append(before)
                history[f"{kind}_after"].append(after)
                if kind == "fit":
                    history["fit_pose_labels"] += [label.rsplit("/", 1)[0] for label in block.labels]
                    history["fit_pose_errors"].append(after)
                else:  # named like the fit's outliers, by the fit's own scale; the statistics keep them
                    held_outliers += _beyond(block, model, result.theta, scale, after, self.outlier_threshold)
        history = {k: (np.concatenate(v) if v and isinstance(v[0], np.ndarray) else v) for k, v in history.items()}
        history["fit_rows"], history["held_rows"] = fit_rows, held_rows  # per session (deflection's selection)
        calibration.history = history
        stats = {"fit": ErrorStats.of(history["fit_after"]).as_dict(),
                 "fit_nominal": ErrorStats.of(history["fit_before"]).as_dict()}
        if len(history.get("held_after", [])):
            stats["holdout"] = ErrorStats.of(history["held_after"]).as_dict()
            stats["holdout_nominal"] = ErrorStats.of(history["held_before"]).as_dict()
        else:
            stats["holdout"] = None
        stats["holdout_fraction"] = self.holdout
        stats["poses"] = {"fit": int(sum(len(r) for r in fit_rows)), "holdout": int(sum(len(r) for r in held_rows))}
        calibration.summary["residuals"] = stats
        calibration.summary["holdout_outliers"] = held_outliers


def _fit_scale(result: SolveResult, model) -> float:
    """The robust per-row standard deviation of the whitened fit residuals (outliers left out)."""
    from calib.solver import robust_sigma, unit_norms

    residuals, _, units = stack(result.blocks, model, result.theta, jacobian=False)
    return robust_sigma(*unit_norms(residuals, units, sum(len(b.unit_labels) for b in result.blocks)))


def _beyond(block, model, theta: np.ndarray, scale: float, errors_m: np.ndarray, threshold: float) -> list[dict]:
    """Units of ``block`` whose whitened residual exceeds ``threshold`` times ``scale``, as summary rows."""
    from calib.solver import unit_norms

    residuals, _ = block.evaluate(model, theta, False)
    squared, _ = unit_norms(residuals, block.unit_index, len(block.unit_labels))
    score = np.sqrt(squared) / scale
    return [{"point": block.unit_labels[i], "residual_sigma": round(float(score[i]), 2),
             "error_mm": round(float(errors_m[i]) * 1000, 4)} for i in np.flatnonzero(score > threshold)]
