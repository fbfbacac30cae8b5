"""Is the learned body good, and is the arm intact? ``selfmodel eval`` and ``check`` end with a verdict.

The two-joint arm with a box (tests/data/selfmodel) is learned from three depth cameras; checked
against its own URDF no link differs beyond the threshold, against a description whose elbow sits
3 cm off the upper link is named, and a threshold below the spread an intact link of the model
shows is CANNOT TELL. The xArm6 story (intact and crashed rig) runs as a slow test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from capture.session import load_session
from capture.simulate import capture_simulated
from rigs import load_rig
from rigs import urdf as urdf_io
from rigs.files import output_folder
from selfcal.cli import app
from selfmodel.depth_labels import LabelSettings
from selfmodel.model_io import load_model, save_model
from selfmodel.training import SelfModelTrainer

DATA = Path(__file__).parent / "data" / "selfmodel"
runner = CliRunner()


def verdict_of(result) -> dict:
    assert result.exit_code in (0, 1, 3), result.output
    data = json.loads(result.output)
    assert list(data)[0] == "verdict"
    return data["verdict"]


@pytest.fixture(scope="module")
def box(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("selfmodel-verdicts")
    rig = load_rig(DATA / "two_joint_box.toml")
    train = capture_simulated(rig, 40, 1, root / "train")
    heldout = capture_simulated(rig, 6, 2, root / "heldout")
    trainer = SelfModelTrainer(kind="structured", steps=400, seed=3, batch=2048, prior_batch=512, threads=1,
                               labels=LabelSettings(hit_rays_per_image=300, miss_rays_per_image=100))
    result = trainer.fit([load_session(train)])
    model = root / "model"
    with output_folder(model) as temporary:
        save_model(result, temporary, [load_session(train)], {})
    tree = urdf_io.parse_urdf(load_model(model).urdf_path)
    elbow = urdf_io.joints(tree)["elbow"].origin.copy()
    elbow[:3, 3] += [0.03, 0.0, 0.0]  # the description puts the elbow 3 cm off
    urdf_io.set_joint_origin(tree, "elbow", elbow)
    urdf_io.write_urdf(tree, root / "wrong.urdf")
    return {"model": model, "heldout": heldout, "wrong": root / "wrong.urdf", "own": model / "robot.urdf"}


def test_check_against_its_own_description_finds_no_damage(box):
    result = runner.invoke(app, ["selfmodel", "check", str(box["model"]), "--urdf", str(box["own"]), "--json",
                                 "--require-pass"])
    assert result.exit_code == 0, result.output
    verdict = verdict_of(result)
    assert verdict["result"] == "PASS" and verdict["reason"].startswith("no link differs beyond the threshold")
    assert verdict["tolerance"]["value"] >= 8.0


def test_check_names_the_link_whose_joint_is_off(box):
    result = runner.invoke(app, ["selfmodel", "check", str(box["model"]), "--urdf", str(box["wrong"]), "--json",
                                 "--require-pass"])
    assert result.exit_code == 1, result.output
    verdict = verdict_of(result)
    assert verdict["result"] == "FAIL"
    assert verdict["reason"].startswith("upper's joint elbow moves what follows it by")
    assert 25 < verdict["measured"] < 40


def test_check_cannot_tell_below_the_spread_of_intact_links(box):
    result = runner.invoke(app, ["selfmodel", "check", str(box["model"]), "--urdf", str(box["wrong"]),
                                 "--threshold-mm", "0.01", "--require-pass"])
    assert result.exit_code == 3, result.output
    assert result.output.startswith("CANNOT TELL:") and "spread an intact link" in result.output


def test_eval_judges_the_surface_against_one_percent_of_the_workspace(box):
    result = runner.invoke(app, ["selfmodel", "eval", str(box["model"]), str(box["heldout"]), "--poses", "2", "--json"])
    verdict = verdict_of(result)
    figures = json.loads(result.output)
    assert verdict["result"] == ("PASS" if figures["chamfer_l1_mm"] <= figures["fscore_tau_mm"]
                                 and figures["false_free_rate"] <= 0.01 else "FAIL")
    assert "1 % of the workspace" in verdict["checks"][0]["tolerance"]["source"]
    # A planner drives into what the model calls free: a stricter limit on that share fails.
    result = runner.invoke(app, ["selfmodel", "eval", str(box["model"]), str(box["heldout"]), "--poses", "2", "--json",
                                 "--false-free-max", "0.01", "--require-pass"])
    assert result.exit_code == 1 and verdict_of(result)["result"] == "FAIL"
    assert "calls free" in verdict_of(result)["reason"]
    # A surface tolerance below half the marching-cubes voxel (2.5 mm) cannot be told.
    result = runner.invoke(app, ["selfmodel", "eval", str(box["model"]), str(box["heldout"]), "--poses", "2", "--json",
                                 "--tolerance-mm", "0.2", "--false-free-max", "50", "--require-pass"])
    assert result.exit_code == 3 and verdict_of(result)["result"] == "CANNOT TELL"
    assert "half the marching-cubes voxel" in verdict_of(result)["reason"]


@pytest.mark.slow
def test_an_intact_xarm6_passes_and_a_crashed_one_names_its_bent_link(tmp_path):
    """The xArm6 with four depth cameras, intact and crashed (the demo's rig), 1500 steps each."""
    names = {}
    for rig in ("xarm6-cameras", "xarm6-cameras-crashed"):
        session = tmp_path / rig
        assert runner.invoke(app, ["capture", "--rig", rig, "--poses", "60", "--seed", "5", "--out",
                                   str(session)]).exit_code == 0
        model = tmp_path / f"{rig}-model"
        assert runner.invoke(app, ["selfmodel", "train", str(session), "--out", str(model), "--steps", "1500",
                                   "--seed", "0"]).exit_code == 0
        result = runner.invoke(app, ["selfmodel", "check", str(model), "--urdf", str(session / "robot.urdf"), "--json"])
        names[rig] = verdict_of(result)
    assert names["xarm6-cameras"]["result"] == "PASS", names
    assert names["xarm6-cameras-crashed"]["result"] == "FAIL", names
