"""Joint logs: one row per recorded pose, joint columns matched by name, in the user's units.

A joints file has a header. Columns (any order):

- ``pose``: the pose id (text, unique); may be left out when ``time`` is there (ids ``p0000``...);
- one column per movable joint of the chain base -> tip, named exactly as in the URDF;
- ``time`` (or ``timestamp``, ``stamp``): seconds, or an ISO 8601 date-time;
- ``payload_kg``: the payload at the tool in kg;
- ``effort_<joint>``: measured joint torque in N m (force in N for a prismatic joint).

Any other column is an error (it is usually a misspelt joint) unless the caller keeps extras.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from capture.importers.tables import check_header_unit, read_table
from capture.importers.units import angle_factor, check_joint_values, length_factor
from capture.session import pose_id
from rigs.errors import InputError, setting
from rigs.limits import ArmJoints

TIME_COLUMNS = ("time", "timestamp", "stamp")
EFFORT_PREFIX = "effort_"


@dataclass
class JointLog:
    """Joint rows in SI units: ``q`` (N, dof) rad (m for prismatic), chain order."""

    source: str  # file (or bag) the rows came from, for messages
    pose_ids: list[str]
    lines: list[int]  # file line number (or message number) of each row
    q: np.ndarray
    times: np.ndarray | None = None  # (N,) s
    payload_kg: np.ndarray | None = None  # (N,) kg
    efforts: dict[str, np.ndarray] = field(default_factory=dict)  # joint name -> (N,) N m
    extra: dict[str, list[str]] = field(default_factory=dict)  # kept extra columns, as text


def _factors(chain: ArmJoints, length_unit: str, angle_unit: str) -> np.ndarray:
    """(dof,) SI units per file unit for each joint (angle unit for revolute, length unit for prismatic)."""
    return np.array([length_factor(length_unit) if kind == "prismatic" else angle_factor(angle_unit)
                     for kind in chain.types])


def read_joint_log(path: Path, chain: ArmJoints, length_unit: str = "mm", angle_unit: str = "deg",
                   keep_extra: bool = False) -> JointLog:
    """Read a joints file (see module docstring) and convert it to rad/m."""
    table = read_table(path, header="required", what="joints")
    header = table.header
    missing = [name for name in chain.names if table.index_exact(name) is None]
    if missing:
        near = [h for h in header if h.lower() == missing[0].lower()]
        hint = f" (the file has {near[0]!r}; joint names are case-sensitive)" if near else \
            f" (the chain base -> tip has joints {', '.join(chain.names)})"
        raise InputError(f"{table.path}: joint column {missing[0]!r} is missing{hint}.")
    time_column = next((table.index(name) for name in TIME_COLUMNS if table.index(name) is not None), None)
    pose_column = table.index("pose")
    payload_column = table.index("payload_kg")
    effort_columns: dict[str, int] = {}
    extra_columns: dict[str, int] = {}
    known = set(chain.names)
    for column, name in enumerate(header):
        lowered = name.lower()
        if name in known or column in (time_column, pose_column, payload_column):
            continue
        if lowered.startswith(EFFORT_PREFIX):
            joint = name[len(EFFORT_PREFIX):]
            if joint not in known:
                raise InputError(f"{table.path}: column {name!r} gives efforts of joint {joint!r}, which is not a movable "
                                 f"joint of the chain ({', '.join(chain.names)}).")
            effort_columns[joint] = column
        elif keep_extra:
            extra_columns[name] = column
        else:
            raise InputError(f"{table.path}: column {name!r} is neither a joint of the chain ({', '.join(chain.names)}) "
                             f"nor pose, time, payload_kg or effort_<joint>; fix its name or pass "
                             f"{setting('keep_extra')}.")
    if pose_column is None and time_column is None:
        raise InputError(f"{table.path}: column 'pose' is missing (a joints file without pose ids needs a time column).")
    for name in chain.names:
        check_header_unit(table, name, length_unit if chain.types[chain.names.index(name)] == "prismatic" else angle_unit,
                          "length" if chain.types[chain.names.index(name)] == "prismatic" else "angle")

    count = len(table.rows)
    raw = np.empty((count, len(chain.names)))
    joint_columns = [table.index_exact(name) for name in chain.names]
    pose_ids, times, payload = [], [], []
    efforts = {joint: np.empty(count) for joint in effort_columns}
    extra = {name: [] for name in extra_columns}
    seen: dict[str, int] = {}
    for row in range(count):
        line = table.lines[row]
        if pose_column is not None:
            pose = table.cell(row, pose_column, header[pose_column])
            if pose in seen:
                raise InputError(f"{table.path}: line {line}: pose id {pose!r} appears twice (first on line {seen[pose]}).")
            if "," in pose or "\n" in pose:
                raise InputError(f"{table.path}: line {line}: pose id {pose!r} must not contain a comma.")
            seen[pose] = line
        else:
            pose = pose_id(row)
        pose_ids.append(pose)
        raw[row] = [table.number(row, column, name) for column, name in zip(joint_columns, chain.names)]
        if time_column is not None:
            times.append(table.time(row, time_column, header[time_column]))
        if payload_column is not None:
            value = table.number(row, payload_column, header[payload_column])
            if value < 0:
                raise InputError(f"{table.path}: line {line}, column 'payload_kg': {value:g} kg is negative.")
            payload.append(value)
        for joint, column in effort_columns.items():
            efforts[joint][row] = table.number(row, column, header[column])
        for name, column in extra_columns.items():
            cells = table.rows[row]
            extra[name].append(cells[column] if column < len(cells) else "")
    q = raw * _factors(chain, length_unit, angle_unit)
    check_joint_values(q, raw, chain.names, chain.types, chain.lower, chain.upper, table.lines, table.path, angle_unit)
    return JointLog(str(table.path), pose_ids, list(table.lines), q,
                    np.array(times) if time_column is not None else None,
                    np.array(payload) if payload_column is not None else None, efforts, extra)
