"""Is my calibration good? Every judging command ends with PASS, FAIL or CANNOT TELL and the reason.

The simulated iiwa's tracker states its uncertainty (ISO 10360-10 MPEs), so the default tolerance
is twice the error the tracker alone gives (about 0.023 mm at 3 m): a full calibration reaches it
(cross-validated about 0.025 mm), a zero-offsets-only one cannot (over 1 mm), and a tolerance of
1 um is finer than the tracker can resolve (CANNOT TELL, not FAIL).
"""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from rigs.verdicts import CANNOT_TELL, FAIL, PASS, Tolerance, combine, judge
from selfcal.cli import app

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def verdict_of(result) -> dict:
    data = json.loads(result.output)
    verdict = data["verdict"]
    assert set(verdict) >= {"result", "reason", "tolerance"}
    assert list(data)[0] == "verdict"  # first, before the numbers
    return verdict


@pytest.fixture(scope="module")
def rig(capture_session, tmp_path_factory):
    """A calibration of the iiwa (40 poses), fresh poses, the crashed arm and an audit recording."""
    root = tmp_path_factory.mktemp("verdicts")
    fitted = capture_session("iiwa-tracker", 40, 1)
    calibration = root / "cal"
    result = invoke("calibrate", fitted, "--out", calibration)
    assert result.exit_code == 0, result.output
    plan = root / "audit.csv"
    assert invoke("audit", "plan", "--rig", "iiwa-tracker", "--cycles", "6", "--cube", "0.3", "--out", plan).exit_code == 0
    audit = root / "audit-session"
    assert invoke("capture", "--rig", "iiwa-tracker", "--plan", plan, "--seed", "3", "--out", audit).exit_code == 0
    return {"fitted": fitted, "calibration": calibration, "fresh": capture_session("iiwa-tracker", 30, 2),
            "crashed": capture_session("iiwa-tracker-crashed", 30, 5), "audit": audit}


# -- the one way a verdict is built ---------------------------------------------------------------

def test_a_figure_is_judged_against_its_tolerance_and_the_instruments_resolution():
    tolerance = Tolerance(0.05, "mm", "given with --tolerance-mm")
    assert judge("RMS", 0.04, tolerance, 0.02).result == PASS
    assert judge("RMS", 0.06, tolerance, 0.02).result == FAIL
    finer = Tolerance(0.01, "mm", "given")
    assert judge("RMS", 0.03, finer, 0.02).result == CANNOT_TELL  # the instrument alone gives 0.02 mm
    assert judge("RMS", None, tolerance, missing="no held-out poses").result == CANNOT_TELL
    both = combine([judge("a", 0.01, tolerance), judge("b", 0.09, tolerance), judge("c", None, tolerance)])
    assert both.result == FAIL and both.reason.startswith("b ")


# -- calibrate ------------------------------------------------------------------------------------

def test_calibrate_passes_at_the_trackers_noise_floor(rig, tmp_path):
    result = invoke("calibrate", rig["fitted"], "--out", tmp_path / "cal", "--json", "--require-pass")
    assert result.exit_code == 0, result.output
    verdict = verdict_of(result)
    assert verdict["result"] == PASS and "cross-validated" in verdict["reason"]
    assert verdict["tolerance"]["source"].startswith("default: 2 x the tracker's stated uncertainty")
    assert 0.03 < verdict["tolerance"]["value"] < 0.07
    page = (tmp_path / "cal" / "report.html").read_text()
    assert page.index("<strong>PASS</strong>") < page.index("Residuals")
    stored = yaml.safe_load((tmp_path / "cal" / "calibration.yaml").read_text())["verdict"]
    assert stored == verdict  # the calibration file carries what the command concluded


def test_calibrate_fails_when_the_model_cannot_explain_the_arm(rig, tmp_path):
    result = invoke("calibrate", rig["fitted"], "--out", tmp_path / "cal", "--model", "offsets", "--json",
                    "--require-pass")
    assert result.exit_code == 1, result.output
    verdict = verdict_of(result)
    assert verdict["result"] == FAIL and verdict["measured"] > 0.5
    assert (tmp_path / "cal" / "robot.urdf").is_file()  # written whatever the verdict
    assert yaml.safe_load((tmp_path / "cal" / "calibration.yaml").read_text())["verdict"]["result"] == FAIL


