"""Deflection models and their choice: none, joint compliance, a learned residual, or both.

    calibration = DeflectionCalibrator("auto", holdout=0.2, seed=0).fit(sessions)
    calibration.deflection["mode"]            # what the held-out poses chose
    calibration.predict(q, "smr1", payload_kg=2.5)

``none``: the rigid kinematic fit. ``compliance``: the fit with one compliance per joint
(calib/compliance.py). ``learned``: the rigid fit plus a residual ensemble (calib/residual_model.py)
trained on what it leaves. ``both``: compliance plus the residual ensemble. ``auto`` fits all four
on the same calibration poses, measures each on the same held-out poses and keeps the simplest
whose held-out RMS is within ``AUTO_TOLERANCE`` of the best (a more complex model must earn its
place). The comparison table goes into calibration.yaml and the report.

robot.urdf stays the rigid geometry: deflection depends on the payload and the configuration, so it
is applied by ``Calibration.predict``, ``selfcal predict`` and ``selfcal correct``, not by a URDF.

Files written next to calibration.yaml: ``uncertainty.npz`` (parameter names and their covariance,
for propagating to predicted points; numpy, no pickle) and ``residual/`` for a learned model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from calib.calibrator import Calibration, ErrorStats, KinematicCalibrator
from calib.compliance import CompliantCalibrator, CompliantErrorModel, gravity_torques
from calib.observations import skew
from calib.residual_model import ResidualConfig, ResidualEnsemble, ResidualModel, features
from capture.session import Session, load_session
from rigs.errors import InputError

MODES = ("none", "compliance", "learned", "both")
SELECTION_HOLDOUT = 0.2  # auto with --holdout 0 chooses on this fraction, then refits on all poses
AUTO_TOLERANCE = 0.02  # relative held-out RMS within which the simpler model wins
UNCERTAINTY_FILE = "uncertainty.npz"
RESIDUAL_FOLDER = "residual"
URDF_NOTE = ("robot.urdf holds the rigid geometry only; the deflection (joint compliance, learned residual) "
             "depends on payload and configuration and is applied by `selfcal predict` / `selfcal correct` "
             "and Calibration.predict.")


def _pose_points(calibration: Calibration, session: Session, sensor: str, rows: np.ndarray, skip: set[str]):
    """Measured and predicted points (M, 3) tracker frame, and their pose rows (M,), for pose rows ``rows``."""
    tracker = session.tracker
    keep = np.isin(tracker.pose_index, rows)
    labels = [f"{session.pose_ids[p]}/{t}" if sensor == "s0" else f"{sensor}:{session.pose_ids[p]}/{t}"
              for p, t in zip(tracker.pose_index, tracker.targets)]
    keep &= np.array([label not in skip for label in labels], bool)
    index = np.flatnonzero(keep)
    predicted = np.empty((len(index), 3))
    pose_rows = tracker.pose_index[index]
    names = [tracker.targets[i] for i in index]
    for name in set(names):
        mine = np.array([n == name for n in names])
        predicted[mine] = calibration.predict(session.q[pose_rows[mine]], name, sensor, payload_kg=session.payload_kg[pose_rows[mine]])
    return tracker.xyz[index], predicted, pose_rows


def training_residuals(calibration: Calibration, sessions: list[Session]) -> tuple[np.ndarray, np.ndarray]:
    """Per calibration pose: features (N, 2 dof) and the mean base-frame residual (N, 3) m of its
    reflectors (measured minus predicted), outliers left out."""
    skip = {o["point"] for o in calibration.summary.get("outliers", [])}
    all_features, all_residuals = [], []
    for i, session in enumerate(sessions):
        sensor = f"s{i}"
        rows = calibration.history["fit_rows"][i]
        measured, predicted, pose_rows = _pose_points(calibration, session, sensor, rows, skip)
        base_R_tracker = calibration.tracker_T_base[sensor][:3, :3].T
        residual = (measured - predicted) @ base_R_tracker.T
        poses, where = np.unique(pose_rows, return_inverse=True)
        counts = np.bincount(where)
        mean = np.stack([np.bincount(where, residual[:, k]) / counts for k in range(3)], axis=1)
        q = session.q[poses]
        torques = gravity_torques(calibration.chain, q, session.payload_kg[poses], calibration.payload_com)
        all_features.append(features(calibration.chain, q, torques))
        all_residuals.append(mean)
    return np.concatenate(all_features), np.concatenate(all_residuals)


def heldout_errors(calibration: Calibration, sessions: list[Session]) -> np.ndarray:
    """3D errors (M,) m of the held-out poses' reflectors (outliers of the fit left out)."""
    skip = {o["point"] for o in calibration.summary.get("outliers", [])}
    errors = []
    for i, session in enumerate(sessions):
        rows = calibration.history["held_rows"][i]
        if len(rows):
            measured, predicted, _ = _pose_points(calibration, session, f"s{i}", rows, skip)
            errors.append(np.linalg.norm(measured - predicted, axis=1))
    return np.concatenate(errors) if errors else np.zeros(0)


