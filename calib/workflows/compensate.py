"""Compensating an offline program: joint commands that put the tip where wanted despite the arm's errors.

``correct(calibration, wanted, ...)`` solves, per row, for joint readings q whose *calibrated* point
(rigid geometry, joint sag ``q - c * tau(q, payload)``, learned tip shift) lands on the wanted
base-frame position. It starts from the nominal solution (damped least squares IK of the nominal
URDF, or the row's own seed), then alternates: the rigid DLS IK of the calibrated chain for the
sagged joint angles that reach ``wanted - shift(q)``, and the fixed point ``q = q_sagged + c * tau(q)``
(a contraction: ``c * dtau/dq`` is about 1e-4). The residual per row is evaluated with the full model.

Targets file (CSV, header row, metres, base frame)::

    name,x,y,z[,target][,payload_kg][,<joint name> ...]

``target``: a reflector of the calibration, or empty / ``tip`` for the tip frame's origin;
``payload_kg``: that row's payload (else ``--payload``); joint columns (all of the chain's, rad):
the seed of the row's nominal IK (e.g. the program's original joint angles), which picks the
solution of a redundant arm.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from capture.session import parse_number
from rigs.errors import InputError
from rigs.files import read_text
from rigs.kinematics import ArmModel

TIP = "tip"


@dataclass
class TargetRows:
    """Rows of a targets file: ``names`` (N,), ``xyz`` (N, 3) m base frame, ``points`` (N,) reflector or
    "tip", ``payload_kg`` (N,) (NaN: not given), ``seeds`` (N, dof) rad or None."""

    names: list[str]
    xyz: np.ndarray
    points: list[str]
    payload_kg: np.ndarray
    seeds: np.ndarray | None


@dataclass
class Correction:
    """``q`` (N, dof) commands; ``residual_m`` (N,) left under the calibrated model; ``nominal_q`` (N, dof)
    the nominal URDF's solution; ``nominal_error_m`` (N,) where the calibrated model says the nominal
    solution would put the point."""

    q: np.ndarray
    residual_m: np.ndarray
    nominal_q: np.ndarray
    nominal_error_m: np.ndarray


def read_targets(path: Path, joint_names: list[str], targets: list[str]) -> TargetRows:
    """Read and check a targets CSV (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such targets file.")
    text = read_text(path, "CSV file")
    try:
        rows = list(csv.reader(line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")))
    except csv.Error as error:
        raise InputError(f"{path}: not a readable CSV file ({error}).") from None
    if not rows:
        raise InputError(f"{path}: empty; expected a header name,x,y,z[,target][,payload_kg][,joint columns].")
    header = [h.strip() for h in rows[0]]
    missing = [c for c in ("name", "x", "y", "z") if c not in header]
    if missing:
        raise InputError(f"{path}: header lacks column {missing[0]!r} (expected name,x,y,z[,target][,payload_kg][,joints]).")
    known = {"name", "x", "y", "z", "target", "payload_kg", *joint_names}
    unknown = [h for h in header if h not in known]
    if unknown:
        raise InputError(f"{path}: unknown column {unknown[0]!r}; joint columns must be the chain's "
                         f"({', '.join(joint_names)}).")
    seed_columns = [h for h in header if h in joint_names]
    if seed_columns and len(seed_columns) != len(joint_names):
        absent = [j for j in joint_names if j not in seed_columns]
        raise InputError(f"{path}: seed joint column {absent[0]!r} is missing (give all joints or none).")
    if len(rows) < 2:
        raise InputError(f"{path}: no target rows after the header.")
    column = {h: i for i, h in enumerate(header)}
    names, xyz, points, payload, seeds = [], [], [], [], []
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise InputError(f"{path}: row {number} has {len(row)} fields, the header {len(header)}.")
        names.append(row[column["name"]].strip())
        xyz.append([parse_number(row[column[c]], path, number, c) for c in "xyz"])
        point = row[column["target"]].strip() if "target" in column else ""
        point = point or TIP
        if point != TIP and point not in targets:
            raise InputError(f"{path}: row {number}: target {point!r} is not a reflector of the calibration "
                             f"(has {', '.join(targets)}; empty or 'tip' for the tip origin).")
        points.append(point)
        text = row[column["payload_kg"]].strip() if "payload_kg" in column else ""
        kg = parse_number(text, path, number, "payload_kg") if text else float("nan")
        if kg < 0:
            raise InputError(f"{path}: row {number}: payload_kg must not be negative, got {kg}.")
        payload.append(kg)
        if seed_columns:
            seeds.append([parse_number(row[column[j]], path, number, j) for j in joint_names])
    return TargetRows(names, np.array(xyz, float), points, np.array(payload, float),
                      np.array(seeds, float) if seed_columns else None)


def calibrated_points(calibration, q: np.ndarray, payload_kg: np.ndarray, points: list[str]) -> np.ndarray:
    """(N, 3) m base-frame position of each row's point (reflector or tip origin) under the full model."""
    poses = calibration.base_T_tip(q, payload_kg)
    offsets = np.array([np.zeros(3) if p == TIP else calibration.targets[p] for p in points])
    return (np.einsum("nij,nj->ni", poses[:, :3, :3], offsets) + poses[:, :3, 3]
            + calibration.tip_shift(q, payload_kg))


def correct(calibration, rows: TargetRows, nominal: ArmModel, payload_kg: float = 0.0,
            nominal_targets: dict[str, np.ndarray] | None = None, tolerance: float = 1e-7,
            rounds: int = 20) -> Correction:
    """Joint commands (see module docstring). ``nominal``: the nominal URDF's chain (the seed);
    ``nominal_targets``: reflector offsets the nominal solution aims with (default the calibrated ones)."""
    chain = calibration.chain
    payload = np.where(np.isnan(rows.payload_kg), payload_kg, rows.payload_kg)
    offsets = [np.zeros(3) if p == TIP else (nominal_targets or calibration.targets).get(p, calibration.targets[p])
               for p in rows.points]
    calibrated_offsets = [np.zeros(3) if p == TIP else calibration.targets[p] for p in rows.points]
    compliance = calibration.compliance if calibration.compliance is not None else np.zeros(chain.dof)
    nominal_q = np.empty((len(rows.names), chain.dof))
    q_out = np.empty_like(nominal_q)
    for n, wanted in enumerate(rows.xyz):
        seed = rows.seeds[n] if rows.seeds is not None else None
        # The nominal solution (the uncompensated program), from the row's seed when it has one.
        nominal_q[n], _ = nominal.inverse_kinematics(position=wanted, tip_point=offsets[n], q_seed=seed)
        q = nominal_q[n].copy()
        for _ in range(rounds):
            shift = calibration.tip_shift(q[None], payload[n])[0]
            q_sagged, _ = chain.inverse_kinematics(position=wanted - shift, tip_point=calibrated_offsets[n],
                                                   q_seed=q - compliance * calibration.gravity_torques(q[None], payload[n])[0])
            # q - c tau(q) = q_sagged: a few fixed-point steps (c dtau/dq is tiny).
            for _ in range(5):
                q = q_sagged + compliance * calibration.gravity_torques(q[None], payload[n])[0]
            error = np.linalg.norm(calibrated_points(calibration, q[None], np.array([payload[n]]), [rows.points[n]])[0] - wanted)
            if error < tolerance:
                break
        q_out[n] = q
    residual = np.linalg.norm(calibrated_points(calibration, q_out, payload, rows.points) - rows.xyz, axis=1)
    nominal_error = np.linalg.norm(calibrated_points(calibration, nominal_q, payload, rows.points) - rows.xyz, axis=1)
    return Correction(q_out, residual, nominal_q, nominal_error)


def read_joints(path: Path, joint_names: list[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """A joints CSV for ``selfcal predict``: ``name`` (optional), one column per chain joint (rad),
    optional ``payload_kg``. Returns names (N,), q (N, dof), payload (N,) (NaN where not given)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such joints file.")
    text = read_text(path, "CSV file")
    try:
        rows = list(csv.reader(line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")))
    except csv.Error as error:
        raise InputError(f"{path}: not a readable CSV file ({error}).") from None
    if len(rows) < 2:
        raise InputError(f"{path}: needs a header (name,{','.join(joint_names)}[,payload_kg]) and at least one row.")
    header = [h.strip() for h in rows[0]]
    absent = [j for j in joint_names if j not in header]
    if absent:
        raise InputError(f"{path}: joint column {absent[0]!r} is missing (header needs {', '.join(joint_names)}).")
    unknown = [h for h in header if h not in {"name", "pose", "payload_kg", *joint_names}]
    if unknown:
        raise InputError(f"{path}: unknown column {unknown[0]!r} (expected name, the chain's joints, payload_kg).")
    column = {h: i for i, h in enumerate(header)}
    label = "name" if "name" in column else ("pose" if "pose" in column else None)
    names, q, payload = [], [], []
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise InputError(f"{path}: row {number} has {len(row)} fields, the header {len(header)}.")
        names.append(row[column[label]].strip() if label else str(number - 1))
        q.append([parse_number(row[column[j]], path, number, j) for j in joint_names])
        text = row[column["payload_kg"]].strip() if "payload_kg" in column else ""
        kg = parse_number(text, path, number, "payload_kg") if text else float("nan")
        if kg < 0:
            raise InputError(f"{path}: row {number}: payload_kg must not be negative, got {kg}.")
        payload.append(kg)
    return names, np.array(q, float), np.array(payload, float)
