"""The per-arm work is selfcal's own commands, run in the worker's process.

An arm is calibrated by exactly what ``selfcal calibrate ... --json`` does (and validated by
``selfcal validate``), so its folder is exactly what that command writes and its sentence for bad
input is that command's sentence. Running the command inside the worker (not as a child process)
pays selfcal's imports once per worker instead of once per arm.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass

# The options a fleet sets itself for every arm: a row's options may not set them.
RESERVED_OPTIONS = {"out": "--out (the fleet writes DIR/<arm>)", "json_output": "--json (the fleet reads it)",
                    "force": "--force (the fleet decides what it replaces)", "resume": "--resume (use the fleet's --resume)"}


@dataclass
class CommandRun:
    argv: list[str]
    exit_code: int
    stdout: str
    stderr: str

    @property
    def sentence(self) -> str:
        """The command's own one-line message (its last line on stderr), without the ``error:`` mark."""
        lines = [line.strip() for line in self.stderr.splitlines() if line.strip()]
        if not lines:
            return f"selfcal {' '.join(self.argv[:2])} ended with exit status {self.exit_code} and no message."
        last = lines[-1]
        return last[len("error:"):].strip() if last.startswith("error:") else last

    def json(self):
        return json.loads(self.stdout)


def _group():
    from typer.main import get_command

    from selfcal.cli import app

    return get_command(app)


def command(path: list[str]):
    """The click command ``selfcal PATH...`` (``["calibrate"]``, ``["selfmodel", "train"]``)."""
    found = _group()
    for name in path:
        found = found.commands[name]
    return found


def run_selfcal(argv: list[str]) -> CommandRun:
    """Run ``selfcal ARGV`` in this process, capturing what it prints. An unexpected exception (a
    bug, not bad input) propagates; bad input ends as the command ends it, exit status 2."""
    group = _group()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            group.main(args=list(argv), prog_name="selfcal")
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    return CommandRun(list(argv), code, out.getvalue(), err.getvalue())


def accepts_option(path: list[str], option: str) -> bool:
    """Whether ``selfcal PATH`` has the option ``--name``."""
    return any(option in getattr(parameter, "opts", []) for parameter in command(path).params)


def options_problem(path: list[str], tokens: list[str], placeholders: list[str]) -> str | None:
    """The sentence for extra options ``tokens`` that ``selfcal PATH`` refuses, or None.

    ``placeholders`` stand for what the fleet adds (the sessions, ``--out``), so that the parse sees a
    whole command line; options the fleet sets itself are refused, as are extra session arguments.
    """
    import typer

    target = command(path)
    name = " ".join(path)
    try:
        target.make_context(name, [*placeholders, *tokens])
    except typer.TyperException as error:
        text = error.format_message() if hasattr(error, "format_message") else str(error)
        return f"selfcal {name} refuses {' '.join(tokens)!r}: {' '.join(text.split())}"
    alone = target.make_context(name, list(tokens), resilient_parsing=True)
    for parameter, what in RESERVED_OPTIONS.items():
        source = alone.get_parameter_source(parameter) if parameter in alone.params else None
        if source is not None and source.name == "COMMANDLINE":
            return f"options may not set {what}."
    arguments = [p.name for p in target.params if p.param_type_name == "argument"]
    for argument in arguments:
        source = alone.get_parameter_source(argument)
        if source is not None and source.name == "COMMANDLINE":
            return (f"options {' '.join(tokens)!r} hold a folder argument ({alone.params[argument]!r}); sessions go "
                    f"in the sessions column, options only in the options column.")
    return None
