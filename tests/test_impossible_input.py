"""Physically impossible input is refused, not fitted.

A session whose tracker points are in millimetres, whose joints are in degrees or beyond the URDF's
limits, a plan beyond the limits, `correct` targets a kilometre away: one sentence naming the file,
the row and the likely unit mistake, exit 2, before any fit. The tolerances are the stated ones
(rigs/limits.py): 1 degree (2 mm) past a joint limit; points no farther apart than twice the arm's
reach plus the offsets plus 1 m. Data just inside them is accepted.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from bad_inputs import IIWA_JOINTS, edit_cell, scale_columns
from capture.session import load_session
from rigs.limits import ArmJoints
from selfcal.cli import app

runner = CliRunner()


def copied(session: Path, tmp_path: Path) -> Path:
    shutil.copytree(session, tmp_path / "s")
    return tmp_path / "s"


def calibrate(session: Path, tmp_path: Path):
    return runner.invoke(app, ["calibrate", str(session), "--out", str(tmp_path / "cal"), "--deflection", "none"])


def test_the_reach_comes_from_the_urdf_chain(iiwa_session):
    limits = ArmJoints.from_urdf(iiwa_session / "robot.urdf", "lbr_iiwa_link_0", "lbr_iiwa_link_7")
    # The LBR iiwa 7 reaches about 1.27 m from its base plate (0.34 + 0.4 + 0.4 + 0.126 m of links).
    assert 1.2 < limits.reach < 1.35


@pytest.mark.parametrize("factor, unit", [(1000.0, "millimetres"), (100.0, "millimetres or centimetres")])
def test_tracker_points_in_a_smaller_unit_are_refused_before_the_fit(iiwa_session, tmp_path, factor, unit):
    session = copied(iiwa_session, tmp_path)
    scale_columns(session / "tracker.csv", ["x", "y", "z"], factor)
    result = calibrate(session, tmp_path)
    assert result.exit_code == 2
    message = result.stderr
    assert str(session / "tracker.csv") in message and "row " in message and unit in message
    assert "holds metres" in message and not (tmp_path / "cal").exists()


def test_joint_angles_in_degrees_are_refused_with_the_row(iiwa_session, tmp_path):
    session = copied(iiwa_session, tmp_path)
    scale_columns(session / "joints.csv", IIWA_JOINTS, 180 / np.pi)
    result = calibrate(session, tmp_path)
    assert result.exit_code == 2
    assert "joints.csv: row 2, column 'lbr_iiwa_joint_1'" in result.stderr
    assert "the values look like degrees" in result.stderr


def test_a_joint_past_its_limit_is_refused_beyond_the_tolerance_only(iiwa_session, tmp_path):
    session = load_session(iiwa_session)
    limits = ArmJoints.from_urdf(iiwa_session / "robot.urdf", session.base_link, session.tip_link)
    upper = limits.upper[1]
    inside = copied(iiwa_session, tmp_path / "inside")
    edit_cell(inside / "joints.csv", 3, "lbr_iiwa_joint_2", repr(float(upper + np.deg2rad(0.5))))
    assert load_session(inside).q[3, 1] > upper  # half a degree past: encoder noise, accepted
    beyond = copied(iiwa_session, tmp_path / "beyond")
    edit_cell(beyond / "joints.csv", 3, "lbr_iiwa_joint_2", repr(float(upper + np.deg2rad(3.0))))
    result = calibrate(beyond, tmp_path)
    assert result.exit_code == 2
    assert "row 5, column 'lbr_iiwa_joint_2'" in result.stderr and "by more than 1 deg" in result.stderr


def test_a_plan_beyond_the_limits_is_refused_before_the_arm_moves(tmp_path):
    plan = tmp_path / "plan.csv"
    plan.write_text("pose," + ",".join(IIWA_JOINTS) + "\np0000,0,0.5,0,-1,0,1,0\np0001,0,0.5,0,-1,0,1,3.2\n")
    result = runner.invoke(app, ["capture", "--rig", "iiwa-tracker", "--plan", str(plan), "--out", str(tmp_path / "s")])
    assert result.exit_code == 2
    assert "plan.csv: row 3, column 'lbr_iiwa_joint_7'" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.csv"]


def test_correct_refuses_targets_out_of_reach_by_orders_of_magnitude(iiwa_session, tmp_path):
    result = runner.invoke(app, ["calibrate", str(iiwa_session), "--out", str(tmp_path / "cal"), "--holdout", "0",
                                 "--deflection", "none"])
    assert result.exit_code == 0, result.stderr
    targets = tmp_path / "targets.csv"
    targets.write_text("name,x,y,z\nnear,0.5,0.1,0.6\nfar,500,100,600\n")
    result = runner.invoke(app, ["correct", str(tmp_path / "cal"), "--targets", str(targets)])
    assert result.exit_code == 2
    assert "targets.csv: row 3" in result.stderr and "millimetres" in result.stderr
    targets.write_text("name,x,y,z\nnear,0.5,0.1,0.6\n")
    result = runner.invoke(app, ["correct", str(tmp_path / "cal"), "--targets", str(targets)])
    assert result.exit_code == 0, result.stderr
