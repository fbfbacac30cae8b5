"""Import real files into a session folder: read, check, match, then write, all or nothing.

Everything is read and checked before anything is written; the session is then built through
:func:`rigs.files.output_folder`, so a failure (a mesh missing while copying the robot
description, say) leaves no output folder behind. The written folder is read back with
:func:`capture.session.load_session` before it is renamed into place.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from capture.importers.joint_logs import ArmJoints, JointLog, read_joint_log
from capture.importers.join import assign_by_name, assign_by_time, split_pose_names
from capture.importers.poses6d import PoseRecords, read_poses
from capture.importers.tables import file_encoding
from capture.importers.rosbag import read_joint_states
from capture.importers.tracker_exports import PointRecords, read_points
from capture.importers.units import check_joint_values, check_tracker_lengths, length_factor
from capture.session import FORMAT, FORMAT_VERSION, SessionWriter, load_session, write_tracker_poses_csv
from rigs import urdf as urdf_io
from rigs.errors import InputError, setting
from rigs.files import output_folder
from rigs.version import VERSION

MATCHES = ("auto", "name", "time")
PROBE_KEY = "the 6-DoF pose"


@dataclass
class Robot:
    """What the user says about the robot: URDF, chain ends, mesh package folders, payload CoM (m, tip frame)."""

    urdf: Path
    base_link: str
    tip_link: str
    package_dirs: tuple[Path, ...] = ()
    payload_com: tuple[float, float, float] | None = None


@dataclass
class Measurements:
    """Measurement files and how to read them; ``targets`` are nominal reflector offsets (m, tip frame)."""

    points: Path | None = None
    poses: Path | None = None
    length_unit: str = "mm"
    angle_unit: str = "deg"
    rotation: str | None = None
    match: str = "auto"
    tolerance: float = 0.5
    targets: dict[str, tuple[float, float, float]] | None = None


@dataclass
class Joined:
    """Poses and what was measured at each, ready to write."""

    log: JointLog  # the poses (rows of joints.csv)
    points: PointRecords | None
    point_pose: np.ndarray | None  # (M,) index into log per point
    point_target: list[str] | None
    poses: PoseRecords | None
    probe_pose: np.ndarray | None  # (K,) index into log per 6-DoF pose
    match: str


def check_robot(robot: Robot) -> ArmJoints:
    """The URDF exists, the links are in it, the chain between them moves; Pinocchio can read it."""
    from rigs.kinematics import ArmModel

    if not Path(robot.urdf).is_file():
        raise InputError(f"{robot.urdf}: URDF file not found.")
    for folder in robot.package_dirs:
        if not Path(folder).is_dir():
            raise InputError(f"{folder}: {setting('package_dirs')} is not a folder.")
    chain = ArmJoints.from_urdf(robot.urdf, robot.base_link, robot.tip_link)
    ArmModel.from_urdf(robot.urdf, robot.base_link, robot.tip_link)
    # Only meshes beside the URDF or in a --package-dir are copied into the session.
    urdf_io.check_meshes(robot.urdf, [Path(p) for p in robot.package_dirs])
    return chain


def _read_measurements(measurements: Measurements) -> tuple[PointRecords | None, PoseRecords | None]:
    if measurements.points is None and measurements.poses is None:
        raise InputError(f"nothing to import: give {setting('points')} (reflector points) and/or {setting('poses')} "
                         f"(6-DoF poses).")
    if measurements.match not in MATCHES:
        raise InputError(f"{setting('match')} {measurements.match!r} is not one of {', '.join(MATCHES)}.")
    points = read_points(measurements.points, measurements.length_unit) if measurements.points is not None else None
    poses = read_poses(measurements.poses, measurements.length_unit, measurements.angle_unit, measurements.rotation) \
        if measurements.poses is not None else None
    return points, poses


def _where(records) -> list[str]:
    return [f"{records.source}: line {line}" for line in records.lines]


def join(log: JointLog, points: PointRecords | None, poses: PoseRecords | None, match: str, tolerance: float,
         still: float | None) -> Joined:
    """Match points and 6-DoF poses to the log's poses (by name or by time; see ``capture.importers.join``)."""
    files = [records for records in (points, poses) if records is not None]
    if match == "auto":
        match = "time" if log.times is not None and all(r.times is not None for r in files) else "name"
    if match == "time":
        for records in files:
            if records.times is None:
                raise InputError(f"{records.source}: has no time column, so it cannot be matched by time "
                                 f"(use {setting('match')} name).")
        keys = ([f"target {t!r}" for t in points.target] if points is not None else []) + \
               ([PROBE_KEY] * len(poses.lines) if poses is not None else [])
        times = np.concatenate([r.times for r in files])
        where = sum((_where(r) for r in files), [])
        log, index = assign_by_time(times, keys, where, log, tolerance, still)
        count = len(points.lines) if points is not None else 0
        return Joined(log, points, index[:count] if points is not None else None,
                      list(points.target) if points is not None else None,
                      poses, index[count:] if poses is not None else None, match)
    point_pose = point_target = probe_pose = None
    if points is not None:
        names, targets = split_pose_names(points.names, points.pose, points.target, _where(points), log.pose_ids)
        point_pose = assign_by_name(names, _where(points), log)
        point_target = targets
        seen: dict[tuple[int, str], int] = {}
        for i, key in enumerate(zip(point_pose, targets)):
            if key in seen:
                raise InputError(f"{points.source}: line {points.lines[i]}: target {key[1]!r} of pose "
                                 f"{log.pose_ids[key[0]]!r} appears twice (first on line {points.lines[seen[key]]}).")
            seen[key] = i
    if poses is not None:
        if any(p is None for p in poses.pose):
            raise InputError(f"{poses.source}: column 'pose' is missing; without it, poses can only be matched "
                             f"by time ({setting('match')} time).")
        probe_pose = assign_by_name(poses.pose, _where(poses), log)
    return Joined(log, points, point_pose, point_target, poses, probe_pose, match)


