"""``selfcal calibrate`` and ``selfcal validate``: one calibrator and one validation for every kind of
session (tracker points, 6-DoF probe poses, board images, any mix)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from selfcal.options import (CalibrateModel, Deflection, HandEyeSetup, Torques, check_positive, require_pass_option,
                             ros_package_option)
from selfcal.ui import exit_for, print_json, progress_bar, say_verdict, user_errors


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
    app.command("validate")(validate)


def calibrate(
    sessions: List[Path] = typer.Argument(..., help="Session folders of one robot, fitted together."),
    out: Path = typer.Option(..., "--out", help="Calibration folder to create (robot.urdf, calibration.yaml, report.html)."),
    holdout: float = typer.Option(0.0, "--holdout", help="Keep this fraction of the poses out of the fit and report "
                                  "them (reduces the data the calibration uses). Default 0: every pose is fitted and "
                                  "the held-out figures come from cross-validation by pose."),
    folds: Optional[int] = typer.Option(None, "--folds", help="Cross-validation folds with --holdout 0 (default: "
                                        "leave-one-pose-out below 40 poses, else 5)."),
    model: CalibrateModel = typer.Option("auto", "--model", help="auto: the simplest of hand-eye, offsets and full "
                                         "within 2 % of the lowest cross-validated error (board photos; full "
                                         "otherwise); hand-eye: hold the arm, fit camera and board frames; full: "
                                         "placement errors and zero offsets; offsets: zero offsets only."),
    setup: Optional[HandEyeSetup] = typer.Option(None, "--setup", help="Hand-eye: eye-to-hand (board on the flange) or "
                                                 "eye-in-hand (camera on the flange); default: as the session says."),
    flange_sigma: Optional[str] = typer.Option(None, "--flange-sigma", help="Hand-eye: the flange poses' own error, "
                                               "MM,DEG per axis (e.g. 0.2,0.02); default: estimated from the residuals."),
    seed: int = typer.Option(0, "--seed", help="Seed of the hold-out draw and the folds."),
    outlier_sigma: float = typer.Option(5.0, "--outlier-sigma", help="Flag measurements beyond this many robust standard deviations."),
    tip_link: Optional[str] = typer.Option(None, "--tip-link", help="Tip link to use instead of the sessions' own."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
    json_output: bool = typer.Option(False, "--json", help="Print a machine-readable summary."),
    deflection: Deflection = typer.Option("auto", "--deflection", help="Deflection model "
                                   "(auto picks by held-out error; robot.urdf stays rigid, predict/correct apply it)."),
    pixel_sigma: Optional[float] = typer.Option(None, "--pixel-sigma", help="Board images: corner noise, px per "
                                                "axis (default: estimated from per-image PnP)."),
    require_full: bool = typer.Option(False, "--require-full", help="Refuse poses that do not determine the whole "
                                      "model (joints that did not move, a degenerate pose set) instead of fitting "
                                      "what they determine."),
    torques: Torques = typer.Option("auto", "--torques", help="The torques compliance multiplies: "
                                "the sessions' measured effort_<joint> columns (auto: when every session has them) "
                                "or the URDF's inertials."),
    flip_torque_sign: bool = typer.Option(False, "--flip-torque-sign", help="The drives report the opposite sign of "
                                          "the torque that holds the arm up: multiply the measured torques by -1."),
    fit_intrinsics: bool = typer.Option(False, "--fit-intrinsics", help="Board images: also fit every camera's fx, fy, "
                                        "cx, cy (default: camera_info as recorded); written to calibration.yaml and "
                                        "CAL/cameras/<name>/camera_info.yaml, poorly determined values named."),
    tolerance_mm: Optional[float] = typer.Option(None, "--tolerance-mm", help="Largest acceptable cross-validated "
                                                 "RMS error, mm (default: twice the error the tracker's stated "
                                                 "uncertainty alone gives at the measured points)."),
    per_session: Optional[str] = typer.Option(None, "--per-session", help="Frames each session gets its own, "
                                              "comma-separated: tool (its reflectors or probe: a marker remounted "
                                              "between sessions), tracker (its placement; always per session); the "
                                              "arm is fitted once."),
    require_pass: bool = require_pass_option(),
    ros_package: Optional[str] = ros_package_option(),
) -> None:
    """Fit the arm's kinematic errors and every sensor's frames from tracker points, probe poses or board images."""
    with user_errors():
        from calib.calibrator import Calibrator
        from capture.session import load_session
        from rigs import urdf as urdf_io
        from rigs.errors import InputError
        from rigs.files import check_new_output, output_folder

        check_new_output(out, force)
        check_positive(tolerance_mm=tolerance_mm)
        if ros_package is not None:
            urdf_io.check_package_name(ros_package)
        if not outlier_sigma > 0:
            raise InputError(f"--outlier-sigma must be positive, got {outlier_sigma}.")
        loaded = [load_session(path) for path in sessions]
        from calib.workflows.model_choice import requested_model

        choice = requested_model(loaded, model)
        fits = {}
        if choice is None or choice.model == "hand-eye":
            from calib.workflows.hand_eye import HandEyeCalibrator

            hand_eye = HandEyeCalibrator(setup=setup, fit_intrinsics=fit_intrinsics, flange_sigma=_flange_sigma(flange_sigma),
                                         folds=folds, seed=seed, pixel_sigma=pixel_sigma, tip_link=tip_link)
        if choice is not None and choice.model == "hand-eye":
            if holdout:
                raise InputError("--holdout: a hand-eye calibration's held-out figures come from cross-validation "
                                 "over poses; leave --holdout out.")
            with progress_bar("calibrating", None, unit="stages"):
                result = hand_eye.fit(loaded)
            _deliver_hand_eye(result, choice, out, force, json_output, require_pass)
            return
        if choice is None:
            # auto on board photos: every candidate on the same folds, the simplest good one kept.
            from calib.workflows.model_choice import choose

            with progress_bar("calibrating", None, unit="stages"):
                result = hand_eye.fit(loaded)
            for kind in ("offsets", "full"):
                fits[kind] = Calibrator(model=kind, deflection=deflection, holdout=0.0, folds=folds, seed=seed,
                                        outlier_threshold=outlier_sigma, tip_link=tip_link, pixel_sigma=pixel_sigma,
                                        torques=torques, flip_torque_sign=flip_torque_sign,
                                        fit_intrinsics=fit_intrinsics).fit(loaded)
            heldout = {"hand-eye": (result.summary.get("holdout") or {}).get("rms_px")}
            heldout.update({kind: (fit.summary["residuals"].get("holdout") or {}).get("rms_px") for kind, fit in fits.items()})
            choice = choose(heldout)
            if choice.model == "hand-eye":
                _deliver_hand_eye(result, choice, out, force, json_output, require_pass)
                return
        model = choice.model
        ready = fits.get(model) if choice.requested == "auto" and not holdout and not require_full else None
        with progress_bar("calibrating", None, unit="stages") as update:
            steps = []
            calibration = ready or Calibrator(model=model, deflection=deflection, holdout=holdout, folds=folds, seed=seed,
                                     outlier_threshold=outlier_sigma, tip_link=tip_link, pixel_sigma=pixel_sigma,
                                     require_full=require_full, torques=torques, flip_torque_sign=flip_torque_sign,
                                     fit_intrinsics=fit_intrinsics,
                                     per_session=tuple(p.strip() for p in per_session.split(",") if p.strip())
                                     if per_session else ()).fit(
                loaded, progress=lambda message: (steps.append(message), update(len(steps))))
        from calib.workflows.verdicts import calibration_verdict

        verdict = calibration_verdict(calibration.summary, loaded, tolerance_mm, calibration.pixel_sigma)
        calibration.summary["verdict"] = verdict.as_dict()  # report.html opens with it
        calibration.summary["model_choice"] = choice.as_dict()
        with output_folder(out, force) as folder:
            calibration.save(folder)
            if ros_package is not None:
                urdf_io.use_package_uris(folder / "robot.urdf", ros_package)
        summary = {"verdict": verdict.as_dict()} | calibration_summary(calibration, out)
        summary["model_choice"] = choice.as_dict()
        if json_output:
            print_json(summary)
        else:
            say_verdict(verdict)
            typer.echo(f"model {choice.model}: {choice.reason}")
            typer.echo(summary_line(summary))
    exit_for(verdict, require_pass)


def _flange_sigma(text: str | None) -> tuple[float, float] | None:
    """``--flange-sigma MM,DEG`` -> (m, rad)."""
    if text is None:
        return None
    import math

    from rigs.errors import InputError

    try:
        mm, deg = (float(v) for v in text.split(","))
    except ValueError:
        raise InputError(f"--flange-sigma {text!r}: expected MM,DEG (the flange poses' error per axis, e.g. 0.2,0.02).") from None
    if not (mm >= 0 and deg >= 0 and math.isfinite(mm) and math.isfinite(deg)):
        raise InputError(f"--flange-sigma {text!r}: both values must be finite and not negative.")
    return mm * 1e-3, math.radians(deg)


def _deliver_hand_eye(result, choice, out: Path, force: bool, json_output: bool, require_pass: bool) -> None:
    """Judge, save and print a hand-eye calibration."""
    from calib.workflows.verdicts import hand_eye_verdict
    from rigs.files import output_folder

    verdict = hand_eye_verdict(result.summary)
    result.summary["verdict"] = verdict.as_dict()
    result.summary["model_choice"] = choice.as_dict()
    with output_folder(out, force) as folder:
        result.save(folder)
    summary = {"verdict": verdict.as_dict(), "calibration": str(out), **result.summary,
               "calibration_document": result.document()}
    if json_output:
        print_json(summary)
    else:
        say_verdict(verdict)
        typer.echo(f"model hand-eye: {choice.reason}")
        typer.echo(hand_eye_lines(result))
    exit_for(verdict, require_pass)


def hand_eye_lines(result) -> str:
    """The text report of a hand-eye calibration: frames, figures, photos, intrinsics."""
    import numpy as np

    s = result.summary
    fit, held, nominal = s["fit"], s.get("holdout") or {}, s.get("holdout_nominal") or {}
    flange = s["flange_sigma"]
    lines = [f"{s['setup']}: fit RMS {fit['rms_px']:.3f} px over {fit['corners']} corners of {fit['photos']} photos"
             + (f"; cross-validated RMS {held['rms_px']:.3f} px (best closed-form start, {s['closed_form']['best']}, "
                f"cross-validated the same way: {nominal['rms_px']:.3f} px)" if held.get("rms_px") is not None else ""),
             f"  held-out figures: {s['validation']['description']}",
             f"  floor {s['floor_px']:.3f} px: corner noise {s['pixel_sigma']:.3f} px, flange error {flange['mm']:.3g} mm / "
             f"{flange['deg']:.3g} deg per axis ({flange['source']})",
             *([f"  least squares: {s['weighting']['reason']}"] if s.get("weighting") else []),
             "  closed-form methods (RMS px on every photo): " + ", ".join(
                 f"{m} {v:.3f}" for m, v in s["closed_form"]["methods_rms_px"].items())]
    camera_what = "base_T_camera" if result.setup == "eye-to-hand" else "flange_T_camera"
    for name in result.X:
        pose = result.camera_pose(name)
        lines.append(f"  camera {name} {camera_what}: xyz {np.round(pose[:3, 3], 5).tolist()} m")
        entry = (s.get("intrinsics") or {}).get(name)
        if entry:
            values = entry["parameters"]
            lines.append("    intrinsics: " + ", ".join(
                f"{axis}={values[axis]['value']:.5g}" + ("" if values[axis]["determined"] else " (NOT determined)")
                for axis in values))
    board_what = "flange_T_board" if result.setup == "eye-to-hand" else "base_T_board"
    lines.append(f"  board {board_what}: xyz {np.round(result.Y[:3, 3], 5).tolist()} m")
    lines.append("  photos (corners, fit / held-out RMS px): " + "; ".join(
        f"{p['pose']} {p['corners']}, {p['rms_px']:.2f}/" + ("-" if p["holdout_rms_px"] is None else f"{p['holdout_rms_px']:.2f}")
        for p in s["photos"]))
    for item in s.get("left_out", []):
        lines.append(f"  left out: {item['photo']}: {item['reason']}")
    return "\n".join(lines)


def calibration_summary(calibration, out: Path) -> dict:
    """What ``selfcal calibrate --json`` prints."""
    summary = calibration.summary
    ident = summary["identifiability"]
    out_summary = {"calibration": str(out), "model": summary["model"], "sensors": summary.get("sensors", []),
                   "parameters": ident["parameters"], "identifiable": ident["rank"],
                   "condition_number": ident["condition_number"], "residuals": summary["residuals"],
                   "outliers": summary["outliers"], "holdout_outliers": summary.get("holdout_outliers", []),
                   "solve_seconds": summary["solve_seconds"],
                   "deflection": (calibration.deflection or {}).get("mode", "none"),
                   "deflection_heldout_comparison": (calibration.deflection or {}).get("heldout_comparison"),
                   "not_excited": ident.get("not_excited", []), "not_determined": ident.get("not_determined", []),
                   "validity": calibration.validity.document() if calibration.validity is not None else None}
    if calibration.base_T_camera:
        out_summary.update(camera=calibration.camera_summary,
                           base_T_camera={name: pose.tolist() for name, pose in calibration.base_T_camera.items()},
                           tip_T_board=calibration.tip_T_board.tolist(),
                           intrinsics={name: entry for name, entry in calibration.intrinsics.items()
                                       if entry.get("fitted")})
    return out_summary


def summary_line(summary: dict) -> str:
    residuals = summary["residuals"]
    unit = residuals.get("unit", "mm")
    key = f"rms_{unit}"
    held = residuals.get("holdout")
    validation = residuals.get("validation") or {}
    text = (f"{summary['calibration']}: {summary['identifiable']} of {summary['parameters']} parameters identifiable "
            f"(condition {summary['condition_number']:.3g}); fit RMS {residuals['fit'][key]:.4f} {unit} "
            f"(nominal {residuals['fit_nominal'][key]:.4f} {unit})")
    if held:
        how = "cross-validated" if validation.get("method") == "cross-validation" else "held-out"
        text += f", {how} RMS {held[key]:.4f} {unit} (nominal {residuals['holdout_nominal'][key]:.4f} {unit})"
    text += f", {len(summary['outliers'])} outliers, deflection {summary['deflection']}"
    for sentence in summary.get("not_excited", []):
        text += f"\n  partial excitation: {sentence}"
    if summary.get("not_determined"):
        text += ("\n  not determined by these poses, so set by the rule (the arm keeps its URDF values, the tool's "
                 "offsets take the shortest the data allow; their standard deviations include the URDF's 1 mm / "
                 "1 mrad per joint):")
        for sentence in summary["not_determined"]:
            text += f"\n    {sentence}"
    if validation.get("description"):
        text += f"\n  held-out figures: {validation['description']}"
    for name, entry in (summary.get("intrinsics") or {}).items():
        values = entry["parameters"]
        text += (f"\n  camera {name}: fitted " + ", ".join(
            f"{axis}={values[axis]['value']:.2f}" + ("" if values[axis]["std_px"] is None else
                                                     f" +- {values[axis]['std_px']:.2g}")
            for axis in ("fx", "fy", "cx", "cy"))
                 + " px (recorded " + ", ".join(f"{values[axis]['recorded']:.2f}" for axis in ("fx", "fy", "cx", "cy"))
                 + "); " + (f"POORLY DETERMINED: {', '.join(entry['poorly_determined'])}" if entry["poorly_determined"]
                            else "all well determined"))
        for note in entry["notes"]:
            if "not separable" in note:  # the identifiability analysis's own sentence
                text += f"\n    {note}"
    if any(entry["poorly_determined"] for entry in (summary.get("intrinsics") or {}).values()):
        sigma = (summary.get("camera") or {}).get("pixel_sigma")
        text += ("\n  poorly determined: a standard deviation that moves image points by more than the "
                 + ("" if sigma is None else f"{sigma:.3g} px ") + "corner noise (calibration.yaml says by how "
                 "much); fit intrinsics from close-up board images with `selfcal calibrate-camera` for better values")
    for outlier in summary["outliers"]:
        text += f"\n  outlier in the fit: {outlier['point']} ({outlier['residual_sigma']} sigma), left out"
    for outlier in summary["holdout_outliers"]:
        unit = "mm" if "error_mm" in outlier else "px"
        text += (f"\n  outlier in a held-out pose: {outlier['point']} ({outlier['residual_sigma']} sigma, "
                 f"{outlier[f'error_{unit}']:.3f} {unit}), kept in the held-out figures")
    return text


def validate(
    calibration_dir: Path = typer.Argument(..., help="Calibration folder written by `selfcal calibrate`."),
    session: Path = typer.Argument(..., help="Session whose measurements are predicted."),
    outlier_sigma: float = typer.Option(5.0, "--outlier-sigma", help="Name points beyond this many robust standard deviations."),
    json_output: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
    register: Optional[str] = typer.Option(None, "--register", help="Frames fitted anew on the session before "
                                           "predicting, comma-separated: tracker (moved since the calibration), tool "
                                           "(the marker or probe remounted: located anew, with the tracker when both "
                                           "are named). The nominal URDF is treated the same way, and the "
                                           "unregistered figures are reported too."),
    registration_poses: Optional[str] = typer.Option(None, "--registration-poses", help="Comma-separated pose ids "
                                                     "that register the tracker and locate reflectors the "
                                                     "calibration lacks; they are left out of the figures "
                                                     "(default with --register: every pose)."),
    locate_poses: Optional[str] = typer.Option(None, "--locate-poses", help="Comma-separated pose ids (a home "
                                               "measurement: one is enough) that locate reflectors the calibration "
                                               "lacks, instead of the registration poses; left out of the figures."),
    tolerance_mm: Optional[float] = typer.Option(None, "--tolerance-mm", help="Largest acceptable RMS error on the "
                                                 "session, mm (default: twice the error the tracker's stated "
                                                 "uncertainty alone gives at its points)."),
    flange_sigma: Optional[str] = typer.Option(None, "--flange-sigma", help="Hand-eye calibration: the session's "
                                               "flange poses' own error, MM,DEG per axis (default: the calibration's)."),
    require_pass: bool = require_pass_option(),
) -> None:
    """Predict every measurement of a session with a calibration and report the errors."""
    with user_errors():
        import numpy as np

        from calib.calibration import Calibration
        from calib.workflows.hand_eye import HandEyeCalibration
        from calib.workflows.validate import validate as run_validation
        from capture.session import load_session
        from rigs.errors import InputError

        check_positive(tolerance_mm=tolerance_mm)
        if not outlier_sigma > 0:
            raise InputError(f"--outlier-sigma must be positive, got {outlier_sigma}.")
        if HandEyeCalibration.is_one(calibration_dir):
            for option, value in (("--register", register), ("--registration-poses", registration_poses),
                                  ("--locate-poses", locate_poses)):
                if value is not None:
                    raise InputError(f"{option}: {calibration_dir} is a hand-eye calibration, which has no laser "
                                     f"tracker frames to register; leave {option} out.")
            _validate_hand_eye(calibration_dir, session, _flange_sigma(flange_sigma), tolerance_mm, json_output,
                               require_pass)
            return
        if flange_sigma is not None:
            raise InputError(f"--flange-sigma: {calibration_dir} is a calibration of the arm's kinematics, predicted "
                             f"from joint angles; the flange error only enters a hand-eye calibration's validation.")
        from calib.workflows.verdicts import validation_verdict

        def pose_list(text: Optional[str], option: str):
            if text is None:
                return None
            names = [name.strip() for name in text.split(",") if name.strip()]
            if not names:
                raise InputError(f"{option} names no pose; give comma-separated pose ids.")
            return names

        def register_frames(text: Optional[str]) -> tuple[str, ...]:
            frames = tuple(frame.strip() for frame in (text or "").split(",") if frame.strip())
            if text is not None and not frames:
                raise InputError("--register names no frame; give tracker, tool or tracker,tool.")
            return frames

        calibration, loaded = Calibration.load(calibration_dir), load_session(session)
        result = run_validation(calibration, loaded, outlier_sigma=outlier_sigma,
                                register=register_frames(register),
                                registration_poses=pose_list(registration_poses, "--registration-poses"),
                                locate_poses=pose_list(locate_poses, "--locate-poses"))
        verdict = validation_verdict(calibration, loaded, result, tolerance_mm)
        if result.get("envelope_warning") and not json_output:
            typer.echo(f"warning: {result['envelope_warning']}", err=True)
        if json_output:
            print_json({"verdict": verdict.as_dict()} | result)
            exit_for(verdict, require_pass)
            return
        say_verdict(verdict)
        if "rms_mm" in result:
            floor = result["floor_rms_mm"]
            typer.echo(f"n={result['n']} mean={result['mean_mm']:.4f} mm rms={result['rms_mm']:.4f} mm "
                       f"max={result['max_mm']:.4f} mm p95={result['p95_mm']:.4f} mm "
                       f"nominal_rms={result['nominal_rms_mm']:.4f} mm floor_rms="
                       + ("n/a" if floor is None else f"{floor:.4f} mm"))
            registration = result.get("registration")
            if registration is not None:
                used = registration["poses"]
                typer.echo(f"registered on {'every pose' if used == 'all' else f'{len(used)} poses'} "
                           f"(tracker moved {registration['tracker_moved_mm']:.3f} mm, turned "
                           f"{registration['tracker_turned_deg']:.4f} deg from the calibration's placement), "
                           f"figures on {registration['evaluated_poses']} poses; unregistered: "
                           f"rms={result['unregistered']['rms_mm']:.4f} mm max={result['unregistered']['max_mm']:.4f} mm"
                           + "".join(f"; reflector {name} located at {np.round(xyz, 6).tolist()} m (tip frame)"
                                     for name, xyz in result["located"].items()))
            for outlier in result.get("outliers", []):
                typer.echo(f"outlier: {outlier['row']} (pose {outlier['pose']}, target {outlier['target']}): "
                           f"{outlier['error_mm']:.3f} mm, {outlier['residual_sigma']} sigma")
        poses = result.get("tracker_poses", result if "angle_rms_deg" in result else None)
        if poses is not None:
            angle_floor = poses["floor_angle_rms_deg"]
            typer.echo(f"probe poses: n={poses['n']} rms={poses['rms_mm']:.4f} mm angle_rms={poses['angle_rms_deg']:.5f} deg "
                       f"angle_max={poses['angle_max_deg']:.5f} deg nominal_angle_rms={poses['nominal_angle_rms_deg']:.5f} deg "
                       "floor_angle_rms=" + ("n/a" if angle_floor is None else f"{angle_floor:.5f} deg"))
        camera = result.get("camera", result if "reprojection_rms_px" in result else None)
        if camera is not None:
            tip = camera["tip_rms_mm"]
            typer.echo(f"images={camera['images']} corners={camera['corners']} "
                       f"reprojection_rms={camera['reprojection_rms_px']:.3f} px p95={camera['reprojection_p95_px']:.3f} px "
                       + ("tip_rms=n/a (no truth)" if tip is None else
                          f"tip_rms={tip:.4f} mm (after rigid registration; {camera['tip_rms_mm_base_frame']:.4f} mm in "
                          f"the fitted base frame) nominal_tip_rms={camera['nominal_tip_rms_mm']:.4f} mm"))
    exit_for(verdict, require_pass)


def _validate_hand_eye(calibration_dir: Path, session: Path, flange_sigma, tolerance_mm: Optional[float],
                       json_output: bool, require_pass: bool) -> None:
    """``validate`` of a hand-eye calibration: the session's photos predicted through its flange poses."""
    from calib.workflows.hand_eye import HandEyeCalibration
    from calib.workflows.validate_hand_eye import validate_hand_eye
    from calib.workflows.verdicts import hand_eye_validation_verdict
    from capture.session import load_session

    calibration, loaded = HandEyeCalibration.load(calibration_dir), load_session(session)
    result = validate_hand_eye(calibration, loaded, calibration_dir, flange_sigma)
    verdict = hand_eye_validation_verdict(calibration, loaded, result, tolerance_mm)
    if json_output:
        print_json({"verdict": verdict.as_dict()} | result)
    else:
        say_verdict(verdict)
        typer.echo(hand_eye_validation_lines(result))
    exit_for(verdict, require_pass)


