"""calibration.yaml (and the files beside it): written from a calibration, read back into one.

The document: deltas as xyz/rpy of ``exp6(delta)`` with standard deviations (first order: the
twist's), zero offsets, ``tracker_T_base`` per session, reflector offsets, probe mounts, camera
poses with the intrinsics the fit used (or found, with their uncertainty), the board on the tip,
identifiability, residual figures and how the held-out ones were obtained, outliers, deflection,
the input data's hash and the selfcal version. Lengths in m, angles in rad. Beside it: ``uncertainty.npz`` (parameter names and
their covariance; numpy, no pickle), ``residual/`` (a learned residual model, tensors only) and
``cameras/<name>/camera_info.yaml`` (ROS camera_info) for each camera whose intrinsics were fitted.
Every kind of calibration reads back: tracker, probe, camera-only, fused, with deflection.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from calib.deflection.modes import URDF_NOTE
from calib.deflection.residual_model import ResidualModel
from calib.dynamics.model import IdentifiedDynamics
from calib.model.envelope import Envelope
from calib.sensors.board import make_board
from capture.camera_info import CameraInfo
from rigs import urdf as urdf_io
from rigs.documents import as_table, check_format
from rigs.errors import InputError
from rigs.files import atomic_write_text, inside_folder, read_yaml
from rigs.kinematics import ArmModel
from rigs.transforms import exp6, make_transform, matrix_to_rpy, quat_xyzw, quat_xyzw_to_matrix
from rigs.version import VERSION

FORMAT = "selfcal-calibration"
FORMAT_VERSION = 1
UNCERTAINTY_FILE = "uncertainty.npz"
RESIDUAL_FOLDER = "residual"
TORQUE_FOLDER = "torques"
CAMERA_FRAME = "optical (x right, y down, z forward)"
# What a camera entry says about intrinsics the fit found (besides K, width and height).
FITTED_INTRINSICS_KEYS = ("recorded_K", "parameters", "poorly_determined", "notes", "distortion")
BOARD_FRAME = "origin at the chessboard's centre, z out of the printed face"


def _frame(transform: np.ndarray) -> dict:
    return {"xyz": [float(v) for v in transform[:3, 3]], "quat_xyzw": [float(v) for v in quat_xyzw(transform[:3, :3])]}


def _floats(values) -> list[float]:
    return [float(v) for v in np.asarray(values).ravel()]


# -- writing -------------------------------------------------------------------------------------
def deflection_document(calibration) -> dict:
    """The ``deflection`` entry of calibration.yaml."""
    info = calibration.deflection or {}
    document = {"mode": info.get("mode", "none"), "note": URDF_NOTE}
    if calibration.compliance is not None:
        document["compliance"] = {
            "model": "joint angle reached = reading - compliance * gravity torque (URDF inertias + payload at payload_com)",
            "unit": "rad/(N m)",
            "joints": {name: {"compliance": float(c), "compliance_std": float(s),
                              "stiffness_nm_per_rad": (float(1.0 / c) if c > 0 else None)}
                       for name, c, s in zip(calibration.joint_names, calibration.compliance, calibration.compliance_std)}}
    if calibration.payload_com is not None:
        document["payload_com"] = [float(v) for v in calibration.payload_com]
    if calibration.compliance is not None:
        model = calibration.torque_model
        document["torques"] = (
            {"source": "measured", "folder": TORQUE_FOLDER, "sign": model.sign,
             "note": "the torques compliance multiplies: the sessions' effort columns times sign, less the sensor "
                     "offsets; where none are measured, the arm dynamics identified from them (folder)"}
            if model is not None else
            {"source": "model", "note": "the torques compliance multiplies: the URDF's inertials and the payload"})
    if calibration.residual_model is not None:
        document["learned_residual"] = {"folder": RESIDUAL_FOLDER, "bound_m": calibration.residual_model.bound_m,
                                        "members": calibration.residual_model.config.members}
    if info.get("heldout_comparison"):
        document["requested"] = info.get("requested")
        document["heldout_comparison"] = info["heldout_comparison"]
        document["auto_tolerance"] = info.get("auto_tolerance")
        document["evidence"] = info.get("evidence")
    return document


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
        "model": summary.get("model"),
        # What the command concluded, beside what it measured (``selfcal calibrate`` / ``recalibrate``).
        **({"verdict": summary["verdict"]} if summary.get("verdict") else {}),
        "sensors": summary.get("sensors", []),
        "joints": joints,
        "tracker_T_base": _frame(calibration.tracker_T_base[frames[0]]) if frames else None,
        "tracker_T_base_by_session": {name: _frame(t) for name, t in calibration.tracker_T_base.items()},
        "tracker_T_base_std": summary.get("sensor_std", {}),
        "targets": {name: {"xyz": _floats(xyz), "xyz_std": _floats(calibration.target_std.get(name, np.zeros(3)))}
                    for name, xyz in calibration.targets.items()},
        "probes": {name: dict(_frame(t), twist_std=_floats(summary.get("probe_std", {}).get(name, np.zeros(6))))
                   for name, t in calibration.tip_T_probe.items()},
        "identifiability": summary["identifiability"],
        "variance_factor": summary.get("variance_factor"),
        "residuals": summary.get("residuals"),
        "outliers": summary.get("outliers", []),
        "holdout_outliers": summary.get("holdout_outliers", []),
        "input": {"sessions": summary.get("sessions", []), "data_hash": summary.get("data_hash")},
        "solve": {"seconds": summary.get("solve_seconds"), "evaluations": summary.get("evaluations")},
    }
    if calibration.validity is not None:
        document["validity"] = calibration.validity.document()
    if calibration.base_T_camera:
        document["cameras"] = {
            name: {"base_T_camera": _frame(pose), "twist_std": _floats(calibration.camera_std.get(name, np.zeros(6))),
                   "frame": CAMERA_FRAME, **calibration.intrinsics.get(name, {}),
                   **({"camera_info": camera_info_path(name)} if calibration.intrinsics.get(name, {}).get("fitted") else {})}
            for name, pose in calibration.base_T_camera.items()}
    if calibration.board is not None and calibration.tip_T_board is not None:
        board = calibration.board
        document["board"] = {**board.manifest(), "spec": board.describe(),
                             "tip_T_board": _frame(calibration.tip_T_board),
                             "twist_std": _floats(calibration.board_std if calibration.board_std is not None else np.zeros(6)),
                             "frame": BOARD_FRAME, "pixel_sigma": calibration.pixel_sigma}
        document["camera_residuals"] = calibration.camera_summary
    if calibration.deflection is not None or calibration.compliance is not None or calibration.residual_model is not None:
        document["deflection"] = deflection_document(calibration)  # robot.urdf stays rigid
    return document


def camera_info_path(camera: str) -> str:
    """Where a calibration folder holds a camera's fitted intrinsics (the image-folder layout)."""
    return f"cameras/{camera}/camera_info.yaml"


