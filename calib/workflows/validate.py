"""Checking any calibration against another session, whatever the session measured.

Each sensor the session holds is predicted with the calibration (its arm, its deflection, its
frames: the tracker pose, reflector offsets, probe mount, camera poses and board) and reported in
its own units, with the nominal URDF alongside (its frames registered to the session, so the
comparison is with the best the nominal model can do) and, for a simulated session, the noise
floor from ``truth/`` (evaluation only). The first sensor's figures lead; the others follow under
``tracker_poses`` and ``camera``.
"""

from __future__ import annotations

import numpy as np

from calib.sensors.board_corners import CornerObservations, detect_session, has_board_images
from calib.sensors.figures import ErrorStats, named_outliers, pose_figures, rms
from calib.sensors.registration import register_frame_and_targets
from calib.sensors.tracker_points import tracker_blocks
from calib.sensors.tracker_poses import pose_blocks, pose_errors, register_poses
from calib.workflows.evaluation import (noise_floor_rms_mm, pose_noise_floor, tip_errors, true_board_centres,
                                        true_tip_positions)
from calib.workflows.register import validate_poses_registered, validate_registered
from capture.session import Session
from rigs.errors import InputError, setting
from rigs.kinematics import ArmModel


def _check_joints(calibration, session: Session) -> None:
    if session.base_T_flange is not None and not session.joint_names:
        raise InputError(f"{session.path / 'session.json'}: robot.flange_poses gives the controller's reported "
                         f"flange poses and no joint angles, and this calibration of the arm's kinematics predicts "
                         f"from joint angles; validate a hand-eye calibration (`selfcal calibrate` of such a "
                         f"session) with it.")
    if session.joint_names != calibration.joint_names:
        raise InputError(f"{session.path}: its joints {session.joint_names} are not the calibration's "
                         f"{calibration.joint_names}.")


def point_errors(calibration, session: Session, sensor: str | None = None) -> np.ndarray:
    """3D error (M,) m of every tracker point of ``session`` predicted by the calibration."""
    tracker = session.tracker
    if tracker is None or not len(tracker.targets):
        raise InputError(f"{session.path}: has no tracker points (tracker.csv) to validate against.")
    _check_joints(calibration, session)
    unknown = sorted(set(tracker.targets) - set(calibration.targets))
    if unknown:
        raise InputError(f"{session.path}: tracker target {unknown[0]!r} is not a reflector of the calibration; name "
                         f"the poses that locate it with {setting('registration_poses')} (they are left out of the "
                         f"figures).")
    model, theta = calibration.prediction_model()
    block = tracker_blocks(session, calibration.poses_for(session, calibration._sensor(sensor)))
    return block.errors(model, theta)


