"""Camera calibration figures (issue 5), written to BENCHMARKS.md.

- camera-intrinsics: intrinsics from 20 rendered close-up board views vs the true K.
- camera-calibration: xarm6-cameras, 80 calibration poses, 100 held-out poses: held-out tip
  position RMS against the simulated truth (after one rigid registration: cameras cannot see the
  base frame), reprojection RMS, and the hand-eye initialiser alone (nominal URDF) for contrast.
- camera-fusion: the same arm with a laser tracker added (tests/data/xarm6-cameras-tracker.toml):
  tracker alone vs tracker + cameras fused, on held-out tracker points and tip positions.

    nice -n 10 .venv/bin/python scripts/bench_camera.py [--work /tmp/bench-camera]

Sessions are captured into --work (kept, so a second run skips the capture).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import ROOT, table, write_section  # noqa: E402

COMMAND = "nice -n 10 .venv/bin/python scripts/bench_camera.py"
TRACKER_RIG = ROOT / "tests" / "data" / "xarm6-cameras-tracker.toml"


def capture(rig: str, poses: int, seed: int, work: Path) -> Path:
    from capture.simulate import capture_simulated
    from rigs import load_rig

    out = work / f"{Path(rig).stem}-{poses}-{seed}"
    if not out.exists():
        start = time.perf_counter()
        capture_simulated(load_rig(rig), poses, seed, out)
        print(f"captured {out.name} in {time.perf_counter() - start:.0f} s", flush=True)
    return out


def intrinsics_section() -> None:
    import cv2

    from calib.camera_board import CharucoBoardSpec
    from calib.camera_intrinsics import IntrinsicsCalibration, board_view_poses
    from rigs import load_rig
    from rigs.simulator import render_board_views

    rig = load_rig("xarm6-cameras")
    camera, spec = rig.cameras[0], rig.board
    board = CharucoBoardSpec(spec.squares, spec.square, spec.marker, spec.dictionary)
    rows = []
    for seed in (1, 2, 3, 4, 5):
        poses = board_view_poses(camera.K, (camera.width, camera.height), board, 20, np.random.default_rng(seed))
        with tempfile.TemporaryDirectory() as folder:
            paths = []
            for i, image in enumerate(render_board_views(spec, camera, poses)):
                paths.append(Path(folder) / f"view{i:02d}.png")
                cv2.imwrite(str(paths[-1]), image[..., ::-1])
            start = time.perf_counter()
            result = IntrinsicsCalibration(board).fit(paths)
            seconds = time.perf_counter() - start
        K, true = result.info.K, camera.K
        rows.append([seed, len(result.images), 100 * (K[0, 0] / true[0, 0] - 1), 100 * (K[1, 1] / true[1, 1] - 1),
                     K[0, 2] - true[0, 2], K[1, 2] - true[1, 2], result.rms_px, seconds])
    worst = max(abs(r[2]) for r in rows) if rows else float("nan")
    body = (f"20 rendered views of the {board.describe()} board (A4) at 0.4 to 0.6 m, tilted 20 to 45 degrees, "
            f"640x480 (rendered at 3x and box-filtered, as a sensor integrates each pixel), true fx = {camera.K[0, 0]:.2f} px. Target: fx within 0.5 %.\n\n"
            + table(["view set (seed)", "views used", "fx error %", "fy error %", "cx error px", "cy error px",
                     "RMS px", "calibrate s"], rows)
            + f"\n\nWorst |fx error|: {worst:.3f} % ({'meets' if worst <= 0.5 else 'MISSES'} the 0.5 % target).")
    write_section("camera-intrinsics", "Camera intrinsics from rendered ChArUco views", body, COMMAND)


def calibration_section(work: Path) -> None:
    from calib.camera_calibrator import CameraCalibrator, initialise_cameras
    from calib.camera_observations import detect_session
    from calib.camera_validate import CameraModel, validate_camera
    from capture.session import load_session
    from rigs.kinematics import ChainModel
    from rigs.transforms import invert

    fit_session = load_session(capture(ROOT / "rigs/builtin/xarm6-cameras.toml", 80, 21, work))
    held_session = load_session(capture(ROOT / "rigs/builtin/xarm6-cameras.toml", 100, 22, work))
    start = time.perf_counter()
    result = CameraCalibrator(holdout=0.0).fit([fit_session])
    seconds = time.perf_counter() - start
    calibrated = validate_camera(CameraModel.from_result(result), held_session)

    # The hand-eye initialiser alone: nominal URDF, PnP + numpy hand-eye camera and board poses.
    chain = ChainModel.from_urdf(fit_session.urdf_path, fit_session.base_link, fit_session.tip_link)
    detections = detect_session(fit_session)
    init = initialise_cameras(detections, fit_session.q, chain, np.arange(len(fit_session.pose_ids)),
                              np.random.default_rng(0))
    initial_model = CameraModel(chain, {n: invert(p) for n, p in init.hand_eye.camera_T_base.items()},
                                init.hand_eye.tip_T_board, detections.board)
    initial = validate_camera(initial_model, held_session)
    ident = result.calibration.summary["identifiability"]
    rows = [
        ["nominal URDF + hand-eye initialiser", initial["tip_rms_mm"], initial["tip_max_mm"],
         initial["tip_rms_mm_base_frame"], initial["board_centre_rms_mm"], initial["reprojection_rms_px"],
         initial["reprojection_p95_px"], "-"],
        ["calibrated (joint bundle adjustment)", calibrated["tip_rms_mm"], calibrated["tip_max_mm"],
         calibrated["tip_rms_mm_base_frame"], calibrated["board_centre_rms_mm"], calibrated["reprojection_rms_px"],
         calibrated["reprojection_p95_px"], seconds],
    ]
    ratio = calibrated["tip_rms_mm"] / initial["tip_rms_mm"]
    body = (f"xarm6-cameras (4 cameras, 640x480, fov 35 deg, about 1.4 m away; {result.board.describe()} board on "
            f"the flange), 80 calibration poses (seed 21, {len(detections.images)} images with the board) and 100 "
            f"held-out poses (seed 22, {calibrated['images']} images, {calibrated['corners']} corners). Tip error is "
            f"measured against the simulated truth after one rigid registration over the 100 poses (cameras cannot "
            f"see the base frame: the first joint's placement trades off against every camera pose); the base-frame "
            f"column is without it. The board centre column (registered too) is what the cameras see, free of where "
            f"the tip frame sits along the last axis behind the board (not observable; kept at the nominal URDF's). Target: held-out tip RMS <= 0.5 mm.\n\n"
            + table(["model", "held-out tip RMS mm", "tip max mm", "tip RMS mm, base frame",
                     "board centre RMS mm", "reprojection RMS px", "reprojection p95 px", "fit s"], rows)
            + f"\n\nCalibrated / initialiser tip RMS: {ratio:.3f}. Identifiable: {ident['rank']} of "
              f"{ident['parameters']} parameters (condition {ident['condition_number']:.3g}); corner noise "
              f"{result.pixel_sigma:.3f} px per axis (from PnP residuals); fit reprojection RMS "
              f"{result.camera_summary['fit_rms_px']:.3f} px; {len(result.calibration.summary['outliers'])} corners "
              f"flagged as outliers. Held-out tip RMS {calibrated['tip_rms_mm']:.3f} mm "
              f"({'meets' if calibrated['tip_rms_mm'] <= 0.5 else 'MISSES'} the 0.5 mm target).")
    write_section("camera-calibration", "Camera-based kinematic calibration (xarm6-cameras)", body, COMMAND)


def fusion_section(work: Path) -> None:
    from calib.calibrator import KinematicCalibrator
    from calib.camera_calibrator import CameraCalibrator
    from calib.camera_validate import tip_errors, true_tip_positions
    from calib.validate import point_errors
    from capture.session import load_session

    fit_session = load_session(capture(TRACKER_RIG, 80, 21, work))
    held_session = load_session(capture(TRACKER_RIG, 100, 22, work))
    truth = true_tip_positions(held_session)
    rows, figures = [], {}
    for name, make in (("tracker alone", lambda: KinematicCalibrator(holdout=0.0)),
                       ("tracker + cameras", lambda: CameraCalibrator(holdout=0.0))):
        start = time.perf_counter()
        fitted = make().fit([fit_session])
        seconds = time.perf_counter() - start
        calibration = getattr(fitted, "calibration", fitted)
        points = point_errors(calibration, held_session)
        tip, _ = tip_errors(calibration.base_T_tip(held_session.q)[:, :3, 3], truth)
        figures[name] = (np.sqrt(np.mean(points ** 2)) * 1e3, np.sqrt(np.mean(tip ** 2)) * 1e3)
        rows.append([name, figures[name][0], float(np.percentile(points, 95) * 1e3), figures[name][1],
                     calibration.summary["identifiability"]["rank"], seconds])
    ratio = figures["tracker + cameras"][0] / figures["tracker alone"][0]
    body = (f"xarm6-cameras with a laser tracker added (`tests/data/xarm6-cameras-tracker.toml`, three reflectors, "
            f"MPE-based noise), 80 calibration poses (seed 21), 100 held-out (seed 22); the fused fit weights tracker "
            f"points by their MPE noise model and board corners by the PnP-estimated pixel noise. Target: fused no "
            f"worse than the tracker alone.\n\n"
            + table(["fit", "held-out tracker RMS mm", "tracker p95 mm", "held-out tip RMS mm (registered)",
                     "identifiable parameters", "fit s"], rows)
            + f"\n\nFused / tracker-alone held-out tracker RMS: {ratio:.4f} "
              f"({'no worse' if ratio <= 1.01 else 'WORSE'} within 1 %).")
    write_section("camera-fusion", "Tracker + camera fusion (xarm6 with a tracker)", body, COMMAND)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "selfcal-bench-camera")
    parser.add_argument("--only", choices=["intrinsics", "calibration", "fusion"], default=None)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.only in (None, "intrinsics"):
        intrinsics_section()
    if args.only in (None, "calibration"):
        calibration_section(args.work)
    if args.only in (None, "fusion"):
        fusion_section(args.work)


if __name__ == "__main__":
    main()