def write_calibration_files(calibration, folder: Path) -> None:
    """calibration.yaml, uncertainty.npz (when the fit's covariance is at hand), residual/, and a
    ROS camera_info YAML per camera whose intrinsics were fitted."""
    folder = Path(folder)
    atomic_write_text(folder / "calibration.yaml",
                      yaml.safe_dump(calibration_document(calibration), sort_keys=False, width=120))
    for name, entry in calibration.intrinsics.items():
        if entry.get("fitted"):
            path = inside_folder(folder, camera_info_path(name), f"camera {name!r}", "camera_info file")
            path.parent.mkdir(parents=True, exist_ok=True)
            CameraInfo(name, int(entry["width"]), int(entry["height"]), np.asarray(entry["K"], float),
                       np.asarray(entry.get("distortion", [0.0] * 5), float)).save(path)
    if calibration.solve is not None and calibration.error_model is not None:
        names = np.array([p.name for p in calibration.error_model.names])
        np.savez(folder / UNCERTAINTY_FILE, names=names, covariance=calibration.solve.covariance)
    if calibration.residual_model is not None:
        calibration.residual_model.save(folder / RESIDUAL_FOLDER)
    if calibration.torque_model is not None and calibration.compliance is not None:
        (folder / TORQUE_FOLDER).mkdir(exist_ok=True)
        calibration.torque_model.save(folder / TORQUE_FOLDER, report=False)


# -- reading -------------------------------------------------------------------------------------
def _read_frame(entry, where: str) -> np.ndarray:
    try:
        transform = make_transform(entry["xyz"])
        transform[:3, :3] = quat_xyzw_to_matrix(entry["quat_xyzw"])
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{where}: expected {{xyz: [x, y, z], quat_xyzw: [x, y, z, w]}}.") from None
    return transform


