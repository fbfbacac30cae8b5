"""Importing real files: every dialect of tests/data/import arrives as the same numbers, and bad
input ends with one sentence, exit 2 and no output folder.

The example files hold six poses of a small 3-joint arm (tests/data/import/robot/arm3.urdf) seen
by a tracker: three reflectors and a 6-DoF probe; truth.json keeps what they were made from.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from capture.session import load_session
from selfcal.cli import app

DATA = Path(__file__).parent / "data" / "import"
TRUTH = json.loads((DATA / "truth.json").read_text())
ROBOT = ["--urdf", str(DATA / "robot" / "arm3.urdf"), "--base-link", "base_link", "--tip-link", "tool0",
         "--package-dir", str(DATA / "packages")]


def run(*args: str):
    result = CliRunner().invoke(app, ["import", *args])
    return result.exit_code, result.stdout, result.stderr


def import_tracker(out: Path, *args: str, joints: Path = DATA / "joints_deg.csv"):
    return run("tracker", *ROBOT, "--joints", str(joints), "--out", str(out), *args)


def expected_points_m() -> dict[tuple[str, str], np.ndarray]:
    """Reflector positions the example files were made from (m, tracker frame), before rounding to 0.1 um."""
    from rigs.kinematics import ArmModel

    chain = ArmModel.from_urdf(DATA / "robot" / "arm3.urdf", "base_link", "tool0")
    tracker_T_base = np.array(TRUTH["tracker_T_base"])
    points = {}
    for k, q in enumerate(TRUTH["q_rad"]):
        base_T_tip = chain.base_T_frame(np.array(q))
        for name, offset in TRUTH["targets"].items():
            points[f"p{k:04d}", name] = (tracker_T_base @ base_T_tip @ np.append(offset, 1.0))[:3]
    return points


# -- every dialect imports to the same numbers ------------------------------------------------------

@pytest.mark.parametrize("points_file, sigma_m", [
    ("sa_export.txt", None),  # SpatialAnalyzer: // comments, Collection::Group::Target, tabs, extra column
    ("sa_columns.csv", None),  # SpatialAnalyzer: Collection, Group, Target columns, X [mm], time, extra column
    ("points_plain.txt", None),  # plain whitespace name x y z, names p0000_smr1
    ("points_uxyz.csv", np.sqrt((0.010 ** 2 + 0.020 ** 2 + 0.020 ** 2) / 3) / 1000),  # ux uy uz, mm
    ("points_sigma.csv", 0.015 / 1000),  # semicolons, one sigma, mm
])
def test_each_tracker_dialect_imports_to_the_measured_points(tmp_path, points_file, sigma_m):
    out = tmp_path / "session"
    code, stdout, stderr = import_tracker(out, "--points", str(DATA / points_file))
    assert code == 0, stderr
    assert "18 tracker points" in stdout
    session = load_session(out)
    assert session.joint_names == ["shoulder_pan", "shoulder_lift", "elbow"]
    np.testing.assert_allclose(session.q, TRUTH["q_rad"], atol=1e-9)  # 7 decimals of a degree
    expected = expected_points_m()
    assert len(session.tracker.targets) == len(expected) == 18
    for row, target, xyz in zip(session.tracker.pose_index, session.tracker.targets, session.tracker.xyz):
        np.testing.assert_allclose(xyz, expected[session.pose_ids[row], target], atol=1e-7)  # 0.1 um rounding
    if sigma_m is None:
        assert session.tracker.sigma is None
    else:
        np.testing.assert_allclose(session.tracker.sigma, sigma_m, rtol=1e-12)
    assert sorted(session.nominal_targets) == ["smr1", "smr2", "smr3"]


def test_joint_log_keeps_payload_efforts_and_time(tmp_path):
    out = tmp_path / "session"
    code, _, stderr = import_tracker(out, "--points", str(DATA / "sa_export.txt"))
    assert code == 0, stderr
    session = load_session(out)
    np.testing.assert_allclose(session.payload_kg, TRUTH["payload_kg"])
    efforts = session.joint_efforts
    assert efforts.shape == (6, 3)
    np.testing.assert_allclose(efforts, TRUTH["effort_nm"], atol=1e-4)
    np.testing.assert_allclose([float(t) for t in session.extra["time"]], TRUTH["times"])
    header = (out / "joints.csv").read_text().splitlines()[0].split(",")
    assert header[:5] == ["pose", "shoulder_pan", "shoulder_lift", "elbow", "payload_kg"]
    assert "effort_elbow" in header


def test_payload_reaches_the_gravity_model(tmp_path):
    """The imported payload column is what the deflection model is fed: heavier poses, larger torques."""
    from rigs.kinematics import ArmModel

    out = tmp_path / "session"
    assert import_tracker(out, "--points", str(DATA / "points_plain.txt"), "--payload-com", "0,0,50")[0] == 0
    session = load_session(out)
    np.testing.assert_allclose(session.payload_com, [0.0, 0.0, 0.05])
    chain = ArmModel.from_urdf(session.urdf_path, session.base_link, session.tip_link)
    with_payload = chain.gravity_torques(session.q[4], session.payload_kg[4], session.payload_com)
    without = chain.gravity_torques(session.q[4], 0.0, session.payload_com)
    assert session.payload_kg[4] == 5.0
    assert np.abs(with_payload - without).max() > 1.0  # 5 kg at ~0.5 m: several N m on the lift joint
    np.testing.assert_allclose(with_payload, session.joint_efforts[4], atol=1e-3)


@pytest.mark.parametrize("poses_file, flags", [
    ("poses_quat.csv", []),
    ("poses_rpy.csv", ["--rotation", "rpy"]),
    ("poses_rotvec.csv", ["--rotation", "rotvec"]),  # matched by time stamp: it has no pose column
    ("poses_matrix.csv", []),
])
def test_each_pose_form_imports_to_the_same_tracked_poses(tmp_path, poses_file, flags):
    out = tmp_path / "session"
    code, stdout, stderr = import_tracker(out, "--poses", str(DATA / poses_file), *flags)
    assert code == 0, stderr
    assert "6 6-DoF poses" in stdout
    session = load_session(out)
    assert session.tracker is None
    poses = session.tracker_poses
    assert poses.pose_index.tolist() == list(range(6))
    truth = np.array(TRUTH["tracker_T_probe"])
    np.testing.assert_allclose(poses.tracker_T_probe[:, :3, 3], truth[:, :3, 3], atol=1e-8)
    np.testing.assert_allclose(poses.tracker_T_probe[:, :3, :3], truth[:, :3, :3], atol=1e-9)
    if poses_file == "poses_quat.csv":
        np.testing.assert_allclose(poses.sigma_pos, 5e-5)
        np.testing.assert_allclose(poses.sigma_rot, np.deg2rad(0.01))
    else:
        assert poses.sigma_pos is None and poses.sigma_rot is None
    manifest = json.loads((out / "session.json").read_text())
    assert manifest["sensors"]["tracker_poses"]["frame"] == "tracker"


def test_rpy_is_the_urdf_convention():
    """rx, ry, rz as roll-pitch-yaw mean R = Rz(yaw) Ry(pitch) Rx(roll), like a URDF origin."""
    from capture.importers.poses6d import read_poses
    from rigs.transforms import rpy_to_matrix

    records = read_poses(DATA / "poses_rpy.csv", "mm", "deg", "rpy")
    first = (DATA / "poses_rpy.csv").read_text().splitlines()[1].split(",")
    np.testing.assert_allclose(records.tracker_T_probe[0, :3, :3], rpy_to_matrix(np.deg2rad([float(v) for v in first[4:7]])),
                               atol=1e-12)


def test_points_and_poses_together_and_named_targets(tmp_path):
    out = tmp_path / "session"
    code, _, stderr = import_tracker(out, "--points", str(DATA / "points_uxyz.csv"), "--poses", str(DATA / "poses_quat.csv"),
                                     "--target", "smr1=30,0,20", "--json")
    assert code == 0, stderr
    session = load_session(out)
    assert len(session.tracker.targets) == 18 and len(session.tracker_poses.pose_index) == 6
    np.testing.assert_allclose(session.nominal_targets["smr1"], [0.03, 0.0, 0.02])
    np.testing.assert_allclose(session.nominal_targets["smr2"], [0.0, 0.0, 0.0])


def test_session_is_self_contained_and_movable(tmp_path):
    out = tmp_path / "session"
    assert import_tracker(out, "--points", str(DATA / "sa_export.txt"))[0] == 0
    moved = tmp_path / "elsewhere" / "moved"
    shutil.move(str(out), moved)
    session = load_session(moved)  # checks every mesh lies inside the folder
    text = session.urdf_path.read_text()
    assert "package://" not in text and "meshes/00_link.obj" in text
    assert (moved / "meshes" / "00_link.obj").is_file()


def test_time_matching_joins_points_to_the_nearest_joint_row(tmp_path):
    """sa_columns.csv has time stamps 0-0.2 s after each joint row; --match time pairs them."""
    out = tmp_path / "session"
    code, _, stderr = import_tracker(out, "--points", str(DATA / "sa_columns.csv"), "--match", "time",
                                     "--tolerance", "0.3")
    assert code == 0, stderr
    session = load_session(out)
    assert json.loads((out / "session.json").read_text())["source"]["match"] == "time"
    by_name = tmp_path / "by-name"
    assert import_tracker(by_name, "--points", str(DATA / "sa_columns.csv"), "--match", "name")[0] == 0
    named = load_session(by_name)
    assert session.tracker.pose_index.tolist() == named.tracker.pose_index.tolist()
    np.testing.assert_array_equal(session.tracker.xyz, named.tracker.xyz)
    # Too tight a tolerance: the third reflector of each pose was measured 0.2 s after the joint row.
    code, _, stderr = import_tracker(tmp_path / "tight", "--points", str(DATA / "sa_columns.csv"), "--match", "time",
                                     "--tolerance", "0.15")
    assert code == 2 and "line 5" in stderr and "no joint sample within 0.15 s" in stderr


def test_tables_from_windows_tools_read(tmp_path):
    """A UTF-8 byte-order mark, Windows-1252 text, CRLF line ends and units in the header all read."""
    from capture.importers.tracker_exports import read_points

    path = tmp_path / "export.csv"
    text = "// Messung Halle 3, 21,4 \xb0C\r\nPose,Target,X [mm],Y [mm],Z [mm]\r\np0000,smr1,1000.5,-20,300\r\n"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("cp1252"))
    records = read_points(path, "mm")
    assert records.pose == ["p0000"] and records.target == ["smr1"]
    np.testing.assert_array_equal(records.xyz, [[1.0005, -0.02, 0.3]])


def test_an_import_says_which_files_it_read_as_cp1252(tmp_path):
    """Windows-1252 is a guess for a file that is not UTF-8: the summary says it, so a wrong one shows."""
    points = tmp_path / "sa_export.txt"
    points.write_bytes((DATA / "sa_export.txt").read_bytes().replace(b"// Units: Millimeters",
                                                                     b"// Units: Millimeters, Halle 3, 21,4 \xb0C", 1))
    code, stdout, stderr = import_tracker(tmp_path / "session", "--points", str(points))
    assert code == 0, stderr
    assert "points file read as cp1252 (it is not UTF-8)" in stdout and "joints file" not in stdout
    assert load_session(tmp_path / "session").manifest["source"]["read_as"] == {"points": "cp1252"}
    code, stdout, _ = import_tracker(tmp_path / "utf8", "--points", str(DATA / "sa_export.txt"), "--json")
    assert code == 0 and json.loads(stdout)["read_as"] == {}


def test_a_tracker_poses_file_with_an_unknown_pose_is_refused_on_load(tmp_path):
    out = tmp_path / "session"
    assert import_tracker(out, "--poses", str(DATA / "poses_quat.csv"))[0] == 0
    text = (out / "tracker_poses.csv").read_text().replace("p0003,", "p0042,")
    (out / "tracker_poses.csv").write_text(text)
    from rigs.errors import InputError

    with pytest.raises(InputError, match="row 5: pose 'p0042' has no row in joints.csv"):
        load_session(out)


def test_a_simulated_session_has_no_efforts_or_tracked_poses(iiwa_session):
    session = load_session(iiwa_session)
    assert session.joint_efforts is None and session.tracker_poses is None