def _manifest(robot: Robot, chain: ArmJoints, joined: Joined, targets: dict[str, list[float]], source: dict) -> dict:
    sensors: dict = {"tracker": None, "cameras": {}, "board": None}
    if joined.points is not None:
        # MPEs are left out on purpose: without a stated accuracy the fit weights points by the
        # file's sigma column, or equally.
        sensors["tracker"] = {"targets": targets}
    if joined.poses is not None:
        sensors["tracker_poses"] = {"file": "tracker_poses.csv", "frame": "tracker",
                                    "probe": "6-DoF probe rigidly mounted on the tip link", "input": joined.poses.layout}
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "units": {"length": "m", "angle": "rad", "mass": "kg", "torque": "N m"},
        "robot": {"urdf": "robot.urdf", "base_link": robot.base_link, "tip_link": robot.tip_link,
                  "joint_names": chain.names, "payload_com": list(robot.payload_com or (0.0, 0.0, 0.0))},
        "sensors": sensors,
        "source": {**source, "match": joined.match, "selfcal_version": VERSION},
    }


def _targets(joined: Joined, given: dict[str, tuple[float, float, float]] | None) -> dict[str, list[float]]:
    if joined.points is None:
        return {}
    seen = list(dict.fromkeys(joined.point_target))
    given = given or {}
    for name in given:
        if name not in seen:
            raise InputError(f"{setting('targets')} {name!r} is not a target of {joined.points.source} "
                             f"(its targets: {', '.join(seen)}).")
    # Unknown offsets start at the flange origin; the fit solves for them (tens of mm is well in reach).
    return {name: [float(v) for v in given.get(name, (0.0, 0.0, 0.0))] for name in seen}


def write_session(out: Path, robot: Robot, chain: ArmJoints, joined: Joined, targets: dict[str, tuple] | None,
                  source: dict, force: bool = False, progress: Callable[[int, int], None] | None = None) -> Path:
    """Write the joined data as a session folder at ``out`` (all or nothing)."""
    log = joined.log
    target_offsets = _targets(joined, targets)
    manifest = _manifest(robot, chain, joined, target_offsets, source)
    extra_columns = (["time"] if log.times is not None else []) + \
        [f"effort_{name}" for name in chain.names if name in log.efforts] + list(log.extra)
    with output_folder(out, force) as folder:
        try:
            urdf_io.copy_self_contained(urdf_io.parse_urdf(robot.urdf), Path(robot.urdf).parent, folder,
                                        [Path(p) for p in robot.package_dirs])
        except InputError as error:
            raise InputError(f"{robot.urdf}: {error.marked}") from None
        writer = SessionWriter.create(folder, manifest, extra_columns, with_payload=log.payload_kg is not None,
                                      with_sigma=joined.points is not None and joined.points.sigma is not None)
        points_of: dict[int, list[int]] = {}
        if joined.points is not None:
            for i, row in enumerate(joined.point_pose):
                points_of.setdefault(int(row), []).append(i)
        for row, pose in enumerate(log.pose_ids):
            chosen = points_of.get(row, [])
            if chosen:
                points = joined.points
                writer.add_tracker_points(pose, {joined.point_target[i]: points.xyz[i] for i in chosen},
                                          {joined.point_target[i]: points.sigma[i] for i in chosen}
                                          if points.sigma is not None else None)
            extra = {}
            if log.times is not None:
                extra["time"] = repr(float(log.times[row]))
            for name, values in log.efforts.items():
                extra[f"effort_{name}"] = repr(float(values[row]))
            for name, values in log.extra.items():
                extra[name] = values[row]
            writer.add_pose(pose, log.q[row], 0.0 if log.payload_kg is None else log.payload_kg[row], extra)
            if progress is not None:
                progress(row + 1, len(log.pose_ids))
        if joined.poses is not None:
            order = np.argsort(joined.probe_pose, kind="stable")
            poses = joined.poses
            write_tracker_poses_csv(folder / "tracker_poses.csv", [log.pose_ids[joined.probe_pose[i]] for i in order],
                                    poses.tracker_T_probe[order],
                                    None if poses.sigma_pos is None else poses.sigma_pos[order],
                                    None if poses.sigma_rot is None else poses.sigma_rot[order])
        load_session(folder)  # what we wrote must read back
    return Path(out)


