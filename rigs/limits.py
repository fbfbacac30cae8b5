"""What the arm can physically do: joint limits with a stated tolerance, and how far it reaches.

Data that no real arm could produce (tracker points in millimetres in a file that says metres,
joint angles in degrees, a plan beyond the limits, a target a kilometre away) is refused where it
enters (a session loaded, a file imported, a plan or targets file read), in one sentence that names
the file, the row and the likely unit mistake, so no fit is ever run on it.

Tolerances:

- joints: a revolute joint may exceed its URDF limits by ``JOINT_LIMIT_MARGIN_RAD`` (1 degree), a
  prismatic one by ``JOINT_LIMIT_MARGIN_M`` (2 mm): encoder noise, limits rounded in the URDF; a
  continuous joint may turn ``CONTINUOUS_TURNS`` turns either way;
- lengths: the reach is the sum of the chain's joint offsets (plus prismatic travel), an upper
  bound on the tip's distance from the base origin at any joint angles; reflectors, probes and
  targets may lie ``REACH_SLACK_M`` (1 m) beyond it, and two measured points of one arm can be at
  most twice that apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rigs import urdf as urdf_io
from rigs.errors import InputError, setting

JOINT_LIMIT_MARGIN_RAD = float(np.deg2rad(1.0))
JOINT_LIMIT_MARGIN_M = 0.002
CONTINUOUS_TURNS = 2
REACH_SLACK_M = 1.0

_ANGLE_UNITS = {"rad": 1.0, "deg": np.pi / 180.0}


@dataclass(frozen=True)
class ArmJoints:
    """The movable joints from base to tip: names, URDF types, limits (rad or m); ``reach`` in m."""

    names: list[str]
    types: list[str]
    lower: np.ndarray
    upper: np.ndarray
    reach: float = float("inf")

    @classmethod
    def from_urdf(cls, urdf: Path, base_link: str, tip_link: str) -> "ArmJoints":
        urdf = Path(urdf)
        return cls.from_tree(urdf_io.parse_urdf(urdf), base_link, tip_link, urdf)

    @classmethod
    def from_tree(cls, tree, base_link: str, tip_link: str, path: Path | str) -> "ArmJoints":
        joints = urdf_io.chain(tree, base_link, tip_link, path)
        chain = urdf_io.movable(joints)
        if not chain:
            raise InputError(f"{path}: no movable joint between {base_link!r} and {tip_link!r}.")
        reach = sum(float(np.linalg.norm(j.origin[:3, 3])) for j in joints)
        reach += sum(max(abs(j.lower), abs(j.upper)) for j in chain if j.type == "prismatic")
        return cls([j.name for j in chain], [j.type for j in chain], np.array([j.lower for j in chain]),
                   np.array([j.upper for j in chain]), reach)


def _at(lines: list, i: int) -> str:
    """``line 12`` for a file row, or the caller's own words (``message 3`` of a bag)."""
    return lines[i] if isinstance(lines[i], str) else f"line {lines[i]}"


def check_joint_values(q: np.ndarray, raw: np.ndarray, joint_names: list[str], joint_types: list[str],
                       lower: np.ndarray, upper: np.ndarray, lines: list, path, angle_unit: str,
                       unit_setting: str | None = "angle_unit") -> None:
    """Joint values (N, dof) in rad/m, converted from ``raw`` in the file's units: within the URDF limits.

    A value far outside its joint's limits names the row; when the values would fit in the other
    angle unit, the sentence says so (and names ``unit_setting``, the setting for the unit; None for a
    file whose unit is fixed, like a session's joints.csv). A whole file of tiny "degrees" is
    radians read as degrees.
    """
    q = np.asarray(q, dtype=float).reshape(-1, len(joint_names))
    raw = np.asarray(raw, dtype=float).reshape(q.shape)
    for j, (name, kind) in enumerate(zip(joint_names, joint_types)):
        if kind == "continuous":
            # No limits; a few turns is plausible, thousands of "radians" is degrees read as radians.
            low, high = -CONTINUOUS_TURNS * 2 * np.pi, CONTINUOUS_TURNS * 2 * np.pi
        else:
            margin = JOINT_LIMIT_MARGIN_M if kind == "prismatic" else JOINT_LIMIT_MARGIN_RAD
            low, high = lower[j] - margin, upper[j] + margin
        bad = np.flatnonzero((q[:, j] < low) | (q[:, j] > high))
        if not len(bad):
            continue
        i = int(bad[0])
        if kind == "prismatic":
            raise InputError(f"{path}: {_at(lines, i)}, column {name!r}: {raw[i, j]:g} is {q[i, j]:g} m, outside the "
                             f"joint's limits [{lower[j]:g}, {upper[j]:g}] m by more than {JOINT_LIMIT_MARGIN_M * 1000:g} mm"
                             + (f"; check {setting('length_unit')}." if unit_setting else "; the file holds metres."))
        hint = ""
        other = "rad" if angle_unit == "deg" else "deg"
        # Radians read as degrees fit once converted; degrees read as radians are also beyond a full turn.
        if low <= raw[i, j] * _ANGLE_UNITS[other] <= high and (other == "rad" or abs(raw[i, j]) > 2 * np.pi):
            words = "radians" if other == "rad" else "degrees"
            hint = (f"; the values look like {words}, pass {setting(unit_setting)} {other}" if unit_setting else
                    f"; the values look like {words}, but this file holds {'radians' if angle_unit == 'rad' else 'degrees'}")
        limits = (f"[{np.rad2deg(lower[j]):.1f}, {np.rad2deg(upper[j]):.1f}] deg by more than 1 deg"
                  if kind != "continuous" else f"+-{CONTINUOUS_TURNS} turns of a continuous joint")
        raise InputError(f"{path}: {_at(lines, i)}, column {name!r}: {raw[i, j]:g} {angle_unit} is outside the joint's "
                         f"limits {limits}{hint}.")
    revolute = [j for j, kind in enumerate(joint_types) if kind != "prismatic"]
    if angle_unit == "deg" and revolute and len(q) >= 10:
        largest = float(np.abs(raw[:, revolute]).max())
        if largest <= 2 * np.pi:
            raise InputError(f"{path}: every joint angle of {len(q)} poses lies within +-{largest:.2f} degrees; the values "
                             f"look like radians" + (f", pass {setting(unit_setting)} rad." if unit_setting else "."))


