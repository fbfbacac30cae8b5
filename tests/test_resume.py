"""Interrupted work resumes: a capture killed at any moment, even while its folder is being laid
out, comes back with what the user is told to run, and ends identical to an uninterrupted one; a
training killed or interrupted resumes with --resume to the same weights; a refused training
leaves nothing that blocks the next valid run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from selfcal.cli import app

ROOT = Path(__file__).resolve().parent.parent
BOX_RIG = ROOT / "tests" / "data" / "selfmodel" / "two_joint_box.toml"
runner = CliRunner()

# The child counts calls of selfcal's own functions and dies (os._exit, like a SIGKILL: no clean-up
# runs) at call number N. Counting calls, not seconds, puts the kill at the same place on any machine.
KILLED_CAPTURE = textwrap.dedent("""
    import os, sys
    from capture.simulate import capture_simulated
    from rigs import load_rig
    rig = load_rig(sys.argv[1])
    roots = tuple(os.path.join(sys.argv[4], room) for room in ("capture", "rigs"))
    count, limit = 0, int(sys.argv[3])
    def hook(frame, event, arg):
        global count
        if event == "call" and frame.f_code.co_filename.startswith(roots):
            count += 1
            if count >= limit:
                os._exit(9)
    sys.setprofile(hook)
    capture_simulated(rig, 3, 5, sys.argv[2])
    sys.setprofile(None)
    print("finished", count)
