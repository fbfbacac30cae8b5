"""Typed reading of parsed documents (TOML, JSON, YAML): every wrong type is one sentence naming file and key."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rigs.errors import InputError


class Table:
    """A table of a TOML, JSON or YAML file that remembers where it came from, so an error names file and key.

    ``get(key, kind, default)`` checks the value's type: ``str``, ``int``, ``number`` (finite),
    ``vector`` (numbers; ``length``), ``matrix`` (``shape``), ``names`` (non-empty strings),
    ``table``, ``tables``. With ``nullable``, a JSON null gives ``None``.
    """

    def __init__(self, data: dict, path: Path, prefix: str):
        self.data, self.path, self.prefix = data, path, prefix
        self.used: set[str] = set()

    def where(self, key: str) -> str:
        return f"{self.path}: key '{self.prefix}{key}'"

    def get(self, key: str, kind: str, default=..., length: int | None = None, shape: tuple | None = None,
            nullable: bool = False):
        self.used.add(key)
        if key not in self.data:
            if default is ...:
                raise InputError(f"{self.where(key)} is missing (expected {kind}).")
            return default
        value = self.data[key]
        if value is None and nullable:
            return None
        if kind == "str":
            if not isinstance(value, str) or not value:
                raise InputError(f"{self.where(key)} should be a non-empty string, got {value!r}.")
            return value
        if kind == "bool":
            if not isinstance(value, bool):
                raise InputError(f"{self.where(key)} should be true or false, got {value!r}.")
            return value
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"{self.where(key)} should be an integer, got {value!r}.")
            return value
        if kind == "number":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
                raise InputError(f"{self.where(key)} should be a number, got {value!r}.")
            return float(value)
        if kind == "vector":
            ok = isinstance(value, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
            if not ok or (length is not None and len(value) != length):
                raise InputError(f"{self.where(key)} should be a list of {length or 'some'} numbers, got {value!r}.")
            values = np.asarray(value, dtype=float)
            if not np.all(np.isfinite(values)):
                raise InputError(f"{self.where(key)} should hold finite numbers, got {value!r}.")
            return values
        if kind == "matrix":
            try:
                values = np.asarray(value, dtype=float)
            except (TypeError, ValueError):
                values = None
            if values is None or values.shape != tuple(shape) or not np.all(np.isfinite(values)) \
                    or isinstance(value, (str, bytes)):
                raise InputError(f"{self.where(key)} should be a {'x'.join(map(str, shape))} array of numbers.")
            return values
        if kind == "names":
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise InputError(f"{self.where(key)} should be a list of names (non-empty strings), got {value!r}.")
            return list(value)
        if kind == "table":
            if not isinstance(value, dict):
                raise InputError(f"{self.where(key)} should be a table, got {value!r}.")
            return Table(value, self.path, f"{self.prefix}{key}.")
        if kind == "tables":
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise InputError(f"{self.where(key)} should be an array of tables ([[{self.prefix}{key}]]).")
            return [Table(v, self.path, f"{self.prefix}{key}[{i}].") for i, v in enumerate(value)]
        raise AssertionError(kind)

    def positive(self, key: str, default=...) -> float:
        value = self.get(key, "number", default)
        if value is not None and value <= 0:
            raise InputError(f"{self.where(key)} should be positive, got {value}.")
        return value

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise InputError(f"{self.where(unknown[0])} is not a known key here "
                             f"(expected one of: {', '.join(sorted(self.used))}).")


def as_table(data, path: Path, what: str) -> Table:
    """The document's top level as a :class:`Table`; InputError when it is not a mapping."""
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a {what} (expected a mapping of keys at the top, got {type(data).__name__}).")
    return Table(data, Path(path), "")


# Units a selfcal file may state: SI, the units everything inside holds (conversion happens once, at import).
SI_UNITS = {"length": "m", "angle": "rad", "mass": "kg", "torque": "N m"}


def check_format(document, path: Path, format_name: str, version: int, what: str) -> Table:
    """The top level of a selfcal document as a :class:`Table`, after checking its ``format``,
    ``format_version`` and (when it states them) ``units``; InputError naming file and key otherwise.

    A version newer than ``version`` comes from a newer selfcal (or a hand edit) and is refused by
    name rather than read as if it were current; so is one older or of the wrong type. Units, where
    the document states them, must be the SI ones of :data:`SI_UNITS`: selfcal never reads lengths
    in mm from a file that says so, it refuses the file.
    """
    from rigs.version import VERSION

    top = as_table(document, path, what)
    found = document.get("format")
    if found != format_name:
        raise InputError(f"{top.where('format')} is {found!r}: not a {what} ({format_name!r}).")
    stated = document.get("format_version")
    if stated is None:
        raise InputError(f"{top.where('format_version')} is missing (this selfcal reads {format_name} "
                         f"version {version}); write the file again with selfcal.")
    if isinstance(stated, bool) or not isinstance(stated, int):
        raise InputError(f"{top.where('format_version')} should be a whole number (this selfcal reads {format_name} "
                         f"version {version}), got {stated!r}.")
    if stated > version:
        raise InputError(f"{top.where('format_version')} is version {stated}, newer than this selfcal {VERSION} reads "
                         f"({format_name} version {version}): the file comes from a newer selfcal (or was edited); "
                         f"update selfcal to read it.")
    if stated != version:
        raise InputError(f"{top.where('format_version')} is version {stated}, which this selfcal {VERSION} does not read "
                         f"({format_name} version {version}); write the file again with this selfcal.")
    units = top.get("units", "table", None, nullable=True)
    for key in sorted(SI_UNITS):
        if units is not None and key in units.data and units.data[key] != SI_UNITS[key]:
            raise InputError(f"{units.where(key)} is {units.data[key]!r}, but selfcal reads {key} only in "
                             f"{SI_UNITS[key]!r} (its files hold SI units; `selfcal import` converts other units "
                             f"once, with `--length-unit` and `--angle-unit`).")
    top.used |= {"format", "format_version", "units"}
    return top
