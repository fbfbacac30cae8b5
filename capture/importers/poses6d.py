"""6-DoF tracked poses (a T-Mac, an optical tracker, a motion-capture body) in the tracker frame.

A poses file has a header with ``pose`` (or ``time``, to match by time stamp) and one of:

- ``x, y, z, qx, qy, qz, qw``: position and unit quaternion (any sign);
- ``x, y, z, rx, ry, rz``: position and a rotation vector (axis times angle) or URDF roll-pitch-yaw
  (R = Rz(yaw) Ry(pitch) Rx(roll)), in the angle unit; which one is named by ``rotation``;
- ``m00 ... m33``: the 4x4 pose, row-major; translation m03, m13, m23 in the length unit.

Optional ``sigma_pos`` (length unit) and ``sigma_rot`` (angle unit): standard deviations of the
position per axis and of the rotation angle. Everything is returned in metres and radians.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

from capture.importers.tables import check_header_unit, read_table
from capture.importers.units import angle_factor, length_factor, to_metres
from rigs.errors import InputError, setting

QUATERNION = ("qx", "qy", "qz", "qw")
VECTOR = ("rx", "ry", "rz")
MATRIX = tuple(f"m{r}{c}" for r in range(4) for c in range(4))
ROTATIONS = ("rotvec", "rpy")
ORTHONORMAL_TOLERANCE = 1e-6
QUATERNION_NORM_TOLERANCE = 1e-2


@dataclass
class PoseRecords:
    """Tracked poses in SI units: ``tracker_T_probe`` (M, 4, 4); row i is file line ``lines[i]``."""

    source: str
    lines: list[int]
    pose: list[str | None]
    tracker_T_probe: np.ndarray  # (M, 4, 4), translation in m
    sigma_pos: np.ndarray | None  # (M,) m
    sigma_rot: np.ndarray | None  # (M,) rad
    times: np.ndarray | None  # (M,) s
    layout: str  # "quaternion", "rotvec", "rpy", "matrix"


def read_poses(path: Path, length_unit: str = "mm", angle_unit: str = "deg", rotation: str | None = None) -> PoseRecords:
    """Read a 6-DoF poses file (see module docstring)."""
    length_factor(length_unit)  # refuse an unknown unit before reading
    angle = angle_factor(angle_unit)
    if rotation is not None and rotation not in ROTATIONS:
        raise InputError(f"{setting('rotation')} {rotation!r} is not one of {', '.join(ROTATIONS)}.")
    table = read_table(path, header="required", what="poses")
    columns = {name.lower(): i for i, name in enumerate(table.header)}
    forms = [name for name, keys in (("quaternion", QUATERNION), ("vector", VECTOR), ("matrix", MATRIX))
             if any(k in columns for k in keys)]
    if len(forms) != 1:
        raise InputError(f"{table.path}: expected one rotation form (qx..qw, rx..rz or m00..m33), "
                         f"found {'none' if not forms else ' and '.join(forms)}.")
    form = forms[0]
    keys = {"quaternion": QUATERNION, "vector": VECTOR, "matrix": MATRIX}[form]
    needed = list(keys) + ([] if form == "matrix" else ["x", "y", "z"])
    for key in needed:
        if key not in columns:
            raise InputError(f"{table.path}: column {key!r} is missing (the {form} form needs {', '.join(needed)}).")
    if form == "vector":
        if rotation is None:
            raise InputError(f"{table.path}: columns rx, ry, rz are either a rotation vector or roll-pitch-yaw; "
                             f"say which with {setting('rotation')} rotvec or {setting('rotation')} rpy.")
        layout = rotation
    else:
        layout = form
    for key in ("x", "y", "z", "m03", "m13", "m23", "sigma_pos"):
        check_header_unit(table, key, length_unit, "length")
    for key in (*VECTOR, "sigma_rot"):
        check_header_unit(table, key, angle_unit, "angle")
    pose_column = columns.get("pose")
    time_column = next((columns[n] for n in ("time", "timestamp", "stamp") if n in columns), None)
    if pose_column is None and time_column is None:
        raise InputError(f"{table.path}: column 'pose' is missing (or give a time column to match by time stamp).")
    sigma_columns = [columns.get("sigma_pos"), columns.get("sigma_rot")]

    count = len(table.rows)
    poses: list[str | None] = []
    transforms = np.tile(np.eye(4), (count, 1, 1))
    sigma_pos, sigma_rot, times = [], [], []
    seen: dict[str, int] = {}
    for row in range(count):
        line = table.lines[row]
        values = {key: table.number(row, columns[key], table.header[columns[key]]) for key in needed}
        if form == "matrix":
            matrix = np.array([values[k] for k in MATRIX]).reshape(4, 4)
            if not np.allclose(matrix[3], [0, 0, 0, 1], atol=ORTHONORMAL_TOLERANCE):
                raise InputError(f"{table.path}: line {line}: the last row of the 4x4 is {matrix[3].tolist()}, "
                                 f"expected [0, 0, 0, 1].")
            rotation_matrix = matrix[:3, :3]
            deviation = np.abs(rotation_matrix.T @ rotation_matrix - np.eye(3)).max()
            if deviation > ORTHONORMAL_TOLERANCE or np.linalg.det(rotation_matrix) < 0:
                what = "a reflection" if np.linalg.det(rotation_matrix) < 0 else f"off by {deviation:.1e}"
                raise InputError(f"{table.path}: line {line}: the upper 3x3 of the 4x4 is not a rotation "
                                 f"(R^T R - I is {what}, tolerance {ORTHONORMAL_TOLERANCE:g}).")
            # Re-orthonormalise the rounding left in the export (within 1e-6) so the session holds a rotation.
            u, _, vt = np.linalg.svd(rotation_matrix)
            transforms[row, :3, :3] = u @ vt
            transforms[row, :3, 3] = to_metres(matrix[:3, 3], length_unit)
        else:
            transforms[row, :3, 3] = to_metres([values["x"], values["y"], values["z"]], length_unit)
            if form == "quaternion":
                quaternion = np.array([values[k] for k in QUATERNION])
                norm = np.linalg.norm(quaternion)
                if norm < 1e-9:
                    raise InputError(f"{table.path}: line {line}: the quaternion has zero length.")
                if abs(norm - 1.0) > QUATERNION_NORM_TOLERANCE:
                    raise InputError(f"{table.path}: line {line}: the quaternion has length {norm:.4g}, not 1; "
                                     f"columns are qx, qy, qz, qw of a unit quaternion.")
                transforms[row, :3, :3] = Rotation.from_quat(quaternion / norm).as_matrix()
            elif layout == "rotvec":
                transforms[row, :3, :3] = Rotation.from_rotvec(np.array([values[k] for k in VECTOR]) * angle).as_matrix()
            else:
                roll, pitch, yaw = np.array([values[k] for k in VECTOR]) * angle
                # URDF convention: fixed axes x, y, z, i.e. R = Rz(yaw) Ry(pitch) Rx(roll).
                transforms[row, :3, :3] = Rotation.from_euler("xyz", [roll, pitch, yaw]).as_matrix()
        if pose_column is not None:
            pose = table.cell(row, pose_column, table.header[pose_column])
            if pose in seen:
                raise InputError(f"{table.path}: line {line}: pose {pose!r} appears twice (first on line {seen[pose]}).")
            seen[pose] = line
            poses.append(pose)
        else:
            poses.append(None)
        if time_column is not None:
            times.append(table.time(row, time_column, table.header[time_column]))
        for column, store, factor in ((sigma_columns[0], sigma_pos, None), (sigma_columns[1], sigma_rot, angle)):
            if column is not None:
                value = table.number(row, column, table.header[column])
                if value <= 0:
                    raise InputError(f"{table.path}: line {line}, column {table.header[column]!r}: a standard deviation "
                                     f"must be positive, got {value:g}.")
                store.append(float(to_metres(value, length_unit)) if factor is None else value * factor)
    return PoseRecords(str(table.path), list(table.lines), poses, transforms,
                       np.array(sigma_pos) if sigma_columns[0] is not None else None,
                       np.array(sigma_rot) if sigma_columns[1] is not None else None,
                       np.array(times) if time_column is not None else None, layout)
