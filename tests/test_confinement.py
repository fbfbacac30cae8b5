"""Files are confined: a URDF, a session, a calibration or a model folder names only files of its own
folder (or a --package-dir the user gave), and XML never expands an entity, whatever its encoding.

A colleague's URDF whose meshes point at /etc/passwd, ../ or a symbolic link out of the folder is
refused with a sentence, and nothing of what it points at is copied or read; the same URDF with its
meshes where they belong imports as it always did.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rigs import urdf as urdf_io
from rigs.errors import InputError
from selfcal.cli import app

DATA = Path(__file__).parent / "data"
IMPORT = DATA / "import"
runner = CliRunner()


@pytest.fixture
def arm(tmp_path) -> tuple[Path, Path]:
    """arm3's URDF folder and its mesh package, copied to edit."""
    shutil.copytree(IMPORT / "robot", tmp_path / "robot")
    shutil.copytree(IMPORT / "packages", tmp_path / "packages")
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    return tmp_path / "robot" / "arm3.urdf", tmp_path / "packages"


def imported(urdf: Path, packages: Path, out: Path):
    return runner.invoke(app, ["import", "tracker", "--urdf", str(urdf), "--base-link", "base_link", "--tip-link", "tool0",
                               "--package-dir", str(packages), "--joints", str(IMPORT / "joints_deg.csv"),
                               "--points", str(IMPORT / "sa_export.txt"), "--out", str(out)])


def mesh_at(urdf: Path, filename: str) -> None:
    text = urdf.read_text().replace("package://arm3_description/meshes/link.obj", filename)
    urdf.write_text(text)


def test_meshes_inside_the_package_folder_are_copied_and_the_session_is_self_contained(arm, tmp_path):
    urdf, packages = arm
    result = imported(urdf, packages, tmp_path / "s")
    assert result.exit_code == 0, result.stderr
    copied = sorted(p.name for p in (tmp_path / "s" / "meshes").iterdir())
    assert copied == ["00_link.obj"]
    assert (tmp_path / "s" / "meshes" / "00_link.obj").read_bytes() == (packages / "arm3_description" / "meshes" / "link.obj").read_bytes()


@pytest.mark.parametrize("where", ["/etc/passwd", "absolute", "../", "file://", "symlink", "package-escape"])
def test_a_mesh_that_leads_out_of_its_folders_is_refused_and_never_copied(arm, tmp_path, where):
    urdf, packages = arm
    secret = tmp_path / "secret" / "passwd"
    if where == "/etc/passwd":
        mesh_at(urdf, "/etc/passwd")
    elif where == "absolute":
        mesh_at(urdf, str(secret))
    elif where == "../":
        mesh_at(urdf, "../secret/passwd")
    elif where == "file://":
        mesh_at(urdf, f"file://{secret}")
    elif where == "symlink":
        mesh = packages / "arm3_description" / "meshes" / "link.obj"
        mesh.unlink()
        mesh.symlink_to(secret)
    else:
        mesh_at(urdf, "package://arm3_description/../../secret/passwd")
    result = imported(urdf, packages, tmp_path / "s")
    assert result.exit_code == 2, result.stdout
    assert "refusing to read it" in result.stderr and str(urdf) in result.stderr
    assert not (tmp_path / "s").exists()
    copies = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink() and p != secret
              and p.read_bytes() == secret.read_bytes()]
    assert copies == []


