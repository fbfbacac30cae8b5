"""Hand-eye from a ROS 2 bag: photos of a ChArUco board with the flange pose from the bag's /tf.

A user's story: a cell records a bag while the arm stands at a few poses and moves between them;
the camera streams all the while and robot_state_publisher sends /tf at another rate. `selfcal
import rosbag BAG --flange-frames base_link,tool0` keeps one photo a stand, reads the flange pose
at its stamp through every frame between base_link and tool0, and writes the session `import
images --flange-poses` writes; `selfcal calibrate` finds the camera from it. A triggered capture
(one image a pose) imports the same from the controller's flange-pose file. Bad input is one
sentence naming the bag, the frames and the stamp.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from calib.sensors.board import parse_board
from capture.session import load_session
from capture.simulate_hand_eye_bag import HandEyeBagPlan, record_hand_eye_bag
from cli_runs import fails, invoke

BOARD = "charuco:7:5:0.04:0.03:5X5_100"  # large squares: the photos are small (640x480)
FRAMES = "base_link,tool0"


def position_and_angle(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per pose: distance (m) and rotation angle (deg) between (N, 4, 4) poses ``a`` and ``b``."""
    distance = np.linalg.norm(a[:, :3, 3] - b[:, :3, 3], axis=1)
    cosines = (np.trace(np.transpose(a[:, :3, :3], (0, 2, 1)) @ b[:, :3, :3], axis1=1, axis2=2) - 1) / 2
    return distance, np.degrees(np.arccos(np.clip(cosines, -1, 1)))


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> tuple[Path, dict]:
    """Eye-to-hand, 8 stands, the camera streaming at 4 Hz and /tf at 50 Hz (about 6 s)."""
    bag = tmp_path_factory.mktemp("hand_eye_bag") / "bag"
    return bag, record_hand_eye_bag(bag, parse_board(BOARD), "eye-to-hand", 8, 5)


@pytest.fixture(scope="module")
def imported(recording, tmp_path_factory) -> tuple[Path, dict]:
    bag, _ = recording
    out = tmp_path_factory.mktemp("hand_eye_bag_session") / "s"
    run = invoke("import", "rosbag", bag, "--flange-frames", FRAMES, "--board", BOARD, "--out", out, "--json")
    assert run.exit_code == 0, run.output
    return out, json.loads(run.output)


@pytest.fixture(scope="module")
def triggered(tmp_path_factory) -> tuple[Path, dict]:
    """Eye-in-hand, one image in the middle of each of 5 stands (a triggered capture), small photos."""
    plan = HandEyeBagPlan(camera_rate=1 / 0.8, camera_phase_s=0.2 + 0.25, size=(320, 240))
    bag = tmp_path_factory.mktemp("triggered_bag") / "bag"
    return bag, record_hand_eye_bag(bag, parse_board(BOARD), "eye-in-hand", 5, 6, plan)


def test_one_photo_a_stand_with_the_flange_pose_tf_gave_at_its_stamp(recording, imported):
    _, truth = recording
    out, summary = imported
    session = load_session(out)
    assert session.pose_ids == [f"p{k:04d}" for k in range(8)]
    camera = summary["cameras"]["camera"]
    assert camera["kept"] == 8 and camera["dropped"]["the flange was moving"] > 0
    assert summary["flange_poses"]["moving_transforms"] == ["link_1 -> link_6", "base_link -> link_1"]
    # The arm stood still at each photo: /tf composed through link_1, link_6 and the static tool0 is
    # the controller's report to rounding, and differs from the truth by the report's own error.
    distance, angle = position_and_angle(session.base_T_flange, truth["reported"].poses)
    assert distance.max() < 1e-9 and angle.max() < 1e-6
    distance, angle = position_and_angle(session.base_T_flange, truth["true"].poses)
    assert 1e-5 < np.median(distance) < 1e-3 and angle.max() < 0.1
    manifest = json.loads((out / "session.json").read_text())
    assert manifest["robot"]["urdf"] is None and manifest["sensors"]["board"]["mount"] == "flange"
    assert manifest["source"]["flange_frames"] == ["base_link", "tool0"]
    assert manifest["sensors"]["cameras"]["camera"]["frame_id"] == "camera_color_optical_frame"


