"""``selfcal plan`` and ``selfcal recalibrate``: getting an arm back into calibration after a crash."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from selfcal.options import (CalibrationModel, check_positive, require_pass_option, robot_from_options,
                             ros_package_option)
from selfcal.ui import exit_for, print_json, progress_bar, say_verdict, user_errors


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
    app.command("recalibrate")(recalibrate)


def plan(
    out: Path = typer.Option(..., "--out", help="Plan CSV to write: pose plus one column per joint (rad)."),
    poses: int = typer.Option(..., "--poses", help="How many poses to plan (with --sweeps: random poses after the sweeps)."),
    rig: Optional[str] = typer.Option(None, "--rig", help="Built-in rig or rig TOML (its tracker decides visibility)."),
    urdf: Optional[Path] = typer.Option(None, "--urdf", help="Robot description, instead of --rig."),
    base_link: Optional[str] = typer.Option(None, "--base-link"),
    tip_link: Optional[str] = typer.Option(None, "--tip-link"),
    optimal: bool = typer.Option(False, "--optimal", help="A D-optimal subset of many candidates for the identifiable parameters."),
    calibration: Optional[Path] = typer.Option(None, "--calibration", help="Plan around this calibration's model and reflectors."),
    self_model: Optional[Path] = typer.Option(None, "--self-model", help="With --optimal: plan a self-model relearn "
                                              "(`selfmodel train --previous`): poses whose depth images fix this "
                                              "model's joint placements best, seen by the rig's cameras."),
    candidates: int = typer.Option(1500, "--candidates", help="Random valid candidates to choose from with --optimal "
                                   "or --views."),
    seed: int = typer.Option(0, "--seed"),
    sweeps: bool = typer.Option(False, "--sweeps", help="A discovery plan: each joint alone from home through an "
                                "allowed range, then --poses random poses (for `selfcal discover`)."),
    sweep_steps: int = typer.Option(13, "--sweep-steps", help="Frames per joint sweep with --sweeps."),
    sweep_deg: float = typer.Option(30.0, "--sweep-deg", help="With --sweeps and a robot: rotating joints sweep home +- this."),
    sweep_mm: float = typer.Option(100.0, "--sweep-mm", help="With --sweeps and a robot: sliding joints sweep home +- this."),
    joint: Optional[list[str]] = typer.Option(None, "--joint", help="With --sweeps and no robot description: "
                                              "NAME=LOWER:UPPER (rad, or m if it slides), once per joint, base to tip."),
    views: bool = typer.Option(False, "--views", help="Plan a self-model capture: poses that show the cameras the "
                               "space on --model's links no camera has seen yet (`selfmodel train --previous` it after)."),
    model: Optional[Path] = typer.Option(None, "--model", help="With --views: the structured self-model folder to plan "
                                         "for; without --rig its training sessions' cameras and its description. "
                                         "Without --model, --views plans for --rig's description before any capture."),
    force: bool = typer.Option(False, "--force", help="Replace --out if it exists."),
    json_output: bool = typer.Option(False, "--json"),
) -> None:
    """Plan calibration poses: random valid ones, or with --optimal the most informative few; with
    --sweeps a discovery plan (one joint at a time, then random poses); with --views the poses that
    show a self-model's unseen space."""
    if views or model is not None:
        return _views_plan(out, poses, rig, urdf, optimal, sweeps, calibration, self_model, views, model, candidates,
                           seed, force, json_output)
    if sweeps and self_model is not None:
        with user_errors():
            from rigs import InputError

            raise InputError("--sweeps plans a discovery; --self-model plans a self-model relearn: give one.")
    if sweeps:
        return _sweep_plan(out, poses, rig, urdf, base_link, tip_link, optimal, calibration, seed, sweep_steps,
                           sweep_deg, sweep_mm, joint or [], force, json_output)
    with user_errors():
        import itertools

        import numpy as np

        from capture.poses import random_poses
        from capture.simulate import pose_is_valid
        from rigs import InputError
        from rigs.files import check_new_file
        from rigs.simulator import nominal_world

        if joint:
            raise InputError("--joint gives a discovery plan's ranges; add --sweeps.")
        check_new_file(out, force)
        if poses < 1:
            raise InputError(f"--poses must be at least 1, got {poses}.")
        if self_model is not None and (not optimal or calibration is not None):
            raise InputError("--self-model plans a self-model relearn with --optimal; it does not take --calibration.")
        if optimal and candidates < poses:
            raise InputError(f"--candidates {candidates}: --optimal chooses {poses} poses among at least as many candidates.")
        spec = robot_from_options(rig, urdf, base_link, tip_link)
        previous = None
        if calibration is not None:
            from calib.calibration import Calibration

            previous = Calibration.load(calibration)
        relearn = None
        if self_model is not None:
            from selfmodel.model.models import SelfModel

            relearn = SelfModel.load(self_model)
            if relearn.kind != "structured":
                raise InputError(f"{self_model}: a {relearn.kind} model has no joint placements to plan for; "
                                 f"plan a structured model's relearn.")
            if not spec.cameras:
                raise InputError(f"--rig {rig or urdf}: has no depth cameras to plan a self-model relearn with.")
        with nominal_world(spec) as world:
            if relearn is not None and list(relearn.joint_names) != world.chain.joint_names:
                raise InputError(f"{self_model}: is a self-model of another robot (joints {list(relearn.joint_names)}).")
            if previous is not None and list(previous.joint_names) != world.chain.joint_names:
                raise InputError(f"{calibration}: is a calibration of another robot (joints {list(previous.joint_names)}).")
            stream = random_poses(world.chain.lower, world.chain.upper, seed, lambda q: pose_is_valid(world, spec, q))
            count = max(candidates, poses) if optimal else poses
            with progress_bar("sampling valid poses", count, unit="poses") as update:
                q = []
                for k, pose in enumerate(itertools.islice(stream, count)):
                    q.append(pose)
                    update(k + 1)
            q = np.array(q)
            summary = {"plan": str(out), "poses": poses, "optimal": optimal, "candidates": len(q) if optimal else None}
            if optimal:
                from calib.workflows.pose_selection import candidate_jacobians, d_optimal, log_det

            if relearn is not None:
                from selfmodel.labels.description import described_meshes
                from selfmodel.learn.pose_planning import placement_blocks

                meshes = described_meshes(relearn.spec, relearn.urdf_path, relearn.tip_link, relearn.board)
                blocks, rank = placement_blocks(relearn.spec, meshes, q, spec.cameras,
                                                relearn.chain.deltas.detach().double().numpy(), seed)
                summary["self_model"] = str(self_model)
            elif optimal:
                chain = previous.chain if previous is not None else world.chain
                targets = (previous.targets if previous is not None else {t.name: t.xyz for t in spec.targets}) or {"tip": np.zeros(3)}
                if previous is not None and previous.tracker_T_base:
                    frame = next(iter(previous.tracker_T_base.values()))
                elif spec.tracker is not None:
                    frame = np.linalg.inv(spec.tracker.base_T_tracker)
                else:
                    frame = np.eye(4)
                    frame[0, 3] = 3.0
                blocks, rank = candidate_jacobians(chain, q, targets, frame)
            if optimal:
                selection = d_optimal(blocks, poses)
                rng = np.random.default_rng(seed)
                random_log_det = float(np.median([log_det(blocks, rng.choice(len(q), poses, replace=False)) for _ in range(20)]))
                q = q[selection.indices]
                summary.update({"identifiable_combinations": rank, "log_det": selection.log_det,
                                "random_log_det_median": random_log_det,
                                "information_gain_per_combination": float(np.exp((selection.log_det - random_log_det) / rank))})
        _write_plan(out, world.chain.joint_names, [f"p{k:04d}" for k in range(len(q))], q, {})
        if json_output:
            print_json(summary)
        else:
            text = f"{out}: {poses} poses"
            if optimal:
                what = "joint placement combinations the cameras see" if relearn is not None else "identifiable combinations"
                text += (f", D-optimal among {summary['candidates']} candidates for {summary['identifiable_combinations']} "
                         f"{what} ({summary['information_gain_per_combination']:.1f}x the information "
                         f"per combination of a random choice)")
            typer.echo(text)