def _vector(values, count: int, where: str) -> np.ndarray:
    try:
        return np.array(values, float).reshape(count)
    except (TypeError, ValueError):
        raise InputError(f"{where} must be {count} numbers.") from None


def read_calibration_document(folder: Path) -> tuple[Path, object]:
    """(path, parsed YAML) of a calibration folder's calibration.yaml; InputError when missing or unreadable,
    and when it is a selfcal calibration of another format version or units (a file that is no selfcal
    calibration at all comes back as it is: the caller decides whether that is an error)."""
    path = Path(folder) / "calibration.yaml"
    if not path.is_file():
        raise InputError(f"{folder}: not a calibration folder, calibration.yaml is missing.")
    document = read_yaml(path, "calibration file")
    if isinstance(document, dict) and document.get("format") == FORMAT:
        check_format(document, path, FORMAT, FORMAT_VERSION, "selfcal calibration")
    return path, document


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
    frames = []
    first = top.get("tracker_T_base", "table", nullable=True)  # null for a calibration from cameras only
    frames += [first] if first is not None else []
    for key in ("tracker_T_base_by_session", "probes"):
        table = top.get(key, "table", None, nullable=True)
        frames += [table.get(name, "table") for name in (table.data if table is not None else {})]
    cameras = top.get("cameras", "table", None, nullable=True)
    for name in (cameras.data if cameras is not None else {}):
        camera = cameras.get(name, "table")
        frames.append(camera.get("base_T_camera", "table"))
        camera.get("twist_std", "vector", None, length=6)
        camera.get("K", "matrix", None, shape=(3, 3))
    board = top.get("board", "table", None, nullable=True)
    if board is not None:
        frames.append(board.get("tip_T_board", "table"))
        board.get("squares", "vector", length=2)
        board.get("square_m", "number")
        board.get("marker_m", "number")
        board.get("dictionary", "str")
        board.get("twist_std", "vector", None, length=6)
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
    top.get("holdout_outliers", "tables", [])
    # Blocks the reports and verdicts read back: each a mapping (or absent), never text in its place.
    for key in ("identifiability", "residuals", "input", "solve", "verdict", "tracker_T_base_std", "validity"):
        top.get(key, "table", None, nullable=True)
    top.get("model", "str", None, nullable=True)
    top.get("variance_factor", "number", None, nullable=True)
    _check_deflection(top.get("deflection", "table", None, nullable=True))


def _check_deflection(deflection) -> None:
    """The type of every key of the ``deflection`` block that :func:`_read_deflection` reads."""
    if deflection is None:
        return
    deflection.get("mode", "str", None)
    deflection.get("payload_com", "vector", None, length=3)
    compliance = deflection.get("compliance", "table", None)
    if compliance is not None:
        joints = compliance.get("joints", "table")
        for name in joints.data:
            joint = joints.get(name, "table")
            joint.get("compliance", "number")
            joint.get("compliance_std", "number", None)
    torques = deflection.get("torques", "table", None, nullable=True)
    if torques is not None:
        source = torques.get("source", "str")
        if source not in ("measured", "model"):
            raise InputError(f"{torques.where('source')} should be 'measured' or 'model', got {source!r}.")
        torques.get("folder", "str", None)
    residual = deflection.get("learned_residual", "table", None)
    if residual is not None:
        residual.get("folder", "str", None)


