"""What every command shares: one-sentence errors with exit 2, --json output, progress bars.

A command body raises :class:`rigs.errors.InputError` for a user's mistake; :func:`run` prints
its sentence and exits 2. Progress bars show on a terminal only, so logs stay quiet.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Callable, Iterator

import numpy as np
import typer
from typer.core import TyperGroup
from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn
from rich.text import Text

from rigs.errors import InputError

try:  # newer typer carries its own copy of click: its context is the one a command runs in
    from typer._click.globals import get_current_context
except ImportError:
    from click import get_current_context

err_console = Console(stderr=True)
out_console = Console()


class OneLineErrors(TyperGroup):
    """The root command group: a usage mistake (an unknown option, a value of the wrong type, a
    missing argument) ends like every other bad input, one line on stderr and exit status 2."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        flags_without_values(self)
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except typer.Abort:
            err_console.print("aborted", highlight=False)
            sys.exit(1)
        except typer.TyperException as error:  # click's usage errors, vendored by typer
            context = getattr(error, "ctx", None)
            where = f"{context.command_path}: " if context is not None else ""
            hint = f" (see `{context.command_path} --help`)" if context is not None else ""
            text = error.format_message() if hasattr(error, "format_message") else str(error)
            if not text.strip():  # "no arguments, so here is the help": already printed
                sys.exit(getattr(error, "exit_code", 2))
            err_console.print(f"[bold red]error:[/] {where}{' '.join(text.split())}{hint}", highlight=False,
                              soft_wrap=True, markup=True)
            sys.exit(getattr(error, "exit_code", 2))
        sys.exit(code if isinstance(code, int) else 0)


def flags_without_values(command) -> None:
    """Show boolean flags in help as ``--json``, not ``--json <bool>``: they take no value, and
    help that shows one invites ``--json true``, which the parser (rightly) refuses."""
    for param in getattr(command, "params", []):
        if getattr(param, "param_type_name", "") == "option" and getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    original = getattr(command, "get_help_option", None)
    if original is not None and not getattr(original, "without_value", False):
        def help_option(ctx, original=original):
            option = original(ctx)
            if option is not None and option.metavar is None:
                option.metavar = ""
            return option

        help_option.without_value = True
        command.get_help_option = help_option
    for child in getattr(command, "commands", {}).values():
        flags_without_values(child)


def fail(message: str) -> None:
    """Print one sentence on stderr and exit 2."""
    err_console.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """Turn InputError (and a few library errors that only bad input causes) into exit 2."""
    try:
        yield
    except InputError as error:
        fail(in_flags(error))
    except KeyboardInterrupt:
        err_console.print("interrupted")
        raise typer.Exit(code=130)


# Library settings reached through an option named otherwise (the keyword is not the option's
# name); every other setting is found by name among the running command's options.
SETTING_FLAGS = {
    "calibration_dir": "--calibration",
    "cameras": "--camera",
    "depth_sigma_at_1m": "--depth-noise",
    "description": "--urdf",
    "discover": "--no-urdf",
    "false_free_max_pct": "--false-free-max",
    "far_range_m": "--far-range",
    "flange_file": "--flange-poses",
    "joint_ranges": "--joint",
    "max_pieces": "--pieces",
    "max_spheres": "--spheres",
    "max_vertices": "--piece-vertices",
    "package_dirs": "--package-dir",
    "payload_kg": "--payload",
    "random_count": "--poses",
    "steps": "--sweep-steps",
    "targets": "--target",
    "voxel": "--voxel",
}


def in_flags(error: InputError) -> str:
    """The library's sentence in the command line's terms: each setting it names becomes the flag of
    the running command that sets it. A setting no option of this command sets keeps its name (a
    flag the command does not take would send the user looking for it)."""
    context = get_current_context(silent=True)
    options = [p for p in context.command.params if p.param_type_name == "option"] if context is not None else []
    flags = {}
    for option in options:
        long = [opt for opt in option.opts if opt.startswith("--")]
        if long:
            flags[option.name] = long[0]
    taken = {opt for option in options for opt in option.opts}

    def flag(name: str) -> str:
        if name in flags:
            return flags[name]
        other = SETTING_FLAGS.get(name)
        return other if other in taken else name

    return error.in_terms(flag)


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def print_json(data) -> None:
    sys.stdout.write(json.dumps(_jsonable(data), indent=2) + "\n")


def to_jsonable(data):
    return _jsonable(data)


class CountColumn(ProgressColumn):
    """``11/40 poses`` where the total is known, ``11 steps`` where it is not (never ``11/?``)."""

    def __init__(self, unit: str):
        super().__init__()
        self.unit = unit

    def render(self, task) -> Text:
        return Text(count_text(int(task.completed), task.total, self.unit), style="progress.download")


def count_text(done: int, total: float | None, unit: str) -> str:
    """What the progress bar's count reads: ``done/total unit``, or ``done unit`` without a total."""
    if total:
        return f"{done}/{int(total)} {unit}"
    return f"{done} {unit}"


@contextlib.contextmanager
def progress_bar(description: str, total: int | None = None, enabled: bool = True,
                 unit: str = "steps") -> Iterator[Callable[[int, int], None]]:
    """Yields ``update(done, total)``; draws a bar only when stderr is a terminal. ``unit`` names
    what is counted (poses, images, steps); a total of None or 0 means it is not known."""
    if not enabled or not err_console.is_terminal:
        yield lambda done, total_=None: None
        return
    total = total or None
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), CountColumn(unit), TimeRemainingColumn(),
                  console=err_console, transient=True) as progress:
        task = progress.add_task(description, total=total)

        def update(done: int, total_: int | None = None) -> None:
            progress.update(task, completed=done, total=total_ if total_ is not None else total)

        yield update


def say_verdict(verdict) -> None:
    """The verdict line, first in a command's text output."""
    typer.echo(verdict.line())


def exit_for(verdict, require_pass: bool) -> None:
    """With ``--require-pass``, exit 1 on FAIL and 3 on CANNOT TELL (2 stays a user's mistake), after
    everything was written and printed; without it, a verdict never changes the exit status."""
    from rigs.verdicts import EXIT_STATUS

    if require_pass and not verdict.passed:
        raise typer.Exit(code=EXIT_STATUS[verdict.result])
