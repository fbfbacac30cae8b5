"""FLEET.csv: one arm a row, ``arm,sessions[,validate][,options]``.

``sessions`` is one or more session folders separated by ``;``, ``validate`` a held-out session,
both relative to the CSV's own folder (and confined to it); ``options`` are extra options of the
per-arm command (``--deflection none``), split as a shell would split them and checked by that
command's own parser. Lines starting with ``#`` are comments.

A mistake in the table itself (no header, an unknown column, two rows for one arm, an arm name that
cannot be a folder) stops the whole fleet with a sentence before anything runs. A mistake in one
arm's cells (a session that is not there, a path that leads outside the folder, an option the
command refuses) is that arm's sentence: it fails, the others run.
"""

from __future__ import annotations

import csv
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rigs.errors import InputError
from rigs.files import inside_folder, read_text

COLUMNS = ("arm", "sessions", "validate", "options")
REQUIRED = ("arm", "sessions")
ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
RESERVED = {"fleet.json", "index.html"}


@dataclass
class ArmRow:
    """One arm of the table. Paths are as written (relative to the table's folder); ``problem`` is the
    sentence that fails this arm before it runs (None when it can run)."""

    arm: str
    line: int
    sessions: list[str]
    validate: str | None
    options: list[str]
    problem: str | None = None


@dataclass
class FleetTable:
    path: Path
    folder: Path
    arms: list[ArmRow]


def _cells(text: str, path: Path) -> list[tuple[int, list[str]]]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            cells = next(csv.reader([line], skipinitialspace=True))
        except csv.Error as error:
            raise InputError(f"{path}: line {number} is not a CSV row ({error}).") from None
        rows.append((number, [cell.strip() for cell in cells]))
    return rows


def read_fleet_table(path: Path, check_options: Callable[[list[str]], str | None]) -> FleetTable:
    """Read and check FLEET.csv. ``check_options(tokens)`` is the per-arm command's parser: the
    sentence for options it refuses, or None."""
    path = Path(path)
    rows = _cells(read_text(path, "fleet table"), path)
    if not rows:
        raise InputError(f"{path}: is empty; expected a header `arm,sessions[,validate][,options]` and one row per arm.")
    header_line, header = rows[0]
    header = [name.lower() for name in header]
    unknown = [name for name in header if name not in COLUMNS]
    if unknown:
        raise InputError(f"{path}: line {header_line}: unknown column {unknown[0]!r}; the columns are "
                         f"{', '.join(COLUMNS)} (arm and sessions required).")
    for name in REQUIRED:
        if name not in header:
            raise InputError(f"{path}: line {header_line}: the header has no {name!r} column; expected "
                             f"`arm,sessions[,validate][,options]`.")
    if len(set(header)) != len(header):
        raise InputError(f"{path}: line {header_line}: a column is named twice in the header.")
    if len(rows) == 1:
        raise InputError(f"{path}: has a header but no arm; add one row per arm.")
    folder = path.parent.resolve()  # named in sentences: "." would tell the user nothing
    arms: list[ArmRow] = []
    seen: dict[str, int] = {}
    for number, cells in rows[1:]:
        if len(cells) > len(header):
            raise InputError(f"{path}: line {number} has {len(cells)} cells for {len(header)} columns (quote an "
                             f"options cell that holds a comma).")
        values = dict(zip(header, cells + [""] * (len(header) - len(cells))))
        arm = values["arm"]
        if not ARM_NAME.match(arm) or arm in RESERVED:
            raise InputError(f"{path}: line {number}: arm name {arm!r} cannot be a folder name; use letters, digits, "
                             f"'.', '_' and '-' (up to 100, not starting with '.', not {' or '.join(sorted(RESERVED))}).")
        if arm in seen:
            raise InputError(f"{path}: line {number}: arm {arm!r} is already on line {seen[arm]}; one row per arm.")
        seen[arm] = number
        arms.append(_arm_row(folder, path, number, values, check_options))
    return FleetTable(path, folder, arms)


def _arm_row(folder: Path, path: Path, number: int, values: dict, check_options) -> ArmRow:
    where = f"{path}: line {number}"
    sessions = [s.strip() for s in values["sessions"].split(";") if s.strip()]
    validate = values.get("validate") or None
    row = ArmRow(values["arm"], number, sessions, validate, [])
    try:
        row.options = shlex.split(values.get("options") or "")
    except ValueError as error:
        row.problem = f"{where}, options: {values.get('options')!r} cannot be split into options ({error})."
        return row
    if not sessions:
        row.problem = f"{where}: arm {row.arm!r} names no session (the sessions cell is empty)."
        return row
    for column, relative in [("sessions", s) for s in sessions] + ([("validate", validate)] if validate else []):
        try:
            session = inside_folder(folder, relative, f"{where}, {column}", "session folder")
        except InputError as error:
            row.problem = str(error)
            return row
        if not session.is_dir():
            row.problem = f"{where}, {column}: session folder {relative!r} not found (looked in {folder})."
            return row
    problem = check_options(row.options)
    if problem is not None:
        row.problem = f"{where}, options: {problem}"
    return row
