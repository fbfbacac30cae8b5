"""``selfcal audit plan|report``: ISO 9283 pose characteristics with a laser tracker."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from selfcal.options import robot_from_options
from selfcal.ui import print_json, user_errors

audit_app = typer.Typer(help="ISO 9283 accuracy audits: plan the test cube, report AP/RP/AD/RD.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(audit_app, name="audit")


@audit_app.command("plan")
def plan(
    out: Path = typer.Option(..., "--out", help="Plan CSV to write (pose, iso_pose, cycle, joints, commanded pose)."),
    rig: Optional[str] = typer.Option(None, "--rig", help="Built-in rig or rig TOML (its tracker decides visibility)."),
    urdf: Optional[Path] = typer.Option(None, "--urdf", help="Robot description, instead of --rig."),
    base_link: Optional[str] = typer.Option(None, "--base-link"),
    tip_link: Optional[str] = typer.Option(None, "--tip-link"),
    cube: Optional[float] = typer.Option(None, "--cube", help="Side of the ISO test cube in m (default: the largest that fits)."),
    cycles: int = typer.Option(30, "--cycles", help="Cycles P1, P5, P4, P3, P2 (ISO 9283: 30)."),
    seed: int = typer.Option(0, "--seed"),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """Plan an ISO 9283 pose test: cube in the most used workspace, P1..P5 on a diagonal plane, cycles."""
    with user_errors():
        import csv
        import io

        from calib.workflows.audit import plan_audit
        from capture.simulate import pose_is_valid
        from rigs.files import atomic_write_text, check_new_file
        from rigs.simulator import nominal_world

        check_new_file(out, force)

        spec = robot_from_options(rig, urdf, base_link, tip_link)
        with nominal_world(spec) as world:
            result = plan_audit(world.chain, lambda q: pose_is_valid(world, spec, q), cycles, cube, seed)
        header, rows = result.rows()
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(header)
        writer.writerows([[repr(float(v)) if isinstance(v, float) else v for v in row] for row in rows])
        atomic_write_text(out, buffer.getvalue())
        summary = {"plan": str(out), "cube_m": result.side, "center_m": result.center.tolist(),
                   "cycles": cycles, "poses": len(rows)}
        if json_output:
            print_json(summary)
        else:
            typer.echo(f"{out}: {len(rows)} poses, {cycles} cycles of P1-P5 on a {result.side:.2f} m cube centred at "
                       f"{[round(v, 3) for v in result.center.tolist()]} m; record it with "
                       f"`selfcal capture --plan {out} ...`")


@audit_app.command("report")
def report(
    session: Path = typer.Argument(..., help="Session recorded from an audit plan."),
    out: Path = typer.Option(..., "--out", help="Folder for audit.json and report.html."),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help="Calibration folder: commanded poses also by the calibrated model."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out folder."),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """AP/RP per pose, AD/RD between P2 and P4, nominal and calibrated side by side, HTML report."""
    with user_errors():
        from calib.workflows.audit import audit_report
        from calib.workflows.audit_report import write_audit_html
        from capture.session import load_session
        from rigs.files import atomic_write_json, output_folder
        from selfcal.ui import to_jsonable

        result = audit_report(load_session(session), calibration)
        with output_folder(out, force) as folder:
            atomic_write_json(folder / "audit.json", to_jsonable(result))
            write_audit_html(result, folder / "report.html")
        if json_output:
            print_json({k: v for k, v in result.items() if k not in ("iso_pose_of_row",)} | {
                "models": {n: {k: v for k, v in m.items() if k != "attained_m"} for n, m in result["models"].items()}})
        else:
            for name, model in result["models"].items():
                typer.echo(f"commanded by the {name} model:")
                for entry in model["poses"]:
                    typer.echo(f"  {entry['pose']}: AP {entry['AP_mm']:.3f} mm  RP {entry['RP_mm']:.3f} mm")
                typer.echo(f"  AD {model['AD_mm']:.3f} mm  RD {model['RD_mm']:.3f} mm (P2-P4)")
            for warning in result["warnings"]:
                typer.echo(f"warning: {warning}")
            typer.echo(f"report: {out / 'report.html'}")
