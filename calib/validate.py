"""Checking a calibration against another session's tracker points."""

from __future__ import annotations

import numpy as np

from calib.calibrator import Calibration, ErrorStats
from calib.initialise import initial_frame_and_targets
from capture.session import Session, read_tracker_csv
from rigs.errors import InputError
from rigs.kinematics import ChainModel


def point_errors(calibration: Calibration, session: Session, sensor: str | None = None) -> np.ndarray:
    """3D error (M,) m of every tracker point of ``session`` predicted by the calibration."""
    tracker = session.tracker
    if tracker is None or not len(tracker.targets):
        raise InputError(f"{session.path}: has no tracker points (tracker.csv) to validate against.")
    if session.joint_names != calibration.joint_names:
        raise InputError(f"{session.path}: its joints {session.joint_names} are not the calibration's "
                         f"{calibration.joint_names}.")
    unknown = sorted(set(tracker.targets) - set(calibration.targets))
    if unknown:
        raise InputError(f"{session.path}: tracker target {unknown[0]!r} is not a reflector of the calibration.")
    predicted = np.empty_like(tracker.xyz)
    for name in set(tracker.targets):
        rows = np.array([t == name for t in tracker.targets])
        # The session's payloads drive a deflection model's sag (issue 4); rigid calibrations ignore them.
        predicted[rows] = calibration.predict(session.q[tracker.pose_index[rows]], name, sensor,
                                              payload_kg=session.payload_kg[tracker.pose_index[rows]])
    return np.linalg.norm(predicted - tracker.xyz, axis=1)


def nominal_errors(session: Session, tip_link: str | None = None, chain: ChainModel | None = None,
                   targets: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """3D error (M,) m of the uncalibrated URDF, with the tracker pose and reflectors fitted to the points.

    ``chain`` and ``targets`` replace the session's URDF and nominal reflectors (e.g. a previous
    calibration's, to see how it fits new data once the tracker is registered again).
    """
    tracker = session.tracker
    if chain is None:
        chain = ChainModel.from_urdf(session.urdf_path, session.base_link, tip_link or session.tip_link)
    poses = chain.base_T_tip_batch(session.q)[tracker.pose_index]
    frame, offsets = initial_frame_and_targets(poses, tracker.targets, tracker.xyz,
                                               session.nominal_targets if targets is None else targets, rounds=10)
    points = np.einsum("mij,mj->mi", poses[:, :3, :3], np.array([offsets[t] for t in tracker.targets])) + poses[:, :3, 3]
    predicted = points @ frame[:3, :3].T + frame[:3, 3]
    return np.linalg.norm(predicted - tracker.xyz, axis=1)


def noise_floor_rms_mm(session: Session) -> float | None:
    """RMS (mm) of measured minus noise-free points from a simulated session's truth/; None otherwise.

    Evaluation only: this reads truth/, which no fit may.
    """
    clean_path = session.path / "truth" / "tracker_clean.csv"
    if not clean_path.is_file() or session.tracker is None:
        return None
    clean = read_tracker_csv(clean_path, {p: i for i, p in enumerate(session.pose_ids)})
    lookup = {(p, t): xyz for p, t, xyz in zip(clean.pose_index, clean.targets, clean.xyz)}
    tracker = session.tracker
    pairs = [(lookup[(p, t)], xyz) for p, t, xyz in zip(tracker.pose_index, tracker.targets, tracker.xyz) if (p, t) in lookup]
    if not pairs:
        return None
    difference = np.array([m - c for c, m in pairs])
    return float(np.sqrt(np.mean(np.sum(difference ** 2, axis=1))) * 1000.0)


def named_outliers(session: Session, errors: np.ndarray, threshold: float) -> list[dict]:
    """The tracker rows whose error (M,) m exceeds ``threshold`` robust standard deviations, worst first.

    The scale is the solver's: the median squared 3D error over the chi-square median of 3 degrees
    of freedom, so a point scores about 1.5 at the typical error and 5 is far in the tail.
    """
    import scipy.stats

    tracker = session.tracker
    scale = max(float(np.sqrt(np.median(errors ** 2) / scipy.stats.chi2.median(3))), 1e-12)
    score = errors / scale
    rows = tracker.rows or [f"row {i + 2}" for i in range(len(errors))]
    flagged = sorted(np.flatnonzero(score > threshold), key=lambda i: -score[i])
    return [{"row": f"tracker.csv {rows[i]}", "pose": session.pose_ids[tracker.pose_index[i]], "target": tracker.targets[i],
             "error_mm": float(errors[i] * 1000), "residual_sigma": round(float(score[i]), 1)} for i in flagged]


def validate(calibration: Calibration, session: Session, sensor: str | None = None, outlier_sigma: float = 5.0) -> dict:
    """n, mean_mm, rms_mm, max_mm, p95_mm, nominal_rms_mm, floor_rms_mm for ``session``, and the
    tracker rows beyond ``outlier_sigma`` robust standard deviations (``outliers``, named).

    A session of 6-DoF probe poses (issue 9) adds angle figures (``angle_rms_deg`` ...); with
    reflector points as well, the point figures come first and the poses' under ``tracker_poses``."""
    poses = None
    if session.tracker_poses is not None:
        from calib.validate_pose import validate_poses

        poses = validate_poses(calibration, session, sensor)
        if session.tracker is None or not len(session.tracker.targets):
            return poses
    errors = point_errors(calibration, session, sensor)
    result = ErrorStats.of(errors).as_dict()
    result["outlier_sigma"] = outlier_sigma
    result["outliers"] = named_outliers(session, errors, outlier_sigma)
    result["nominal_rms_mm"] = ErrorStats.of(nominal_errors(session, calibration.summary.get("tip_link"))).rms_mm
    result["floor_rms_mm"] = noise_floor_rms_mm(session)
    if poses is not None:
        result["tracker_poses"] = poses
    return result
