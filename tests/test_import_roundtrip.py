"""A simulated session written out the way a lab's files look (mm, degrees, shuffled columns,
comment lines, SpatialAnalyzer names, ROS 2 bags) imports back to the same joint values and points."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from capture.session import load_session
from selfcal.cli import app


def mm(metres: float) -> str:
    return repr(float(metres) * 1000.0)


def cli(*args: str):
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, (result.stderr, result.exception)
    return result


def robot_args(session) -> list[str]:
    return ["--urdf", str(session.urdf_path), "--base-link", session.base_link, "--tip-link", session.tip_link]


def write_lab_joints(session, path: Path, rng: np.random.Generator, payload_kg: np.ndarray | None = None) -> None:
    """Degrees, columns in a random order with pose in the middle, comment lines."""
    columns = [*session.joint_names, "pose", *(["payload_kg"] if payload_kg is not None else [])]
    columns = [columns[i] for i in rng.permutation(len(columns))]
    lines = ["// exported by the robot controller", "# angles in degrees"]
    lines.append(",".join(columns))
    for row, pose in enumerate(session.pose_ids):
        values = {name: repr(float(np.rad2deg(session.q[row, j]))) for j, name in enumerate(session.joint_names)}
        values["pose"] = pose
        if payload_kg is not None:
            values["payload_kg"] = repr(float(payload_kg[row]))
        lines.append(",".join(values[c] for c in columns))
        if row == 10:
            lines.append("// operator: re-locked the tracker here")
    path.write_text("\n".join(lines) + "\n")


def write_sa_points(session, path: Path) -> None:
    """SpatialAnalyzer style: // comments, Collection::Group::Target, tabs, millimetres, an extra column."""
    lines = ["// SpatialAnalyzer point export", "// Units: Millimeters"]
    tracker = session.tracker
    for row, target, xyz in zip(tracker.pose_index, tracker.targets, tracker.xyz):
        mm = [float(v) * 1000.0 for v in xyz]
        lines.append(f"Calib::{session.pose_ids[row]}::{target}\t{mm[0]!r}\t{mm[1]!r}\t{mm[2]!r}\t0.021")
    path.write_text("\n".join(lines) + "\n")


def assert_same_session(imported, original, atol_q: float = 1e-12, atol_xyz: float = 1e-12) -> None:
    assert imported.joint_names == original.joint_names
    assert imported.pose_ids == original.pose_ids
    np.testing.assert_allclose(imported.q, original.q, rtol=0, atol=atol_q)
    got = {(imported.pose_ids[r], t): x for r, t, x in zip(imported.tracker.pose_index, imported.tracker.targets,
                                                             imported.tracker.xyz)}
    want = {(original.pose_ids[r], t): x for r, t, x in zip(original.tracker.pose_index, original.tracker.targets,
                                                             original.tracker.xyz)}
    assert got.keys() == want.keys()
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=0, atol=atol_xyz)


def test_mm_degree_csvs_with_shuffled_columns_import_to_the_simulated_session(iiwa_session, tmp_path):
    original = load_session(iiwa_session)
    rng = np.random.default_rng(7)
    payload = rng.choice([0.0, 2.5, 5.0], len(original.pose_ids))
    write_lab_joints(original, tmp_path / "joints.csv", rng, payload)
    write_sa_points(original, tmp_path / "points.txt")
    out = tmp_path / "imported"
    cli("import", "tracker", *robot_args(original), "--joints", str(tmp_path / "joints.csv"),
        "--points", str(tmp_path / "points.txt"), "--out", str(out), "--length-unit", "mm", "--angle-unit", "deg")
    imported = load_session(out)
    assert_same_session(imported, original)
    np.testing.assert_array_equal(imported.payload_kg, payload)
    assert sorted(imported.nominal_targets) == sorted(original.nominal_targets)
    assert not (out / "truth").exists()