class DeflectionCalibrator:
    """Kinematic calibration with a deflection model.

    ``deflection``: one of none, compliance, learned, both, auto. ``residual``: the ensemble's
    :class:`ResidualConfig`. The other options are :class:`KinematicCalibrator`'s (``holdout``
    must be above 0 for ``auto``, which chooses on the held-out poses).
    """

    def __init__(self, deflection: str = "auto", residual: ResidualConfig | None = None,
                 progress: Callable[[str], None] | None = None, **kinematic_options):
        self.deflection = deflection
        self.residual = residual
        self.progress = progress or (lambda message: None)
        self.kinematic_options = kinematic_options

    def fit(self, sessions: list[Session | Path]) -> Calibration:
        if self.deflection not in MODES + ("auto",):
            raise InputError(f"--deflection must be one of {', '.join(MODES + ('auto',))}, got {self.deflection!r}.")
        if not sessions:
            raise InputError("give at least one session to calibrate from.")
        sessions = [s if isinstance(s, Session) else load_session(Path(s)) for s in sessions]
        holdout = self.kinematic_options.get("holdout", 0.2)
        if self.deflection == "auto" and not holdout > 0:
            # Choose on an internal 20 % hold-out, then fit the chosen model on every pose, as asked.
            options = dict(self.kinematic_options, holdout=SELECTION_HOLDOUT)
            choice = DeflectionCalibrator("auto", self.residual, self.progress, **options).fit(sessions).deflection
            calibration = DeflectionCalibrator(choice["mode"], self.residual, self.progress, **self.kinematic_options).fit(sessions)
            calibration.deflection = dict(choice, selection_holdout=SELECTION_HOLDOUT)
            return calibration
        modes = MODES if self.deflection == "auto" else (self.deflection,)
        payload_com = sessions[0].payload_com
        fits: dict[str, Calibration] = {}
        if {"none", "learned"} & set(modes):
            self.progress("rigid fit")
            fits["none"] = KinematicCalibrator(progress=self.progress, **self.kinematic_options).fit(sessions)
        if {"compliance", "both"} & set(modes):
            self.progress("compliance fit")
            fits["compliance"] = CompliantCalibrator(progress=self.progress, **self.kinematic_options).fit(sessions)
        for calibration in fits.values():
            calibration.payload_com = payload_com
        for mode, base in (("learned", "none"), ("both", "compliance")):
            if mode in modes:
                self.progress(f"residual ensemble on {base}")
                fits[mode] = self._with_residual(fits[base], sessions)

        table = {}
        for mode in modes:
            errors = heldout_errors(fits[mode], sessions)
            table[mode] = ErrorStats.of(errors).as_dict() if len(errors) else None
        if self.deflection == "auto":
            best = min(table[m]["rms_mm"] for m in modes)
            chosen = next(m for m in modes if table[m]["rms_mm"] <= (1.0 + AUTO_TOLERANCE) * best)
        else:
            chosen = self.deflection
        self.candidates_ = fits  # every model fitted for the choice (benchmarks compare them)
        calibration = fits[chosen]
        if chosen in ("none", "compliance"):
            calibration = _copy(calibration)
        calibration.deflection = {"mode": chosen, "requested": self.deflection, "heldout_comparison": table,
                                  "auto_tolerance": AUTO_TOLERANCE if self.deflection == "auto" else None}
        return calibration

    def _with_residual(self, base: Calibration, sessions: list[Session]) -> Calibration:
        raw, residuals = training_residuals(base, sessions)
        model = ResidualEnsemble(self.residual or ResidualConfig(seed=self.kinematic_options.get("seed", 0))).fit(raw, residuals)
        learned = _copy(base)
        learned.residual_model = model
        return learned


def _copy(calibration: Calibration) -> Calibration:
    from dataclasses import replace

    return replace(calibration, summary=dict(calibration.summary))


