"""Validating a hand-eye calibration on another day's photos of the same cell.

A user's story: the cell was calibrated from eight photos and the controller's reported flange
poses; five new photos of the same camera and board mount come with their own reported poses.
`validate` predicts every corner through those poses and judges the error against the floor the
corners' noise and the flange poses' own error set, as calibrate judged the fit; an ISO 9283 audit
has nothing of a hand-eye calibration to judge and says so; a session of another kind, another
camera or the other set-up is refused with one sentence naming the file and field.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from calib.sensors.board import parse_board
from calib.workflows.hand_eye import HandEyeCalibration
from calib.workflows.validate_hand_eye import validate_hand_eye
from capture.session import load_session
from capture.simulate_hand_eye import HandEyeScene, write_recording
from rigs.transforms import invert
from cli_runs import fails, invoke

BOARD = "charuco:9:7:0.03:0.022:5X5_100"
SCALE = 0.75  # 768 x 576 photos: the board's markers still read, at half the rendering time


@pytest.fixture(scope="module")
def cell(tmp_path_factory) -> dict:
    """Two recordings of one eye-to-hand cell (8 and 5 photos), their sessions and the calibration of the first."""
    root = tmp_path_factory.mktemp("hand_eye_validate")
    board = parse_board(BOARD)
    truth = write_recording(root / "r1", board, "eye-to-hand", 8, 3, scale=SCALE)
    scene = HandEyeScene("eye-to-hand", np.array(truth["camera"]), np.array(truth["board"]))
    write_recording(root / "r2", board, "eye-to-hand", 5, 13, scene=scene, scale=SCALE)
    for name in ("r1", "r2"):
        run = invoke("import", "images", root / name, "--flange-poses", root / name / "flange_poses.csv",
                     "--board", BOARD, "--setup", "eye-to-hand", "--out", root / f"s{name[1]}")
        assert run.exit_code == 0, run.output
    run = invoke("calibrate", root / "s1", "--out", root / "cal", "--json")
    assert run.exit_code == 0, run.output
    return {"root": root, "truth": truth, "calibration": root / "cal", "first": root / "s1", "second": root / "s2"}


def _edited(source: Path, target: Path, edit) -> Path:
    """A copy of session ``source`` with ``edit(manifest, folder)`` applied."""
    shutil.copytree(source, target)
    manifest = json.loads((target / "session.json").read_text())
    edit(manifest, target)
    (target / "session.json").write_text(json.dumps(manifest))
    return target


def test_new_photos_are_predicted_as_well_as_the_true_frames_predict_them(cell):
    run = invoke("validate", cell["calibration"], cell["second"], "--json")
    assert run.exit_code == 0, run.output
    result = json.loads(run.output)
    assert result["verdict"]["result"] == "PASS", result["verdict"]
    assert result["model"] == "hand-eye" and result["images"] == 5 and len(result["photos"]) == 5
    assert result["corners"] == sum(p["corners"] for p in result["photos"])
    assert result["reprojection_max_px"] >= max(p["rms_px"] for p in result["photos"])
    # The simulated floor: the same photos predicted by the true camera and board frames and the
    # true lens, through the same reported flange poses (what noise and flange error alone leave).
    truth = cell["truth"]
    true_cell = HandEyeCalibration("eye-to-hand", {"camera": invert(np.array(truth["camera"]))},
                                   np.array(truth["board"]), {"camera": np.array(truth["K"])},
                                   {"camera": np.array(truth["distortion"])}, parse_board(BOARD))
    floor = validate_hand_eye(true_cell, load_session(cell["second"]), cell["calibration"],
                              (truth["flange_sigma_m"], truth["flange_sigma_rad"]))["reprojection_rms_px"]
    assert result["reprojection_rms_px"] <= 1.3 * floor, (result["reprojection_rms_px"], floor)
    # Its own floor estimate is of the same size, and the calibration beats a closed form fitted to the photos themselves.
    assert 0.5 * floor < result["floor_px"] < 2.0 * floor
    assert result["reprojection_rms_px"] < result["nominal_rms_px"]
    assert result["flange_sigma"]["source"].startswith("the calibration's")
    text = invoke("validate", cell["calibration"], cell["second"])
    assert text.exit_code == 0 and text.output.startswith("PASS") and "baseline" in text.output


def test_the_photos_it_was_fitted_on_cannot_judge_it(cell):
    run = invoke("validate", cell["calibration"], cell["first"], "--json")
    assert run.exit_code == 0, run.output
    verdict = json.loads(run.output)["verdict"]
    assert verdict["result"] == "CANNOT TELL" and "fitted on" in verdict["reason"]


def test_a_stated_flange_error_sets_the_floor(cell):
    tight = json.loads(invoke("validate", cell["calibration"], cell["second"], "--flange-sigma", "0,0", "--json").output)
    loose = json.loads(invoke("validate", cell["calibration"], cell["second"], "--flange-sigma", "0.5,0.05",
                              "--json").output)
    assert tight["flange_sigma"]["source"] == "stated (--flange-sigma)"
    assert tight["floor_px"] < loose["floor_px"]
    assert tight["reprojection_rms_px"] == pytest.approx(loose["reprojection_rms_px"])


def _joint_angles(manifest: dict, folder: Path) -> None:
    manifest["robot"]["joint_names"] = ["joint1"]
    del manifest["robot"]["flange_poses"]
    (folder / "flange_poses.csv").unlink()
    poses = (folder / "joints.csv").read_text().split()[1:]
    (folder / "joints.csv").write_text("pose,joint1\n" + "".join(f"{p},0.1\n" for p in poses))


def _camera_renamed(manifest: dict, folder: Path) -> None:
    (folder / "cameras" / "camera").rename(folder / "cameras" / "left")
    entry = manifest["sensors"]["cameras"].pop("camera")
    entry["info"] = entry["info"].replace("cameras/camera/", "cameras/left/")
    manifest["sensors"]["cameras"]["left"] = entry


def _eye_in_hand(manifest: dict, folder: Path) -> None:
    manifest["sensors"]["board"]["mount"] = "world"


def _other_board(manifest: dict, folder: Path) -> None:
    manifest["sensors"]["board"]["squares"] = [7, 5]


@pytest.mark.parametrize("edit, expected", [
    (_joint_angles, ["joints.csv: the session records joint angles", "reported flange poses"]),
    (_camera_renamed, ["session.json: sensors.cameras.left: camera 'left' is not in", "calibration.yaml (it has camera)"]),
    (_eye_in_hand, ["session.json: sensors.board.mount 'world' makes it an eye-in-hand session",
                    "is an eye-to-hand calibration"]),
    (_other_board, ["session.json: sensors.board is charuco:7:5", "fitted on the board charuco:9:7"]),
])
def test_a_session_of_another_kind_is_refused_naming_the_file_and_field(cell, tmp_path, edit, expected):
    session = _edited(cell["second"], tmp_path / "s", edit)
    message = fails("validate", cell["calibration"], session)
    assert all(part in message for part in expected), message


def test_options_of_a_tracker_validation_are_refused(cell):
    message = fails("validate", cell["calibration"], cell["second"], "--register", "tracker")
    assert "--register" in message and "hand-eye calibration" in message
    message = fails("validate", cell["calibration"], cell["second"], "--tolerance-mm", "1")
    assert "judged in px" in message


def test_an_iso_9283_audit_refuses_a_hand_eye_calibration(cell, tmp_path):
    message = fails("audit", "report", cell["second"], "--calibration", cell["calibration"], "--out", tmp_path / "audit")
    assert f"{cell['calibration']} is a hand-eye calibration" in message
    assert "holds no model of the arm" in message and "ISO 9283" in message
    assert not (tmp_path / "audit").exists()
    # Commands that need the arm's kinematics say why too.
    joints = tmp_path / "q.csv"
    joints.write_text("name,joint1\np,0.0\n")
    message = fails("predict", cell["calibration"], "--joints", joints)
    assert "calibration.yaml: a hand-eye calibration" in message and "no model of the arm's kinematics" in message


def test_a_camera_bumped_since_the_calibration_fails(cell, tmp_path):
    import yaml

    bumped = tmp_path / "cal"
    shutil.copytree(cell["calibration"], bumped)
    document = yaml.safe_load((bumped / "calibration.yaml").read_text())
    pose = np.array(document["cameras"]["camera"]["base_T_camera"])
    pose[:3, 3] += [0.005, 0.0, 0.0]  # 5 mm sideways: about 3 px on the photos
    document["cameras"]["camera"]["base_T_camera"] = pose.tolist()
    (bumped / "calibration.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    run = invoke("validate", bumped, cell["second"], "--json", "--require-pass")
    assert run.exit_code == 1, run.output
    result = json.loads(run.output)
    assert result["verdict"]["result"] == "FAIL" and result["reprojection_rms_px"] > 2 * result["floor_px"]
