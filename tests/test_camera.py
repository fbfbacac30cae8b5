"""Camera calibration: the rendered board, the detector, intrinsics, hand-eye, and the joint fit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from calib.calibration import Calibration
from calib.calibrator import Calibrator
from calib.model.error_model import ErrorModel
from calib.model.poses import PoseSet
from calib.sensors.board import BoardDetector, CharucoBoardSpec, board_from_manifest, parse_board
from calib.sensors.intrinsics import board_view_poses
from capture.camera_info import CameraInfo
from capture.session import load_session
from rigs import load_rig
from rigs.errors import InputError
from rigs.simulator import render_board_views
from rigs.transforms import exp6, invert
from selfcal.cli import app

BOARD_TEXT = "charuco:7:5:0.035:0.026:4X4_50"
runner = CliRunner()


@pytest.fixture(scope="module")
def rig():
    return load_rig("xarm6-cameras")


@pytest.fixture(scope="module")
def board(rig) -> CharucoBoardSpec:
    spec = rig.board
    return CharucoBoardSpec(spec.squares, spec.square, spec.marker, spec.dictionary)


@pytest.fixture(scope="module")
def rendered_views(rig, board, tmp_path_factory):
    """20 close-up views of the board from the front camera (K known), written as PNG files."""
    camera = rig.cameras[0]
    poses = board_view_poses(camera.K, (camera.width, camera.height), board, 20, np.random.default_rng(4))
    folder = tmp_path_factory.mktemp("views")
    paths = []
    for i, image in enumerate(render_board_views(rig.board, camera, poses)):
        path = folder / f"view{i:02d}.png"
        cv2.imwrite(str(path), image[..., ::-1])
        paths.append(path)
    return camera, poses, paths


@pytest.fixture(scope="module")
def camera_session(capture_session) -> Path:
    return capture_session("xarm6-cameras", 24, 3)


def test_the_detector_finds_rendered_corners_where_the_known_pose_puts_them(rendered_views, board):
    camera, poses, paths = rendered_views
    detector = BoardDetector(board)
    differences, counts = [], []
    for pose, path in zip(poses, paths):
        detection = detector.detect(cv2.imread(str(path)))
        counts.append(detection.count)
        points = board.corners(detection.ids) @ pose[:3, :3].T + pose[:3, 3]
        projected = (points @ camera.K.T)[:, :2] / points[:, 2:]
        differences.append(detection.pixels - projected)
    differences = np.concatenate(differences)
    assert min(counts) >= 20  # of 24 inner corners, in every view
    assert np.sqrt(np.mean(np.sum(differences ** 2, axis=1))) < 0.4  # px
    # No bias: rendered pixels follow K in OpenCV's convention (integer pixel = pixel centre).
    assert np.all(np.abs(differences.mean(axis=0)) < 0.1)


def test_calibrate_camera_recovers_the_focal_length_from_20_rendered_views(rendered_views, tmp_path):
    camera, _, paths = rendered_views
    out = tmp_path / "front.yaml"
    result = CliRunner().invoke(app, ["calibrate-camera", *map(str, paths), "--board", BOARD_TEXT, "--out", str(out),
                                      "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    info = CameraInfo.load(out)
    true_focal = camera.K[0, 0]
    assert abs(info.K[0, 0] / true_focal - 1) < 0.005
    assert abs(info.K[1, 1] / true_focal - 1) < 0.005
    assert summary["rms_px"] < 0.5 and summary["views_used"] == 20 and not summary["skipped"]
    assert len(summary["images"]) == 20 and all(i["rms_px"] < 1.0 for i in summary["images"])


def test_images_without_the_board_are_listed_and_skipped(rendered_views, tmp_path):
    _, _, paths = rendered_views
    blank = tmp_path / "blank.png"
    cv2.imwrite(str(blank), np.full((480, 640, 3), 255, np.uint8))
    result = CliRunner().invoke(app, ["calibrate-camera", *map(str, paths[:8]), str(blank), "--board", BOARD_TEXT,
                                      "--out", str(tmp_path / "c.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["skipped"] == [str(blank)]


@pytest.mark.parametrize("case, message", [
    ("no-board", "not found in any"),
    ("too-few", "at least 4 views"),
    ("wrong-spec", "does not match"),
    ("mixed-sizes", "calibrate one camera"),
    ("bad-spec-text", "expected charuco"),
    ("not-an-image", "not an image"),
])
def test_bad_input_to_calibrate_camera_is_one_sentence_and_exit_2(rendered_views, tmp_path, case, message):
    _, _, paths = rendered_views
    blank = tmp_path / "blank.png"
    cv2.imwrite(str(blank), np.full((480, 640, 3), 255, np.uint8))
    small = tmp_path / "small.png"
    cv2.imwrite(str(small), cv2.resize(cv2.imread(str(paths[0])), (320, 240)))
    text = tmp_path / "notes.png"
    text.write_text("not a picture")
    images, board = {
        "no-board": ([blank, blank], BOARD_TEXT),
        "too-few": (paths[:2], BOARD_TEXT),
        "wrong-spec": (paths[:6], "charuco:6:5:0.035:0.026:4X4_50"),
        "mixed-sizes": ([*paths[:5], small], BOARD_TEXT),
        "bad-spec-text": (paths[:5], "charuco:7:5:0.035"),
        "not-an-image": ([text], BOARD_TEXT),
    }[case]
    out = tmp_path / "out.yaml"
    result = CliRunner().invoke(app, ["calibrate-camera", *map(str, images), "--board", board, "--out", str(out)])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_board_specs_are_checked():
    assert parse_board("charuco:7:5:0.035:0.026:4x4_50").dictionary == "DICT_4X4_50"
    with pytest.raises(InputError, match="marker"):
        parse_board("charuco:7:5:0.02:0.03:4X4_50")
    with pytest.raises(InputError, match="only 50"):
        parse_board("charuco:20:20:0.02:0.015:4X4_50")


def test_a_board_drawn_by_an_older_opencv_is_read_with_legacy():
    """OpenCV 4.6 changed the pattern of boards with an even number of rows; a printout of the older
    one shows no corners as today's board, and all of them with :legacy."""
    from calib.sensors.board import BoardDetector

    old = parse_board("charuco:7:10:0.024:0.018:4X4_250:legacy")
    assert old.legacy and old.describe().endswith(":legacy")
    assert parse_board(old.describe()) == old
    image = old.opencv_board().generateImage((700, 1000), marginSize=40)
    assert BoardDetector(parse_board("charuco:7:10:0.024:0.018:4X4_250")).detect(image).count == 0
    assert BoardDetector(old).detect(image).count == old.corner_count
    with pytest.raises(InputError, match="legacy"):
        parse_board("charuco:7:10:0.024:0.018:4X4_250:old")


