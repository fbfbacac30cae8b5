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
    from selfmodel.training import KINDS

    assert set(_choices(options.Deflection)) == {"auto", *MODES}
    assert set(_choices(options.CalibrationModel)) == set(MODEL_KINDS)
    assert set(_choices(options.SelfModelKind)) == set(KINDS)
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

    from selfmodel.export import curobo_spheres_yaml

    class Spheres:
        centres = np.array([[0.1, 0.2, 0.3], [0.0, -0.05, 1e-7]])
        radii = np.array([0.05, 0.02])

    class Link:
        spheres = Spheres()

    class Export:
        links = {"link: one": Link()}  # a name YAML must quote
        margin = 0.002

    data = yaml.safe_load(curobo_spheres_yaml(Export()))
    assert data["collision_spheres"]["link: one"][1] == {"center": [0.0, -0.05, 0.0], "radius": 0.02}