def read_calibration(folder: Path) -> dict:
    """The attributes of a :class:`~calib.calibration.Calibration` from a calibration folder."""
    folder = Path(folder)
    path, document = read_calibration_document(folder)
    if isinstance(document, dict) and document.get("model") == "hand-eye":
        raise InputError(f"{path}: a hand-eye calibration (camera and board frames found with the arm held at its "
                         f"flange poses) holds no model of the arm's kinematics, which this command needs; "
                         f"`selfcal validate` takes it with a session of new photos.")
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise InputError(f"{path}: not a {FORMAT} file.")
    for key in ("robot", "joints", "tracker_T_base", "targets"):
        if key not in document:
            raise InputError(f"{path}: key {key!r} is missing.")
    _check_document(document, path)
    robot = document["robot"]
    # The URDF must be the folder's own: a calibration file may not point elsewhere.
    urdf = inside_folder(folder, robot.get("urdf", "robot.urdf"), f"{path}: key 'robot.urdf'", "URDF path")
    urdf_io.check_meshes(urdf)
    chain = ArmModel.from_urdf(urdf, robot["base_link"], robot["tip_link"])
    joints = document["joints"] or {}
    missing = [n for n in chain.joint_names if n not in joints]
    if missing:
        raise InputError(f"{path}: joints.{missing[0]} is missing.")
    try:
        deltas = np.array([joints[n].get("delta_twist", [0.0] * 6) for n in chain.joint_names], float)
        delta_std = np.array([joints[n].get("delta_xyz_std", [0.0] * 3) + joints[n].get("delta_rpy_std", [0.0] * 3)
                              for n in chain.joint_names], float)
        zero_offsets = np.array([joints[n].get("zero_offset", 0.0) for n in chain.joint_names], float)
        zero_std = np.array([joints[n].get("zero_offset_std", 0.0) for n in chain.joint_names], float)
    except (AttributeError, TypeError, ValueError):
        raise InputError(f"{path}: joints: each joint needs numbers delta_twist (6), zero_offset and their std.") from None
    frames = {name: _read_frame(entry, f"{path}: tracker_T_base_by_session.{name}")
              for name, entry in (document.get("tracker_T_base_by_session") or {}).items()}
    if not frames and document["tracker_T_base"] is not None:
        frames = {"s0": _read_frame(document["tracker_T_base"], f"{path}: tracker_T_base")}
    targets, target_std = {}, {}
    for name, entry in (document["targets"] or {}).items():
        if not isinstance(entry, dict):
            raise InputError(f"{path}: targets.{name} must be a mapping with xyz.")
        targets[name] = _vector(entry.get("xyz"), 3, f"{path}: targets.{name}.xyz")
        target_std[name] = _vector(entry.get("xyz_std", [0.0] * 3), 3, f"{path}: targets.{name}.xyz_std")
    summary = {"model": document.get("model"), "base_link": robot["base_link"], "tip_link": robot["tip_link"],
               "sensors": document.get("sensors", []),
               "identifiability": document.get("identifiability"), "residuals": document.get("residuals"),
               "outliers": document.get("outliers", []), "holdout_outliers": document.get("holdout_outliers", []),
               "data_hash": (document.get("input") or {}).get("data_hash"),
               "sessions": (document.get("input") or {}).get("sessions", []),
               "variance_factor": document.get("variance_factor"),
               "solve_seconds": (document.get("solve") or {}).get("seconds"),
               "probe_std": {name: entry.get("twist_std") for name, entry in (document.get("probes") or {}).items()},
               "sensor_std": document.get("tracker_T_base_std") or {}}
    fields = dict(chain=chain, joint_names=chain.joint_names, tracker_T_base=frames, targets=targets, deltas=deltas,
                  delta_std=delta_std, zero_offsets=zero_offsets, zero_std=zero_std, target_std=target_std,
                  summary=summary, source_urdf=None)
    fields["tip_T_probe"] = {name: _read_frame(entry, f"{path}: probes.{name}")
                             for name, entry in (document.get("probes") or {}).items()}
    if document.get("validity") is not None:
        fields["validity"] = Envelope.from_document(document["validity"], chain.joint_names, str(path))
    fields.update(_read_cameras(path, document))
    fields.update(_read_deflection(folder, path, document, chain.joint_names, summary))
    return fields