def _unit_hint(ratio: float) -> str:
    """Which unit the values are probably in, given how many times too large they are."""
    if ratio > 100:
        return "the values look like millimetres"
    return "the values look like millimetres or centimetres"


def check_spread(xyz: np.ndarray, reach: float, offsets: float, path, lines: list, what: str = "points") -> None:
    """Measured positions (M, 3) m of one arm, in any fixed frame: no two farther apart (per axis)
    than the arm can carry them, ``2 * (reach + offsets) + REACH_SLACK_M``.

    ``offsets``: the largest reflector / probe offset from the tip known, m. ``lines``: the file's
    row of each position, for the message.
    """
    xyz = np.asarray(xyz, dtype=float).reshape(-1, 3)
    if len(xyz) < 2 or not np.isfinite(reach):
        return
    bound = 2 * (reach + offsets) + REACH_SLACK_M
    spread = float(np.ptp(xyz, axis=0).max())
    if spread <= bound:
        return
    far = int(np.argmax(np.abs(xyz - np.median(xyz, axis=0)).max(axis=1)))
    raise InputError(f"{path}: {_at(lines, far)}: the {what} spread over {spread:.4g} m, but an arm of "
                     f"{reach:.2f} m reach carries them over at most {bound:.2f} m (twice its reach and the "
                     f"offsets, plus {REACH_SLACK_M:g} m); {_unit_hint(spread / max(bound / 2, 1e-9))}, "
                     f"but the file holds metres.")


def check_reachable(xyz: np.ndarray, reach: float, offsets: float, path, lines: list, what: str = "target") -> None:
    """Positions (M, 3) m in the base frame: no farther from the base origin than ``reach + offsets
    + REACH_SLACK_M`` (a target out of reach by orders of magnitude is a unit mistake)."""
    xyz = np.asarray(xyz, dtype=float).reshape(-1, 3)
    if not len(xyz) or not np.isfinite(reach):
        return
    bound = reach + offsets + REACH_SLACK_M
    distance = np.linalg.norm(xyz, axis=1)
    far = int(np.argmax(distance))
    if distance[far] <= bound:
        return
    raise InputError(f"{path}: {_at(lines, far)}: the {what} is {distance[far]:.4g} m from the base, but the arm "
                     f"reaches {reach:.2f} m (the bound is {bound:.2f} m with offsets and {REACH_SLACK_M:g} m to "
                     f"spare); {_unit_hint(distance[far] / bound)}, but the file holds metres.")


def check_offset(xyz, reach: float, where: str, what: str = "offset") -> None:
    """A reflector offset or payload centre (3,) m in the tip frame: no longer than the arm's reach
    plus ``REACH_SLACK_M``."""
    length = float(np.linalg.norm(np.asarray(xyz, dtype=float)))
    bound = reach + REACH_SLACK_M if np.isfinite(reach) else float("inf")
    if length > bound:
        raise InputError(f"{where}: the {what} is {length:.4g} m long, more than the arm's reach ({reach:.2f} m) plus "
                         f"{REACH_SLACK_M:g} m; {_unit_hint(length / bound)}, but the file holds metres.")
