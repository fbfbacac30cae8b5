"""Discovery plans: one joint at a time from a home pose through a range the user allows, then random poses.

An arm nobody described is learnt from what moves when one joint moves: every pair of
consecutive sweep frames differs in one joint only, by a small step, so what moved between them
is everything the joint carries, and the motion is a screw about the joint's axis. The random
poses after the sweeps are ordinary training poses for the self-model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from capture.poses import Plan, random_poses
from rigs.errors import InputError, setting


@dataclass(frozen=True)
class SweepRange:
    """How far one joint may move: its name and range (rad, or m for a sliding joint)."""

    name: str
    lower: float
    upper: float


def parse_joint_ranges(texts: list[str]) -> list[SweepRange]:
    """``NAME=LOWER:UPPER`` texts (base to tip; radians, or metres for a sliding joint) -> ranges."""
    ranges = []
    for text in texts:
        name, sep, span = text.partition("=")
        low_text, sep2, high_text = span.partition(":")
        name = name.strip()
        if not sep or not sep2 or not name or "," in name:
            raise InputError(f"{setting('joint_ranges')} {text!r}: write NAME=LOWER:UPPER (radians, or metres for a "
                             f"sliding joint), e.g. joint1=-0.5:0.5.")
        try:
            lower, upper = float(low_text), float(high_text)
        except ValueError:
            raise InputError(f"{setting('joint_ranges')} {text!r}: LOWER and UPPER must be numbers.") from None
        if not (np.isfinite(lower) and np.isfinite(upper) and lower < upper):
            raise InputError(f"{setting('joint_ranges')} {text!r}: LOWER must be a finite number below UPPER.")
        if any(r.name == name for r in ranges):
            raise InputError(f"{setting('joint_ranges')} {name!r} is given twice.")
        ranges.append(SweepRange(name, lower, upper))
    if not ranges:
        raise InputError(f"give the arm's joints as {setting('joint_ranges')} NAME=LOWER:UPPER, base to tip, or a "
                         f"{setting('rig')}.")
    return ranges


def home_pose(lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Zero where zero lies inside the range, the range's middle elsewhere."""
    lower, upper = np.asarray(lower, float), np.asarray(upper, float)
    return np.where((lower <= 0.0) & (0.0 <= upper), 0.0, 0.5 * (lower + upper))


def sweep_plan(names: list[str], lower: np.ndarray, upper: np.ndarray, steps: int, random_count: int, seed: int,
               is_free: Callable[[np.ndarray], bool] | None = None,
               is_valid: Callable[[np.ndarray], bool] | None = None,
               joint_lower: np.ndarray | None = None, joint_upper: np.ndarray | None = None) -> Plan:
    """A discovery plan.

    ``lower``/``upper`` (dof,) are the ranges each joint may sweep (rad or m); the home pose is
    :func:`home_pose` of them. Joint j sweeps from its lower to its upper end in ``steps`` frames
    with every other joint at home; where ``is_free(q)`` says a frame collides, the sweep keeps only
    the collision-free stretch around home. ``random_count`` random poses follow, uniform within
    ``joint_lower``/``joint_upper`` (default: the sweep ranges) and accepted by ``is_valid``.
    Extra column ``phase``: ``sweep:<joint>`` or ``random``.
    """
    lower, upper = np.asarray(lower, float), np.asarray(upper, float)
    if steps < 3:
        raise InputError(f"{setting('steps')} must be at least 3, got {steps}.")
    if random_count < 0:
        raise InputError(f"{setting('random_count')} must not be negative, got {random_count}.")
    home = home_pose(lower, upper)
    if is_free is not None and not is_free(home):
        raise InputError(f"the home pose ({', '.join(f'{n}={v:.3f}' for n, v in zip(names, home))}) is in collision; "
                         f"narrow the sweep ranges.")
    ids, q, phase = [], [], []
    for j, name in enumerate(names):
        values = np.linspace(lower[j], upper[j], steps)
        frames = []
        for value in values:
            pose = home.copy()
            pose[j] = value
            frames.append(pose)
        if is_free is not None:
            free = [is_free(pose) for pose in frames]
            centre = int(np.argmin(np.abs(values - home[j])))
            start = centre
            while start > 0 and free[start - 1]:
                start -= 1
            stop = centre
            while stop < len(frames) - 1 and free[stop + 1]:
                stop += 1
            if not free[centre]:
                start, stop = centre, centre - 1
            frames = frames[start:stop + 1]
        if len(frames) < 3:
            raise InputError(f"joint {name!r}: fewer than 3 collision-free sweep frames around home; widen its range "
                             f"or move the home pose.")
        for pose in frames:
            ids.append(f"s{len(ids):04d}")
            q.append(pose)
            phase.append(f"sweep:{name}")
    if random_count:
        low = lower if joint_lower is None else np.asarray(joint_lower, float)
        high = upper if joint_upper is None else np.asarray(joint_upper, float)
        stream = random_poses(low, high, seed, is_valid or (lambda pose: True))
        for k in range(random_count):
            ids.append(f"r{k:04d}")
            q.append(next(stream))
            phase.append("random")
    return Plan(ids, np.array(q), {"phase": phase})


def rig_sweep_ranges(types: list[str], lower: np.ndarray, upper: np.ndarray, sweep_rad: float, sweep_m: float,
                     margin: float = 0.02) -> tuple[np.ndarray, np.ndarray]:
    """Sweep ranges for a described arm: home (:func:`home_pose` of the limits) plus or minus
    ``sweep_rad`` (rotating joints) or ``sweep_m`` (sliding ones), inside the limits shrunk by
    ``margin`` of their span."""
    lower, upper = np.asarray(lower, float), np.asarray(upper, float)
    span = upper - lower
    low, high = lower + margin * span, upper - margin * span
    home = home_pose(low, high)
    reach = np.array([sweep_m if kind == "prismatic" else sweep_rad for kind in types])
    return np.maximum(home - reach, low), np.minimum(home + reach, high)
