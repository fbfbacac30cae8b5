"""Is the learned body good, and is the arm intact? ``selfmodel eval`` and ``check`` end with a verdict.

The two-joint arm with a box (tests/data/selfmodel) is learned from three depth cameras. The damage
check reads the placement fit and the measured depth, not the networks, so its models train a few
steps: checked against its own URDF no link differs beyond the threshold; the same arm with its
upper link bent 3 degrees is named with the bend; a tool bolted under the box is named as added
matter on the box; a description larger than the body is named as missing matter; a model without
a placement fit, and a threshold below the depth noise, are CANNOT TELL. The xArm6 story (intact
and crashed rig) runs as a slow test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from capture.session import load_session
from capture.simulate import capture_simulated
from rigs import load_rig, urdf as urdf_io
from selfcal.cli import app
from selfmodel.labels.depth import LabelSettings
from selfmodel.learn.trainer import SelfModelTrainer
from selfmodel.model.models import SelfModel

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
    result.model.save(model, [load_session(train)], {})
    tree = urdf_io.parse_urdf(SelfModel.load(model).urdf_path)
    elbow = urdf_io.joints(tree)["elbow"].origin.copy()
    elbow[:3, 3] += [0.03, 0.0, 0.0]  # the description puts the elbow 3 cm off
    urdf_io.set_joint_origin(tree, "elbow", elbow)
    urdf_io.write_urdf(tree, root / "wrong.urdf")
    return {"model": model, "heldout": heldout, "wrong": root / "wrong.urdf", "own": model / "robot.urdf", "root": root}


def damaged_model(root: Path, rig: str, seed: int) -> Path:
    """A model of a damaged box arm (tests/data/selfmodel/RIG.toml): the check needs no trained body."""
    session = capture_simulated(load_rig(DATA / f"{rig}.toml"), 40, seed, root / f"{rig}-{seed}")
    trainer = SelfModelTrainer(kind="structured", steps=5, seed=3, batch=512, prior_batch=128, threads=1,
                               labels=LabelSettings(hit_rays_per_image=300, miss_rays_per_image=100))
    model = root / f"{rig}-{seed}-model"
    trainer.fit([load_session(session)]).model.save(model, [load_session(session)], {})
    return model


def check_json(model: Path, urdf: Path, *extra: str) -> tuple[int, dict]:
    result = runner.invoke(app, ["selfmodel", "check", str(model), "--urdf", str(urdf), "--json", "--require-pass", *extra])
    verdict_of(result)
    return result.exit_code, json.loads(result.output)


def test_check_against_its_own_description_finds_no_damage(box):
    code, data = check_json(box["model"], box["own"])
    verdict = data["verdict"]
    assert code == 0 and verdict["result"] == "PASS", verdict
    assert verdict["reason"].startswith("no link differs beyond the threshold")
    assert verdict["tolerance"]["value"] >= 5.0 and "depth noise" in verdict["tolerance"]["source"]
    # The largest figure of the intact arm is well under the threshold (0.7 mm against 5 mm).
    assert max(row["deviation_mm"] for row in data["links"]) < 0.5 * verdict["tolerance"]["value"], data["links"]
    # Each link's unseen volume is stated (the training sessions are where the model names them).
    assert set(data["unseen_cm3"]) == {row["link"] for row in data["links"]} and data["unseen_min_poses"] == 3


def test_check_names_the_link_whose_joint_is_off(box):
    code, data = check_json(box["model"], box["wrong"])
    verdict = data["verdict"]
    assert code == 1 and verdict["result"] == "FAIL", verdict
    assert verdict["reason"].startswith("upper is bent or its joint elbow sits off")
    assert 25 < verdict["measured"] < 40
    upper = next(row for row in data["links"] if row["link"] == "upper")
    assert 28 < upper["shift_mm"] < 32, upper


@pytest.mark.parametrize("seed", [1, 4])
def test_check_names_a_bent_link_with_its_bend_in_degrees(box, seed):
    code, data = check_json(damaged_model(box["root"], "two_joint_box_bent", seed), box["own"])
    verdict = data["verdict"]
    assert code == 1 and verdict["result"] == "FAIL", verdict
    assert verdict["reason"].startswith("upper is bent or its joint elbow sits off: the joint is turned")
    upper = data["links"][0]
    assert upper["link"] == "upper" and upper["kind"] == "joint elbow"
    # The rig bends the upper link 3 degrees; the placement fit reads 3.00 +- 0.03 on these seeds.
    assert abs(upper["bend_deg"] - 3.0) < 0.3 and 0 < upper["bend_sd_deg"] < 0.3, upper
    # A 3 degree bend moves what the joint carries by about 10.5 mm (seed 4: 10.47 +- 0.30 mm), so it
    # stands clear of the 5 mm tolerance by well over two of its own sd; twice the tolerance is too
    # close to the truth for a bound.
    assert upper["joint_mm"] - 2 * upper["joint_sd_mm"] > 1.5 * verdict["tolerance"]["value"]


def test_check_names_matter_bolted_on_as_added_matter_on_its_link(box):
    code, data = check_json(damaged_model(box["root"], "two_joint_box_tool", 1), box["own"])
    verdict = data["verdict"]
    assert code == 1 and verdict["result"] == "FAIL", verdict
    assert verdict["reason"].startswith("box carries matter the description lacks")
    row = data["links"][0]
    # The 4 x 4 x 8 cm tool hangs 3-11 cm below the box's end (x 15-19 cm in the box's frame).
    assert row["link"] == "box" and row["kind"] == "added matter" and 50 < row["added_mm"] < 100, row
    assert 0.13 < row["added_where_link"][0] < 0.21 and row["added_where_link"][2] < -0.03, row


def test_check_names_matter_the_body_lacks_as_missing_matter(box):
    """A description whose box is 3 cm larger each way than the body (a cover taken off)."""
    tree = urdf_io.parse_urdf(box["own"])
    for element in tree.getroot().iter("box"):
        size = [float(v) + 0.03 for v in element.get("size").split()]
        element.set("size", " ".join(str(v) for v in size))
    urdf_io.write_urdf(tree, box["root"] / "larger.urdf")
    code, data = check_json(box["model"], box["root"] / "larger.urdf")
    verdict = data["verdict"]
    assert code == 1 and verdict["result"] == "FAIL", verdict
    assert "lacks matter the description has" in verdict["reason"]
    row = next(row for row in data["links"] if row["kind"] == "missing matter" and row["link"] == "box")
    # Every face stands 15 mm off the body, a corner sqrt(3) x 15 = 26 mm.
    assert 12 < row["missing_mm"] < 30, row


def test_check_names_a_described_part_the_cameras_see_through(box):
    """A description carrying a 4 x 4 x 8 cm tool under the box that the body lacks: the cameras see
    the background through it (no measured point lies inside it), so the depth images name it."""
    import xml.etree.ElementTree as ET

    tree = urdf_io.parse_urdf(box["own"])
    link = next(link for link in tree.getroot().iter("link") if link.get("name") == "box")
    visual = ET.SubElement(link, "visual")
    ET.SubElement(visual, "origin", {"xyz": "0.17 0 -0.07"})
    ET.SubElement(ET.SubElement(visual, "geometry"), "box", {"size": "0.04 0.04 0.08"})
    urdf_io.write_urdf(tree, box["root"] / "with-tool.urdf")
    code, data = check_json(box["model"], box["root"] / "with-tool.urdf")
    verdict = data["verdict"]
    assert code == 1 and verdict["result"] == "FAIL", verdict
    assert verdict["reason"].startswith("box lacks matter the description has: the cameras saw through")
    row = data["links"][0]
    assert row["link"] == "box" and row["missing_seen_through"] and 25 < row["missing_mm"] < 90, row
    assert data["seen_through_checked"]


def test_check_cannot_tell_below_the_depth_noise(box):
    result = runner.invoke(app, ["selfmodel", "check", str(box["model"]), "--urdf", str(box["wrong"]),
                                 "--threshold-mm", "0.01", "--require-pass"])
    assert result.exit_code == 3, result.output
    assert result.output.startswith("CANNOT TELL:") and "finer than the depth noise" in result.output


def test_check_cannot_tell_a_joint_without_a_placement_fit(box, tmp_path):
    """A model saved without the placement fit's standard deviations (an older selfcal's): its joint
    figures cannot decide, so the misplaced elbow is CANNOT TELL, not FAIL."""
    import shutil

    folder = tmp_path / "old"
    shutil.copytree(box["model"], folder)
    config = json.loads((folder / "config.json").read_text())
    del config["joint_placement"]
    (folder / "config.json").write_text(json.dumps(config))
    code, data = check_json(folder, box["wrong"])
    assert code == 3 and data["verdict"]["result"] == "CANNOT TELL", data["verdict"]
    assert "no placement fit" in data["verdict"]["reason"] and data["placement_fitted"] is False


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


@pytest.fixture(scope="module")
def xarm6_checks(tmp_path_factory) -> dict:
    """The xArm6 with four depth cameras, intact and crashed (link3 bent 3 degrees), 60 poses each,
    checked against the description; the check needs the placement fit and the depth points, not a
    trained body (20 steps)."""
    root = tmp_path_factory.mktemp("xarm6-checks")
    found = {}
    for rig in ("xarm6-cameras", "xarm6-cameras-crashed"):
        session = root / rig
        assert runner.invoke(app, ["capture", "--rig", rig, "--poses", "60", "--seed", "5", "--out",
                                   str(session)]).exit_code == 0
        model = root / f"{rig}-model"
        assert runner.invoke(app, ["selfmodel", "train", str(session), "--out", str(model), "--steps", "20",
                                   "--seed", "0", "--threads", "1"]).exit_code == 0
        found[rig] = check_json(model, session / "robot.urdf")[1]
    return found


@pytest.mark.slow
def test_an_intact_xarm6_passes_and_a_crashed_one_names_its_bent_link(xarm6_checks):
    intact, crashed = xarm6_checks["xarm6-cameras"], xarm6_checks["xarm6-cameras-crashed"]
    assert intact["verdict"]["result"] == "PASS", intact["verdict"]
    assert crashed["verdict"]["result"] == "FAIL", crashed["verdict"]
    assert crashed["verdict"]["reason"].startswith("link3 is bent or its joint joint4 sits off")
    assert abs(crashed["links"][0]["bend_deg"] - 3.0) < 0.5, crashed["links"][0]


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="the intact xArm6's largest figure is 8.5 mm of added matter at link_base, "
                                       "0.88 of the tolerance: the check passes it, but not clearly inside")
def test_the_intact_xarm6_reads_clearly_inside_the_tolerance(xarm6_checks):
    intact = xarm6_checks["xarm6-cameras"]
    assert intact["links"][0]["deviation_mm"] < 0.7 * intact["verdict"]["tolerance"]["value"], intact["links"][0]
