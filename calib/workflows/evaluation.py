"""Comparing a calibration with a simulated session's truth. Evaluation only: this module reads
``truth/``, which no fit may (the tests check that a fit gives the same result without it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from calib.model.error_model import ErrorModel
from calib.sensors.registration import register_points
from calib.sensors.tracker_poses import pose_errors
from capture.session import Session, read_tracker_csv, read_tracker_poses_csv
from capture.truth_files import reached_joints, truth_parameters
from rigs.kinematics import ArmModel
from rigs.transforms import invert, log6


def true_parameter_vector(model: ErrorModel, session: Path, sensor: str = "s0") -> np.ndarray:
    """The simulated truth of ``session`` in ``model``'s parameter layout (P,)."""
    truth = truth_parameters(session)
    joints, targets = truth.get("joints", "table"), truth.get("targets", "table")
    theta = np.zeros(model.size)
    for i, name in enumerate(model.chain.joint_names):
        joint = joints.get(name, "table")
        theta[6 * i:6 * i + 6] = joint.get("placement_delta", "vector", length=6)
        theta[model.zero_slice.start + i] = joint.get("zero_offset", "number")
    reference = model.reference("sensor")[sensor]
    theta[model.sensor_slices[sensor]] = log6(invert(reference) @ truth.get("tracker_T_base", "matrix", shape=(4, 4)))
    for name, block in model.target_slices.items():
        theta[block] = targets.get(name, "vector", length=3)
    return theta


def combination_z_scores(calibration, session: Path) -> np.ndarray:
    """|true - fitted| / reported standard deviation (r,) for each identifiable combination.

    Needs a calibration fitted in this process (``calibration.solve``), on one session of the rig.
    """
    result, model = calibration.solve, calibration.error_model
    difference = result.identifiability.combinations @ (true_parameter_vector(model, session) - result.theta)
    return np.abs(difference) / np.sqrt(np.diag(result.combination_covariance))


def noise_floor_rms_mm(session: Session) -> float | None:
    """RMS (mm) of measured minus noise-free tracker points of a simulated session; None otherwise."""
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


def pose_noise_floor(session: Session) -> tuple[float, float] | None:
    """(position RMS mm, angle RMS deg) of measured minus noise-free probe poses of a simulated session."""
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


def true_tip_poses(session: Session) -> np.ndarray | None:
    """(N, 4, 4) true tip poses of a simulated session (truth/ robot.urdf at the reached joints), or None."""
    urdf = session.path / "truth" / "robot.urdf"
    lookup = reached_joints(session.path, session.joint_names, required=False)
    if not urdf.is_file() or lookup is None:
        return None
    if any(p not in lookup for p in session.pose_ids):
        return None
    chain = ArmModel.from_urdf(urdf, session.base_link, session.tip_link)
    return chain.base_T_tip_batch(np.array([lookup[p] for p in session.pose_ids]))


def true_tip_positions(session: Session) -> np.ndarray | None:
    """(N, 3) m true tip positions of a simulated session."""
    poses = true_tip_poses(session)
    return None if poses is None else poses[:, :3, 3]


def true_board_centres(session: Session) -> np.ndarray | None:
    """(N, 3) m true board centres of a simulated session (truth/ tip poses and tip_T_board)."""
    poses = true_tip_poses(session)
    parameters = truth_parameters(session.path, required=False)
    if poses is None or parameters is None:
        return None
    tip_T_board = parameters.get("tip_T_board", "matrix", None, shape=(4, 4), nullable=True)
    if tip_T_board is None:
        return None
    return (poses @ tip_T_board)[:, :3, 3]


def tip_errors(predicted: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(aligned, unaligned) tip errors (N,) m; aligned after the best rigid registration."""
    aligned = register_points(predicted, truth)
    moved = predicted @ aligned[:3, :3].T + aligned[:3, 3]
    return np.linalg.norm(moved - truth, axis=1), np.linalg.norm(predicted - truth, axis=1)
