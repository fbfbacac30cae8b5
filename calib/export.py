"""A calibration as files other tools open: the corrected URDF and a flat YAML of the changes.

``robot.urdf``: the input URDF with each chain joint's ``<origin>`` replaced by
``origin @ exp6(delta) @ exp6(S * zero_offset)`` (the zero offset folded in as a rotation about the
joint axis, a shift along it for a prismatic joint); everything else is kept; meshes are copied
next to it. ``calibration.yaml``: deltas as xyz/rpy of ``exp6(delta)`` with standard deviations
(first order: the twist's), zero offsets, ``tracker_T_base``, reflector offsets, identifiability,
residual statistics, outliers, the input data's hash and the selfcal version.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from rigs import urdf as urdf_io
from rigs.documents import as_table
from rigs.errors import InputError
from rigs.files import atomic_write_text, inside_folder, read_text
from rigs.kinematics import ChainModel
from rigs.transforms import exp6, make_transform, matrix_to_rpy, quat_xyzw, quat_xyzw_to_matrix
from rigs.version import VERSION

FORMAT = "selfcal-calibration"
FORMAT_VERSION = 1


def joint_origin(origin: np.ndarray, delta: np.ndarray, zero: float, subspace: np.ndarray) -> np.ndarray:
    """Calibrated URDF origin (4, 4) of a joint from its nominal origin, delta (6,) and zero offset."""
    return origin @ exp6(delta) @ exp6(subspace * zero)


def write_urdf(calibration, folder: Path) -> Path:
    """robot.urdf (+ meshes/) in ``folder``; returns its path."""
    if calibration.source_urdf is None:
        raise InputError("this calibration was loaded from files; its robot.urdf is already written.")
    source = Path(calibration.source_urdf)
    tree = urdf_io.parse_urdf(source)
    joints = urdf_io.joints(tree, source)
    model = calibration.error_model
    for i, name in enumerate(calibration.joint_names):
        origin = joint_origin(joints[name].origin, calibration.deltas[i], calibration.zero_offsets[i],
                              model._motion_subspace[i])
        urdf_io.set_joint_origin(tree, name, origin)
    return urdf_io.copy_self_contained(tree, source.parent, Path(folder))


def _frame(transform: np.ndarray) -> dict:
    return {"xyz": [float(v) for v in transform[:3, 3]], "quat_xyzw": [float(v) for v in quat_xyzw(transform[:3, :3])]}


def _floats(values) -> list[float]:
    return [float(v) for v in np.asarray(values).ravel()]


def calibration_document(calibration) -> dict:
    summary = calibration.summary
    joints = {}
    for i, name in enumerate(calibration.joint_names):
        transform = exp6(calibration.deltas[i])
        joints[name] = {
            "delta_xyz": _floats(transform[:3, 3]), "delta_rpy": _floats(matrix_to_rpy(transform[:3, :3])),
            "delta_xyz_std": _floats(calibration.delta_std[i, :3]), "delta_rpy_std": _floats(calibration.delta_std[i, 3:]),
            "delta_twist": _floats(calibration.deltas[i]),
            "zero_offset": float(calibration.zero_offsets[i]), "zero_offset_std": float(calibration.zero_std[i]),
        }
    frames = list(calibration.tracker_T_base)
    document = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "selfcal_version": VERSION,
        "units": {"length": "m", "angle": "rad"},
        "convention": "parent_T_joint = urdf_origin @ exp6(delta_twist) @ Rot(axis, zero_offset); robot.urdf has it written in",
        "robot": {"urdf": "robot.urdf", "base_link": summary["base_link"], "tip_link": summary["tip_link"]},
        "model": summary["model"],
        "joints": joints,
        "tracker_T_base": _frame(calibration.tracker_T_base[frames[0]]),
        "tracker_T_base_by_session": {name: _frame(t) for name, t in calibration.tracker_T_base.items()},
        "tracker_T_base_std": summary.get("sensor_std", {}),
        "targets": {name: {"xyz": _floats(xyz), "xyz_std": _floats(calibration.target_std.get(name, np.zeros(3)))}
                    for name, xyz in calibration.targets.items()},
        # 6-DoF probes (issue 9): the probe frame in the tip frame, std of its twist (m, rad).
        "probes": {name: dict(_frame(t), twist_std=_floats(summary.get("probe_std", {}).get(name, np.zeros(6))))
                   for name, t in getattr(calibration, "tip_T_probe", {}).items()},
        "identifiability": summary["identifiability"],
        "variance_factor": summary.get("variance_factor"),
        "residuals": summary.get("residuals"),
        "outliers": summary.get("outliers", []),
        "holdout_outliers": summary.get("holdout_outliers", []),
        "input": {"sessions": summary.get("sessions", []), "data_hash": summary.get("data_hash")},
        "solve": {"seconds": summary.get("solve_seconds"), "evaluations": summary.get("evaluations")},
    }
    if calibration.deflection is not None or calibration.compliance is not None or calibration.residual_model is not None:
        from calib.deflection import deflection_document

        document["deflection"] = deflection_document(calibration)  # issue 4; robot.urdf stays rigid
    return document


def write_calibration_yaml(calibration, path: Path) -> None:
    atomic_write_text(Path(path), yaml.safe_dump(calibration_document(calibration), sort_keys=False, width=120))


def _read_frame(entry, where: str) -> np.ndarray:
    try:
        transform = make_transform(entry["xyz"])
        transform[:3, :3] = quat_xyzw_to_matrix(entry["quat_xyzw"])
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{where}: expected {{xyz: [x, y, z], quat_xyzw: [x, y, z, w]}}.") from None
    return transform


def read_calibration_document(folder: Path) -> tuple[Path, object]:
    """(path, parsed YAML) of a calibration folder's calibration.yaml; InputError when missing or unreadable."""
    path = Path(folder) / "calibration.yaml"
    if not path.is_file():
        raise InputError(f"{folder}: not a calibration folder, calibration.yaml is missing.")
    try:
        return path, yaml.safe_load(read_text(path, "calibration file"))
    except yaml.YAMLError as error:
        raise InputError(f"{path}: not valid YAML ({str(error).splitlines()[0]}).") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to be a calibration file.") from None


