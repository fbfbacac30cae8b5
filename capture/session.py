"""The session folder: what was recorded, in files a person can read.

Layout (see docs/session-format.md)::

    session.json          format version, units, robot (urdf, base_link, tip_link, joint names),
                          sensors (tracker targets, cameras with poses, board), source
    robot.urdf, meshes/   the robot description as recorded (self-contained, movable)
    joints.csv            pose, one column per joint (rad or m), optional payload_kg, extra columns
    tracker.csv           pose, target, x, y, z (m, tracker frame)
    tracker_poses.csv     pose, x, y, z, qx, qy, qz, qw[, sigma_pos, sigma_rot] (m, tracker frame; optional)
    cameras/<name>/       camera_info.yaml, <pose>_rgb.png, <pose>_depth.png (uint16, depth_scale
                          m per unit), <pose>_seg.png (uint16 link labels, evaluation only)
    truth/                simulated rigs only; read by evaluation code, never by a fit

Writing appends and flushes pose by pose: the ``joints.csv`` row is written last, so a pose is
complete exactly when its joint row exists, and an interrupted recording loses at most the pose in
flight.
"""

from __future__ import annotations

import csv
import io
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from capture.camera_info import CameraInfo
from capture.importers.flange_poses import read_flange_poses
from rigs import urdf as urdf_io
from rigs.documents import check_format
from rigs.errors import InputError
from rigs.files import atomic_write_json, atomic_write_text, inside_folder, read_csv_rows, read_json, read_text
from rigs.limits import REACH_SLACK_M, ArmJoints, check_joint_values, check_offset, check_spread

FORMAT = "selfcal-session"
FORMAT_VERSION = 1
POSE_ID_WIDTH = 4


def pose_id(index: int) -> str:
    return f"p{index:0{POSE_ID_WIDTH}d}"


NO_DEPTH = ("free", "unknown", "auto")  # rigs.no_return says what each means
DEFAULT_DEPTH_NOISE = 0.002  # relative sigma assumed when a session states nothing about its cameras' noise


@dataclass
class SessionCamera:
    """A camera of a session: intrinsics, pose of its optical frame in the base frame (or None).

    ``no_depth`` says what a depth pixel of 0 means: ``unknown`` (a hole, a shadow, out of range:
    what real cameras give), ``free`` (an ideal simulated camera saw nothing there) or ``auto``
    (zero regions reaching the image border or larger than a stated size are nothing in range,
    small ones holes; see rigs.no_return). ``far_range_m``: how far a zero that means nothing in
    range vouches free space (None: not stated; the labels then take the largest reading).
    """

    name: str
    info: CameraInfo
    base_T_camera: np.ndarray | None
    depth_scale: float  # metres per unit of the depth PNG
    depth_noise: float | None  # relative standard deviation, when known
    depth_sigma_at_1m: float | None = None  # sigma_z = this * z^2 (m), a stereo camera's law, when known
    no_depth: str = "unknown"
    frame_id: str | None = None  # the optical frame's name in the recording (ROS header.frame_id)
    far_range_m: float | None = None  # m along the optical axis: the camera's far range, when stated

    def depth_sigma(self, depth: np.ndarray) -> np.ndarray:
        """Standard deviation (m) of a depth reading of ``depth`` m (any shape)."""
        depth = np.asarray(depth, dtype=float)
        if self.depth_sigma_at_1m is not None:
            return self.depth_sigma_at_1m * depth ** 2
        return (self.depth_noise if self.depth_noise is not None else DEFAULT_DEPTH_NOISE) * depth


@dataclass
class TrackerPoints:
    """Reflector measurements: row i is target ``targets[i]`` seen at pose row ``pose_index[i]``."""

    pose_index: np.ndarray  # (M,) int, index into Session.pose_ids
    targets: list[str]  # (M,)
    xyz: np.ndarray  # (M, 3) m, tracker frame
    sigma: np.ndarray | None = None  # (M,) m, per-point standard deviation when the file gave one
    rows: list[str] | None = None  # (M,) where each point is in its file ("row 12"), for messages


@dataclass
class TrackerPoses:
    """6-DoF tracked poses: row i is the probe on the tool seen at pose row ``pose_index[i]``."""

    pose_index: np.ndarray  # (M,) int, index into Session.pose_ids
    tracker_T_probe: np.ndarray  # (M, 4, 4) pose of the probe in the tracker frame, m
    sigma_pos: np.ndarray | None = None  # (M,) m, position standard deviation per axis, when given
    sigma_rot: np.ndarray | None = None  # (M,) rad, rotation standard deviation, when given


TRACKER_POSES_HEADER = ["pose", "x", "y", "z", "qx", "qy", "qz", "qw"]


