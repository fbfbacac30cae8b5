"""The command line follows the conventions a new user expects from any Unix tool."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
import typing

import pytest
from typer.testing import CliRunner

from selfcal import options
from selfcal.cli import app
from selfcal.ui import count_text

runner = CliRunner()


def test_version_alone_prints_the_version_and_exits_0():
    from rigs.version import VERSION

    process = subprocess.run([sys.executable, "-m", "selfcal.cli", "--version"], capture_output=True, text=True)
    assert process.returncode == 0, process.stderr
    assert process.stdout.strip() == f"selfcal {VERSION}"


@pytest.mark.parametrize("command", [["calibrate"], ["audit", "report"], ["selfmodel", "check"], []])
def test_boolean_flags_are_shown_without_a_value(command):
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output
    assert "--help" in result.output


def test_fixed_values_are_listed_in_help_and_others_are_refused_by_the_parser(tmp_path):
    result = runner.invoke(app, ["calibrate", "--help"], env={"COLUMNS": "250"})
    assert "auto|none|compliance|learned|both" in result.output and "full|offsets" in result.output
    result = runner.invoke(app, ["calibrate", str(tmp_path), "--out", str(tmp_path / "cal"), "--deflection", "wobbly"])
    assert result.exit_code == 2
    assert "'wobbly' is not one of" in result.output and "--deflection" in result.output
    assert not (tmp_path / "cal").exists()
    result = runner.invoke(app, ["selfmodel", "train", str(tmp_path), "--out", str(tmp_path / "m"), "--kind", "big"])
    assert result.exit_code == 2 and "'big' is not one of" in result.output


def _choices(alias) -> tuple:
    args = typing.get_args(alias)
    return args


def test_listed_choices_are_the_rooms_own():
    from calib.deflection.modes import MODES
    from calib.model.error_model import MODEL_KINDS
    from capture.importers.assemble import MATCHES
    from capture.importers.camera_import import POSE_SOURCES
    from capture.importers.poses6d import ROTATIONS
    from capture.importers.tf_static import CONVENTIONS
    from capture.importers.units import ANGLE_UNITS, LENGTH_UNITS
    from selfmodel.learn.placement import PLACEMENTS
    from selfmodel.learn.trainer import KINDS

    assert set(_choices(options.Deflection)) == {"auto", *MODES}
    assert set(_choices(options.CalibrationModel)) == set(MODEL_KINDS)
    assert set(_choices(options.SelfModelKind)) == set(KINDS)
    assert set(_choices(options.Placements)) == set(PLACEMENTS)
    assert set(_choices(options.AngleUnit)) == set(ANGLE_UNITS)
    assert set(_choices(options.LengthUnit)) == set(LENGTH_UNITS)
    assert set(_choices(options.Rotation)) == set(ROTATIONS)
    assert set(_choices(options.Match)) == set(MATCHES)
    assert set(_choices(options.FrameConvention)) == set(CONVENTIONS)
    assert set(_choices(options.CameraPoses)) == set(POSE_SOURCES)


def test_progress_counts_name_their_unit_and_never_show_an_unknown_total():
    assert count_text(11, 40, "poses") == "11/40 poses"
    assert count_text(11, None, "stages") == "11 stages"
    assert "?" not in count_text(3, 0, "steps")


def test_curobo_spheres_are_yaml_any_parser_reads():
    import numpy as np
    import yaml

    from selfmodel.export.curobo import dump, spheres_document

    class Spheres:
        centres = np.array([[0.1, 0.2, 0.3], [0.0, -0.05, 1e-7]])
        radii = np.array([0.05, 0.02])

    data = yaml.safe_load(dump(spheres_document({"link: one": Spheres()})))  # a name YAML must quote
    assert data["collision_spheres"]["link: one"][1] == {"center": [0.0, -0.05, 0.0], "radius": 0.02}


# -- files that open where they are --------------------------------------------------------------

def _pinocchio_geometry(urdf, package_dirs, cwd):
    """Collision geometry loaded by Pinocchio in a child process run from ``cwd``."""
    code = ("import sys, pinocchio as pin; m = pin.buildModelFromUrdf(sys.argv[1]); "
            "g = pin.buildGeomFromUrdf(m, sys.argv[1], pin.GeometryType.COLLISION, package_dirs=sys.argv[2:]); "
            "print(g.ngeoms)")
    return subprocess.run([sys.executable, "-c", code, str(urdf), *map(str, package_dirs)], cwd=cwd,
                          capture_output=True, text=True)


def test_a_calibrated_urdf_loads_in_pinocchio_from_anywhere_as_its_report_says(capture_session, tmp_path):
    import shutil

    session = capture_session("iiwa-tracker", 40, 1)
    out = tmp_path / "cal"
    result = runner.invoke(app, ["calibrate", str(session), "--out", str(out), "--deflection", "none"])
    assert result.exit_code == 0, result.output
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    loaded = _pinocchio_geometry(out / "robot.urdf", [out], elsewhere)
    assert loaded.returncode == 0 and int(loaded.stdout) >= 7, loaded.stderr
    assert "package_dirs=[FOLDER]" in (out / "report.html").read_text()

    packaged = tmp_path / "packaged"
    result = runner.invoke(app, ["calibrate", str(session), "--out", str(packaged), "--deflection", "none",
                                 "--ros-package", "iiwa_description/calibration"])
    assert result.exit_code == 0, result.output
    text = (packaged / "robot.urdf").read_text()
    assert 'filename="package://iiwa_description/calibration/meshes/' in text and 'filename="meshes/' not in text
    workspace = tmp_path / "ws" / "src"
    shutil.copytree(packaged, workspace / "iiwa_description" / "calibration")
    urdf = workspace / "iiwa_description" / "calibration" / "robot.urdf"
    loaded = _pinocchio_geometry(urdf, [workspace], elsewhere)
    assert loaded.returncode == 0 and int(loaded.stdout) >= 7, loaded.stderr

    result = runner.invoke(app, ["calibrate", str(session), "--out", str(tmp_path / "bad"), "--ros-package", "../up"])
    assert result.exit_code == 2 and "--ros-package" in result.output and not (tmp_path / "bad").exists()


def test_corrected_joints_are_csv_any_reader_splits_right(capture_session, tmp_path):
    """A target name with a comma comes back whole (the csv module quotes it)."""
    import numpy as np

    from capture.session import load_session

    session = capture_session("iiwa-tracker", 40, 1)
    cal = tmp_path / "cal"
    assert runner.invoke(app, ["calibrate", str(session), "--out", str(cal), "--deflection", "none"]).exit_code == 0
    loaded = load_session(session)
    from rigs.kinematics import ArmModel

    chain = ArmModel.from_urdf(loaded.urdf_path, loaded.base_link, loaded.tip_link)
    tip = chain.base_T_tip_batch(loaded.q[:2])[:, :3, 3]
    targets = tmp_path / "targets.csv"
    with open(targets, "w", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["name", "x", "y", "z"])
        writer.writerow(["weld, seam 1", *tip[0]])
        writer.writerow(['hole "A"', *tip[1]])
    result = runner.invoke(app, ["correct", str(cal), "--targets", str(targets), "--out", str(tmp_path / "q.csv")])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(open(tmp_path / "q.csv", newline="")))
    assert [row["name"] for row in rows] == ["weld, seam 1", 'hole "A"']
    assert np.isfinite(float(rows[0]["residual_m"]))