def _views_plan(out: Path, poses: int, rig: Optional[str], urdf: Optional[Path], optimal: bool, sweeps: bool,
                calibration: Optional[Path], self_model: Optional[Path], views: bool, model: Optional[Path], candidates: int,
                seed: int, force: bool, json_output: bool) -> None:
    with user_errors():
        import contextlib

        from rigs import InputError, load_rig
        from rigs.files import check_new_file

        if not views:
            raise InputError("--model is the self-model a --views plan is for; add --views.")
        if model is None and rig is None:
            raise InputError("--views plans around a self-model (--model FOLDER) or, before any capture, a rig's "
                             "description (--rig): give one.")
        if optimal or sweeps or calibration is not None or self_model is not None:
            raise InputError("--views plans a self-model capture; --optimal, --sweeps, --calibration and --self-model "
                             "plan other things: give one.")
        if urdf is not None:
            raise InputError("--views takes its cameras from --rig or from the model's training sessions; "
                             "--urdf has none.")
        check_new_file(out, force)
        if poses < 1:
            raise InputError(f"--poses must be at least 1, got {poses}.")
        from selfmodel.learn.view_planning import plan_views, views_verdict
        from selfmodel.model.models import SelfModel

        loaded = SelfModel.load(model) if model is not None else None
        spec = load_rig(rig) if rig is not None else None
        with contextlib.ExitStack() as bars:
            shown: dict = {}

            def progress(stage: str, done: int, total: int) -> None:
                if shown.get("stage") != stage:
                    bars.close()  # one bar a stage: the previous one ends here
                    shown["stage"], shown["update"] = stage, bars.enter_context(progress_bar(stage, total, unit="poses"))
                shown["update"](done)

            plan = plan_views(loaded, poses, spec, candidates, seed, progress)
        _write_plan(out, plan.joint_names, [f"p{k:04d}" for k in range(len(plan.q))], plan.q, {})
        verdict = views_verdict(plan)
        summary = {"verdict": verdict.as_dict(), "plan": str(out), "model": None if model is None else str(model)} \
            | plan.report()
        if json_output:
            print_json(summary)
            return
        say_verdict(verdict)
        typer.echo(f"{out}: {len(plan.q)} poses chosen among {plan.candidates} candidates ({plan.aimed} aimed at the "
                   f"hidden space) for cameras {', '.join(plan.cameras)} ({plan.seconds:.0f} s); seen before: "
                   f"{plan.recorded_from}")
        typer.echo(f"unseen volume per link (body surface seen at fewer than {summary['min_poses']} poses), cm3:")
        typer.echo(f"  {'link':<16} {'before':>8} {'after (expected)':>17} {'no candidate shows':>19}")
        for link, before in plan.before_cm3.items():
            typer.echo(f"  {link:<16} {before:8.1f} {plan.after_cm3[link]:17.1f} {plan.beyond_cm3[link]:19.1f}")
        typer.echo(f"  {'all links':<16} {sum(plan.before_cm3.values()):8.1f} {sum(plan.after_cm3.values()):17.1f} "
                   f"{sum(plan.beyond_cm3.values()):19.1f}")