def hand_eye_validation_lines(result: dict) -> str:
    """The text report of a hand-eye validation: figures beside the baseline and the floor, per photo."""
    flange = result["flange_sigma"]
    nominal = result["nominal_rms_px"]
    several = len(result["reprojection_rms_px_by_camera"]) > 1  # then a pose has a photo per camera
    lines = [f"hand-eye ({result['setup']}): {result['images']} photos, {result['corners']} corners predicted through "
             f"the session's flange poses: reprojection RMS {result['reprojection_rms_px']:.3f} px, max "
             f"{result['reprojection_max_px']:.3f} px, p95 {result['reprojection_p95_px']:.3f} px",
             "  baseline: " + (f"{nominal:.3f} px, the {result['nominal_what']}" if nominal is not None
                               else result["nominal_what"]),
             f"  floor {result['floor_px']:.3f} px: corner noise {result['pixel_sigma']:.3f} px, flange error "
             f"{flange['mm']:.3g} mm / {flange['deg']:.3g} deg per axis ({flange['source']})",
             "  photos (corners, RMS / max px): " + "; ".join(
                 f"{p['camera'] + '/' if several else ''}{p['pose']} {p['corners']}, {p['rms_px']:.2f}/{p['max_px']:.2f}"
                 for p in result["photos"])]
    if several:
        lines.insert(1, "  per camera RMS: " + ", ".join(f"{name} {value:.3f} px" for name, value in
                                                          result["reprojection_rms_px_by_camera"].items()))
    lines += [f"  left out: {item['photo']}: {item['reason']}" for item in result["left_out"]]
    return "\n".join(lines)