def test_a_symlink_that_stays_inside_the_folder_is_fine(arm, tmp_path):
    urdf, packages = arm
    meshes = packages / "arm3_description" / "meshes"
    (meshes / "link.obj").rename(meshes / "real.obj")
    (meshes / "link.obj").symlink_to(meshes / "real.obj")
    assert imported(urdf, packages, tmp_path / "s").exit_code == 0


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-16-be", "utf-32"])
def test_no_entity_is_expanded_in_any_encoding(tmp_path, encoding):
    body = (IMPORT / "robot" / "arm3.urdf").read_text()
    body = body[body.index("<robot"):].replace('<robot name="arm3">', '<robot name="&who;">', 1)
    declared = f'<?xml version="1.0" encoding="{encoding.upper()}"?>\n<!DOCTYPE robot [<!ENTITY who "expanded">]>\n'
    hostile = tmp_path / "hostile.urdf"
    hostile.write_bytes((declared + body).encode(encoding))
    # Refused: for a DOCTYPE where the parser reads the encoding, as unreadable where it cannot.
    refusal = "refuses to expand" if encoding in ("utf-8", "utf-16") else "refuses to expand|not a readable XML file"
    with pytest.raises(InputError, match=refusal):
        urdf_io.parse_urdf(hostile)
    if encoding in ("utf-8", "utf-16"):  # the same file without its DOCTYPE reads, in that encoding
        plain = tmp_path / "plain.urdf"
        plain.write_bytes((f'<?xml version="1.0" encoding="{encoding.upper()}"?>\n'
                           + body.replace("&who;", "arm3")).encode(encoding))
        assert urdf_io.parse_urdf(plain).getroot().get("name") == "arm3"


def test_pinocchio_reads_what_was_checked_not_the_file_again(tmp_path):
    from rigs.kinematics import ArmModel

    body = (IMPORT / "robot" / "arm3.urdf").read_text()
    utf16 = tmp_path / "arm3.urdf"
    utf16.write_bytes(('<?xml version="1.0" encoding="UTF-16"?>\n' + body[body.index("<robot"):]).encode("utf-16"))
    chain = ArmModel.from_urdf(utf16, "base_link", "tool0")
    assert chain.joint_names == ["shoulder_pan", "shoulder_lift", "elbow"]


def test_a_calibration_names_only_its_own_robot_urdf(iiwa_session, tmp_path):
    result = runner.invoke(app, ["calibrate", str(iiwa_session), "--out", str(tmp_path / "cal"), "--holdout", "0",
                                 "--deflection", "none"])
    assert result.exit_code == 0, result.stderr
    shutil.copyfile(tmp_path / "cal" / "robot.urdf", tmp_path / "elsewhere.urdf")
    yaml_path = tmp_path / "cal" / "calibration.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("urdf: robot.urdf", "urdf: ../elsewhere.urdf"))
    result = runner.invoke(app, ["validate", str(tmp_path / "cal"), str(iiwa_session)])
    assert result.exit_code == 2 and "key 'robot.urdf'" in result.stderr and "leads outside" in result.stderr


def test_a_model_names_only_its_own_urdf_and_check_reads_meshes_beside_its_urdf(tmp_path):
    from capture.simulate import capture_simulated
    from rigs import load_rig
    from rigs.link_meshes import link_meshes
    from selfmodel.model.models import SelfModel

    session = capture_simulated(load_rig(DATA / "selfmodel" / "two_joint_box.toml"), 3, 1, tmp_path / "box")
    result = runner.invoke(app, ["selfmodel", "train", str(session), "--out", str(tmp_path / "model"), "--steps", "2",
                                 "--threads", "1"])
    assert result.exit_code == 0, result.stderr
    config = tmp_path / "model" / "config.json"
    document = json.loads(config.read_text())
    document["urdf"] = "../box/robot.urdf"
    config.write_text(json.dumps(document))
    with pytest.raises(InputError, match="key 'urdf'.*leads outside"):
        SelfModel.load(tmp_path / "model")

    # `selfmodel check --urdf`: a mesh next to the URDF loads, one in a sibling folder does not.
    (tmp_path / "description").mkdir()
    (tmp_path / "other").mkdir()
    box = "v 0 0 0\nv 0.1 0 0\nv 0 0.1 0\nv 0 0 0.1\nf 1 3 2\nf 1 2 4\nf 1 4 3\nf 2 3 4\n"
    (tmp_path / "description" / "box.obj").write_text(box)
    (tmp_path / "other" / "box.obj").write_text(box)
    text = (session / "robot.urdf").read_text()
    beside, outside = (tmp_path / "description" / name for name in ("beside.urdf", "outside.urdf"))
    beside.write_text(text.replace("<box size=", '<mesh filename="box.obj"/><box size=', 1))
    outside.write_text(text.replace("<box size=", '<mesh filename="../other/box.obj"/><box size=', 1))
    assert link_meshes(beside)
    with pytest.raises(InputError, match="outside the URDF's own folder"):
        link_meshes(outside)
