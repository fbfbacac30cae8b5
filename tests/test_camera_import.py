"""Real camera recordings in: ROS 2 bags written the way drivers write them, and image folders.

A simulated rig (the two-joint box arm on a table in a room, three stereo depth cameras) is
recorded twice: as a native session, and as a ROS 2 bag (joint states at 100 Hz, images at 15 Hz,
the arm standing 0.5 s at each pose and moving 0.3 s between) in every encoding drivers use. The
bag imports to the native session's poses, camera poses and images; bad recordings are refused
with one sentence and exit 2.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from capture.importers.camera_import import NO_COLOUR, SURPLUS
from capture.importers.stills import MOVING
from capture.session import load_session
from capture.simulate_bag import BagPlan, CameraEncoding, record_bag
from rigs import load_rig
from cli_runs import fails, invoke

DATA = Path(__file__).parent / "data" / "selfmodel"
ROOM = DATA / "two_joint_box_room.toml"

# Every encoding at least once across the two bags; one camera stamps its images with its body frame.
ENCODINGS = {
    "sqlite3": {"front": CameraEncoding("16UC1", "rgb8"),
                "left": CameraEncoding("32FC1-png", "jpeg", colour_delay_s=0.003),
                "back": CameraEncoding("16UC1-png", "mono8", body_frame=True)},
    "mcap": {"front": CameraEncoding("32FC1", "bgr8"),
             "left": CameraEncoding("16UC1", "png"),
             "back": CameraEncoding("16UC1", None)},
}


def robot_args(session) -> list[str]:
    return ["--urdf", str(session.urdf_path), "--base-link", session.base_link, "--tip-link", session.tip_link]


@pytest.fixture(scope="module")
def native(capture_session) -> Path:
    return capture_session(str(ROOM), 12, 1)


@pytest.fixture(scope="module")
def bags(native, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bags")
    session = load_session(native)
    rig = load_rig(ROOM)
    return {storage: (record_bag(rig, session.q, 1, root / storage, BagPlan(encodings=encodings), storage=storage),
                      root / storage)[1]
            for storage, encodings in ENCODINGS.items()}


@pytest.fixture(scope="module")
def imported(bags, native, tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    root = tmp_path_factory.mktemp("imported")
    session = load_session(native)
    result = {}
    for storage, bag in bags.items():
        out = root / storage
        run = invoke("import", "rosbag", str(bag), *robot_args(session), "--out", str(out), "--json")
        assert run.exit_code == 0, (run.output, run.exception)
        result[storage] = (out, json.loads(run.output))
    return result


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_a_bag_imports_to_the_native_poses_cameras_and_images(imported, native, storage):
    out, summary = imported[storage]
    ours, theirs = load_session(out), load_session(native)
    assert ours.pose_ids == theirs.pose_ids
    np.testing.assert_allclose(ours.q, theirs.q, atol=2e-6)  # the mean of ~50 encoder samples of 1e-6 rad noise
    assert set(ours.cameras) == set(theirs.cameras)
    for name, camera in ours.cameras.items():
        # From /tf_static, the body-frame camera rotated to its optical frame.
        np.testing.assert_allclose(camera.base_T_camera, theirs.cameras[name].base_T_camera, atol=1e-9)
        assert camera.no_depth == "auto"  # the default: no-return regions free, small holes unknown
        assert 0 < camera.far_range_m < 10  # the largest reading of a camera in a room
        zeros = summary["cameras"][name]["no_reading"]
        assert zeros["images"] == len(theirs.pose_ids) and zeros["no_reading"] < 0.5
        counts = summary["cameras"][name]
        assert counts["kept"] == len(theirs.pose_ids)
        assert counts["frames"] == counts["kept"] + sum(counts["dropped"].values())
        assert counts["dropped"][MOVING] > 0 and counts["dropped"][SURPLUS] > 0
        assert NO_COLOUR not in counts["dropped"]  # 3 ms apart pairs within the 10 ms tolerance
        for pose in theirs.pose_ids[:4]:
            a, b = ours.image(name, pose, "depth"), theirs.image(name, pose, "depth")
            both = (a > 0) & (b > 0)
            assert both.sum() > 0.9 * (b > 0).sum()
            # Independent noise draws of the same scene: differences of a few sigma at 1-3 m.
            assert np.median(np.abs(a - b)[both]) < 0.012
            encoding = ENCODINGS[storage][name]
            if encoding.colour is None:
                assert not ours.has_image(name, pose, "rgb")
                continue
            ra, rb = ours.image(name, pose, "rgb").astype(float), theirs.image(name, pose, "rgb").astype(float)
            if encoding.colour in ("rgb8", "bgr8", "png"):
                assert np.array_equal(ra, rb)
            elif encoding.colour == "mono8":
                grey = cv2.cvtColor(theirs.image(name, pose, "rgb"), cv2.COLOR_RGB2GRAY).astype(float)
                assert np.abs(ra[..., 0] - grey).max() <= 1 and np.array_equal(ra[..., 0], ra[..., 2])
            else:
                assert np.abs(ra - rb).mean() < 3.0  # JPEG
    # Depth noise measured from the frames of each stand: near the camera model's own law.
    for name, camera in ours.cameras.items():
        truth = theirs.cameras[name].depth_sigma_at_1m
        assert camera.depth_sigma_at_1m == pytest.approx(truth, rel=0.35), name


def test_frames_within_the_still_window_of_a_motion_are_dropped(imported, native):
    """11 moves of 0.3 s, and 0.1 s of still window either side: 0.5 s x 15 Hz = 7.5 frames a move."""
    moves = len(load_session(native).pose_ids) - 1
    for storage, (_, summary) in imported.items():
        for name, counts in summary["cameras"].items():
            assert counts["dropped"][MOVING] == pytest.approx(7.5 * moves, abs=moves), (storage, name)
    # A wider window drops more: 0.25 s either side is 0.8 s of every cycle.
    # (checked on one bag; the window is the stated tolerance around each stamp)


def test_the_frame_convention_flag_overrides_the_name(bags, native, tmp_path):
    session = load_session(native)
    out = tmp_path / "optical"
    run = invoke("import", "rosbag", str(bags["sqlite3"]), *robot_args(session), "--out", str(out),
                 "--frame-convention", "optical")
    assert run.exit_code == 0, run.output
    # Read as optical, the body frame 'back_link' gives a pose rotated away from the truth.
    pose = load_session(out).cameras["back"].base_T_camera
    truth = session.cameras["back"].base_T_camera
    assert np.allclose(pose[:3, 3], truth[:3, 3]) and not np.allclose(pose[:3, :3], truth[:3, :3], atol=0.1)


def test_an_imported_bag_trains_a_self_model_as_good_as_the_native_session(imported, native, capture_session):
    from selfmodel.evaluation.metrics import evaluate
    from selfmodel.labels.depth import LabelSettings
    from selfmodel.learn.trainer import SelfModelTrainer

    heldout = load_session(capture_session(str(ROOM), 4, 2))
    figures = {}
    for label, folder in (("native", native), ("bag", imported["sqlite3"][0])):
        trainer = SelfModelTrainer(steps=300, seed=3, batch=2048, prior_batch=512, threads=1,
                                   labels=LabelSettings(hit_rays_per_image=300, background_rays_per_image=300))
        model = trainer.fit([load_session(folder)]).model
        figures[label] = evaluate(model, heldout, np.random.default_rng(0), voxel=0.005, surface_samples=4000,
                                  volume_samples=10_000)
    assert figures["bag"]["chamfer_l1_mm"] < 4.0, figures
    assert figures["bag"]["chamfer_l1_mm"] < 1.6 * figures["native"]["chamfer_l1_mm"], figures
    assert figures["bag"]["false_free_rate"] < 0.05, figures


# -- image folders ---------------------------------------------------------------------------------

def write_folder(session, folder: Path, with_pose: str | None = "front", clip: float | None = None) -> None:
    """A lab's folder: joints in degrees, depth PNGs in mm, colour as JPEG, camera_info.yaml, one pose.yaml;
    with ``clip`` (m), depth beyond it reads 0 (a driver's clipping distance)."""
    from rigs.transforms import quat_xyzw

    folder.mkdir()
    lines = ["pose," + ",".join(session.joint_names)]
    lines += [pose + "," + ",".join(repr(float(np.degrees(v))) for v in session.q[row])
              for row, pose in enumerate(session.pose_ids)]
    (folder / "joints.csv").write_text("\n".join(lines) + "\n")
    for name, camera in session.cameras.items():
        target = folder / "cameras" / name
        target.mkdir(parents=True)
        shutil.copy(session.path / "cameras" / name / "camera_info.yaml", target / "camera_info.yaml")
        for pose in session.pose_ids:
            depth = session.image(name, pose, "depth")
            if clip is not None:
                depth = np.where(depth > clip, 0.0, depth)
            cv2.imwrite(str(target / f"{pose}_depth.png"), np.round(depth * 1000).astype(np.uint16))
            cv2.imwrite(str(target / f"{pose}_rgb.jpg"), session.image(name, pose, "rgb")[..., ::-1])
        if name == with_pose:
            from capture.importers.tf_static import BODY_T_OPTICAL
            from rigs.transforms import invert

            body = camera.base_T_camera @ invert(BODY_T_OPTICAL)
            (target / "pose.yaml").write_text(yaml.safe_dump({"frame": "body", "xyz": body[:3, 3].tolist(),
                                                              "quat_xyzw": quat_xyzw(body[:3, :3]).tolist()}))


def test_an_image_folder_imports_with_its_poses_and_without(native, tmp_path):
    session = load_session(native)
    folder = tmp_path / "lab"
    write_folder(session, folder)
    out = tmp_path / "session"
    run = invoke("import", "images", str(folder), *robot_args(session), "--out", str(out), "--json")
    assert run.exit_code == 0, (run.output, run.exception)
    summary = json.loads(run.output)
    imported = load_session(out)
    assert imported.pose_ids == session.pose_ids
    np.testing.assert_allclose(imported.q, session.q, atol=1e-12)
    np.testing.assert_allclose(imported.cameras["front"].base_T_camera, session.cameras["front"].base_T_camera,
                               atol=1e-9)
    assert imported.cameras["left"].base_T_camera is None and summary["cameras"]["left"]["pose"] is None
    for pose in session.pose_ids[:3]:
        assert np.abs(imported.image("left", pose, "depth") - session.image("left", pose, "depth")).max() <= 0.0005 + 1e-6
    # Training needs every camera's pose, and says how to get them.
    run = invoke("selfmodel", "train", str(out), "--out", str(tmp_path / "model"), "--steps", "2")
    assert run.exit_code == 2 and "selfcal calibrate" in run.output and "--cameras" in run.output
    assert not (tmp_path / "model.partial").exists()


def test_the_import_says_how_much_of_each_image_reads_nothing_and_what_it_takes_that_to_mean(native, tmp_path):
    """The room behind the arm clipped away, as a driver's clipping distance does: most of every
    image reads nothing. The import says so per camera, split into no-return regions connected to
    the border and holes, warns naming --no-depth, and records the meaning per camera."""
    session = load_session(native)
    clip = 1.6
    folder = tmp_path / "lab"
    write_folder(session, folder, with_pose=None, clip=clip)
    out = tmp_path / "session"
    run = invoke("import", "images", str(folder), *robot_args(session), "--out", str(out), "--json")
    assert run.exit_code == 0, (run.output, run.exception)
    summary = json.loads(run.stdout)
    imported = load_session(out)
    for name, camera in summary["cameras"].items():
        zeros = camera["no_reading"]
        assert zeros["no_reading"] > 0.5 and zeros["border"] > 0.9 * zeros["no_reading"], zeros
        assert camera["no_depth"] == "auto" and imported.cameras[name].no_depth == "auto"
        assert camera["far_range_m"] <= clip and "largest reading" in camera["far_range_source"]
    warnings = summary["warnings"]
    assert len(warnings) == len(session.cameras) and all("--no-depth" in w for w in warnings)
    # Without --json the warning goes to the terminal, with the count per camera.
    run = invoke("import", "images", str(folder), *robot_args(session), "--out", str(tmp_path / "plain"))
    assert run.exit_code == 0 and "warning:" in run.stderr and "reads nothing" in run.stderr, run.output
    assert "no reading:" in run.stdout and "no return connected to the border" in run.stdout
    # Unknown for all but one camera, stated far range: recorded as said, and the warning points at auto.
    out = tmp_path / "unknown"
    run = invoke("import", "images", str(folder), *robot_args(session), "--out", str(out), "--json",
                 "--no-depth", "unknown", "--no-depth", "front=free", "--far-range", "1.6")
    assert run.exit_code == 0, (run.output, run.exception)
    imported = load_session(out)
    assert imported.cameras["front"].no_depth == "free" and imported.cameras["left"].no_depth == "unknown"
    assert all(camera.far_range_m == 1.6 for camera in imported.cameras.values())
    assert "--no-depth auto" in " ".join(json.loads(run.stdout)["warnings"])
    # The room as recorded: no warning.
    write_folder(session, tmp_path / "room", with_pose=None)
    run = invoke("import", "images", str(tmp_path / "room"), *robot_args(session), "--out", str(tmp_path / "r"), "--json")
    assert run.exit_code == 0 and json.loads(run.stdout)["warnings"] == []
    # A camera --no-depth names that the folder lacks, or a mode that is none: one sentence, exit 2.
    for bad, said in ((["--no-depth", "top=free"], "no camera 'top'"), (["--no-depth", "empty"], "must be one of")):
        text = fails("import", "images", str(folder), *robot_args(session), "--out", str(tmp_path / "bad"), *bad)
        assert said in text and not (tmp_path / "bad").exists()


# -- refused, with one sentence and exit 2 ---------------------------------------------------------


def small_bag(path: Path, session, rig, encodings: dict, poses: int = 2, plan: BagPlan | None = None) -> Path:
    plan = plan or BagPlan(hold_s=0.3, move_s=0.2, encodings=encodings)
    record_bag(rig, session.q[:poses], 1, path, plan)
    return path


def rewrite_bag(source: Path, target: Path, change) -> Path:
    """Copy a bag message by message, letting ``change(topic, message)`` edit each (or return None to drop it)."""
    from rosbags.highlevel import AnyReader
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    typestore = get_typestore(Stores.ROS2_HUMBLE)
    with AnyReader([source]) as reader, Writer(target, version=8) as writer:
        connections = {}
        for connection, stamp, raw in reader.messages():
            message = reader.deserialize(raw, connection.msgtype)
            message = change(connection.topic, message)
            if message is None:
                continue
            if connection.topic not in connections:
                connections[connection.topic] = writer.add_connection(connection.topic, connection.msgtype,
                                                                      typestore=typestore)
            writer.write(connections[connection.topic], stamp, typestore.serialize_cdr(message, connection.msgtype))
    return target


@pytest.fixture(scope="module")
def plain_bag(native, tmp_path_factory) -> Path:
    session = load_session(native)
    return small_bag(tmp_path_factory.mktemp("plain") / "bag", session, load_rig(ROOM),
                     {name: CameraEncoding("16UC1", "rgb8") for name in session.cameras})


def test_depth_in_the_wrong_unit_is_caught(plain_bag, native, tmp_path):
    session = load_session(native)
    args = robot_args(session)
    message = fails("import", "rosbag", str(plain_bag), *args, "--out", str(tmp_path / "o"), "--depth-scale", "0.0001")
    assert "median depth" in message and "--depth-scale 0.001" in message
    assert not (tmp_path / "o").exists()

    def metres_as_float(topic, msg):
        if topic.endswith("aligned_depth_to_color/image_raw"):
            values = np.frombuffer(msg.data.tobytes(), np.uint16).astype(np.float32)  # mm in a 32FC1 image
            msg.encoding, msg.step = "32FC1", msg.width * 4
            msg.data = values.view(np.uint8).copy()
        return msg

    bad = rewrite_bag(plain_bag, tmp_path / "mm-float", metres_as_float)
    message = fails("import", "rosbag", str(bad), *args, "--out", str(tmp_path / "o"))
    assert "look like millimetres" in message and "32FC1" in message


def test_camera_info_that_does_not_match_the_image_is_caught(plain_bag, native, tmp_path):
    session = load_session(native)

    def shrink(topic, msg):
        if topic == "/left/aligned_depth_to_color/camera_info":
            msg.width, msg.height = 320, 240
        return msg

    bad = rewrite_bag(plain_bag, tmp_path / "bag", shrink)
    message = fails("import", "rosbag", str(bad), *robot_args(session), "--out", str(tmp_path / "o"))
    assert "160x120" in message and "says 320x240" in message and "/left/aligned_depth_to_color" in message


def test_a_frame_id_tf_does_not_know_is_caught(plain_bag, native, tmp_path):
    session = load_session(native)

    def rename(topic, msg):
        if topic.startswith("/front/") and hasattr(msg, "header"):
            msg.header.frame_id = "front_camera_optical"  # a typo of front_color_optical_frame
        return msg

    bad = rewrite_bag(plain_bag, tmp_path / "bag", rename)
    message = fails("import", "rosbag", str(bad), *robot_args(session), "--out", str(tmp_path / "o"))
    assert "'front_camera_optical'" in message and "not in /tf_static" in message and "--camera-poses none" in message
    out = tmp_path / "unknown-poses"
    run = invoke("import", "rosbag", str(bad), *robot_args(session), "--out", str(out), "--camera-poses", "none")
    assert run.exit_code == 0, run.output
    assert all(c.base_T_camera is None for c in load_session(out).cameras.values())


def test_without_tf_static_camera_poses_are_left_for_calibration(plain_bag, native, tmp_path):
    session = load_session(native)
    bad = rewrite_bag(plain_bag, tmp_path / "bag", lambda topic, msg: None if topic == "/tf_static" else msg)
    out = tmp_path / "o"
    run = invoke("import", "rosbag", str(bad), *robot_args(session), "--out", str(out), "--json")
    assert run.exit_code == 0, run.output
    assert all(c["pose"] is None and "no /tf_static" in c["pose_source"] for c in json.loads(run.output)["cameras"].values())
    assert "no /tf_static" in fails("import", "rosbag", str(bad), *robot_args(session), "--out", str(tmp_path / "p"),
                                    "--camera-poses", "tf")


def test_ambiguous_streams_name_the_topics_and_the_flag_chooses(plain_bag, native, tmp_path):
    """Camera 'front' gets two more depth streams: one registered to colour, one in its own frame."""
    from rosbags.highlevel import AnyReader
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    session = load_session(native)
    typestore = get_typestore(Stores.ROS2_HUMBLE)
    target = tmp_path / "three-depth"
    with AnyReader([plain_bag]) as reader, Writer(target, version=8) as writer:
        connections = {}

        def put(topic, msgtype, stamp, message):
            if topic not in connections:
                connections[topic] = writer.add_connection(topic, msgtype, typestore=typestore)
            writer.write(connections[topic], stamp, typestore.serialize_cdr(message, msgtype))

        for connection, stamp, raw in reader.messages():
            put(connection.topic, connection.msgtype, stamp, reader.deserialize(raw, connection.msgtype))
            if connection.topic.startswith("/front/aligned_depth_to_color/"):
                put(connection.topic.replace("aligned_depth_to_color", "depth_registered"), connection.msgtype, stamp,
                    reader.deserialize(raw, connection.msgtype))
                message = reader.deserialize(raw, connection.msgtype)
                message.header.frame_id = "front_depth_optical_frame"
                put(connection.topic.replace("aligned_depth_to_color", "depth"), connection.msgtype, stamp, message)
    args = robot_args(session)
    message = fails("import", "rosbag", str(target), *args, "--out", str(tmp_path / "o"))
    assert "camera 'front' has 2 depth streams" in message and "--camera front=" in message
    assert "/front/depth_registered/image_raw" in message and "/back/color/image_raw" in message  # the listing
    run = invoke("import", "rosbag", str(target), *args, "--out", str(tmp_path / "chosen"),
                 "--camera", "front=/front/depth_registered/image_raw,/front/color/image_raw",
                 "--camera", "left=/left/aligned_depth_to_color/image_raw", "--json")
    assert run.exit_code == 0, run.output
    assert set(json.loads(run.output)["cameras"]) == {"front", "left"}
    assert not load_session(tmp_path / "chosen").has_image("left", "p0000", "rgb")
    message = fails("import", "rosbag", str(target), *args, "--out", str(tmp_path / "o"),
                    "--camera", "front=/front/depth/image_raw,/front/color/image_raw")
    assert "is in frame 'front_depth_optical_frame'" in message and "registered" in message
    message = fails("import", "rosbag", str(target), *args, "--out", str(tmp_path / "o"), "--camera", "front=/front/nothing")
    assert "no topic '/front/nothing'" in message and "/front/color/image_raw" in message


def test_folder_problems_are_one_sentence(native, tmp_path):
    session = load_session(native)
    folder = tmp_path / "lab"
    write_folder(session, folder)
    args = robot_args(session)
    (folder / "cameras" / "left" / "p9999_depth.png").write_bytes((folder / "cameras" / "left" / "p0000_depth.png").read_bytes())
    assert "pose 'p9999' has no row in joints.csv" in fails("import", "images", str(folder), *args, "--out", str(tmp_path / "o"))
    (folder / "cameras" / "left" / "p9999_depth.png").unlink()
    assert "median depth" in fails("import", "images", str(folder), *args, "--out", str(tmp_path / "o"), "--depth-scale", "1")
    info = folder / "cameras" / "back" / "camera_info.yaml"
    data = yaml.safe_load(info.read_text())
    data["image_width"] = 200
    info.write_text(yaml.safe_dump(data))
    assert "but" in fails("import", "images", str(folder), *args, "--out", str(tmp_path / "o")) and \
        "200x120" in fails("import", "images", str(folder), *args, "--out", str(tmp_path / "o"))
    assert not (tmp_path / "o").exists()


# -- camera poses from the board on the flange -----------------------------------------------------

@pytest.mark.slow  # capture, camera calibration and a training end to end
def test_camera_poses_from_the_board_feed_the_self_model(capture_session, tmp_path):
    """A bag without /tf_static: `selfcal calibrate` finds the cameras from the board on the flange,
    and `selfmodel train --cameras` trains with them; the model evaluates on a native session."""
    from rigs.transforms import invert, log6

    native = load_session(capture_session("xarm6-cameras", 16, 3))
    rig = load_rig("xarm6-cameras")
    bag = tmp_path / "bag"
    record_bag(rig, native.q, 3, bag, BagPlan(hold_s=0.4, move_s=0.1, camera_rate=10.0,
                                              encodings={c.name: CameraEncoding("16UC1-png", "jpeg") for c in rig.cameras}))
    session = tmp_path / "session"
    run = invoke("import", "rosbag", str(bag), *robot_args(native), "--out", str(session), "--camera-poses", "none",
                 "--board", "charuco:7:5:0.035:0.026:4X4_50", "--json")
    assert run.exit_code == 0, run.output
    assert all(c["pose"] is None for c in json.loads(run.output)["cameras"].values())
    model = tmp_path / "model"
    message = fails("selfmodel", "train", str(session), "--out", str(model), "--steps", "2")
    assert "selfcal calibrate" in message and not model.with_name("model.partial").exists()
    cal = tmp_path / "cal"
    run = invoke("calibrate", str(session), "--out", str(cal), "--json")
    assert run.exit_code == 0, run.output
    found = json.loads(run.output)["base_T_camera"]
    for name, camera in native.cameras.items():
        error = invert(camera.base_T_camera) @ np.asarray(found[name])
        assert np.linalg.norm(error[:3, 3]) < 0.01, name  # m
        assert np.degrees(np.linalg.norm(log6(error)[3:])) < 0.5, name
    run = invoke("selfmodel", "train", str(session), "--out", str(model), "--steps", "30", "--threads", "1",
                 "--cameras", str(cal), "--json")
    assert run.exit_code == 0, run.output
    assert json.loads((model / "config.json").read_text())["training"]["cameras"] == str(cal)
    # On the calibration's own URDF the model's board sits where the calibration fitted it.
    held = tmp_path / "model-held"
    run = invoke("selfmodel", "train", str(session), "--out", str(held), "--steps", "2", "--threads", "1",
                 "--urdf", str(cal / "robot.urdf"), "--cameras", str(cal), "--json")
    assert run.exit_code == 0, run.output
    board = json.loads((held / "config.json").read_text())["board"]
    from calib.calibration import Calibration

    np.testing.assert_allclose(board["tip_T_board_fitted"], Calibration.load(cal).tip_T_board, atol=1e-12)
    assert board["tip_T_board_fitted_from"] == str(cal / "calibration.yaml")
    assert "tip_T_board_fitted" not in json.loads((model / "config.json").read_text())["board"]
    run = invoke("selfmodel", "eval", str(model), str(native.path), "--poses", "2", "--voxel-mm", "8", "--json")
    assert run.exit_code == 0, run.output
    assert json.loads(run.output)["poses"] == 2


def test_stands_and_frames_follow_the_joint_motion():
    """1 s standing, 1 s moving, 1 s standing at 100 Hz: frames during the move and within the
    window of it are the arm moving, frames after the last joint state have none around them."""
    from capture.importers.stills import NO_JOINTS, assign_frames, find_stands

    times = np.arange(0.0, 3.0, 0.01)
    q = np.zeros((len(times), 2))
    moving = (times >= 1.0) & (times < 2.0)
    q[moving, 0] = (times[moving] - 1.0) * 0.5
    q[times >= 2.0, 0] = 0.5
    q += np.random.default_rng(0).normal(0, 1e-6, q.shape)
    stands, stand_of = find_stands(times, q, 1e-4, 0.1, 0.05)
    assert len(stands.q) == 2
    np.testing.assert_allclose(stands.q[:, 0], [0.0, 0.5], atol=1e-6)
    frames = np.array([0.5, 0.95, 1.5, 2.05, 2.5, 3.2])
    stand, reasons = assign_frames(frames, times, q, stand_of, 1e-4, 0.1, 0.05)
    assert stand.tolist() == [0, -1, -1, -1, 1, -1]
    assert reasons == [None, MOVING, MOVING, MOVING, None, NO_JOINTS]
