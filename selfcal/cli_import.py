"""``selfcal import tracker|rosbag|images``: real measurement files into a session."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from rigs.no_return import DEFAULT_NO_DEPTH
from selfcal.options import (NO_DEPTH_HELP, AngleUnit, CameraPoses, FrameConvention, HandEyeSetup, LengthUnit, Match, Rotation,
                             parse_no_depth)
from selfcal.ui import print_json, progress_bar, user_errors

import_app = typer.Typer(no_args_is_help=True, help="Import real measurement files into a session folder.")


def register(app: typer.Typer) -> None:
    app.add_typer(import_app, name="import")


def _robot(urdf: Path, base_link: str, tip_link: str, package_dir: list[Path], payload_com: str | None,
           length_unit: str):
    from capture.importers.assemble import Robot
    from capture.importers.units import length_factor

    com = None
    if payload_com is not None:
        com = tuple(v * length_factor(length_unit) for v in _numbers(payload_com, "--payload-com", 3))
    return Robot(urdf, base_link, tip_link, tuple(package_dir), com)


def _numbers(text: str, flag: str, count: int) -> list[float]:
    from rigs.errors import InputError

    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != count:
        raise InputError(f"{flag} {text!r}: expected {count} comma-separated numbers.")
    return values


def _targets(target: list[str]) -> dict | None:
    from rigs.errors import InputError

    if not target:
        return None
    result = {}
    for item in target:
        name, sep, xyz = item.partition("=")
        if not sep or not name.strip():
            raise InputError(f"--target {item!r}: expected NAME=X,Y,Z (offset in the tip link frame, length unit).")
        result[name.strip()] = tuple(_numbers(xyz, f"--target {name}", 3))
    return result


def _report(out: Path, json_output: bool) -> None:
    from capture.session import load_session
    from selfcal.cli_capture import session_summary

    session = load_session(out)
    summary = session_summary(session)
    summary["tracker_poses"] = 0 if session.tracker_poses is None else len(session.tracker_poses.pose_index)
    summary["efforts"] = session.joint_efforts is not None
    # Files that were not UTF-8, read as Windows-1252 on purpose (tracker software on Windows): said,
    # so that a wrong guess (names or units garbled) shows.
    summary["read_as"] = (session.manifest.get("source") or {}).get("read_as") or {}
    if json_output:
        print_json(summary)
    else:
        typer.echo(f"{out}: {summary['poses']} poses of {summary['dof']} joints"
                   + (f", {summary['tracker_points']} tracker points" if summary["tracker_points"] else "")
                   + (f", {summary['tracker_poses']} 6-DoF poses" if summary["tracker_poses"] else "")
                   + (", measured joint torques" if summary["efforts"] else "")
                   + "".join(f"; {role} file read as {encoding} (it is not UTF-8)"
                             for role, encoding in summary["read_as"].items()))


URDF = typer.Option(..., "--urdf", help="Robot description (URDF).")
BASE = typer.Option(..., "--base-link", help="Link the chain starts at (the robot base).")
TIP = typer.Option(..., "--tip-link", help="Link the chain ends at (the flange the reflectors or probe sit on).")
POINTS = typer.Option(None, "--points", help="Tracker export of reflector points (SpatialAnalyzer, name x y z, ...).")
POSES = typer.Option(None, "--poses", help="6-DoF tracked poses: pose + x,y,z,qx,qy,qz,qw | x,y,z,rx,ry,rz | m00..m33.")
OUT = typer.Option(..., "--out", help="Session folder to create.")
LENGTH = typer.Option("mm", "--length-unit", help="Unit of lengths in the files: mm, m, cm or in.")
ROTATION = typer.Option(None, "--rotation", help="What rx,ry,rz columns are: rotvec (axis x angle) or rpy (URDF roll-pitch-yaw).")
MATCH = typer.Option("auto", "--match", help="Match measurements to poses by name, by time, or auto (time when every file has time stamps).")
PACKAGE = typer.Option([], "--package-dir", help="Folder holding (or being) a ROS package named by package:// mesh paths; repeatable.")
TARGET = typer.Option([], "--target", help="Nominal reflector offset NAME=X,Y,Z in the tip link frame (length unit); repeatable. Default 0,0,0.")
PAYLOAD_COM = typer.Option(None, "--payload-com", help="Payload centre of mass X,Y,Z in the tip link frame (length unit).")
FORCE = typer.Option(False, "--force", help="Replace --out if it exists.")
JSON = typer.Option(False, "--json", help="Print a machine-readable summary.")


@import_app.command("tracker")
def import_tracker(
    urdf: Path = URDF, base_link: str = BASE, tip_link: str = TIP,
    joints: Path = typer.Option(..., "--joints", help="Joints CSV: pose, one column per joint (by name), optional time, payload_kg, effort_<joint>."),
    points: Optional[Path] = POINTS, poses: Optional[Path] = POSES, out: Path = OUT,
    length_unit: LengthUnit = LENGTH,
    angle_unit: AngleUnit = typer.Option("deg", "--angle-unit", help="Unit of joint angles and pose rotations: deg or rad."),
    rotation: Optional[Rotation] = ROTATION, match: Match = MATCH,
    tolerance: float = typer.Option(0.5, "--tolerance", help="Largest time gap in seconds between a measurement and its joint row (--match time)."),
    package_dir: List[Path] = PACKAGE, target: List[str] = TARGET, payload_com: Optional[str] = PAYLOAD_COM,
    keep_extra: bool = typer.Option(False, "--keep-extra", help="Keep unknown joints-file columns as extra columns instead of refusing them."),
    force: bool = FORCE, json_output: bool = JSON,
) -> None:
    """Joint readings (CSV) with tracker points and/or 6-DoF poses -> a session folder."""
    with user_errors():
        from capture.importers.assemble import Measurements, import_tracker as run

        robot = _robot(urdf, base_link, tip_link, package_dir, payload_com, length_unit)
        measurements = Measurements(points, poses, length_unit, angle_unit, rotation, match, tolerance, _targets(target))
        with progress_bar("importing", None, unit="poses") as update:
            run(robot, joints, measurements, out, keep_extra, force, update)
        _report(out, json_output)


def _board_entry(board: str | None) -> dict | None:
    """``--board charuco:...`` -> the session manifest's ``sensors.board``."""
    if board is None:
        return None
    import numpy as np

    from calib.sensors.board import parse_board

    spec = parse_board(board)
    # The board's pose on the flange is found by the calibration (hand-eye, then the fit).
    return {**spec.manifest(), "tip_T_board_nominal": np.eye(4).tolist()}