def test_hand_eye_recovers_known_camera_and_board_poses():
    import cv2

    from calib.sensors.hand_eye import hand_eye, opencv_cross_check

    rng = np.random.default_rng(0)
    tip_T_board = exp6([0.01, -0.02, 0.015, 0.1, -0.05, 0.2])
    camera_T_base = {"a": exp6([0.1, 0.2, 1.4, 0.3, -2.0, 0.1]), "b": exp6([-0.3, 0.1, 1.2, -1.0, 0.4, 0.2])}
    tips, boards, names = [], [], []
    for name, pose in camera_T_base.items():
        for _ in range(12):
            base_T_tip = exp6(np.concatenate([rng.normal(0, 0.3, 3), rng.normal(0, 0.8, 3)]))
            tips.append(base_T_tip)
            boards.append(pose @ base_T_tip @ tip_T_board)
            names.append(name)
    solution = hand_eye(np.array(tips), np.array(boards), names, rng)
    assert np.allclose(solution.tip_T_board, tip_T_board, atol=1e-9)
    for name, pose in camera_T_base.items():
        assert np.allclose(solution.camera_T_base[name], pose, atol=1e-9)
    # OpenCV's robot-world hand-eye, where the build has it, agrees for one camera.
    first = np.array([n == "a" for n in names])
    checked = opencv_cross_check(np.array(tips)[first], np.array(boards)[first])
    assert (checked is None) == (not hasattr(cv2, "calibrateRobotWorldHandEye"))
    if checked is not None:
        assert np.allclose(checked[0], camera_T_base["a"], atol=1e-6)
        assert np.allclose(checked[1], tip_T_board, atol=1e-6)