def _write_plan(out: Path, joint_names: list[str], pose_ids: list[str], q, extra: dict[str, list[str]]) -> None:
    import csv
    import io

    from rigs.files import atomic_write_text

    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["pose", *joint_names, *extra])
    writer.writerows([[pose, *(repr(float(v)) for v in row), *(extra[k][i] for k in extra)]
                      for i, (pose, row) in enumerate(zip(pose_ids, q))])
    atomic_write_text(out, buffer.getvalue())


def _sweep_plan(out: Path, poses: int, rig: Optional[str], urdf: Optional[Path], base_link: Optional[str],
                tip_link: Optional[str], optimal: bool, calibration: Optional[Path], seed: int, steps: int,
                sweep_deg: float, sweep_mm: float, joint: list[str], force: bool, json_output: bool) -> None:
    with user_errors():
        import math

        import numpy as np

        from capture.simulate import pose_is_valid
        from capture.sweeps import parse_joint_ranges, rig_sweep_ranges, sweep_plan
        from rigs import InputError
        from rigs.files import check_new_file
        from rigs.simulator import nominal_world

        if optimal or calibration is not None:
            raise InputError("--sweeps plans a discovery; --optimal and --calibration plan a calibration: give one.")
        if not (sweep_deg > 0 and math.isfinite(sweep_deg)) or not (sweep_mm > 0 and math.isfinite(sweep_mm)):
            raise InputError(f"--sweep-deg and --sweep-mm must be positive, got {sweep_deg} and {sweep_mm}.")
        check_new_file(out, force)
        described = rig is not None or urdf is not None
        if described and joint:
            raise InputError("give either a robot (--rig or --urdf) or its --joint ranges, not both.")
        if described:
            from rigs.limits import ArmJoints

            spec = robot_from_options(rig, urdf, base_link, tip_link)
            types = ArmJoints.from_urdf(spec.robot.urdf, spec.robot.base_link, spec.robot.tip_link).types
            with nominal_world(spec) as world:
                chain = world.chain
                low, high = rig_sweep_ranges(types, chain.lower, chain.upper, np.radians(sweep_deg),
                                             sweep_mm / 1000.0)
                plan = sweep_plan(chain.joint_names, low, high, steps, poses, seed,
                                  is_free=lambda q: not world.in_collision(q),
                                  is_valid=lambda q: pose_is_valid(world, spec, q),
                                  joint_lower=chain.lower, joint_upper=chain.upper)
                names = chain.joint_names
            checked = "collision-free on the robot's description"
        else:
            ranges = parse_joint_ranges(joint)
            names = [r.name for r in ranges]
            plan = sweep_plan(names, np.array([r.lower for r in ranges]), np.array([r.upper for r in ranges]), steps,
                              poses, seed)
            checked = "not checked for collisions (no robot description): watch the arm as it runs"
        _write_plan(out, names, plan.pose_ids, plan.q, plan.extra)
        phases = plan.extra["phase"]
        summary = {"plan": str(out), "sweeps": {name: phases.count(f"sweep:{name}") for name in names},
                   "random_poses": phases.count("random"), "poses": len(plan.pose_ids), "checked": checked}
        if json_output:
            print_json(summary)
        else:
            typer.echo(f"{out}: discovery plan of {len(plan.pose_ids)} poses, {len(names)} joint sweeps "
                       f"({', '.join(f'{n} {c}' for n, c in summary['sweeps'].items())} frames) then "
                       f"{summary['random_poses']} random poses; {checked}.")


