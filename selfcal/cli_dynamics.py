"""``selfcal dynamics fit|payload``: the arm's gravity parameters and payloads from measured joint torques."""

from __future__ import annotations

from pathlib import Path
from typing import List

import typer

from selfcal.ui import print_json, progress_bar, user_errors

dynamics_app = typer.Typer(help="Identify the arm's dynamics and payloads from joint torques (effort_<joint> columns).",
                           no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(dynamics_app, name="dynamics")


@dynamics_app.command("fit")
def fit(
    sessions: List[Path] = typer.Argument(..., help="Sessions of one robot with measured joint torques."),
    out: Path = typer.Option(..., "--out", help="Dynamics folder to create (dynamics.yaml, dynamics.npz, robot.urdf, report.html)."),
    flip_torque_sign: bool = typer.Option(False, "--flip-torque-sign", help="The drives report the opposite sign of "
                                          "the torque that holds the arm up: multiply the readings by -1."),
    friction: str = typer.Option("auto", "--friction", help="auto: viscous and Coulomb friction per joint when the "
                                 "sessions have velocities; none: leave friction out."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
    json_output: bool = typer.Option(False, "--json", help="Print a machine-readable summary."),
) -> None:
    """Identify the base inertial parameters, torque offsets (and friction) that the torques determine."""
    with user_errors():
        from calib.dynamics.identification import ArmDynamics
        from calib.dynamics.report import dynamics_verdict
        from capture.session import load_session
        from rigs.files import check_new_output, output_folder

        check_new_output(out, force)
        loaded = [load_session(path) for path in sessions]
        with progress_bar("identifying the arm's dynamics", None):
            dynamics = ArmDynamics(flip_sign=flip_torque_sign, friction=friction).fit(loaded)
        with output_folder(out, force) as folder:
            dynamics.save(folder)
        summary = dynamics.summary
        if json_output:
            print_json({"dynamics": str(out), "verdict": dynamics_verdict(summary), "rms_nm": summary["rms_nm"],
                        "urdf_rms_nm": summary["urdf_rms_nm"], "identifiability": summary["identifiability"],
                        "per_joint": summary["per_joint"], "sign": summary["sign"], "friction": summary["friction"]})
            return
        typer.echo(f"{out}: {dynamics_verdict(summary)}")
        for name, entry in summary["per_joint"].items():
            typer.echo(f"  {name}: residual {entry['rms_nm']:.3g} N m RMS (URDF {entry['urdf_rms_nm']:.3g} N m)")
        if summary["identifiability"].get("fixed"):
            typer.echo(f"  {summary['identifiability']['fixed']}")


@dynamics_app.command("payload")
def payload(
    session: Path = typer.Argument(..., help="Session with measured joint torques, carrying the unknown payload."),
    dynamics_dir: Path = typer.Option(..., "--dynamics", help="Dynamics folder written by `selfcal dynamics fit`."),
    out: Path = typer.Option(None, "--out", help="Payload folder to create (payload.yaml, report.html)."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
    json_output: bool = typer.Option(False, "--json", help="Print the payload as JSON."),
) -> None:
    """The payload's mass (kg) and centre of mass (m, tip frame) with standard deviations."""
    with user_errors():
        from calib.dynamics.model import IdentifiedDynamics
        from calib.dynamics.payload import PayloadIdentifier
        from capture.session import load_session
        from rigs.files import check_new_output, output_folder

        if out is not None:
            check_new_output(out, force)
        identified = PayloadIdentifier().fit(load_session(session), IdentifiedDynamics.load(dynamics_dir))
        if out is not None:
            with output_folder(out, force) as folder:
                identified.save(folder)
        if json_output:
            print_json(identified.document())
            return
        typer.echo(identified.verdict())
        for name, entry in identified.per_joint.items():
            typer.echo(f"  {name}: {entry['before_rms_nm']:.3g} N m RMS without the payload, "
                       f"{entry['after_rms_nm']:.3g} N m with it")
