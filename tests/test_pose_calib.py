"""Calibration from 6-DoF probe poses : a user whose tracker reports the full pose of a
probe on the tool calibrates the iiwa from those poses alone, checks the result on other poses,
and gets told plainly when the data cannot do it."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from calib.calibration import Calibration
from calib.calibrator import Calibrator
from calib.model.error_model import ErrorModel
from calib.model.poses import PoseSet
from calib.sensors.tracker_poses import PROBE, pose_blocks, pose_errors, register_poses
from calib.workflows.validate import validate
from capture.session import load_session
from rigs import load_rig
from rigs.errors import InputError
from rigs.kinematics import ArmModel
from rigs.transforms import exp6, invert, log6
from selfcal.cli import app

RIG = "iiwa-tracker6d"
DATA = Path(__file__).parent / "data" / "pose_calib"


@pytest.fixture(scope="module")
def fit_session(capture_session) -> Path:
    return capture_session(RIG, 60, 1)


@pytest.fixture(scope="module")
def check_session(capture_session) -> Path:
    return capture_session(RIG, 40, 2)


@pytest.fixture(scope="module")
def calibration(fit_session) -> Calibration:
    return rigid(holdout=0.0).fit([fit_session])


def rigid(**options) -> Calibrator:
    return Calibrator(deflection="none", **options)


def truth(session: Path) -> dict:
    return json.loads((session / "truth" / "parameters.json").read_text())


# -- the simulated 6-DoF tracker ----------------------------------------------------------------

def test_the_6dof_rig_is_the_same_arm_as_the_reflector_rig():
    from rigs.truth import draw_truth

    six, points = draw_truth(load_rig(RIG)), draw_truth(load_rig("iiwa-tracker"))
    np.testing.assert_array_equal(six.placement_deltas, points.placement_deltas)
    np.testing.assert_array_equal(six.zero_offsets, points.zero_offsets)
    tracker = load_rig(RIG).tracker
    assert tracker.kind == "6dof"
    np.testing.assert_allclose(tracker.pose_noise, [5e-5, np.radians(0.01)])


@pytest.mark.parametrize("lines, message", [
    ('kind = "laser"', "should be 'points' or '6dof'"),
    ('kind = "6dof"\npose_noise_mm = -0.1', "pose_noise_mm' should not be negative"),
    ('probe_xyz = [0.0, 0.0, 0.1]', "only for a 6-DoF tracker"),
    ('kind = "6dof"\nprobe_rpy_deg = [0.0, 90.0]', "probe_rpy_deg' should be a list of 3 numbers"),
])
def test_bad_6dof_tracker_keys_are_named(tmp_path, lines, message):
    text = (DATA / "iiwa-tracker6d-smr.toml").read_text()
    body = text.replace('kind = "6dof"\n', "").replace("pose_noise_mm = 0.05\n", "").replace(
        "probe_rpy_deg = [0.0, 0.0, 90.0]\n", "").replace("probe_xyz = [0.0, 0.03, 0.08]\n", "")
    body = body.replace("[tracker]\n", f"[tracker]\n{lines}\n")
    if "kind" not in lines:
        body = body.replace("pose_noise_deg = 0.01\n", "")
    path = tmp_path / "rig.toml"
    path.write_text(body)
    with pytest.raises(InputError, match=message):
        load_rig(path)


def test_capture_writes_probe_poses_with_the_stated_noise(fit_session):
    session = load_session(fit_session)
    assert session.tracker is None and not (fit_session / "tracker.csv").exists()
    poses = session.tracker_poses
    assert poses.pose_index.tolist() == list(range(60))
    np.testing.assert_allclose(poses.sigma_pos, 5e-5)
    np.testing.assert_allclose(poses.sigma_rot, np.radians(0.01))
    # Measured minus noise-free: 0.05 mm per axis (plus 5 um repeatability), 0.01 deg per axis.
    from calib.workflows.evaluation import pose_noise_floor

    floor_mm, floor_deg = pose_noise_floor(session)
    assert 0.07 < floor_mm < 0.11  # sqrt(3) * 0.05 = 0.087
    assert 0.013 < floor_deg < 0.022  # sqrt(3) * 0.01 = 0.017, plus the repeatability's share


def test_resumed_capture_has_each_probe_pose_once(tmp_path):
    from capture.simulate import capture_simulated, partial_path

    rig = load_rig(RIG)
    whole = capture_simulated(rig, 6, 3, tmp_path / "whole")
    out = tmp_path / "resumed"
    capture_simulated(rig, 6, 3, out)
    # Simulate an interruption after pose 3: the pose in flight left its probe row but no joints row.
    out.rename(partial_path(out))
    for name in ("joints.csv", "truth/joints_reached.csv"):
        lines = (partial_path(out) / name).read_text().splitlines()
        (partial_path(out) / name).write_text("\n".join(lines[:4]) + "\n")
    lines = (partial_path(out) / "tracker_poses.csv").read_text().splitlines()
    (partial_path(out) / "tracker_poses.csv").write_text("\n".join(lines[:5]) + "\n")
    capture_simulated(rig, 6, 3, out, resume=True)
    assert (out / "tracker_poses.csv").read_text() == (whole / "tracker_poses.csv").read_text()


# -- the pose observation model -----------------------------------------------------------------

def test_registration_recovers_both_frames_from_poses_alone():
    rng = np.random.default_rng(4)
    chain = ArmModel.from_urdf(load_rig(RIG).robot.urdf, "lbr_iiwa_link_0", "lbr_iiwa_link_7")
    tips = chain.base_T_tip_batch(rng.uniform(-2.0, 2.0, (12, chain.dof)))
    tracker_T_base = exp6(np.array([2.5, -1.0, 0.7, 0.3, -2.0, 1.0]))
    tip_T_probe = exp6(np.array([0.01, 0.03, 0.09, 0.2, -0.1, 1.5]))
    measured = tracker_T_base @ tips @ tip_T_probe
    found_base, found_probe = register_poses(tips, measured)
    np.testing.assert_allclose(found_base, tracker_T_base, atol=1e-9)
    np.testing.assert_allclose(found_probe, tip_T_probe, atol=1e-9)
    # Given the tracker (from reflectors), only the probe is solved.
    _, only_probe = register_poses(tips, measured, tracker_T_base=tracker_T_base)
    np.testing.assert_allclose(only_probe, tip_T_probe, atol=1e-9)


def test_pose_jacobian_matches_finite_differences(fit_session):
    session = load_session(fit_session)
    chain = ArmModel.from_urdf(session.urdf_path, session.base_link, session.tip_link)
    tips = chain.base_T_tip_batch(session.q)
    frame, probe = register_poses(tips, session.tracker_poses.tracker_T_probe)
    model = ErrorModel.for_sensors(chain, ["s0"], [], {"s0": frame}, "full", reference_tip_T_probe={PROBE: probe})
    block = pose_blocks(session, PoseSet(session.q, session.pose_ids, session.payload_kg), np.arange(10))
    theta = np.random.default_rng(0).normal(0.0, 1e-3, model.size)
    _, jacobian = block.evaluate(model, theta)
    numeric = np.empty_like(jacobian)
    for i in range(model.size):
        step = np.zeros(model.size)
        step[i] = 1e-7
        numeric[:, i] = (block.evaluate(model, theta + step, False)[0] - block.evaluate(model, theta - step, False)[0]) / 2e-7
    assert np.abs(jacobian - numeric).max() < 1e-6 * np.abs(jacobian).max()
    assert jacobian.shape == (60, 7 * 7 + 6 + 6)


# -- calibrating from poses ---------------------------------------------------------------------

def test_pose_only_session_calibrates_to_the_noise_floor(calibration, fit_session, check_session):
    figures = validate(calibration, load_session(check_session))
    assert figures["n"] == 40
    assert figures["nominal_rms_mm"] > 10 * figures["floor_rms_mm"]
    assert figures["rms_mm"] < 1.3 * figures["floor_rms_mm"]
    assert figures["angle_rms_deg"] < 1.3 * figures["floor_angle_rms_deg"]
    assert figures["nominal_angle_rms_deg"] > 4 * figures["floor_angle_rms_deg"]
    # The probe's mount comes out as the simulated truth where the data can tell it from the last
    # joint: across its axis (a shift along, or a turn about, the axis is the joint's own placement
    # and zero offset, which the fit reports as unidentifiable apart).
    true_probe = np.array(truth(fit_session)["tip_T_probe"])
    difference = log6(invert(true_probe) @ calibration.tip_T_probe[PROBE])  # probe z = tip z here
    assert np.abs(difference[:2]).max() < 0.03e-3
    assert np.degrees(np.abs(difference[3:5]).max()) < 0.003
    noise = calibration.summary["residuals"]["tracker_poses"]["noise"]
    assert noise == {"source": "stated"}
    assert 0.6 < calibration.summary["variance_factor"] < 1.6  # the stated noise explains the residuals


def test_the_fit_reads_measurements_not_truth(tmp_path, fit_session, calibration):
    blind = tmp_path / "blind"
    shutil.copytree(fit_session, blind)
    shutil.rmtree(blind / "truth")
    again = rigid(holdout=0.0).fit([blind])
    np.testing.assert_allclose(again.solve.theta, calibration.solve.theta, atol=1e-12)


def test_unstated_noise_is_estimated_from_the_residuals(tmp_path, fit_session, check_session, calibration):
    bare = tmp_path / "bare"
    shutil.copytree(fit_session, bare, ignore=shutil.ignore_patterns("truth"))
    rows = list(csv.reader((bare / "tracker_poses.csv").open()))
    with (bare / "tracker_poses.csv").open("w", newline="") as stream:
        csv.writer(stream).writerows([row[:8] for row in rows])
    manifest = json.loads((bare / "session.json").read_text())
    del manifest["sensors"]["tracker_poses"]["sigma_pos_m"], manifest["sensors"]["tracker_poses"]["sigma_rot_rad"]
    (bare / "session.json").write_text(json.dumps(manifest))
    estimated = rigid(holdout=0.0).fit([bare])
    noise = estimated.summary["pose_noise"]
    assert noise["source"] == "estimated"
    # 0.05 mm and 0.01 deg per axis, plus the arm's 5 um repeatability.
    assert 0.04e-3 < noise["sigma_pos_m"] < 0.065e-3
    assert 0.008 < np.degrees(noise["sigma_rot_rad"]) < 0.013
    stated = validate(calibration, load_session(check_session))
    figures = validate(estimated, load_session(check_session))
    assert figures["rms_mm"] < 1.05 * stated["rms_mm"]
    assert figures["angle_rms_deg"] < 1.05 * stated["angle_rms_deg"]


def test_too_few_poses_are_refused_with_the_number_needed(capture_session):
    session = capture_session(RIG, 8, 5)
    with pytest.raises(InputError, match=r"too few poses: 8 calibration poses give 48 measurements .* at least 12 "
                                         r"calibration poses are needed"):
        rigid(holdout=0.0).fit([session])


def test_points_and_poses_in_one_session_fit_together(capture_session, check_session):
    session = capture_session(str(DATA / "iiwa-tracker6d-smr.toml"), 40, 1)
    loaded = load_session(session)
    assert loaded.tracker is not None and loaded.tracker_poses is not None
    calibration = rigid(holdout=0.25).fit([session])
    residuals = calibration.summary["residuals"]
    assert residuals["holdout"]["n"] == 2 * 10  # reflector points lead the figures
    assert residuals["tracker_poses"]["holdout"]["n"] == 10
    assert sorted(calibration.targets) == ["smr1", "smr2"]
    names = {p.group for p in calibration.error_model.names}
    assert {"target", "probe"} <= names
    # Held-out poses of the session: the probe to within its noise, the reflectors to the tracker's.
    assert residuals["tracker_poses"]["holdout"]["rms_mm"] < 0.15
    assert residuals["holdout"]["rms_mm"] < 0.05


# -- the command line ----------------------------------------------------------------------------

def test_cli_calibrates_and_validates_a_pose_session(tmp_path, fit_session, check_session):
    runner = CliRunner()
    out = tmp_path / "cal"
    result = runner.invoke(app, ["calibrate", str(fit_session), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["residuals"]["tracker_poses"]["holdout"]["angle_rms_deg"] < 0.03
    loaded = Calibration.load(out)
    assert PROBE in loaded.tip_T_probe
    result = runner.invoke(app, ["validate", str(out), str(check_session), "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["rms_mm"] < 1.3 * figures["floor_rms_mm"]
    assert figures["angle_rms_deg"] < 1.3 * figures["floor_angle_rms_deg"]
    result = runner.invoke(app, ["validate", str(out), str(check_session)])
    assert "angle_rms=" in result.output and "floor_angle_rms=" in result.output
    # Deflection models work from probe poses as from reflector points.
    result = runner.invoke(app, ["calibrate", str(fit_session), "--out", str(tmp_path / "c2"), "--deflection",
                                 "compliance", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["deflection"] == "compliance"
    assert Calibration.load(tmp_path / "c2").compliance is not None


def test_imported_probe_poses_calibrate_like_the_recording(tmp_path, fit_session, calibration):
    """A user's export (mm, rotation vectors in degrees, joints in degrees) imports and fits the same."""
    session = load_session(fit_session)
    joints = tmp_path / "joints.csv"
    with joints.open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["pose", *session.joint_names])
        for pose, q in zip(session.pose_ids, session.q):
            writer.writerow([pose, *(repr(float(v)) for v in np.degrees(q))])
    poses = tmp_path / "poses.csv"
    with poses.open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["pose", "x", "y", "z", "rx", "ry", "rz", "sigma_pos", "sigma_rot"])
        for pose, transform in zip(session.pose_ids, session.tracker_poses.tracker_T_probe):
            rotvec = np.degrees(log6(transform)[3:])
            writer.writerow([pose, *(repr(float(v)) for v in transform[:3, 3] * 1000.0), *(repr(float(v)) for v in rotvec),
                             "0.05", "0.01"])
    out = tmp_path / "imported"
    result = CliRunner().invoke(app, ["import", "tracker", "--urdf", str(fit_session / "robot.urdf"),
                                      "--base-link", session.base_link, "--tip-link", session.tip_link,
                                      "--joints", str(joints), "--poses", str(poses), "--rotation", "rotvec",
                                      "--length-unit", "mm", "--angle-unit", "deg", "--out", str(out)])
    assert result.exit_code == 0, result.output
    imported = rigid(holdout=0.0).fit([out])
    for mine, theirs in ((imported.deltas, calibration.deltas), (imported.zero_offsets, calibration.zero_offsets)):
        np.testing.assert_allclose(mine, theirs, atol=1e-8)
    position, angle = pose_errors(imported.predict_probe(session.q), calibration.predict_probe(session.q))
    assert position.max() < 1e-8 and angle.max() < 1e-8


