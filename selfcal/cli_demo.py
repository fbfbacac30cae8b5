"""``selfcal demo``: the whole story on the built-in simulated rigs."""

from __future__ import annotations

from pathlib import Path

import typer

from selfcal.ui import err_console, print_json, user_errors


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo(
    out: Path = typer.Option(Path("demo"), "--out", help="Folder to create; open its index.html afterwards."),
    quick: bool = typer.Option(False, "--quick", help="Smaller everything: a few minutes instead of about twenty."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
    json_output: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """Calibrate the iiwa, audit it, crash and recalibrate it; learn the xArm6's shape and export it for planners."""
    with user_errors():
        import time

        from rigs.files import output_folder
        from selfcal.demo import run_demo

        start = time.perf_counter()
        say = (lambda message: err_console.print(message, highlight=False)) if not json_output else (lambda message: None)
        # Built under a temporary name and renamed when complete: no half-finished demo folder.
        with output_folder(out, force) as folder:
            try:
                figures = run_demo(folder, quick, say)
            except RuntimeError as error:
                err_console.print(f"[bold red]error:[/] {error}", highlight=False)
                raise typer.Exit(code=1)
        figures["seconds"] = round(time.perf_counter() - start, 1)
        if json_output:
            print_json(figures)
        else:
            typer.echo(f"{out / 'index.html'}: the demo's results ({figures['seconds']:.0f} s)")
