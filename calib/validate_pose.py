"""Checking a calibration against another session's 6-DoF probe poses (issue 9).

Position errors in mm and angle errors in degrees, with the nominal model (the session's URDF, the
tracker and probe registered to the poses) and, for a simulated session, the noise floor (measured
minus noise-free poses from ``truth/``, evaluation only) alongside.
"""

from __future__ import annotations

import numpy as np

from calib.observations_pose import pose_errors, register_poses
from capture.session import Session, read_tracker_poses_csv
from rigs.errors import InputError
from rigs.kinematics import ChainModel


def _figures(position_m: np.ndarray, angle_rad: np.ndarray) -> dict:
    from calib.calibrator import ErrorStats

    out = ErrorStats.of(position_m).as_dict()
    degrees = np.degrees(angle_rad)
    out.update(angle_mean_deg=float(degrees.mean()), angle_rms_deg=float(np.sqrt(np.mean(degrees ** 2))),
               angle_max_deg=float(degrees.max()), angle_p95_deg=float(np.percentile(degrees, 95)))
    return out


def probe_errors(calibration, session: Session, sensor: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Position (M,) m and angle (M,) rad error of every probe pose of ``session`` predicted by the calibration."""
    poses = session.tracker_poses
    if poses is None or not len(poses.pose_index):
        raise InputError(f"{session.path}: has no 6-DoF tracker poses (tracker_poses.csv) to validate against.")
    if session.joint_names != calibration.joint_names:
        raise InputError(f"{session.path}: its joints {session.joint_names} are not the calibration's "
                         f"{calibration.joint_names}.")
    if not calibration.tip_T_probe:
        raise InputError(f"{session.path}: has probe poses, but the calibration has no 6-DoF probe "
                         f"(it was fitted from reflector points only).")
    predicted = calibration.predict_probe(session.q[poses.pose_index], sensor=sensor,
                                          payload_kg=session.payload_kg[poses.pose_index])
    return pose_errors(predicted, poses.tracker_T_probe)


def nominal_probe_errors(session: Session, tip_link: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Errors of the uncalibrated URDF, with the tracker and the probe mount registered to the poses."""
    poses = session.tracker_poses
    chain = ChainModel.from_urdf(session.urdf_path, session.base_link, tip_link or session.tip_link)
    tips = chain.base_T_tip_batch(session.q)[poses.pose_index]
    tracker_T_base, tip_T_probe = register_poses(tips, poses.tracker_T_probe, rounds=20)
    return pose_errors(tracker_T_base @ tips @ tip_T_probe, poses.tracker_T_probe)


def pose_noise_floor(session: Session) -> tuple[float, float] | None:
    """(position RMS mm, angle RMS deg) of measured minus noise-free poses of a simulated session.

    Evaluation only: this reads truth/, which no fit may. None for a session without that file.
    """
    clean_path = session.path / "truth" / "tracker_poses_clean.csv"
    if not clean_path.is_file() or session.tracker_poses is None:
        return None
    clean = read_tracker_poses_csv(clean_path, {p: i for i, p in enumerate(session.pose_ids)})
    lookup = dict(zip(clean.pose_index.tolist(), clean.tracker_T_probe))
    measured = session.tracker_poses
    pairs = [(lookup[p], m) for p, m in zip(measured.pose_index.tolist(), measured.tracker_T_probe) if p in lookup]
    if not pairs:
        return None
    position, angle = pose_errors(np.array([c for c, _ in pairs]), np.array([m for _, m in pairs]))
    return float(np.sqrt(np.mean(position ** 2)) * 1000.0), float(np.degrees(np.sqrt(np.mean(angle ** 2))))


def validate_poses(calibration, session: Session, sensor: str | None = None) -> dict:
    """n, mean/rms/max/p95 mm, angle mean/rms/max/p95 deg, nominal and floor figures for ``session``."""
    result = _figures(*probe_errors(calibration, session, sensor))
    nominal = _figures(*nominal_probe_errors(session, calibration.summary.get("tip_link")))
    result["nominal_rms_mm"], result["nominal_angle_rms_deg"] = nominal["rms_mm"], nominal["angle_rms_deg"]
    floor = pose_noise_floor(session)
    result["floor_rms_mm"], result["floor_angle_rms_deg"] = floor if floor is not None else (None, None)
    return result
