"""A table of bad input, one kind a row, for every command; shared by the test suite and
scripts/bench_reliability.py.

Each case makes what a user might hand a command (a session in millimetres, a URDF that declares
entities in UTF-16, a weights file carrying a pickled payload, an --out whose parent is a file)
inside its own folder, runs the command in-process, and is judged as a user would judge it:

- clean: exit status 2, one line on stderr starting with ``error:``, no traceback, nothing new or
  missing in the case's folder, no file of the "secret" folder (outside every input's folder) read;
- traceback, accepted (exit 0), half-written (something left behind or removed), outside read,
  unclear (another exit status, or not one line).

The fixtures are tiny (a 12-pose tracker session, a 4-pose camera session of a 2-joint arm, a
3-step self-model), built once, so the whole table runs in well under a minute.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

DATA = Path(__file__).parent / "data"
IMPORT = DATA / "import"
BOX_RIG = DATA / "selfmodel" / "two_joint_box.toml"
IIWA_JOINTS = [f"lbr_iiwa_joint_{i}" for i in range(1, 8)]


@dataclass
class Fixtures:
    root: Path
    session: Path  # iiwa-tracker, 12 poses
    calibration: Path  # calibrated from it
    box: Path  # two-joint box seen by 3 depth cameras, 4 poses
    audit: Path  # an ISO 9283 audit recording of the iiwa (2 cycles)
    model: Path  # a structured self-model of the box, 3 steps
    secret: Path  # a folder no input may name: its files must never be read
    bag: Path  # a ROS 2 bag of arm3's joint states (rad), one message per pose
    plan: Path  # a valid iiwa plan (rad)
    joints: Path  # a valid predict joints CSV (rad)
    targets: Path  # a valid correct targets CSV (m)
    camera_bag: Path | None = None  # a ROS 2 bag of the box arm's joint states and 3 cameras' images
    camera_folder: Path | None = None  # the box session as an image folder (joints in degrees, depth in mm)
    hand_eye_bag: Path | None = None  # a bag of board photos (camera at 4 Hz) with /tf (50 Hz): 3 stands, eye-to-hand


def build_fixtures(root: Path) -> Fixtures:
    """The tiny inputs every case edits a copy of (about ten seconds)."""
    from typer.testing import CliRunner

    from capture.simulate import capture_simulated
    from rigs import load_rig
    from selfcal.cli import app

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    session = capture_simulated(load_rig("iiwa-tracker"), 12, 1, root / "iiwa")
    box = capture_simulated(load_rig(BOX_RIG), 4, 1, root / "box")
    runner = CliRunner()
    for argv in (["calibrate", str(session), "--out", str(root / "cal"), "--holdout", "0", "--deflection", "none"],
                 ["selfmodel", "train", str(box), "--out", str(root / "model"), "--steps", "3", "--threads", "1"],
                 ["audit", "plan", "--rig", "iiwa-tracker", "--cycles", "2", "--cube", "0.3", "--out", str(root / "audit.csv")],
                 ["capture", "--rig", "iiwa-tracker", "--plan", str(root / "audit.csv"), "--out", str(root / "audit")]):
        result = runner.invoke(app, argv)
        assert result.exit_code == 0, (argv, result.output, result.exception)
    secret = root / "secret"
    secret.mkdir()
    (secret / "passwd.obj").write_text("# a file outside every input's folder\nv 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
    (secret / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    bag = root / "bag"
    joints_deg = _rows(IMPORT / "joints_deg.csv")
    names = ["shoulder_pan", "shoulder_lift", "elbow"]
    header = joints_deg[0]
    q = np.radians([[float(row[header.index(n)]) for n in names] for row in joints_deg[1:]])
    write_joint_state_bag(bag, names, q)
    plan = root / "plan.csv"
    from capture.session import load_session

    loaded = load_session(session)
    plan.write_text("pose," + ",".join(IIWA_JOINTS) + "\n"
                    + "".join(f"p{i:04d}," + ",".join(repr(float(v)) for v in loaded.q[i]) + "\n" for i in range(3)))
    joints = root / "joints.csv"
    joints.write_text("name," + ",".join(IIWA_JOINTS) + "\n"
                      + "".join(f"q{i}," + ",".join(repr(float(v)) for v in loaded.q[i]) + "\n" for i in range(3)))
    targets = root / "targets.csv"
    targets.write_text("name,x,y,z\nt0,0.4,0.1,0.5\nt1,0.3,-0.2,0.6\n")
    from capture.simulate_bag import BagPlan, record_bag

    camera_bag = root / "camera-bag"
    record_bag(load_rig(BOX_RIG), load_session(box).q[:2], 1, camera_bag, BagPlan(hold_s=0.3, move_s=0.2))
    camera_folder = root / "images"
    write_image_folder(load_session(box), camera_folder)
    from calib.sensors.board import parse_board
    from capture.simulate_hand_eye_bag import HandEyeBagPlan, record_hand_eye_bag

    hand_eye_bag = root / "hand-eye-bag"
    record_hand_eye_bag(hand_eye_bag, parse_board(HAND_EYE_BOARD), "eye-to-hand", 3, 1, HandEyeBagPlan(size=(320, 240)))
    return Fixtures(root, session, root / "cal", box, root / "audit", root / "model", secret, bag, plan, joints, targets,
                    camera_bag, camera_folder, hand_eye_bag)


def write_image_folder(session, folder: Path) -> None:
    """``selfcal import images``' layout of a session: joints in degrees, depth PNGs in mm, colour PNGs."""
    import cv2

    folder.mkdir()
    (folder / "joints.csv").write_text("pose," + ",".join(session.joint_names) + "\n" + "".join(
        pose + "," + ",".join(repr(float(np.degrees(v))) for v in session.q[row]) + "\n"
        for row, pose in enumerate(session.pose_ids)))
    for name in session.cameras:
        target = folder / "cameras" / name
        target.mkdir(parents=True)
        shutil.copyfile(session.path / "cameras" / name / "camera_info.yaml", target / "camera_info.yaml")
        for pose in session.pose_ids:
            depth = session.image(name, pose, "depth")
            cv2.imwrite(str(target / f"{pose}_depth.png"), np.round(depth * 1000).astype(np.uint16))
            cv2.imwrite(str(target / f"{pose}_rgb.png"), session.image(name, pose, "rgb")[..., ::-1])


def write_joint_state_bag(path: Path, names: list[str], q: np.ndarray) -> None:
    """A ROS 2 bag (sqlite3) of sensor_msgs/msg/JointState, one message a second, written with rosbags."""
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    JointState, Header, Time = (store.types[t] for t in ("sensor_msgs/msg/JointState", "std_msgs/msg/Header",
                                                        "builtin_interfaces/msg/Time"))
    with Writer(path, version=8) as writer:
        connection = writer.add_connection("/joint_states", JointState.__msgtype__, typestore=store)
        for k, row in enumerate(q):
            message = JointState(Header(Time(1_700_000_000 + 10 * k, 0), "base"), names, np.asarray(row, float),
                                 np.zeros(len(names)), np.zeros(0))
            writer.write(connection, (1_700_000_000 + 10 * k) * 10**9, store.serialize_cdr(message, JointState.__msgtype__))


# -- editing helpers ------------------------------------------------------------------------------

def _rows(path: Path) -> list[list[str]]:
    import csv

    return [row for row in csv.reader(path.read_text().splitlines()) if row and not row[0].startswith(("#", "//"))]


def copy(source: Path, case: Path, name: str | None = None) -> Path:
    target = case / (name or source.name)
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True)
    else:
        shutil.copyfile(source, target)
    return target


def edit_json(path: Path, change: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def edit_text(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, count))


def edit_cell(path: Path, row: int, column: str, value: str) -> None:
    """Set one cell of a CSV (``row`` counts data rows from 0)."""
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[row + 1].split(",")
    cells[header.index(column)] = value
    lines[row + 1] = ",".join(cells)
    path.write_text("\n".join(lines) + "\n")


def scale_columns(path: Path, columns: list[str], factor: float) -> None:
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    index = [header.index(c) for c in columns]
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.split(",")
        for i in index:
            cells[i] = repr(float(cells[i]) * factor)
        out.append(",".join(cells))
    path.write_text("\n".join(out) + "\n")


def truncate_last_row(path: Path) -> None:
    lines = path.read_text().splitlines()
    lines[-1] = ",".join(lines[-1].split(",")[:3])
    path.write_text("\n".join(lines) + "\n")


def latin1_byte(path: Path) -> None:
    """A byte that is not UTF-8 (a Windows tool's degree sign) in the file's second line."""
    data = path.read_bytes()
    first = data.index(b"\n") + 1
    path.write_bytes(data[:first] + b"# 12\xb0 C\n" + data[first:])


def latin1_json(path: Path) -> None:
    path.write_bytes(path.read_bytes().replace(b'"format"', b'"\xe9format"', 1))


UTF16_ENTITY = '<?xml version="1.0" encoding="UTF-16"?>\n<!DOCTYPE robot [<!ENTITY name "expanded">]>\n'
LAUGHS = ('<?xml version="1.0"?>\n<!DOCTYPE robot [<!ENTITY a "aaaaaaaaaa">' + "".join(
    f'<!ENTITY {chr(98 + i)} "' + f"&{chr(97 + i)};" * 10 + '">' for i in range(8)) + "]>\n")
EXTERNAL = '<?xml version="1.0"?>\n<!DOCTYPE robot [<!ENTITY x SYSTEM "file://{secret}/passwd">]>\n'


def _body(urdf: Path) -> str:
    text = urdf.read_text()
    return text[text.index("<robot"):]


def hostile_urdf(urdf: Path, kind: str, secret: Path) -> None:
    """Rewrite ``urdf`` so that it declares entities: ``utf16`` (internal, UTF-16), ``laughs``, ``external``."""
    body = _body(urdf)
    if kind == "utf16":
        body = body.replace("<robot name=\"", "<robot name=\"&name;", 1)
        urdf.write_bytes((UTF16_ENTITY + body).encode("utf-16"))
    elif kind == "laughs":
        urdf.write_text(LAUGHS + body.replace("<robot name=\"", "<robot name=\"&i;", 1))
    else:
        urdf.write_text(EXTERNAL.format(secret=secret) + body.replace("<robot name=\"", "<robot name=\"&x;", 1))


def first_mesh(urdf: Path) -> str:
    text = urdf.read_text()
    start = text.index('filename="') + len('filename="')
    return text[start:text.index('"', start)]


def point_meshes_at(urdf: Path, filename: str) -> None:
    text = urdf.read_text()
    import re

    urdf.write_text(re.sub(r'filename="[^"]*"', f'filename="{filename}"', text))


