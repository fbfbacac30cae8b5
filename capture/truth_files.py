"""Reading a simulated session's ``truth/`` folder, for evaluation only (metrics, benchmarks, tests).

The truth is part of the session (its format version is session.json's), and it is read like every
other file of it: through :func:`rigs.files.read_json` and :func:`rigs.files.read_csv_rows`,
with typed keys and numbers, so a truth file cut off mid-row or saved in another encoding ends in
one sentence naming the file and row or key, never a traceback. No fit reads this module.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from capture.session import parse_number
from rigs.documents import Table, as_table
from rigs.errors import InputError
from rigs.files import read_csv_rows, read_json

PARAMETERS = "parameters.json"
REACHED = "joints_reached.csv"


def truth_folder(session_path: Path) -> Path:
    return Path(session_path) / "truth"


def truth_parameters(session_path: Path, required: bool = True) -> Table | None:
    """``truth/parameters.json`` as a :class:`~rigs.documents.Table` (typed ``get`` naming file and key).

    Missing: InputError when ``required``, else None.
    """
    path = truth_folder(session_path) / PARAMETERS
    if not path.is_file():
        if not required:
            return None
        raise InputError(f"{session_path}: not a simulated session (truth/{PARAMETERS} is missing).")
    return as_table(read_json(path, "truth parameters file"), path, "truth parameters file")


def reached_joints(session_path: Path, joint_names: list[str], required: bool = True) -> dict[str, np.ndarray] | None:
    """pose id -> the joint angles (dof,) rad (m for prismatic joints) the simulated arm really reached,
    from ``truth/joints_reached.csv``. Missing: InputError when ``required``, else None."""
    path = truth_folder(session_path) / REACHED
    if not path.is_file():
        if not required:
            return None
        raise InputError(f"{session_path}: not a simulated session (truth/{REACHED} is missing).")
    header, rows = read_csv_rows(path)
    missing = [name for name in ["pose", *joint_names] if name not in header]
    if missing:
        raise InputError(f"{path}: column {missing[0]!r} is missing.")
    columns = [header.index(name) for name in joint_names]
    reached = {}
    for number, row in enumerate(rows, start=2):
        if len(row) != len(header):
            raise InputError(f"{path}: row {number} has {len(row)} cells, the header {len(header)} (a row cut off?).")
        pose = row[header.index("pose")].strip()
        if pose in reached:
            raise InputError(f"{path}: row {number}: pose {pose!r} appears twice.")
        reached[pose] = np.array([parse_number(row[c], path, number, name) for c, name in zip(columns, joint_names)])
    return reached