""")


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def calls_in_a_capture(out: Path) -> int:
    """How many calls of capture/ and rigs/ functions one uninterrupted capture makes."""
    script = KILLED_CAPTURE.replace("os._exit(9)", "pass")
    result = subprocess.run([sys.executable, "-c", script, str(BOX_RIG), str(out), "10000000000", str(ROOT)],
                            capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[-1])


def recover_as_told(out: Path) -> list[str]:
    """What a user does after the kill: run the same command; when told to, run it with --resume."""
    argv = ["capture", "--rig", str(BOX_RIG), "--poses", "3", "--seed", "5", "--out", str(out)]
    result = runner.invoke(app, argv)
    steps = ["plain"]
    if result.exit_code == 2 and "--resume" in result.stderr:
        assert "run the same command with --resume" in result.stderr, result.stderr
        result = runner.invoke(app, [*argv, "--resume"])
        steps.append("resume")
    assert result.exit_code == 0, (steps, result.stderr, result.exception)
    return steps


def test_a_capture_killed_at_any_moment_comes_back_identical(tmp_path):
    reference = tmp_path / "reference"
    total = calls_in_a_capture(reference)
    expected = files_of(reference)
    # From the first calls (the folder being laid out) to the last (the rename into place); most calls
    # set the simulation up, the poses come in the last fifth.
    moments = sorted({1, 5, 40, total // 4, total // 2, *(int(f * total) for f in (0.7, 0.8, 0.85, 0.9, 0.95, 0.98)),
                      total - 3})
    resumed = 0
    # A killed child cleans nothing up, its scratch copy of the true URDF included: keep that here, not in /tmp.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    for moment in moments:
        out = tmp_path / f"killed-at-{moment}"
        killed = subprocess.run([sys.executable, "-c", KILLED_CAPTURE, str(BOX_RIG), str(out), str(moment), str(ROOT)],
                                capture_output=True, text=True, cwd=ROOT, timeout=300,
                                env={**os.environ, "TMPDIR": str(scratch)})
        assert killed.returncode == 9, (moment, killed.stderr)
        steps = recover_as_told(out)
        resumed += "resume" in steps
        assert files_of(out) == expected, f"killed at call {moment} of {total}, recovered by {steps}"
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(f".killed-at-{moment}")) == [], \
            "a temporary folder was left behind"
        assert not (tmp_path / f"killed-at-{moment}.partial").exists()
    assert resumed >= 4, "the kills during the poses should have left a recording to resume"


def _train(out: Path, session: Path, *extra: str):
    return runner.invoke(app, ["selfmodel", "train", str(session), "--out", str(out), "--steps", "12", "--threads", "1",
                               "--seed", "2", *extra])


@pytest.fixture(scope="module")
def box_session(tmp_path_factory) -> Path:
    from capture.simulate import capture_simulated
    from rigs import load_rig

    return capture_simulated(load_rig(BOX_RIG), 4, 1, tmp_path_factory.mktemp("box") / "box")


def weights(model: Path) -> dict:
    return torch.load(model / "weights.pt", weights_only=True)


def test_an_interrupted_training_resumes_to_the_same_weights(box_session, tmp_path, monkeypatch):
    assert _train(tmp_path / "whole", box_session).exit_code == 0
    original = torch.optim.Adam.step
    calls = {"n": 0}

    def interrupted(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 7:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the run
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", interrupted)
    result = _train(tmp_path / "model", box_session)
    assert result.exit_code == 130
    assert (tmp_path / "model.partial" / "checkpoint.pt").is_file() and not (tmp_path / "model").exists()
    monkeypatch.setattr(torch.optim.Adam, "step", original)

    again = _train(tmp_path / "model", box_session)
    assert again.exit_code == 2 and "run the same command with --resume" in again.stderr
    resumed = _train(tmp_path / "model", box_session, "--resume")
    assert resumed.exit_code == 0, resumed.stderr
    assert not (tmp_path / "model.partial").exists()
    whole, after = weights(tmp_path / "whole"), weights(tmp_path / "model")
    assert whole.keys() == after.keys()
    assert all(torch.equal(whole[k], after[k]) for k in whole)


def test_a_training_killed_before_its_first_checkpoint_resumes(box_session, tmp_path):
    script = textwrap.dedent("""
        import os, sys, torch
        from selfcal.cli import app
        original = torch.optim.Adam.step
        calls = {"n": 0}
        def killed(self, *args, **kwargs):
            calls["n"] += 1
            if calls["n"] == 4:
                os._exit(9)
            return original(self, *args, **kwargs)
        torch.optim.Adam.step = killed
        app(sys.argv[1:])
    """)
    out = tmp_path / "model"
    argv = ["selfmodel", "train", str(box_session), "--out", str(out), "--steps", "12", "--threads", "1", "--seed", "2"]
    killed = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert killed.returncode == 9, killed.stderr
    assert (tmp_path / "model.partial" / "run.json").is_file()
    assert _train(out, box_session).exit_code == 2
    resumed = _train(out, box_session, "--resume")
    assert resumed.exit_code == 0, resumed.stderr
    assert _train(tmp_path / "whole", box_session).exit_code == 0
    whole, after = weights(tmp_path / "whole"), weights(out)
    assert all(torch.equal(whole[k], after[k]) for k in whole)


def test_a_refused_training_leaves_nothing_that_blocks_the_next_one(box_session, iiwa_session, tmp_path):
    out = tmp_path / "model"
    refused = _train(out, iiwa_session)  # a tracker session: no depth images
    assert refused.exit_code == 2 and "no cameras" in refused.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert _train(out, box_session).exit_code == 0


def test_a_second_capture_into_the_same_folder_stops_with_a_sentence(tmp_path):
    from rigs.files import locked_folder

    partial = tmp_path / "s.partial"
    partial.mkdir()
    with locked_folder(partial, "busy"):  # as a running capture holds it
        result = runner.invoke(app, ["capture", "--rig", str(BOX_RIG), "--poses", "2", "--out", str(tmp_path / "s")])
        assert result.exit_code == 2 and "another capture is recording into it now" in result.stderr
        result = runner.invoke(app, ["capture", "--rig", str(BOX_RIG), "--poses", "2", "--out", str(tmp_path / "s"),
                                     "--resume"])
        assert result.exit_code == 2 and "another capture is recording into it now" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.partial"]
