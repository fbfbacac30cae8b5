"""Reflector points from laser-tracker software exports, in the dialects people have.

Accepted dialects (see docs/importing.md for examples):

- **SpatialAnalyzer-style**: ``//`` comment lines, comma or tab separated, names either in one cell
  as ``Collection::Group::Target`` or in separate ``Collection, Group, Target`` columns, then
  ``X, Y, Z``; anything after is ignored unless a header names it.
- **Plain whitespace**: ``name x y z`` per line, no header.
- **With uncertainties**: a header naming ``sigma`` (one standard deviation per axis) or ``ux, uy, uz``
  (per-axis standard deviations, combined as their root mean square), in the length unit.
- Optional ``time`` column (seconds or ISO 8601), to match points to poses by time stamp.

How a point names its pose: a ``pose`` column; or the Group (``Collection::Group::Target``,
``Group::Target`` or Group/Target columns) is the pose and the Target the reflector; or a single
name ``<pose>_<reflector>`` whose start is a pose id of the joints (e.g. ``p0007_smr2``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from capture.importers.tables import UNIT_ALIASES, Table, check_header_unit, read_table
from capture.importers.units import length_factor, to_metres
from rigs.errors import InputError, setting

NAME_COLUMNS = ("name", "collection::group::target", "group::target", "point", "point name", "pointname", "target name", "id", "label")
TIME_COLUMNS = ("time", "timestamp", "stamp")
UNITS_COMMENT = re.compile(r"\bunits?\b\s*[:=]?\s*([A-Za-z]+)", re.IGNORECASE)


@dataclass
class PointRecords:
    """Points as read, in metres: row i is file line ``lines[i]``.

    ``pose[i]`` is the pose the layout names (pose column or Group), or None when the pose is
    encoded in a single name (``<pose>_<target>``) or is to be found by time stamp.
    """

    source: str
    lines: list[int]
    names: list[str]  # the name as written, for messages
    pose: list[str | None]
    target: list[str]
    xyz: np.ndarray  # (M, 3) m, tracker frame
    sigma: np.ndarray | None  # (M,) m, per-axis standard deviation
    times: np.ndarray | None  # (M,) s
    layout: str  # "pose column", "group/target", "single name"


def _split_name(name: str) -> tuple[str | None, str]:
    """``Collection::Group::Target`` or ``Group::Target`` -> (group, target); a plain name -> (None, name)."""
    parts = [part.strip() for part in name.split("::")]
    if len(parts) == 1:
        return None, name
    if len(parts) > 3 or any(not part for part in parts):
        raise ValueError(name)
    return parts[-2], parts[-1]


def _check_units_comment(table: Table, unit: str) -> None:
    for comment in table.comments:
        match = UNITS_COMMENT.search(comment)
        if match and UNIT_ALIASES.get(match.group(1).lower()) in ("m", "mm", "cm", "in"):
            written = UNIT_ALIASES[match.group(1).lower()]
            if written != unit:
                raise InputError(f"{table.path}: the file says its units are {match.group(1)!r} but "
                                 f"{setting('length_unit')} is {unit!r}; pass {setting('length_unit')} {written}.")
            return


def read_points(path: Path, length_unit: str = "mm") -> PointRecords:
    """Read a tracker export (any dialect above); coordinates and uncertainties converted to metres."""
    length_factor(length_unit)  # refuse an unknown unit before reading
    table = read_table(path, header="optional", what="points")
    _check_units_comment(table, length_unit)
    if table.header is not None:
        columns = {name.lower(): i for i, name in enumerate(table.header)}
        for axis in "xyz":
            if axis not in columns:
                raise InputError(f"{table.path}: column {axis!r} is missing (the header names {', '.join(table.header)}).")
            check_header_unit(table, axis, length_unit, "length")
        xyz_columns = [columns[a] for a in "xyz"]
        pose_column = columns.get("pose")
        group_column = columns.get("group")
        target_column = columns.get("target")
        name_column = next((columns[n] for n in NAME_COLUMNS if n in columns), None)
        if pose_column is not None and target_column is not None:
            layout = "pose column"
        elif group_column is not None and target_column is not None:
            layout, pose_column = "group/target", group_column
        elif name_column is not None or target_column is not None:
            layout = "single name"
            target_column = name_column if name_column is not None else target_column
        else:
            raise InputError(f"{table.path}: no column names the points (expected pose and target, Group and Target, "
                             f"or name).")
        time_column = next((columns[n] for n in TIME_COLUMNS if n in columns), None)
        sigma_columns = [columns["sigma"]] if "sigma" in columns else \
            [columns[u] for u in ("ux", "uy", "uz")] if {"ux", "uy", "uz"} <= set(columns) else []
        if not sigma_columns and any(u in columns for u in ("ux", "uy", "uz")):
            raise InputError(f"{table.path}: uncertainty columns need all of ux, uy and uz.")
        sigma_names = [table.header[c] for c in sigma_columns]
    else:
        first = table.rows[0]
        leading = 0
        while leading < len(first) and not _is_number(first[leading]):
            leading += 1
        if leading == 0 and len(first) >= 4:
            leading = 1  # a numeric point name: "1 100.0 200.0 300.0"
        if leading > 3 or len(first) < leading + 3:
            raise InputError(f"{table.path}: line {table.lines[0]}: expected a name then x y z (or Collection, Group, "
                             f"Target then x y z), got {len(first)} cells.")
        xyz_columns = [leading, leading + 1, leading + 2]
        target_column, time_column, sigma_columns, sigma_names = leading - 1, None, [], []
        pose_column = leading - 2 if leading >= 2 else None
        layout = "group/target" if pose_column is not None else "single name"
    lines, names, poses, targets, xyz, sigma, times = [], [], [], [], [], [], []
    for row in range(len(table.rows)):
        line = table.lines[row]
        cells = table.rows[row]
        if table.header is None and len(cells) < xyz_columns[2] + 1:
            raise InputError(f"{table.path}: line {line} has {len(cells)} cells, expected at least {xyz_columns[2] + 1}.")
        target = table.cell(row, target_column, "target")
        pose = table.cell(row, pose_column, "pose") if pose_column is not None else None
        if layout == "single name":
            try:
                pose, target = _split_name(target)
            except ValueError:
                raise InputError(f"{table.path}: line {line}: point name {target!r} is not Name, Group::Target or "
                                 f"Collection::Group::Target.") from None
        names.append(cells[target_column] if pose_column is None else f"{pose}::{target}")
        poses.append(pose)
        targets.append(target)
        lines.append(line)
        xyz.append([table.number(row, column, axis) for column, axis in zip(xyz_columns, "xyz")])
        if sigma_columns:
            values = to_metres([table.number(row, c, n) for c, n in zip(sigma_columns, sigma_names)], length_unit)
            if (values < 0).any():
                raise InputError(f"{table.path}: line {line}: an uncertainty is negative.")
            sigma.append(float(np.sqrt(np.mean(values ** 2))))
        if time_column is not None:
            times.append(table.time(row, time_column, table.header[time_column]))
        if "," in target or "," in (pose or ""):
            raise InputError(f"{table.path}: line {line}: names must not contain commas ({names[-1]!r}).")
    if layout == "single name" and all(p is not None for p in poses):
        layout = "group/target"
    return PointRecords(str(table.path), lines, names, poses, targets, to_metres(np.array(xyz, dtype=float).reshape(-1, 3), length_unit),
                        np.array(sigma) if sigma_columns else None, np.array(times) if time_column is not None else None,
                        layout)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