# -- payload columns reach the deflection model  ----------------------------------------

def test_imported_payload_column_reaches_the_compliance_model(tmp_path, capture_session):
    """Joint log with payload_kg and a plain tracker export, imported, calibrated with compliance: the
    payload changes the prediction, and the heavy poses are predicted better with their payload."""

    light = load_session(capture_session("iiwa-tracker-compliant", 30, 21, 0.0))
    heavy = load_session(capture_session("iiwa-tracker-compliant", 30, 22, 5.0))
    joints, points = tmp_path / "joints.csv", tmp_path / "points.txt"
    with joints.open("w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["pose", *light.joint_names, "payload_kg"])
        for prefix, session in (("l", light), ("h", heavy)):
            for pose, q, kg in zip(session.pose_ids, session.q, session.payload_kg):
                writer.writerow([prefix + pose, *(repr(float(v)) for v in np.degrees(q)), repr(float(kg))])
    lines = []
    for prefix, session in (("l", light), ("h", heavy)):
        tracker = session.tracker
        for row, target, xyz in zip(tracker.pose_index, tracker.targets, tracker.xyz):
            lines.append(f"{prefix}{session.pose_ids[row]}_{target} " + " ".join(f"{v * 1000.0:.6f}" for v in xyz))
    points.write_text("\n".join(lines) + "\n")
    out = tmp_path / "imported"
    result = CliRunner().invoke(app, ["import", "tracker", "--urdf", str(light.urdf_path), "--base-link", light.base_link,
                                      "--tip-link", light.tip_link, "--joints", str(joints), "--points", str(points),
                                      "--length-unit", "mm", "--angle-unit", "deg", "--payload-com", "0,0,80",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    imported = load_session(out)
    assert sorted(set(imported.payload_kg.tolist())) == [0.0, 5.0]
    calibration = Calibrator(deflection="compliance", holdout=0.0).fit([imported])
    assert calibration.compliance is not None
    rows = imported.payload_kg == 5.0
    q = imported.q[rows]
    loaded = calibration.predict(q, "smr1", payload_kg=5.0)
    empty = calibration.predict(q, "smr1", payload_kg=0.0)
    assert np.linalg.norm(loaded - empty, axis=1).max() > 0.05e-3  # 5 kg: tenths of a mm of sag
    tracker = imported.tracker
    measured = {int(p): xyz for p, t, xyz in zip(tracker.pose_index, tracker.targets, tracker.xyz) if t == "smr1"}
    truth_points = np.array([measured[int(r)] for r in np.flatnonzero(rows)])
    assert np.sqrt(np.mean(np.sum((loaded - truth_points) ** 2, axis=1))) < \
        0.7 * np.sqrt(np.mean(np.sum((empty - truth_points) ** 2, axis=1)))
