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
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from rigs.errors import InputError

err_console = Console(stderr=True)
out_console = Console()


class OneLineErrors(TyperGroup):
    """The root command group: a usage mistake (an unknown option, a value of the wrong type, a
    missing argument) ends like every other bad input, one line on stderr and exit status 2."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
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
        fail(str(error))
    except KeyboardInterrupt:
        err_console.print("interrupted")
        raise typer.Exit(code=130)


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


@contextlib.contextmanager
def progress_bar(description: str, total: int | None = None, enabled: bool = True) -> Iterator[Callable[[int, int], None]]:
    """Yields ``update(done, total)``; draws a bar only when stderr is a terminal."""
    if not enabled or not err_console.is_terminal:
        yield lambda done, total_=None: None
        return
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=err_console, transient=True) as progress:
        task = progress.add_task(description, total=total)

        def update(done: int, total_: int | None = None) -> None:
            progress.update(task, completed=done, total=total_ if total_ is not None else total)

        yield update