def _mount_plane(text: str) -> float | None:
    from rigs.errors import InputError

    if text.strip().lower() == "none":
        return None
    try:
        return float(text) * 1e-3
    except ValueError:
        raise InputError(f"--mount-plane {text!r}: expected a height in mm (base frame) or 'none'.") from None


def _camera_report(summary: dict, json_output: bool) -> None:
    from selfcal.ui import err_console

    if json_output:  # the warnings are in the summary
        print_json(summary)
        return
    for warning in summary.get("warnings", []):
        err_console.print(f"warning: {warning}", highlight=False, soft_wrap=True)
    typer.echo(f"{summary['session']}: {summary['poses']} poses in {summary['seconds']:.1f} s")
    for name, camera in summary["cameras"].items():
        dropped = ", ".join(f"{n} {reason}" for reason, n in camera["dropped"].items()) or "none"
        noise = camera["depth_sigma_at_1m"]
        typer.echo(f"  {name}: {camera['kept']} of {camera['frames']} frames kept (dropped: {dropped}); pose "
                   f"{'from ' + camera['pose_source'] if camera['pose'] else 'unknown (' + camera['pose_source'] + '): calibrate from the board'}"
                   + (f"; depth noise {1000 * noise:.2f} mm at 1 m" if noise else ""))
        zeros = camera.get("no_reading") or {}
        if zeros.get("images"):
            far = camera.get("far_range_m")
            typer.echo(f"    no reading: {100 * zeros['no_reading']:.1f} % of the pixels ({100 * zeros['border']:.1f} % "
                       f"no return connected to the border, {100 * zeros['large']:.1f} % large regions, "
                       f"{100 * zeros['hole']:.1f} % holes); zeros taken as {camera['no_depth']}"
                       + (f", far range {far:.2f} m ({camera['far_range_source']})" if far and camera["no_depth"] != "unknown" else ""))


DEPTH_SCALE = typer.Option(None, "--depth-scale", help="Metres per unit of 16-bit depth images (default 0.001: millimetres, as RealSense and most drivers).")
CAMERA_POSES = typer.Option("auto", "--camera-poses", help="auto: camera poses from /tf_static (image folders: pose.yaml) where given, else unknown for a board calibration; tf: required; none: leave them unknown.")
MOUNT_PLANE = typer.Option("0", "--mount-plane", help="Height in mm (base frame) of the surface the arm stands on: depth below it is not the arm; 'none' if the arm hangs free.")
DEPTH_NOISE = typer.Option(None, "--depth-noise", help="Depth noise sigma in m at 1 m (sigma = this * z^2, the stereo law); default: measured from still frames (bags).")
NO_DEPTH = typer.Option([], "--no-depth", help=NO_DEPTH_HELP)
FAR_RANGE = typer.Option(None, "--far-range", help="The cameras' far range in m: how far a 0 that means nothing in range is free space (default: the largest reading each camera gave; state a driver's clipping distance here).")
BOARD = typer.Option(None, "--board", help="The ChArUco board on the flange, charuco:SQUARES_X:SQUARES_Y:SQUARE_M:MARKER_M:DICTIONARY[:legacy] (:legacy for a board OpenCV drew before 4.6): lets `selfcal calibrate` find the camera poses.")


