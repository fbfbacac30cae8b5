"""``selfcal selfmodel export``: collision geometry for planners from a trained self-model.

The command joins the ``selfmodel`` group of :mod:`selfcal.cli_selfmodel` (it is added to that
module's Typer app, whatever the order the modules register in); without that module it makes
the group itself.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional

import typer

from selfcal.options import ros_package_option
from selfcal.ui import print_json, progress_bar, user_errors


def register(app: typer.Typer) -> None:
    if importlib.util.find_spec("selfcal.cli_selfmodel") is not None:
        from selfcal.cli_selfmodel import selfmodel_app

        selfmodel_app.command("export")(export)
        return
    group = typer.Typer(help="Learn the arm's shape from depth images and use it.", no_args_is_help=True)
    group.command("export")(export)
    app.add_typer(group, name="selfmodel")


def margin_words(report: dict) -> str:
    """The margins an export report states, for its summary line: one figure when every link grew
    by the same, else the range."""
    values = [row["margin_mm"] for row in report["links"].values()] or [report["margin_mm"]]
    low, high = min(values), max(values)
    if high - low < 0.05:
        return f"margin {high:.1f} mm ({report['margin_mode']})"
    return f"margins {low:.1f}-{high:.1f} mm ({report['margin_mode']}, each link its own)"


def board_lines(board: dict | None, asked: str) -> list[str]:
    """What the summary says of the board: where its plate was taken, and what became of it."""
    if not board:
        return [f"no calibration board declared in the session: --board {asked} changed nothing"]
    lines = []
    if board.get("mount") == "fitted":
        lines.append(f"the board's plate at the mount {board['fitted_from']} fitted")
    else:
        lines.append("the board's plate at its nominal mount (train on a board calibration's URDF for its fitted mount)")
    tip = (f"the tip's learned body {board['tip_body_volume_cm3']:.0f} cm3 without the board's cells "
           f"({board['tip_body_volume_with_board_cm3']:.0f} cm3 with them)")
    if board["treatment"] == "drop":
        lines.append(f"board dropped: {tip}; {board['note']}")
    else:
        lines.append(f"board kept: one box {' x '.join(f'{x:g}' for x in board['box_mm'])} mm (the plate and its margin), "
                     f"{board['spheres']} spheres {board['sphere_radius_mm']:.1f} mm in radius; {tip}")
        lines.append(board["note"])
    return lines


def parse_margin(text: str) -> float | None:
    """``auto`` -> None; a number of millimetres -> metres. InputError otherwise."""
    from rigs.errors import InputError

    if text.strip().lower() == "auto":
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"--margin {text!r}: expected 'auto' or a number of millimetres.") from None
    if not value >= 0 or value == float("inf"):
        raise InputError(f"--margin {text!r}: the margin must be a finite number of millimetres >= 0.")
    return value / 1000.0


def export(
    model: Path = typer.Argument(..., help="Model folder written by `selfcal selfmodel train`."),
    out: Path = typer.Option(..., "--out", help="Folder to create: robot.urdf, meshes/, robot.srdf, curobo_spheres.yml, curobo_robot.yml, export_report.json."),
    spheres: int = typer.Option(64, "--spheres", help="Spheres for the arm's links (cuRobo), shared among the links where they hold the most surface."),
    board: str = typer.Option("keep", "--board", help="keep or drop the calibration board the session declares on the tip "
                              "(its learned cells leave the tip's body either way). keep, the default: the export "
                              "describes the arm as it was measured, the board written as the plate it is (one box in "
                              "the URDF, one layer of spheres for cuRobo); removing matter that was there is yours to "
                              "say. drop: the arm without it, for an arm the board was taken off after calibration (on "
                              "an arm still carrying it, a planner would miss its collisions). No board declared: no "
                              "change."),
    board_spheres: Optional[int] = typer.Option(None, "--board-spheres", show_default=False, help="At most this many spheres in the layer that holds a kept board (default 256; the more, the thinner: "
                                                "no count makes it thinner than the plate and its margin)."),
    pieces: int = typer.Option(8, "--pieces", help="At most this many convex pieces a link."),
    piece_vertices: int = typer.Option(64, "--piece-vertices", help="At most this many vertices a convex piece (planners check fewer faster; a piece cut apart from a neighbour keeps its cut better with more)."),
    margin: str = typer.Option("auto", "--margin", help="Inflation in mm for every link, or 'auto': for each link the smallest that holds its own learned surface."),
    voxel_mm: float = typer.Option(3.0, "--voxel", help="Grid spacing in mm of each link's body before meshing."),
    srdf_samples: int = typer.Option(10_000, "--srdf-samples", help="Random configurations tested for the SRDF."),
    truth: bool = typer.Option(True, "--truth/--no-truth", help="When the training session is simulated, measure the export against its true arm."),
    urdf: Optional[Path] = typer.Option(None, "--urdf", help="Free models only: the description whose links cut the body."),
    heldout: Optional[Path] = typer.Option(None, "--heldout", help="A simulated session of the same rig whose poses the export is measured at (default: random configurations of the training session's true arm)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the sphere fit, the margin search and the SRDF sampling."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
    device: str = typer.Option("auto", "--device", help="auto (a GPU when torch sees one, else the CPU), cpu or cuda: where the model answers."),
    ros_package: Optional[str] = ros_package_option(),
    json_output: bool = typer.Option(False, "--json", help="Print the export report as JSON."),
) -> None:
    """Export a self-model's body as convex pieces (URDF), cuRobo spheres and a MoveIt SRDF."""
    with user_errors():
        from rigs import urdf as urdf_io
        from rigs.errors import InputError
        from rigs.files import check_new_output
        from selfmodel.evaluation.export_truth import truth_figures
        from selfmodel.export.exporter import CollisionExporter, export_model
        from selfmodel.export.settings import BodySettings, MarginSettings, PieceSettings, SphereSettings

        check_new_output(out, force)  # before minutes of work, not after
        if ros_package is not None:
            urdf_io.check_package_name(ros_package)
        if board == "drop" and board_spheres is not None:
            raise InputError(f"--board-spheres {board_spheres} counts the spheres of a kept board, and --board drop "
                             f"exports no board: give one of the two.")
        # Every setting is checked here, as the exporter is made: a bad one costs nothing.
        sphere_settings = SphereSettings(max_spheres=spheres, **({} if board_spheres is None else
                                                                 {"board_spheres": board_spheres}))
        exporter = CollisionExporter(spheres=sphere_settings, pieces=PieceSettings(max_pieces=pieces, max_vertices=piece_vertices),
                                     body=BodySettings(voxel=voxel_mm / 1000.0, board=board),
                                     margin=MarginSettings(parse_margin(margin)), srdf_samples=srdf_samples, seed=seed)
        from selfmodel.model.models import SelfModel
        from selfmodel.model.runtime import resolve_device

        target = resolve_device(device)  # before the model is read: a refused device costs nothing
        loaded = SelfModel.load(model).to(target)
        with progress_bar("exporting collision geometry") as update:
            report = export_model(model, out, exporter, force=force,
                                  truth=truth_figures(heldout, seed=exporter.seed) if truth else None,
                                  progress=update, urdf=urdf, model=loaded,
                                  ros_package=ros_package)
        carving = report.get("carving") or {}
        if carving.get("warning"):
            typer.echo(f"warning: {carving['warning']}", err=True)
        if json_output:
            print_json(report)
            return
        recorded = report["recorded_poses_in_collision"]
        srdf = report["srdf"]
        typer.echo(f"{out}: free at all {recorded['configurations']} recorded poses (URDF + SRDF as a planner loads "
                   f"them, and the spheres); {len(report['links'])} links, {margin_words(report)}, "
                   f"{sum(row['pieces'] for row in report['links'].values())} convex pieces, "
                   f"{report['spheres_total']} spheres ({report['spheres_arm']} arm, {report['spheres_board']} board); SRDF disables {len(srdf['disabled'])} of {srdf['checked_pairs']} "
                   f"pairs ({srdf['adjacent']} adjacent, {srdf['default']} default, {srdf['always']} always, "
                   f"{srdf['never']} never in {srdf['samples']} samples), {srdf['kept_enabled']} kept enabled for the "
                   f"description's sake (export {report['seconds']['export_total']:.0f} s)")
        if carving.get("status") == "carved":
            typer.echo(f"  carved {sum(carving['volume_removed_cm3'].values()):.0f} cm3 of learned matter that the cameras "
                       f"saw through at >= {carving['min_poses']} of {carving['poses']} recorded poses")
            from selfcal.cli_selfmodel import unseen_line

            typer.echo("  " + unseen_line(carving["unseen_cm3"], carving["min_poses"]))
        for line in board_lines(report.get("board"), board):
            typer.echo(f"  {line}")
        if ros_package is not None:
            typer.echo(f"  robot.urdf names its meshes as package://{ros_package.rstrip('/')}/meshes/...: the "
                       f"folder belongs at that place in the package")
        figures = report.get("truth") or {}
        if "pieces" in figures:
            for kind in ("pieces", "spheres"):
                row = figures[kind]
                typer.echo(f"  against the true arm at {figures['poses']} poses, {kind}: surface coverage "
                           f"{100 * row['surface_coverage']:.2f} %, largest gap {row['largest_gap_mm']:.1f} mm, "
                           f"protrusion p95 {row['protrusion_p95_mm']:.1f} mm, volume ratio {row['volume_ratio']:.2f}")
