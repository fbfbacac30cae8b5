"""Kinematic calibration from tracker points: the story of a user calibrating an iiwa."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import yaml
import pinocchio as pin
import pytest
from typer.testing import CliRunner

from calib.calibration import Calibration
from calib.calibrator import Calibrator
from calib.fit.solver import RobustSolver
from calib.model.error_model import ErrorModel
from calib.model.poses import PoseSet
from calib.sensors.tracker_points import PointObservations, tracker_blocks, tracker_sqrt_information
from calib.workflows.evaluation import combination_z_scores
from calib.workflows.validate import validate
from capture.session import load_session
from rigs.errors import InputError
from rigs.kinematics import ArmModel
from selfcal.cli import app


@pytest.fixture(scope="module")
def fit_session(capture_session) -> Path:
    return capture_session("iiwa-tracker", 60, 1)


@pytest.fixture(scope="module")
def check_session(capture_session) -> Path:
    return capture_session("iiwa-tracker", 60, 2)


@pytest.fixture(scope="module")
def calibration(fit_session) -> Calibration:
    return Calibrator(deflection="none", holdout=0.0).fit([fit_session])


def rigid(**options) -> Calibrator:
    """The rigid kinematic fit (no deflection model)."""
    return Calibrator(deflection="none", **options)


def poses_of(session) -> PoseSet:
    return PoseSet(session.q, session.pose_ids, session.payload_kg)


def test_analytic_jacobian_matches_finite_differences(fit_session):
    session = load_session(fit_session)
    chain = ArmModel.from_urdf(session.urdf_path, session.base_link, session.tip_link)
    model = ErrorModel.for_sensors(chain, ["s0"], sorted(session.nominal_targets), {"s0": np.eye(4)})
    tracker = session.tracker
    block = PointObservations("s0", poses_of(session), tracker.pose_index[:12], tracker.targets[:12], tracker.xyz[:12],
                              tracker_sqrt_information(tracker.xyz[:12], (1e-5, 3e-7), (1.5e-5, 6e-6)),
                              ["x"] * 12)
    theta = model.initial_vector(session.nominal_targets) + np.random.default_rng(0).normal(0, 1e-3, model.size)
    _, jacobian = block.evaluate(model, theta)
    numeric = np.zeros_like(jacobian)
    for i in range(model.size):
        step = np.zeros(model.size)
        step[i] = 1e-7
        numeric[:, i] = (block.evaluate(model, theta + step, False)[0] - block.evaluate(model, theta - step, False)[0]) / 2e-7
    assert np.abs(jacobian - numeric).max() < 1e-6 * np.abs(jacobian).max()


def test_fit_recovers_the_true_arm_within_its_uncertainty(calibration, fit_session, check_session):
    result = calibration.solve
    ident = result.identifiability
    assert ident.rank == 37 and ident.free_count == 64  # 7 joints x 7 + tracker 6 + 3 reflectors x 3
    assert ident.condition_number < 100
    assert any("not separable" in d for d in ident.descriptions)
    assert np.mean(combination_z_scores(calibration, fit_session) <= 3.0) >= 0.9
    assert 0.6 < result.variance_factor < 1.6  # the noise model matches the tracker's MPE
    figures = validate(calibration, load_session(check_session))
    assert figures["rms_mm"] <= 1.15 * figures["floor_rms_mm"]
    assert figures["nominal_rms_mm"] > 20 * figures["rms_mm"]


def test_a_session_without_truth_calibrates_identically(calibration, fit_session, tmp_path):
    copy = tmp_path / "no-truth"
    shutil.copytree(fit_session, copy)
    shutil.rmtree(copy / "truth")
    again = rigid(holdout=0.0).fit([copy])
    assert np.array_equal(again.solve.theta, calibration.solve.theta)


def test_exported_urdf_reproduces_the_calibrated_model(calibration, check_session, tmp_path):
    import pybullet

    calibration.save(tmp_path)
    assert (tmp_path / "report.html").read_text().count("data:image/png;base64,") >= 2
    exported = ArmModel.from_urdf(tmp_path / "robot.urdf", "lbr_iiwa_link_0", "lbr_iiwa_link_7")
    q = np.random.default_rng(3).uniform(exported.lower, exported.upper, (50, exported.dof))
    difference = exported.base_T_tip_batch(q) - calibration.base_T_tip(q)
    assert np.abs(difference[:, :3, 3]).max() < 1e-9
    assert np.abs(difference[:, :3, :3]).max() < 1e-9
    client = pybullet.connect(pybullet.DIRECT)
    try:
        body = pybullet.loadURDF(str(tmp_path / "robot.urdf"), physicsClientId=client)
        assert pybullet.getNumJoints(body, physicsClientId=client) >= 7
    finally:
        pybullet.disconnect(client)
    loaded = Calibration.load(tmp_path)
    session = load_session(check_session)
    assert validate(loaded, session)["rms_mm"] == pytest.approx(validate(calibration, session)["rms_mm"], abs=1e-9)
    for name in calibration.targets:
        np.testing.assert_allclose(loaded.predict(q, name), calibration.predict(q, name), atol=1e-9)


def corrupt(session: Path, out: Path, fraction: float, jump: float, seed: int) -> list[str]:
    """Copy a session and move a fraction of its tracker points by ``jump`` m; returns their labels."""
    shutil.copytree(session, out)
    rows = list(csv.reader((out / "tracker.csv").open()))
    header, body = rows[0], rows[1:]
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(body), max(1, int(round(fraction * len(body)))), replace=False)
    for index in chosen:
        direction = rng.normal(size=3)
        direction *= jump / np.linalg.norm(direction)
        for axis, column in enumerate(("x", "y", "z")):
            body[index][header.index(column)] = repr(float(body[index][header.index(column)]) + float(direction[axis]))
    with (out / "tracker.csv").open("w", newline="") as stream:
        csv.writer(stream).writerows([header] + body)
    return sorted(f"{body[i][0]}/{body[i][1]}" for i in chosen)


def test_jumps_of_5_mm_are_flagged_and_do_not_spoil_the_fit(calibration, fit_session, check_session, tmp_path):
    corrupted = corrupt(fit_session, tmp_path / "corrupted", 0.03, 0.005, seed=4)
    robust = rigid(holdout=0.0).fit([tmp_path / "corrupted"])
    assert sorted(o["point"] for o in robust.summary["outliers"]) == corrupted
    clean = validate(calibration, load_session(check_session))["rms_mm"]
    assert validate(robust, load_session(check_session))["rms_mm"] <= 1.1 * clean


def test_offsets_model_fits_only_zero_offsets(fit_session):
    offsets = rigid(model="offsets", holdout=0.0).fit([fit_session])
    assert np.all(offsets.deltas == 0.0)
    assert offsets.summary["identifiability"]["parameters"] == 7 + 6 + 9
    assert offsets.summary["residuals"]["fit"]["rms_mm"] < offsets.summary["residuals"]["fit_nominal"]["rms_mm"]


def test_a_solver_that_cannot_converge_says_so(fit_session):
    calibrator = rigid(holdout=0.0)
    session = load_session(fit_session)
    chain = ArmModel.from_urdf(session.urdf_path, session.base_link, session.tip_link)
    block = tracker_blocks(session, poses_of(session))
    model = ErrorModel.for_sensors(chain, ["s0"], sorted(session.nominal_targets), {"s0": np.eye(4)})
    with pytest.raises(InputError, match="did not converge"):
        RobustSolver(max_evaluations=1).solve([block], model, model.initial_vector(session.nominal_targets))
    assert calibrator.holdout == 0.0


# -- the command line --------------------------------------------------------------------------

runner = CliRunner()


def test_calibrate_and_validate_from_the_command_line(fit_session, check_session, tmp_path):
    out = tmp_path / "cal"
    result = runner.invoke(app, ["calibrate", str(fit_session), "--out", str(out), "--holdout", "0.2", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["residuals"]["poses"] == {"fit": 48, "holdout": 12}
    assert summary["residuals"]["holdout"]["rms_mm"] < 0.05
    result = runner.invoke(app, ["validate", str(out), str(check_session), "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert set(figures) == {"n", "mean_mm", "rms_mm", "max_mm", "p95_mm", "nominal_rms_mm", "floor_rms_mm",
                            "outlier_sigma", "outliers", "envelope_warning", "verdict"}
    assert figures["verdict"]["result"] == "PASS"
    assert figures["n"] == 180 and figures["rms_mm"] < 1.2 * figures["floor_rms_mm"]


def _fails(arguments: list[str], out: Path, words: str) -> None:
    result = runner.invoke(app, arguments)
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert "Traceback" not in result.output
    assert not out.exists()
    assert not list(out.parent.glob(f".{out.name}*"))


def test_too_few_poses_says_how_many_are_needed(capture_session, tmp_path):
    small = capture_session("iiwa-tracker", 6, 5)
    out = tmp_path / "cal"
    _fails(["calibrate", str(small), "--out", str(out), "--holdout", "0"], out, "calibration poses are needed")


def test_a_tip_link_outside_the_chain_is_refused(fit_session, tmp_path):
    out = tmp_path / "cal"
    _fails(["calibrate", str(fit_session), "--out", str(out), "--tip-link", "no_such_link"], out, "no_such_link")


def test_sessions_of_different_robots_are_refused(fit_session, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(fit_session, other)
    manifest = json.loads((other / "session.json").read_text())
    text = (other / "robot.urdf").read_text()
    (other / "robot.urdf").write_text(text.replace('name="lbr_iiwa_joint_4"', 'name="elbow"')
                                      .replace("lbr_iiwa_joint_4<", "elbow<"))
    manifest["robot"]["joint_names"][3] = "elbow"
    (other / "session.json").write_text(json.dumps(manifest))
    joints = (other / "joints.csv").read_text().replace("lbr_iiwa_joint_4", "elbow", 1)
    (other / "joints.csv").write_text(joints)
    out = tmp_path / "cal"
    _fails(["calibrate", str(fit_session), str(other), "--out", str(out)], out, "different robot")


def test_a_degenerate_pose_set_is_reported_and_refused_only_when_asked(tmp_path):
    from capture.poses import Plan
    from capture.simulate import capture_simulated
    from rigs import load_rig

    rng = np.random.default_rng(0)
    q = np.array([0.3, 0.5, -0.2, -1.2, 0.4, 0.8, 0.1]) + rng.normal(0, 0.01, (30, 7))
    session = capture_simulated(load_rig("iiwa-tracker"), 0, 1, tmp_path / "same",
                                plan=Plan([f"p{i:04d}" for i in range(30)], q, {}))
    out = tmp_path / "cal"
    _fails(["calibrate", str(session), "--out", str(out), "--holdout", "0", "--require-full"], out,
           "degenerate pose set (--require-full)")
    result = runner.invoke(app, ["calibrate", str(session), "--out", str(out), "--deflection", "none"])
    assert result.exit_code == 0, result.output
    assert "partial excitation: partial pose set" in result.output
    document = yaml.safe_load((out / "calibration.yaml").read_text())
    assert document["identifiability"]["full"] is False
    assert any(s.startswith("partial pose set") for s in document["identifiability"]["not_excited"])


def test_two_sessions_of_one_arm_fit_together_with_a_tracker_pose_each(fit_session, check_session, capture_session):
    third = capture_session("iiwa-tracker", 60, 3)
    joint = rigid(holdout=0.0).fit([fit_session, third])
    assert list(joint.tracker_T_base) == ["s0", "s1"]
    assert joint.summary["residuals"]["poses"]["fit"] == 120
    figures = validate(joint, load_session(check_session))
    assert figures["rms_mm"] <= 1.1 * figures["floor_rms_mm"]


def test_moving_the_tracker_does_not_move_the_arms_calibration(calibration, fit_session, tmp_path):
    """What no measurement sees (a turn of joint 1 against a turn of the tracker about the base's z)
    keeps the URDF's value: the same arm, seen by the tracker turned 35 degrees on its stand (about
    its own origin, so every point keeps its distance and noise), calibrates the same."""
    from rigs.transforms import exp6 as make_pose

    moved = tmp_path / "moved"
    shutil.copytree(fit_session, moved)
    shutil.rmtree(moved / "truth")
    setup = make_pose(np.array([0.0, 0.0, 0.0, 0.05, -0.02, 0.6]))
    rows = list(csv.reader((moved / "tracker.csv").open()))
    header, body = rows[0], rows[1:]
    columns = [header.index(c) for c in "xyz"]
    for row in body:
        point = setup[:3, :3] @ np.array([float(row[c]) for c in columns]) + setup[:3, 3]
        for c, value in zip(columns, point):
            row[c] = repr(float(value))
    with (moved / "tracker.csv").open("w", newline="") as stream:
        csv.writer(stream).writerows([header] + body)
    again = rigid(holdout=0.0).fit([moved])
    np.testing.assert_allclose(again.deltas, calibration.deltas, atol=1e-9)
    np.testing.assert_allclose(again.zero_offsets, calibration.zero_offsets, atol=1e-9)
    np.testing.assert_allclose(again.tracker_T_base["s0"], setup @ calibration.tracker_T_base["s0"], atol=1e-9)
