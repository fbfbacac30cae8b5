"""``selfcal capture`` and ``selfcal rigs``: recording sessions from a rig."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from selfcal.ui import print_json, progress_bar, user_errors


def register(app: typer.Typer) -> None:
    app.command("capture")(capture)
    app.command("rigs")(rigs)


def capture(
    rig: str = typer.Option(..., "--rig", help="Built-in rig name (see `selfcal rigs`) or a rig TOML file."),
    out: Path = typer.Option(..., "--out", help="Session folder to create."),
    poses: int = typer.Option(100, "--poses", help="Number of random valid poses to record."),
    seed: int = typer.Option(0, "--seed", help="Seed of the pose sequence and the noise."),
    payload: float = typer.Option(0.0, "--payload", help="Payload at the tool in kg."),
    plan: Optional[Path] = typer.Option(None, "--plan", help="CSV of pose + joint columns (rad) to visit instead of random poses."),
    arm_seed: Optional[int] = typer.Option(None, "--arm-seed", help="Arm K of a fleet of this rig's type: replaces the rig "
                                           "file's truth seed (each K its own hidden errors; a crashed rig with the "
                                           "same K is that arm, bent)."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted capture into the same --out."),
    json_output: bool = typer.Option(False, "--json", help="Print a machine-readable summary."),
) -> None:
    """Record a session from a simulated rig: joint angles with tracker points and/or camera images."""
    with user_errors():
        from capture.poses import read_plan
        from capture.session import load_session
        from capture.simulate import capture_simulated
        from rigs import load_rig
        from rigs.limits import ArmJoints

        rig_spec = load_rig(rig)
        plan_data = None
        if plan is not None:
            limits = ArmJoints.from_urdf(rig_spec.robot.urdf, rig_spec.robot.base_link, rig_spec.robot.tip_link)
            plan_data = read_plan(plan, limits)
        with progress_bar(f"capturing {rig_spec.name}", plan_data and len(plan_data.pose_ids) or poses, unit="poses") as update:
            capture_simulated(rig_spec, poses, seed, out, payload, plan_data, resume, update, arm_seed)
        summary = session_summary(load_session(out))
        if json_output:
            print_json(summary)
        else:
            typer.echo(f"{out}: {summary['poses']} poses of {summary['robot']} ({summary['dof']} joints)"
                       + (f", {summary['tracker_points']} tracker points" if summary["tracker_points"] else "")
                       + (f", {summary['images']} images from {len(summary['cameras'])} cameras" if summary["cameras"] else ""))


def session_summary(session) -> dict:
    images = sum(1 for _ in (session.path / "cameras").glob("*/*_rgb.png")) if session.cameras else 0
    return {
        "session": str(session.path),
        "robot": session.manifest["robot"]["urdf"],
        "rig": session.manifest.get("source", {}).get("rig"),
        "dof": len(session.joint_names),
        "joint_names": session.joint_names,
        "poses": len(session.pose_ids),
        "tracker_points": 0 if session.tracker is None else len(session.tracker.targets),
        "cameras": sorted(session.cameras),
        "images": images,
        "payload_kg": sorted(set(float(p) for p in session.payload_kg)),
        "simulated": session.is_simulated,
    }


def rigs(json_output: bool = typer.Option(False, "--json", help="Machine-readable list.")) -> None:
    """List the built-in rigs."""
    with user_errors():
        from rigs import builtin_rigs, load_rig

        rows = [{"name": name, "description": load_rig(name).description} for name in builtin_rigs()]
        if json_output:
            print_json(rows)
        else:
            for row in rows:
                typer.echo(f"{row['name']:<24} {row['description']}")