def _truth_model(session):
    """The error model at the simulated truth: true chain, true camera poses, true board on the tip."""
    from rigs.kinematics import ArmModel

    chain = ArmModel.from_urdf(session.path / "truth" / "robot.urdf", session.base_link, session.tip_link)
    truth = json.loads((session.path / "truth" / "parameters.json").read_text())
    cameras = {name: invert(np.asarray(c["base_T_camera"])) for name, c in session.manifest["sensors"]["cameras"].items()}
    return ErrorModel.for_sensors(chain, reference_camera_T_base={name: cameras[name] for name in sorted(cameras)},
                                  reference_tip_T_board=np.asarray(truth["tip_T_board"]))


def test_the_reprojection_model_explains_rendered_session_images_at_the_truth(camera_session):
    from calib.sensors.board_corners import CornerObservations, detect_session

    session = load_session(camera_session)
    detections = detect_session(session)
    # Capture keeps poses where the board faces 2 cameras, large and unblocked: nearly all decode.
    assert len(detections.images) >= 1.8 * len(session.pose_ids)
    model = _truth_model(session)
    block = CornerObservations.from_detections(detections, PoseSet(session.q, session.pose_ids, session.payload_kg), 1.0)
    errors = np.linalg.norm(block.predict(model, np.zeros(model.size)) - block.pixels, axis=1)
    assert np.sqrt(np.mean(errors ** 2)) < 0.9  # px; the nominal URDF is off by several px at places
    # The analytic Jacobian agrees with central differences.
    theta = np.random.default_rng(1).normal(0, 1e-3, model.size)
    _, jacobian = block.evaluate(model, theta)
    columns = [0, 7, 20, model.size - 9, model.size - 1]
    for k in columns:
        step = np.zeros(model.size)
        step[k] = 1e-7
        numeric = (block.evaluate(model, theta + step, False)[0] - block.evaluate(model, theta - step, False)[0]) / 2e-7
        assert np.allclose(jacobian[:, k], numeric, rtol=1e-5, atol=1e-4 * np.abs(numeric).max())


def test_a_camera_session_calibrates_the_arm_and_truth_is_never_read(camera_session, tmp_path):
    from calib.workflows.validate import validate_corners

    copy = tmp_path / "no-truth"
    shutil.copytree(camera_session, copy, ignore=shutil.ignore_patterns("truth"))
    with_truth = Calibrator(deflection="none", holdout=0.2).fit([load_session(camera_session)])
    without = Calibrator(deflection="none", holdout=0.2).fit([load_session(copy)])
    assert np.allclose(with_truth.deltas, without.deltas, atol=1e-12)
    assert np.allclose(with_truth.tip_T_board, without.tip_T_board, atol=1e-12)

    summary = with_truth.camera_summary
    # Better than the nominal arm with the best camera and board poses, far better than hand-eye alone.
    assert summary["fit_rms_px"] < 0.95 * summary["fit_nominal_rms_px"]
    assert summary["fit_rms_px"] < 0.7 * summary["hand_eye_fit_rms_px"]
    # OpenCV's robot-world hand-eye (the camera with the most views, where the build has it) puts
    # the board where the numpy start does (1.4 mm apart on this session).
    cross = summary["opencv_hand_eye_cross_check"]
    if cross is not None:
        assert cross["camera"] in summary["cameras"] and cross["views"] >= 3
        assert cross["tip_T_board_translation_difference_m"] < 0.01
    ident = with_truth.summary["identifiability"]
    assert ident["rank"] < ident["parameters"]
    # Cameras cannot see where the base is: the first joint's placement trades off against them.
    assert any("joint1" in d and "camera_T_base" in d for d in ident["directions"])
    report = validate_corners(with_truth, load_session(camera_session))
    assert report["tip_rms_mm"] < 0.75 * report["nominal_tip_rms_mm"]
    assert report["reprojection_rms_px"] < 1.0


