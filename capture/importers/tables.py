"""Delimited text tables as measurement software writes them, with errors that name the line.

Accepted: comma, semicolon, tab or whitespace separated; ``//`` and ``#`` comment lines (and blank
lines) anywhere; a UTF-8 byte-order mark; Windows-1252 text when the file is not UTF-8. Cells are
stripped. Line numbers in errors count every line of the file, comments included, so they match
what an editor shows.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rigs.errors import InputError, setting

COMMENT_PREFIXES = ("//", "#")
UNIT_SUFFIX = re.compile(r"\s*[\[(]\s*([A-Za-z/ ]+?)\s*[\])]\s*$")


@dataclass
class Table:
    """Rows of a text table: ``rows[i]`` are the cells of file line ``lines[i]`` (1-based)."""

    path: Path
    header: list[str] | None  # column names as written (unit suffixes removed), or None
    header_units: dict[str, str]  # column name -> unit written in the header, e.g. "X [mm]"
    rows: list[list[str]]
    lines: list[int]
    comments: list[str] = field(default_factory=list)  # comment lines before the first row, prefix removed

    def index(self, name: str) -> int | None:
        """Column index of ``name`` (case-insensitive, as written), or None."""
        if self.header is None:
            return None
        lowered = [h.lower() for h in self.header]
        return lowered.index(name.lower()) if name.lower() in lowered else None

    def index_exact(self, name: str) -> int | None:
        return self.header.index(name) if self.header is not None and name in self.header else None

    def cell(self, row: int, column: int, column_name: str) -> str:
        """The cell text; InputError when the row is too short or the cell is empty."""
        cells = self.rows[row]
        if column >= len(cells) or cells[column] == "":
            raise InputError(f"{self.path}: line {self.lines[row]}, column {column_name!r}: the cell is empty.")
        return cells[column]

    def number(self, row: int, column: int, column_name: str) -> float:
        """The cell as a finite float; InputError naming line and column otherwise."""
        text = self.cell(row, column, column_name)
        try:
            value = float(text)
        except ValueError:
            raise InputError(f"{self.path}: line {self.lines[row]}, column {column_name!r}: {text!r} is not a number.") from None
        if not math.isfinite(value):
            raise InputError(f"{self.path}: line {self.lines[row]}, column {column_name!r}: {text!r} is not a finite number.")
        return value

    def time(self, row: int, column: int, column_name: str) -> float:
        """A time stamp cell as seconds: a number of seconds, or an ISO 8601 date-time (UTC when no zone)."""
        text = self.cell(row, column, column_name)
        try:
            value = float(text)
        except ValueError:
            try:
                stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                raise InputError(f"{self.path}: line {self.lines[row]}, column {column_name!r}: {text!r} is neither "
                                 f"seconds nor an ISO 8601 time.") from None
            if stamp.tzinfo is None:
                from datetime import timezone

                stamp = stamp.replace(tzinfo=timezone.utc)
            return stamp.timestamp()
        if not math.isfinite(value):
            raise InputError(f"{self.path}: line {self.lines[row]}, column {column_name!r}: {text!r} is not a finite time.")
        return value


def text_encoding(data: bytes) -> str:
    """How a table's bytes are read: "utf-8", or "cp1252" (Windows-1252, what tracker software on
    Windows writes) when they are not UTF-8. The import says which, so a wrong guess shows."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # byte-order mark, also in front of text that is not UTF-8 after all
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "cp1252"
    return "utf-8"


def file_encoding(path: Path) -> str:
    """:func:`text_encoding` of the file at ``path``."""
    return text_encoding(Path(path).read_bytes())


def _decode(path: Path) -> str:
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    text = data.decode(text_encoding(data), errors="replace")
    if "\x00" in text:
        raise InputError(f"{path}: a binary file, not a text table.")
    return text


def _split(line: str, delimiter: str | None) -> list[str]:
    if delimiter is None:
        return line.split()
    return [cell.strip() for cell in next(csv.reader([line], delimiter=delimiter, skipinitialspace=True))]


def _delimiter(line: str) -> str | None:
    for candidate in (",", ";", "\t"):
        if candidate in line:
            return candidate
    return None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _strip_unit(name: str) -> tuple[str, str | None]:
    match = UNIT_SUFFIX.search(name)
    if match:
        return name[: match.start()].strip(), match.group(1).strip()
    return name.strip(), None


def read_table(path: Path, header: str = "required", what: str = "table") -> Table:
    """Read a delimited text file.

    ``header``: ``"required"`` (the first non-comment line names the columns), ``"optional"`` (a
    first line with no number in it is a header; failing that, a last comment line that names
    columns x, y and z is one) or ``"none"``.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: {what} file not found.")
    lines = _decode(path).splitlines()
    content = [(number, line.strip()) for number, line in enumerate(lines, start=1)]
    comments, data = [], []
    for number, line in content:
        if not line:
            continue
        if line.startswith(COMMENT_PREFIXES):
            if not data:
                comments.append(line.lstrip("/#").strip())
            continue
        data.append((number, line))
    if not data:
        raise InputError(f"{path}: the {what} file has no rows.")
    delimiter = _delimiter(data[0][1])
    rows = [(number, _split(line, delimiter)) for number, line in data]
    names = None
    if header == "required":
        names = rows.pop(0)[1]
    elif header == "optional":
        first = rows[0][1]
        if not any(_is_number(cell) for cell in first):
            names = rows.pop(0)[1]
        elif comments:
            candidate = _split(comments[-1], _delimiter(comments[-1]))
            if {"x", "y", "z"} <= {_strip_unit(c)[0].lower() for c in candidate}:
                names = candidate
    units: dict[str, str] = {}
    if names is not None:
        stripped = []
        for name in names:
            bare, unit = _strip_unit(name)
            stripped.append(bare)
            if unit:
                units[bare.lower()] = unit
        names = stripped
        if "" in names:
            raise InputError(f"{path}: the header has an empty column name (column {names.index('') + 1}).")
        lowered = [n.lower() for n in names]
        for name in names:
            if lowered.count(name.lower()) > 1:
                raise InputError(f"{path}: column {name!r} appears twice in the header.")
    if not rows:
        raise InputError(f"{path}: the {what} file has a header but no rows.")
    if names is not None:
        for number, cells in rows:
            if len(cells) > len(names) and any(cells[len(names):]):
                raise InputError(f"{path}: line {number} has {len(cells)} cells, the header has {len(names)}.")
    return Table(path, names, units, [cells for _, cells in rows], [number for number, _ in rows], comments)


UNIT_ALIASES = {
    "m": "m", "meter": "m", "meters": "m", "metre": "m", "metres": "m",
    "mm": "mm", "millimeter": "mm", "millimeters": "mm", "millimetre": "mm", "millimetres": "mm",
    "cm": "cm", "in": "in", "inch": "in", "inches": "in",
    "deg": "deg", "degree": "deg", "degrees": "deg", "rad": "rad", "radian": "rad", "radians": "rad",
}


def check_header_unit(table: Table, column: str, unit: str, kind: str) -> None:
    """A unit written in the header (``X [mm]``) must agree with the unit flag; unknown words are ignored."""
    written = table.header_units.get(column.lower())
    known = UNIT_ALIASES.get(written.lower()) if written is not None else None
    if known is not None and known != unit:
        name = setting("length_unit" if kind == "length" else "angle_unit")
        raise InputError(f"{table.path}: column {column!r} says its unit is {written!r} but {name} is {unit!r}; "
                         f"pass {name} {known}.")
