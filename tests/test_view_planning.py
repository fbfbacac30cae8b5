"""A capture that never showed a face of the arm leaves it unseen; the view planner plans poses that
show it, and a capture of them sees it.

The two-joint box arm (tests/data/selfmodel) is recorded with its elbow held level, so the box's
underside faces the floor at every pose and its three cameras, all above it, never see it. A
stand-in self-model whose bodies are the arm's true boxes (a real model folder trained a few steps,
so config.json names the session) is planned for; the planned poses are then captured in simulation
and the unseen volume recomputed from their depth images.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from capture.poses import Plan
from capture.session import load_session
from capture.simulate import capture_simulated
from rigs import load_rig
from selfmodel.labels.depth import LabelSettings
from selfmodel.labels.unseen import PITCH, POSES, learned_cells, outer_layer, recorded_seen, unseen_cm3
from selfmodel.learn.trainer import SelfModelTrainer
from selfmodel.learn.view_planning import greedy, plan_views, views_verdict
from selfmodel.model.chain import link_poses_numpy
from selfmodel.model.models import SelfModel

DATA = Path(__file__).parent / "data" / "selfmodel"
RIG = DATA / "two_joint_box.toml"
# Link frames, m: (centre, half extents) of the true boxes (two_joint_box.urdf).
TRUE = {"base": [((0, 0, 0.03), (0.06, 0.06, 0.03))],
        "upper": [((0, 0, 0.1), (0.03, 0.03, 0.1))],
        "box": [((0.1, 0, 0), (0.1, 0.04, 0.03))]}
UNDERSIDE = -0.03  # m: the box's bottom face in its link frame (two_joint_box.urdf)


def _box_distance(points: np.ndarray, centre, half) -> np.ndarray:
    q = np.abs(points - np.asarray(centre)) - np.asarray(half)
    return np.linalg.norm(np.maximum(q, 0), axis=1) + np.minimum(q.max(axis=1), 0)


def _true_boxes(model: SelfModel) -> SelfModel:
    """The loaded model answering with the arm's true boxes and the description's kinematics."""
    def bounds(link):
        corners = np.array([[np.asarray(c) - h, np.asarray(c) + h] for c, h in TRUE[link]])
        return corners[:, 0].min(axis=0) - 0.01, corners[:, 1].max(axis=0) + 0.01

    def occupancy(link, points):
        distance = np.min([_box_distance(np.asarray(points), c, h) for c, h in TRUE[link]], axis=0)
        return (distance < 0).astype(float)

    model.link_bounds = bounds
    model.link_occupancy = occupancy
    model.base_T_links = lambda q: link_poses_numpy(model.spec, q)
    return model


@pytest.fixture(scope="module")
def level(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("views")
    rig = load_rig(RIG)
    shoulder = np.linspace(-2.3, 2.3, 8)
    recorded = Plan([f"p{k:04d}" for k in range(8)], np.column_stack([shoulder, np.zeros(8)]), {})
    session = capture_simulated(rig, 8, 3, root / "level", plan=recorded)
    trainer = SelfModelTrainer(kind="structured", steps=3, seed=3, batch=256, prior_batch=64, threads=1,
                               labels=LabelSettings(hit_rays_per_image=100, miss_rays_per_image=20))
    folder = root / "model"
    trainer.fit([load_session(session)]).model.save(folder, [load_session(session)], {})
    return {"root": root, "rig": rig, "session": session, "folder": folder}


def _underside(cells: np.ndarray) -> np.ndarray:
    """Cells of the box's bottom layer away from its edges (the edges' cells are met from the side)."""
    return (cells[:, 2] < UNDERSIDE + PITCH) & (np.abs(cells[:, 1]) < 0.03) & (cells[:, 0] > 0.01) & (cells[:, 0] < 0.19)


def test_the_outer_layer_of_a_cube_is_its_faces_and_unseen_volume_counts_its_cells():
    solid = np.zeros((6, 6, 6), dtype=bool)
    solid[1:5, 1:5, 1:5] = True
    layer = outer_layer(solid)
    assert layer.sum() == 64 - 8 and not layer[2:4, 2:4, 2:4].any()
    counts = {"link": np.array([0, 2, 3, 5])}
    assert unseen_cm3(counts, 0.01) == {"link": 2.0}  # two cells of 1 cm3 seen at fewer than 3 poses


def test_greedy_takes_the_pose_that_shows_the_most_still_wanted_cells():
    counts = {"a": np.array([0, 0, 0, 3])}
    expected = {"a": np.array([[True, False, False, True],    # one wanted cell
                               [True, True, True, False],     # three
                               [False, True, True, True]])}   # two
    chosen, gains, after = greedy(counts, expected, 2, 0.01, min_poses=1)
    assert chosen[0] == 1 and gains[0] == pytest.approx(3.0)
    assert gains[1] == 0.0 and after["a"].tolist() == [2, 1, 1, 4]  # nothing left to want: the first free one


def test_a_face_no_camera_saw_gets_planned_views_and_a_capture_of_them_sees_it(level):
    model = _true_boxes(SelfModel.load(level["folder"]))
    cells = learned_cells(model, PITCH)
    bottom = _underside(cells["box"])
    assert bottom.sum() > 300  # 36 x 12 cells of 5 mm

    recorded = load_session(level["session"])
    before = recorded_seen(cells, model.link_names, model.base_T_links(recorded.q), [recorded], PITCH)
    # Held level under cameras that all look down, the underside was never seen.
    assert np.mean(before["box"][bottom] < POSES) > 0.95

    plan = plan_views(model, 6, level["rig"], candidates=60, seed=1)
    assert plan.recorded_poses == 8 and len(plan.q) == 6
    assert plan.before_cm3["box"] == unseen_cm3(before, PITCH)["box"]
    assert plan.after_cm3["box"] < 0.5 * plan.before_cm3["box"], plan.report()
    # The plan tilts the box: the elbow turns its underside toward a camera.
    assert np.max(np.abs(plan.q[:, 1])) > 0.5

    session = capture_simulated(level["rig"], len(plan.q), 4, level["root"] / "planned",
                                plan=Plan([f"v{k:04d}" for k in range(len(plan.q))], plan.q, {}))
    captured = load_session(session)
    added = recorded_seen(cells, model.link_names, model.base_T_links(captured.q), [captured], PITCH)
    after = {link: before[link] + added[link] for link in cells}
    # Measured on the captured depth images, not the planner's expectation.
    assert np.mean(after["box"][bottom] < POSES) < 0.3, np.mean(after["box"][bottom] < POSES)
    assert unseen_cm3(after, PITCH)["box"] < 0.6 * unseen_cm3(before, PITCH)["box"]
    # The base's underside and the faces where links meet stay: no candidate shows them.
    assert plan.beyond_cm3["base"] > 0.5 * plan.before_cm3["base"]
    assert views_verdict(plan).result == "PASS"


def test_plan_views_writes_a_plan_that_capture_accepts(level, tmp_path):
    from selfcal.cli import app

    runner = CliRunner()
    out = tmp_path / "plan.csv"
    result = runner.invoke(app, ["plan", "--views", "--model", str(level["folder"]), "--poses", "3",
                                 "--candidates", "20", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    rows = list(csv.reader(out.open()))
    assert rows[0] == ["pose", "shoulder", "elbow"] and len(rows) == 4
    result = runner.invoke(app, ["capture", "--rig", str(RIG), "--plan", str(out), "--out", str(tmp_path / "next")])
    assert result.exit_code == 0, result.output
    assert len(load_session(tmp_path / "next").pose_ids) == 3


def test_before_any_capture_the_plan_is_for_the_rigs_description(level, tmp_path):
    """No model yet: every face of the described boxes is unseen; the plan shows most of what its
    candidates can."""
    plan = plan_views(None, 8, level["rig"], candidates=60, seed=2)
    assert plan.recorded_poses == 0 and set(plan.before_cm3) == {"base", "upper", "box"}
    # The box's described faces: 656 cm2 (20 x 8 x 6 cm) in a 5 mm layer, about 330 cm3.
    assert 250 < plan.before_cm3["box"] < 400, plan.before_cm3
    showable = {link: plan.before_cm3[link] - plan.beyond_cm3[link] for link in plan.before_cm3}
    assert showable["box"] > 0.5 * plan.before_cm3["box"]
    assert plan.after_cm3["box"] - plan.beyond_cm3["box"] < 0.2 * showable["box"], plan.report()