def _check_document(document, path: Path) -> None:
    """The type of every key :func:`read_calibration` reads, each wrong one named."""
    top = as_table(document, path, f"{FORMAT} file")
    robot = top.get("robot", "table")
    for key in ("base_link", "tip_link"):
        robot.get(key, "str")
    robot.get("urdf", "str", "robot.urdf")
    joints = top.get("joints", "table")
    for name in joints.data:
        joint = joints.get(name, "table")
        for key, length in (("delta_twist", 6), ("delta_xyz_std", 3), ("delta_rpy_std", 3)):
            joint.get(key, "vector", None, length=length)
        for key in ("zero_offset", "zero_offset_std"):
            joint.get(key, "number", None)
    frames = [top.get("tracker_T_base", "table")]
    by_session = top.get("tracker_T_base_by_session", "table", None, nullable=True)
    frames += [by_session.get(name, "table") for name in (by_session.data if by_session is not None else {})]
    probes = top.get("probes", "table", None, nullable=True)
    frames += [probes.get(name, "table") for name in (probes.data if probes is not None else {})]
    for frame in frames:
        frame.get("xyz", "vector", length=3)
        quaternion = frame.get("quat_xyzw", "vector", length=4)
        if np.linalg.norm(quaternion) < 1e-9:
            raise InputError(f"{frame.where('quat_xyzw')} has zero length.")
    targets = top.get("targets", "table")
    for name in targets.data:
        target = targets.get(name, "table")
        target.get("xyz", "vector", length=3)
        target.get("xyz_std", "vector", None, length=3)
    top.get("outliers", "tables", [])


def read_calibration(folder: Path):
    """A :class:`Calibration` from a calibration folder (robot.urdf + calibration.yaml)."""
    from calib.calibrator import Calibration

    path, document = read_calibration_document(folder)
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise InputError(f"{path}: not a {FORMAT} file.")
    for key in ("robot", "joints", "tracker_T_base", "targets"):
        if key not in document:
            raise InputError(f"{path}: key {key!r} is missing.")
    _check_document(document, path)
    robot = document["robot"]
    # The URDF must be the folder's own: a calibration file may not point elsewhere.
    urdf = inside_folder(Path(folder), robot.get("urdf", "robot.urdf"), f"{path}: key 'robot.urdf'", "URDF path")
    urdf_io.check_meshes(urdf)
    chain = ChainModel.from_urdf(urdf, robot["base_link"], robot["tip_link"])
    joints = document["joints"]
    missing = [n for n in chain.joint_names if n not in joints]
    if missing:
        raise InputError(f"{path}: joints.{missing[0]} is missing.")
    deltas = np.array([joints[n].get("delta_twist", [0.0] * 6) for n in chain.joint_names], float)
    delta_std = np.array([joints[n].get("delta_xyz_std", [0.0] * 3) + joints[n].get("delta_rpy_std", [0.0] * 3)
                          for n in chain.joint_names], float)
    frames = {name: _read_frame(entry, f"{path}: tracker_T_base_by_session.{name}")
              for name, entry in (document.get("tracker_T_base_by_session") or {}).items()}
    if not frames:
        frames = {"s0": _read_frame(document["tracker_T_base"], f"{path}: tracker_T_base")}
    targets, target_std = {}, {}
    for name, entry in document["targets"].items():
        try:
            targets[name] = np.array(entry["xyz"], float).reshape(3)
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{path}: targets.{name}.xyz must be three numbers.") from None
        target_std[name] = np.array(entry.get("xyz_std", [0.0] * 3), float)
    summary = {"model": document.get("model"), "base_link": robot["base_link"], "tip_link": robot["tip_link"],
               "identifiability": document.get("identifiability"), "residuals": document.get("residuals"),
               "outliers": document.get("outliers", []), "holdout_outliers": document.get("holdout_outliers", []),
               "data_hash": (document.get("input") or {}).get("data_hash"),
               "sessions": (document.get("input") or {}).get("sessions", [])}
    calibration = Calibration(chain=chain, joint_names=chain.joint_names, tracker_T_base=frames, targets=targets,
                              deltas=deltas, delta_std=delta_std,
                              zero_offsets=np.array([joints[n].get("zero_offset", 0.0) for n in chain.joint_names], float),
                              zero_std=np.array([joints[n].get("zero_offset_std", 0.0) for n in chain.joint_names], float),
                              target_std=target_std, summary=summary, source_urdf=None)
    from calib.deflection import read_deflection

    read_deflection(calibration, folder, document)  # issue 4: compliance, learned residual, covariance
    calibration.tip_T_probe = {name: _read_frame(entry, f"{path}: probes.{name}")  # issue 9
                               for name, entry in (document.get("probes") or {}).items()}
    return calibration