def test_calibrate_cannot_tell_below_what_the_tracker_resolves(rig, tmp_path):
    result = invoke("calibrate", rig["fitted"], "--out", tmp_path / "cal", "--tolerance-mm", "0.001", "--require-pass")
    assert result.exit_code == 3, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("CANNOT TELL:") and "finer than the tracker's stated uncertainty" in first


def test_a_tolerance_that_is_not_positive_is_refused(rig, tmp_path):
    result = invoke("calibrate", rig["fitted"], "--out", tmp_path / "cal", "--tolerance-mm", "-1")
    assert result.exit_code == 2 and "--tolerance-mm must be positive" in result.output
    assert not (tmp_path / "cal").exists()


# -- validate -------------------------------------------------------------------------------------

def test_validate_passes_on_fresh_poses_and_fails_on_the_crashed_arm(rig):
    result = invoke("validate", rig["calibration"], rig["fresh"], "--json", "--require-pass")
    assert result.exit_code == 0, result.output
    assert verdict_of(result)["result"] == PASS
    result = invoke("validate", rig["calibration"], rig["crashed"], "--json", "--require-pass")
    assert result.exit_code == 1
    verdict = verdict_of(result)
    assert verdict["result"] == FAIL and verdict["measured"] > 3.0


def test_validating_on_the_fit_poses_says_it_cannot_tell(rig):
    result = invoke("validate", rig["calibration"], rig["fitted"], "--require-pass")
    assert result.exit_code == 3
    assert result.output.startswith("CANNOT TELL:") and "poses the calibration was fitted on" in result.output


# -- recalibrate ----------------------------------------------------------------------------------

def test_recalibrating_the_crashed_arm_passes_and_names_the_bend(rig, tmp_path):
    result = invoke("recalibrate", rig["crashed"], "--previous", rig["calibration"], "--out", tmp_path / "new",
                    "--json", "--require-pass")
    assert result.exit_code == 0, result.output
    verdict = verdict_of(result)
    assert verdict["result"] == PASS and "a bent lbr_iiwa_link_3" in verdict["reason"]
    assert "previous calibration's cross-validated RMS" in verdict["tolerance"]["source"]
    assert json.loads((tmp_path / "new" / "recalibration.json").read_text())["verdict"]["result"] == PASS
    assert yaml.safe_load((tmp_path / "new" / "calibration.yaml").read_text())["verdict"]["result"] == PASS


def test_recalibrating_zero_offsets_only_cannot_absorb_a_bend(rig, tmp_path):
    result = invoke("recalibrate", rig["crashed"], "--previous", rig["calibration"], "--out", tmp_path / "new",
                    "--model", "offsets", "--json", "--require-pass")
    assert result.exit_code == 1, result.output
    assert verdict_of(result)["result"] == FAIL


def test_recalibration_cannot_tell_below_the_instrument(rig, tmp_path):
    result = invoke("recalibrate", rig["crashed"], "--previous", rig["calibration"], "--out", tmp_path / "new",
                    "--tolerance-mm", "0.001", "--json")
    assert result.exit_code == 0, result.output  # without --require-pass a verdict never changes the status
    assert verdict_of(result)["result"] == CANNOT_TELL


# -- audit report ---------------------------------------------------------------------------------

def test_audit_passes_what_the_calibration_promised(rig, tmp_path):
    result = invoke("audit", "report", rig["audit"], "--calibration", rig["calibration"], "--out", tmp_path / "a",
                    "--json", "--require-pass")
    assert result.exit_code == 0, result.output
    verdict = verdict_of(result)
    assert verdict["result"] == PASS and "calibrated model" in verdict["reason"]
    assert json.loads((tmp_path / "a" / "audit.json").read_text())["verdict"]["result"] == PASS
    page = (tmp_path / "a" / "report.html").read_text()
    assert page.index("<strong>PASS</strong>") < page.index("Pose accuracy")


def test_audit_of_the_nominal_model_fails_a_half_millimetre_level(rig, tmp_path):
    result = invoke("audit", "report", rig["audit"], "--out", tmp_path / "a", "--ap-tolerance-mm", "0.5",
                    "--json", "--require-pass")
    assert result.exit_code == 1, result.output
    verdict = verdict_of(result)
    assert verdict["result"] == FAIL and "nominal model" in verdict["reason"]


def test_audit_without_an_acceptance_level_cannot_tell(rig, tmp_path):
    result = invoke("audit", "report", rig["audit"], "--out", tmp_path / "a", "--require-pass")
    assert result.exit_code == 3, result.output
    assert result.output.startswith("CANNOT TELL: no acceptance level")
