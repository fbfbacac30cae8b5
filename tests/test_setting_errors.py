"""The library speaks in its own terms: a Python caller who gets a setting wrong reads the keyword
they passed (``cycles``), a command-line user the flag they typed (``--cycles``); no library module
writes a flag into its refusals."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from capture.sweeps import parse_joint_ranges, sweep_plan
from cli_runs import fails
from rigs.errors import InputError, setting

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ("calib", "capture", "rigs", "selfmodel")
FLAG = re.compile(r"(?<![\w-])--[a-z]")


def test_a_library_call_names_the_keyword_it_was_given():
    with pytest.raises(InputError) as refused:
        sweep_plan(["a", "b"], np.array([-1.0, -1.0]), np.array([1.0, 1.0]), steps=2, random_count=0, seed=0)
    assert str(refused.value) == "steps must be at least 3, got 2."
    assert refused.value.settings == ("steps",)


def test_a_sentence_may_name_several_settings_and_reads_them_all_as_keywords():
    error = InputError(f"no photo stood still; check {setting('still')} and {setting('still_window')}.")
    assert str(error) == "no photo stood still; check still and still_window."
    assert error.settings == ("still", "still_window")
    assert error.in_terms(lambda name: "--" + name.replace("_", "-")) == \
        "no photo stood still; check --still and --still-window."


def test_a_setting_is_a_python_name():
    with pytest.raises(ValueError):
        setting("--cycles")


def test_the_same_mistake_on_the_command_line_names_the_flag(tmp_path):
    message = fails("plan", "--sweeps", "--joint", "a=-1:1", "--joint", "b=-1:1", "--sweep-steps", "2",
                    "--poses", "4", "--out", tmp_path / "plan.csv")
    # The keyword is ``steps``; the plan command sets it with --sweep-steps.
    assert "error: --sweep-steps must be at least 3, got 2." in message
    assert not (tmp_path / "plan.csv").exists()


def test_a_flag_named_like_its_keyword_is_found_on_the_running_command(tmp_path):
    message = fails("audit", "plan", "--rig", "iiwa-tracker", "--cycles", "1", "--out", tmp_path / "a.csv")
    assert "error: --cycles must be at least 2" in message


def test_a_keyword_read_by_another_option_name_is_named_by_its_flag(tmp_path):
    with pytest.raises(InputError, match=r"^joint_ranges 'a=1:0': LOWER must be"):
        parse_joint_ranges(["a=1:0"])
    message = fails("plan", "--sweeps", "--joint", "a=1:0", "--poses", "4", "--out", tmp_path / "plan.csv")
    assert "error: --joint 'a=1:0': LOWER must be a finite number below UPPER." in message


def _literal_text(node: ast.AST) -> list[str]:
    """The string constants under ``node`` in source order (f-string pieces included)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    return [text for child in ast.iter_child_nodes(node) for text in _literal_text(child)]


def _flags_in_refusals(path: Path) -> list[str]:
    """Every ``InputError(...)`` in ``path`` whose literal text names a flag outside backticks (a
    backticked command, such as `selfcal import images --board`, is advice to run that command)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "InputError"):
            continue
        text = re.sub(r"`[^`]*`", "", "".join(_literal_text(node)))
        if FLAG.search(text):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text.strip()}")
    return found


def test_no_library_refusal_names_a_command_line_flag():
    found = [hit for package in LIBRARY for path in sorted((ROOT / package).rglob("*.py"))
             for hit in _flags_in_refusals(path)]
    assert found == [], "write the setting with rigs.errors.setting instead:\n" + "\n".join(found)


def test_no_library_refusal_begins_with_a_flag():
    starts = []
    for package in LIBRARY:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "InputError" and node.args:
                    first = node.args[0]
                    while isinstance(first, ast.BinOp):
                        first = first.left
                    if isinstance(first, ast.JoinedStr) and first.values:
                        first = first.values[0]
                    if isinstance(first, ast.Constant) and str(first.value).startswith("--"):
                        starts.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert starts == []


def test_a_refusal_built_around_another_keeps_its_settings():
    inner = InputError(f"package 'arm' not found in the folders given ({setting('package_dirs')}).")
    outer = InputError(f"robot.urdf: {inner.marked}")
    assert str(outer) == "robot.urdf: package 'arm' not found in the folders given (package_dirs)."
    assert outer.settings == ("package_dirs",)


def test_a_bad_export_setting_is_refused_when_the_exporter_is_made_and_named_by_its_flag(tmp_path):
    from selfmodel.export.settings import BodySettings, SphereSettings

    with pytest.raises(InputError) as refused:
        BodySettings(voxel=0.0)
    assert refused.value.settings == ("voxel",)
    with pytest.raises(InputError, match="^max_spheres 0: "):
        SphereSettings(max_spheres=0)
    # The model folder is never read: the settings are refused first.
    message = fails("selfmodel", "export", tmp_path / "no-model", "--out", tmp_path / "collision", "--voxel", "0")
    assert "error: --voxel 0 mm: the grid spacing must be > 0." in message
    message = fails("selfmodel", "export", tmp_path / "no-model", "--out", tmp_path / "collision", "--spheres", "0")
    assert "error: --spheres 0: need at least one sphere a link." in message


def test_a_trainer_refuses_a_bad_setting_when_it_is_made_in_either_terms(tmp_path):
    from selfmodel.learn.trainer import SelfModelTrainer

    urdf = tmp_path / "robot.urdf"
    urdf.write_text("<robot name='r'/>")
    with pytest.raises(InputError) as refused:
        SelfModelTrainer(kind="free", description=urdf)
    assert refused.value.settings == ("description",)
    message = fails("selfmodel", "train", tmp_path / "no-session", "--out", tmp_path / "model", "--threads", "0")
    assert "error: --threads must be at least 1, got 0." in message
