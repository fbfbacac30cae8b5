"""``selfcal calibrate`` and ``selfcal validate``: kinematic calibration from tracker sessions."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from selfcal.ui import print_json, progress_bar, user_errors


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
    app.command("validate")(validate)


def calibrate(
    sessions: List[Path] = typer.Argument(..., help="Session folders of one robot, fitted together."),
    out: Path = typer.Option(..., "--out", help="Calibration folder to create (robot.urdf, calibration.yaml, report.html)."),
    holdout: float = typer.Option(0.2, "--holdout", help="Fraction of poses kept out of the fit and reported (0 = use all)."),
    model: str = typer.Option("full", "--model", help="full: placement errors and zero offsets; offsets: zero offsets only."),
    seed: int = typer.Option(0, "--seed", help="Seed of the hold-out draw."),
    outlier_sigma: float = typer.Option(5.0, "--outlier-sigma", help="Flag points beyond this many robust standard deviations."),
    tip_link: Optional[str] = typer.Option(None, "--tip-link", help="Tip link to use instead of the sessions' own."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
    json_output: bool = typer.Option(False, "--json", help="Print a machine-readable summary."),
    deflection: str = typer.Option("auto", "--deflection", help="none|compliance|learned|both|auto: deflection model "
                                   "(auto picks by held-out error; robot.urdf stays rigid, predict/correct apply it)."),
    pixel_sigma: Optional[float] = typer.Option(None, "--pixel-sigma", help="Camera sessions: board corner noise, px per "
                                                "axis (default: estimated from per-image PnP)."),
) -> None:
    """Fit the arm's kinematic errors, tracker pose and reflector offsets from tracker sessions."""
    with user_errors():
        from capture.session import load_session
        from rigs.errors import InputError
        from rigs.files import check_new_output, output_folder

        check_new_output(out, force)
        if not outlier_sigma > 0:
            raise InputError(f"--outlier-sigma must be positive, got {outlier_sigma}.")
        loaded = [load_session(path) for path in sessions]
        from calib.camera_observations import has_board_images

        if any(has_board_images(s) for s in loaded):  # issue 5: images of the board on the tip, fused with any tracker data
            if deflection not in ("auto", "none"):
                raise InputError(f"--deflection {deflection}: deflection models need reflector points only; sessions "
                                 f"with board images calibrate with --deflection none.")
            from selfcal.cli_camera import calibrate_with_cameras

            calibrate_with_cameras(loaded, out, holdout, model, seed, outlier_sigma, tip_link, pixel_sigma, force, json_output)
            return
        with_poses = any(s.tracker_poses is not None for s in loaded)  # issue 9: 6-DoF probe poses
        if with_poses and deflection not in ("auto", "none"):
            raise InputError(f"--deflection {deflection}: deflection models need reflector points; sessions "
                             f"with 6-DoF tracker poses calibrate with --deflection none.")
        with progress_bar("calibrating", None) as update:
            steps = []
            if with_poses:  # the rigid fit, which reads probe poses (and points alongside)
                from calib.calibrator import KinematicCalibrator

                calibration = KinematicCalibrator(model=model, holdout=holdout, seed=seed, outlier_threshold=outlier_sigma,
                                                  tip_link=tip_link,
                                                  progress=lambda message: (steps.append(message), update(len(steps)))).fit(loaded)
            else:
                from calib.deflection import DeflectionCalibrator

                calibration = DeflectionCalibrator(deflection, model=model, holdout=holdout, seed=seed,
                                                   outlier_threshold=outlier_sigma, tip_link=tip_link,
                                                   progress=lambda message: (steps.append(message), update(len(steps)))).fit(loaded)
        with output_folder(out, force) as folder:
            calibration.save(folder)
        summary = _summary(calibration, out)
        if json_output:
            print_json(summary)
        else:
            residuals = summary["residuals"]
            held = residuals.get("holdout")
            typer.echo(f"{out}: {summary['identifiable']} of {summary['parameters']} parameters identifiable "
                       f"(condition {summary['condition_number']:.3g}); fit RMS {residuals['fit']['rms_mm']:.4f} mm "
                       f"(nominal {residuals['fit_nominal']['rms_mm']:.4f} mm)"
                       + (f", held-out RMS {held['rms_mm']:.4f} mm (nominal {residuals['holdout_nominal']['rms_mm']:.4f} mm)" if held else "")
                       + f", {len(summary['outliers'])} outliers, deflection {summary['deflection']}")
            for outlier in summary["outliers"]:
                typer.echo(f"  outlier in the fit: {outlier['point']} ({outlier['residual_sigma']} sigma), left out")
            for outlier in summary["holdout_outliers"]:
                typer.echo(f"  outlier in a held-out pose: {outlier['point']} ({outlier['residual_sigma']} sigma, "
                           f"{outlier['error_mm']:.3f} mm), kept in the held-out figures")


