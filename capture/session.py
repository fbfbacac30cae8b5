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
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from capture.camera_info import CameraInfo
from rigs import urdf as urdf_io
from rigs.errors import InputError
from rigs.files import atomic_write_json

FORMAT = "selfcal-session"
FORMAT_VERSION = 1
POSE_ID_WIDTH = 4


def pose_id(index: int) -> str:
    return f"p{index:0{POSE_ID_WIDTH}d}"


@dataclass
class SessionCamera:
    """A camera of a session: intrinsics, pose of its optical frame in the base frame (or None)."""

    name: str
    info: CameraInfo
    base_T_camera: np.ndarray | None
    depth_scale: float  # metres per unit of the depth PNG
    depth_noise: float | None  # relative standard deviation, when known


@dataclass
class TrackerPoints:
    """Reflector measurements: row i is target ``targets[i]`` seen at pose row ``pose_index[i]``."""

    pose_index: np.ndarray  # (M,) int, index into Session.pose_ids
    targets: list[str]  # (M,)
    xyz: np.ndarray  # (M, 3) m, tracker frame
    sigma: np.ndarray | None = None  # (M,) m, per-point standard deviation when the file gave one


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

    @property
    def joint_efforts(self) -> np.ndarray | None:
        """Measured joint torques (N, dof) N m from ``effort_<joint>`` columns; NaN for joints without
        a column; None when joints.csv has none."""
        columns = {name: f"effort_{name}" for name in self.joint_names if f"effort_{name}" in self.extra}
        if not columns:
            return None
        efforts = np.full((len(self.pose_ids), len(self.joint_names)), np.nan)
        joints_path = self.path / "joints.csv"
        for j, name in enumerate(self.joint_names):
            if name in columns:
                efforts[:, j] = [parse_number(text, joints_path, row, columns[name])
                                 for row, text in enumerate(self.extra[columns[name]], start=2)]
        return efforts

    @property
    def urdf_path(self) -> Path:
        return self.path / self.manifest["robot"]["urdf"]

    @property
    def base_link(self) -> str:
        return self.manifest["robot"]["base_link"]

    @property
    def tip_link(self) -> str:
        return self.manifest["robot"]["tip_link"]

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

    def image_path(self, camera: str, pose: str, kind: str) -> Path:
        return self.path / "cameras" / camera / f"{pose}_{kind}.png"

    def image(self, camera: str, pose: str, kind: str) -> np.ndarray:
        """``rgb`` (H, W, 3) uint8, ``depth`` (H, W) float32 metres (0 = no reading), ``seg`` (H, W) int."""
        import cv2

        path = self.image_path(camera, pose, kind)
        flags = cv2.IMREAD_COLOR if kind == "rgb" else cv2.IMREAD_UNCHANGED
        image = cv2.imread(str(path), flags)
        if image is None:
            raise InputError(f"{path}: image missing or unreadable.")
        if kind == "rgb":
            return image[..., ::-1].copy()
        if kind == "depth":
            return image.astype(np.float32) * np.float32(self.cameras[camera].depth_scale)
        return image.astype(np.int32)

    @classmethod
    def load(cls, path: Path) -> "Session":
        return load_session(path)


# -- reading --------------------------------------------------------------------------------------

def read_csv_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="") as stream:
        rows = [row for row in csv.reader(stream) if row and not row[0].startswith("#")]
    if not rows:
        raise InputError(f"{path}: empty file (expected a header row).")
    return [h.strip() for h in rows[0]], rows[1:]


