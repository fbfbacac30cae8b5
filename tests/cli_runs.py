"""Running selfcal's command line inside a test: the whole output, and refusals read as one sentence."""

from __future__ import annotations

from typer.testing import CliRunner

from selfcal.cli import app

runner = CliRunner()


def invoke(*args):
    """The command's result (``exit_code``, ``output``); arguments may be paths or numbers."""
    return runner.invoke(app, [str(a) for a in args])


def fails(*args) -> str:
    """The refusal of a command that must exit 2 without a traceback, its words on one line."""
    run = invoke(*args)
    assert run.exit_code == 2, (run.output, run.exception)
    assert "Traceback" not in run.output
    return " ".join(run.output.split())
