"""``selfcal import tracker`` and ``selfcal import rosbag``: real measurement files into a session."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

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
    if json_output:
        print_json(summary)
    else:
        typer.echo(f"{out}: {summary['poses']} poses of {summary['dof']} joints"
                   + (f", {summary['tracker_points']} tracker points" if summary["tracker_points"] else "")
                   + (f", {summary['tracker_poses']} 6-DoF poses" if summary["tracker_poses"] else "")
                   + (", measured joint torques" if summary["efforts"] else ""))


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
    length_unit: str = LENGTH,
    angle_unit: str = typer.Option("deg", "--angle-unit", help="Unit of joint angles and pose rotations: deg or rad."),
    rotation: Optional[str] = ROTATION, match: str = MATCH,
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
        with progress_bar("importing", None) as update:
            run(robot, joints, measurements, out, keep_extra, force, update)
        _report(out, json_output)


@import_app.command("rosbag")
def import_rosbag(
    bag: Path = typer.Argument(..., help="ROS 2 bag folder (sqlite3 or MCAP storage)."),
    topic: str = typer.Option("/joint_states", "--topic", help="sensor_msgs/msg/JointState topic."),
    urdf: Path = URDF, base_link: str = BASE, tip_link: str = TIP,
    points: Optional[Path] = POINTS, poses: Optional[Path] = POSES, out: Path = OUT,
    length_unit: str = LENGTH,
    angle_unit: str = typer.Option("deg", "--angle-unit", help="Unit of 6-DoF pose rotations (joint states are always rad)."),
    rotation: Optional[str] = ROTATION, match: str = MATCH,
    tolerance: float = typer.Option(0.05, "--tolerance", help="Largest time gap in seconds between a measurement and its joint state (--match time)."),
    still: float = typer.Option(1e-4, "--still", help="Joint states within this many rad count as one standing pose (--match time)."),
    payload: Optional[float] = typer.Option(None, "--payload", help="Payload at the tool in kg during the whole bag."),
    package_dir: List[Path] = PACKAGE, target: List[str] = TARGET, payload_com: Optional[str] = PAYLOAD_COM,
    force: bool = FORCE, json_output: bool = JSON,
) -> None:
    """JointState messages of a ROS 2 bag with tracker points and/or 6-DoF poses -> a session folder."""
    with user_errors():
        from capture.importers.assemble import Measurements, import_rosbag as run

        robot = _robot(urdf, base_link, tip_link, package_dir, payload_com, length_unit)
        measurements = Measurements(points, poses, length_unit, angle_unit, rotation, match, tolerance, _targets(target))
        with progress_bar("importing", None) as update:
            run(robot, bag, topic, measurements, out, still, payload, force, update)
        _report(out, json_output)
