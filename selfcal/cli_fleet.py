"""``selfcal fleet calibrate|selfmodel``: many arms as one job on Ray, each compared with its siblings."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator, Optional

import typer

from selfcal.ui import err_console, print_json, user_errors

fleet_app = typer.Typer(help="Many arms as one job on Ray: calibrate or train each, compare it with its siblings.",
                        no_args_is_help=True)

TABLE_HELP = ("FLEET.csv: header arm,sessions[,validate][,options]; sessions separated by ';' and relative to the "
              "CSV's folder; options are extra options of the per-arm command.")
ADDRESS_HELP = ("Ray cluster to run on: auto (the cluster this machine belongs to) or ray://HOST:10001. Without it Ray "
                "starts locally in this process.")


def register(app: typer.Typer) -> None:
    app.add_typer(fleet_app, name="fleet")


@contextlib.contextmanager
def fleet_progress(title: str) -> Iterator:
    """``update(done, running, failed, total)`` drawing a bar on a terminal; nothing in logs."""
    if not err_console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("done, {task.fields[running]} running, {task.fields[failed]} failed"), TimeElapsedColumn(),
                  console=err_console, transient=True) as progress:
        task = progress.add_task(title, total=None, running=0, failed=0)

        def update(done: int, running: int, failed: int, total: int) -> None:
            progress.update(task, completed=done, total=total, running=running, failed=failed)

        yield update


@contextlib.contextmanager
def _interrupted(out: Path) -> Iterator[None]:
    """Ctrl-C: say what was kept and how to go on, exit 130."""
    try:
        yield
    except KeyboardInterrupt:
        err_console.print(f"interrupted: the arms that finished are in {out} (fleet.json); run the same command with "
                          f"--resume to continue without redoing them.", highlight=False, soft_wrap=True)
        raise typer.Exit(code=130)


def _settings(address: Optional[str], cpus: Optional[int], cpus_per_arm: float):
    from rigs.errors import InputError
    from selfcal.fleet.engine import RaySettings

    if address is not None and not address.strip():
        raise InputError("--address is empty; give auto or ray://HOST:PORT, or leave it out to run locally.")
    return RaySettings(address=address, local_cpus=cpus, cpus_per_arm=cpus_per_arm)


def _finish(document: dict, out: Path, json_output: bool) -> None:
    summary = document["summary"]
    if json_output:
        print_json(document)
    else:
        from selfcal.fleet.report import _verdict

        typer.echo(f"{out}: {_verdict(document)} Report: {out / 'index.html'}")
        for arm, record in document["arms"].items():
            if record["status"] != "ok":
                typer.echo(f"  {arm} failed: {record['message']}")
        for record in document["arms"].values():
            for flag in record.get("flags", []):
                typer.echo(f"  flagged: {flag}")
    if summary["failed"]:
        raise typer.Exit(code=1)


@fleet_app.command("calibrate")
def calibrate(
    table: Path = typer.Argument(..., help=TABLE_HELP),
    out: Path = typer.Option(..., "--out", help="Fleet folder to create: fleet.json, index.html, one calibration per arm."),
    address: Optional[str] = typer.Option(None, "--address", help=ADDRESS_HELP),
    cpus_per_arm: float = typer.Option(1.0, "--cpus-per-arm", help="CPUs each arm's task asks Ray for."),
    cpus: Optional[int] = typer.Option(None, "--cpus", help="CPUs of the local Ray instance (default: every core "
                                       "this process may use); not with --address."),
    resume: bool = typer.Option(False, "--resume", help="Continue a fleet run in --out: arms whose results are "
                                "complete and whose inputs hash the same are kept, the rest run."),
    json_output: bool = typer.Option(False, "--json", help="Print the fleet record (fleet.json) as JSON."),
) -> None:
    """Calibrate every arm of FLEET.csv (and validate it on its held-out session) as one Ray job.

    Each arm's folder is exactly what `selfcal calibrate` writes; an arm that fails is reported with its
    sentence and the others finish. Exit status 0 when every arm succeeded, 1 when any failed (see
    fleet.json), 2 when the fleet itself could not run.
    """
    with user_errors():
        from selfcal.fleet.compare import add_calibration_comparison
        from selfcal.fleet.report import write_calibration_report
        from selfcal.fleet.run import CALIBRATE, run_fleet

        settings = _settings(address, cpus, cpus_per_arm)
        with fleet_progress("fleet calibrate") as update, _interrupted(out):
            document = run_fleet(CALIBRATE, table, out, settings, resume, update, add_calibration_comparison,
                                 write_calibration_report)
    _finish(document, out, json_output)


@fleet_app.command("selfmodel")
def selfmodel(
    table: Path = typer.Argument(..., help=TABLE_HELP + " Options are `selfcal selfmodel train` options."),
    out: Path = typer.Option(..., "--out", help="Fleet folder to create: fleet.json, index.html, one model per arm."),
    address: Optional[str] = typer.Option(None, "--address", help=ADDRESS_HELP),
    cpus_per_arm: float = typer.Option(1.0, "--cpus-per-arm", help="CPUs each arm's training asks Ray for (and torch threads)."),
    cpus: Optional[int] = typer.Option(None, "--cpus", help="CPUs of the local Ray instance (default: every core "
                                       "this process may use); not with --address."),
    resume: bool = typer.Option(False, "--resume", help="Continue a fleet run in --out: arms whose results are "
                                "complete and whose inputs hash the same are kept, the rest run."),
    json_output: bool = typer.Option(False, "--json", help="Print the fleet record (fleet.json) as JSON."),
) -> None:
    """Train a self-model for every arm of FLEET.csv as one Ray job; evaluate it on its held-out session,
    check it against its URDF, and compare each link with the siblings'.

    Exit status 0 when every arm succeeded, 1 when any failed (see fleet.json), 2 when the fleet itself
    could not run.
    """
    with user_errors():
        from selfcal.fleet.report import write_selfmodel_report
        from selfcal.fleet.run import SELFMODEL, run_fleet
        from selfcal.fleet.selfmodels import add_selfmodel_comparison

        settings = _settings(address, cpus, cpus_per_arm)
        with fleet_progress("fleet selfmodel") as update, _interrupted(out):
            document = run_fleet(SELFMODEL, table, out, settings, resume, update, add_selfmodel_comparison,
                                 write_selfmodel_report)
    _finish(document, out, json_output)