def recalibrate(
    sessions: list[Path] = typer.Argument(..., help="Session(s) recorded after the event."),
    previous: Path = typer.Option(..., "--previous", help="The calibration folder from before."),
    out: Path = typer.Option(..., "--out", help="New calibration folder."),
    holdout: float = typer.Option(0.0, "--holdout", help="Keep this fraction of the poses out of the fit (reduces the "
                                  "data). Default 0: every pose is fitted, held-out figures by cross-validation."),
    seed: int = typer.Option(0, "--seed"),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out folder."),
    json_output: bool = typer.Option(False, "--json"),
    model: CalibrationModel = typer.Option("full", "--model", help="full: placements and zero offsets may change; "
                                           "offsets: zero offsets only (after an encoder or motor swap)."),
    tolerance_mm: Optional[float] = typer.Option(None, "--tolerance-mm", help="Largest acceptable cross-validated RMS "
                                                 "error after the refit, mm (default: twice the previous "
                                                 "calibration's, and at least twice the tracker's own error)."),
    require_pass: bool = require_pass_option(),
    ros_package: Optional[str] = ros_package_option(),
) -> None:
    """Refit from a previous calibration and name what changed, most significant first."""
    with user_errors():
        from calib.calibration import Calibration
        from calib.workflows.recalibrate import recalibrate as run
        from calib.workflows.verdicts import recalibration_verdict
        from capture.session import load_session
        from rigs import urdf as urdf_io
        from rigs.files import atomic_write_json, check_new_output, output_folder
        from selfcal.ui import to_jsonable

        check_new_output(out, force)
        check_positive(tolerance_mm=tolerance_mm)
        if ros_package is not None:
            urdf_io.check_package_name(ros_package)
        loaded = [load_session(path) for path in sessions]
        new, comparison = run(loaded, previous, holdout, seed, model=model)
        replaced = Calibration.load(previous)
        verdict = recalibration_verdict(replaced.summary, comparison, loaded, tolerance_mm)
        comparison = {"verdict": verdict.as_dict()} | comparison
        new.summary["verdict"] = verdict.as_dict()  # report.html opens with it
        with output_folder(out, force) as folder:
            new.save(folder, previous=replaced)
            if ros_package is not None:
                urdf_io.use_package_uris(folder / "robot.urdf", ros_package)
            atomic_write_json(folder / "recalibration.json", to_jsonable(comparison))
        if json_output:
            print_json(comparison | {"calibration": str(out)})
        else:
            say_verdict(verdict)
            accuracy = comparison["accuracy"]
            typer.echo(f"{out}: recalibrated from {previous}")
            typer.echo(f"  before: {accuracy['before_rms_mm']:.3f} mm RMS on the new data (previous calibration)")
            if accuracy["after_holdout_rms_mm"] is not None:
                typer.echo(f"  after:  {accuracy['after_holdout_rms_mm']:.3f} mm RMS on held-out poses "
                           f"({accuracy['after_holdout_method']})")
            if comparison["summary"]:
                typer.echo("what changed, most significant first:")
                for sentence in comparison["summary"]:
                    typer.echo(f"  - {sentence}")
            else:
                typer.echo("nothing changed beyond the combined uncertainty of the two calibrations.")
    exit_for(verdict, require_pass)