def _read_cameras(path: Path, document: dict) -> dict:
    cameras = document.get("cameras") or {}
    board_entry = document.get("board")
    if not cameras and not board_entry:
        return {}
    if not cameras or not board_entry:
        raise InputError(f"{path}: cameras and board go together; one of them is missing.")
    base_T_camera, camera_std, intrinsics = {}, {}, {}
    for name, entry in cameras.items():
        where = f"{path}: cameras.{name}"
        if not isinstance(entry, dict):
            raise InputError(f"{where} must be a mapping.")
        base_T_camera[name] = _read_frame(entry.get("base_T_camera"), f"{where}.base_T_camera")
        camera_std[name] = _vector(entry.get("twist_std", [0.0] * 6), 6, f"{where}.twist_std")
        if "K" in entry:
            K = np.array(entry["K"], float) if isinstance(entry["K"], list) else None
            if K is None or K.shape != (3, 3):
                raise InputError(f"{where}.K must be a 3 x 3 matrix.")
            intrinsics[name] = {"K": K.tolist(), "width": entry.get("width"), "height": entry.get("height")}
            fitted = entry.get("fitted", False)
            if not isinstance(fitted, bool):
                raise InputError(f"{where}.fitted must be true or false.")
            intrinsics[name]["fitted"] = fitted
            if fitted and not all(isinstance(entry.get(k), int) and entry[k] > 0 for k in ("width", "height")):
                raise InputError(f"{where}: fitted intrinsics need the image's width and height in pixels.")
            intrinsics[name].update({key: entry[key] for key in FITTED_INTRINSICS_KEYS if fitted and key in entry})
    where = f"{path}: board"
    try:
        board = make_board(tuple(int(v) for v in board_entry["squares"]), float(board_entry["square_m"]),
                           float(board_entry["marker_m"]), str(board_entry["dictionary"]), where,
                           board_entry.get("legacy", False) is True)
    except (KeyError, TypeError, ValueError) as error:
        raise InputError(f"{where} is incomplete ({type(error).__name__}: {error}).") from None
    return {"base_T_camera": base_T_camera, "camera_std": camera_std, "intrinsics": intrinsics, "board": board,
            "tip_T_board": _read_frame(board_entry.get("tip_T_board"), f"{where}.tip_T_board"),
            "board_std": _vector(board_entry.get("twist_std", [0.0] * 6), 6, f"{where}.twist_std"),
            "pixel_sigma": board_entry.get("pixel_sigma")}


def _read_deflection(folder: Path, path: Path, document: dict, joint_names: list[str], summary: dict) -> dict:
    out = {}
    covariance_path = folder / UNCERTAINTY_FILE
    if covariance_path.is_file():
        try:
            with np.load(covariance_path, allow_pickle=False) as data:
                summary["parameter_names"] = [str(n) for n in data["names"]]
                summary["parameter_covariance"] = np.array(data["covariance"], float)
        except (ValueError, KeyError, OSError) as error:
            raise InputError(f"{covariance_path}: not a readable parameter covariance ({error}).") from None
        count = len(summary["parameter_names"])
        if summary["parameter_covariance"].shape != (count, count):
            raise InputError(f"{covariance_path}: the covariance is not {count} x {count}, one row per parameter name.")
    entry = document.get("deflection")
    if entry is None:
        return out
    where = f"{path}: deflection"
    if not isinstance(entry, dict):
        raise InputError(f"{where} must be a mapping.")
    if "payload_com" in entry:
        out["payload_com"] = _vector(entry["payload_com"], 3, f"{where}.payload_com")
    if "compliance" in entry:
        joints = (entry["compliance"] or {}).get("joints") or {}
        missing = [n for n in joint_names if n not in joints]
        if missing:
            raise InputError(f"{where}.compliance.joints.{missing[0]} is missing.")
        try:
            out["compliance"] = np.array([float(joints[n]["compliance"]) for n in joint_names])
            out["compliance_std"] = np.array([float(joints[n].get("compliance_std", 0.0)) for n in joint_names])
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{where}.compliance.joints: each joint needs a number 'compliance'.") from None
    if "learned_residual" in entry:
        out["residual_model"] = ResidualModel.load(folder / RESIDUAL_FOLDER)
    torques = entry.get("torques")
    if isinstance(torques, dict) and torques.get("source") == "measured":
        if "compliance" not in entry:
            raise InputError(f"{where}.torques: measured torques come with compliance, and it is missing.")
        dynamics = IdentifiedDynamics.load(inside_folder(folder, str(torques.get("folder", TORQUE_FOLDER)),
                                                         f"{where}.torques.folder", "folder"))
        if dynamics.joint_names != list(joint_names):
            raise InputError(f"{where}.torques: its dynamics model moves {dynamics.joint_names}, the calibration "
                             f"{list(joint_names)}.")
        out["torque_model"] = dynamics
    elif torques is not None and not (isinstance(torques, dict) and torques.get("source") == "model"):
        raise InputError(f"{where}.torques.source should be 'measured' or 'model'.")
    out["deflection"] = {"mode": entry.get("mode", "none"), "requested": entry.get("requested"),
                         "heldout_comparison": entry.get("heldout_comparison"),
                         "auto_tolerance": entry.get("auto_tolerance"), "evidence": entry.get("evidence")}
    return out