def test_tf_between_samples_is_interpolated_while_the_flange_moves(recording):
    from capture.importers.rosbag import open_bag
    from capture.importers.tf_tree import read_transform_tree

    bag, truth = recording
    reader = open_bag(bag)
    try:
        tree = read_transform_tree(reader, str(bag))
    finally:
        reader.close()
    samples = truth["tf_stamps"]
    midway = (samples[:-1] + samples[1:]) / 2
    moving = np.array([t for t in midway if truth["true"].stand_at(t) is None
                       and truth["true"].stands[0, 0] < t < truth["true"].stands[-1, 1]])
    assert len(moving) > 50
    found = tree.lookup("base_link", "tool0", moving)
    reported = np.array([truth["reported"].at(t) for t in moving])
    nearest = np.array([truth["reported"].at(samples[np.argmin(np.abs(samples - t))]) for t in moving])
    distance, angle = position_and_angle(found.poses, reported)
    nearest_distance, _ = position_and_angle(nearest, reported)
    # The flange moves at up to about 1 m/s: the nearest sample is centimetres off, the
    # interpolated pose (slerp between samples 20 ms apart) a fraction of a millimetre.
    assert distance.max() < 1.5e-3 and angle.max() < 0.3
    assert np.median(distance) < 0.2 * np.median(nearest_distance)
    assert found.gap.max() < 0.011


def test_a_quarter_of_the_way_between_two_samples_is_a_quarter_of_the_turn_through_the_common_parent():
    from capture.importers.tf_tree import MovingTransform, TransformTree
    from rigs.transforms import axis_angle

    tree = TransformTree()
    turned = np.eye(4)
    turned[:3, :3] = axis_angle([0, 0, 1], np.pi / 2)
    turned[:3, 3] = [1.0, 0.0, 0.0]
    tree.moving["arm"] = MovingTransform("base", "arm", np.array([10.0, 11.0]), np.array([np.eye(4), turned]))
    tree.static.add("arm", "tool", np.array([[1, 0, 0, 0.0], [0, 1, 0, 0.2], [0, 0, 1, 0], [0, 0, 0, 1]]), "test")
    tree.static.add("base", "camera", np.array([[1, 0, 0, 0.0], [0, 1, 0, 0], [0, 0, 1, 2.0], [0, 0, 0, 1]]), "test")
    found = tree.lookup("camera", "tool", [10.25, 9.96, 12.0])
    quarter = np.radians(22.5)
    expected = np.array([0.25 - 0.2 * np.sin(quarter), 0.2 * np.cos(quarter), -2.0])
    assert np.allclose(found.poses[0][:3, 3], expected, atol=1e-12)
    assert np.allclose(found.poses[0][:3, :3], axis_angle([0, 0, 1], quarter), atol=1e-12)
    # Before the first sample the first one holds (no extrapolation), and the gap says how far it is.
    assert np.allclose(found.poses[1][:3, 3], [0.0, 0.2, -2.0]) and found.gap[1] == pytest.approx(0.04)
    assert found.gap[2] == pytest.approx(1.0) and found.worst[2] == "arm"


def test_the_session_calibrates_hand_eye_and_finds_the_camera(recording, imported, tmp_path):
    _, truth = recording
    out, _ = imported
    run = invoke("calibrate", out, "--out", tmp_path / "cal", "--json")
    assert run.exit_code == 0, run.output
    summary = json.loads(run.output)
    assert summary["model_choice"]["model"] == "hand-eye"
    assert summary["verdict"]["result"] == "PASS", summary["verdict"]
    pose = np.array(summary["calibration_document"]["cameras"]["camera"]["base_T_camera"])
    distance, angle = position_and_angle(pose[None], truth["camera"][None])
    # 8 photos, flange reports off by 0.2 mm and 0.02 degrees: the camera within a few mm and tenths of a degree.
    assert distance[0] < 4e-3 and angle[0] < 0.3


