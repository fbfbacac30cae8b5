"""The ``selfcal`` command: one entry point, a subcommand per job.

Each concern registers its own commands from a module of its own (``cli_capture``, ``cli_calib``,
...), so this file only wires them together.
"""

from __future__ import annotations

import importlib
import os

import typer

from selfcal.ui import OneLineErrors

# Modules that add commands: each has ``register(app: typer.Typer)``.
COMMAND_MODULES = [
    "selfcal.cli_capture",
    "selfcal.cli_selfmodel",
    "selfcal.cli_calib",
    "selfcal.cli_deflection",
    "selfcal.cli_dynamics",
    "selfcal.cli_import",
    "selfcal.cli_audit",
    "selfcal.cli_workflows",
    "selfcal.cli_demo",
    "selfcal.cli_camera",
    "selfcal.cli_export",
    "selfcal.cli_fleet",
    "selfcal.cli_discovery",
    "selfcal.cli_view",
]

app = typer.Typer(
    name="selfcal",
    help="Measure a robot arm's real body: capture, calibrate, learn its shape, export for planners.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=OneLineErrors,
)


def _print_version(value: bool) -> None:
    # A parser callback, so `selfcal --version` answers before the group asks for a command.
    if value:
        from rigs.version import VERSION

        typer.echo(f"selfcal {VERSION}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", help="Print the version and exit.", is_eager=True,
                                       callback=_print_version, expose_value=False)) -> None:
    pass


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:
    # Torch and OpenBLAS default to every core; two cores here, more elsewhere: leave one for the OS.
    os.environ.setdefault("KMP_WARNINGS", "0")
    app()


if __name__ == "__main__":
    main()
