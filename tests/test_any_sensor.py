"""Whatever the sensor, the same calibration: a user whose tracker reports a probe's pose, or whose
cameras see a board on the flange, gets joint compliance, files that read back, recalibration and
validation exactly like a user with reflectors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from calib.calibration import Calibration
from calib.calibrator import Calibrator
from calib.workflows.validate import corner_errors, validate, validate_corners
from capture.session import load_session
from selfcal.cli import app

DATA = Path(__file__).parent / "data"
PROBE_RIG = str(DATA / "iiwa-tracker6d-compliant.toml")
CAMERA_RIG = str(DATA / "xarm6-cameras-compliant.toml")
runner = CliRunner()


def _stiffness(session: Path) -> np.ndarray:
    return np.array(json.loads((session / "truth" / "parameters.json").read_text())["stiffness_nm_per_rad"])


# -- a 6-DoF probe ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def probe_sessions(capture_session) -> list[Path]:
    """40 probe poses without payload and 40 with 3 kg, of an arm whose joints give."""
    return [capture_session(PROBE_RIG, 40, 41, 0.0), capture_session(PROBE_RIG, 40, 42, 3.0)]


@pytest.fixture(scope="module")
def probe_fits(probe_sessions):
    return {mode: Calibrator(deflection=mode, holdout=0.0).fit(probe_sessions) for mode in ("none", "compliance")}


def test_compliance_from_probe_poses_predicts_an_unseen_payload(probe_fits, probe_sessions, capture_session):
    unseen = load_session(capture_session(PROBE_RIG, 30, 43, 6.0))
    rigid, compliant = validate(probe_fits["none"], unseen), validate(probe_fits["compliance"], unseen)
    assert compliant["rms_mm"] < 0.7 * rigid["rms_mm"]
    assert compliant["rms_mm"] < 1.5 * compliant["floor_rms_mm"]
    assert compliant["angle_rms_deg"] < rigid["angle_rms_deg"]
    # Joints 2 and 4 carry the large gravity torques: their stiffness comes out to a factor of two.
    stiffness = _stiffness(probe_sessions[0])
    for joint in (1, 3):
        assert 0.5 < probe_fits["compliance"].compliance[joint] * stiffness[joint] < 2.0
    assert probe_fits["compliance"].compliance[0] == 0.0  # a vertical first axis holds no torque


def test_a_probe_calibration_with_compliance_reads_back_and_predicts_the_same(probe_fits, probe_sessions, tmp_path):
    fitted = probe_fits["compliance"]
    fitted.save(tmp_path)
    loaded = Calibration.load(tmp_path)
    session = load_session(probe_sessions[1])
    np.testing.assert_allclose(loaded.predict_probe(session.q, payload_kg=3.0),
                               fitted.predict_probe(session.q, payload_kg=3.0), atol=1e-9)
    np.testing.assert_allclose(loaded.compliance, fitted.compliance, rtol=1e-12)


def test_the_command_line_fits_deflection_from_probe_poses(probe_sessions, tmp_path):
    out = tmp_path / "cal"
    result = runner.invoke(app, ["calibrate", *map(str, probe_sessions), "--out", str(out), "--holdout", "0", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["sensors"] == ["tracker_poses"]
    assert summary["deflection"] in ("compliance", "both")
    table = summary["deflection_heldout_comparison"]
    assert table["compliance"]["rms_mm"] < 0.85 * table["none"]["rms_mm"]
    assert "cross-validation" in summary["residuals"]["validation"]["description"]


def test_a_probe_calibration_recalibrates_and_names_a_bent_link(probe_fits, tmp_path):
    from capture.simulate import capture_simulated
    from rigs import load_rig
    from rigs.spec import BendSpec
    from calib.workflows.recalibrate import recalibrate

    before = tmp_path / "before"
    before.mkdir()
    probe_fits["none"].save(before, report=False)
    rig = load_rig(PROBE_RIG)
    bent = dataclasses.replace(rig, truth=dataclasses.replace(rig.truth, stiffness=None, bends=(
        BendSpec("lbr_iiwa_link_3", np.radians(2.0), np.array([1.0, 0.0, 0.0])),)))
    crashed = capture_simulated(bent, 30, 7, tmp_path / "crashed")
    new, comparison = recalibrate([crashed], before, holdout=0.0)
    assert comparison["changed"][0]["joint"] == "lbr_iiwa_joint_4"
    assert "a bent lbr_iiwa_link_3" in comparison["summary"][0]
    assert comparison["accuracy"]["before_rms_mm"] > 10 * comparison["accuracy"]["after_holdout_rms_mm"]


# -- cameras ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def camera_sessions(capture_session) -> list[Path]:
    """24 poses of board images without payload and 24 with 2 kg, of an xArm6 whose joints give."""
    return [capture_session(CAMERA_RIG, 24, 61, 0.0), capture_session(CAMERA_RIG, 24, 62, 2.0)]


@pytest.fixture(scope="module")
def camera_fits(camera_sessions):
    return {mode: Calibrator(deflection=mode, holdout=0.0).fit(camera_sessions) for mode in ("none", "compliance")}


@pytest.mark.slow  # three camera sessions rendered and fitted with compliance: half a minute
def test_compliance_from_camera_images_predicts_an_unseen_payload(camera_fits, capture_session):
    unseen = load_session(capture_session(CAMERA_RIG, 16, 64, 4.0))
    rigid, compliant = validate_corners(camera_fits["none"], unseen), validate_corners(camera_fits["compliance"], unseen)
    assert compliant["board_centre_rms_mm"] < 0.6 * rigid["board_centre_rms_mm"]
    assert compliant["reprojection_rms_px"] < rigid["reprojection_rms_px"]


@pytest.mark.slow  # shares the camera fits above
def test_a_camera_only_calibration_reads_back_and_predicts_the_same(camera_fits, camera_sessions, tmp_path):
    fitted = camera_fits["compliance"]
    assert fitted.tracker_T_base == {} and fitted.targets == {}
    fitted.save(tmp_path)
    loaded = Calibration.load(tmp_path)
    session = load_session(camera_sessions[1])
    np.testing.assert_allclose(loaded.base_T_tip(session.q, 2.0), fitted.base_T_tip(session.q, 2.0), atol=1e-9)
    for name, pose in fitted.base_T_camera.items():
        np.testing.assert_allclose(loaded.base_T_camera[name], pose, atol=1e-12)
    np.testing.assert_allclose(corner_errors(loaded, session)[0], corner_errors(fitted, session)[0], atol=1e-6)
    assert loaded.board.describe() == fitted.board.describe() and loaded.intrinsics == fitted.intrinsics