def _summary(calibration, out: Path) -> dict:
    ident = calibration.summary["identifiability"]
    return {"calibration": str(out), "model": calibration.summary["model"], "parameters": ident["parameters"],
            "identifiable": ident["rank"], "condition_number": ident["condition_number"],
            "residuals": calibration.summary["residuals"], "outliers": calibration.summary["outliers"],
            "holdout_outliers": calibration.summary.get("holdout_outliers", []),
            "solve_seconds": calibration.summary["solve_seconds"],
            "deflection": (calibration.deflection or {}).get("mode", "none"),
            "deflection_heldout_comparison": (calibration.deflection or {}).get("heldout_comparison")}


def validate(
    calibration_dir: Path = typer.Argument(..., help="Calibration folder written by `selfcal calibrate`."),
    session: Path = typer.Argument(..., help="Session whose tracker points are predicted."),
    outlier_sigma: float = typer.Option(5.0, "--outlier-sigma", help="Name points beyond this many robust standard deviations."),
    json_output: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """Predict every tracker point of a session with a calibration and report the errors."""
    with user_errors():
        from calib.calibrator import Calibration
        from calib.camera_observations import has_board_images
        from calib.camera_validate import is_camera_calibration
        from calib.validate import validate as run_validation
        from capture.session import load_session
        from rigs.errors import InputError

        loaded = load_session(session)
        if is_camera_calibration(calibration_dir) and has_board_images(loaded) and loaded.tracker is None:
            from selfcal.cli_camera import validate_with_cameras

            validate_with_cameras(calibration_dir, loaded, json_output)
            return
        if not outlier_sigma > 0:
            raise InputError(f"--outlier-sigma must be positive, got {outlier_sigma}.")
        result = run_validation(Calibration.load(calibration_dir), loaded, outlier_sigma=outlier_sigma)
        if json_output:
            print_json(result)
        else:
            floor = result["floor_rms_mm"]
            typer.echo(f"n={result['n']} mean={result['mean_mm']:.4f} mm rms={result['rms_mm']:.4f} mm "
                       f"max={result['max_mm']:.4f} mm p95={result['p95_mm']:.4f} mm "
                       f"nominal_rms={result['nominal_rms_mm']:.4f} mm floor_rms="
                       + ("n/a" if floor is None else f"{floor:.4f} mm"))
            for outlier in result.get("outliers", []):
                typer.echo(f"outlier: {outlier['row']} (pose {outlier['pose']}, target {outlier['target']}): "
                           f"{outlier['error_mm']:.3f} mm, {outlier['residual_sigma']} sigma")
            poses = result.get("tracker_poses", result if "angle_rms_deg" in result else None)
            if poses is not None:  # issue 9: 6-DoF probe poses
                angle_floor = poses["floor_angle_rms_deg"]
                typer.echo(f"probe poses: n={poses['n']} rms={poses['rms_mm']:.4f} mm angle_rms={poses['angle_rms_deg']:.5f} deg "
                           f"angle_max={poses['angle_max_deg']:.5f} deg nominal_angle_rms={poses['nominal_angle_rms_deg']:.5f} deg "
                           "floor_angle_rms=" + ("n/a" if angle_floor is None else f"{angle_floor:.5f} deg"))
