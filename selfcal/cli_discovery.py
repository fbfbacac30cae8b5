"""``selfcal discover``: an arm nobody described, its chain and a URDF from depth and joint readings."""

from __future__ import annotations

from pathlib import Path

import typer

from selfcal.ui import print_json, progress_bar, user_errors

# What the printed axis sd is, and is not: the refinement's cluster-robust covariance sees the
# scatter between poses and between surface patches, not what every pose shares (each link's
# points at home, the rigid-link model).
SD_CAVEAT = ("  (+- is one sd of the scatter between poses and between patches of each link's surface; it leaves "
             "out what every pose shares, so read it as a lower bound: on the simulated xArm6 and iiwa the "
             "errors run about 3 sd at the median)")


def register(app: typer.Typer) -> None:
    app.command("discover")(discover)


def discover(
    session: Path = typer.Argument(..., help="Session recorded from a `selfcal plan --sweeps` plan (depth cameras)."),
    out: Path = typer.Option(..., "--out", help="Folder to create: chain.json, robot.urdf, meshes/."),
    name: str = typer.Option("discovered", "--name", help="Robot name in the URDF."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
    json_output: bool = typer.Option(False, "--json", help="Print a machine-readable summary."),
) -> None:
    """Find each joint's type, axis and links from the depth sweeps, without reading any URDF, and
    write a URDF from scratch (joints named as in the readings, limits from the recorded ranges)."""
    with user_errors():
        from capture.session import load_session
        from rigs.files import check_new_output, output_folder
        from selfmodel.discovery.chain_discovery import ChainDiscovery
        from selfmodel.discovery.urdf_writer import write_discovered_urdf

        check_new_output(out, force)
        recording = load_session(session)
        with progress_bar("discovering joints", len(recording.joint_names)) as update:
            chain = ChainDiscovery().fit(recording, update)
        with output_folder(out, force) as folder:
            chain.save(folder / "chain.json")
            write_discovered_urdf(chain, folder, name)
        joints = [{"joint": j.name, "type": j.type, "direction": j.direction, "point_m": j.point,
                   "direction_sd_deg": j.direction_sd_deg, "position_sd_mm": j.position_sd_mm,
                   "angle_scale": j.angle_scale, "fit_rms_mm": j.fit_rms_mm, "range": [j.lower, j.upper]}
                  for j in chain.joints]
        summary = {"out": str(out), "urdf": str(out / "robot.urdf"), "base_link": chain.base_link,
                   "tip_link": chain.tip_link, "joints": joints,
                   "link_points": {chain.base_link: len(chain.base_points),
                                   **{link: len(points) for link, points in chain.link_points.items()}},
                   "refinement": chain.source.get("refinement"), "segmentation": chain.source.get("segmentation")}
        if json_output:
            print_json(summary)
            return
        kinds = ", ".join(f"{j.name} {j.type}" for j in chain.joints)
        typer.echo(f"{out}/robot.urdf: {len(chain.joints)} joints discovered ({kinds}), no description read.")
        refinement = chain.source.get("refinement") or {}
        if refinement.get("residual_rms_mm_after") is not None:
            crossing = ", ".join(refinement.get("crossing_held") or []) or "none"
            typer.echo(f"axes refined over {refinement['poses']} random poses (residual "
                       f"{refinement['residual_rms_mm_before']:.2f} -> {refinement['residual_rms_mm_after']:.2f} mm; "
                       f"held to cross the previous axis: {crossing})")
        else:
            typer.echo("axes from the sweeps alone: the recording has no other poses to refine them over "
                       "(`selfcal plan --sweeps --poses N`)")
        for j in chain.joints:
            where = (f" through ({', '.join(f'{1000 * v:.1f}' for v in j.point)}) mm +- {j.position_sd_mm:.2f}"
                     if j.type == "revolute" else "")
            typer.echo(f"  {j.name:<16} {j.type:<9} axis ({', '.join(f'{v:+.4f}' for v in j.direction)}) "
                       f"+- {j.direction_sd_deg:.2f} deg{where}; fit rms {j.fit_rms_mm:.1f} mm")
        typer.echo(SD_CAVEAT)