FLANGE_POSES = typer.Option(None, "--flange-poses", help="The robot's reported flange pose per photo, in place of "
                            "--urdf and joints: CSV pose,x,y,z,qx,qy,qz,qw; CSV pose,m00,...,m33 (row-major 4x4); or a "
                            "folder of <pose>.yaml with keys x, y, z, qx, qy, qz, qw. Lengths in --length-unit (default m).")
SETUP = typer.Option("eye-to-hand", "--setup", help="With --flange-poses or --flange-frames: eye-to-hand (board on the "
                     "flange, cameras standing still) or eye-in-hand (cameras on the flange, board standing still).")


def _no_robot(flag: str, urdf, base_link, tip_link) -> None:
    """A flange-pose import takes no robot description: refuse the first of its flags given."""
    from rigs.errors import InputError

    given = [name for name, value in (("--urdf", urdf), ("--base-link", base_link), ("--tip-link", tip_link))
             if value is not None]
    if given:
        raise InputError(f"{given[0]}: a flange-pose import needs no robot description (the flange poses replace the "
                         f"joints and the URDF); leave {given[0]} out or {flag} out.")


def _board_counter(board: str | None):
    """(RGB image -> corners of --board found, the board in words), or (None, "") without --board."""
    if board is None:
        return None, ""
    from calib.sensors.board import BoardDetector, parse_board

    spec = parse_board(board)
    detector = BoardDetector(spec)
    return (lambda image: detector.detect(image).count), spec.describe()


def _require_robot(urdf, base_link, tip_link, instead: str) -> None:
    from rigs.errors import InputError

    missing = [flag for flag, value in (("--urdf", urdf), ("--base-link", base_link), ("--tip-link", tip_link))
               if value is None]
    if missing:
        raise InputError(f"{missing[0]} is required: {instead}")