def _check_lengths(joined: Joined, unit: str) -> None:
    if joined.points is not None:
        check_tracker_lengths(joined.points.xyz, joined.points.lines, joined.points.source, unit,
                              len(set(joined.point_pose.tolist())))
    if joined.poses is not None:
        check_tracker_lengths(joined.poses.tracker_T_probe[:, :3, 3], joined.poses.lines, joined.poses.source, unit,
                              len(set(joined.probe_pose.tolist())))


def _scaled_targets(measurements: Measurements) -> dict[str, tuple] | None:
    if measurements.targets is None:
        return None
    factor = length_factor(measurements.length_unit)
    return {name: tuple(float(v) * factor for v in xyz) for name, xyz in measurements.targets.items()}


def _read_as(files: dict[str, Path | None]) -> dict[str, str]:
    """The files of an import that were not UTF-8 and were read as Windows-1252 (role -> "cp1252"),
    kept in session.json's source and said in the import's summary, so that a wrong guess shows."""
    return {role: encoding for role, path in files.items()
            if path is not None and (encoding := file_encoding(path)) != "utf-8"}


def import_tracker(robot: Robot, joints: Path, measurements: Measurements, out: Path, keep_extra: bool = False,
                   force: bool = False, progress: Callable[[int, int], None] | None = None) -> Path:
    """Joints file + tracker points and/or 6-DoF poses -> session folder ``out``."""
    chain = check_robot(robot)
    log = read_joint_log(joints, chain, measurements.length_unit, measurements.angle_unit, keep_extra)
    points, poses = _read_measurements(measurements)
    joined = join(log, points, poses, measurements.match, measurements.tolerance, still=None)
    _check_lengths(joined, measurements.length_unit)
    source = {"kind": "import", "importer": "tracker", "joints": str(joints),
              "points": None if measurements.points is None else str(measurements.points),
              "poses": None if measurements.poses is None else str(measurements.poses),
              "length_unit": measurements.length_unit, "angle_unit": measurements.angle_unit,
              "tolerance_s": measurements.tolerance,
              "read_as": _read_as({"joints": joints, "points": measurements.points, "poses": measurements.poses})}
    return write_session(out, robot, chain, joined, _scaled_targets(measurements), source, force, progress)


def import_rosbag(robot: Robot, bag: Path, topic: str, measurements: Measurements, out: Path, still: float = 1e-4,
                  payload_kg: float | None = None, force: bool = False,
                  progress: Callable[[int, int], None] | None = None) -> Path:
    """JointState messages of a ROS 2 bag + tracker points and/or 6-DoF poses -> session folder ``out``.

    By name, message k (time order) is pose ``p{k:04d}``. By time, the stream is cut into poses
    where the arm stood still (joint samples within ``still`` rad of each other).
    """
    chain = check_robot(robot)
    if still <= 0:
        raise InputError(f"{setting('still')} must be positive, got {still:g} rad.")
    if payload_kg is not None and payload_kg < 0:
        raise InputError(f"{setting('payload_kg')} must not be negative, got {payload_kg:g} kg.")
    log = read_joint_states(bag, topic, chain)
    check_joint_values(log.q, log.q, chain.names, chain.types, chain.lower, chain.upper,
                       [f"message {n}" for n in log.lines], f"{bag} ({topic})", "rad")
    points, poses = _read_measurements(measurements)
    joined = join(log, points, poses, measurements.match, measurements.tolerance, still)
    if payload_kg is not None:
        joined.log.payload_kg = np.full(len(joined.log.pose_ids), float(payload_kg))
    _check_lengths(joined, measurements.length_unit)
    source = {"kind": "import", "importer": "rosbag", "bag": str(bag), "topic": topic,
              "points": None if measurements.points is None else str(measurements.points),
              "poses": None if measurements.poses is None else str(measurements.poses),
              "length_unit": measurements.length_unit, "angle_unit": measurements.angle_unit,
              "tolerance_s": measurements.tolerance, "still_rad": still,
              "read_as": _read_as({"points": measurements.points, "poses": measurements.poses})}
    return write_session(out, robot, chain, joined, _scaled_targets(measurements), source, force, progress)