def test_an_imported_session_of_a_copy_without_truth_is_the_same(iiwa_session, tmp_path):
    """The importer reads only what it is given: a copy of the session without truth/ imports identically."""
    copy = tmp_path / "copy"
    shutil.copytree(iiwa_session, copy, ignore=shutil.ignore_patterns("truth"))
    original = load_session(copy)
    write_lab_joints(original, tmp_path / "joints.csv", np.random.default_rng(1))
    write_sa_points(original, tmp_path / "points.txt")
    out = tmp_path / "imported"
    cli("import", "tracker", *robot_args(original), "--joints", str(tmp_path / "joints.csv"),
        "--points", str(tmp_path / "points.txt"), "--out", str(out))
    assert_same_session(load_session(out), load_session(iiwa_session))


# -- ROS 2 bags ------------------------------------------------------------------------------------

def write_bag(path: Path, storage: str, stamps: np.ndarray, names: list[list[str]], positions: list[np.ndarray],
              efforts: list[np.ndarray] | None = None, topic: str = "/joint_states") -> None:
    """A real ROS 2 bag of sensor_msgs/msg/JointState, written with rosbags (no ROS)."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    typestore = get_typestore(Stores.ROS2_HUMBLE)
    JointState = typestore.types["sensor_msgs/msg/JointState"]
    Header = typestore.types["std_msgs/msg/Header"]
    Time = typestore.types["builtin_interfaces/msg/Time"]
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    with Writer(path, version=8, storage_plugin=plugin) as writer:
        connection = writer.add_connection(topic, JointState.__msgtype__, typestore=typestore)
        for k, stamp in enumerate(stamps):
            sec = int(np.floor(stamp))
            message = JointState(Header(Time(sec, int(round((stamp - sec) * 1e9))), "base"), names[k],
                                 np.asarray(positions[k], dtype=np.float64), np.zeros(len(names[k])),
                                 np.asarray(efforts[k] if efforts is not None else [], dtype=np.float64))
            writer.write(connection, int(stamp * 1e9), typestore.serialize_cdr(message, JointState.__msgtype__))


def shuffled_message(session, row: int, rng, q: np.ndarray | None = None) -> tuple[list[str], np.ndarray]:
    """Joint names in a random order plus a gripper joint the chain does not have."""
    names = [*session.joint_names, "gripper_finger_joint"]
    values = np.append(session.q[row] if q is None else q, 0.02)
    order = rng.permutation(len(names))
    return [names[i] for i in order], values[order]


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_a_bag_with_one_message_per_pose_imports_by_name(iiwa_session, tmp_path, storage):
    original = load_session(iiwa_session)
    rng = np.random.default_rng(3)
    messages = [shuffled_message(original, row, rng) for row in range(len(original.pose_ids))]
    efforts = [np.arange(len(m[0]), dtype=float) for m in messages]  # effort i of the name at position i
    bag = tmp_path / f"poses-{storage}"
    write_bag(bag, storage, 1_700_000_000.0 + 5.0 * np.arange(len(messages)), [m[0] for m in messages],
              [m[1] for m in messages], efforts)
    points = tmp_path / "points.txt"
    points.write_text("".join(f"{original.pose_ids[r]}_{t} {mm(x[0])} {mm(x[1])} {mm(x[2])}\n"
                              for r, t, x in zip(original.tracker.pose_index, original.tracker.targets, original.tracker.xyz)))
    out = tmp_path / "imported"
    cli("import", "rosbag", str(bag), "--topic", "/joint_states", *robot_args(original), "--points", str(points),
        "--out", str(out), "--payload", "1.5")
    imported = load_session(out)
    assert_same_session(imported, original)
    np.testing.assert_array_equal(imported.payload_kg, 1.5)
    # Efforts follow the names too: each joint's effort is its position in its own message.
    expected = np.array([[m[0].index(name) for name in original.joint_names] for m in messages], dtype=float)
    np.testing.assert_array_equal(imported.joint_efforts, expected)


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_a_joint_state_stream_is_cut_into_standing_poses_by_time(iiwa_session, tmp_path, storage):
    """20 Hz joint states: the arm stands 3 s at each pose (encoder noise 1e-6 rad) and moves 2 s
    between; the tracker measures the three reflectors 0.5, 1.2 and 2.0 s into each stand."""
    original = load_session(iiwa_session)
    rng = np.random.default_rng(5)
    poses = 12
    stamps, names, positions = [], [], []
    t = 1_700_000_000.0
    for row in range(poses):
        for step in range(60):  # 3 s standing
            q = original.q[row] + rng.normal(0, 1e-6, len(original.joint_names))
            name, value = shuffled_message(original, row, rng, q)
            stamps.append(t + 0.05 * step), names.append(name), positions.append(value)
        if row + 1 < poses:
            for step in range(1, 40):  # 2 s moving to the next pose
                q = original.q[row] + (original.q[row + 1] - original.q[row]) * step / 40
                name, value = shuffled_message(original, row, rng, q)
                stamps.append(t + 3.0 + 0.05 * step), names.append(name), positions.append(value)
        t += 5.0
    bag = tmp_path / f"stream-{storage}"
    write_bag(bag, storage, np.array(stamps), names, positions)
    lines = ["name,x,y,z,time"]
    tracker = original.tracker
    for r, target, xyz in zip(tracker.pose_index, tracker.targets, tracker.xyz):
        if r < poses:
            delay = {"smr1": 0.5, "smr2": 1.2, "smr3": 2.0}[target]
            lines.append(f"{target},{mm(xyz[0])},{mm(xyz[1])},{mm(xyz[2])},{float(1_700_000_000.0 + 5.0 * r + delay)!r}")
    points = tmp_path / "points.csv"
    points.write_text("\n".join(lines) + "\n")
    out = tmp_path / "imported"
    result = cli("import", "rosbag", str(bag), *robot_args(original), "--points", str(points), "--out", str(out), "--json")
    assert '"poses": 12' in result.stdout
    imported = load_session(out)
    assert imported.pose_ids == [f"p{k:04d}" for k in range(poses)]
    np.testing.assert_allclose(imported.q, original.q[:poses], atol=1e-6)  # mean of the standing samples
    assert imported.tracker.pose_index.tolist() == original.tracker.pose_index[original.tracker.pose_index < poses].tolist()
    np.testing.assert_allclose(imported.tracker.xyz, original.tracker.xyz[original.tracker.pose_index < poses], atol=1e-12)
    assert (out / "joints.csv").read_text().splitlines()[0].split(",")[-1] == "time"


def test_bag_problems_are_one_sentence(iiwa_session, tmp_path):
    original = load_session(iiwa_session)
    rng = np.random.default_rng(0)
    names, values = shuffled_message(original, 0, rng)
    dropped = [n for n in names if n != original.joint_names[3]]
    bag = tmp_path / "bag"
    write_bag(bag, "sqlite3", np.array([1.0, 2.0]), [names, dropped],
              [values, values[[names.index(n) for n in dropped]]])
    points = tmp_path / "points.txt"
    points.write_text("p0000_smr1 100 200 300\n")

    def fails(*args: str) -> str:
        result = CliRunner().invoke(app, ["import", "rosbag", *args, *robot_args(original), "--points", str(points),
                                          "--out", str(tmp_path / "out")])
        assert result.exit_code == 2, (result.stderr, result.exception)
        assert not (tmp_path / "out").exists()
        return result.stderr.strip()

    assert f"message 2 has no joint {original.joint_names[3]!r}" in fails(str(bag))
    assert "no topic '/joints'" in fails(str(bag), "--topic", "/joints")
    assert "bag not found" in fails(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    assert "not a readable ROS 2 bag" in fails(str(tmp_path / "empty"))
