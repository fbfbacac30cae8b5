"""The geometry of a chain's joint axes that no choice of frames can change.

A calibration writes joint placements as corrections of each joint's frame, but many of those
corrections trade off against each other: a translation of one frame along its axis against the
next frame's, the first joint against the tracker's pose, the last against the reflectors. Two fits
of the same arm can split such a pair differently and still predict every point alike, so comparing
the corrections themselves between arms compares the splits, not the arms.

What every equivalent fit shares is where the joint axes are, as lines in space at the zero
configuration, relative to each other. Between consecutive axes ``i - 1`` and ``i`` that is, in the
Denavit-Hartenberg manner:

- ``angle``: the angle between the two axes (rad);
- ``distance``: the length of their common normal (m);

and along every inner axis ``i`` (one with a neighbour on each side):

- ``offset``: how far apart along axis ``i`` the common normals to its two neighbours meet it (m);
- ``twist``: the angle about axis ``i`` between those two normals, with joint ``i`` at its zero
  reading (rad; a joint's zero offset shows here).

For axes that the nominal description makes parallel (or nearly, below ``PARALLEL_SINE``) the common
normal is not unique; it is then drawn from where the previous normal met the first axis, the same
rule for every arm of the type, so the figures stay continuous when an arm bends a little.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rigs import urdf as urdf_io
from rigs.errors import InputError

PARALLEL_SINE = 0.05  # about 3 degrees: axes closer to parallel than this in the description are treated as parallel
KINDS = ("angle", "distance", "offset", "twist")
UNITS = {"angle": "rad", "distance": "m", "offset": "m", "twist": "rad"}


@dataclass(frozen=True)
class AxisLine:
    joint: str
    parent_link: str
    point: np.ndarray  # (3,) m, on the axis, base frame, at the zero configuration
    direction: np.ndarray  # (3,) unit


@dataclass(frozen=True)
class Invariant:
    """One figure of the axis geometry: ``kind`` at ``joint`` (see the module docstring)."""

    joint: str
    kind: str
    value: float  # rad or m

    @property
    def name(self) -> str:
        return f"{self.joint}.{self.kind}"


def axis_lines(urdf: Path, base_link: str, tip_link: str) -> list[AxisLine]:
    """The revolute joints' axes from ``base_link`` to ``tip_link`` at the zero configuration."""
    tree = urdf_io.parse_urdf(urdf)
    base_T_frame = np.eye(4)
    lines = []
    for joint in urdf_io.chain(tree, base_link, tip_link, urdf):
        base_T_frame = base_T_frame @ joint.origin
        if joint.type == "prismatic":
            raise InputError(f"{urdf}: joint {joint.name!r} is prismatic; the axis geometry covers revolute chains.")
        if joint.type in ("revolute", "continuous"):
            direction = base_T_frame[:3, :3] @ joint.axis
            lines.append(AxisLine(joint.name, joint.parent, base_T_frame[:3, 3].copy(), direction / np.linalg.norm(direction)))
    return lines


def _feet(first: AxisLine, second: AxisLine, parallel: bool, previous_foot: np.ndarray,
          previous_normal: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where the common normal of two axes meets each, and its unit direction (from first to second)."""
    if not parallel:
        cross = np.cross(first.direction, second.direction)
        normal = cross / np.linalg.norm(cross)
        # first.point + t1 d1 + a n = second.point + t2 d2
        t1, t2, _ = np.linalg.solve(np.stack([first.direction, -second.direction, normal], axis=1), second.point - first.point)
        return first.point + t1 * first.direction, second.point + t2 * second.direction, normal
    foot_first = first.point + first.direction * np.dot(previous_foot - first.point, first.direction)
    foot_second = second.point + second.direction * np.dot(foot_first - second.point, second.direction)
    gap = foot_second - foot_first
    length = np.linalg.norm(gap)
    if length > 1e-9:
        normal = gap / length
    else:  # coincident axes: keep the previous normal's direction (or any perpendicular one)
        seed = previous_normal if previous_normal is not None else np.array([1.0, 0.0, 0.0])
        normal = seed - first.direction * np.dot(seed, first.direction)
        if np.linalg.norm(normal) < 1e-9:
            normal = np.cross(first.direction, [0.0, 1.0, 0.0])
        normal = normal / np.linalg.norm(normal)
    return foot_first, foot_second, normal


def parallel_pairs(lines: list[AxisLine]) -> list[bool]:
    """For each consecutive pair, whether it counts as parallel (decide on the DESCRIPTION, then apply
    the same rule to every arm)."""
    return [bool(np.linalg.norm(np.cross(a.direction, b.direction)) < PARALLEL_SINE) for a, b in zip(lines, lines[1:])]


def invariants(lines: list[AxisLine], parallel: list[bool] | None = None) -> list[Invariant]:
    """The frame-free figures of a chain's axes (see the module docstring), in chain order."""
    if len(lines) < 2:
        return []
    parallel = parallel_pairs(lines) if parallel is None else parallel
    if len(parallel) != len(lines) - 1:
        raise ValueError("one parallel flag per consecutive pair of axes")
    result: list[Invariant] = []
    feet, normals = [], []
    previous_foot, previous_normal = lines[0].point, None
    for (first, second), is_parallel in zip(zip(lines, lines[1:]), parallel):
        foot_first, foot_second, normal = _feet(first, second, is_parallel, previous_foot, previous_normal)
        angle = float(np.arctan2(np.linalg.norm(np.cross(first.direction, second.direction)),
                                 np.dot(first.direction, second.direction)))
        distance = float(np.dot(foot_second - foot_first, normal)) if not is_parallel else float(
            np.linalg.norm(foot_second - foot_first))
        result += [Invariant(second.joint, "angle", angle), Invariant(second.joint, "distance", distance)]
        feet.append((foot_first, foot_second))
        normals.append(normal)
        previous_foot, previous_normal = foot_second, normal
    for i in range(1, len(lines) - 1):
        axis = lines[i].direction
        offset = float(np.dot(feet[i][0] - feet[i - 1][1], axis))
        before, after = normals[i - 1], normals[i]
        twist = float(np.arctan2(np.dot(np.cross(before, after), axis), np.dot(before, after)))
        result += [Invariant(lines[i].joint, "offset", offset), Invariant(lines[i].joint, "twist", twist)]
    return result


def deviations(calibrated: list[AxisLine], nominal: list[AxisLine]) -> list[Invariant]:
    """Each invariant of ``calibrated`` minus the description's (``nominal``), angles wrapped to
    (-pi, pi]: small numbers that compare between arms of one type."""
    if [line.joint for line in calibrated] != [line.joint for line in nominal]:
        raise InputError(f"the calibrated chain's joints {[l.joint for l in calibrated]} are not the description's "
                         f"{[l.joint for l in nominal]}.")
    rule = parallel_pairs(nominal)
    result = []
    for mine, reference in zip(invariants(calibrated, rule), invariants(nominal, rule)):
        difference = mine.value - reference.value
        if UNITS[mine.kind] == "rad":
            difference = float((difference + np.pi) % (2 * np.pi) - np.pi)
        result.append(Invariant(mine.joint, mine.kind, difference))
    return result