@dataclass
class Session:
    path: Path
    manifest: dict
    joint_names: list[str]
    pose_ids: list[str]
    q: np.ndarray  # (N, dof) rad (m for prismatic joints)
    payload_kg: np.ndarray  # (N,)
    extra: dict[str, list[str]] = field(default_factory=dict)
    tracker: TrackerPoints | None = None
    cameras: dict[str, SessionCamera] = field(default_factory=dict)
    tracker_poses: TrackerPoses | None = None
    # The controller's reported flange pose per pose row (N, 4, 4) m, for sessions recorded without
    # joint angles or a URDF (``robot.flange_poses`` names the file); None otherwise.
    base_T_flange: np.ndarray | None = None

    @property
    def joint_efforts(self) -> np.ndarray | None:
        """Measured joint torques (N, dof) N m from ``effort_<joint>`` columns; NaN for joints without
        a column; None when joints.csv has none."""
        return self.joint_columns("effort_")

    @property
    def joint_velocities(self) -> np.ndarray | None:
        """Joint velocities (N, dof) rad/s from ``velocity_<joint>`` columns (as :attr:`joint_efforts`)."""
        return self.joint_columns("velocity_")

    @property
    def joint_accelerations(self) -> np.ndarray | None:
        """Joint accelerations (N, dof) rad/s^2 from ``acceleration_<joint>`` columns (as :attr:`joint_efforts`)."""
        return self.joint_columns("acceleration_")

    def joint_columns(self, prefix: str) -> np.ndarray | None:
        """(N, dof) the numbers of the ``<prefix><joint>`` columns of joints.csv; NaN for joints
        without a column; None when joints.csv has none."""
        columns = {name: f"{prefix}{name}" for name in self.joint_names if f"{prefix}{name}" in self.extra}
        if not columns:
            return None
        values = np.full((len(self.pose_ids), len(self.joint_names)), np.nan)
        joints_path = self.path / "joints.csv"
        for j, name in enumerate(self.joint_names):
            if name in columns:
                values[:, j] = [parse_number(text, joints_path, row, columns[name])
                                for row, text in enumerate(self.extra[columns[name]], start=2)]
        return values

    @property
    def described(self) -> bool:
        """Whether the session carries its robot's description (a URDF). A real arm nobody described
        records only joint readings and depth; `selfcal discover` learns its chain from them."""
        name = self.manifest["robot"].get("urdf")
        return bool(name) and (self.path / name).is_file()

    @property
    def urdf_path(self) -> Path:
        """The session's URDF; InputError in one sentence where it has none (what needs a description
        cannot run on such a session)."""
        name = self.manifest["robot"].get("urdf")
        where = self.path / name if name else self.path / "session.json"
        if not self.described:
            missing = "is missing" if name else "names no robot.urdf"
            raise InputError(f"{where}: this session has no robot description ({where.name} {missing}) and this "
                             f"command needs one; `selfcal discover {self.path} --out DIR` writes a URDF from its "
                             f"sweeps.")
        return self.path / name

    @property
    def base_link(self) -> str:
        """The chain's base link: as recorded, or ``base`` for an arm nobody described (the name a
        discovered chain gives it)."""
        return self.manifest["robot"].get("base_link") or "base"

    @property
    def tip_link(self) -> str:
        return self.manifest["robot"].get("tip_link") or "tip"

    @property
    def held_joints(self) -> dict[str, float]:
        """Joints off the chain that the recording did not move (gripper fingers), at their
        positions (rad or m): ``robot.held_joints`` of session.json, checked on load."""
        return dict(self.manifest["robot"].get("held_joints") or {})

    @property
    def payload_com(self) -> np.ndarray:
        return np.asarray(self.manifest["robot"].get("payload_com", [0.0, 0.0, 0.0]), dtype=float)

    @property
    def nominal_targets(self) -> dict[str, np.ndarray]:
        tracker = self.manifest.get("sensors", {}).get("tracker") or {}
        return {name: np.asarray(xyz, dtype=float) for name, xyz in (tracker.get("targets") or {}).items()}

    @property
    def is_simulated(self) -> bool:
        return (self.path / "truth").is_dir()

    @property
    def mount_plane_z(self) -> float | None:
        """The surface the base is bolted to (m, base frame): nothing below it is the arm; None: unknown."""
        value = (self.manifest.get("scene") or {}).get("mount_plane_z")
        return None if value is None else float(value)

    def with_camera_poses(self, base_T_camera: dict[str, np.ndarray], source: str,
                          intrinsics: dict[str, CameraInfo] | None = None) -> "Session":
        """A copy whose cameras stand where ``base_T_camera`` (name -> (4, 4), optical frame in the
        base frame) says, e.g. as a board calibration found them, and whose K is that of
        ``intrinsics`` for the cameras it names (fitted with them, for the same image size; the
        others keep camera_info's); nothing is written to disk. ``source`` names where the poses
        come from, for messages."""
        import dataclasses

        missing = [name for name in self.cameras if name not in base_T_camera]
        if missing:
            raise InputError(f"{source}: has no pose for camera {missing[0]!r} of {self.path} (it has "
                             f"{', '.join(sorted(base_T_camera)) or 'no cameras'}).")
        intrinsics = intrinsics or {}
        cameras = {}
        for name, camera in self.cameras.items():
            info = camera.info
            if name in intrinsics:
                fitted = intrinsics[name]
                if (fitted.width, fitted.height) != (info.width, info.height):
                    raise InputError(f"{source}: camera {name!r} was calibrated at {fitted.width}x{fitted.height} px "
                                     f"but {self.path} records it at {info.width}x{info.height}; calibrate this "
                                     f"recording's cameras.")
                info = dataclasses.replace(info, K=np.asarray(fitted.K, dtype=float))
            cameras[name] = dataclasses.replace(camera, info=info,
                                                base_T_camera=np.asarray(base_T_camera[name], dtype=float))
        return dataclasses.replace(self, cameras=cameras)

    def image_path(self, camera: str, pose: str, kind: str) -> Path:
        return self.path / "cameras" / camera / f"{pose}_{kind}.png"

    def has_image(self, camera: str, pose: str, kind: str) -> bool:
        """Whether ``camera`` recorded a ``kind`` image at ``pose`` (an imported recording may skip some)."""
        return self.image_path(camera, pose, kind).is_file()

    def image(self, camera: str, pose: str, kind: str) -> np.ndarray:
        """``rgb`` (H, W, 3) uint8, ``depth`` (H, W) float32 metres (0 = no reading), ``seg`` (H, W) int."""
        import cv2

        path = self.image_path(camera, pose, kind)
        flags = cv2.IMREAD_COLOR if kind == "rgb" else cv2.IMREAD_UNCHANGED
        image = cv2.imread(str(path), flags)
        if image is None:
            raise InputError(f"{path}: image missing or unreadable.")
        info = self.cameras[camera].info
        if image.shape[:2] != (info.height, info.width) or (kind != "rgb" and image.ndim != 2):
            raise InputError(f"{path}: a {image.shape[1]} x {image.shape[0]} image with {1 if image.ndim == 2 else image.shape[2]} "
                             f"channels, but camera {camera!r} gives {info.width} x {info.height}"
                             + (" colour images." if kind == "rgb" else " single-channel images."))
        if kind == "rgb":
            return image[..., ::-1].copy()
        if kind == "depth":
            return image.astype(np.float32) * np.float32(self.cameras[camera].depth_scale)
        return image.astype(np.int32)

    @classmethod
    def load(cls, path: Path) -> "Session":
        return load_session(path)