def torch_with_payload(path: Path, marker: Path) -> None:
    """A .pt file whose pickle would run ``os.system`` on load without weights_only."""
    import pickle

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    import torch

    buffer = io.BytesIO()
    torch.save({"weights": torch.zeros(2)}, buffer)
    # Swap the pickle inside torch's zip for the payload's.
    source = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
    with zipfile.ZipFile(path, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename.endswith("data.pkl"):
                data = pickle.dumps(Payload(), protocol=2)
            target.writestr(item, data)


def object_npz(path: Path) -> None:
    np.savez(path, points_link=np.array([object(), 1], dtype=object), link_index=np.zeros(2, int),
             config=np.zeros(2, int), q=np.zeros((1, 2)))


def read_only_out(case: Path) -> Path:
    """An --out whose parent folder cannot be written, even by root (sysfs refuses everyone)."""
    if os.geteuid() == 0:
        return Path("/sys/selfcal-bad-input-out")
    parent = case / "locked"
    parent.mkdir()
    parent.chmod(0o555)
    return parent / "out"


def file_parent_out(case: Path) -> Path:
    (case / "a-file").write_text("not a folder\n")
    return case / "a-file" / "out"


# -- the table -------------------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    make: Callable[[Fixtures, Path], list[str]]  # (fixtures, empty case folder) -> argv
    # (fixtures, case folder) -> a context manager held while the command runs: what someone else
    # does meanwhile (a folder that appears at --out)
    during: Callable[[Fixtures, Path], object] | None = None

    @property
    def command(self) -> str:
        return self.name.split(":")[0]


CASES: list[Case] = []


def case(name: str, during: Callable[[Fixtures, Path], object] | None = None):
    def register(make):
        CASES.append(Case(name, make, during))
        return make
    return register


def _s(path) -> str:
    return str(path)


# capture -----------------------------------------------------------------------------------------

def _rig(case: Path, change: Callable[[str], str] | None = None, urdf_change: Callable[[Path], None] | None = None) -> Path:
    """A copy of the two-joint box rig (and its URDF) in ``case``, edited."""
    rig = case / "rig.toml"
    text = BOX_RIG.read_text()
    shutil.copyfile(BOX_RIG.with_suffix(".urdf"), case / "two_joint_box.urdf")
    if urdf_change is not None:
        urdf_change(case / "two_joint_box.urdf")
    rig.write_text(change(text) if change else text)
    return rig


@case("capture: --poses 0")
def _(fx, case):
    return ["capture", "--rig", "iiwa-tracker", "--poses", "0", "--out", _s(case / "out")]


@case("capture: negative payload")
def _(fx, case):
    return ["capture", "--rig", "iiwa-tracker", "--payload", "-2", "--out", _s(case / "out")]


@case("capture: unknown rig name")
def _(fx, case):
    return ["capture", "--rig", "iiwa-trackr", "--out", _s(case / "out")]


@case("capture: rig file not TOML")
def _(fx, case):
    return ["capture", "--rig", _s(_rig(case, lambda t: t + "\n[[cameras]\n")), "--out", _s(case / "out")]


@case("capture: rig file not UTF-8")
def _(fx, case):
    rig = _rig(case)
    latin1_byte(rig)
    return ["capture", "--rig", _s(rig), "--out", _s(case / "out")]


@case("capture: rig camera fov is text")
def _(fx, case):
    return ["capture", "--rig", _s(_rig(case, lambda t: t.replace("fov_deg = 60.0", 'fov_deg = "wide"', 1))),
            "--out", _s(case / "out")]


@case("capture: rig URDF missing")
def _(fx, case):
    return ["capture", "--rig", _s(_rig(case, lambda t: t.replace("two_joint_box.urdf", "missing.urdf"))),
            "--out", _s(case / "out")]


@case("capture: rig URDF declares entities in UTF-16")
def _(fx, case):
    return ["capture", "--rig", _s(_rig(case, urdf_change=lambda u: hostile_urdf(u, "utf16", fx.secret))),
            "--out", _s(case / "out")]


@case("capture: rig URDF names a mesh outside its folder")
def _(fx, case):
    def change(urdf: Path):
        edit_text(urdf, "<box size=", f'<mesh filename="{fx.secret}/passwd.obj"/><box size=')
    return ["capture", "--rig", _s(_rig(case, urdf_change=change)), "--out", _s(case / "out")]


@case("capture: plan file missing")
def _(fx, case):
    return ["capture", "--rig", "iiwa-tracker", "--plan", _s(case / "nope.csv"), "--out", _s(case / "out")]


@case("capture: plan lacks a joint column")
def _(fx, case):
    plan = copy(fx.plan, case)
    edit_text(plan, "lbr_iiwa_joint_7", "joint_7")
    return ["capture", "--rig", "iiwa-tracker", "--plan", _s(plan), "--out", _s(case / "out")]


@case("capture: plan in degrees")
def _(fx, case):
    plan = copy(fx.plan, case)
    scale_columns(plan, IIWA_JOINTS, 180 / np.pi)
    return ["capture", "--rig", "iiwa-tracker", "--plan", _s(plan), "--out", _s(case / "out")]


@case("capture: plan joint beyond its limit")
def _(fx, case):
    plan = copy(fx.plan, case)
    edit_cell(plan, 1, "lbr_iiwa_joint_2", "2.6")
    return ["capture", "--rig", "iiwa-tracker", "--plan", _s(plan), "--out", _s(case / "out")]


@case("capture: plan cell not a number")
def _(fx, case):
    plan = copy(fx.plan, case)
    edit_cell(plan, 0, "lbr_iiwa_joint_3", "zero.5")
    return ["capture", "--rig", "iiwa-tracker", "--plan", _s(plan), "--out", _s(case / "out")]


@case("capture: plan truncated row")
def _(fx, case):
    plan = copy(fx.plan, case)
    truncate_last_row(plan)
    return ["capture", "--rig", "iiwa-tracker", "--plan", _s(plan), "--out", _s(case / "out")]


@case("capture: plan not UTF-8")
def _(fx, case):
    plan = copy(fx.plan, case)
    latin1_byte(plan)
    return ["capture", "--rig", "iiwa-tracker", "--plan", _s(plan), "--out", _s(case / "out")]


@case("capture: plan with a header only")
def _(fx, case):
    plan = case / "plan.csv"
    plan.write_text(fx.plan.read_text().splitlines()[0] + "\n")
    return ["capture", "--rig", "iiwa-tracker", "--plan", _s(plan), "--out", _s(case / "out")]


@case("capture: --out exists")
def _(fx, case):
    (case / "out").mkdir()
    (case / "out" / "keep.txt").write_text("mine\n")
    return ["capture", "--rig", "iiwa-tracker", "--out", _s(case / "out")]


@case("capture: --out parent is a file")
def _(fx, case):
    return ["capture", "--rig", "iiwa-tracker", "--poses", "2", "--out", _s(file_parent_out(case))]


@case("capture: --out parent read-only")
def _(fx, case):
    return ["capture", "--rig", "iiwa-tracker", "--poses", "2", "--out", _s(read_only_out(case))]


@case("capture: --resume with nothing to resume")
def _(fx, case):
    return ["capture", "--rig", "iiwa-tracker", "--resume", "--out", _s(case / "out")]


@case("capture: interrupted capture there, no --resume")
def _(fx, case):
    copy(fx.session, case, "out.partial")
    return ["capture", "--rig", "iiwa-tracker", "--seed", "1", "--poses", "12", "--out", _s(case / "out")]


@case("capture: --resume with another seed")
def _(fx, case):
    copy(fx.session, case, "out.partial")
    return ["capture", "--rig", "iiwa-tracker", "--seed", "2", "--poses", "12", "--resume", "--out", _s(case / "out")]


@case("capture: --poses not a number")
def _(fx, case):
    return ["capture", "--rig", "iiwa-tracker", "--poses", "ten", "--out", _s(case / "out")]


# import tracker ----------------------------------------------------------------------------------

def _arm3(case: Path, change: Callable[[Path], None] | None = None) -> tuple[Path, Path]:
    """A copy of the import tests' arm (URDF folder and mesh package) in ``case``."""
    robot = copy(IMPORT / "robot", case, "robot")
    packages = copy(IMPORT / "packages", case, "packages")
    if change is not None:
        change(robot / "arm3.urdf")
    return robot / "arm3.urdf", packages


def _import(fx, case, *extra: str, urdf: Path | None = None, packages: Path | None = None,
            joints: Path | None = None, points: Path | None = None, robot: list[str] | None = None) -> list[str]:
    urdf_path = urdf or IMPORT / "robot" / "arm3.urdf"
    packages = packages or IMPORT / "packages"
    robot = robot if robot is not None else ["--urdf", _s(urdf_path), "--base-link", "base_link", "--tip-link", "tool0",
                                             "--package-dir", _s(packages)]
    argv = ["import", "tracker", *robot, "--joints", _s(joints or IMPORT / "joints_deg.csv"), "--out", _s(case / "out")]
    if points is not False:
        argv += ["--points", _s(points or IMPORT / "sa_export.txt")]
    return argv + list(extra)


@case("import tracker: joints file missing")
def _(fx, case):
    return _import(fx, case, joints=case / "joints.csv")


@case("import tracker: joints file is binary")
def _(fx, case):
    joints = case / "joints.csv"
    joints.write_bytes(b"\x00\x01\x02" * 200)
    return _import(fx, case, joints=joints)


@case("import tracker: joints truncated row")
def _(fx, case):
    joints = copy(IMPORT / "joints_deg.csv", case)
    truncate_last_row(joints)
    return _import(fx, case, joints=joints)


@case("import tracker: joints in radians read as degrees")
def _(fx, case):
    joints = copy(IMPORT / "joints_deg.csv", case)
    return _import(fx, case, "--angle-unit", "rad", joints=joints)


@case("import tracker: a joint far outside its limits")
def _(fx, case):
    joints = copy(IMPORT / "joints_deg.csv", case)
    text = joints.read_text().replace("-56.9773295", "-356.9773295", 1)
    joints.write_text(text)
    return _import(fx, case, joints=joints)


@case("import tracker: points in mm read as metres")
def _(fx, case):
    return _import(fx, case, "--length-unit", "m")


@case("import tracker: points file is a zip archive")
def _(fx, case):
    points = case / "points.txt"
    with zipfile.ZipFile(points, "w") as archive:
        archive.writestr("points.txt", (IMPORT / "sa_export.txt").read_text())
    return _import(fx, case, points=points)


@case("import tracker: mesh by absolute path outside")
def _(fx, case):
    urdf, packages = _arm3(case, lambda u: point_meshes_at(u, f"{fx.secret}/passwd.obj"))
    return _import(fx, case, urdf=urdf, packages=packages)


@case("import tracker: mesh /etc/passwd")
def _(fx, case):
    urdf, packages = _arm3(case, lambda u: point_meshes_at(u, "/etc/passwd"))
    return _import(fx, case, urdf=urdf, packages=packages)


@case("import tracker: mesh by ../ outside")
def _(fx, case):
    relative = os.path.relpath(fx.secret / "passwd.obj", case / "robot")
    urdf, packages = _arm3(case, lambda u: point_meshes_at(u, relative))
    return _import(fx, case, urdf=urdf, packages=packages)


@case("import tracker: mesh by file:// outside")
def _(fx, case):
    urdf, packages = _arm3(case, lambda u: point_meshes_at(u, f"file://{fx.secret}/passwd.obj"))
    return _import(fx, case, urdf=urdf, packages=packages)


@case("import tracker: mesh symlink leaving the package")
def _(fx, case):
    urdf, packages = _arm3(case)
    mesh = packages / "arm3_description" / "meshes" / "link.obj"
    mesh.unlink()
    mesh.symlink_to(fx.secret / "passwd.obj")
    return _import(fx, case, urdf=urdf, packages=packages)


@case("import tracker: package:// with ../ leaving the package")
def _(fx, case):
    relative = os.path.relpath(fx.secret / "passwd.obj", case / "packages" / "arm3_description")
    urdf, packages = _arm3(case, lambda u: point_meshes_at(u, f"package://arm3_description/{relative}"))
    return _import(fx, case, urdf=urdf, packages=packages)


@case("import tracker: URDF declares entities in UTF-16")
def _(fx, case):
    urdf, packages = _arm3(case, lambda u: hostile_urdf(u, "utf16", fx.secret))
    return _import(fx, case, urdf=urdf, packages=packages)


@case("import tracker: URDF billion laughs")
def _(fx, case):
    urdf, packages = _arm3(case, lambda u: hostile_urdf(u, "laughs", fx.secret))
    return _import(fx, case, urdf=urdf, packages=packages)


@case("import tracker: URDF external entity")
def _(fx, case):
    urdf, packages = _arm3(case, lambda u: hostile_urdf(u, "external", fx.secret))
    return _import(fx, case, urdf=urdf, packages=packages)


@case("import tracker: URDF not XML")
def _(fx, case):
    urdf, packages = _arm3(case, lambda u: u.write_text("robot: arm3\n"))
    return _import(fx, case, urdf=urdf, packages=packages)


@case("import tracker: URDF joint origin not numbers")
def _(fx, case):
    urdf, packages = _arm3(case, lambda u: edit_text(u, 'origin xyz="0 0 0.4"', 'origin xyz="0 0 fourty"'))
    return _import(fx, case, urdf=urdf, packages=packages)


@case("import tracker: URDF inertial origin not numbers")
def _(fx, case):
    urdf, packages = _arm3(case, lambda u: edit_text(u, '<origin xyz="0 0 0.15"/>', '<origin xyz="0 0 fifteen"/>'))
    return _import(fx, case, urdf=urdf, packages=packages)


@case("import tracker: URDF joint limit not a number")
def _(fx, case):
    urdf, packages = _arm3(case, lambda u: edit_text(u, 'lower="-2.0"', 'lower="minus two"'))
    return _import(fx, case, urdf=urdf, packages=packages)


@case("import tracker: base link not in the URDF")
def _(fx, case):
    return _import(fx, case, robot=["--urdf", _s(IMPORT / "robot" / "arm3.urdf"), "--base-link", "world",
                                    "--tip-link", "tool0", "--package-dir", _s(IMPORT / "packages")])


@case("import tracker: --match bogus")
def _(fx, case):
    return _import(fx, case, "--match", "closest")


@case("import tracker: --length-unit bogus")
def _(fx, case):
    return _import(fx, case, "--length-unit", "furlong")


@case("import tracker: --target malformed")
def _(fx, case):
    return _import(fx, case, "--target", "smr1=0,0")


@case("import tracker: --package-dir not a folder")
def _(fx, case):
    return _import(fx, case, packages=case / "nowhere")


@case("import tracker: nothing to import")
def _(fx, case):
    return _import(fx, case, points=False)


@case("import tracker: --out parent is a file")
def _(fx, case):
    argv = _import(fx, case)
    argv[argv.index("--out") + 1] = _s(file_parent_out(case))
    return argv


@case("import tracker: 6-DoF pose with a zero quaternion")
def _(fx, case):
    poses = copy(IMPORT / "poses_quat.csv", case)
    lines = poses.read_text().splitlines()
    cells = lines[2].split(",")
    cells[4:8] = ["0", "0", "0", "0"]
    lines[2] = ",".join(cells)
    poses.write_text("\n".join(lines) + "\n")
    return _import(fx, case, "--poses", _s(poses), points=False)


# import rosbag -----------------------------------------------------------------------------------

def _rosbag(fx, case, *extra: str, bag: Path | None = None, urdf: Path | None = None, packages: Path | None = None):
    return ["import", "rosbag", _s(bag or fx.bag), "--urdf", _s(urdf or IMPORT / "robot" / "arm3.urdf"),
            "--base-link", "base_link", "--tip-link", "tool0", "--package-dir", _s(packages or IMPORT / "packages"),
            "--points", _s(IMPORT / "sa_export.txt"), "--match", "name", "--out", _s(case / "out"), *extra]


@case("import rosbag: bag missing")
def _(fx, case):
    return _rosbag(fx, case, bag=case / "nobag")


@case("import rosbag: folder that is not a bag")
def _(fx, case):
    (case / "bag").mkdir()
    (case / "bag" / "notes.txt").write_text("hello\n")
    return _rosbag(fx, case, bag=case / "bag")


@case("import rosbag: metadata.yaml garbage")
def _(fx, case):
    bag = copy(fx.bag, case)
    (bag / "metadata.yaml").write_text("rosbag2_bagfile_information: [1, 2\n")
    return _rosbag(fx, case, bag=bag)


@case("import rosbag: metadata.yaml not UTF-8")
def _(fx, case):
    bag = copy(fx.bag, case)
    (bag / "metadata.yaml").write_bytes(b"\xff\xfe\x00garbage\n")
    return _rosbag(fx, case, bag=bag)


@case("import rosbag: topic not in the bag")
def _(fx, case):
    return _rosbag(fx, case, "--topic", "/arm/joint_states")


@case("import rosbag: joint states in degrees")
def _(fx, case):
    rows = _rows(IMPORT / "joints_deg.csv")
    names = ["shoulder_pan", "shoulder_lift", "elbow"]
    q = np.array([[float(row[rows[0].index(n)]) for n in names] for row in rows[1:]])
    write_joint_state_bag(case / "bag", names, q)
    return _rosbag(fx, case, bag=case / "bag")


@case("import rosbag: mesh outside the package folders")
def _(fx, case):
    urdf, packages = _arm3(case, lambda u: point_meshes_at(u, f"{fx.secret}/passwd.obj"))
    return _rosbag(fx, case, urdf=urdf, packages=packages)


@case("import rosbag: --still 0")
def _(fx, case):
    return _rosbag(fx, case, "--still", "0")


# import rosbag with camera images ------------------------------------------------------------------

BOX_URDF_ARGS = ("--base-link", "base", "--tip-link", "box")


def _camera_bag(fx, case, *extra: str, bag: Path | None = None) -> list[str]:
    return ["import", "rosbag", _s(bag or fx.camera_bag), "--urdf", _s(fx.box / "robot.urdf"), *BOX_URDF_ARGS,
            "--out", _s(case / "out"), *extra]


def _rewrite_bag(fx, case, change, source: Path | None = None) -> Path:
    """A copy of the camera bag (or ``source``) with ``change(topic, message)`` applied to every
    message; a message it turns into None is left out."""
    from rosbags.highlevel import AnyReader
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import Stores, get_typestore

    store = get_typestore(Stores.ROS2_HUMBLE)
    target = case / "bag"
    with AnyReader([source or fx.camera_bag]) as reader, Writer(target, version=8) as writer:
        connections = {}
        for connection, stamp, raw in reader.messages():
            message = change(connection.topic, reader.deserialize(raw, connection.msgtype))
            if message is None:
                continue
            if connection.topic not in connections:
                connections[connection.topic] = writer.add_connection(connection.topic, connection.msgtype,
                                                                      typestore=store)
            writer.write(connections[connection.topic], stamp, store.serialize_cdr(message, connection.msgtype))
    return target


@case("import rosbag: depth read in the wrong unit")
def _(fx, case):
    return _camera_bag(fx, case, "--depth-scale", "0.0001")


@case("import rosbag: camera_info of another size")
def _(fx, case):
    def change(topic, message):
        if topic == "/front/aligned_depth_to_color/camera_info":
            message.width = 320
        return message
    return _camera_bag(fx, case, bag=_rewrite_bag(fx, case, change))


@case("import rosbag: image frame_id that /tf_static does not know")
def _(fx, case):
    def change(topic, message):
        if topic.startswith("/left/") and hasattr(message, "header"):
            message.header.frame_id = "left_optical"
        return message
    return _camera_bag(fx, case, bag=_rewrite_bag(fx, case, change))


@case("import rosbag: --camera with a topic the bag lacks")
def _(fx, case):
    return _camera_bag(fx, case, "--camera", "front=/front/depth/image_rect_raw")


@case("import rosbag: --still-window 0")
def _(fx, case):
    return _camera_bag(fx, case, "--still-window", "0")


# import rosbag of hand-eye photos, the flange pose from /tf --------------------------------------

HAND_EYE_BOARD = "charuco:7:5:0.04:0.03:5X5_100"


def _hand_eye_bag(fx, case, *extra: str, frames: str = "base_link,tool0", bag: Path | None = None) -> list[str]:
    return ["import", "rosbag", _s(bag or fx.hand_eye_bag), "--flange-frames", frames, "--board", HAND_EYE_BOARD,
            "--out", _s(case / "out"), *extra]


@case("import rosbag: --flange-frames with a frame the bag's tf tree lacks")
def _(fx, case):
    return _hand_eye_bag(fx, case, frames="base_link,flange")


@case("import rosbag: --flange-frames linked by /tf_static alone")
def _(fx, case):
    return _hand_eye_bag(fx, case, frames="world,base_link")


@case("import rosbag: a photo's stamp outside the /tf time range")
def _(fx, case):
    def change(topic, message):
        # /tf stops after the first of its three stands: the later photos have no flange pose.
        stamp = message.transforms[0].header.stamp if topic == "/tf" else None
        return None if stamp is not None and stamp.sec + 1e-9 * stamp.nanosec > 1_700_000_000.8 else message
    return _hand_eye_bag(fx, case, bag=_rewrite_bag(fx, case, change, fx.hand_eye_bag))


@case("import rosbag: --flange-frames with --urdf")
def _(fx, case):
    return _hand_eye_bag(fx, case, "--urdf", _s(fx.box / "robot.urdf"))


@case("import rosbag: --flange-frames not PARENT,CHILD")
def _(fx, case):
    return _hand_eye_bag(fx, case, frames="base_link,tool0,flange")


@case("import rosbag: --flange-frames and --flange-poses both")
def _(fx, case):
    return _hand_eye_bag(fx, case, "--flange-poses", _s(case / "flange.csv"))


# import images ------------------------------------------------------------------------------------

def _images(fx, case, *extra: str, folder: Path | None = None) -> list[str]:
    return ["import", "images", _s(folder or fx.camera_folder), "--urdf", _s(fx.box / "robot.urdf"), *BOX_URDF_ARGS,
            "--out", _s(case / "out"), *extra]


@case("import images: folder missing")
def _(fx, case):
    return _images(fx, case, folder=case / "nothing")


@case("import images: depth read in the wrong unit")
def _(fx, case):
    return _images(fx, case, "--depth-scale", "1")


@case("import images: image of a pose joints.csv lacks")
def _(fx, case):
    folder = copy(fx.camera_folder, case)
    shutil.copyfile(folder / "cameras" / "front" / "p0000_depth.png", folder / "cameras" / "front" / "p0099_depth.png")
    return _images(fx, case, folder=folder)


@case("import images: camera_info of another size")
def _(fx, case):
    folder = copy(fx.camera_folder, case)
    info = folder / "cameras" / "left" / "camera_info.yaml"
    info.write_text(info.read_text().replace("image_width: 160", "image_width: 320"))
    return _images(fx, case, folder=folder)


@case("import images: 8-bit depth image")
def _(fx, case):
    import cv2

    folder = copy(fx.camera_folder, case)
    cv2.imwrite(str(folder / "cameras" / "back" / "p0001_depth.png"), np.zeros((120, 160), np.uint8))
    return _images(fx, case, folder=folder)


@case("import images: depth image linked from outside the folder")
def _(fx, case):
    folder = copy(fx.camera_folder, case)
    target = folder / "cameras" / "back" / "p0001_depth.png"
    (case / "elsewhere").mkdir()
    outside = shutil.move(target, case / "elsewhere" / target.name)
    target.symlink_to(outside)
    return _images(fx, case, folder=folder)


@case("import images: pose.yaml that is not a rotation")
def _(fx, case):
    folder = copy(fx.camera_folder, case)
    (folder / "cameras" / "front" / "pose.yaml").write_text("frame: optical\nxyz: [1, 0, 1]\nquat_xyzw: [0, 0, 0, 2]\n")
    return _images(fx, case, folder=folder)


# sessions, through calibrate ----------------------------------------------------------------------

def _session(fx, case, edit: Callable[[Path], None], source: Path | None = None) -> Path:
    session = copy(source or fx.session, case, "s")
    edit(session)
    return session


def _calibrate(fx, case, edit: Callable[[Path], None], *extra: str) -> list[str]:
    return ["calibrate", _s(_session(fx, case, edit)), "--out", _s(case / "out"), "--deflection", "none", *extra]


@case("calibrate: session folder missing")
def _(fx, case):
    return ["calibrate", _s(case / "nosession"), "--out", _s(case / "out")]


@case("calibrate: session.json not JSON")
def _(fx, case):
    return _calibrate(fx, case, lambda s: (s / "session.json").write_text('{"format": "selfcal-session",'))


@case("calibrate: session.json not UTF-8")
def _(fx, case):
    return _calibrate(fx, case, lambda s: latin1_json(s / "session.json"))


@case("calibrate: session.json top level is a list")
def _(fx, case):
    return _calibrate(fx, case, lambda s: (s / "session.json").write_text("[1, 2, 3]"))


@case("calibrate: session.json robot is a list")
def _(fx, case):
    return _calibrate(fx, case, lambda s: edit_json(s / "session.json", lambda d: d.update(robot=["robot.urdf"])))


@case("calibrate: session.json joint_names is text")
def _(fx, case):
    return _calibrate(fx, case, lambda s: edit_json(s / "session.json",
                                                    lambda d: d["robot"].update(joint_names="lbr_iiwa_joint_1")))


@case("calibrate: session.json joint_names not the URDF's")
def _(fx, case):
    return _calibrate(fx, case, lambda s: edit_json(s / "session.json",
                                                    lambda d: d["robot"]["joint_names"].reverse()))


@case("calibrate: session.json robot.urdf by ../")
def _(fx, case):
    def edit(s):
        shutil.copyfile(s / "robot.urdf", case / "robot.urdf")
        edit_json(s / "session.json", lambda d: d["robot"].update(urdf="../robot.urdf"))
    return _calibrate(fx, case, edit)


@case("calibrate: session.json robot.urdf absolute")
def _(fx, case):
    return _calibrate(fx, case, lambda s: edit_json(s / "session.json",
                                                    lambda d: d["robot"].update(urdf=str(fx.session / "robot.urdf"))))


@case("calibrate: session.json another format version")
def _(fx, case):
    return _calibrate(fx, case, lambda s: edit_json(s / "session.json", lambda d: d.update(format_version=7)))


@case("calibrate: session.json reflector offsets in mm")
def _(fx, case):
    def edit(s):
        edit_json(s / "session.json", lambda d: d["sensors"]["tracker"].update(
            targets={k: [1000 * v for v in xyz] for k, xyz in d["sensors"]["tracker"]["targets"].items()}))
    return _calibrate(fx, case, edit)


@case("calibrate: session.json MPE is text")
def _(fx, case):
    return _calibrate(fx, case, lambda s: edit_json(s / "session.json", lambda d: d["sensors"]["tracker"].update(
        distance_mpe_m="10 um")))


@case("calibrate: session.json camera name leads outside")
def _(fx, case):
    return _calibrate(fx, case, lambda s: edit_json(s / "session.json", lambda d: d["sensors"].update(
        cameras={"../../secret": {"base_T_camera": None}})))


@case("calibrate: joints.csv truncated row")
def _(fx, case):
    return _calibrate(fx, case, lambda s: truncate_last_row(s / "joints.csv"))


@case("calibrate: joints.csv cell not a number")
def _(fx, case):
    return _calibrate(fx, case, lambda s: edit_cell(s / "joints.csv", 4, "lbr_iiwa_joint_4", "1.2.3"))


@case("calibrate: joints.csv in degrees")
def _(fx, case):
    return _calibrate(fx, case, lambda s: scale_columns(s / "joints.csv", IIWA_JOINTS, 180 / np.pi))


@case("calibrate: joints.csv one joint far beyond its limit")
def _(fx, case):
    return _calibrate(fx, case, lambda s: edit_cell(s / "joints.csv", 5, "lbr_iiwa_joint_6", "2.3"))


@case("calibrate: joints.csv not UTF-8")
def _(fx, case):
    return _calibrate(fx, case, lambda s: latin1_byte(s / "joints.csv"))


@case("calibrate: joints.csv lacks a joint column")
def _(fx, case):
    return _calibrate(fx, case, lambda s: edit_text(s / "joints.csv", "lbr_iiwa_joint_5", "joint_5"))


@case("calibrate: joints.csv negative payload")
def _(fx, case):
    return _calibrate(fx, case, lambda s: edit_cell(s / "joints.csv", 2, "payload_kg", "-1.5"))


@case("calibrate: joints.csv header only")
def _(fx, case):
    return _calibrate(fx, case, lambda s: (s / "joints.csv").write_text(
        (s / "joints.csv").read_text().splitlines()[0] + "\n"))


@case("calibrate: joints.csv NUL bytes")
def _(fx, case):
    return _calibrate(fx, case, lambda s: (s / "joints.csv").write_bytes((s / "joints.csv").read_bytes() + b"p0099\x00,1\n"))


@case("calibrate: tracker.csv in mm")
def _(fx, case):
    return _calibrate(fx, case, lambda s: scale_columns(s / "tracker.csv", ["x", "y", "z"], 1000.0))


@case("calibrate: tracker.csv in cm")
def _(fx, case):
    return _calibrate(fx, case, lambda s: scale_columns(s / "tracker.csv", ["x", "y", "z"], 100.0))


@case("calibrate: tracker.csv truncated row")
def _(fx, case):
    return _calibrate(fx, case, lambda s: truncate_last_row(s / "tracker.csv"))


@case("calibrate: tracker.csv NaN")
def _(fx, case):
    return _calibrate(fx, case, lambda s: edit_cell(s / "tracker.csv", 3, "y", "nan"))


@case("calibrate: tracker.csv pose not in joints.csv")
def _(fx, case):
    return _calibrate(fx, case, lambda s: edit_cell(s / "tracker.csv", 3, "pose", "p9999"))


@case("calibrate: tracker.csv not UTF-8")
def _(fx, case):
    return _calibrate(fx, case, lambda s: latin1_byte(s / "tracker.csv"))


@case("calibrate: tracker.csv negative sigma")
def _(fx, case):
    def edit(s):
        lines = (s / "tracker.csv").read_text().splitlines()
        (s / "tracker.csv").write_text("\n".join([lines[0] + ",sigma"] + [l + ",-0.00001" for l in lines[1:]]) + "\n")
    return _calibrate(fx, case, edit)


@case("calibrate: tracker_poses.csv zero quaternion")
def _(fx, case):
    def edit(s):
        (s / "tracker_poses.csv").write_text("pose,x,y,z,qx,qy,qz,qw\np0000,1,1,1,0,0,0,0\n")
    return _calibrate(fx, case, edit)


@case("calibrate: session URDF declares entities in UTF-16")
def _(fx, case):
    return _calibrate(fx, case, lambda s: hostile_urdf(s / "robot.urdf", "utf16", fx.secret))


@case("calibrate: session URDF external entity")
def _(fx, case):
    return _calibrate(fx, case, lambda s: hostile_urdf(s / "robot.urdf", "external", fx.secret))


@case("calibrate: session mesh symlink leading outside")
def _(fx, case):
    def edit(s):
        mesh = s / first_mesh(s / "robot.urdf")
        mesh.unlink()
        mesh.symlink_to(fx.secret / "passwd.obj")
    return _calibrate(fx, case, edit)


@case("calibrate: session mesh by absolute path")
def _(fx, case):
    return _calibrate(fx, case, lambda s: point_meshes_at(s / "robot.urdf", f"{fx.secret}/passwd.obj"))


@case("calibrate: session URDF texture outside")
def _(fx, case):
    return _calibrate(fx, case, lambda s: edit_text(s / "robot.urdf", "<visual>",
                                                    f'<visual><material name="t"><texture filename="{fx.secret}/passwd"/></material>'))


@case("calibrate: --holdout 1.5")
def _(fx, case):
    return ["calibrate", _s(fx.session), "--out", _s(case / "out"), "--holdout", "1.5"]


@case("calibrate: --model bogus")
def _(fx, case):
    return ["calibrate", _s(fx.session), "--out", _s(case / "out"), "--model", "everything"]


@case("calibrate: --deflection bogus")
def _(fx, case):
    return ["calibrate", _s(fx.session), "--out", _s(case / "out"), "--deflection", "springs"]


@case("calibrate: --tolerance-mm negative")
def _(fx, case):
    return ["calibrate", _s(fx.session), "--out", _s(case / "out"), "--tolerance-mm", "-0.1"]


@case("validate: --tolerance-mm 0")
def _(fx, case):
    return ["validate", _s(fx.calibration), _s(fx.session), "--tolerance-mm", "0"]


@case("calibrate: --outlier-sigma 0")
def _(fx, case):
    return ["calibrate", _s(fx.session), "--out", _s(case / "out"), "--outlier-sigma", "0"]


@case("calibrate: --out exists")
def _(fx, case):
    (case / "out").mkdir()
    (case / "out" / "keep.txt").write_text("mine\n")
    return ["calibrate", _s(fx.session), "--out", _s(case / "out")]


@case("calibrate: --out is a file")
def _(fx, case):
    (case / "out").write_text("mine\n")
    return ["calibrate", _s(fx.session), "--out", _s(case / "out"), "--force"]


@case("calibrate: --out parent is a file")
def _(fx, case):
    return ["calibrate", _s(fx.session), "--out", _s(file_parent_out(case))]


@case("calibrate: --out parent read-only")
def _(fx, case):
    return ["calibrate", _s(fx.session), "--out", _s(read_only_out(case))]


@case("calibrate: --tip-link not a link")
def _(fx, case):
    return ["calibrate", _s(fx.session), "--out", _s(case / "out"), "--tip-link", "flange9", "--deflection", "none"]


@case("calibrate: a camera session without board images")
def _(fx, case):
    return ["calibrate", _s(fx.box), "--out", _s(case / "out")]


@case("calibrate: --fit-intrinsics on a tracker session")
def _(fx, case):
    return ["calibrate", _s(fx.session), "--out", _s(case / "out"), "--deflection", "none", "--fit-intrinsics"]


@case("calibrate: --fit-intrinsics on a camera session without board images")
def _(fx, case):
    return ["calibrate", _s(fx.box), "--out", _s(case / "out"), "--fit-intrinsics"]


# validate ----------------------------------------------------------------------------------------

def _cal(fx, case, edit: Callable[[Path], None]) -> Path:
    calibration = copy(fx.calibration, case, "cal")
    edit(calibration)
    return calibration


def _validate(fx, case, edit: Callable[[Path], None], *extra: str) -> list[str]:
    return ["validate", _s(_cal(fx, case, edit)), _s(fx.session), *extra]


@case("validate: calibration folder missing")
def _(fx, case):
    return ["validate", _s(case / "nocal"), _s(fx.session)]


@case("validate: calibration.yaml not YAML")
def _(fx, case):
    return _validate(fx, case, lambda c: (c / "calibration.yaml").write_text("format: [selfcal\n"))


@case("validate: calibration.yaml not UTF-8")
def _(fx, case):
    return _validate(fx, case, lambda c: latin1_byte(c / "calibration.yaml"))


@case("validate: calibration.yaml joints is a number")
def _(fx, case):
    return _validate(fx, case, lambda c: edit_text(c / "calibration.yaml", "joints:\n", "joints: 3\nunused:\n"))


@case("validate: calibration.yaml delta_twist is text")
def _(fx, case):
    return _validate(fx, case, lambda c: edit_text(c / "calibration.yaml", "delta_twist:\n", "delta_twist: small\n    old:\n"))


@case("validate: calibration.yaml robot.urdf leads outside")
def _(fx, case):
    def edit(c):
        shutil.copyfile(c / "robot.urdf", case / "robot.urdf")
        edit_text(c / "calibration.yaml", "urdf: robot.urdf", "urdf: ../robot.urdf")
    return _validate(fx, case, edit)


@case("validate: calibration.yaml robot.urdf absolute")
def _(fx, case):
    return _validate(fx, case, lambda c: edit_text(c / "calibration.yaml", "urdf: robot.urdf",
                                                   f"urdf: {fx.calibration / 'robot.urdf'}"))


@case("validate: calibration.yaml zero quaternion")
def _(fx, case):
    def edit(c):
        import yaml

        document = yaml.safe_load((c / "calibration.yaml").read_text())
        document["tracker_T_base"]["quat_xyzw"] = [0, 0, 0, 0]
        (c / "calibration.yaml").write_text(yaml.safe_dump(document))
    return _validate(fx, case, edit)


@case("validate: calibration.yaml targets xyz is text")
def _(fx, case):
    def edit(c):
        import yaml

        document = yaml.safe_load((c / "calibration.yaml").read_text())
        document["targets"]["smr1"]["xyz"] = "near the flange"
        (c / "calibration.yaml").write_text(yaml.safe_dump(document))
    return _validate(fx, case, edit)


@case("validate: calibration URDF billion laughs")
def _(fx, case):
    return _validate(fx, case, lambda c: hostile_urdf(c / "robot.urdf", "laughs", fx.secret))


@case("validate: session in degrees")
def _(fx, case):
    session = _session(fx, case, lambda s: scale_columns(s / "joints.csv", IIWA_JOINTS, 180 / np.pi))
    return ["validate", _s(fx.calibration), _s(session)]


@case("validate: session tracker points in mm")
def _(fx, case):
    session = _session(fx, case, lambda s: scale_columns(s / "tracker.csv", ["x", "y", "z"], 1000.0))
    return ["validate", _s(fx.calibration), _s(session)]


@case("validate: --outlier-sigma -1")
def _(fx, case):
    return ["validate", _s(fx.calibration), _s(fx.session), "--outlier-sigma", "-1"]


@case("validate: a session of another robot")
def _(fx, case):
    return ["validate", _s(fx.calibration), _s(fx.box)]


@case("validate: --registration-poses names an unknown pose")
def _(fx, case):
    return ["validate", _s(fx.calibration), _s(fx.session), "--register", "tracker", "--registration-poses", "p0000,p0001,nope"]


@case("validate: --registration-poses names too few poses")
def _(fx, case):
    return ["validate", _s(fx.calibration), _s(fx.session), "--register", "tracker", "--registration-poses", "p0000,p0001"]


# dynamics ----------------------------------------------------------------------------------------

@case("dynamics fit: a session without measured torques")
def _(fx, case):
    return ["dynamics", "fit", _s(fx.session), "--out", _s(case / "out")]


@case("dynamics fit: an effort column that is not a number")
def _(fx, case):
    session = case / "session"
    shutil.copytree(fx.session, session)
    rows = _rows(session / "joints.csv")
    header = rows[0] + [f"effort_{name}" for name in IIWA_JOINTS]
    body = [row + ["1.5"] * len(IIWA_JOINTS) for row in rows[1:]]
    body[1][-1] = "heavy"
    (session / "joints.csv").write_text("\n".join(",".join(r) for r in [header] + body) + "\n")
    return ["dynamics", "fit", _s(session), "--out", _s(case / "out")]


@case("dynamics payload: not a dynamics folder")
def _(fx, case):
    return ["dynamics", "payload", _s(fx.session), "--dynamics", _s(case)]


# predict and correct -----------------------------------------------------------------------------

@case("predict: joints in degrees")
def _(fx, case):
    joints = copy(fx.joints, case)
    scale_columns(joints, IIWA_JOINTS, 180 / np.pi)
    return ["predict", _s(fx.calibration), "--joints", _s(joints)]


@case("predict: joints lack a column")
def _(fx, case):
    joints = copy(fx.joints, case)
    edit_text(joints, "lbr_iiwa_joint_2", "j2")
    return ["predict", _s(fx.calibration), "--joints", _s(joints)]


@case("predict: joints not UTF-8")
def _(fx, case):
    joints = copy(fx.joints, case)
    latin1_byte(joints)
    return ["predict", _s(fx.calibration), "--joints", _s(joints)]


@case("predict: negative --payload")
def _(fx, case):
    return ["predict", _s(fx.calibration), "--joints", _s(fx.joints), "--payload", "-1"]


@case("correct: targets in mm")
def _(fx, case):
    targets = copy(fx.targets, case)
    scale_columns(targets, ["x", "y", "z"], 1000.0)
    return ["correct", _s(fx.calibration), "--targets", _s(targets)]


@case("correct: target cell not a number")
def _(fx, case):
    targets = copy(fx.targets, case)
    edit_cell(targets, 0, "y", "one")
    return ["correct", _s(fx.calibration), "--targets", _s(targets)]


@case("correct: targets truncated row")
def _(fx, case):
    targets = copy(fx.targets, case)
    truncate_last_row(targets)
    return ["correct", _s(fx.calibration), "--targets", _s(targets)]


@case("correct: seed joints in degrees")
def _(fx, case):
    targets = case / "targets.csv"
    q = np.degrees(np.full(7, 0.3))
    targets.write_text("name,x,y,z," + ",".join(IIWA_JOINTS) + "\nt0,0.4,0.1,0.5," + ",".join(map(str, q)) + "\n")
    return ["correct", _s(fx.calibration), "--targets", _s(targets)]


@case("correct: --out exists")
def _(fx, case):
    (case / "q.csv").write_text("mine\n")
    return ["correct", _s(fx.calibration), "--targets", _s(fx.targets), "--out", _s(case / "q.csv")]


@case("correct: --out parent is a file")
def _(fx, case):
    return ["correct", _s(fx.calibration), "--targets", _s(fx.targets), "--out", _s(file_parent_out(case))]


# plan and recalibrate ----------------------------------------------------------------------------

@case("plan: --poses 0")
def _(fx, case):
    return ["plan", "--rig", "iiwa-tracker", "--poses", "0", "--out", _s(case / "plan.csv")]


@case("plan: --out exists")
def _(fx, case):
    (case / "plan.csv").write_text("my plan\n")
    return ["plan", "--rig", "iiwa-tracker", "--poses", "3", "--out", _s(case / "plan.csv")]


@case("plan: --urdf without --base-link")
def _(fx, case):
    return ["plan", "--urdf", _s(IMPORT / "robot" / "arm3.urdf"), "--poses", "3", "--out", _s(case / "plan.csv")]


@case("plan: --urdf mesh outside its folder")
def _(fx, case):
    urdf = copy(fx.box / "robot.urdf", case)
    edit_text(urdf, "<box size=", f'<mesh filename="{fx.secret}/passwd.obj"/><box size=')
    return ["plan", "--urdf", _s(urdf), "--base-link", "base", "--tip-link", "box", "--poses", "3",
            "--out", _s(case / "plan.csv")]


@case("audit plan: --urdf declares entities in UTF-16")
def _(fx, case):
    urdf = copy(fx.box / "robot.urdf", case)
    hostile_urdf(urdf, "utf16", fx.secret)
    return ["audit", "plan", "--urdf", _s(urdf), "--base-link", "base", "--tip-link", "box", "--out",
            _s(case / "audit.csv")]


@case("plan: --sweeps --joint without a range")
def _(fx, case):
    return ["plan", "--sweeps", "--joint", "shoulder", "--poses", "0", "--out", _s(case / "plan.csv")]


@case("plan: --sweeps --joint upside down")
def _(fx, case):
    return ["plan", "--sweeps", "--joint", "shoulder=1:-1", "--poses", "0", "--out", _s(case / "plan.csv")]


@case("plan: --sweeps with a rig and --joint")
def _(fx, case):
    return ["plan", "--sweeps", "--rig", _s(BOX_RIG), "--joint", "shoulder=-1:1", "--poses", "0",
            "--out", _s(case / "plan.csv")]


@case("plan: --sweeps --sweep-steps 2")
def _(fx, case):
    return ["plan", "--sweeps", "--rig", _s(BOX_RIG), "--sweep-steps", "2", "--poses", "0", "--out", _s(case / "plan.csv")]


@case("plan: --sweeps --optimal")
def _(fx, case):
    return ["plan", "--sweeps", "--rig", _s(BOX_RIG), "--optimal", "--poses", "3", "--out", _s(case / "plan.csv")]


@case("plan: --views without --model or --rig")
def _(fx, case):
    return ["plan", "--views", "--poses", "3", "--out", _s(case / "plan.csv")]


@case("plan: --views --model of a folder that holds no model")
def _(fx, case):
    return ["plan", "--views", "--model", _s(copy(fx.box, case, "box")), "--poses", "3", "--out", _s(case / "plan.csv")]


@case("plan: --model without --views")
def _(fx, case):
    return ["plan", "--model", _s(fx.model), "--rig", _s(BOX_RIG), "--poses", "3", "--out", _s(case / "plan.csv")]


@case("plan: --views --poses 0")
def _(fx, case):
    return ["plan", "--views", "--model", _s(fx.model), "--poses", "0", "--out", _s(case / "plan.csv")]


@case("plan: --views --optimal")
def _(fx, case):
    return ["plan", "--views", "--optimal", "--model", _s(fx.model), "--rig", _s(BOX_RIG), "--poses", "3",
            "--out", _s(case / "plan.csv")]


@case("plan: --views --sweeps")
def _(fx, case):
    return ["plan", "--views", "--sweeps", "--model", _s(fx.model), "--poses", "3", "--out", _s(case / "plan.csv")]


@case("plan: --joint without --sweeps")
def _(fx, case):
    return ["plan", "--rig", _s(BOX_RIG), "--joint", "shoulder=-1:1", "--poses", "3", "--out", _s(case / "plan.csv")]


@case("discover: a session without sweeps")
def _(fx, case):
    return ["discover", _s(copy(fx.box, case, "box")), "--out", _s(case / "found")]


@case("discover: a tracker session without cameras")
def _(fx, case):
    return ["discover", _s(copy(fx.session, case, "iiwa")), "--out", _s(case / "found")]


@case("discover: not a session")
def _(fx, case):
    (case / "empty").mkdir()
    return ["discover", _s(case / "empty"), "--out", _s(case / "found")]


@case("discover: --out exists")
def _(fx, case):
    (case / "found").mkdir()
    (case / "found" / "notes.txt").write_text("mine\n")
    return ["discover", _s(copy(fx.box, case, "box")), "--out", _s(case / "found")]


@case("selfmodel train: --no-urdf with --urdf")
def _(fx, case):
    return ["selfmodel", "train", _s(copy(fx.box, case, "box")), "--no-urdf", "--urdf", _s(fx.box / "robot.urdf"),
            "--out", _s(case / "model")]


@case("selfmodel train: --urdf beside a calibration.yaml that is not a calibration")
def _(fx, case):
    folder = case / "cal"
    folder.mkdir()
    shutil.copyfile(fx.box / "robot.urdf", folder / "robot.urdf")
    (folder / "calibration.yaml").write_text("format: somebody-elses\n")
    return ["selfmodel", "train", _s(copy(fx.box, case, "box")), "--urdf", _s(folder / "robot.urdf"), "--steps", "1",
            "--out", _s(case / "model")]


@case("selfmodel train: --no-urdf on a session without sweeps")
def _(fx, case):
    return ["selfmodel", "train", _s(copy(fx.box, case, "box")), "--no-urdf", "--steps", "3", "--out", _s(case / "model")]


@case("selfmodel train: session without a robot description, no --no-urdf")
def _(fx, case):
    box = copy(fx.box, case, "box")
    (box / "robot.urdf").unlink()
    return ["selfmodel", "train", _s(box), "--steps", "3", "--out", _s(case / "model")]


@case("calibrate: session's robot.urdf deleted")
def _(fx, case):
    return _calibrate(fx, case, lambda s: (s / "robot.urdf").unlink())


@case("calibrate: session.json names no URDF")
def _(fx, case):
    return _calibrate(fx, case, lambda s: edit_json(s / "session.json", lambda m: m["robot"].pop("urdf")))


@case("validate: session's robot.urdf deleted")
def _(fx, case):
    session = copy(fx.session, case, "session")
    (session / "robot.urdf").unlink()
    return ["validate", _s(fx.calibration), _s(session)]


@case("plan: --calibration of another robot")
def _(fx, case):
    return ["plan", "--rig", _s(BOX_RIG), "--poses", "3", "--calibration", _s(fx.calibration), "--out",
            _s(case / "plan.csv")]


@case("plan: --calibration not YAML")
def _(fx, case):
    calibration = _cal(fx, case, lambda c: (c / "calibration.yaml").write_text("{{{\n"))
    return ["plan", "--rig", "iiwa-tracker", "--poses", "3", "--calibration", _s(calibration), "--out",
            _s(case / "plan.csv")]


@case("plan: --optimal with fewer candidates than poses")
def _(fx, case):
    return ["plan", "--rig", "iiwa-tracker", "--poses", "30", "--optimal", "--candidates", "10", "--out",
            _s(case / "plan.csv")]


@case("plan: --out parent is a file")
def _(fx, case):
    return ["plan", "--rig", "iiwa-tracker", "--poses", "3", "--out", _s(file_parent_out(case))]


@case("recalibrate: --previous missing")
def _(fx, case):
    return ["recalibrate", _s(fx.session), "--previous", _s(case / "nocal"), "--out", _s(case / "out")]


@case("recalibrate: --previous not YAML")
def _(fx, case):
    calibration = _cal(fx, case, lambda c: (c / "calibration.yaml").write_text("- - -\n  ::\n"))
    return ["recalibrate", _s(fx.session), "--previous", _s(calibration), "--out", _s(case / "out")]


@case("recalibrate: session in mm")
def _(fx, case):
    session = _session(fx, case, lambda s: scale_columns(s / "tracker.csv", ["x", "y", "z"], 1000.0))
    return ["recalibrate", _s(session), "--previous", _s(fx.calibration), "--out", _s(case / "out")]


@case("recalibrate: --out exists")
def _(fx, case):
    (case / "out").mkdir()
    return ["recalibrate", _s(fx.session), "--previous", _s(fx.calibration), "--out", _s(case / "out")]


# audit -------------------------------------------------------------------------------------------

@case("audit plan: --cycles 1")
def _(fx, case):
    return ["audit", "plan", "--rig", "iiwa-tracker", "--cycles", "1", "--out", _s(case / "audit.csv")]


@case("audit plan: --cube -0.2")
def _(fx, case):
    return ["audit", "plan", "--rig", "iiwa-tracker", "--cube", "-0.2", "--out", _s(case / "audit.csv")]


@case("audit plan: --out exists")
def _(fx, case):
    (case / "audit.csv").write_text("mine\n")
    return ["audit", "plan", "--rig", "iiwa-tracker", "--out", _s(case / "audit.csv")]


@case("audit report: not an audit session")
def _(fx, case):
    return ["audit", "report", _s(fx.session), "--out", _s(case / "out")]


@case("audit report: --calibration not YAML")
def _(fx, case):
    calibration = _cal(fx, case, lambda c: (c / "calibration.yaml").write_text("]]\n"))
    return ["audit", "report", _s(fx.audit), "--calibration", _s(calibration), "--out", _s(case / "out")]


@case("audit report: --calibration missing")
def _(fx, case):
    return ["audit", "report", _s(fx.audit), "--calibration", _s(case / "nocal"), "--out", _s(case / "out")]


@case("audit report: session in degrees")
def _(fx, case):
    session = _session(fx, case, lambda s: scale_columns(s / "joints.csv", IIWA_JOINTS, 180 / np.pi), fx.audit)
    return ["audit", "report", _s(session), "--out", _s(case / "out")]


@case("audit report: tracker points in mm")
def _(fx, case):
    session = _session(fx, case, lambda s: scale_columns(s / "tracker.csv", ["x", "y", "z"], 1000.0), fx.audit)
    return ["audit", "report", _s(session), "--out", _s(case / "out")]


@case("audit report: iso_pose column garbled")
def _(fx, case):
    session = _session(fx, case, lambda s: edit_cell(s / "joints.csv", 0, "iso_pose", "P9"), fx.audit)
    return ["audit", "report", _s(session), "--out", _s(case / "out")]


@case("audit report: --point unknown reflector")
def _(fx, case):
    return ["audit", "report", _s(fx.audit), "--out", _s(case / "out"), "--point", "smr7"]


@case("audit report: --point two coordinates")
def _(fx, case):
    return ["audit", "report", _s(fx.audit), "--out", _s(case / "out"), "--point", "0,150"]


@case("audit report: --ap-tolerance-mm 0")
def _(fx, case):
    return ["audit", "report", _s(fx.audit), "--out", _s(case / "out"), "--ap-tolerance-mm", "0"]


@case("audit report: --out exists")
def _(fx, case):
    (case / "out").mkdir()
    return ["audit", "report", _s(fx.audit), "--out", _s(case / "out")]


# selfmodel train ---------------------------------------------------------------------------------

def _train(fx, case, *extra: str, session: Path | None = None) -> list[str]:
    return ["selfmodel", "train", _s(session or fx.box), "--out", _s(case / "model"), "--steps", "2", "--threads", "1",
            *extra]


@case("selfmodel train: session without cameras")
def _(fx, case):
    return _train(fx, case, session=fx.session)


@case("selfmodel train: --kind bogus")
def _(fx, case):
    return _train(fx, case, "--kind", "voxels")


@case("selfmodel train: --steps 0")
def _(fx, case):
    return ["selfmodel", "train", _s(fx.box), "--out", _s(case / "model"), "--steps", "0"]


@case("selfmodel train: --minutes -1")
def _(fx, case):
    return ["selfmodel", "train", _s(fx.box), "--out", _s(case / "model"), "--minutes", "-1"]


@case("selfmodel train: --threads 0")
def _(fx, case):
    return ["selfmodel", "train", _s(fx.box), "--out", _s(case / "model"), "--steps", "2", "--threads", "0"]


@case("selfmodel train: --device bogus")
def _(fx, case):
    return _train(fx, case, "--device", "tpu")


@case("selfmodel train: --previous missing")
def _(fx, case):
    return _train(fx, case, "--previous", _s(case / "nomodel"))


@case("selfmodel train: --previous of another kind")
def _(fx, case):
    return _train(fx, case, "--previous", _s(copy(fx.model, case, "previous")), "--kind", "free")


@case("selfmodel train: --urdf missing")
def _(fx, case):
    return _train(fx, case, "--urdf", _s(case / "none.urdf"))


@case("selfmodel train: --urdf declares entities in UTF-16")
def _(fx, case):
    urdf = copy(fx.box / "robot.urdf", case)
    hostile_urdf(urdf, "utf16", fx.secret)
    return _train(fx, case, "--urdf", _s(urdf))


@case("selfmodel train: --urdf of another robot")
def _(fx, case):
    return _train(fx, case, "--urdf", _s(fx.session / "robot.urdf"))


@case("selfmodel train: --resume with nothing to resume")
def _(fx, case):
    return _train(fx, case, "--resume")


@case("selfmodel train: camera_info.yaml garbage")
def _(fx, case):
    session = _session(fx, case, lambda s: (s / "cameras" / "front" / "camera_info.yaml").write_text("camera_matrix: 3\n"),
                       fx.box)
    return _train(fx, case, session=session)


@case("selfmodel train: a depth image that is not a PNG")
def _(fx, case):
    session = _session(fx, case, lambda s: (s / "cameras" / "left" / "p0001_depth.png").write_text("not an image\n"),
                       fx.box)
    return _train(fx, case, session=session)


@case("selfmodel train: depth image of another size")
def _(fx, case):
    def edit(s):
        import cv2

        cv2.imwrite(str(s / "cameras" / "back" / "p0002_depth.png"), np.full((60, 80), 9000, np.uint16))
    return _train(fx, case, session=_session(fx, case, edit, fx.box))


@case("selfmodel train: camera pose is not a matrix")
def _(fx, case):
    session = _session(fx, case, lambda s: edit_json(s / "session.json", lambda d: d["sensors"]["cameras"]["front"].update(
        base_T_camera=[[1, 0, 0], [0, 1, 0]])), fx.box)
    return _train(fx, case, session=session)


@case("selfmodel train: --out exists")
def _(fx, case):
    (case / "model").mkdir()
    return _train(fx, case)


@case("selfmodel train: --out parent is a file")
def _(fx, case):
    argv = _train(fx, case)
    argv[argv.index("--out") + 1] = _s(file_parent_out(case))
    return argv


# selfmodel eval / check / export: hostile model folders ------------------------------------------

def _model(fx, case, edit: Callable[[Path], None]) -> Path:
    model = copy(fx.model, case, "model")
    edit(model)
    return model


def _eval(fx, case, edit, *extra: str) -> list[str]:
    return ["selfmodel", "eval", _s(_model(fx, case, edit)), _s(fx.box), "--poses", "1", "--voxel-mm", "20", *extra]


@case("selfmodel eval: baked.npz garbage")
def _(fx, case):
    return _eval(fx, case, lambda m: (m / "baked.npz").write_bytes(b"not a zip"))


@case("selfmodel eval: --device bogus")
def _(fx, case):
    return _eval(fx, case, lambda m: None, "--device", "tpu")


@case("selfmodel eval: model folder missing")
def _(fx, case):
    return ["selfmodel", "eval", _s(case / "nomodel"), _s(fx.box)]


@case("selfmodel eval: config.json not JSON")
def _(fx, case):
    return _eval(fx, case, lambda m: (m / "config.json").write_text('{"format": '))


@case("selfmodel eval: config.json not UTF-8")
def _(fx, case):
    return _eval(fx, case, lambda m: latin1_json(m / "config.json"))


@case("selfmodel eval: config.json hidden is text")
def _(fx, case):
    return _eval(fx, case, lambda m: edit_json(m / "config.json", lambda d: d["network"].update(hidden="64")))


@case("selfmodel eval: config.json asks for a huge network")
def _(fx, case):
    return _eval(fx, case, lambda m: edit_json(m / "config.json", lambda d: d["network"].update(hidden=10**9)))


@case("selfmodel eval: config.json board mount not a 4x4 matrix")
def _(fx, case):
    board = {"kind": "charuco", "squares": [7, 5], "square_m": 0.035, "marker_m": 0.026, "dictionary": "DICT_4X4_50",
             "tip_T_board_nominal": np.eye(4).tolist(), "tip_T_board_fitted": [[1, 0], [0, 1]]}
    return _eval(fx, case, lambda m: edit_json(m / "config.json", lambda d: d.update(board=board)))


@case("selfmodel eval: config.json urdf leads outside")
def _(fx, case):
    return _eval(fx, case, lambda m: edit_json(m / "config.json", lambda d: d.update(urdf="../../box/robot.urdf")))


@case("selfmodel eval: config.json urdf absolute")
def _(fx, case):
    return _eval(fx, case, lambda m: edit_json(m / "config.json", lambda d: d.update(urdf=str(fx.box / "robot.urdf"))))


@case("selfmodel eval: config.json workspace wrong length")
def _(fx, case):
    return _eval(fx, case, lambda m: edit_json(m / "config.json", lambda d: d.update(workspace_lo=[0, 0])))


@case("selfmodel eval: config.json kind unknown")
def _(fx, case):
    return _eval(fx, case, lambda m: edit_json(m / "config.json", lambda d: d.update(kind="voxels")))


@case("selfmodel eval: weights.pt random bytes")
def _(fx, case):
    return _eval(fx, case, lambda m: (m / "weights.pt").write_bytes(np.random.default_rng(0).bytes(4096)))


@case("selfmodel eval: weights.pt carries a pickled payload")
def _(fx, case):
    return _eval(fx, case, lambda m: torch_with_payload(m / "weights.pt", case / "payload-ran"))


@case("selfmodel eval: weights.pt a plain pickle")
def _(fx, case):
    import pickle

    return _eval(fx, case, lambda m: (m / "weights.pt").write_bytes(pickle.dumps({"a": [1, 2, 3]})))


@case("selfmodel eval: weights.pt truncated")
def _(fx, case):
    return _eval(fx, case, lambda m: (m / "weights.pt").write_bytes((m / "weights.pt").read_bytes()[:900]))


@case("selfmodel eval: weights of another network")
def _(fx, case):
    def edit(m):
        import torch

        torch.save({"layer.weight": torch.zeros(3, 3)}, m / "weights.pt")
    return _eval(fx, case, edit)


@case("selfmodel eval: --tolerance-mm 0")
def _(fx, case):
    return ["selfmodel", "eval", _s(fx.model), _s(fx.box), "--tolerance-mm", "0"]


@case("selfmodel check: --threshold-mm negative")
def _(fx, case):
    return ["selfmodel", "check", _s(fx.model), "--urdf", _s(fx.box / "robot.urdf"), "--threshold-mm", "-5"]


@case("selfmodel check: --report already there")
def _(fx, case):
    (case / "check.html").write_text("<p>mine</p>\n")
    return ["selfmodel", "check", _s(fx.model), "--urdf", _s(fx.box / "robot.urdf"), "--report", _s(case / "check.html")]


@case("selfmodel eval: --voxel-mm 0")
def _(fx, case):
    return ["selfmodel", "eval", _s(fx.model), _s(fx.box), "--voxel-mm", "0"]


@case("selfmodel eval: session without truth")
def _(fx, case):
    session = _session(fx, case, lambda s: shutil.rmtree(s / "truth"), fx.box)
    return ["selfmodel", "eval", _s(fx.model), _s(session), "--poses", "1", "--voxel-mm", "20"]


def _check(fx, case, edit=None, urdf: Path | None = None) -> list[str]:
    model = _model(fx, case, edit) if edit is not None else fx.model
    return ["selfmodel", "check", _s(model), "--urdf", _s(urdf or fx.box / "robot.urdf")]


@case("selfmodel check: --urdf mesh outside its folder")
def _(fx, case):
    urdf = copy(fx.box / "robot.urdf", case)
    edit_text(urdf, "<box size=", f'<mesh filename="{fx.secret}/passwd.obj"/><box size=')
    return _check(fx, case, urdf=urdf)


@case("selfmodel check: --urdf mesh by ../")
def _(fx, case):
    (case / "urdf").mkdir()
    urdf = copy(fx.box / "robot.urdf", case / "urdf")
    edit_text(urdf, "<box size=", '<mesh filename="../../secret/passwd.obj"/><box size=')
    return _check(fx, case, urdf=urdf)


@case("selfmodel check: --urdf declares entities in UTF-16")
def _(fx, case):
    urdf = copy(fx.box / "robot.urdf", case)
    hostile_urdf(urdf, "utf16", fx.secret)
    return _check(fx, case, urdf=urdf)


@case("selfmodel check: --urdf of another robot")
def _(fx, case):
    return _check(fx, case, urdf=fx.session / "robot.urdf")


@case("selfmodel check: surface samples with object arrays")
def _(fx, case):
    return _check(fx, case, lambda m: object_npz(m / "surface_samples.npz"))


@case("selfmodel check: surface samples corrupt")
def _(fx, case):
    return _check(fx, case, lambda m: (m / "surface_samples.npz").write_bytes(b"PK\x03\x04 broken"))


@case("selfmodel check: a sphere without a radius")
def _(fx, case):
    urdf = copy(fx.box / "robot.urdf", case)
    edit_text(urdf, "<box size=", '<sphere/><box size=')
    return _check(fx, case, urdf=urdf)


def _export(fx, case, *extra: str, model: Path | None = None) -> list[str]:
    return ["selfmodel", "export", _s(model or fx.model), "--out", _s(case / "collision"), *extra]


@case("selfmodel export: --margin not a number")
def _(fx, case):
    return _export(fx, case, "--margin", "wide")


@case("selfmodel export: --ros-package leads outside the package")
def _(fx, case):
    return _export(fx, case, "--ros-package", "my_robot/../../etc")


@case("selfmodel export: --board-spheres negative")
def _(fx, case):
    return _export(fx, case, "--board-spheres", "-1")


@case("selfmodel export: --board neither keep nor drop")
def _(fx, case):
    return _export(fx, case, "--board", "off")


@case("selfmodel export: --board-spheres with --board drop")
def _(fx, case):
    return _export(fx, case, "--board", "drop", "--board-spheres", "30")


@case("selfmodel export: --srdf-samples 0")
def _(fx, case):
    return _export(fx, case, "--srdf-samples", "0")


@case("selfmodel export: --out exists")
def _(fx, case):
    (case / "collision").mkdir()
    return _export(fx, case)


@case("selfmodel export: weights.pt random bytes")
def _(fx, case):
    return _export(fx, case, model=_model(fx, case, lambda m: (m / "weights.pt").write_bytes(b"\x80\x02junk")))


@case("selfmodel export: --spheres 0")
def _(fx, case):
    return _export(fx, case, "--spheres", "0")


# calibrate-camera, demo, rigs --------------------------------------------------------------------

BOARD = "charuco:7:5:0.035:0.026:4X4_50"


@case("calibrate-camera: image missing")
def _(fx, case):
    return ["calibrate-camera", _s(case / "none.png"), "--board", BOARD, "--out", _s(case / "camera.yaml")]


@case("calibrate-camera: --board malformed")
def _(fx, case):
    return ["calibrate-camera", _s(fx.box / "cameras" / "front" / "p0000_rgb.png"), "--board", "charuco:7:5",
            "--out", _s(case / "camera.yaml")]


@case("calibrate-camera: a text file named .png")
def _(fx, case):
    (case / "a.png").write_text("not an image\n")
    return ["calibrate-camera", _s(case / "a.png"), "--board", BOARD, "--out", _s(case / "camera.yaml")]


@case("calibrate-camera: images without a board")
def _(fx, case):
    images = [_s(p) for p in sorted((fx.box / "cameras" / "front").glob("*_rgb.png"))]
    return ["calibrate-camera", *images, "--board", BOARD, "--out", _s(case / "camera.yaml")]


@case("calibrate-camera: --out exists")
def _(fx, case):
    (case / "camera.yaml").write_text("mine\n")
    return ["calibrate-camera", _s(fx.box / "cameras" / "front" / "p0000_rgb.png"), "--board", BOARD,
            "--out", _s(case / "camera.yaml")]


@case("demo: --out exists")
def _(fx, case):
    (case / "demo").mkdir()
    (case / "demo" / "index.html").write_text("mine\n")
    return ["demo", "--quick", "--out", _s(case / "demo")]


@case("demo: --out parent is a file")
def _(fx, case):
    return ["demo", "--quick", "--out", _s(file_parent_out(case))]


@case("rigs: unknown option")
def _(fx, case):
    return ["rigs", "--all"]


@case("selfcal: unknown command")
def _(fx, case):
    return ["calibrat", _s(fx.session)]


# fleet --------------------------------------------------------------------------------------------
# What stops a whole fleet before Ray starts (a mistake in one arm's row is that arm's sentence, exit 1).

def _fleet(fx, case, text: str | None = None, *extra: str, command: str = "calibrate") -> list[str]:
    """``selfcal fleet COMMAND fleet.csv --out out EXTRA`` with the table ``text`` beside a copy of the
    tracker session (``sessions/arm1``)."""
    shutil.copytree(fx.session, case / "sessions" / "arm1")
    table = case / "fleet.csv"
    table.write_text(text if text is not None else "arm,sessions,options\narm1,sessions/arm1,--deflection none\n")
    return ["fleet", command, _s(table), "--out", _s(case / "out"), *extra]


@case("fleet calibrate: table missing")
def _(fx, case):
    return ["fleet", "calibrate", _s(case / "fleet.csv"), "--out", _s(case / "out")]


@case("fleet calibrate: table not UTF-8")
def _(fx, case):
    argv = _fleet(fx, case)
    latin1_byte(case / "fleet.csv")
    return argv


@case("fleet calibrate: empty table")
def _(fx, case):
    return _fleet(fx, case, "")


@case("fleet calibrate: header without sessions")
def _(fx, case):
    return _fleet(fx, case, "arm,session\narm1,sessions/arm1\n")


@case("fleet calibrate: unknown column")
def _(fx, case):
    return _fleet(fx, case, "arm,sessions,payload\narm1,sessions/arm1,2\n")


@case("fleet calibrate: header only")
def _(fx, case):
    return _fleet(fx, case, "arm,sessions\n")


@case("fleet calibrate: two rows for one arm")
def _(fx, case):
    return _fleet(fx, case, "arm,sessions\narm1,sessions/arm1\narm1,sessions/arm1\n")


@case("fleet calibrate: arm name is a path")
def _(fx, case):
    return _fleet(fx, case, "arm,sessions\n../arm1,sessions/arm1\n")


@case("fleet calibrate: arm named fleet.json")
def _(fx, case):
    return _fleet(fx, case, "arm,sessions\nfleet.json,sessions/arm1\n")


@case("fleet calibrate: more cells than columns")
def _(fx, case):
    return _fleet(fx, case, "arm,sessions,options\narm1,sessions/arm1,--deflection,none\n")


@case("fleet calibrate: --out exists")
def _(fx, case):
    (case / "out").mkdir()
    (case / "out" / "mine.txt").write_text("mine\n")
    return _fleet(fx, case)


@case("fleet calibrate: --out parent is a file")
def _(fx, case):
    argv = _fleet(fx, case)
    return argv[:-1] + [_s(file_parent_out(case))]


@case("fleet calibrate: --resume with nothing to resume")
def _(fx, case):
    return _fleet(fx, case, None, "--resume")


@case("fleet calibrate: --resume a folder that is not a fleet")
def _(fx, case):
    (case / "out").mkdir()
    (case / "out" / "notes.txt").write_text("mine\n")
    return _fleet(fx, case, None, "--resume")


@case("fleet calibrate: --resume a self-model fleet")
def _(fx, case):
    (case / "out").mkdir()
    (case / "out" / "fleet.json").write_text('{"format": "selfcal-fleet", "format_version": 1, "job": "selfmodel", '
                                             '"arms": {}}\n')
    return _fleet(fx, case, None, "--resume")


@case("fleet calibrate: --resume a damaged fleet.json")
def _(fx, case):
    (case / "out").mkdir()
    (case / "out" / "fleet.json").write_text('{"format": "selfcal-fleet", "arms": {')
    return _fleet(fx, case, None, "--resume")


@case("fleet calibrate: --cpus-per-arm 0")
def _(fx, case):
    return _fleet(fx, case, None, "--cpus-per-arm", "0")


@case("fleet calibrate: --cpus 0")
def _(fx, case):
    return _fleet(fx, case, None, "--cpus", "0")


@case("fleet calibrate: --cpus with --address")
def _(fx, case):
    return _fleet(fx, case, None, "--cpus", "2", "--address", "auto")


@case("fleet calibrate: --address empty")
def _(fx, case):
    return _fleet(fx, case, None, "--address", " ")


@case("fleet calibrate: --cpus-per-arm is text")
def _(fx, case):
    return _fleet(fx, case, None, "--cpus-per-arm", "two")


@case("fleet selfmodel: table missing")
def _(fx, case):
    return ["fleet", "selfmodel", _s(case / "fleet.csv"), "--out", _s(case / "out")]


@case("fleet selfmodel: header without arm")
def _(fx, case):
    return _fleet(fx, case, "name,sessions\nbox,sessions/arm1\n", command="selfmodel")


@case("fleet selfmodel: --resume a calibration fleet")
def _(fx, case):
    (case / "out").mkdir()
    (case / "out" / "fleet.json").write_text('{"format": "selfcal-fleet", "format_version": 1, "job": "calibrate", '
                                             '"arms": {}}\n')
    return _fleet(fx, case, None, "--resume", command="selfmodel")


@case("fleet selfmodel: --cpus-per-arm negative")
def _(fx, case):
    return _fleet(fx, case, None, "--cpus-per-arm", "-1", command="selfmodel")


# every file selfcal reads: its format version, its units, each block's type, the truth files -----
# (a file from a newer selfcal is refused by name; a truth file is read like every other file)

def newer_version(path: Path) -> None:
    """Set the document's format_version to 99, as a file from a newer selfcal (JSON or YAML)."""
    import yaml

    if path.suffix == ".json":
        edit_json(path, lambda d: d.update(format_version=99))
    else:
        document = yaml.safe_load(path.read_text())
        document["format_version"] = 99
        path.write_text(yaml.safe_dump(document, sort_keys=False))


def edit_yaml(path: Path, change: Callable[[dict], None]) -> None:
    import yaml

    document = yaml.safe_load(path.read_text())
    change(document)
    path.write_text(yaml.safe_dump(document, sort_keys=False))


@case("calibrate: session.json of a newer format version")
def _(fx, case):
    return _calibrate(fx, case, lambda s: newer_version(s / "session.json"))


@case("calibrate: session.json states lengths in mm")
def _(fx, case):
    return _calibrate(fx, case, lambda s: edit_json(s / "session.json", lambda d: d["units"].update(length="mm")))


@case("calibrate: session.json states angles in degrees")
def _(fx, case):
    return _calibrate(fx, case, lambda s: edit_json(s / "session.json", lambda d: d["units"].update(angle="deg")))


@contextlib.contextmanager
def _appears_at_out(out: Path):
    """While the command runs, a colleague makes ``out`` just before the finished results are renamed
    there; yields what the colleague made (relative to the case folder), which must stay as it is."""
    from unittest import mock

    import rigs.files

    original = rigs.files.rename_no_replace
    made: list[str] = []

    def rename(source, target):
        if Path(target) == out and not out.exists():
            out.mkdir()
            (out / "notes.txt").write_text("a colleague's\n")
            made.extend([out.name, os.path.join(out.name, "notes.txt")])
        return original(source, target)
    with mock.patch.object(rigs.files, "rename_no_replace", rename):
        yield made


@case("calibrate: --out appears while it writes", during=lambda fx, case: _appears_at_out(case / "out"))
def _(fx, case):
    return ["calibrate", _s(fx.session), "--out", _s(case / "out"), "--deflection", "none", "--holdout", "0"]


@case("validate: calibration.yaml of a newer format version")
def _(fx, case):
    return _validate(fx, case, lambda c: newer_version(c / "calibration.yaml"))


@case("validate: calibration.yaml states lengths in mm")
def _(fx, case):
    return _validate(fx, case, lambda c: edit_yaml(c / "calibration.yaml", lambda d: d["units"].update(length="mm")))


@case("validate: calibration.yaml deflection.compliance is text")
def _(fx, case):
    return _validate(fx, case, lambda c: edit_yaml(c / "calibration.yaml", lambda d: d.update(
        deflection={"mode": "compliance", "compliance": "stiff"})))


@case("validate: calibration.yaml a joint's compliance is text")
def _(fx, case):
    joints = {name: {"compliance": 1e-6} for name in IIWA_JOINTS}
    joints[IIWA_JOINTS[1]] = {"compliance": "soft"}
    return _validate(fx, case, lambda c: edit_yaml(c / "calibration.yaml", lambda d: d.update(
        deflection={"mode": "compliance", "compliance": {"joints": joints}})))


@case("validate: calibration.yaml residuals block is text")
def _(fx, case):
    return _validate(fx, case, lambda c: edit_yaml(c / "calibration.yaml", lambda d: d.update(residuals="small")))


def _with_residual(fx, case, edit: Callable[[Path], None]) -> Path:
    """A copy of the calibration with a small learned residual (residual/) beside it, then ``edit``ed."""
    from calib.calibration import Calibration
    from calib.deflection.residual_model import ResidualConfig, ResidualEnsemble, features
    from calib.deflection.torques import gravity_torques
    from capture.session import load_session

    calibration = copy(fx.calibration, case, "cal")
    chain = Calibration.load(calibration).chain
    q = load_session(fx.session).q
    raw = features(chain, q, gravity_torques(chain, q, np.zeros(len(q)), np.zeros(3)))
    model = ResidualEnsemble(ResidualConfig(members=2, hidden=4, layers=1, epochs=2)).fit(
        raw, np.random.default_rng(0).normal(0.0, 1e-4, (len(q), 3)))
    model.save(calibration / "residual")
    edit_yaml(calibration / "calibration.yaml", lambda d: d.update(deflection={
        "mode": "learned", "learned_residual": {"folder": "residual", "bound_m": model.bound_m, "members": 2}}))
    edit(calibration)
    return calibration


@case("predict: residual.pt empty")
def _(fx, case):
    calibration = _with_residual(fx, case, lambda c: (c / "residual" / "residual.pt").write_bytes(b""))
    return ["predict", _s(calibration), "--joints", _s(fx.joints)]


@case("predict: residual.json of a newer format version")
def _(fx, case):
    calibration = _with_residual(fx, case, lambda c: newer_version(c / "residual" / "residual.json"))
    return ["predict", _s(calibration), "--joints", _s(fx.joints)]


@case("predict: residual.json bound is text")
def _(fx, case):
    calibration = _with_residual(fx, case, lambda c: edit_json(c / "residual" / "residual.json",
                                                               lambda d: d.update(bound_m="1 mm")))
    return ["predict", _s(calibration), "--joints", _s(fx.joints)]


@case("recalibrate: --previous of a newer format version")
def _(fx, case):
    calibration = _cal(fx, case, lambda c: newer_version(c / "calibration.yaml"))
    return ["recalibrate", _s(fx.session), "--previous", _s(calibration), "--out", _s(case / "out")]


@case("audit report: cycle column holds text")
def _(fx, case):
    session = _session(fx, case, lambda s: edit_cell(s / "joints.csv", 3, "cycle", "first"), fx.audit)
    return ["audit", "report", _s(session), "--out", _s(case / "out")]


@case("audit report: a pose twice in one cycle")
def _(fx, case):
    session = _session(fx, case, lambda s: edit_cell(s / "joints.csv", 6, "cycle", "1"), fx.audit)
    return ["audit", "report", _s(session), "--out", _s(case / "out")]


@case("selfmodel eval: truth/joints_reached.csv cut off mid-row")
def _(fx, case):
    def cut(s):
        path = s / "truth" / "joints_reached.csv"
        lines = path.read_text().splitlines()
        lines[-1] = lines[-1][:lines[-1].index(",") + 3]  # the pose and the first digits of its first joint
        path.write_text("\n".join(lines) + "\n")
    session = _session(fx, case, cut, fx.box)
    return ["selfmodel", "eval", _s(fx.model), _s(session), "--poses", "1", "--voxel-mm", "20"]


@case("selfmodel eval: truth/joints_reached.csv cell not a number")
def _(fx, case):
    def edit(s):
        path = s / "truth" / "joints_reached.csv"
        edit_cell(path, 0, path.read_text().splitlines()[0].split(",")[1], "n/a")
    session = _session(fx, case, edit, fx.box)
    return ["selfmodel", "eval", _s(fx.model), _s(session), "--poses", "1", "--voxel-mm", "20"]


@case("selfmodel eval: truth/parameters.json not UTF-8")
def _(fx, case):
    def edit(s):
        path = s / "truth" / "parameters.json"
        path.write_bytes(path.read_bytes().replace(b'"joints"', b'"\xe9joints"', 1))
    session = _session(fx, case, edit, fx.box)
    return ["selfmodel", "eval", _s(fx.model), _s(session), "--poses", "1", "--voxel-mm", "20"]


@case("selfmodel eval: config.json of a newer format version")
def _(fx, case):
    return _eval(fx, case, lambda m: newer_version(m / "config.json"))


@case("dynamics payload: dynamics.yaml of a newer format version")
def _(fx, case):
    (case / "dynamics").mkdir()
    (case / "dynamics" / "dynamics.yaml").write_text("format: selfcal-dynamics\nformat_version: 99\n")
    return ["dynamics", "payload", _s(fx.session), "--dynamics", _s(case / "dynamics")]


@case("selfmodel train: camera_info.yaml not UTF-8")
def _(fx, case):
    session = _session(fx, case, lambda s: latin1_byte(s / "cameras" / "front" / "camera_info.yaml"), fx.box)
    return _train(fx, case, session=session)


@case("selfmodel train: camera_info.yaml distortion block is text")
def _(fx, case):
    session = _session(fx, case, lambda s: edit_yaml(s / "cameras" / "front" / "camera_info.yaml",
                                                     lambda d: d.update(distortion_coefficients="none")), fx.box)
    return _train(fx, case, session=session)


@case("import images: pose.yaml not UTF-8")
def _(fx, case):
    folder = copy(fx.camera_folder, case)
    (folder / "cameras" / "front" / "pose.yaml").write_bytes(b"# 12\xb0 C\nframe: optical\nxyz: [1, 0, 1]\n"
                                                             b"quat_xyzw: [0, 0, 0, 1]\n")
    return _images(fx, case, folder=folder)


@case("import images: pose.yaml is a list")
def _(fx, case):
    folder = copy(fx.camera_folder, case)
    (folder / "cameras" / "front" / "pose.yaml").write_text("- 1\n- 0\n- 1\n")
    return _images(fx, case, folder=folder)


@case("fleet calibrate: --resume a fleet.json of a newer version")
def _(fx, case):
    (case / "out").mkdir()
    (case / "out" / "fleet.json").write_text('{"format": "selfcal-fleet", "format_version": 99, "job": "calibrate", '
                                             '"arms": {}}\n')
    return _fleet(fx, case, None, "--resume")


@case("view: a session folder, not a result")
def _(fx, case):
    return ["view", _s(copy(fx.session, case)), "--no-browser"]


@case("view: calibration.yaml is not YAML")
def _(fx, case):
    folder = copy(fx.calibration, case)
    (folder / "calibration.yaml").write_text("format: selfcal-calibration\njoints: [unclosed\n")
    return ["view", _s(folder), "--no-browser"]


@case("view: a self-model whose weights are missing")
def _(fx, case):
    folder = copy(fx.model, case)
    (folder / "weights.pt").unlink()
    return ["view", _s(folder), "--no-browser"]


@case("view: a collision export without curobo_spheres.yml")
def _(fx, case):
    folder = copy(Path(__file__).parent / "data" / "view" / "collision", case)
    (folder / "curobo_spheres.yml").unlink()
    return ["view", _s(folder), "--no-browser"]


@case("view: --port out of range")
def _(fx, case):
    return ["view", _s(copy(fx.calibration, case)), "--no-browser", "--port", "0"]


# -- running a case -------------------------------------------------------------------------------

@dataclass
class Outcome:
    case: str
    verdict: str  # clean, traceback, accepted, half-written, outside-read, unclear
    exit_code: int
    message: str
    left: list[str] = field(default_factory=list)
    secret_reads: list[str] = field(default_factory=list)


def _listing(folder: Path) -> set[str]:
    return {os.path.relpath(os.path.join(d, n), folder) for d, dirs, files in os.walk(folder) for n in dirs + files}


class _SecretWatch:
    """Python's audit hook, gated: records opens of files in ``secret`` (symbolic links followed)."""

    active: Path | None = None
    seen: list[str] = []
    installed = False

    @classmethod
    def install(cls) -> None:
        if not cls.installed:
            sys.addaudithook(cls._hook)
            cls.installed = True

    @classmethod
    def _hook(cls, event: str, args) -> None:
        if cls.active is None or event not in ("open", "os.listdir", "shutil.copyfile"):
            return
        for candidate in args[:2]:
            if isinstance(candidate, (str, bytes, os.PathLike)) and not isinstance(candidate, int):
                try:
                    path = os.path.realpath(os.fsdecode(candidate))
                except (TypeError, ValueError):
                    continue
                if path.startswith(str(cls.active)):
                    cls.seen.append(path)


def run_case(case: Case, fixtures: Fixtures, workdir: Path) -> Outcome:
    """Make the case's input in a fresh folder under ``workdir``, run the command, judge it."""
    from typer.testing import CliRunner

    from selfcal.cli import app

    folder = workdir / case.name.replace(":", "").replace(" ", "_").replace("/", "_")
    folder.mkdir(parents=True)
    argv = case.make(fixtures, folder)
    before = _listing(folder)
    fixture_before = {p.name for p in fixtures.root.iterdir()}
    _SecretWatch.install()
    _SecretWatch.seen = []
    _SecretWatch.active = fixtures.secret.resolve()
    meanwhile = case.during(fixtures, folder) if case.during is not None else contextlib.nullcontext()
    try:
        with meanwhile as others:
            result = CliRunner().invoke(app, argv)
    finally:
        _SecretWatch.active = None
    others = set(others or ())  # what someone else made meanwhile: theirs, to be left exactly there
    after = _listing(folder)
    left = sorted((after - before - others) | {f"(removed) {p}" for p in (before | others) - after})
    left += sorted(f"(beside the fixtures) {p}" for p in {p.name for p in fixtures.root.iterdir()} - fixture_before)
    stray = Path("/sys/selfcal-bad-input-out")
    if stray.exists():
        left.append(str(stray))
    message = (result.stderr or "").strip()
    crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
    if crashed or "Traceback" in result.output or "Traceback" in message:
        verdict = "traceback"
        message = f"{type(result.exception).__name__}: {result.exception}" if crashed else message
    elif result.exit_code == 0:
        verdict = "accepted"
    elif _SecretWatch.seen:
        verdict = "outside-read"
    elif left:
        verdict = "half-written"
    elif result.exit_code != 2 or "\n" in message or not message.startswith("error: "):
        verdict = "unclear"
    else:
        verdict = "clean"
    return Outcome(case.name, verdict, result.exit_code, message, left, sorted(set(_SecretWatch.seen)))