def nominal_errors(session: Session, tip_link: str | None = None, chain: ArmModel | None = None,
                   targets: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """3D error (M,) m of the uncalibrated URDF, with the tracker pose and reflectors fitted to the points.

    ``chain`` and ``targets`` replace the session's URDF and nominal reflectors (e.g. a previous
    calibration's, to see how it fits new data once the tracker is registered again).
    """
    tracker = session.tracker
    if chain is None:
        chain = ArmModel.from_urdf(session.urdf_path, session.base_link, tip_link or session.tip_link)
    poses = chain.base_T_tip_batch(session.q)[tracker.pose_index]
    frame, offsets = register_frame_and_targets(poses, tracker.targets, tracker.xyz,
                                                session.nominal_targets if targets is None else targets)
    points = np.einsum("mij,mj->mi", poses[:, :3, :3], np.array([offsets[t] for t in tracker.targets])) + poses[:, :3, 3]
    predicted = points @ frame[:3, :3].T + frame[:3, 3]
    return np.linalg.norm(predicted - tracker.xyz, axis=1)


def probe_errors(calibration, session: Session, sensor: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Position (M,) m and angle (M,) rad error of every probe pose of ``session`` predicted by the calibration."""
    poses = session.tracker_poses
    if poses is None or not len(poses.pose_index):
        raise InputError(f"{session.path}: has no 6-DoF tracker poses (tracker_poses.csv) to validate against.")
    _check_joints(calibration, session)
    if not calibration.tip_T_probe:
        raise InputError(f"{session.path}: has probe poses, but the calibration has no 6-DoF probe "
                         f"(it was fitted without tracker poses).")
    model, theta = calibration.prediction_model()
    block = pose_blocks(session, calibration.poses_for(session, calibration._sensor(sensor)))
    return block.errors(model, theta)


def nominal_probe_errors(session: Session, tip_link: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Errors of the uncalibrated URDF, with the tracker and the probe mount registered to the poses."""
    poses = session.tracker_poses
    chain = ArmModel.from_urdf(session.urdf_path, session.base_link, tip_link or session.tip_link)
    tips = chain.base_T_tip_batch(session.q)[poses.pose_index]
    tracker_T_base, tip_T_probe = register_poses(tips, poses.tracker_T_probe, rounds=20)
    return pose_errors(tracker_T_base @ tips @ tip_T_probe, poses.tracker_T_probe)


def validate_points(calibration, session: Session, sensor: str | None = None, outlier_sigma: float = 5.0) -> dict:
    """n, mean_mm, rms_mm, max_mm, p95_mm, nominal_rms_mm, floor_rms_mm of the session's reflectors, and
    the tracker rows beyond ``outlier_sigma`` robust standard deviations (``outliers``, named)."""
    errors = point_errors(calibration, session, sensor)
    result = ErrorStats.of(errors).as_dict()
    result["outlier_sigma"] = outlier_sigma
    result["outliers"] = named_outliers(session, errors, outlier_sigma)
    result["nominal_rms_mm"] = ErrorStats.of(nominal_errors(session, calibration.summary.get("tip_link"))).rms_mm
    result["floor_rms_mm"] = noise_floor_rms_mm(session)
    return result


def validate_poses(calibration, session: Session, sensor: str | None = None) -> dict:
    """n, mean/rms/max/p95 mm, angle mean/rms/max/p95 deg, nominal and floor figures of the probe poses."""
    result = pose_figures(*probe_errors(calibration, session, sensor))
    nominal = pose_figures(*nominal_probe_errors(session, calibration.summary.get("tip_link")))
    result["nominal_rms_mm"], result["nominal_angle_rms_deg"] = nominal["rms_mm"], nominal["angle_rms_deg"]
    floor = pose_noise_floor(session)
    result["floor_rms_mm"], result["floor_angle_rms_deg"] = floor if floor is not None else (None, None)
    return result


def corner_errors(calibration, session: Session) -> tuple[np.ndarray, dict[str, float], int]:
    """Per-corner reprojection error (M,) px of ``session``'s images, RMS per camera, images used."""
    if not calibration.base_T_camera or calibration.board is None:
        raise InputError(f"{session.path}: has board images, but the calibration has no cameras and board.")
    _check_joints(calibration, session)
    unknown = sorted(set(session.cameras) - set(calibration.base_T_camera))
    if unknown:
        raise InputError(f"{session.path}: camera {unknown[0]!r} is not in the calibration "
                         f"(has {', '.join(sorted(calibration.base_T_camera))}).")
    detections = detect_session(session, calibration.board)
    model, theta = calibration.prediction_model()
    keys = {name: name for name in sorted(set(detections.camera.tolist()))}
    block = CornerObservations.from_detections(detections, calibration.poses_for(session), 1.0, keys)
    errors = block.errors(model, theta)
    per_camera = {str(name): float(np.sqrt(np.mean(errors[detections.camera == name] ** 2)))
                  for name in sorted(set(detections.camera))}
    return errors, per_camera, len(detections.images)


def validate_corners(calibration, session: Session) -> dict:
    """Reprojection figures (px) of the session's images; tip and board-centre RMS against the truth
    (mm) when simulated.

    Cameras see the arm, not its base frame: the arm's first joint placement and the camera poses
    trade off exactly, so the fitted base frame sits where the nominal URDF puts it. The tip error
    is therefore quoted after one rigid registration onto the true tip positions (``tip_rms_mm``; 6
    parameters over all poses) and as fitted (``tip_rms_mm_base_frame``); where the tip frame sits
    along the last joint's axis behind the board is not observable either, so the board centre's
    error (``board_centre_rms_mm``) is reported too.
    """
    errors, per_camera, images = corner_errors(calibration, session)
    result = {"images": images, "corners": int(len(errors)), "reprojection_rms_px": rms(errors),
              "reprojection_p95_px": float(np.percentile(errors, 95)), "reprojection_rms_px_by_camera": per_camera,
              "tip_rms_mm": None, "tip_max_mm": None, "tip_rms_mm_base_frame": None, "nominal_tip_rms_mm": None,
              "board_centre_rms_mm": None}
    truth = true_tip_positions(session)
    if truth is not None:
        tips = calibration.base_T_tip(session.q, session.payload_kg)
        tips[:, :3, 3] += calibration.tip_shift(session.q, session.payload_kg)
        aligned, unaligned = tip_errors(tips[:, :3, 3], truth)
        nominal_chain = ArmModel.from_urdf(session.urdf_path, session.base_link, calibration.summary["tip_link"])
        nominal, _ = tip_errors(nominal_chain.base_T_tip_batch(session.q)[:, :3, 3], truth)
        result.update({"tip_rms_mm": rms(aligned) * 1e3, "tip_max_mm": float(aligned.max() * 1e3),
                       "tip_rms_mm_base_frame": rms(unaligned) * 1e3, "nominal_tip_rms_mm": rms(nominal) * 1e3})
        centres = true_board_centres(session)
        if centres is not None:
            board, _ = tip_errors((tips @ calibration.tip_T_board)[:, :3, 3], centres)
            result["board_centre_rms_mm"] = rms(board) * 1e3
    return result


REGISTERED_FRAMES = ("tracker", "tool")  # what ``register`` may fit anew on the validated session


def validate(calibration, session: Session, sensor: str | None = None, outlier_sigma: float = 5.0,
             register: tuple[str, ...] = (), registration_poses: list[str] | None = None,
             locate_poses: list[str] | None = None) -> dict:
    """The figures of every sensor ``session`` holds, predicted by ``calibration``.

    Reflector points lead (n, mean_mm, rms_mm, max_mm, p95_mm, nominal_rms_mm, floor_rms_mm); probe
    poses add position and angle figures (under ``tracker_poses`` when points lead); board images
    add reprojection figures (under ``camera`` when another sensor leads). ``sensor``: the
    calibration's tracker frame to predict with (default its first). ``register``: the frames
    (``REGISTERED_FRAMES``) fitted anew on the session first: "tracker" (moved since the
    calibration) and "tool" (remounted: its reflectors or probe located anew, with the tracker when
    both are named), on ``registration_poses`` when named (which then also locate reflectors the
    calibration lacks unless ``locate_poses`` names others, and are left out of the figures),
    else on every pose; see :mod:`calib.workflows.register`. ``envelope_warning``: a sentence when
    the session's poses leave the calibration's validity envelope, else None."""
    unknown = [frame for frame in register if frame not in REGISTERED_FRAMES]
    if unknown:
        raise InputError(f"{setting('register')} takes tracker, tool or tracker,tool, got {unknown[0]!r}.")
    register_tool = "tool" in register
    register = "tracker" in register
    parts = []
    if session.tracker is not None and len(session.tracker.targets):
        if register or register_tool or registration_poses is not None or locate_poses is not None:
            parts.append(("tracker_points", validate_registered(calibration, session, register, registration_poses,
                                                                sensor, outlier_sigma, locate_poses, register_tool)))
        else:
            parts.append(("tracker_points", validate_points(calibration, session, sensor, outlier_sigma)))
    if session.tracker_poses is not None and len(session.tracker_poses.pose_index):
        if register_tool and not register:
            raise InputError(f"{session.path}: a probe's mount is located anew together with the tracker's placement; "
                             f"register tracker,tool.")
        if register:
            _check_joints(calibration, session)
            parts.append(("tracker_poses", validate_poses_registered(calibration, session, registration_poses, sensor,
                                                                     register_tool)))
        else:
            parts.append(("tracker_poses", validate_poses(calibration, session, sensor)))
    if register and not parts:
        raise InputError(f"{session.path}: {setting('register')} fits a laser tracker's frames, and the session has no "
                         f"tracker points (tracker.csv) or probe poses (tracker_poses.csv).")
    if has_board_images(session) and calibration.base_T_camera:
        parts.append(("camera", validate_corners(calibration, session)))
    if not parts:
        raise InputError(f"{session.path}: has nothing this calibration can predict (tracker points, tracker poses, "
                         f"or board images for a calibration with cameras).")
    result = dict(parts[0][1])
    for name, figures in parts[1:]:
        result[name] = figures
    result["envelope_warning"] = calibration.envelope_warning(session.q, str(session.path), session.payload_kg)
    return result