def check_same_robot(sessions: list[Session], job: str = "calibrate") -> None:
    """InputError unless every session records the robot of the first (joints, base, tip, URDF origins);
    ``job`` names what is done with them together, for the message."""
    if len(sessions) < 2:
        return
    first = sessions[0]
    first_joints = urdf_io.joints(urdf_io.parse_urdf(first.urdf_path), first.urdf_path) if first.described else None
    for other in sessions[1:]:
        if (other.joint_names != first.joint_names or other.base_link != first.base_link
                or other.tip_link != first.tip_link):
            raise InputError(f"{other.path}: records a different robot ({other.urdf_path}) than {first.path} "
                             f"({first.urdf_path}): joints {other.joint_names} from {other.base_link} to "
                             f"{other.tip_link}; "
                             f"{job} sessions of one robot together.")
        if first_joints is None or not other.described:  # without descriptions the readings' names are all there is
            continue
        joints = urdf_io.joints(urdf_io.parse_urdf(other.urdf_path), other.urdf_path)
        for name in first.joint_names:
            if name not in joints or not np.allclose(joints[name].origin, first_joints[name].origin, atol=1e-9):
                raise InputError(f"{other.urdf_path} differs from {first.urdf_path} at joint {name!r}: the sessions "
                                 f"record different robots; {job} sessions of one robot together.")


# -- reading --------------------------------------------------------------------------------------