@import_app.command("rosbag")
def import_rosbag(
    bag: Path = typer.Argument(..., help="ROS 2 bag folder (sqlite3 or MCAP storage)."),
    topic: str = typer.Option("/joint_states", "--topic", help="sensor_msgs/msg/JointState topic."),
    urdf: Optional[Path] = typer.Option(None, "--urdf", help="Robot description (URDF); not with --flange-frames or --flange-poses."),
    base_link: Optional[str] = typer.Option(None, "--base-link", help="Link the chain starts at (the robot base)."),
    tip_link: Optional[str] = typer.Option(None, "--tip-link", help="Link the chain ends at (the flange the reflectors, probe or board sit on)."),
    points: Optional[Path] = POINTS, poses: Optional[Path] = POSES, out: Path = OUT,
    length_unit: Optional[LengthUnit] = typer.Option(None, "--length-unit", help="Unit of lengths in the files: mm, m, cm or in (default mm; m for --flange-poses)."),
    angle_unit: AngleUnit = typer.Option("deg", "--angle-unit", help="Unit of 6-DoF pose rotations (joint states are always rad)."),
    rotation: Optional[Rotation] = ROTATION, match: Match = MATCH,
    tolerance: float = typer.Option(0.05, "--tolerance", help="Largest time gap in seconds between a measurement and its joint state (--match time), or between a photo's stamp and the nearest sample of each /tf transform (--flange-frames)."),
    still: float = typer.Option(1e-4, "--still", help="Joint states within this many rad count as one standing pose; camera frames are kept only where no joint moved more within --still-window. With --flange-frames: m and rad the flange may move."),
    still_window: float = typer.Option(0.1, "--still-window", help="Seconds either side of a camera frame's stamp over which the arm must have stood still."),
    payload: Optional[float] = typer.Option(None, "--payload", help="Payload at the tool in kg during the whole bag."),
    camera: List[str] = typer.Option([], "--camera", help="NAME=DEPTH_TOPIC[,COLOUR_TOPIC]: the image topics of one camera (repeatable; default: one camera per topic namespace)."),
    pair_tolerance: float = typer.Option(0.01, "--pair-tolerance", help="Seconds between the stamps of a colour and a depth frame that pair."),
    frame_convention: FrameConvention = typer.Option("auto", "--frame-convention", help="auto (by name: *optical* frames are optical), optical or body (x forward, y left, z up): what the images' frame_id is."),
    depth_scale: Optional[float] = DEPTH_SCALE, camera_poses: CameraPoses = CAMERA_POSES, mount_plane: str = MOUNT_PLANE,
    depth_noise: Optional[float] = DEPTH_NOISE, board: Optional[str] = BOARD,
    no_depth: List[str] = NO_DEPTH, far_range: Optional[float] = FAR_RANGE,
    flange_frames: Optional[str] = typer.Option(None, "--flange-frames", help="PARENT,CHILD tf frames, the robot's base and its flange (e.g. base_link,tool0): a hand-eye session of the bag's photos with the flange pose at each photo's stamp from /tf and /tf_static, in place of --urdf and joints."),
    flange_poses: Optional[Path] = typer.Option(None, "--flange-poses", help="The robot's reported flange pose per photo, in place of --urdf and joints (hand-eye): a file or folder as for `import images`; the k-th image of each camera is pose p0000, p0001, ... Lengths in --length-unit (default m)."),
    setup: HandEyeSetup = SETUP,
    package_dir: List[Path] = PACKAGE, target: List[str] = TARGET, payload_com: Optional[str] = PAYLOAD_COM,
    force: bool = FORCE, json_output: bool = JSON,
) -> None:
    """A ROS 2 bag -> a session: JointState with tracker points and/or 6-DoF poses, or with camera images; or photos with the flange pose from /tf (hand-eye)."""
    with user_errors():
        from rigs.errors import InputError

        if flange_frames is not None or flange_poses is not None:
            flag = "--flange-frames" if flange_frames is not None else "--flange-poses"
            _no_robot(flag, urdf, base_link, tip_link)
            if flange_frames is not None and flange_poses is not None:
                raise InputError("--flange-frames and --flange-poses both give the flange poses; keep one (the bag's "
                                 "/tf or the controller's file).")
            other = next((name for name, value in (("--points", points), ("--poses", poses)) if value is not None), None)
            if other is not None:
                raise InputError(f"{other}: a hand-eye import of photos takes no tracker data; import the tracker data "
                                 f"with --urdf into a session of its own.")
            from capture.importers.flange_bag import FlangeBagOptions, import_flange_bag

            options = FlangeBagOptions(flange_frames, flange_poses, length_unit or "m", setup, list(camera) or None,
                                       depth_scale, tolerance, still, still_window)
            count_corners, name = _board_counter(board)
            with progress_bar("importing photos", None, unit="photos") as update:
                summary = import_flange_bag(bag, options, _board_entry(board), out, force, update, count_corners, name)
            _flange_report(summary, json_output)
            return
        _require_robot(urdf, base_link, tip_link, "the bag's joint states need the robot's description, or give "
                       "--flange-frames PARENT,CHILD (or --flange-poses FILE) for a hand-eye import of photos.")
        robot = _robot(urdf, base_link, tip_link, package_dir, payload_com, length_unit or "mm")
        if points is None and poses is None:
            from capture.importers.camera_import import CameraOptions, import_rosbag_cameras

            options = CameraOptions(depth_scale, still, still_window, tolerance, pair_tolerance, camera_poses,
                                    frame_convention, _mount_plane(mount_plane), depth_noise, _board_entry(board),
                                    list(camera) or None, parse_no_depth(no_depth) or DEFAULT_NO_DEPTH, far_range)
            with progress_bar("importing images", None, unit="images") as update:
                summary = import_rosbag_cameras(robot, bag, topic, options, out, payload, force, update)
            _camera_report(summary, json_output)
            return
        from capture.importers.assemble import Measurements, import_rosbag as run

        measurements = Measurements(points, poses, length_unit or "mm", angle_unit, rotation, match, tolerance,
                                    _targets(target))
        with progress_bar("importing", None, unit="poses") as update:
            run(robot, bag, topic, measurements, out, still, payload, force, update)
        _report(out, json_output)
        images = _image_topics(bag)
        if images:
            from selfcal.ui import err_console

            err_console.print(f"note: {len(images)} image topics of {bag} ({', '.join(images[:4])}"
                              f"{', ...' if len(images) > 4 else ''}) are not in this tracker session; import them "
                              f"into a camera session with `selfcal import rosbag` without --points/--poses.",
                              highlight=False, soft_wrap=True)