def parse_number(text: str, path: Path, row: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{path}: row {row}, column {column!r}: {text!r} is not a number.") from None
    if not np.isfinite(value):
        raise InputError(f"{path}: row {row}, column {column!r}: value is {text!r}, expected a finite number.")
    return value


def load_session(path: Path) -> Session:
    """Read and check a session folder; InputError naming the file, row or key on any problem."""
    path = Path(path)
    manifest_path = path / "session.json"
    if not manifest_path.is_file():
        partial = path.with_name(path.name + ".partial")
        hint = f" (an interrupted capture is in {partial}; resume it with --resume)" if partial.is_dir() else ""
        raise InputError(f"{path}: not a session folder, session.json is missing{hint}.")
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as error:
        raise InputError(f"{manifest_path}: not valid JSON ({error}).") from None
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise InputError(f"{manifest_path}: format {manifest.get('format')!r} version {manifest.get('format_version')!r} "
                         f"is not a {FORMAT} version {FORMAT_VERSION} this selfcal reads.")
    for key in ("urdf", "base_link", "tip_link", "joint_names"):
        if key not in manifest.get("robot", {}):
            raise InputError(f"{manifest_path}: key 'robot.{key}' is missing.")
    joint_names = list(manifest["robot"]["joint_names"])
    held = manifest["robot"].get("held_joints") or {}
    if not isinstance(held, dict) or not all(isinstance(name, str) and isinstance(value, (int, float))
                                             and not isinstance(value, bool) and np.isfinite(value)
                                             for name, value in held.items()):
        raise InputError(f"{manifest_path}: robot.held_joints should map joint names to positions (rad or m), "
                         f"got {held!r}.")
    urdf_path = path / manifest["robot"]["urdf"]
    if not urdf_path.resolve().is_relative_to(path.resolve()):
        raise InputError(f"{manifest_path}: robot.urdf must lie inside the session folder.")
    urdf_io.check_meshes(urdf_path)

    joints_path = path / "joints.csv"
    if not joints_path.is_file():
        raise InputError(f"{joints_path}: file not found.")
    header, rows = read_csv_rows(joints_path)
    missing = [name for name in ["pose", *joint_names] if name not in header]
    if missing:
        raise InputError(f"{joints_path}: column {missing[0]!r} is missing.")
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
        payload.append(parse_number(row[columns["payload_kg"]], joints_path, number, "payload_kg") if "payload_kg" in columns else 0.0)
        for name in extra:
            extra[name].append(row[columns[name]])
    if len(set(pose_ids)) != len(pose_ids):
        duplicate = next(p for p in pose_ids if pose_ids.count(p) > 1)
        raise InputError(f"{joints_path}: pose id {duplicate!r} appears twice.")
    session = Session(path, manifest, joint_names, pose_ids, np.array(q, dtype=float).reshape(-1, len(joint_names)),
                      np.array(payload, dtype=float), extra)

    tracker_path = path / "tracker.csv"
    if tracker_path.is_file():
        session.tracker = read_tracker_csv(tracker_path, {p: i for i, p in enumerate(pose_ids)})
    tracker_poses_path = path / "tracker_poses.csv"
    if tracker_poses_path.is_file():
        session.tracker_poses = read_tracker_poses_csv(tracker_poses_path, {p: i for i, p in enumerate(pose_ids)})

    for name, camera in (manifest.get("sensors", {}).get("cameras") or {}).items():
        info = CameraInfo.load(path / "cameras" / name / "camera_info.yaml")
        pose = camera.get("base_T_camera")
        session.cameras[name] = SessionCamera(
            name, info, None if pose is None else np.asarray(pose, dtype=float).reshape(4, 4),
            float(camera.get("depth_scale", 0.001)), camera.get("depth_noise"))
    return session


def read_tracker_csv(path: Path, pose_rows: dict[str, int]) -> TrackerPoints:
    header, rows = read_csv_rows(path)
    for name in ("pose", "target", "x", "y", "z"):
        if name not in header:
            raise InputError(f"{path}: column {name!r} is missing.")
    columns = {name: header.index(name) for name in header}
    index, targets, xyz, sigma = [], [], [], []
    seen = set()
    for number, row in enumerate(rows, start=2):
        pose, target = row[columns["pose"]].strip(), row[columns["target"]].strip()
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
    return TrackerPoints(np.array(index, dtype=int), targets, np.array(xyz, dtype=float).reshape(-1, 3),
                         np.array(sigma) if sigma else None)


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
        """Continue an interrupted recording: returns the writer and the pose ids already complete."""
        path = Path(path)
        manifest = json.loads((path / "session.json").read_text())
        header, rows = read_csv_rows(path / "joints.csv")
        joint_names = manifest["robot"]["joint_names"]
        extra = [h for h in header if h not in ("pose", "payload_kg", *joint_names)]
        done = [row[0] for row in rows if len(row) == len(header)]
        writer = cls(path, manifest, extra, "payload_kg" in header)
        writer._rewrite_rows("joints.csv", lambda row: len(row) == len(header))
        if (path / "tracker.csv").is_file():
            tracker_header, _ = read_csv_rows(path / "tracker.csv")
            writer.with_sigma = "sigma" in tracker_header
            writer.tracker_header = tracker_header
            writer._rewrite_rows("tracker.csv", lambda row: row[0] in done)
        truth_clean = path / "truth" / "tracker_clean.csv"
        if truth_clean.is_file():
            writer._rewrite_rows("truth/tracker_clean.csv", lambda row: row[0] in done)
        if (path / "truth" / "joints_reached.csv").is_file():
            writer._rewrite_rows("truth/joints_reached.csv", lambda row: row[0] in done)
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
        with open(self.path / name, newline="") as stream:
            rows = list(csv.reader(stream))
        kept = [rows[0]] + [row for row in rows[1:] if row and keep(row)]
        with open(self.path / name, "w", newline="") as stream:
            csv.writer(stream).writerows(kept)

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
