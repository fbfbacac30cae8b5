"""Units of imported files: conversion to SI once, at import, and checks that the unit is plausible.

A wrong unit flag is the commonest import mistake (a tracker file in millimetres read as metres
puts the robot a kilometre away), so every imported length and angle is checked against ranges
that real set-ups never leave, and the error names the row and the flag that probably fits.
"""

from __future__ import annotations

import numpy as np

from rigs.errors import InputError, setting
# Joint values against the URDF limits: one check (and tolerance) for imports and sessions alike.
from rigs.limits import JOINT_LIMIT_MARGIN_M, JOINT_LIMIT_MARGIN_RAD, check_joint_values  # noqa: F401

LENGTH_UNITS = {"m": 1.0, "mm": 1e-3, "cm": 1e-2, "in": 0.0254}
ANGLE_UNITS = {"rad": 1.0, "deg": np.pi / 180.0}

# Laser trackers and 6-DoF trackers measure out to about 80 m (Leica AT960, FARO Vantage); a
# coordinate beyond that is a unit mistake, not a measurement.
MAX_TRACKER_DISTANCE_M = 80.0
# A calibration run moves the tool over tens of centimetres at least; points that all lie within
# this of each other were written in a larger unit than the flag says (metres read as millimetres).
MIN_TRACKER_SPREAD_M = 0.005


def length_factor(unit: str) -> float:
    """Metres per ``unit`` (m, mm, cm, in)."""
    if unit not in LENGTH_UNITS:
        raise InputError(f"{setting('length_unit')} {unit!r} is not one of {', '.join(LENGTH_UNITS)}.")
    return LENGTH_UNITS[unit]


def to_metres(values, unit: str) -> np.ndarray:
    """Lengths in ``unit`` -> metres. Divides by 1000 for mm (not times 1e-3) so that a file's
    decimals come out as the nearest double: 738.5378 mm is 0.7385378 m, not 0.7385377999999999."""
    values = np.asarray(values, dtype=float)
    divisor = {"m": 1.0, "mm": 1000.0, "cm": 100.0}.get(unit)
    return values / divisor if divisor is not None else values * length_factor(unit)


def angle_factor(unit: str) -> float:
    """Radians per ``unit`` (rad, deg)."""
    if unit not in ANGLE_UNITS:
        raise InputError(f"{setting('angle_unit')} {unit!r} is not one of {', '.join(ANGLE_UNITS)}.")
    return ANGLE_UNITS[unit]


def check_tracker_lengths(xyz_m: np.ndarray, lines: list[int], path, unit: str, pose_count: int) -> None:
    """Tracker-frame positions (M, 3) in metres: within tracker range, and not all in one spot.

    ``lines`` are the file's line numbers of the rows, ``pose_count`` the number of distinct poses
    (the spread check needs at least three).
    """
    xyz_m = np.asarray(xyz_m, dtype=float).reshape(-1, 3)
    if not len(xyz_m):
        return
    distance = np.abs(xyz_m).max(axis=1)
    beyond = np.flatnonzero(distance > MAX_TRACKER_DISTANCE_M)
    if len(beyond):
        far = int(beyond[0])
        raw = distance[far] / LENGTH_UNITS[unit]
        raise InputError(f"{path}: line {lines[far]}: a coordinate of {raw:g} {unit} is {distance[far]:.0f} m from the "
                         f"tracker, beyond any tracker's range; the file is probably in a smaller unit "
                         f"(pass {setting('length_unit')}, e.g. mm).")
    spread = float(np.ptp(xyz_m, axis=0).max())
    if pose_count >= 3 and spread < MIN_TRACKER_SPREAD_M:
        raise InputError(f"{path}: all {len(xyz_m)} positions lie within {spread / LENGTH_UNITS[unit]:g} {unit} of each "
                         f"other over {pose_count} poses; the file is probably in a larger unit than {unit} "
                         f"(pass {setting('length_unit')}, e.g. m).")