def parse_number(text: str, path: Path, row: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{path}: row {row}, column {column!r}: {text!r} is not a number.") from None
    if not np.isfinite(value):
        raise InputError(f"{path}: row {row}, column {column!r}: value is {text!r}, expected a finite number.")
    return value


_FOLDER_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def read_manifest(path: Path) -> dict:
    """The checked ``session.json`` of session folder ``path`` (types of every key selfcal reads)."""
    manifest_path = Path(path) / "session.json"
    manifest = read_json(manifest_path, "session manifest")
    top = check_format(manifest, manifest_path, FORMAT, FORMAT_VERSION, "selfcal session manifest")
    robot = top.get("robot", "table")
    # A session recorded without a description (a real arm nobody described) names no URDF; one that
    # names one also names the chain's ends in it.
    described = robot.get("urdf", "str", None, nullable=True) is not None
    for key in ("base_link", "tip_link"):
        robot.get(key, "str", ... if described else None, nullable=not described)
    names = robot.get("joint_names", "names")
    # A session of reported flange poses (no joints, no description) has an empty chain.
    flange_only = robot.get("flange_poses", "str", None, nullable=True) is not None and not described
    if (not names and not flange_only) or len(set(names)) != len(names):
        raise InputError(f"{robot.where('joint_names')} should name each joint once, got {names!r}.")
    robot.get("payload_com", "vector", None, length=3)
    sensors = top.get("sensors", "table", None, nullable=True)
    if sensors is not None:
        tracker = sensors.get("tracker", "table", None, nullable=True)
        if tracker is not None:
            targets = tracker.get("targets", "table", None, nullable=True)
            for name in (targets.data if targets is not None else {}):
                targets.get(name, "vector", length=3)
            for key in ("distance_mpe_m", "transverse_mpe_m"):
                values = tracker.get(key, "vector", None, length=2, nullable=True)
                if values is not None and np.any(values < 0):
                    raise InputError(f"{tracker.where(key)} should not be negative, got {values.tolist()}.")
        poses = sensors.get("tracker_poses", "table", None, nullable=True)
        if poses is not None:
            for key in ("sigma_pos_m", "sigma_rot_rad"):
                if poses.get(key, "number", None, nullable=True) is not None and poses.data[key] <= 0:
                    raise InputError(f"{poses.where(key)} should be positive, got {poses.data[key]!r}.")
        cameras = sensors.get("cameras", "table", None, nullable=True)
        for name in (cameras.data if cameras is not None else {}):
            if not _FOLDER_NAME.match(name):
                raise InputError(f"{cameras.where(name)}: a camera name must be a plain folder name (letters, digits, "
                                 f"'_', '-', '.'), got {name!r}.")
            camera = cameras.get(name, "table")
            camera.get("base_T_camera", "matrix", None, shape=(4, 4), nullable=True)
            camera.positive("depth_scale", 0.001)
            noise = camera.get("depth_noise", "number", None, nullable=True)
            if noise is not None and noise < 0:
                raise InputError(f"{camera.where('depth_noise')} should not be negative, got {noise}.")
            sigma = camera.get("depth_sigma_at_1m", "number", None, nullable=True)
            if sigma is not None and sigma <= 0:
                raise InputError(f"{camera.where('depth_sigma_at_1m')} should be positive, got {sigma}.")
            no_depth = camera.get("no_depth", "str", None, nullable=True)
            if no_depth is not None and no_depth not in NO_DEPTH:
                raise InputError(f"{camera.where('no_depth')} should be one of {', '.join(NO_DEPTH)}, got {no_depth!r}.")
            far = camera.get("far_range_m", "number", None, nullable=True)
            if far is not None and not far > 0:
                raise InputError(f"{camera.where('far_range_m')} should be positive, got {far!r}.")
            camera.get("frame_id", "str", None, nullable=True)
        board = sensors.get("board", "table", None, nullable=True)
        if board is not None:
            squares = board.get("squares", "vector", length=2)
            if np.any(squares != np.round(squares)) or np.any(squares < 2):
                raise InputError(f"{board.where('squares')} should be two whole numbers of at least 2, got "
                                 f"{board.data['squares']!r}.")
            board.positive("square_m")
            board.positive("marker_m")
            board.get("dictionary", "str", "DICT_4X4_50")
            board.get("legacy", "bool", False)
            board.get("tip_T_board_nominal", "matrix", None, shape=(4, 4), nullable=True)
    scene = top.get("scene", "table", None, nullable=True)
    if scene is not None:
        scene.get("mount_plane_z", "number", None, nullable=True)
    source = top.get("source", "table", None, nullable=True)
    if source is not None:
        source.get("seed", "int", None, nullable=True)
        source.get("payload_kg", "number", None, nullable=True)
    return manifest


def load_session(path: Path) -> Session:
    """Read and check a session folder; InputError naming the file, row or key on any problem.

    Besides the format, the data must be what a real arm can produce (:mod:`rigs.limits`): joints
    within the URDF's limits, reflector points and probe poses no farther apart than the arm can
    carry them, reflector offsets no longer than the arm's reach.
    """
    path = Path(path)
    manifest_path = path / "session.json"
    if not manifest_path.is_file():
        partial = path.with_name(path.name + ".partial")
        hint = (f" (an interrupted capture is in {partial}; run the same `selfcal capture` with --resume)"
                if partial.is_dir() else "")
        raise InputError(f"{path}: not a session folder, session.json is missing{hint}.")
    manifest = read_manifest(path)
    robot = manifest["robot"]
    joint_names = list(robot["joint_names"])
    urdf_path = (inside_folder(path, robot["urdf"], f"{manifest_path}: key 'robot.urdf'", "URDF path")
                 if robot.get("urdf") is not None else None)
    held = robot.get("held_joints") or {}
    if not isinstance(held, dict) or not all(isinstance(name, str) and isinstance(value, (int, float))
                                             and not isinstance(value, bool) and np.isfinite(value)
                                             for name, value in held.items()):
        raise InputError(f"{manifest_path}: robot.held_joints should map joint names to positions (rad or m), "
                         f"got {held!r}.")
    # Without a description (none named, or the file gone) the joint readings' names are the chain;
    # what needs limits or reach is not checked here, and what needs the URDF says so when it asks.
    limits = None
    if urdf_path is not None and urdf_path.is_file():
        urdf_io.check_meshes(urdf_path)
        limits = ArmJoints.from_urdf(urdf_path, robot["base_link"], robot["tip_link"])
        if limits.names != joint_names:
            raise InputError(f"{manifest_path}: key 'robot.joint_names' lists {joint_names}, but the chain of "
                             f"{urdf_path.name} from {robot['base_link']!r} to {robot['tip_link']!r} moves {limits.names}.")
    targets = (manifest.get("sensors") or {}).get("tracker") or {}
    offsets = [np.asarray(xyz, float) for xyz in (targets.get("targets") or {}).values()]
    for name, xyz in (targets.get("targets") or {}).items():
        if limits is not None:
            check_offset(xyz, limits.reach, f"{manifest_path}: key 'sensors.tracker.targets.{name}'", "reflector offset")
    if robot.get("payload_com") is not None and limits is not None:
        check_offset(robot["payload_com"], limits.reach, f"{manifest_path}: key 'robot.payload_com'", "payload centre")

    joints_path = path / "joints.csv"
    if not joints_path.is_file():
        raise InputError(f"{joints_path}: file not found.")
    header, rows = read_csv_rows(joints_path)
    missing = [name for name in ["pose", *joint_names] if name not in header]
    if missing:
        raise InputError(f"{joints_path}: column {missing[0]!r} is missing.")
    if len(set(header)) != len(header):
        duplicate = next(h for h in header if header.count(h) > 1)
        raise InputError(f"{joints_path}: column {duplicate!r} appears twice in the header.")
    columns = {name: header.index(name) for name in header}
    pose_ids, q, payload = [], [], []
    extra = {name: [] for name in header if name not in ("pose", "payload_kg", *joint_names)}
    for number, row in enumerate(rows, start=2):
        if len(row) != len(header):
            raise InputError(f"{joints_path}: row {number} has {len(row)} cells, the header has {len(header)}.")
        pose = row[columns["pose"]].strip()
        if not pose:
            raise InputError(f"{joints_path}: row {number}: empty pose id.")
        pose_ids.append(pose)
        q.append([parse_number(row[columns[name]], joints_path, number, name) for name in joint_names])
        kg = parse_number(row[columns["payload_kg"]], joints_path, number, "payload_kg") if "payload_kg" in columns else 0.0
        if kg < 0:
            raise InputError(f"{joints_path}: row {number}, column 'payload_kg': {kg:g} kg is negative.")
        payload.append(kg)
        for name in extra:
            extra[name].append(row[columns[name]])
    if len(set(pose_ids)) != len(pose_ids):
        duplicate = next(p for p in pose_ids if pose_ids.count(p) > 1)
        raise InputError(f"{joints_path}: pose id {duplicate!r} appears twice.")
    if not pose_ids:
        raise InputError(f"{joints_path}: no poses (only a header).")
    q_array = np.array(q, dtype=float).reshape(len(pose_ids), len(joint_names))
    if limits is not None:
        check_joint_values(q_array, q_array, joint_names, limits.types, limits.lower, limits.upper,
                           [f"row {n}" for n in range(2, len(pose_ids) + 2)], joints_path, "rad", unit_setting=None)
    session = Session(path, manifest, joint_names, pose_ids, q_array, np.array(payload, dtype=float), extra)
    if robot.get("flange_poses") is not None:
        session.base_T_flange = _session_flange_poses(path, robot["flange_poses"], pose_ids, manifest_path)

    largest_offset = max([float(np.linalg.norm(o)) for o in offsets], default=0.0)
    tracker_path = path / "tracker.csv"
    if tracker_path.is_file():
        session.tracker = read_tracker_csv(tracker_path, {p: i for i, p in enumerate(pose_ids)})
        if limits is not None:
            check_spread(session.tracker.xyz, limits.reach, largest_offset + REACH_SLACK_M, tracker_path,
                         session.tracker.rows, "reflector points")
    tracker_poses_path = path / "tracker_poses.csv"
    if tracker_poses_path.is_file():
        session.tracker_poses = read_tracker_poses_csv(tracker_poses_path, {p: i for i, p in enumerate(pose_ids)})
        if limits is not None:
            check_spread(session.tracker_poses.tracker_T_probe[:, :3, 3], limits.reach, REACH_SLACK_M,
                         tracker_poses_path, [f"row {n}" for n in range(2, len(session.tracker_poses.pose_index) + 2)],
                         "probe positions")

    simulated = (manifest.get("source") or {}).get("kind") == "simulated"
    for name, camera in ((manifest.get("sensors") or {}).get("cameras") or {}).items():
        info = CameraInfo.load(path / "cameras" / name / "camera_info.yaml")
        pose = camera.get("base_T_camera")
        # Simulated sessions recorded before cameras stated it had ideal cameras in empty space.
        no_depth = camera.get("no_depth") or ("free" if simulated else "unknown")
        if pose is not None:
            pose = np.asarray(pose, dtype=float).reshape(4, 4)
        sigma = camera.get("depth_sigma_at_1m")
        session.cameras[name] = SessionCamera(
            name, info, pose, float(camera.get("depth_scale", 0.001)), camera.get("depth_noise"),
            None if sigma is None else float(sigma), no_depth, camera.get("frame_id"),
            None if camera.get("far_range_m") is None else float(camera["far_range_m"]))
    return session


def _session_flange_poses(path: Path, name, pose_ids: list[str], manifest_path: Path) -> np.ndarray:
    """(N, 4, 4) flange poses of the session's pose rows from its flange-pose CSV (metres)."""
    file = inside_folder(path, name, f"{manifest_path}: key 'robot.flange_poses'", "flange-pose file")
    poses = read_flange_poses(file, "m")
    index = poses.index()
    missing = [pose for pose in pose_ids if pose not in index]
    if missing:
        raise InputError(f"{file}: pose {missing[0]!r} of joints.csv has no flange pose.")
    return poses.base_T_flange[[index[pose] for pose in pose_ids]]


def read_tracker_csv(path: Path, pose_rows: dict[str, int]) -> TrackerPoints:
    header, rows = read_csv_rows(path)
    for name in ("pose", "target", "x", "y", "z"):
        if name not in header:
            raise InputError(f"{path}: column {name!r} is missing.")
    columns = {name: header.index(name) for name in header}
    index, targets, xyz, sigma, numbers = [], [], [], [], []
    seen = set()
    for number, row in enumerate(rows, start=2):
        if len(row) != len(header):
            raise InputError(f"{path}: row {number} has {len(row)} cells, the header has {len(header)}.")
        pose, target = row[columns["pose"]].strip(), row[columns["target"]].strip()
        if not target:
            raise InputError(f"{path}: row {number}: empty target name.")
        if pose not in pose_rows:
            raise InputError(f"{path}: row {number}: pose {pose!r} has no row in joints.csv.")
        if (pose, target) in seen:
            raise InputError(f"{path}: row {number}: target {target!r} of pose {pose!r} appears twice.")
        seen.add((pose, target))
        index.append(pose_rows[pose])
        targets.append(target)
        xyz.append([parse_number(row[columns[a]], path, number, a) for a in "xyz"])
        if "sigma" in columns:
            sigma.append(parse_number(row[columns["sigma"]], path, number, "sigma"))
            if sigma[-1] <= 0:
                raise InputError(f"{path}: row {number}, column 'sigma': {sigma[-1]:g} m; a standard deviation must be positive.")
        numbers.append(f"row {number}")
    return TrackerPoints(np.array(index, dtype=int), targets, np.array(xyz, dtype=float).reshape(-1, 3),
                         np.array(sigma) if sigma else None, numbers)


def read_tracker_poses_csv(path: Path, pose_rows: dict[str, int]) -> TrackerPoses:
    """``tracker_poses.csv``: one 6-DoF pose per pose id (quaternion normalised, sign free)."""
    from rigs.transforms import quat_xyzw_to_matrix

    header, rows = read_csv_rows(path)
    for name in TRACKER_POSES_HEADER:
        if name not in header:
            raise InputError(f"{path}: column {name!r} is missing.")
    columns = {name: header.index(name) for name in header}
    sigmas = [name for name in ("sigma_pos", "sigma_rot") if name in columns]
    index, transforms, sigma = [], [], {name: [] for name in sigmas}
    for number, row in enumerate(rows, start=2):
        if len(row) != len(header):
            raise InputError(f"{path}: row {number} has {len(row)} cells, the header has {len(header)}.")
        pose = row[columns["pose"]].strip()
        if pose not in pose_rows:
            raise InputError(f"{path}: row {number}: pose {pose!r} has no row in joints.csv.")
        if pose_rows[pose] in index:
            raise InputError(f"{path}: row {number}: pose {pose!r} appears twice.")
        index.append(pose_rows[pose])
        values = [parse_number(row[columns[name]], path, number, name) for name in TRACKER_POSES_HEADER[1:]]
        if np.linalg.norm(values[3:]) < 1e-9:
            raise InputError(f"{path}: row {number}: the quaternion has zero length.")
        transform = np.eye(4)
        transform[:3, :3] = quat_xyzw_to_matrix(values[3:])
        transform[:3, 3] = values[:3]
        transforms.append(transform)
        for name in sigmas:
            sigma[name].append(parse_number(row[columns[name]], path, number, name))
    return TrackerPoses(np.array(index, dtype=int), np.array(transforms).reshape(-1, 4, 4),
                        np.array(sigma["sigma_pos"]) if "sigma_pos" in sigma else None,
                        np.array(sigma["sigma_rot"]) if "sigma_rot" in sigma else None)


def write_tracker_poses_csv(path: Path, pose_ids: list[str], tracker_T_probe: np.ndarray,
                            sigma_pos: np.ndarray | None = None, sigma_rot: np.ndarray | None = None) -> None:
    """Write ``tracker_poses.csv`` (``tracker_T_probe`` (M, 4, 4) m; sigmas (M,) m and rad)."""
    from rigs.transforms import quat_xyzw

    header = TRACKER_POSES_HEADER + (["sigma_pos"] if sigma_pos is not None else []) + \
        (["sigma_rot"] if sigma_rot is not None else [])
    rows = [header]
    for i, pose in enumerate(pose_ids):
        row = [pose, *(repr(float(v)) for v in tracker_T_probe[i, :3, 3]),
               *(repr(float(v)) for v in quat_xyzw(tracker_T_probe[i, :3, :3]))]
        if sigma_pos is not None:
            row.append(repr(float(sigma_pos[i])))
        if sigma_rot is not None:
            row.append(repr(float(sigma_rot[i])))
        rows.append(row)
    with open(path, "w", newline="") as stream:
        csv.writer(stream).writerows(rows)


# -- writing --------------------------------------------------------------------------------------

def _cut_torn_line(path: Path) -> None:
    """Cut ``path`` back to its last whole line (a line a killed append left without its newline)."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with open(path, "r+b") as stream:
            stream.truncate(data.rfind(b"\n") + 1)


class SessionWriter:
    """Append-only writer of a session folder, flushed pose by pose.

    ``SessionWriter.create`` lays out a new folder; ``SessionWriter.reopen`` continues one and
    drops whatever a pose in flight left behind (tracker rows or images without a joints row).
    """

    def __init__(self, path: Path, manifest: dict, extra_columns: list[str], with_payload: bool, with_sigma: bool = False):
        self.path = Path(path)
        self.manifest = manifest
        self.joint_names = list(manifest["robot"]["joint_names"])
        self.extra_columns = list(extra_columns)
        self.with_payload = with_payload
        self.with_sigma = with_sigma
        self.joint_header = ["pose", *self.joint_names, *(["payload_kg"] if with_payload else []), *self.extra_columns]
        self.tracker_header = ["pose", "target", "x", "y", "z", *(["sigma"] if with_sigma else [])]

    @classmethod
    def create(cls, path: Path, manifest: dict, extra_columns: list[str] = (), with_payload: bool = True,
               with_sigma: bool = False) -> "SessionWriter":
        writer = cls(path, manifest, list(extra_columns), with_payload, with_sigma)
        writer.path.mkdir(parents=True, exist_ok=True)
        writer._write_manifest()
        writer._write_header("joints.csv", writer.joint_header)
        if manifest.get("sensors", {}).get("tracker"):
            writer._write_header("tracker.csv", writer.tracker_header)
        return writer

    @classmethod
    def reopen(cls, path: Path) -> tuple["SessionWriter", list[str]]:
        """Continue an interrupted recording: returns the writer and the pose ids already complete.

        A run killed outright may have left a torn last line in any file it appends to; those are
        cut back to the last whole line before anything is read.
        """
        path = Path(path)
        try:
            manifest = read_manifest(path)
            appended = [name for name in ("joints.csv", "tracker.csv", "tracker_poses.csv", "truth/tracker_clean.csv",
                                          "truth/joints_reached.csv", "truth/tracker_poses_clean.csv",
                                          "truth/torques_clean.csv")
                        if (path / name).is_file()]
            for name in appended:
                _cut_torn_line(path / name)
            header, rows = read_csv_rows(path / "joints.csv")
        except InputError as error:
            raise InputError(f"{path}: cannot be resumed ({error.marked}); remove it and record again.") from None
        joint_names = manifest["robot"]["joint_names"]
        extra = [h for h in header if h not in ("pose", "payload_kg", *joint_names)]
        done = [row[0] for row in rows if len(row) == len(header)]
        writer = cls(path, manifest, extra, "payload_kg" in header)
        writer._rewrite_rows("joints.csv", lambda row: len(row) == len(header))
        if (path / "tracker.csv").is_file():
            tracker_header, _ = read_csv_rows(path / "tracker.csv")
            writer.with_sigma = "sigma" in tracker_header
            writer.tracker_header = tracker_header
        for name in appended[1:]:
            writer._rewrite_rows(name, lambda row: row[0] in done)
        for image in (path / "cameras").glob("*/*.png") if (path / "cameras").is_dir() else []:
            if image.name.split("_")[0] not in done:
                image.unlink()
        return writer, done

    def _write_manifest(self) -> None:
        atomic_write_json(self.path / "session.json", self.manifest)

    def _write_header(self, name: str, header: list[str]) -> None:
        (self.path / name).parent.mkdir(parents=True, exist_ok=True)
        with open(self.path / name, "w", newline="") as stream:
            csv.writer(stream).writerow(header)

    def _rewrite_rows(self, name: str, keep) -> None:
        """Keep the header and the rows ``keep`` accepts; atomic, so a kill now loses nothing."""
        with open(self.path / name, newline="") as stream:
            rows = list(csv.reader(stream))
        kept = [rows[0]] + [row for row in rows[1:] if row and keep(row)]
        buffer = io.StringIO(newline="")
        csv.writer(buffer).writerows(kept)
        atomic_write_text(self.path / name, buffer.getvalue())

    def _append(self, name: str, rows: list[list]) -> None:
        with open(self.path / name, "a", newline="") as stream:
            csv.writer(stream).writerows(rows)
            stream.flush()
            os.fsync(stream.fileno())

    @staticmethod
    def _fmt(value) -> str:
        return repr(float(value)) if isinstance(value, (float, np.floating, int, np.integer)) else str(value)

    def add_tracker_points(self, pose: str, points: dict[str, np.ndarray], sigmas: dict[str, float] | None = None,
                           file: str = "tracker.csv") -> None:
        rows = []
        for target, xyz in points.items():
            row = [pose, target, *(self._fmt(v) for v in xyz)]
            if self.with_sigma and file == "tracker.csv":
                row.append(self._fmt(sigmas[target]))
            rows.append(row)
        self._append(file, rows)

    def add_images(self, pose: str, camera: str, rgb: np.ndarray | None, depth_m: np.ndarray | None,
                   segmentation: np.ndarray | None, depth_scale: float) -> None:
        import cv2

        folder = self.path / "cameras" / camera
        folder.mkdir(parents=True, exist_ok=True)
        if rgb is not None:
            cv2.imwrite(str(folder / f"{pose}_rgb.png"), np.ascontiguousarray(rgb[..., ::-1]))
        if depth_m is not None:
            units = np.clip(np.round(depth_m / depth_scale), 0, 65535).astype(np.uint16)
            cv2.imwrite(str(folder / f"{pose}_depth.png"), units)
        if segmentation is not None:
            cv2.imwrite(str(folder / f"{pose}_seg.png"), segmentation.astype(np.uint16))

    def add_pose(self, pose: str, q: np.ndarray, payload_kg: float = 0.0, extra: dict[str, str] | None = None) -> None:
        """Write the pose's joints row: last, so the pose counts as complete only now."""
        extra = extra or {}
        row = [pose, *(self._fmt(v) for v in q)]
        if self.with_payload:
            row.append(self._fmt(payload_kg))
        row += [extra.get(name, "") for name in self.extra_columns]
        self._append("joints.csv", [row])

    def append_truth_rows(self, name: str, header: list[str], rows: list[list]) -> None:
        """Append rows to ``truth/<name>`` (created with ``header`` when new)."""
        target = self.path / "truth" / name
        if not target.is_file():
            self._write_header(f"truth/{name}", header)
        self._append(f"truth/{name}", [[self._fmt(v) for v in row] for row in rows])
