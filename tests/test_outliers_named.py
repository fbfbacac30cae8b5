"""Outliers are named wherever they are: a reflector knocked 18 mm off in a held-out pose is named
by `calibrate` (and kept in the held-out figures, where it belongs), one in a fitted pose is named
and left out, and `validate` names the tracker rows beyond its threshold, worst first."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from calib.fit.splits import holdout_rows
from capture.session import load_session
from selfcal.cli import app

runner = CliRunner()


def knock(session: Path, out: Path, pose: str, target: str, shift_m: float = 0.018) -> int:
    """A copy of ``session`` with one reflector reading moved by ``shift_m`` along x; returns its tracker.csv row."""
    shutil.copytree(session, out)
    rows = list(csv.reader((out / "tracker.csv").open()))
    for number, row in enumerate(rows[1:], start=2):
        if row[0] == pose and row[1] == target:
            row[2] = repr(float(row[2]) + shift_m)
            with (out / "tracker.csv").open("w", newline="") as stream:
                csv.writer(stream).writerows(rows)
            return number
    raise AssertionError((pose, target))


def test_a_bad_point_in_a_held_out_pose_is_named(iiwa_session, tmp_path):
    session = load_session(iiwa_session)
    fit, held = holdout_rows([len(session.pose_ids)], 0.2, 0)
    held_pose, fit_pose = session.pose_ids[int(held[0][0])], session.pose_ids[int(fit[0][3])]
    knocked = knock(iiwa_session, tmp_path / "s", held_pose, "smr2")
    shutil.copytree(tmp_path / "s", tmp_path / "s2")
    knock(tmp_path / "s2", tmp_path / "both", fit_pose, "smr1")
    result = runner.invoke(app, ["calibrate", str(tmp_path / "both"), "--out", str(tmp_path / "cal"), "--holdout", "0.2",
                                 "--deflection", "none", "--json"])
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    # The knocked points are named, far beyond the 5-sigma threshold; clean points of this seed stay
    # below 4.2 sigma, so anything else named would be a clean point near the threshold.
    held = {o["point"]: o for o in summary["holdout_outliers"]}
    assert held[f"{held_pose}/smr2"]["error_mm"] > 15  # the 18 mm knock, seen through the fitted model
    assert held[f"{held_pose}/smr2"]["residual_sigma"] > 50
    assert all(o["residual_sigma"] < 8 for name, o in held.items() if name != f"{held_pose}/smr2")
    fitted = {o["point"]: o for o in summary["outliers"]}
    assert fitted[f"{fit_pose}/smr1"]["residual_sigma"] > 50
    assert all(o["residual_sigma"] < 8 for name, o in fitted.items() if name != f"{fit_pose}/smr1")
    # Kept in the held-out statistics: they are the honest figure for unseen data.
    assert summary["residuals"]["holdout"]["max_mm"] > 15
    # The calibration file and the plain-text summary carry the names too.
    assert f"{held_pose}/smr2" in (tmp_path / "cal" / "calibration.yaml").read_text()
    text = runner.invoke(app, ["calibrate", str(tmp_path / "both"), "--out", str(tmp_path / "cal2"), "--holdout", "0.2",
                               "--deflection", "none"])
    assert f"outlier in a held-out pose: {held_pose}/smr2" in text.stdout
    assert knocked > 1


def test_validate_names_the_rows_beyond_the_threshold(iiwa_session, capture_session, tmp_path):
    result = runner.invoke(app, ["calibrate", str(iiwa_session), "--out", str(tmp_path / "cal"), "--holdout", "0",
                                 "--deflection", "none"])
    assert result.exit_code == 0, result.stderr
    check = capture_session("iiwa-tracker", 20, 7)
    row = knock(check, tmp_path / "check", "p0011", "smr3")
    result = runner.invoke(app, ["validate", str(tmp_path / "cal"), str(tmp_path / "check"), "--json"])
    assert result.exit_code == 0, result.stderr
    figures = json.loads(result.stdout)
    assert figures["max_mm"] > 15
    worst = figures["outliers"][0]
    assert (worst["row"], worst["pose"], worst["target"]) == (f"tracker.csv row {row}", "p0011", "smr3")
    assert worst["residual_sigma"] > 50
    # Clean points of this seed score below 4.2 sigma: anything else named is close to the threshold.
    assert all(o["residual_sigma"] < 8 for o in figures["outliers"][1:])
    text = runner.invoke(app, ["validate", str(tmp_path / "cal"), str(tmp_path / "check")])
    assert f"outlier: tracker.csv row {row} (pose p0011, target smr3)" in text.stdout
