"""Deflection: a user whose iiwa sags under its payload calibrates it, predicts, and compensates a program."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from calib.calibration import Calibration
from calib.calibrator import Calibrator
from calib.deflection.residual_model import ResidualConfig, ResidualEnsemble, ResidualModel
from calib.deflection.torques import gravity_torques
from calib.model.error_model import ErrorModel
from calib.model.poses import PoseSet
from calib.sensors.tracker_points import tracker_blocks
from calib.workflows.validate import validate
from capture.session import load_session
from rigs.kinematics import ArmModel
from selfcal.cli import app

RIG = "iiwa-tracker-compliant"
runner = CliRunner()


@pytest.fixture(scope="module")
def fit_sessions(capture_session) -> list[Path]:
    """40 poses without payload and 40 with 3 kg."""
    return [capture_session(RIG, 40, 31, 0.0), capture_session(RIG, 40, 32, 3.0)]


@pytest.fixture(scope="module")
def check_session(capture_session) -> Path:
    return capture_session(RIG, 40, 33, 3.0)


@pytest.fixture(scope="module")
def calibrated(fit_sessions, tmp_path_factory) -> Path:
    """`selfcal calibrate` with the default --deflection auto."""
    out = tmp_path_factory.mktemp("deflection") / "cal"
    result = runner.invoke(app, ["calibrate", *map(str, fit_sessions), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    return out


def _true_stiffness(session: Path) -> np.ndarray:
    return np.array(json.loads((session / "truth" / "parameters.json").read_text())["stiffness_nm_per_rad"])


def test_compliance_columns_match_finite_differences(fit_sessions):
    session = load_session(fit_sessions[1])
    chain = ArmModel.from_urdf(session.urdf_path, session.base_link, session.tip_link)
    model = ErrorModel.for_sensors(chain, ["s0"], sorted(session.nominal_targets), {"s0": np.eye(4)}, compliance=True)
    torques = gravity_torques(chain, session.q, session.payload_kg, session.payload_com)
    block = tracker_blocks(session, PoseSet(session.q, session.pose_ids, session.payload_kg, torques=torques), np.arange(5))
    theta = model.initial_vector(session.nominal_targets)
    theta[model.compliance_slice] = 5e-6
    _, jacobian = block.evaluate(model, theta)
    columns = np.arange(model.compliance_slice.start, model.compliance_slice.stop)
    for column in columns:
        step = np.zeros(model.size)
        step[column] = 1e-9
        numeric = (block.evaluate(model, theta + step, False)[0] - block.evaluate(model, theta - step, False)[0]) / 2e-9
        assert np.allclose(jacobian[:, column], numeric, rtol=1e-5, atol=1e-6 * np.abs(jacobian).max())


def test_auto_finds_the_sag_and_recovers_the_stiffness_order_of_magnitude(calibrated, fit_sessions, check_session):
    calibration = Calibration.load(calibrated)
    assert calibration.deflection["mode"] in ("compliance", "both")
    table = calibration.deflection["heldout_comparison"]
    assert set(table) == {"none", "compliance", "learned", "both"}
    assert table["compliance"]["rms_mm"] < 0.5 * table["none"]["rms_mm"]
    stiffness = _true_stiffness(fit_sessions[0])
    # Joints 2 and 4 carry the large gravity torques: their compliance is well determined.
    for joint in (1, 3):
        assert 0.5 < calibration.compliance[joint] * stiffness[joint] < 2.0
    # Joint 1's axis is vertical: it holds no gravity torque, so its compliance is not identifiable.
    assert calibration.compliance[0] == 0.0
    figures = validate(calibration, load_session(check_session))
    assert figures["rms_mm"] < 1.5 * figures["floor_rms_mm"]
    document = yaml.safe_load((calibrated / "calibration.yaml").read_text())
    assert "rigid geometry only" in document["deflection"]["note"]
    assert "Deflection:" in (calibrated / "report.html").read_text()


def test_the_fit_reads_no_truth(fit_sessions, tmp_path):
    copies = []
    for session in fit_sessions:
        copy = tmp_path / session.name
        shutil.copytree(session, copy, ignore=shutil.ignore_patterns("truth"))
        copies.append(copy)
    with_truth = Calibrator(deflection="compliance", seed=0).fit(fit_sessions)
    without = Calibrator(deflection="compliance", seed=0).fit(copies)
    assert np.array_equal(with_truth.compliance, without.compliance)


def _synthetic(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    features = rng.uniform(-1.0, 1.0, (count, 4))
    residuals = 5e-5 * np.stack([features[:, 0], features[:, 1] * features[:, 2], np.sin(features[:, 3])], axis=1)
    return features, residuals


@pytest.fixture(scope="module")
def synthetic_model() -> ResidualModel:
    features, residuals = _synthetic(np.random.default_rng(0), 200)
    return ResidualEnsemble(ResidualConfig(members=4, epochs=300, seed=3)).fit(features, residuals)


def test_the_ensemble_learns_inside_its_data(synthetic_model):
    features, residuals = _synthetic(np.random.default_rng(1), 100)
    correction, spread, shrink = synthetic_model.predict(features)
    before = np.sqrt(np.mean(np.sum(residuals ** 2, axis=1)))
    after = np.sqrt(np.mean(np.sum((residuals - correction) ** 2, axis=1)))
    assert after < 0.5 * before
    assert np.median(shrink) > 0.5


def test_far_from_the_data_the_correction_shrinks_to_zero(synthetic_model):
    far = np.array([[6.0, -6.0, 6.0, 6.0]])  # six times the training range
    raw = synthetic_model.raw(far).mean(axis=0)
    correction, spread, shrink = synthetic_model.predict(far)
    assert np.linalg.norm(raw) > 1e-6  # the bare networks do claim a correction there
    assert shrink.max() < 1e-3
    assert np.linalg.norm(correction) < 1e-3 * np.linalg.norm(raw)


def test_corrections_never_exceed_the_learned_bound(synthetic_model):
    # Switch the distance guard off to see the clip alone act on an extrapolating query.
    unguarded = replace(synthetic_model, reference_distance=1e9)
    queries = np.random.default_rng(2).uniform(-8.0, 8.0, (200, 4))
    raw = np.linalg.norm(unguarded.raw(queries).mean(axis=0), axis=1)
    correction, _, _ = unguarded.predict(queries)
    assert raw.max() > synthetic_model.bound_m  # the networks extrapolate past anything seen...
    assert np.linalg.norm(correction, axis=1).max() <= synthetic_model.bound_m * (1 + 1e-12)  # ...the clip holds


def test_training_is_deterministic(synthetic_model):
    features, residuals = _synthetic(np.random.default_rng(0), 200)
    again = ResidualEnsemble(ResidualConfig(members=4, epochs=300, seed=3)).fit(features, residuals)
    queries = np.random.default_rng(5).uniform(-1, 1, (20, 4))
    assert np.array_equal(again.predict(queries)[0], synthetic_model.predict(queries)[0])


def test_a_saved_learned_calibration_reloads_and_predicts_the_same(fit_sessions, check_session, tmp_path):
    calibration = Calibrator(deflection="both", seed=0, residual=ResidualConfig(members=3, epochs=200)).fit(fit_sessions)
    assert calibration.residual_model is not None
    calibration.save(tmp_path)
    loaded = Calibration.load(tmp_path)
    session = load_session(check_session)
    for payload in (0.0, 3.0, 6.0):
        expected = calibration.predict(session.q, "smr1", payload_kg=payload)
        assert np.allclose(loaded.predict(session.q, "smr1", payload_kg=payload), expected, atol=1e-12, rtol=0)
    assert loaded.deflection["mode"] == "both"
    assert (tmp_path / "residual" / "residual.pt").is_file()


def _csv(path: Path, header: list[str], rows: list[list]) -> Path:
    path.write_text(",".join(header) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def test_predict_then_correct_round_trip(calibrated, check_session, tmp_path):
    session = load_session(check_session)
    joints = _csv(tmp_path / "J.csv", ["name", *session.joint_names, "payload_kg"],
                  [[f"r{i}", *session.q[i], 3.0] for i in range(4)])
    result = runner.invoke(app, ["predict", str(calibrated), "--joints", str(joints), "--json"])
    assert result.exit_code == 0, result.output
    points = json.loads(result.output)["points"]
    assert len(points) == 4 * 4  # tip and three reflectors per row
    assert all(0 < p["std_z"] < 5e-5 for p in points)
    # The predicted tracker points are where the tracker saw them (within noise).
    calibration = Calibration.load(calibrated)
    smr1 = [p for p in points if p["point"] == "smr1"]
    tracker = calibration.tracker_T_base["s0"]
    predicted = np.array([[p["x"], p["y"], p["z"]] for p in smr1]) @ tracker[:3, :3].T + tracker[:3, 3]
    wanted = np.array([[p["x"], p["y"], p["z"]] for p in smr1])
    assert np.allclose(predicted, calibration.predict(session.q[:4], "smr1", payload_kg=3.0), atol=1e-9)
    # Seeded by the recorded joints, correct finds them again: they put smr1 where predict said.
    targets = _csv(tmp_path / "T.csv", ["name", "x", "y", "z", "target", "payload_kg", *session.joint_names],
                   [[f"r{i}", *wanted[i], "smr1", 3.0, *(session.q[i] + 0.01)] for i in range(4)])
    out = tmp_path / "q.csv"
    result = runner.invoke(app, ["correct", str(calibrated), "--targets", str(targets), "--json", "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["rows"]
    assert max(r["residual_m"] for r in rows) < 1e-7
    assert out.is_file() and len(out.read_text().splitlines()) == 5
    # Position-only IK of 7 joints is redundant; what must hold is the point, checked with the model.
    q = np.array([r["q"] for r in rows])
    assert np.allclose(calibration.predict(q, "smr1", payload_kg=3.0),
                       calibration.predict(session.q[:4], "smr1", payload_kg=3.0), atol=1e-6)


@pytest.mark.parametrize("case, words", [
    ("missing-joint", "joint column 'lbr_iiwa_joint_7' is missing"),
    ("bad-number", "is not a number"),
    ("negative-payload", "--payload must not be negative"),
])
def test_predict_rejects_bad_input(calibrated, tmp_path, case, words):
    names = [f"lbr_iiwa_joint_{i}" for i in range(1, 8)]
    arguments = []
    if case == "missing-joint":
        joints = _csv(tmp_path / "J.csv", ["name", *names[:6]], [["a", 0, 0, 0, 0, 0, 0]])
    elif case == "bad-number":
        joints = _csv(tmp_path / "J.csv", ["name", *names], [["a", 0, 0, "zero", 0, 0, 0, 0]])
    else:
        joints = _csv(tmp_path / "J.csv", ["name", *names], [["a", 0, 0, 0, 0, 0, 0, 0]])
        arguments = ["--payload", "-1"]
    result = runner.invoke(app, ["predict", str(calibrated), "--joints", str(joints), *arguments])
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("case, words", [
    ("unknown-target", "target 'smr9' is not a reflector"),
    ("no-header", "header lacks column 'x'"),
    ("partial-seed", "seed joint column"),
])
def test_correct_rejects_bad_input(calibrated, tmp_path, case, words):
    if case == "unknown-target":
        targets = _csv(tmp_path / "T.csv", ["name", "x", "y", "z", "target"], [["a", 0.5, 0.0, 0.6, "smr9"]])
    elif case == "no-header":
        targets = _csv(tmp_path / "T.csv", ["name", "y", "z"], [["a", 0.0, 0.6]])
    else:
        targets = _csv(tmp_path / "T.csv", ["name", "x", "y", "z", "lbr_iiwa_joint_1"], [["a", 0.5, 0.0, 0.6, 0.1]])
    result = runner.invoke(app, ["correct", str(calibrated), "--targets", str(targets)])
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output


def test_calibrate_rejects_an_unknown_deflection_model(fit_sessions, tmp_path):
    out = tmp_path / "cal"
    result = runner.invoke(app, ["calibrate", str(fit_sessions[0]), "--out", str(out), "--deflection", "magic"])
    assert result.exit_code == 2 and "'--deflection'" in result.output and "'magic' is not one of 'auto', 'none', 'compliance', 'learned', 'both'" in result.output
    assert not out.exists()


def test_a_damaged_residual_file_is_refused(fit_sessions, tmp_path):
    calibration = Calibrator(deflection="learned", seed=0, residual=ResidualConfig(members=2, epochs=50)).fit(fit_sessions)
    calibration.save(tmp_path)
    (tmp_path / "residual" / "residual.pt").write_bytes(b"not a torch file")
    joints = _csv(tmp_path / "J.csv", ["name", *calibration.joint_names], [["a", 0, 0.3, 0, -1.0, 0, 0.5, 0]])
    result = runner.invoke(app, ["predict", str(tmp_path), "--joints", str(joints)])
    assert result.exit_code == 2, result.output
    assert "residual.pt" in result.output and "Traceback" not in result.output


def test_residuals_that_are_only_noise_teach_nothing():
    rng = np.random.default_rng(4)
    features = rng.uniform(-1.0, 1.0, (150, 6))
    noise = rng.normal(0.0, 1e-5, (150, 3))
    model = ResidualEnsemble(ResidualConfig(members=5, epochs=300, seed=1)).fit(features, noise)
    assert model.gain < 0.3
    correction, _, _ = model.predict(rng.uniform(-1.0, 1.0, (100, 6)))
    assert np.sqrt(np.mean(np.sum(correction ** 2, axis=1))) < 0.3 * np.sqrt(np.mean(np.sum(noise ** 2, axis=1)))
