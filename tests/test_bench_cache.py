"""The benchmarks' row cache: a row is reused only while the files it measured are the same content,
so new spheres recompute the sphere rows and leave the planner's rows (pieces, URDF, SRDF) alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import bench_export  # noqa: E402
import bench_export_levers  # noqa: E402
from benchlib import cached_row, file_digests  # noqa: E402

URDF = """<?xml version="1.0"?>
<robot name="r">
  <link name="a"><collision><geometry><mesh filename="meshes/collision/a_0.stl"/></geometry></collision></link>
  <link name="b"><collision><geometry><mesh filename="meshes/collision/b_0.stl"/></geometry></collision>
    <collision><geometry><box size="1 1 1"/></geometry></collision></link>
  <joint name="j" type="revolute"><parent link="a"/><child link="b"/><axis xyz="0 0 1"/>
    <limit lower="-1" upper="1" effort="1" velocity="1"/></joint>
</robot>
"""


def _export(folder: Path, spheres: str = "collision_spheres: {a: [{center: [0, 0, 0], radius: 0.1}]}\n") -> Path:
    (folder / "meshes" / "collision").mkdir(parents=True, exist_ok=True)
    (folder / "robot.urdf").write_text(URDF)
    (folder / "robot.srdf").write_text('<robot name="r"><disable_collisions link1="a" link2="b" reason="Adjacent"/></robot>')
    (folder / "meshes" / "collision" / "a_0.stl").write_bytes(b"solid a\nendsolid a\n")
    (folder / "meshes" / "collision" / "b_0.stl").write_bytes(b"solid b\nendsolid b\n")
    (folder / "curobo_spheres.yml").write_text(spheres)
    (folder / "export_report.json").write_text(json.dumps({"held_joints": {}, "seconds": {"total": 1.0}}))
    return folder


def test_a_row_is_reused_while_its_inputs_are_the_same_content_and_recomputed_when_they_change(tmp_path):
    data = tmp_path / "data.txt"
    data.write_text("one")
    calls = []

    def compute():
        calls.append(data.read_text())
        return {"value": data.read_text()}

    row = tmp_path / "rows" / "row.json"
    assert cached_row(row, compute, file_digests(tmp_path, ["data.txt"], "input"))["value"] == "one"
    data.write_text("one")  # written again, same bytes: still valid
    assert cached_row(row, compute, file_digests(tmp_path, ["data.txt"], "input"))["value"] == "one"
    assert calls == ["one"]
    data.write_text("two")
    assert cached_row(row, compute, file_digests(tmp_path, ["data.txt"], "input"))["value"] == "two"
    assert calls == ["one", "two"]
    assert json.loads(row.read_text())["inputs"] == file_digests(tmp_path, ["data.txt"], "input")
    # A row cached before rows recorded their inputs is recomputed once inputs are asked for.
    row.write_text(json.dumps({"value": "old"}))
    assert cached_row(row, compute, file_digests(tmp_path, ["data.txt"], "input"))["value"] == "two"
    assert not list(row.parent.glob("*.part"))


def test_new_spheres_change_only_the_sphere_rows_inputs(tmp_path):
    first = _export(tmp_path / "first")
    pieces, spheres = bench_export.export_inputs(first, "pieces"), bench_export.export_inputs(first, "spheres")
    assert {"export/robot.urdf", "export/robot.srdf", "export/meshes/collision/a_0.stl",
            "export/meshes/collision/b_0.stl"} <= set(pieces)
    assert "export/curobo_spheres.yml" not in pieces and "export/curobo_spheres.yml" in spheres
    # The same export in another folder, its report's timings differing, keys the same rows.
    second = _export(tmp_path / "second")
    (second / "export_report.json").write_text(json.dumps({"held_joints": {}, "seconds": {"total": 9.0}}))
    assert bench_export.export_inputs(second, "pieces") == pieces
    assert bench_export.export_inputs(second, "spheres") == spheres
    # New spheres: the planner's rows stay valid, the sphere rows do not.
    (second / "curobo_spheres.yml").write_text("collision_spheres: {a: [{center: [0, 0, 0], radius: 0.2}]}\n")
    assert bench_export.export_inputs(second, "pieces") == pieces
    assert bench_export.export_inputs(second, "spheres") != spheres
    # A changed piece or SRDF invalidates the planner's rows.
    (second / "meshes" / "collision" / "b_0.stl").write_bytes(b"solid b2\nendsolid b2\n")
    assert bench_export.export_inputs(second, "pieces") != pieces
    third = _export(tmp_path / "third")
    (third / "robot.srdf").write_text('<robot name="r"/>')
    assert bench_export.export_inputs(third, "pieces") != pieces
    # Held joints the report states count too.
    fourth = _export(tmp_path / "fourth")
    (fourth / "export_report.json").write_text(json.dumps({"held_joints": {"f": 0.01}}))
    assert bench_export.export_inputs(fourth, "pieces") != pieces


@pytest.mark.parametrize("kind", ["description", "truth"])
def test_session_inputs_ignore_the_manifest_beyond_the_robot_and_board(tmp_path, kind):
    session = tmp_path / "s"
    (session / "meshes").mkdir(parents=True)
    (session / "truth" / "meshes").mkdir(parents=True)
    manifest = {"robot": {"urdf": "robot.urdf", "base_link": "a"}, "sensors": {}, "source": {"selfcal_version": "1"}}
    (session / "session.json").write_text(json.dumps(manifest))
    for name in ("robot.urdf", "joints.csv", "meshes/a.stl", "truth/robot.urdf", "truth/meshes/a.stl"):
        (session / name).write_text(name)
    (session / "truth" / "parameters.json").write_text(json.dumps({"tip_T_board": [[1.0]], "mass_factors": [1.0]}))
    before = bench_export.session_inputs(session, kind)
    manifest["scene"] = {"mount_plane_z": 0.0}
    manifest["source"]["selfcal_version"] = "2"
    (session / "session.json").write_text(json.dumps(manifest))
    (session / "truth" / "parameters.json").write_text(json.dumps({"tip_T_board": [[1.0]], "torques": [2.0]}))
    assert bench_export.session_inputs(session, kind) == before
    (session / "truth" / "meshes" / "a.stl").write_text("bent")
    assert (bench_export.session_inputs(session, kind) == before) == (kind == "description")
    (session / "joints.csv").write_text("other")
    assert bench_export.session_inputs(session, kind) != before


def test_the_true_pieces_rows_are_keyed_by_the_reference_files_they_read(tmp_path):
    # A reference folder that is there (its SRDF written last) is read, not rebuilt: no session needed.
    reference = _export(tmp_path / "truepieces-r")
    baseline = tmp_path / "baseline-r.srdf"
    assert bench_export.true_pieces(baseline, tmp_path / "no-session") == reference
    inputs = bench_export.reference_inputs(baseline, tmp_path / "no-session")
    assert {"truepieces/robot.urdf", "truepieces/robot.srdf", "truepieces/meshes/collision/a_0.stl",
            "truepieces/meshes/collision/b_0.stl"} <= set(inputs)
    (reference / "meshes" / "collision" / "b_0.stl").write_bytes(b"solid b2\nendsolid b2\n")
    assert bench_export.reference_inputs(baseline, tmp_path / "no-session") != inputs


def test_the_false_alarms_are_told_by_the_pairs_behind_most_of_them():
    alarms = {"export": {"configurations": 200, "pairs": {
        "link4/link6": {"alarms": 80, "true_clearance_mm": 1.56},
        "link1/link5": {"alarms": 20, "true_clearance_mm": None},  # a pair the true arm does not check
        "link2/obstacle:s5b0": {"alarms": 4, "true_clearance_mm": 2.7}}},
        "true meshes as pieces": {"configurations": 0, "pairs": {}}}
    assert bench_export.alarm_words(alarms, "export", top=2) == "link4/link6 40 % (1.6 mm), link1/link5 10 %"
    assert bench_export.alarm_words(alarms, "true meshes as pieces") == "none"


def test_a_lever_run_is_read_or_refused_in_one_sentence():
    assert bench_export_levers.parse_run("xarm6-cameras-crashed:planned60:iterations=1500") == (
        "xarm6-cameras-crashed", "planned60", "iterations", 1500.0)
    assert bench_export_levers.parse_run("panda-cameras:all-random:polish=0")[2:] == ("polish", 0.0)
    for bad, named in (("xarm6-cameras:all-random", "RIG:MODEL:SETTING=VALUE"), ("ur5:all-random:floor=0.5", "ur5"),
                       ("xarm6-cameras:planned:floor=0.5", "planned"), ("xarm6-cameras:all-random:voxel=3", "setting"),
                       ("xarm6-cameras:all-random:floor=-1", "> 0"), ("xarm6-cameras:all-random:iterations=0", "> 0"),
                       ("xarm6-cameras:all-random:polish=-1", ">= 0")):
        with pytest.raises(SystemExit, match=named):
            bench_export_levers.parse_run(bad)
