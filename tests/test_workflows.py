"""After a crash: plan few informative poses, recalibrate from the old calibration, name the damage."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from selfcal.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def old_calibration(capture_session, tmp_path_factory):
    out = tmp_path_factory.mktemp("workflows") / "cal"
    session = capture_session("iiwa-tracker", 60, 1)
    result = runner.invoke(app, ["calibrate", str(session), "--out", str(out), "--holdout", "0"])
    assert result.exit_code == 0, result.output
    return out


def test_optimal_plan_is_more_informative_than_random(old_calibration, tmp_path):
    plan = tmp_path / "plan.csv"
    result = runner.invoke(app, ["plan", "--rig", "iiwa-tracker", "--poses", "30", "--optimal", "--candidates", "400",
                                 "--calibration", str(old_calibration), "--out", str(plan), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["log_det"] > summary["random_log_det_median"]
    rows = list(csv.DictReader(open(plan)))
    assert len(rows) == 30 and len({r["pose"] for r in rows}) == 30


def test_a_bent_link_is_found_and_named(old_calibration, capture_session, tmp_path):
    """A 2 degree bend of link 3 (iiwa-tracker-crashed) is named first, as joint 4's placement."""
    crashed = capture_session("iiwa-tracker-crashed", 30, 5)
    result = runner.invoke(app, ["recalibrate", str(crashed), "--previous", str(old_calibration),
                                 "--out", str(tmp_path / "new"), "--json"])
    assert result.exit_code == 0, result.output
    comparison = json.loads(result.output)
    damage = json.loads((crashed / "truth" / "damage.json").read_text())
    first = comparison["changed"][0]
    assert first["joint"] == damage["joint"] == "lbr_iiwa_joint_4"
    assert first["parameter"] == "rotation_x" and first["change"] == pytest.approx(2.0, abs=0.05)
    assert first["significance"] > 100
    assert "a bent lbr_iiwa_link_3" in comparison["summary"][0]
    assert comparison["single_joint_explanations"][0]["joint"] == "lbr_iiwa_joint_4"
    assert comparison["accuracy"]["before_rms_mm"] > 3.0
    assert comparison["accuracy"]["after_holdout_rms_mm"] < 0.05
    assert (tmp_path / "new" / "robot.urdf").is_file() and (tmp_path / "new" / "recalibration.json").is_file()


def test_an_unchanged_arm_reports_no_damage(old_calibration, capture_session, tmp_path):
    healthy = capture_session("iiwa-tracker", 30, 6)
    result = runner.invoke(app, ["recalibrate", str(healthy), "--previous", str(old_calibration),
                                 "--out", str(tmp_path / "new"), "--json"])
    assert result.exit_code == 0, result.output
    comparison = json.loads(result.output)
    assert all(c["change"] < 0.01 if c["unit"] == "deg" else c["change"] < 0.05 for c in comparison["changed"])
    assert not any("bent" in sentence for sentence in comparison["summary"])


def test_previous_calibration_of_another_robot_is_refused(old_calibration, capture_session, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(old_calibration, other)
    for name in ("robot.urdf", "calibration.yaml"):
        path = other / name
        path.write_text(path.read_text().replace("lbr_iiwa_joint_", "kr_axis_"))
    result = runner.invoke(app, ["recalibrate", str(capture_session("iiwa-tracker", 30, 6)), "--previous", str(other),
                                 "--out", str(tmp_path / "new")])
    assert result.exit_code == 2
    assert "another robot" in result.output
    assert not (tmp_path / "new").exists()