# -- files -------------------------------------------------------------------------------------------
def deflection_document(calibration: Calibration) -> dict:
    """The ``deflection`` entry of calibration.yaml."""
    document = {"mode": (calibration.deflection or {}).get("mode", "none"), "note": URDF_NOTE}
    if calibration.compliance is not None:
        document["compliance"] = {
            "model": "joint angle reached = reading - compliance * gravity torque (URDF inertias + payload at payload_com)",
            "unit": "rad/(N m)",
            "joints": {name: {"compliance": float(c), "compliance_std": float(s),
                              "stiffness_nm_per_rad": (float(1.0 / c) if c > 0 else None)}
                       for name, c, s in zip(calibration.joint_names, calibration.compliance, calibration.compliance_std)}}
    if calibration.payload_com is not None:
        document["payload_com"] = [float(v) for v in calibration.payload_com]
    if calibration.residual_model is not None:
        document["learned_residual"] = {"folder": RESIDUAL_FOLDER, "bound_m": calibration.residual_model.bound_m,
                                        "members": calibration.residual_model.config.members}
    info = calibration.deflection or {}
    if info.get("heldout_comparison"):
        document["requested"] = info.get("requested")
        document["heldout_comparison"] = info["heldout_comparison"]
        document["auto_tolerance"] = info.get("auto_tolerance")
        if info.get("selection_holdout"):
            document["selection_holdout"] = info["selection_holdout"]
    return document


def write_deflection_files(calibration: Calibration, folder: Path) -> None:
    """uncertainty.npz (when the fit's covariance is at hand) and residual/ (with a learned model)."""
    folder = Path(folder)
    if calibration.solve is not None and calibration.error_model is not None:
        names = np.array([p.name for p in calibration.error_model.names])
        np.savez(folder / UNCERTAINTY_FILE, names=names, covariance=calibration.solve.covariance)
    if calibration.residual_model is not None:
        calibration.residual_model.save(folder / RESIDUAL_FOLDER)


def read_deflection(calibration: Calibration, folder: Path, document: dict) -> None:
    """Fill ``calibration``'s deflection attributes from calibration.yaml's ``deflection`` entry and files."""
    path = folder / UNCERTAINTY_FILE
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as data:
                calibration.summary["parameter_names"] = [str(n) for n in data["names"]]
                calibration.summary["parameter_covariance"] = np.array(data["covariance"], float)
        except (ValueError, KeyError, OSError) as error:
            raise InputError(f"{path}: not a readable parameter covariance ({error}).") from None
        count = len(calibration.summary["parameter_names"])
        if calibration.summary["parameter_covariance"].shape != (count, count):
            raise InputError(f"{path}: the covariance is not {count} x {count}, one row per parameter name.")
    entry = document.get("deflection")
    if entry is None:
        return
    where = f"{folder / 'calibration.yaml'}: deflection"
    if not isinstance(entry, dict):
        raise InputError(f"{where} must be a mapping.")
    if "payload_com" in entry:
        try:
            calibration.payload_com = np.array(entry["payload_com"], float).reshape(3)
        except (TypeError, ValueError):
            raise InputError(f"{where}.payload_com must be three numbers.") from None
    if "compliance" in entry:
        joints = (entry["compliance"] or {}).get("joints") or {}
        missing = [n for n in calibration.joint_names if n not in joints]
        if missing:
            raise InputError(f"{where}.compliance.joints.{missing[0]} is missing.")
        try:
            calibration.compliance = np.array([float(joints[n]["compliance"]) for n in calibration.joint_names])
            calibration.compliance_std = np.array([float(joints[n].get("compliance_std", 0.0)) for n in calibration.joint_names])
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{where}.compliance.joints: each joint needs a number 'compliance'.") from None
    if "learned_residual" in entry:
        calibration.residual_model = ResidualModel.load(folder / RESIDUAL_FOLDER)
    calibration.deflection = {"mode": entry.get("mode", "none"), "requested": entry.get("requested"),
                              "heldout_comparison": entry.get("heldout_comparison"),
                              "auto_tolerance": entry.get("auto_tolerance")}


