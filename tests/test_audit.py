"""ISO 9283 audits: the plan, the figures against the standard's formulas, and bad sessions."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from calib.workflows import iso9283
from selfcal.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def audit_session(tmp_path_factory):
    folder = tmp_path_factory.mktemp("audit")
    plan = folder / "audit.csv"
    result = runner.invoke(app, ["audit", "plan", "--rig", "iiwa-tracker", "--cycles", "6", "--cube", "0.3", "--out", str(plan)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["capture", "--rig", "iiwa-tracker", "--plan", str(plan), "--seed", "3", "--out", str(folder / "s")])
    assert result.exit_code == 0, result.output
    return folder


def test_plan_has_iso_points_and_cycle_order(audit_session):
    rows = list(csv.DictReader(open(audit_session / "audit.csv")))
    assert len(rows) == 6 * 5
    assert [r["iso_pose"] for r in rows[:5]] == ["P1", "P5", "P4", "P3", "P2"]
    commanded = {r["iso_pose"]: np.array([float(r[k]) for k in ("cmd_x", "cmd_y", "cmd_z")]) for r in rows[:5]}
    # P2..P5 sit at 10 % of the plane's diagonal from its corners: 0.8 of the diagonal apart, centred on P1.
    diagonal = np.sqrt(2 * 0.3 ** 2 + 0.3 ** 2)
    assert np.linalg.norm(commanded["P2"] - commanded["P4"]) == pytest.approx(0.8 * diagonal, abs=1e-6)
    assert np.linalg.norm(commanded["P3"] - commanded["P5"]) == pytest.approx(0.8 * diagonal, abs=1e-6)
    np.testing.assert_allclose((commanded["P2"] + commanded["P4"]) / 2, commanded["P1"], atol=1e-6)
    # All five lie in one plane through the centre.
    normal = np.cross(commanded["P2"] - commanded["P1"], commanded["P3"] - commanded["P1"])
    assert abs(np.dot(normal / np.linalg.norm(normal), commanded["P5"] - commanded["P1"])) < 1e-6


def _kabsch(source, target):
    sc, tc = source.mean(0), target.mean(0)
    h = (source - sc).T @ (target - tc)
    u, _, vt = np.linalg.svd(h)
    d = np.sign(np.linalg.det(vt.T @ u.T))
    rotation = vt.T @ np.diag([1, 1, d]) @ u.T
    return rotation, tc - rotation @ sc


def test_report_equals_iso_formulas_from_raw_points(audit_session, tmp_path):
    """AP, RP, AD, RD recomputed here from tracker.csv with the standard's formulas, independently."""
    from capture.session import load_session
    from rigs.kinematics import ArmModel

    result = runner.invoke(app, ["audit", "report", str(audit_session / "s"), "--out", str(tmp_path / "r"), "--json",
                                 "--point", "tcp"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["measuring_point"]["kind"] == "tcp"
    assert (tmp_path / "r" / "report.html").read_text().count("<img") >= 2

    session = load_session(audit_session / "s")
    chain = ArmModel.from_urdf(session.urdf_path, session.base_link, session.tip_link)
    targets = session.nominal_targets
    names = sorted(targets)
    # Tracker frame registered on every point with the nominal model, as the report's nominal column.
    predicted = np.array([chain.base_T_frame(session.q[i])[:3, :3] @ targets[t] + chain.base_T_frame(session.q[i])[:3, 3]
                          for i, t in zip(session.tracker.pose_index, session.tracker.targets)])
    rotation, translation = _kabsch(predicted, session.tracker.xyz)
    positions = []
    for row in range(len(session.pose_ids)):
        mask = session.tracker.pose_index == row
        measured = {t: rotation.T @ (p - translation) for t, p in zip(np.array(session.tracker.targets)[mask], session.tracker.xyz[mask])}
        r, t = _kabsch(np.array([targets[n] for n in names]), np.array([measured[n] for n in names]))
        positions.append(t)
    positions = np.array(positions)
    labels = np.array(session.extra["iso_pose"])
    for entry in report["models"]["nominal"]["poses"]:
        rows = np.flatnonzero(labels == entry["pose"])
        x = positions[rows]
        commanded = chain.base_T_frame(session.q[rows[0]])[:3, 3]
        mean = x.sum(0) / len(x)
        ap = np.sqrt(((mean - commanded) ** 2).sum())
        l = np.sqrt(((x - mean) ** 2).sum(1))
        rp = l.mean() + 3 * np.sqrt(((l - l.mean()) ** 2).sum() / (len(l) - 1))
        assert entry["AP_mm"] == pytest.approx(ap * 1e3, abs=1e-6)
        assert entry["RP_mm"] == pytest.approx(rp * 1e3, abs=1e-6)
    p2, p4 = positions[labels == "P2"], positions[labels == "P4"]
    d = np.sqrt(((p2 - p4) ** 2).sum(1))
    dc = np.linalg.norm(chain.base_T_frame(session.q[np.flatnonzero(labels == "P2")[0]])[:3, 3]
                        - chain.base_T_frame(session.q[np.flatnonzero(labels == "P4")[0]])[:3, 3])
    assert report["models"]["nominal"]["AD_mm"] == pytest.approx((d.mean() - dc) * 1e3, abs=1e-6)
    assert report["models"]["nominal"]["RD_mm"] == pytest.approx(3 * d.std(ddof=1) * 1e3, abs=1e-6)
    # The nominal model misses by millimetres; the arm repeats to hundredths.
    assert max(e["AP_mm"] for e in report["poses"]) > 0.3
    assert max(e["RP_mm"] for e in report["poses"]) < 0.2


def test_the_measuring_point_defaults_to_a_reflector_read_directly(audit_session, tmp_path):
    """At a reflector the figures come from its raw points; registered points carry more of the
    tracker's noise (the lever arm), and the report says how much RP the tracker alone gives."""
    from capture.session import load_session

    result = runner.invoke(app, ["audit", "report", str(audit_session / "s"), "--out", str(tmp_path / "r"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["measuring_point"] == {"kind": "reflector", "name": "smr1", "tip_xyz_m": None,
                                         "description": "reflector smr1 (its centre, measured directly)"}
    session = load_session(audit_session / "s")
    labels = np.array(session.extra["iso_pose"])
    raw = session.tracker.xyz[np.array(session.tracker.targets) == "smr1"]  # tracker frame: RP is frame-free
    for entry in report["models"]["nominal"]["poses"]:
        x = raw[labels == entry["pose"]]
        l = np.linalg.norm(x - x.mean(axis=0), axis=1)
        assert entry["RP_mm"] == pytest.approx((l.mean() + 3 * l.std(ddof=1)) * 1e3, abs=1e-6)
    tcp = runner.invoke(app, ["audit", "report", str(audit_session / "s"), "--out", str(tmp_path / "t"), "--json",
                              "--point", "tcp"])
    tcp_poses = json.loads(tcp.output)["models"]["nominal"]["poses"]
    for at_reflector, at_tcp in zip(report["models"]["nominal"]["poses"], tcp_poses):
        assert 0.02 < at_reflector["RP_instrument_mm"] < at_tcp["RP_instrument_mm"] / 1.15
    text = runner.invoke(app, ["audit", "report", str(audit_session / "s"), "--out", str(tmp_path / "u"),
                               "--point", "0,0,150"]).output
    assert "measuring point: the point (0.0, 0.0, 150.0) mm in the tip frame" in text
    assert "(the tracker alone:" in text
    result = runner.invoke(app, ["audit", "report", str(audit_session / "s"), "--out", str(tmp_path / "v"),
                                 "--point", "smr9"])
    assert result.exit_code == 2 and "not tcp, X,Y,Z" in result.output and not (tmp_path / "v").exists()


def test_repeatability_formula_on_known_points():
    attained = np.array([[0.0, 0, 0], [2e-3, 0, 0], [0, 2e-3, 0], [1e-3, 1e-3, 0]])
    distances = np.linalg.norm(attained - attained.mean(0), axis=1)
    assert iso9283.pose_repeatability(attained) == pytest.approx(distances.mean() + 3 * distances.std(ddof=1))
    ap, offset = iso9283.pose_accuracy(attained, np.array([0.0, 0.0, 1e-3]))
    assert ap == pytest.approx(np.linalg.norm([0.75e-3, 0.75e-3, -1e-3]))


def test_session_that_does_not_follow_its_plan_is_refused(audit_session, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(audit_session / "s", broken)
    lines = (broken / "joints.csv").read_text().splitlines()
    cells = lines[7].split(",")
    cells[3] = str(float(cells[3]) + 0.01)
    lines[7] = ",".join(cells)
    (broken / "joints.csv").write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["audit", "report", str(broken), "--out", str(tmp_path / "r")])
    assert result.exit_code == 2
    assert "row 8" in result.output and "does not follow its plan" in result.output
    assert not (tmp_path / "r").exists()


def test_cube_that_does_not_fit_is_refused(tmp_path):
    result = runner.invoke(app, ["audit", "plan", "--rig", "iiwa-tracker", "--cube", "2.5", "--out", str(tmp_path / "a.csv")])
    assert result.exit_code == 2
    assert "does not fit the workspace" in result.output
    assert not (tmp_path / "a.csv").exists()


def test_an_audit_takes_a_calibration_fitted_from_probe_poses(audit_session, capture_session, tmp_path):
    """A calibration with no reflectors (a 6-DoF probe's, the same arm) commands the audit's poses;
    the audit's own reflectors are registered to it."""
    cal = tmp_path / "cal"
    probe = capture_session("iiwa-tracker6d", 40, 1)
    result = runner.invoke(app, ["calibrate", str(probe), "--out", str(cal), "--deflection", "none", "--holdout", "0"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["audit", "report", str(audit_session / "s"), "--calibration", str(cal),
                                 "--out", str(tmp_path / "r"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    nominal = max(e["AP_mm"] for e in report["models"]["nominal"]["poses"])
    calibrated = max(e["AP_mm"] for e in report["models"]["calibrated"]["poses"])
    assert calibrated < 0.3 * nominal
