"""Bad input to `selfcal import`: one sentence naming the file and line (or flag), exit 2, no
traceback and no output folder, not even a temporary one."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from selfcal.cli import app

DATA = Path(__file__).parent / "data" / "import"
URDF = DATA / "robot" / "arm3.urdf"


def edited(tmp_path: Path, name: str, edit) -> Path:
    """A copy of example ``name`` with ``edit(lines) -> lines`` applied."""
    lines = (DATA / name).read_text().splitlines()
    path = tmp_path / f"edited-{name}"
    path.write_text("\n".join(edit(lines)) + "\n")
    return path


def replace_in(line_number: int, old: str, new: str):
    def edit(lines):
        assert old in lines[line_number - 1], (old, lines[line_number - 1])
        lines[line_number - 1] = lines[line_number - 1].replace(old, new, 1)
        return lines
    return edit


def fails(tmp_path: Path, *args: str, joints: Path | None = None, robot: list[str] | None = None) -> str:
    out = tmp_path / "out"
    robot = robot if robot is not None else ["--urdf", str(URDF), "--base-link", "base_link", "--tip-link", "tool0",
                                             "--package-dir", str(DATA / "packages")]
    result = CliRunner().invoke(app, ["import", "tracker", *robot, "--joints", str(joints or DATA / "joints_deg.csv"),
                                      "--out", str(out), *args])
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr, result.exception)
    message = result.stderr.strip()
    assert message.startswith("error: ") and "\n" not in message and "Traceback" not in message
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")], "a temporary output folder was left"
    return message


POINTS = str(DATA / "sa_export.txt")


def test_a_missing_joint_column_is_named(tmp_path):
    joints = edited(tmp_path, "joints_deg.csv", replace_in(3, "shoulder_pan", "J1"))
    message = fails(tmp_path, "--points", POINTS, joints=joints)
    assert "joint column 'shoulder_pan' is missing" in message and str(joints) in message


def test_an_unknown_joint_column_is_refused(tmp_path):
    joints = edited(tmp_path, "joints_deg.csv", lambda ls: [ls[0], ls[1], ls[2] + ",wrist_roll"] + [l + ",0" for l in ls[3:]])
    message = fails(tmp_path, "--points", POINTS, joints=joints)
    assert "column 'wrist_roll' is neither a joint of the chain" in message


def test_a_case_slip_in_a_joint_name_gets_a_hint(tmp_path):
    joints = edited(tmp_path, "joints_deg.csv", replace_in(3, "elbow", "Elbow"))
    assert "joint names are case-sensitive" in fails(tmp_path, "--points", POINTS, joints=joints)


def test_a_missing_points_column_is_named(tmp_path):
    points = edited(tmp_path, "points_uxyz.csv", lambda ls: [l.rsplit(",", 4)[0] + "," + l.rsplit(",", 3)[1] for l in ls])
    assert "column 'z' is missing" in fails(tmp_path, "--points", str(points))


@pytest.mark.parametrize("cell, what", [("nan", "is not a finite number"), ("", "the cell is empty"),
                                        ("12,5", "cells")])
def test_nan_empty_or_broken_joint_cells_name_the_line(tmp_path, cell, what):
    joints = edited(tmp_path, "joints_deg.csv", lambda ls: ls[:5] + [ls[5].replace(ls[5].split(",")[0], cell, 1)] + ls[6:])
    message = fails(tmp_path, "--points", POINTS, joints=joints)
    assert "line 6" in message and what in message


def test_duplicate_pose_ids_are_refused(tmp_path):
    joints = edited(tmp_path, "joints_deg.csv", replace_in(6, "p0002", "p0001"))
    message = fails(tmp_path, "--points", POINTS, joints=joints)
    assert "line 6: pose id 'p0001' appears twice (first on line 5)" in message


def test_points_for_a_pose_without_joint_row_are_refused(tmp_path):
    points = edited(tmp_path, "sa_export.txt", replace_in(7, "::p0001::", "::p0099::"))
    message = fails(tmp_path, "--points", str(points))
    assert "line 7" in message and "pose 'p0099' has no joint row" in message


def test_a_single_name_without_a_pose_id_is_refused(tmp_path):
    points = edited(tmp_path, "points_plain.txt", replace_in(2, "p0000_smr2", "smr2"))
    assert "line 2: point name 'smr2' does not start with a pose id" in fails(tmp_path, "--points", str(points))


def test_a_target_measured_twice_at_a_pose_is_refused(tmp_path):
    points = edited(tmp_path, "points_plain.txt", replace_in(2, "p0000_smr2", "p0000_smr1"))
    assert "target 'smr1' of pose 'p0000' appears twice" in fails(tmp_path, "--points", str(points))


def test_millimetres_read_as_metres_are_caught(tmp_path):
    points = edited(tmp_path, "points_plain.txt", lambda ls: ls)
    message = fails(tmp_path, "--points", str(points), "--length-unit", "m")
    assert "line 1" in message and "beyond any tracker's range" in message and "--length-unit" in message


def test_metres_read_as_millimetres_are_caught(tmp_path):
    def to_metres(lines):
        return [" ".join([l.split()[0]] + [f"{float(v) / 1000:.7f}" for v in l.split()[1:]]) for l in lines]
    points = edited(tmp_path, "points_plain.txt", to_metres)
    assert "probably in a larger unit than mm" in fails(tmp_path, "--points", str(points))


def test_a_unit_comment_that_contradicts_the_flag_is_caught(tmp_path):
    assert "says its units are 'Millimeters'" in fails(tmp_path, "--points", POINTS, "--length-unit", "in")


def test_radians_read_as_degrees_point_to_the_flag(tmp_path):
    """Twelve poses in radians under the default --angle-unit deg are all within +-6.3 'degrees'."""
    import numpy as np

    rng = np.random.default_rng(0)
    q = rng.uniform(-1.5, 1.5, (12, 3))
    joints = tmp_path / "joints_rad.csv"
    joints.write_text("pose,shoulder_pan,shoulder_lift,elbow\n" + "".join(f"p{k:04d},{a},{b},{c}\n" for k, (a, b, c) in enumerate(q)))
    points = tmp_path / "points.txt"
    points.write_text("".join(f"p{k:04d}_smr1 {1000 + 100 * k} 200 300\n" for k in range(12)))
    assert "look like radians, pass --angle-unit rad" in fails(tmp_path, "--points", str(points), joints=joints)


def test_degrees_read_as_radians_point_to_the_flag(tmp_path):
    message = fails(tmp_path, "--points", POINTS, "--angle-unit", "rad")
    assert "line 4, column 'shoulder_pan'" in message and "pass --angle-unit deg" in message


def test_an_unknown_link_is_named(tmp_path):
    robot = ["--urdf", str(URDF), "--base-link", "base_link", "--tip-link", "flange9", "--package-dir", str(DATA / "packages")]
    message = fails(tmp_path, "--points", POINTS, robot=robot)
    assert "tip_link 'flange9' is not a link of this URDF" in message


def test_a_missing_urdf_is_named(tmp_path):
    robot = ["--urdf", str(tmp_path / "nope.urdf"), "--base-link", "base_link", "--tip-link", "tool0"]
    assert "nope.urdf: URDF file not found" in fails(tmp_path, "--points", POINTS, robot=robot)


def test_a_missing_mesh_package_is_named(tmp_path):
    robot = ["--urdf", str(URDF), "--base-link", "base_link", "--tip-link", "tool0"]  # no --package-dir
    message = fails(tmp_path, "--points", POINTS, robot=robot)
    assert str(URDF) in message and "package 'arm3_description' not found" in message


def test_a_4x4_that_is_not_a_rotation_is_refused(tmp_path):
    poses = edited(tmp_path, "poses_matrix.csv", lambda ls: ls[:3] + [ls[3].replace(",0.", ",0.00001", 1)] + ls[4:])
    message = fails(tmp_path, "--poses", str(poses))
    assert "line 4: the upper 3x3 of the 4x4 is not a rotation" in message


def test_a_mirrored_4x4_is_refused(tmp_path):
    def mirror(lines):
        cells = lines[1].split(",")
        cells[1:4] = [str(-float(v)) for v in cells[1:4]]  # negate the first row of R: det -1, still orthonormal
        return [lines[0], ",".join(cells)] + lines[2:]
    assert "line 2" in (m := fails(tmp_path, "--poses", str(edited(tmp_path, "poses_matrix.csv", mirror)))) and "reflection" in m


def test_a_zero_quaternion_is_refused(tmp_path):
    def zero(lines):
        cells = lines[2].split(",")
        cells[4:8] = ["0", "0", "0", "0"]
        return lines[:2] + [",".join(cells)] + lines[3:]
    assert "line 3: the quaternion has zero length" in fails(tmp_path, "--poses", str(edited(tmp_path, "poses_quat.csv", zero)))


def test_rx_ry_rz_need_the_rotation_flag(tmp_path):
    assert "--rotation rotvec or --rotation rpy" in fails(tmp_path, "--poses", str(DATA / "poses_rpy.csv"))


def test_a_payload_with_text_is_refused(tmp_path):
    joints = edited(tmp_path, "joints_deg.csv", lambda ls: ls[:6] + [ls[6].replace(",2.5,", ",heavy,", 1)] + ls[7:])
    message = fails(tmp_path, "--points", POINTS, joints=joints)
    assert "line 7, column 'payload_kg': 'heavy' is not a number" in message


def test_efforts_of_a_joint_that_does_not_exist_are_refused(tmp_path):
    joints = edited(tmp_path, "joints_deg.csv", replace_in(3, "effort_elbow", "effort_wrist_3"))
    message = fails(tmp_path, "--points", POINTS, joints=joints)
    assert "column 'effort_wrist_3' gives efforts of joint 'wrist_3'" in message


def test_an_effort_of_a_joint_outside_the_chain_is_refused(tmp_path):
    joints = edited(tmp_path, "joints_deg.csv", replace_in(3, "effort_elbow", "effort_finger_joint"))
    assert "not a movable joint of the chain" in fails(tmp_path, "--points", POINTS, joints=joints)


def test_an_existing_output_folder_is_kept(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep me")
    result = CliRunner().invoke(app, ["import", "tracker", "--urdf", str(URDF), "--base-link", "base_link", "--tip-link",
                                      "tool0", "--package-dir", str(DATA / "packages"), "--joints",
                                      str(DATA / "joints_deg.csv"), "--points", POINTS, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "already exists" in result.stderr
    assert (tmp_path / "out" / "mine.txt").read_text() == "keep me"


def test_nothing_to_import_is_refused(tmp_path):
    assert "give --points" in fails(tmp_path)
