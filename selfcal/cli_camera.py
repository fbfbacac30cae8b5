"""``selfcal calibrate-camera``: intrinsics from board images; and the camera side of
``selfcal calibrate`` / ``selfcal validate`` (:func:`calibrate_with_cameras`,
:func:`validate_with_cameras`), which those commands call for sessions with board images."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from selfcal.ui import print_json, progress_bar, user_errors


def register(app: typer.Typer) -> None:
    app.command("calibrate-camera")(calibrate_camera)


def calibrate_camera(
    images: List[Path] = typer.Argument(..., help="PNG/JPEG images of a ChArUco board, all from one camera."),
    board: str = typer.Option(..., "--board", help="charuco:SQUARES_X:SQUARES_Y:SQUARE_M:MARKER_M:DICTIONARY, "
                                                   "e.g. charuco:7:5:0.035:0.026:4X4_50 (sizes in metres)."),
    out: Path = typer.Option(..., "--out", help="ROS camera_info YAML file to write."),
    name: Optional[str] = typer.Option(None, "--name", help="camera_name in the YAML (default: the file's stem)."),
    free_k3: bool = typer.Option(False, "--free-k3", help="Also fit the third radial coefficient (wide-angle lenses)."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
    json_output: bool = typer.Option(False, "--json", help="Print a machine-readable summary."),
) -> None:
    """Camera intrinsics (K, plumb_bob distortion) from images of a ChArUco board, as ROS camera_info."""
    with user_errors():
        from calib.camera_board import parse_board
        from calib.camera_intrinsics import IntrinsicsCalibration
        from rigs.files import check_new_file

        spec = parse_board(board)
        check_new_file(out, force)
        with progress_bar("detecting the board", len(images)) as update:
            result = IntrinsicsCalibration(spec, name or out.stem, fix_k3=not free_k3).fit(images, update)
        result.info.save(out)
        summary = result.summary()
        summary["camera_info"] = str(out)
        if json_output:
            print_json(summary)
            return
        K = result.info.K
        typer.echo(f"{out}: fx={K[0, 0]:.2f} fy={K[1, 1]:.2f} cx={K[0, 2]:.2f} cy={K[1, 2]:.2f} px, "
                   f"RMS {result.rms_px:.3f} px over {len(result.images)} images")
        for image in result.images:
            typer.echo(f"  {image.path}: {image.corners} corners, {image.rms_px:.3f} px")
        if result.skipped:
            typer.echo(f"board not found in {len(result.skipped)} images (skipped):")
            for path in result.skipped:
                typer.echo(f"  {path}")


def calibrate_with_cameras(sessions, out: Path, holdout: float = 0.2, model: str = "full", seed: int = 0,
                           outlier_sigma: float = 5.0, tip_link: str | None = None, pixel_sigma: float | None = None,
                           force: bool = False, json_output: bool = False) -> None:
    """The body of ``selfcal calibrate`` for sessions with board images (``sessions``: loaded Sessions).

    Call inside ``user_errors()``. Writes CALDIR (robot.urdf, calibration.yaml with cameras and
    board, report.html) through ``output_folder`` and prints a summary.
    """
    from calib.camera_calibrator import CameraCalibrator
    from rigs.files import check_new_output, output_folder

    check_new_output(out, force)
    with progress_bar("calibrating with cameras", None) as update:
        steps = []
        result = CameraCalibrator(model=model, holdout=holdout, seed=seed, outlier_threshold=outlier_sigma,
                                  pixel_sigma=pixel_sigma, tip_link=tip_link,
                                  progress=lambda message: (steps.append(message), update(len(steps)))).fit(sessions)
    with output_folder(out, force) as folder:
        result.save(folder)
    summary = camera_calibration_summary(result, out)
    if json_output:
        print_json(summary)
        return
    camera = summary["camera"]
    tracker = summary["tracker"]
    held = camera.get("holdout_rms_px")
    typer.echo(f"{out}: {summary['identifiable']} of {summary['parameters']} parameters identifiable "
               f"(condition {summary['condition_number']:.3g}); board corners: fit RMS {camera['fit_rms_px']:.3f} px "
               f"(nominal URDF {camera['fit_nominal_rms_px']:.3f} px, hand-eye alone {camera['hand_eye_fit_rms_px']:.3f} px)"
               + (f", held-out RMS {held:.3f} px (nominal {camera['holdout_nominal_rms_px']:.3f} px)" if held is not None else "")
               + (f"; tracker fit RMS {tracker['fit']['rms_mm']:.4f} mm" if tracker.get("fit") else "")
               + f"; {len(summary['outliers'])} outliers")


def camera_calibration_summary(result, out: Path) -> dict:
    summary = result.calibration.summary
    ident = summary["identifiability"]
    residuals = summary["residuals"]
    return {"calibration": str(out), "model": summary["model"], "parameters": ident["parameters"],
            "identifiable": ident["rank"], "condition_number": ident["condition_number"],
            "camera": result.camera_summary,
            "tracker": {k: v for k, v in residuals.items() if k in ("fit", "fit_nominal", "holdout", "holdout_nominal")},
            "base_T_camera": {name: pose.tolist() for name, pose in result.base_T_camera.items()},
            "tip_T_board": result.tip_T_board.tolist(),
            "outliers": summary["outliers"], "solve_seconds": summary["solve_seconds"]}


def validate_with_cameras(calibration_dir: Path, session, json_output: bool = False) -> None:
    """The body of ``selfcal validate`` for a camera calibration and a session with board images."""
    from calib.camera_validate import CameraModel, validate_camera

    result = validate_camera(CameraModel.load(calibration_dir), session)
    if json_output:
        print_json(result)
        return
    tip = result["tip_rms_mm"]
    typer.echo(f"images={result['images']} corners={result['corners']} reprojection_rms={result['reprojection_rms_px']:.3f} px "
               f"p95={result['reprojection_p95_px']:.3f} px "
               + ("tip_rms=n/a (no truth)" if tip is None else
                  f"tip_rms={tip:.4f} mm (after rigid registration; {result['tip_rms_mm_base_frame']:.4f} mm in the "
                  f"fitted base frame) nominal_tip_rms={result['nominal_tip_rms_mm']:.4f} mm"))