def test_a_triggered_capture_imports_alike_from_tf_and_from_the_controllers_file(triggered, tmp_path):
    bag, truth = triggered
    assert len(truth["photo_stamps"]) == 5
    from_tf = tmp_path / "tf"
    run = invoke("import", "rosbag", bag, "--flange-frames", FRAMES, "--board", BOARD, "--setup", "eye-in-hand",
                 "--out", from_tf)
    assert run.exit_code == 0, run.output
    # The controller's file names the k-th image's pose p{k:04d}, in millimetres here, and has one
    # pose the bag has no image of: it is left out.
    from rigs.transforms import quat_xyzw

    poses = [*truth["reported"].poses, truth["reported"].poses[0].copy()]
    poses[-1][2, 3] += 0.05
    lines = ["pose,x,y,z,qx,qy,qz,qw"] + [
        f"p{k:04d}," + ",".join(repr(float(v)) for v in [*(1000 * pose[:3, 3]), *quat_xyzw(pose[:3, :3])])
        for k, pose in enumerate(poses)]
    (tmp_path / "flange.csv").write_text("\n".join(lines) + "\n")
    from_file = tmp_path / "file"
    run = invoke("import", "rosbag", bag, "--flange-poses", tmp_path / "flange.csv", "--length-unit", "mm",
                 "--board", BOARD, "--setup", "eye-in-hand", "--out", from_file, "--json")
    assert run.exit_code == 0, run.output
    assert json.loads(run.output)["flange_poses"]["without_photo"] == 1
    a, b = load_session(from_tf), load_session(from_file)
    assert a.pose_ids == b.pose_ids == [f"p{k:04d}" for k in range(5)]
    distance, angle = position_and_angle(a.base_T_flange, b.base_T_flange)
    assert distance.max() < 1e-9 and angle.max() < 1e-6
    assert json.loads((from_file / "session.json").read_text())["sensors"]["board"]["mount"] == "world"
    assert len(list((from_file / "cameras" / "camera").glob("p*_rgb.png"))) == 5


# -- refused, with one sentence and exit 2 ------------------------------------------------------

def _rewrite(bag: Path, target: Path, keep) -> Path:
    """A copy of ``bag`` with only the messages ``keep(topic, stamp_s)`` accepts."""
    from rosbags.highlevel import AnyReader
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    with AnyReader([bag]) as reader, Writer(target, version=8) as writer:
        connections = {}
        for connection, stamp, raw in reader.messages():
            if not keep(connection.topic, stamp * 1e-9):
                continue
            if connection.topic not in connections:
                connections[connection.topic] = writer.add_connection(connection.topic, connection.msgtype,
                                                                      typestore=store)
            writer.write(connections[connection.topic], stamp, raw)
    return target


@pytest.mark.parametrize("case, expected", [
    ("unknown frame", ["frame 'tool9' of --flange-frames base_link,tool9 is in neither /tf nor /tf_static",
                       "link_6, tool0"]),
    ("no tf at the stamp", ["no /tf for base_link -> tool0 at the stamp", "topic /camera/color/image_raw message",
                            "more than --tolerance 0.05 s"]),
    ("static only", ["/tf_static alone links 'link_6' to 'tool0'"]),
    ("malformed", ["--flange-frames 'base_link': expected PARENT,CHILD"]),
    ("with urdf", ["--urdf: a flange-pose import needs no robot description", "--flange-frames out"]),
    ("short file", ["flange.csv: no flange pose for image 5 of camera 'camera'", "pose 'p0004'"]),
])
def test_bad_input_is_one_sentence_naming_the_bag_frames_and_stamp(triggered, tmp_path, case, expected):
    bag, truth = triggered
    frames = FRAMES
    extra: list = []
    if case == "unknown frame":
        frames = "base_link,tool9"
    elif case == "no tf at the stamp":
        # /tf stops after the third stand: the last photos' stamps lie beyond it.
        cut = truth["true"].stands[2, 1]
        bag = _rewrite(bag, tmp_path / "bag", lambda topic, t: topic != "/tf" or t < cut)
    elif case == "static only":
        frames = "link_6,tool0"
    elif case == "malformed":
        frames = "base_link"
    elif case == "with urdf":
        extra = ["--urdf", tmp_path / "robot.urdf"]
    args = ["--flange-frames", frames]
    if case == "short file":
        (tmp_path / "flange.csv").write_text("pose,x,y,z,qx,qy,qz,qw\n" + "".join(
            f"p{k:04d},0.{k + 3},0.1,0.4,0,0,0,1\n" for k in range(4)))
        args = ["--flange-poses", tmp_path / "flange.csv"]
    out = tmp_path / "s"
    message = fails("import", "rosbag", bag, *args, *extra, "--board", BOARD, "--setup", "eye-in-hand", "--out", out)
    assert all(text in message for text in expected), message
    if case not in ("malformed", "with urdf", "short file"):
        assert str(bag) in message
    assert not out.exists()
