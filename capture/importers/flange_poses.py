"""The robot controller's reported flange pose per photo, in place of joint angles and a URDF.

Three forms, as robot cells export them (docs/importing.md):

- a CSV ``pose,x,y,z,qx,qy,qz,qw``: position in the length unit, unit quaternion (x, y, z, w);
- a CSV ``pose,m00,m01,...,m33``: the row-major 4x4 ``base_T_flange``, translation in the length unit;
- a folder with one ``<pose>.yaml`` per photo with keys x, y, z, qx, qy, qz, qw (the layout
  ROS-Industrial's calibration tools keep).

Every pose is checked as it is read, and the error names the file and row: a quaternion that is
not of unit length (or a matrix whose rotation is not one), a position farther from the base
than any arm reaches (the unit is wrong: millimetres read as metres put the flange kilometres
away), positions that all lie within a few millimetres (metres read as millimetres), a pose id
given twice, and two rows with the same pose (a copied row: hand-eye needs a new pose per photo).
Lengths come out in metres (SI inside).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from capture.importers.units import LENGTH_UNITS, to_metres
from rigs.errors import InputError, setting
from rigs.files import read_csv_rows
from rigs.transforms import quat_xyzw_to_matrix

QUATERNION_KEYS = ["x", "y", "z", "qx", "qy", "qz", "qw"]
MATRIX_KEYS = [f"m{r}{c}" for r in range(4) for c in range(4)]
# The largest industrial arms reach about 4 m; a flange farther from its base than this was
# written in a smaller unit than the flag says.
MAX_FLANGE_DISTANCE_M = 10.0
# A hand-eye recording moves the flange over tens of centimetres; flange positions all within this
# of each other were written in a larger unit than the flag says (metres read as millimetres).
MIN_FLANGE_SPREAD_M = 0.005
UNIT_TOLERANCE = 1e-3  # exporters print 6 significant digits; a quaternion off by more is not a rotation
SAME_POSE_M, SAME_POSE_RAD = 1e-6, 1e-6


@dataclass
class FlangePoses:
    """``pose_ids`` (N,) and ``base_T_flange`` (N, 4, 4) in metres; ``rows`` (N,) where each came
    from (``row 5``, ``p0003.yaml``) for messages; ``source`` the file or folder."""

    pose_ids: list[str]
    base_T_flange: np.ndarray
    rows: list[str]
    source: Path | str  # the file or folder; or the bag and its /tf frames

    def index(self) -> dict[str, int]:
        return {pose: i for i, pose in enumerate(self.pose_ids)}


def read_flange_poses(path: Path, length_unit: str = "m") -> FlangePoses:
    """A flange-pose file or folder (module docstring) -> poses in metres; InputError naming file and row."""
    path = Path(path)
    if length_unit not in LENGTH_UNITS:
        raise InputError(f"{setting('length_unit')} {length_unit!r} is not one of {', '.join(LENGTH_UNITS)}.")
    if path.is_dir():
        poses = _read_yaml_folder(path, length_unit)
    elif path.is_file():
        poses = _read_csv(path, length_unit)
    else:
        raise InputError(f"{path}: flange-pose file not found.")
    check_flange_poses(poses, length_unit)
    return poses


def _pose(values: np.ndarray, form: str, where: str, length_unit: str) -> np.ndarray:
    """7 numbers (x y z qx qy qz qw) or 16 (row-major 4x4) -> (4, 4) in metres."""
    if not np.all(np.isfinite(values)):
        raise InputError(f"{where}: a value is not a finite number.")
    pose = np.eye(4)
    if form == "quaternion":
        quaternion = values[3:7]
        norm = float(np.linalg.norm(quaternion))
        if abs(norm - 1.0) > UNIT_TOLERANCE:
            raise InputError(f"{where}: the quaternion (qx, qy, qz, qw) has length {norm:.6g}, not 1, so it is not a "
                             f"rotation (a quaternion must be of unit length, in the order x, y, z, w).")
        pose[:3, :3] = quat_xyzw_to_matrix(quaternion / norm)
        pose[:3, 3] = to_metres(values[:3], length_unit)
        return pose
    matrix = values.reshape(4, 4)
    rotation = matrix[:3, :3]
    error = float(np.abs(rotation.T @ rotation - np.eye(3)).max())
    if error > UNIT_TOLERANCE or np.linalg.det(rotation) <= 0:
        raise InputError(f"{where}: the upper-left 3x3 of the matrix is not a rotation (R^T R differs from the "
                         f"identity by {error:.3g}, determinant {np.linalg.det(rotation):.4g}); is it row-major?")
    if np.abs(matrix[3] - [0, 0, 0, 1]).max() > UNIT_TOLERANCE:
        raise InputError(f"{where}: the last row of the matrix is {matrix[3].tolist()}, not [0, 0, 0, 1]; a "
                         f"row-major 4x4 (m00, m01, ..., m33) is expected.")
    u, _, vt = np.linalg.svd(rotation)
    pose[:3, :3] = u @ vt
    pose[:3, 3] = to_metres(matrix[:3, 3], length_unit)
    return pose


def _read_csv(path: Path, length_unit: str) -> FlangePoses:
    header, rows = read_csv_rows(path)
    header = [h.strip().lower() for h in header]
    if "pose" not in header:
        raise InputError(f"{path}: column 'pose' is missing (expected pose,x,y,z,qx,qy,qz,qw or pose,m00,...,m33).")
    if all(k in header for k in QUATERNION_KEYS):
        form, keys = "quaternion", QUATERNION_KEYS
    elif all(k in header for k in MATRIX_KEYS):
        form, keys = "matrix", MATRIX_KEYS
    else:
        missing = [k for k in QUATERNION_KEYS if k not in header]
        raise InputError(f"{path}: column {missing[0]!r} is missing (expected pose,x,y,z,qx,qy,qz,qw or a row-major "
                         f"4x4 as pose,m00,m01,...,m33).")
    columns = [header.index(k) for k in keys]
    pose_ids, poses, where = [], [], []
    for number, row in enumerate(rows, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise InputError(f"{path}: row {number} has {len(row)} cells, the header has {len(header)}.")
        try:
            values = np.array([float(row[c]) for c in columns])
        except ValueError:
            bad = next(keys[i] for i, c in enumerate(columns) if not _is_number(row[c]))
            raise InputError(f"{path}: row {number}, column {bad!r}: {row[header.index(bad)]!r} is not a number.") from None
        pose_ids.append(row[header.index("pose")].strip())
        poses.append(_pose(values, form, f"{path}: row {number}", length_unit))
        where.append(f"row {number}")
    if not poses:
        raise InputError(f"{path}: no flange poses (only a header).")
    return FlangePoses(pose_ids, np.array(poses), where, path)


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _read_yaml_folder(folder: Path, length_unit: str) -> FlangePoses:
    import yaml

    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in (".yaml", ".yml") and p.is_file())
    if not files:
        raise InputError(f"{folder}: no <pose>.yaml files (one per photo, keys x, y, z, qx, qy, qz, qw).")
    pose_ids, poses, where = [], [], []
    for path in files:
        if path.is_symlink() and not path.resolve().is_relative_to(folder.resolve()):
            raise InputError(f"{path}: links outside {folder}.")
        try:
            data = yaml.safe_load(path.read_text())
        except (yaml.YAMLError, UnicodeDecodeError) as error:
            raise InputError(f"{path}: not YAML ({type(error).__name__}).") from None
        if not isinstance(data, dict):
            raise InputError(f"{path}: expected keys x, y, z, qx, qy, qz, qw.")
        missing = [k for k in QUATERNION_KEYS if k not in data]
        if missing:
            raise InputError(f"{path}: key {missing[0]!r} is missing (expected x, y, z, qx, qy, qz, qw).")
        try:
            values = np.array([float(data[k]) for k in QUATERNION_KEYS])
        except (TypeError, ValueError):
            bad = next(k for k in QUATERNION_KEYS if not _is_number(str(data[k])))
            raise InputError(f"{path}: key {bad!r}: {data[bad]!r} is not a number.") from None
        pose_ids.append(path.stem)
        poses.append(_pose(values, "quaternion", str(path), length_unit))
        where.append(path.name)
    return FlangePoses(pose_ids, np.array(poses), where, folder)


def check_flange_poses(poses: FlangePoses, length_unit: str, from_tf: bool = False) -> None:
    """The checks every flange-pose source passes (module docstring); InputError naming the source and row.
    ``from_tf``: the poses came from a bag's /tf (metres by definition): the advice names the frames,
    not the unit."""
    source = poses.source
    seen: dict[str, str] = {}
    for pose, row in zip(poses.pose_ids, poses.rows):
        if not pose:
            raise InputError(f"{source}: {row}: empty pose id.")
        if pose in seen:
            raise InputError(f"{source}: {row}: pose id {pose!r} appears twice ({seen[pose]} too).")
        seen[pose] = row
    positions = poses.base_T_flange[:, :3, 3]
    distance = np.linalg.norm(positions, axis=1)
    far = int(np.argmax(distance))
    if distance[far] > MAX_FLANGE_DISTANCE_M:
        raise InputError(f"{source}: {poses.rows[far]}: the flange is {distance[far]:.4g} m from the base, farther than "
                         f"any arm reaches; " + (f"is the first frame of {setting('flange_frames')} the robot's base?" if from_tf
                                                 else f"positions are read in {length_unit} ({setting('length_unit')} "
                                                      f"{length_unit}): pass {setting('length_unit')} mm if the file is "
                                                      f"in millimetres."))
    spread = float(np.linalg.norm(positions.max(axis=0) - positions.min(axis=0))) if len(positions) > 1 else None
    if spread is not None and spread < MIN_FLANGE_SPREAD_M:
        raise InputError(f"{source}: every flange position lies within {1000 * spread:.3g} mm of the others, less than "
                         f"any hand-eye recording moves; " + (f"is the second frame of {setting('flange_frames')} the flange?"
                                                              if from_tf else
                                                              f"positions are read in {length_unit} "
                                                              f"({setting('length_unit')} {length_unit}): pass "
                                                              f"{setting('length_unit')} m if the file is in metres."))
    for i in range(len(positions)):
        for j in range(i + 1, len(positions)):
            moved = float(np.linalg.norm(positions[i] - positions[j]))
            if moved > SAME_POSE_M:
                continue
            rotation = poses.base_T_flange[i, :3, :3].T @ poses.base_T_flange[j, :3, :3]
            angle = float(np.arccos(np.clip((np.trace(rotation) - 1) / 2, -1, 1)))
            if angle < SAME_POSE_RAD:
                raise InputError(f"{source}: {poses.rows[j]} (pose {poses.pose_ids[j]!r}) repeats the flange pose of "
                                 f"{poses.rows[i]} (pose {poses.pose_ids[i]!r}); " +
                                 ("the arm stood at the same pose twice, and each photo needs a pose of its own."
                                  if from_tf else "a copied row? Each photo needs the pose the arm stood at when it "
                                  "was taken."))


FLANGE_HEADER = ["pose", *QUATERNION_KEYS]


def write_flange_csv(path: Path, pose_ids: list[str], base_T_flange: np.ndarray) -> None:
    """The session's ``flange_poses.csv``: pose, x, y, z (m), qx, qy, qz, qw."""
    import csv

    from rigs.transforms import quat_xyzw

    with open(path, "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(FLANGE_HEADER)
        for pose, transform in zip(pose_ids, base_T_flange):
            writer.writerow([pose, *(repr(float(v)) for v in transform[:3, 3]),
                             *(repr(float(v)) for v in quat_xyzw(transform[:3, :3]))])