# -- prediction with uncertainty ---------------------------------------------------------------------
def predict_points(calibration: Calibration, q: np.ndarray, payload_kg: np.ndarray | float | None,
                   tip_points: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Base-frame positions (N, 3) m and their covariance (N, 3, 3) m^2 of points fixed to the tip.

    ``tip_points``: name -> (3,) m in the tip frame (the tip origin, reflectors). The covariance
    propagates the fit's parameter covariance (joint placements, zero offsets, compliances,
    reflector offsets; the tracker pose does not enter a base-frame point) and adds the learned
    residual's ensemble spread. Without the full covariance (an older calibration folder) the
    parameters' standard deviations are used as if independent.
    """
    q = np.atleast_2d(np.asarray(q, float))
    chain = calibration.chain
    dof = chain.dof
    payload = np.broadcast_to(np.asarray(0.0 if payload_kg is None else payload_kg, float), (len(q),))
    torques = gravity_torques(chain, q, payload, calibration.payload_com)
    compliance = calibration.compliance if calibration.compliance is not None else np.zeros(dof)
    model = CompliantErrorModel(chain, [], list(calibration.targets), {}, "full")
    state = model.state(np.zeros(model.size))
    poses, delta_columns, joint_columns = model.tip_poses_and_columns(state, q - compliance * torques)
    shift, spread = np.zeros((len(q), 3)), np.zeros((len(q), 3))
    if calibration.residual_model is not None:
        shift, spread, _ = calibration.residual_model.predict(features(chain, q, torques))
    names, covariance = _parameter_covariance(calibration, model)
    index = {name: i for i, name in enumerate(names)}
    out = {}
    for label, point in tip_points.items():
        point = np.asarray(point, float)
        rotation = poses[:, :3, :3]
        position = np.einsum("nij,j->ni", rotation, point) + poses[:, :3, 3] + shift
        point_of_twist = np.concatenate([rotation, -rotation @ skew(point)], axis=2)  # (N, 3, 6)
        jac = np.zeros((len(q), 3, len(names)))
        model_jac = np.zeros((len(q), 3, model.size))
        model_jac[:, :, model.delta_slice] = point_of_twist @ delta_columns
        zero = point_of_twist @ joint_columns
        model_jac[:, :, model.zero_slice] = zero
        model_jac[:, :, model.compliance_slice] = -zero * torques[:, None, :]
        if label in model.target_slices:
            model_jac[:, :, model.target_slices[label]] = rotation
        for column, info in enumerate(model.names):
            if info.name in index:
                jac[:, :, index[info.name]] = model_jac[:, :, column]
        cov = np.einsum("nip,pq,njq->nij", jac, covariance, jac) + spread[:, :, None] ** 2 * np.eye(3)[None]
        out[label] = (position, cov)
    return out


def _parameter_covariance(calibration: Calibration, model) -> tuple[list[str], np.ndarray]:
    if calibration.solve is not None and calibration.error_model is not None:
        return [p.name for p in calibration.error_model.names], calibration.solve.covariance
    if "parameter_covariance" in calibration.summary:
        return calibration.summary["parameter_names"], calibration.summary["parameter_covariance"]
    names, variances = [], []
    for i, joint in enumerate(calibration.joint_names):
        for c, axis in enumerate(("x", "y", "z", "rx", "ry", "rz")):
            names.append(f"{joint}.delta.{axis}")
            variances.append(calibration.delta_std[i, c] ** 2)
        names.append(f"{joint}.zero")
        variances.append(calibration.zero_std[i] ** 2)
        if calibration.compliance_std is not None:
            names.append(f"{joint}.compliance")
            variances.append(calibration.compliance_std[i] ** 2)
    for target, std in calibration.target_std.items():
        for c, axis in enumerate("xyz"):
            names.append(f"target.{target}.{axis}")
            variances.append(float(std[c]) ** 2)
    return names, np.diag(variances)


def deflection_html(calibration: Calibration) -> str:
    """The report's deflection section: chosen model, held-out comparison, compliances ('' when rigid)."""
    import html

    info = calibration.deflection
    if info is None and calibration.compliance is None:
        return ""
    info = info or {}
    parts = [f"<h2>Deflection: {html.escape(str(info.get('mode', 'none')))}</h2><p>{html.escape(URDF_NOTE)}</p>"]
    table = info.get("heldout_comparison") or {}
    if table:
        rows = "".join(f"<tr><td>{html.escape(m)}{' (chosen)' if m == info.get('mode') else ''}</td>"
                       + "".join(f"<td>{s[k]:.4f}</td>" for k in ("mean_mm", "rms_mm", "max_mm", "p95_mm")) + "</tr>"
                       for m, s in table.items() if s)
        parts.append("<p>Held-out reflector errors per model (requested: "
                     f"{html.escape(str(info.get('requested')))}):</p><table><tr><th>model</th><th>mean mm</th>"
                     f"<th>rms mm</th><th>max mm</th><th>p95 mm</th></tr>{rows}</table>")
    if calibration.compliance is not None:
        rows = "".join(f"<tr><td>{html.escape(n)}</td><td>{c * 1e6:.4f} ± {s * 1e6:.4f}</td>"
                       f"<td>{(1.0 / c / 1e3) if c > 0 else float('nan'):.1f}</td></tr>"
                       for n, c, s in zip(calibration.joint_names, calibration.compliance, calibration.compliance_std))
        parts.append("<table><tr><th>joint</th><th>compliance µrad/(N m)</th><th>stiffness kN m/rad</th></tr>"
                     f"{rows}</table>")
    if calibration.residual_model is not None:
        parts.append(f"<p>Learned residual: {calibration.residual_model.config.members} networks, corrections clipped "
                     f"to {calibration.residual_model.bound_m * 1e3:.4f} mm and shrunk where they disagree or the "
                     f"configuration is far from the calibration poses.</p>")
    return "".join(parts)