def test_calibrate_and_validate_with_cameras_write_and_read_a_calibration_folder(camera_session, tmp_path):
    from rigs.kinematics import ArmModel

    out = tmp_path / "cal"
    result = runner.invoke(app, ["calibrate", str(camera_session), "--out", str(out), "--holdout", "0.25",
                                 "--deflection", "none", "--model", "full", "--json"])
    assert result.exit_code == 0, result.output
    document = yaml.safe_load((out / "calibration.yaml").read_text())
    assert set(document["cameras"]) == {"front", "left", "back", "right"}
    assert document["board"]["spec"] == BOARD_TEXT and document["tracker_T_base"] is None
    assert "Cameras" in (out / "report.html").read_text()
    chain = ArmModel.from_urdf(out / "robot.urdf", "link_base", "link6")
    loaded = Calibration.load(out)
    assert np.allclose(loaded.base_T_tip(np.zeros(6))[0], chain.base_T_frame(np.zeros(6)))
    result = runner.invoke(app, ["validate", str(out), str(camera_session), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["reprojection_rms_px"] < 1.0
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "calibration.yaml").write_text("format: selfcal-calibration\n")
    result = runner.invoke(app, ["validate", str(tmp_path / "plain"), str(camera_session)])
    assert result.exit_code == 2 and "is missing" in result.output


def test_a_session_whose_images_show_no_board_is_refused(camera_session, tmp_path):
    copy = tmp_path / "blank"
    shutil.copytree(camera_session, copy, ignore=shutil.ignore_patterns("truth"))
    for path in (copy / "cameras").glob("*/*_rgb.png"):
        cv2.imwrite(str(path), np.full((480, 640, 3), 255, np.uint8))
    with pytest.raises(InputError, match="not found in any"):
        Calibrator(deflection="none").fit([load_session(copy)])


def test_the_session_manifest_describes_the_rendered_board(camera_session, rig):
    session = load_session(camera_session)
    board = board_from_manifest(session.manifest, "session.json")
    assert board.squares == rig.board.squares and board.square == rig.board.square
    truth = json.loads((camera_session / "truth" / "parameters.json").read_text())
    # The true mounting differs slightly from nominal: that is what the fit finds.
    offset = np.linalg.norm(np.asarray(truth["tip_T_board"])[:3, 3] - rig.board.tip_T_board[:3, 3])
    assert 0 < offset < 0.005


@pytest.mark.slow
def test_tracker_and_cameras_fused_are_no_worse_than_the_tracker_alone(capture_session):
    from calib.workflows.validate import point_errors

    rig = str(Path(__file__).parent / "data" / "xarm6-cameras-tracker.toml")
    fit = load_session(capture_session(rig, 40, 21))
    held = load_session(capture_session(rig, 30, 22))
    tracker = Calibrator(deflection="none", holdout=0.0).fit([tracker_only(fit)])
    fused = Calibrator(deflection="none", holdout=0.0).fit([fit])
    assert fused.summary["sensors"] == ["tracker_points", "board_corners"]
    tracker_rms = np.sqrt(np.mean(point_errors(tracker, held) ** 2))
    fused_rms = np.sqrt(np.mean(point_errors(fused, held) ** 2))
    assert fused_rms <= 1.05 * tracker_rms
    assert fused.summary["identifiability"]["rank"] > tracker.summary["identifiability"]["rank"]


def tracker_only(session):
    """The same session without its cameras (the tracker's own calibration)."""
    from dataclasses import replace

    return replace(session, cameras={})