def _image_topics(bag: Path) -> list[str]:
    from rosbags.highlevel import AnyReader

    from capture.importers.ros_images import COMPRESSED, IMAGE

    with AnyReader([Path(bag)]) as reader:
        return sorted({c.topic for c in reader.connections if c.msgtype in (IMAGE, COMPRESSED)})


@import_app.command("images")
def import_images(
    folder: Path = typer.Argument(..., help="Image folder: joints.csv and cameras/<name>/ (camera_info.yaml, <pose>_depth.png, <pose>_rgb.png, pose.yaml); with --flange-poses also camera_info.yaml and <pose>.png|jpg photos."),
    urdf: Optional[Path] = typer.Option(None, "--urdf", help="Robot description (URDF); not with --flange-poses."),
    base_link: Optional[str] = typer.Option(None, "--base-link", help="Link the chain starts at (the robot base)."),
    tip_link: Optional[str] = typer.Option(None, "--tip-link", help="Link the chain ends at (the flange)."),
    out: Path = OUT,
    angle_unit: AngleUnit = typer.Option("deg", "--angle-unit", help="Unit of joint angles in joints.csv: deg or rad."),
    length_unit: Optional[LengthUnit] = typer.Option(None, "--length-unit", help="Unit of prismatic joints in joints.csv (default mm), or of the flange positions with --flange-poses (default m): mm, m, cm or in."),
    depth_scale: Optional[float] = DEPTH_SCALE, camera_poses: CameraPoses = CAMERA_POSES, mount_plane: str = MOUNT_PLANE,
    depth_noise: Optional[float] = DEPTH_NOISE, board: Optional[str] = BOARD,
    flange_poses: Optional[Path] = FLANGE_POSES, setup: HandEyeSetup = SETUP,
    no_depth: List[str] = NO_DEPTH, far_range: Optional[float] = FAR_RANGE,
    package_dir: List[Path] = PACKAGE, force: bool = FORCE, json_output: bool = JSON,
) -> None:
    """A folder of images taken at the poses of a joints CSV (or at reported flange poses) -> a camera session."""
    with user_errors():
        if flange_poses is not None:
            from capture.importers.flange_images import import_flange_photos

            _no_robot("--flange-poses", urdf, base_link, tip_link)
            count_corners, name = _board_counter(board)
            with progress_bar("importing photos", None, unit="photos") as update:
                summary = import_flange_photos(folder, flange_poses, _board_entry(board), out, length_unit or "m",
                                               setup, force, update, count_corners, name)
            _flange_report(summary, json_output)
            return
        _require_robot(urdf, base_link, tip_link, "the images come with joint angles (joints.csv) and the robot's "
                       "description, or give --flange-poses with the robot's reported flange poses.")
        from capture.importers.camera_import import CameraOptions
        from capture.importers.image_folder import import_image_folder

        robot = _robot(urdf, base_link, tip_link, package_dir, None, length_unit or "mm")
        options = CameraOptions(depth_scale, camera_poses=camera_poses, mount_plane_z=_mount_plane(mount_plane),
                                depth_sigma_at_1m=depth_noise, board=_board_entry(board),
                                no_depth=parse_no_depth(no_depth) or DEFAULT_NO_DEPTH, far_range_m=far_range)
        with progress_bar("importing images", None, unit="images") as update:
            summary = import_image_folder(robot, folder, options, out, angle_unit, length_unit or "mm", force, update)
        _camera_report(summary, json_output)


def _flange_report(summary: dict, json_output: bool) -> None:
    if json_output:
        print_json(summary)
        return
    flange = summary["flange_poses"]
    if "frames" in flange:  # from a bag's /tf
        source = (f"{' -> '.join(flange['frames'])} from /tf at each photo's stamp, {flange['stands']} stands of the "
                  f"flange")
    else:
        source = (f"{flange['given']} poses in {flange['file']}, read in {flange['length_unit']}"
                  + (f", {flange['without_photo']} without a photo left out" if flange["without_photo"] else ""))
    typer.echo(f"{summary['session']}: {summary['photos']} photos at {summary['poses']} flange poses "
               f"({summary['setup']}; {source}) in {summary['seconds']:.1f} s; calibrate with "
               f"`selfcal calibrate {summary['session']} --model hand-eye`")
    for name, camera in summary["cameras"].items():
        if "topic" in camera:  # a bag's camera: its frames kept and dropped
            dropped = ", ".join(f"{n} {reason}" for reason, n in camera["dropped"].items()) or "none"
            typer.echo(f"  {name} ({camera['topic']}): {camera['kept']} of {camera['frames']} frames kept "
                       f"(dropped: {dropped})")
