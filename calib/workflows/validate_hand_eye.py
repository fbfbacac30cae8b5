"""``selfcal validate`` of a hand-eye calibration: another session's photos, predicted.

A hand-eye calibration holds no model of the arm, only what sits around its flange: each camera's
frame (``base_T_camera`` eye-to-hand, ``flange_T_camera`` eye-in-hand), the board's
(``flange_T_board`` or ``base_T_board``) and the intrinsics. A session of new photos with the
flange pose of each (as the controller reports it) is predicted through those poses, corner by
corner, and reported in pixels as the calibration's own figures are:

- the prediction's RMS, max and p95 per corner (2D), per camera and per photo;
- beside it, the best OpenCV closed-form hand-eye solution fitted to the session's own photos (the
  calibration's "nominal", registered to the session as validate registers the nominal URDF to a
  tracker session: the best that solution can do there);
- the session's floor: the corners' noise (its own per-photo PnP) and the flange poses' error
  carried into its photos, the flange error being the calibration's (the same controller) or
  stated; the verdict (:func:`calib.workflows.verdicts.hand_eye_validation_verdict`) judges
  against twice that floor, as calibrate's does.

The session must be of the same cell: the same set-up, board, cameras and image sizes, and flange
poses from the same source (reported, or the nominal URDF at joint readings); anything else is
refused in one sentence naming the file and the field.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from calib.sensors.board_corners import session_board
from calib.sensors.hand_eye_closed_form import moving_poses
from calib.workflows.hand_eye import (MOUNTS, HandEyeCalibration, State, best_start, flange_jacobians, flange_source,
                                      floor_px, load_photos, residuals, rms_px)
from capture.session import Session
from rigs.errors import InputError, setting


def check_session(calibration: HandEyeCalibration, session: Session, folder: Path) -> None:
    """Refuse, in one sentence naming the file and field, a session this calibration cannot predict."""
    document = Path(folder) / "calibration.yaml"
    manifest = session.path / "session.json"
    fitted = (calibration.summary.get("flange_poses") or {"source": "reported"})
    source = flange_source(session)
    if source != fitted["source"]:
        if source == "urdf":
            raise InputError(f"{session.path / 'joints.csv'}: the session records joint angles "
                             f"({', '.join(session.joint_names) or 'none'}) and no flange poses, and {document} is a "
                             f"hand-eye calibration fitted on the controller's reported flange poses; validate it with "
                             f"photos and reported flange poses (`selfcal import images FOLDER --flange-poses FILE`).")
        raise InputError(f"{manifest}: robot.flange_poses gives the controller's reported flange poses, and {document} "
                         f"is a hand-eye calibration fitted with the nominal URDF at joint readings; validate it with a "
                         f"session of joint angles of the same arm.")
    if source == "urdf" and list(session.joint_names) != list(fitted.get("joint_names", [])):
        raise InputError(f"{session.path / 'joints.csv'}: its joints {session.joint_names} are not those of the "
                         f"sessions {document} was fitted on ({fitted.get('joint_names')}).")
    mount = ((session.manifest.get("sensors") or {}).get("board") or {}).get("mount", "flange")
    if MOUNTS.get(mount) != calibration.setup:
        raise InputError(f"{manifest}: sensors.board.mount {mount!r} makes it an "
                         f"{MOUNTS.get(mount, 'unknown')} session, and {document} is an {calibration.setup} "
                         f"calibration (setup); validate it with photos of the same set-up.")
    board = session_board(session)
    if board is None or board.describe() != calibration.board.describe():
        raise InputError(f"{manifest}: sensors.board is "
                         f"{'missing' if board is None else board.describe()}, and {document} was fitted on the "
                         f"board {calibration.board.describe()}; validate it with photos of the same board.")
    if not session.cameras:
        raise InputError(f"{manifest}: sensors.cameras is empty; the session has no photos to predict.")
    sizes = calibration.summary.get("image_sizes") or {}
    for name, camera in sorted(session.cameras.items()):
        where = f"{manifest}: sensors.cameras.{name}"
        if name not in calibration.X:
            raise InputError(f"{where}: camera {name!r} is not in {document} (it has "
                             f"{', '.join(sorted(calibration.X))}); a hand-eye calibration predicts only the "
                             f"cameras it placed.")
        size = sizes.get(name)
        if size is not None and [camera.info.width, camera.info.height] != list(size):
            raise InputError(f"{where}: the camera takes {camera.info.width}x{camera.info.height} images, and "
                             f"{document} placed a camera {name!r} of {size[0]}x{size[1]}; validate it with photos "
                             f"of the same camera.")


def validate_hand_eye(calibration: HandEyeCalibration, session: Session, folder: Path,
                      flange_sigma: tuple[float, float] | None = None) -> dict:
    """The photos of ``session`` predicted by the hand-eye calibration in ``folder`` (module docstring).

    ``flange_sigma``: (m, rad) per axis of the session's flange error; None takes the calibration's.
    Returns the figures (px): ``reprojection_rms_px``, ``_max_px``, ``_p95_px``, ``_rms_px_by_camera``,
    ``photos`` (per photo: camera, pose, corners, rms_px, max_px), ``nominal_rms_px`` (the closed-form
    solution fitted to these photos, or None with ``nominal_note``), ``floor_px``, ``pixel_sigma``,
    ``flange_sigma`` (m, rad, mm, deg, source, estimated), ``left_out``.
    """
    check_session(calibration, session, folder)
    fitted = calibration.summary.get("flange_poses") or {}
    data = load_photos([session], calibration.setup, tip_link=fitted.get("tip_link"),
                       intrinsics={name: (calibration.K[name], calibration.distortion[name]) for name in calibration.X})
    state = State(calibration.X, calibration.Y, calibration.K, calibration.distortion)
    G = moving_poses(data.setup, data.base_T_flange)
    errors = residuals(state, data.photos, G)
    norms = np.concatenate([np.linalg.norm(e, axis=1) for e in errors])
    flange = _flange_sigma(calibration, flange_sigma)
    jacobians = flange_jacobians(state, data.photos, data.base_T_flange, data.setup)
    floor = floor_px(jacobians, data.pixel_sigma, flange["m"], flange["rad"])
    try:
        method, start, _ = best_start(data, data.photos, G)
        nominal, note = rms_px(residuals(start, data.photos, G)), f"best OpenCV closed-form solution ({method}) fitted to these photos"
    except InputError as error:
        nominal, note = None, f"no closed-form solution on these photos: {error}"
    by_camera = {}
    for camera in sorted({p.camera for p in data.photos}):
        by_camera[camera] = rms_px([e for p, e in zip(data.photos, errors) if p.camera == camera])
    return {
        "model": "hand-eye", "setup": calibration.setup, "calibration": str(folder), "session": str(session.path),
        "images": len(data.photos), "corners": int(len(norms)),
        "reprojection_rms_px": rms_px(errors), "reprojection_max_px": float(norms.max()),
        "reprojection_p95_px": float(np.percentile(norms, 95)), "reprojection_rms_px_by_camera": by_camera,
        "nominal_rms_px": nominal, "nominal_what": note,
        "floor_px": floor, "pixel_sigma": data.pixel_sigma, "flange_sigma": flange,
        "photos": [{"camera": p.camera, "pose": p.pose, "corners": p.count, "rms_px": rms_px([e]),
                    "max_px": float(np.linalg.norm(e, axis=1).max())} for p, e in zip(data.photos, errors)],
        "left_out": data.left_out, "envelope_warning": None,
    }


def _flange_sigma(calibration: HandEyeCalibration, stated: tuple[float, float] | None) -> dict:
    """The flange error the floor carries: ``stated`` (m, rad), else the calibration's own."""
    if stated is not None:
        if not (stated[0] >= 0 and stated[1] >= 0):
            raise InputError(f"{setting('flange_sigma')} must be non-negative, got {stated}.")
        m, rad, source, estimated = stated[0], stated[1], "stated (--flange-sigma)", False
    else:
        own = calibration.summary.get("flange_sigma")
        if not own:
            raise InputError("the calibration states no flange error (summary.json flange_sigma is missing); "
                             f"state it with {setting('flange_sigma')} MM,DEG.")
        m, rad = float(own["m"]), float(own["rad"])
        estimated = str(own.get("source", "")).startswith("estimated")
        source = f"the calibration's, {own.get('source', 'as it states')}"
    return {"m": m, "rad": rad, "mm": 1e3 * m, "deg": float(np.degrees(rad)), "source": source, "estimated": estimated}
