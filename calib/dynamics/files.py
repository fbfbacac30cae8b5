"""The files of an identified dynamic model and of an identified payload.

A dynamics folder (``selfcal dynamics fit --out DYN``):

- ``dynamics.yaml``: the sign convention, the identifiability summary, the base parameters (the
  QR's independent parameters with the dependent ones folded in) with standard deviations, every
  parameter's value, the per-joint offsets, friction, noise and residuals, the sessions and their hash;
- ``dynamics.npz``: ``names``, ``theta``, ``covariance``, ``free``, ``noise`` (numpy, no pickle):
  what predictions are made from;
- ``robot.urdf``: the description the regressor was built from (kinematics and the URDF's
  inertials; visual and collision geometry left out, so the folder stands alone);
- ``report.html``: a verdict first, then per joint how well the model explains the torques.

A payload folder (``selfcal dynamics payload --out P``): ``payload.yaml`` (mass in kg and centre of
mass in m in the tip frame, standard deviations, per-joint explanation) and ``report.html``.
Lengths in m, masses in kg, torques in N m.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import yaml

from calib.dynamics.report import write_dynamics_report, write_payload_report
from rigs import urdf as urdf_io
from rigs.documents import Table, check_format
from rigs.errors import InputError
from rigs.files import atomic_write_text, inside_folder, load_npz, read_yaml
from rigs.kinematics import ArmModel
from rigs.version import VERSION

FORMAT = "selfcal-dynamics"
PAYLOAD_FORMAT = "selfcal-payload"
FORMAT_VERSION = 1


def _dump(path: Path, document: dict) -> None:
    atomic_write_text(path, yaml.safe_dump(document, sort_keys=False, width=120))


def _read_yaml(path: Path, what: str) -> dict:
    if not path.is_file():
        raise InputError(f"{path.parent}: not a {what} folder, {path.name} is missing.")
    return read_yaml(path, f"{what} file")


def geometry_free(urdf: Path) -> ET.ElementTree:
    """The URDF with every <visual> and <collision> removed (kinematics and inertials only)."""
    tree = urdf_io.parse_urdf(urdf)
    for link in tree.getroot().findall("link"):
        for element in link.findall("visual") + link.findall("collision"):
            link.remove(element)
    return tree


# -- dynamics -------------------------------------------------------------------------------------
def write_dynamics(dynamics, folder: Path, report: bool = True) -> None:
    chain = dynamics.chain
    document = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "selfcal_version": VERSION,
        "units": {"length": "m", "mass": "kg", "torque": "N m", "angle": "rad"},
        "robot": {"urdf": "robot.urdf", "base_link": chain.model.frames[chain.base_frame].name,
                  "tip_link": chain.model.frames[chain.tip_frame].name, "joint_names": list(chain.joint_names)},
        "model": "tau = Y(q, v, a) theta + offset + viscous * v + coulomb * sign(v); theta per body: m, m c, "
                 "inertia about the joint frame (Pinocchio's order)",
        "friction": bool(dynamics.friction),
        "joints": {name: {"offset_nm": float(dynamics.theta[dynamics.names.index(f"offset.{name}")]),
                          "offset_std_nm": float(dynamics.standard_deviations[dynamics.names.index(f"offset.{name}")]),
                          "noise_nm": float(dynamics.noise[j]),
                          **({"viscous_nms_per_rad": float(dynamics.theta[dynamics.names.index(f"viscous.{name}")]),
                              "coulomb_nm": float(dynamics.theta[dynamics.names.index(f"coulomb.{name}")])}
                             if dynamics.friction else {}),
                          **dynamics.summary.get("per_joint", {}).get(name, {})}
                   for j, name in enumerate(chain.joint_names)},
        **{key: value for key, value in dynamics.summary.items() if key != "per_joint"},
    }
    folder = Path(folder)
    _dump(folder / "dynamics.yaml", document)
    np.savez(folder / "dynamics.npz", names=np.array(dynamics.names), theta=dynamics.theta,
             covariance=dynamics.covariance, free=dynamics.free, noise=dynamics.noise)
    urdf_io.write_urdf(geometry_free(dynamics.source_urdf), folder / "robot.urdf")
    if report:
        write_dynamics_report(dynamics, folder / "report.html")


def read_dynamics(folder: Path) -> dict:
    """The attributes of :class:`calib.dynamics.model.IdentifiedDynamics` from a dynamics folder."""
    folder = Path(folder)
    path = folder / "dynamics.yaml"
    document = _read_yaml(path, "dynamics")
    top = check_format(document, path, FORMAT, FORMAT_VERSION, "selfcal dynamics file")
    robot = top.get("robot", "table")
    base, tip = robot.get("base_link", "str"), robot.get("tip_link", "str")
    names = robot.get("joint_names", "names")
    sign = top.get("sign", "table").get("used", "int")
    if sign not in (1, -1):
        raise InputError(f"{path}: key 'sign.used' should be 1 or -1, got {sign}.")
    friction = document.get("friction")
    if not isinstance(friction, bool):
        raise InputError(f"{path}: key 'friction' should be true or false, got {friction!r}.")
    urdf = inside_folder(folder, robot.get("urdf", "str", "robot.urdf"), f"{path}: key 'robot.urdf'", "URDF path")
    chain = ArmModel.from_urdf(urdf, base, tip)
    if chain.joint_names != names:
        raise InputError(f"{path}: key 'robot.joint_names' lists {names}, but {urdf.name} from {base!r} to {tip!r} "
                         f"moves {chain.joint_names}.")
    arrays = load_npz(folder / "dynamics.npz", ["names", "theta", "covariance", "free", "noise"])
    count = len(arrays["names"])
    shapes = {"theta": (count,), "covariance": (count, count), "free": (count,), "noise": (len(names),)}
    for key, shape in shapes.items():
        if arrays[key].shape != shape or (key != "free" and not np.all(np.isfinite(arrays[key]))):
            raise InputError(f"{folder / 'dynamics.npz'}: array {key!r} should be {' x '.join(map(str, shape))} "
                             f"finite numbers, one per parameter name.")
    expected = 10 * (chain.model.njoints - 1) + len(names) * (3 if friction else 1)
    if count != expected:
        raise InputError(f"{folder / 'dynamics.npz'}: holds {count} parameters, {urdf.name} with "
                         f"{'friction' if friction else 'no friction'} needs {expected}.")
    summary = {key: value for key, value in document.items() if key not in ("format", "format_version", "robot")}
    summary["per_joint"] = {name: entry for name, entry in (document.get("joints") or {}).items()
                            if isinstance(entry, dict)}
    return dict(chain=chain, names=[str(n) for n in arrays["names"]], theta=np.asarray(arrays["theta"], float),
                covariance=np.asarray(arrays["covariance"], float), free=np.asarray(arrays["free"], bool),
                friction=friction, noise=np.asarray(arrays["noise"], float), sign=int(sign), summary=summary,
                source_urdf=urdf)


# -- payload --------------------------------------------------------------------------------------
def write_payload(payload, folder: Path, report: bool = True) -> None:
    folder = Path(folder)
    _dump(folder / "payload.yaml", {"format": PAYLOAD_FORMAT, "format_version": FORMAT_VERSION,
                                    "selfcal_version": VERSION, "units": {"length": "m", "mass": "kg", "torque": "N m"},
                                    **payload.document()})
    if report:
        write_payload_report(payload, folder / "report.html")


def payload_document(path: Path) -> tuple[Path, dict, Table]:
    """(the payload.yaml, its document, its checked top table) of a payload file or folder."""
    path = Path(path)
    if path.is_dir():
        path = path / "payload.yaml"
    document = _read_yaml(path, "payload")
    return path, document, check_format(document, path, PAYLOAD_FORMAT, FORMAT_VERSION, "selfcal payload file")


def read_payload(path: Path) -> dict:
    """``mass_kg``, ``com`` (3,) m tip frame (None when no payload was seen), their standard
    deviations and the rest of a payload.yaml (a file, or a payload folder holding one)."""
    path, document, top = payload_document(path)
    mass = top.get("mass_kg", "number")
    if mass < 0:
        raise InputError(f"{top.where('mass_kg')} should not be negative, got {mass}.")
    com = top.get("com", "vector", None, length=3, nullable=True)
    if mass > 0 and com is None:
        raise InputError(f"{top.where('com')} is missing for a payload of {mass:g} kg.")
    return dict(document, mass_kg=mass, com=com, path=path)
