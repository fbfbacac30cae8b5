"""``selfcal calibrate-camera``: a camera's intrinsics from images of a ChArUco board, as ROS camera_info.

(Sessions with board images on the arm calibrate with ``selfcal calibrate``, like any other.)"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from selfcal.ui import print_json, progress_bar, user_errors


def register(app: typer.Typer) -> None:
    app.command("calibrate-camera")(calibrate_camera)


def calibrate_camera(
    images: List[Path] = typer.Argument(..., help="PNG/JPEG images of a ChArUco board, all from one camera."),
    board: str = typer.Option(..., "--board", help="charuco:SQUARES_X:SQUARES_Y:SQUARE_M:MARKER_M:DICTIONARY[:legacy], "
                                                   "e.g. charuco:7:5:0.035:0.026:4X4_50 (sizes in metres; "
                                                   ":legacy for a board OpenCV drew before 4.6)."),
    out: Path = typer.Option(..., "--out", help="ROS camera_info YAML file to write."),
    name: Optional[str] = typer.Option(None, "--name", help="camera_name in the YAML (default: the file's stem)."),
    free_k3: bool = typer.Option(False, "--free-k3", help="Also fit the third radial coefficient (wide-angle lenses)."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
    json_output: bool = typer.Option(False, "--json", help="Print a machine-readable summary."),
) -> None:
    """Camera intrinsics (K, plumb_bob distortion) from images of a ChArUco board, as ROS camera_info."""
    with user_errors():
        from calib.sensors.board import parse_board
        from calib.sensors.intrinsics import IntrinsicsCalibration
        from rigs.files import check_new_file

        spec = parse_board(board)
        check_new_file(out, force)
        with progress_bar("detecting the board", len(images), unit="images") as update:
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
