"""Where the arm goes during a recording: random valid poses, or a plan file the user gives."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from rigs.errors import InputError
from rigs.limits import ArmJoints, check_joint_values


@dataclass
class Plan:
    """Poses to visit: ids, joint angles (N, dof) in rad, and extra columns kept as text."""

    pose_ids: list[str]
    q: np.ndarray
    extra: dict[str, list[str]]


def random_poses(lower: np.ndarray, upper: np.ndarray, seed: int, is_valid: Callable[[np.ndarray], bool],
                 margin: float = 0.05, max_tries: int = 200_000) -> Iterator[np.ndarray]:
    """Endless deterministic stream of valid poses, uniform within the limits shrunk by ``margin``.

    The stream depends only on the seed and ``is_valid``, so a resumed recording replays it and
    skips the poses it already has.
    """
    rng = np.random.default_rng([seed, 0x5E1F])
    lower, upper = np.asarray(lower, float), np.asarray(upper, float)
    span = upper - lower
    low, high = lower + margin * span, upper - margin * span
    tries = 0
    while True:
        q = rng.uniform(low, high)
        tries += 1
        if is_valid(q):
            tries = 0
            yield q
        elif tries >= max_tries:
            raise InputError(f"no valid pose found in {max_tries} random tries; the rig's sensors may not see the arm.")


def read_plan(path: Path, limits: ArmJoints) -> Plan:
    """A plan CSV: ``pose`` plus one column per joint (radians), any order; extra columns kept.

    Every pose must lie within the joints' URDF limits (:mod:`rigs.limits` states the tolerance).
    """
    from capture.session import parse_number
    from rigs.files import read_csv_rows

    joint_names = limits.names
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: plan file not found.")
    header, rows = read_csv_rows(path)
    for name in ["pose", *joint_names]:
        if name not in header:
            raise InputError(f"{path}: column {name!r} is missing (the plan needs pose and every joint: {', '.join(joint_names)}).")
    columns = {name: i for i, name in enumerate(header)}
    extra_names = [h for h in header if h not in ("pose", *joint_names)]
    ids, q, extra = [], [], {name: [] for name in extra_names}
    for number, row in enumerate(rows, start=2):
        if len(row) != len(header):
            raise InputError(f"{path}: row {number} has {len(row)} cells, the header has {len(header)}.")
        ids.append(row[columns["pose"]].strip())
        q.append([parse_number(row[columns[name]], path, number, name) for name in joint_names])
        for name in extra_names:
            extra[name].append(row[columns[name]])
    if len(set(ids)) != len(ids):
        raise InputError(f"{path}: pose ids repeat.")
    if not ids:
        raise InputError(f"{path}: the plan has no poses.")
    if any(not pose or "," in pose for pose in ids):
        raise InputError(f"{path}: row {2 + next(i for i, p in enumerate(ids) if not p or ',' in p)}: a pose id must be "
                         f"non-empty text without commas.")
    q = np.array(q, dtype=float)
    check_joint_values(q, q, joint_names, limits.types, limits.lower, limits.upper,
                       [f"row {n}" for n in range(2, len(ids) + 2)], path, "rad", unit_setting=None)
    return Plan(ids, q, extra)
