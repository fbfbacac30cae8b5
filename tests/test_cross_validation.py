"""A small real calibration set: every pose goes into the delivered calibration, and the held-out
figure comes from cross-validation by pose, whose folds are disjoint, cover the set, and keep the
outliers the fit of every pose found."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from calib.calibrator import Calibrator
from calib.fit.solver import _levenberg_marquardt, fold_solutions
from calib.fit.splits import fold_count, fold_rows
from calib.sensors.blocks import keep_units, stack
from calib.workflows.validate import validate
from capture.session import load_session
from selfcal.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def small(capture_session) -> Path:
    return capture_session("iiwa-tracker", 24, 7)


@pytest.fixture(scope="module")
def corrupted(small, tmp_path_factory) -> tuple[Path, list[str]]:
    """The small session with four tracker points moved by 5 mm."""
    out = tmp_path_factory.mktemp("cv") / "corrupted"
    shutil.copytree(small, out)
    rows = list(csv.reader((out / "tracker.csv").open()))
    header, body = rows[0], rows[1:]
    chosen = [3, 17, 40, 61]
    for index in chosen:
        body[index][header.index("x")] = repr(float(body[index][header.index("x")]) + 0.005)
    with (out / "tracker.csv").open("w", newline="") as stream:
        csv.writer(stream).writerows([header] + body)
    return out, sorted(f"{body[i][0]}/{body[i][1]}" for i in chosen)


def test_folds_are_disjoint_and_cover_every_pose_of_every_session():
    counts = [30, 25, 7]
    for folds in (5, fold_count(sum(counts), None), 3):
        dealt = fold_rows(counts, folds, seed=4)
        assert len(dealt) == folds
        for session, count in enumerate(counts):
            rows = np.concatenate([fold[session] for fold in dealt])
            assert sorted(rows.tolist()) == list(range(count))  # covered, each exactly once
        sizes = [sum(len(r) for r in fold) for fold in dealt]
        assert max(sizes) - min(sizes) <= 1
    assert fold_count(62, None) == 5 and fold_count(39, None) == 39 and fold_count(10, 20) == 10


def test_the_delivered_calibration_is_the_fit_of_every_inlier_pose(corrupted, tmp_path):
    session, bad = corrupted
    delivered = Calibrator(deflection="none").fit([session])
    assert sorted(o["point"] for o in delivered.summary["outliers"]) == bad
    assert delivered.summary["residuals"]["poses"] == {"fit": 24, "holdout": 0}
    # The same data with the outliers' lines removed: a fit of every inlier pose, with nothing to flag.
    clean = tmp_path / "inliers"
    shutil.copytree(session, clean)
    rows = list(csv.reader((clean / "tracker.csv").open()))
    kept = [rows[0]] + [r for r in rows[1:] if f"{r[0]}/{r[1]}" not in bad]
    with (clean / "tracker.csv").open("w", newline="") as stream:
        csv.writer(stream).writerows(kept)
    inliers = Calibrator(deflection="none").fit([clean])
    assert inliers.summary["outliers"] == []
    q = np.random.default_rng(2).uniform(-1.0, 1.0, (20, 7))
    for name in delivered.targets:
        np.testing.assert_allclose(delivered.predict(q, name), inliers.predict(q, name), atol=1e-9)
    # A fixed hold-out is a different, smaller fit.
    held = Calibrator(deflection="none", holdout=0.25).fit([session])
    assert held.summary["residuals"]["poses"] == {"fit": 18, "holdout": 6}
    assert not np.allclose(held.predict(q, "smr1"), delivered.predict(q, "smr1"), atol=1e-7)


def test_outliers_are_named_whichever_fold_they_fell_in(corrupted, tmp_path):
    session, bad = corrupted
    out = tmp_path / "cal"
    result = runner.invoke(app, ["calibrate", str(session), "--out", str(out), "--deflection", "none", "--json"])
    assert result.exit_code == 0, result.output
    document = yaml.safe_load((out / "calibration.yaml").read_text())
    assert sorted(o["point"] for o in document["outliers"]) == bad
    page = (out / "report.html").read_text()
    assert all(label in page for label in bad)
    validation = document["residuals"]["validation"]
    assert validation["folds"] == 24  # leave-one-pose-out below 40 poses
    # The bad points fell in four different folds; none of them enters any fold's fit or figure.
    assert 0.002 < min(validation["fold_rms"]) and max(validation["fold_rms"]) < 0.2  # mm; a moved point shows as ~5 mm
    assert document["residuals"]["holdout"]["n"] == 24 * 3 - len(bad)


def test_a_fold_is_refitted_exactly_by_one_step_from_the_fit_of_every_pose(small):
    calibration = Calibrator(deflection="none").fit([small])
    model, result = calibration.error_model, calibration.solve
    blocks, basis = result.blocks, result.identifiability.basis
    poses = blocks[0].poses
    for rows in ([0, 5, 9], [13], list(range(18, 24))):
        leaves = lambda block, rows=rows: np.isin(block.unit_pose, rows)  # noqa: E731
        one_step = fold_solutions(blocks, model, result.theta, basis, [leaves])[0]
        train = keep_units(blocks, lambda block: ~leaves(block))
        iterated = result.theta + basis @ _levenberg_marquardt(train, model, result.theta, basis, np.zeros(basis.shape[1]),
                                                               None, 50).x
        for theta in (one_step, iterated):
            assert np.all(np.isfinite(theta))
        tips = [model.base_T_tip(theta, poses)[rows, :3, 3] for theta in (one_step, iterated, result.theta)]
        moved = np.abs(tips[1] - tips[2]).max()  # what leaving the fold out does: micrometres
        assert moved > 1e-7
        # The one step lands within nanometres of the iterated refit: under 1 % of the fold's effect.
        assert np.abs(tips[0] - tips[1]).max() < min(1e-8, 0.01 * moved)


def test_the_cross_validated_figure_predicts_a_separate_session(small, capture_session):
    calibration = Calibrator(deflection="none").fit([small])
    residuals = calibration.summary["residuals"]
    separate = validate(calibration, load_session(capture_session("iiwa-tracker", 60, 2)))
    assert residuals["validation"]["method"] == "cross-validation"
    assert 0.7 < residuals["holdout"]["rms_mm"] / separate["rms_mm"] < 1.4
    assert residuals["holdout"]["rms_mm"] > residuals["fit"]["rms_mm"]  # held-out is worse than in-sample


def test_the_nominal_figure_beside_the_held_out_one_is_cross_validated_on_the_same_folds(small, capture_session):
    """The nominal URDF's frames fitted on every pose and judged on the same poses flatter it; beside a
    cross-validated figure it is judged on each fold with its frames fitted on the others."""
    from scipy.optimize import least_squares

    from calib.model.error_model import ErrorModel
    from calib.sensors.registry import BY_NAME
    from rigs.kinematics import ArmModel

    camera_session = capture_session("xarm6-cameras", 12, 3)
    for model in ("full", "offsets"):
        for session in (camera_session, small):
            calibration = Calibrator(model=model, deflection="none").fit([session])
            residuals = calibration.summary["residuals"]
            unit = residuals["unit"]
            validation = residuals["validation"]
            assert len(validation["nominal_fold_rms"]) == validation["folds"] == fold_count(len(load_session(session).pose_ids), None)
            assert residuals["holdout_nominal"][f"rms_{unit}"] > residuals["fit_nominal"][f"rms_{unit}"], (model, session)
    assert residuals["holdout_nominal"]["rms_mm"] > 1.1 * residuals["fit_nominal"]["rms_mm"]  # 24 poses, tracker and 3 reflectors

    # By hand on two folds of the camera session: the nominal arm's camera and board frames fitted to
    # convergence on the other poses, the corners of the fold's own pose predicted with them.
    calibration = Calibrator(deflection="none").fit([camera_session])
    residuals = calibration.summary["residuals"]
    assert residuals["camera"]["holdout_nominal_rms_px"] == pytest.approx(residuals["holdout_nominal"]["rms_px"])
    loaded = load_session(camera_session)
    chain = ArmModel.from_urdf(loaded.urdf_path, loaded.base_link, calibration.summary["tip_link"])
    frames = ErrorModel.for_sensors(chain, reference_camera_T_base={name: np.linalg.inv(pose) for name, pose in
                                                                    calibration.base_T_camera.items()},
                                    reference_tip_T_board=calibration.tip_T_board, frames_only=True)
    blocks, free = calibration.solve.blocks, frames.free
    start = frames.initial_vector()
    folds = fold_rows([len(loaded.pose_ids)], fold_count(len(loaded.pose_ids), None), seed=0)
    for k in (0, 7):
        leaves = lambda block, rows=folds[k][0]: np.isin(block.unit_pose, rows)  # noqa: E731
        train, test = keep_units(blocks, lambda block: ~leaves(block)), keep_units(blocks, leaves)

        def residual(x, train=train):
            theta = start.copy()
            theta[free] = x
            return stack(train, frames, theta, jacobian=False)[0]

        theta = start.copy()
        theta[free] = least_squares(residual, start[free], xtol=1e-12, ftol=1e-12, gtol=1e-12).x
        errors = BY_NAME["board_corners"].errors(test, frames, theta)[0]
        assert np.sqrt(np.mean(errors ** 2)) == pytest.approx(residuals["validation"]["nominal_fold_rms"][k], rel=0.01)


def test_the_report_and_the_command_say_how_the_held_out_figure_was_obtained(small, tmp_path):
    out = tmp_path / "cal"
    result = runner.invoke(app, ["calibrate", str(small), "--out", str(out), "--deflection", "none"])
    assert result.exit_code == 0, result.output
    assert "leave-one-pose-out cross-validation over 24 poses" in result.output
    page = (out / "report.html").read_text()
    verdict = page.index("Expected RMS error on new poses")
    assert "leave-one-pose-out cross-validation" in page[verdict:verdict + 400]
    result = runner.invoke(app, ["calibrate", str(small), "--out", str(tmp_path / "held"), "--deflection", "none",
                                 "--holdout", "0.25"])
    assert result.exit_code == 0, result.output
    assert "reduces the data" in result.output
    assert "reduces the data" in (tmp_path / "held" / "report.html").read_text()


def test_auto_chooses_on_the_same_folds_and_refits_on_every_pose(capture_session):
    sessions = [capture_session("iiwa-tracker-compliant", 19, 31, 0.0), capture_session("iiwa-tracker-compliant", 19, 32, 3.0)]
    calibration = Calibrator(deflection="auto").fit(sessions)
    info, residuals = calibration.deflection, calibration.summary["residuals"]
    assert info["mode"] in ("compliance", "both")
    assert info["evidence"] == residuals["validation"]["description"]
    table = info["heldout_comparison"]
    assert table[info["mode"]]["rms_mm"] == pytest.approx(residuals["holdout"]["rms_mm"], rel=1e-12)
    assert table["compliance"]["rms_mm"] < 0.5 * table["none"]["rms_mm"]
    assert "not tried" in table["learned"]["note"]  # 38 poses: leave-one-out, too few for a network
    assert residuals["poses"] == {"fit": 38, "holdout": 0} and residuals["validation"]["folds"] == 38
