"""No data is ever deleted without --force.

Output folders are built under a temporary name and renamed into place with a rename that never
replaces anything; a folder that appears at --out while a command runs (a colleague's, a second
run's) is left as it is and the command stops with nothing left behind; a second run while the first is still
writing stops with a sentence; a killed run's temporary folder is cleaned by the next run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rigs.errors import InputError
from rigs.files import check_new_output, output_folder, rename_no_replace, temporaries
from selfcal.cli import app

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def test_a_folder_that_appears_meanwhile_is_never_removed(tmp_path):
    out = tmp_path / "cal"
    with pytest.raises(InputError, match="appeared while this command ran") as refused:
        with output_folder(out) as folder:
            (folder / "calibration.yaml").write_text("new\n")
            out.mkdir()  # a colleague's folder, while the fit runs
            (out / "notes.txt").write_text("mine\n")
    assert (out / "notes.txt").read_text() == "mine\n" and sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    # Nothing beside it either: the results could name their own folder, so a copy elsewhere would mislead.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal"]
    assert "these results were not written" in str(refused.value)
    assert temporaries(out) == []


def test_even_an_empty_folder_that_appears_is_not_replaced(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(InputError):
        with output_folder(out, force=True) as folder:  # --force replaces what was there at the start: nothing
            (folder / "a").write_text("new\n")
            out.mkdir()
    assert out.is_dir() and list(out.iterdir()) == []
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    with pytest.raises(FileExistsError):
        rename_no_replace(tmp_path / "x", tmp_path / "y")


def test_force_replaces_the_folder_that_was_there(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old\n")
    with pytest.raises(InputError, match="already exists; choose another out or pass force"):
        with output_folder(out):
            pass
    assert (out / "old.txt").is_file()
    with output_folder(out, force=True) as folder:
        (folder / "new.txt").write_text("new\n")
    assert sorted(p.name for p in out.iterdir()) == ["new.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_second_run_while_the_first_writes_stops_with_a_sentence(tmp_path):
    out = tmp_path / "model"
    with output_folder(out) as folder:
        (folder / "config.json").write_text("{}\n")
        with pytest.raises(InputError, match="another selfcal command is writing it now"):
            check_new_output(out)
        result = runner.invoke(app, ["selfmodel", "export", str(tmp_path / "whatever"), "--out", str(out)])
        assert result.exit_code == 2 and "another selfcal command is writing it now" in result.stderr
    assert (out / "config.json").is_file()


def test_a_killed_runs_temporary_folder_is_cleaned_by_the_next_run(tmp_path):
    out = tmp_path / "cal"
    script = textwrap.dedent(f"""
        import os
        from rigs.files import output_folder
        with output_folder({str(out)!r}) as folder:
            (folder / "half.yaml").write_text("half")
            os._exit(9)
    """)
    killed = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert killed.returncode == 9, killed.stderr
    leftovers = temporaries(out)
    assert len(leftovers) == 1 and (leftovers[0] / "half.yaml").is_file()
    with output_folder(out) as folder:
        (folder / "calibration.yaml").write_text("whole\n")
    assert temporaries(out) == [] and sorted(os.listdir(tmp_path)) == ["cal"]


def test_single_file_outputs_are_not_overwritten_without_force(tmp_path):
    plan = tmp_path / "plan.csv"
    plan.write_text("my hand-made plan\n")
    argv = ["plan", "--rig", "iiwa-tracker", "--poses", "3", "--out", str(plan)]
    result = runner.invoke(app, argv)
    assert result.exit_code == 2 and "pass --force" in result.stderr
    assert plan.read_text() == "my hand-made plan\n"
    assert runner.invoke(app, [*argv, "--force"]).exit_code == 0
    assert plan.read_text().startswith("pose,")
    assert sorted(os.listdir(tmp_path)) == ["plan.csv"]


def test_a_refused_command_leaves_no_parent_folders_behind(iiwa_session, tmp_path):
    out = tmp_path / "new" / "deeper" / "cal"
    result = runner.invoke(app, ["calibrate", str(iiwa_session), "--out", str(out), "--holdout", "1.5"])
    assert result.exit_code == 2
    assert list(tmp_path.iterdir()) == []
