"""``selfcal selfmodel train|eval|check``: the arm's shape learned from depth images."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from selfcal.options import (NO_DEPTH_HELP, Placements, SelfModelKind, check_positive, parse_no_depth,
                             require_pass_option)
from selfcal.ui import exit_for, print_json, progress_bar, say_verdict, user_errors

selfmodel_app = typer.Typer(help="Learn the arm's shape from depth images, evaluate it, check it against a URDF.",
                            no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(selfmodel_app, name="selfmodel")


def parse_holds(items: list[str]) -> dict[str, float]:
    """``["joint=0.02", ...]`` -> {joint: 0.02}; InputError naming the item that is not JOINT=NUMBER."""
    import math

    from rigs.errors import InputError

    held = {}
    for item in items:
        name, _, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        if not name.strip() or not math.isfinite(number):
            raise InputError(f"--hold {item!r}: expected JOINT=VALUE with the joint's position in rad or m.")
        held[name.strip()] = number
    return held


def placements_held(mode: str, urdf: Path | None, discovered: bool,
                    previous: Path | None) -> tuple[bool, str, Path | None]:
    """Whether a training holds the joint placements (``--placements``), why in words, and the
    calibration folder whose URDF is held (None when it is not a calibration's).

    ``auto`` holds them for the URDF of a calibration folder (``selfcal calibrate`` writes
    robot.urdf beside calibration.yaml, which names it): that fit measured the placements from board
    corners or tracker points, finer than depth laid onto the description's shapes, which a bent
    link pulls by millimetres. Relearning from a ``previous`` model fits them (what changed is the
    point), as does any other URDF. A discovered chain is always held: its placements are already
    this depth's own fit.
    """
    from rigs.errors import InputError

    if discovered:
        if mode == "fit":
            raise InputError("--placements fit needs a description: a chain discovered with --no-urdf is placed by "
                             "its own fit of this depth already.")
        return True, "held as discovered", None
    if mode == "fit" or (mode == "auto" and previous is not None):
        return False, "fitted from depth", None
    calibration = _calibration_of(urdf, strict=mode == "auto") if urdf is not None else None
    if mode == "hold":
        return True, "held as the URDF gives them (--placements hold)", calibration
    if calibration is None:
        return False, "fitted from depth", None
    return True, f"held as calibrated ({calibration / 'calibration.yaml'})", calibration


def _calibration_of(urdf: Path, strict: bool) -> Path | None:
    """The calibration folder whose robot.urdf ``urdf`` is (its calibration.yaml names it), or None.
    ``strict``: a calibration.yaml beside it that is no selfcal calibration is refused, not passed over."""
    from calib.io.document import read_calibration_document
    from rigs.errors import InputError

    folder = Path(urdf).parent
    if not (folder / "calibration.yaml").is_file():
        return None
    path, document = read_calibration_document(folder)
    if not isinstance(document, dict) or document.get("format") != "selfcal-calibration":
        if strict:
            raise InputError(f"{path}: beside --urdf {urdf} but not a selfcal-calibration file; move it or say "
                             f"--placements fit or hold.")
        return None
    robot = document.get("robot")
    named = robot.get("urdf", "robot.urdf") if isinstance(robot, dict) else None
    if not isinstance(named, str) or (folder / named).resolve() != Path(urdf).resolve():
        return None
    return folder


def calibrated_placement_std(folder: Path) -> dict[str, list[float]]:
    """joint -> (6,) standard deviations (m, rad; dx..wz) of the placements a calibration measured:
    its placement deltas', with its zero offset's about (or, prismatic, along) the joint's axis. A
    held placement carries them, so `selfmodel check` weighs the joints as the calibration knew them."""
    import numpy as np

    from calib.calibration import Calibration

    calibration = Calibration.load(folder)
    chain = calibration.chain
    out = {}
    for j, name in enumerate(calibration.joint_names):
        std = np.asarray(calibration.delta_std[j], dtype=float).copy()
        kind = chain.model.joints[chain.joint_ids[j]].shortname().removeprefix("JointModel")
        part = slice(0, 3) if kind.startswith("P") else slice(3, 6)
        std[part] = np.sqrt(std[part] ** 2 + (float(calibration.zero_std[j]) * np.abs(chain.axes[j])) ** 2)
        out[name] = std.tolist()
    return out


def camera_poses_from_calibration(folder: Path) -> tuple[dict, dict]:
    """(camera name -> base_T_camera (4, 4), camera name -> CameraInfo of the cameras whose
    intrinsics it fitted) from a camera calibration folder (read by calib's reader)."""
    import numpy as np

    from calib.calibration import Calibration
    from capture.camera_info import CameraInfo

    calibration = Calibration.load(folder)
    fitted = {name: CameraInfo(name, int(calibration.intrinsics[name]["width"]),
                               int(calibration.intrinsics[name]["height"]), K, np.zeros(5))
              for name, K in calibration.camera_matrices().items()}
    return calibration.base_T_camera, fitted


def fitted_board_mount(calibration: Path | None):
    """(tip_T_board (4, 4), where it was measured) that the calibration in folder ``calibration`` fitted
    from its board corners, or None. Only for a model that trains on that calibration's robot.urdf:
    the fitted mount is in its tip frame."""
    if calibration is None:
        return None
    from calib.calibration import Calibration

    fitted = Calibration.load(calibration).tip_T_board
    return None if fitted is None else (fitted, str(Path(calibration) / "calibration.yaml"))


@selfmodel_app.command("train")
def train(
    sessions: List[Path] = typer.Argument(..., help="Session folder(s) with depth images and camera poses."),
    out: Path = typer.Option(..., "--out", help="Model folder to create."),
    kind: SelfModelKind = typer.Option("structured", "--kind", help="structured (per-link networks on the URDF's chain) or free."),
    minutes: float = typer.Option(10.0, "--minutes", help="Training time budget in minutes."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Exact number of training steps (bit-for-bit repeatable; overrides --minutes)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the label sampling, initialisation and batches."),
    urdf: Optional[Path] = typer.Option(None, "--urdf", help="A (calibrated) URDF to use instead of the session's."),
    cameras: Optional[Path] = typer.Option(None, "--cameras", help="A camera calibration folder (`selfcal calibrate` of sessions with the board on the flange): train with the camera poses it found (and the intrinsics, with --fit-intrinsics)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch (default: half the cores this process may use, at least 1: a shared machine's other jobs stall every thread)."),
    device: str = typer.Option("auto", "--device", help="auto (a GPU when torch sees one, else the CPU), cpu or cuda."),
    previous: Optional[Path] = typer.Option(None, "--previous", help="A model of this arm to start from (its weights and joint corrections): relearning after a crash needs few poses and steps; says what changed."),
    placements: Placements = typer.Option("auto", "--placements", help="How the joints are placed: fit (to the depth, "
                                          "against the description's shapes), hold (as the URDF gives them), or auto: hold for "
                                          "a calibration's robot.urdf (`selfcal calibrate`: board or tracker, finer than depth) "
                                          "unless relearning from --previous, else fit."),
    hold: List[str] = typer.Option([], "--hold", help="JOINT=VALUE (rad or m): where a joint off the chain (a gripper finger) stood, when the session does not record it; repeat for each."),
    no_urdf: bool = typer.Option(False, "--no-urdf", help="Read no description: discover the chain from the first "
                                 "session's joint sweeps (`selfcal plan --sweeps`) and train on it."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted training of the same --out."),
    no_depth: List[str] = typer.Option([], "--no-depth", help=NO_DEPTH_HELP + " Default: as each session's camera says (an import records auto unless told otherwise)."),
    json_output: bool = typer.Option(False, "--json", help="Print a machine-readable summary."),
) -> None:
    """Train a self-model: occupancy queried by (point, joint angles), learned from depth alone."""
    with user_errors():
        from capture.session import load_session
        from rigs.errors import InputError
        from rigs.files import check_new_output
        from selfmodel.learn.trainer import SelfModelTrainer
        from selfmodel.learn.workflow import train_model
        from selfmodel.model.models import SelfModel

        check_new_output(out)
        from selfmodel.learn.placement import PlacementSettings

        # On a discovered chain the discovery's own fit over the random poses places the joints, and
        # the tip's hull already holds what moved with it (a tool, the board): its domain needs no
        # room for them, and the board's nominal pose is in a tip frame the discovery does not know.
        extra = {"tip_margin": SelfModelTrainer.domain_margin, "board_on_tip": False} if no_urdf else {}
        if urdf is not None and not urdf.is_file():
            raise InputError(f"{urdf}: URDF not found.")
        if urdf is not None and kind == "free":
            raise InputError("--urdf gives the structured model its chain; the free model uses no URDF.")
        if no_urdf and (urdf is not None or kind == "free"):
            raise InputError("--no-urdf discovers the structured model's chain; it goes with neither --urdf nor --kind free.")
        # After the URDF is known to exist: a calibration beside it is read for its standard deviations.
        held, placed, calibration = placements_held(placements, urdf, no_urdf, previous)
        known = calibrated_placement_std(calibration) if calibration is not None else None
        from selfmodel.labels.depth import LabelSettings

        trainer = SelfModelTrainer(kind=kind, minutes=minutes, steps=steps, seed=seed, threads=threads,
                                   hold=parse_holds(hold), device=device, description=urdf,
                                   placement=PlacementSettings(hold=held, held_std=known),
                                   labels=LabelSettings(no_depth=parse_no_depth(no_depth)), **extra)
        before = SelfModel.load(previous) if previous is not None else None
        loaded = [load_session(path) for path in sessions]
        if cameras is not None:
            poses, intrinsics = camera_poses_from_calibration(cameras)
            loaded = [session.with_camera_poses(poses, str(cameras / "calibration.yaml"), intrinsics)
                      for session in loaded]
        run = {"kind": kind, "seed": seed, "minutes": minutes, "steps": steps, "sessions": [str(s) for s in sessions],
               "urdf": None if urdf is None or no_urdf else str(urdf), "discovered": no_urdf,
               "cameras": None if cameras is None else str(cameras), "placements": "held" if held else "fitted",
               **({"hold": list(hold)} if hold else {}), **({"previous": str(previous)} if previous is not None else {})}
        trained = train_model(loaded, out, trainer, run, resume=resume, previous=before, discover=no_urdf,
                              fitted_board_mount=fitted_board_mount(calibration), bars=progress_bar)
        result, zeros, changes, discovered = trained.result, trained.no_depth, trained.changes, trained.discovered
        summary = {"model": str(out), "kind": kind, "steps": result.steps, "seconds": round(result.seconds, 1),
                   "final_loss": result.final_loss, "labelled_points": result.labelled_points,
                   "configurations": result.configurations, "no_depth": zeros}
        if result.model.corrections is not None:
            summary["joint_placement"] = {**result.model.corrections.to_json(), "how": placed}
        if changes is not None:
            summary["changes"] = changes
        if discovered is not None:
            summary["discovered_chain"] = {
                "refinement": {k: v for k, v in (discovered.source.get("refinement") or {}).items() if k != "joints"},
                "joints": [{"joint": j.name, "type": j.type, "direction": j.direction, "point_m": j.point,
                            "direction_sd_deg": j.direction_sd_deg, "position_sd_mm": j.position_sd_mm}
                           for j in discovered.joints]}
        if json_output:
            print_json(summary)
        else:
            typer.echo(f"{out}: {kind} self-model, {result.steps} steps in {result.seconds / 60:.1f} min on "
                       f"{result.labelled_points} labelled points from {result.configurations} poses")
            typer.echo("pixels with no reading: " + "; ".join(
                f"{name} {z['mode']}" + (f" (free up to {z['far_range_m']:.2f} m)" if z["far_range_m"] else "")
                + (", --no-depth" if z["source"] == "--no-depth" else "") for name, z in zeros.items()))
            if discovered is not None:
                refined = (discovered.source.get("refinement") or {}).get("poses", 0)
                typer.echo(f"chain discovered from the sweeps{f', axes refined over {refined} random poses' if refined else ''}:")
                for j in discovered.joints:
                    where = f", position +- {j.position_sd_mm:.2f} mm" if j.type == "revolute" else ""
                    typer.echo(f"  {j.name:<16} {j.type:<9} direction +- {j.direction_sd_deg:.3f} deg{where}")
                from selfcal.cli_discovery import SD_CAVEAT

                typer.echo(SD_CAVEAT)
            if result.model.corrections is not None and not no_urdf:  # held on a discovered chain
                typer.echo(result.model.corrections.summary() if not held else f"joint placements {placed}")
            if changes is not None:
                from selfmodel.inspect.changes import summary as change_lines

                for line in change_lines(changes):
                    typer.echo(line)


def unsupported_line(cm3: dict | None) -> str:
    """What ``check`` and ``eval`` say of learned matter no depth reading supported."""
    if cm3 is None:
        return "learned matter no depth reading supported: not checked (the training sessions cannot be read)"
    total = sum(cm3.values())
    return (f"learned matter no depth reading supported (matter only because never seen free): {total:.0f} cm3"
            + (" (" + ", ".join(f"{link} {value:.0f}" for link, value in cm3.items() if value > 0) + ")" if total else "")
            + ("; shells beside the arm where zeros were taken as unknown? see --no-depth" if total > 50 else ""))


def unseen_line(cm3: dict | None, min_poses: int) -> str:
    """What ``check``, ``export`` and ``plan --views`` say of each link's unseen volume."""
    if cm3 is None:
        return "unseen volume: not measured (the training sessions cannot be read)"
    total = sum(cm3.values())
    return (f"unseen volume (body surface no camera saw at >= {min_poses} poses; matter only because unknown): "
            f"{total:.0f} cm3" + (" (" + ", ".join(f"{link} {value:.0f}" for link, value in cm3.items() if value >= 0.5)
                                  + "); `selfcal plan --views` plans poses that show it" if total >= 0.5 else ""))


@selfmodel_app.command("eval")
def evaluate(
    model: Path = typer.Argument(..., help="Model folder."),
    session: Path = typer.Argument(..., help="A simulated session (held-out poses) with truth/."),
    poses: Optional[int] = typer.Option(None, "--poses", help="Evaluate the first N poses only."),
    voxel: float = typer.Option(5.0, "--voxel-mm", help="Marching-cubes voxel in mm for the model's surface."),
    seed: int = typer.Option(0, "--seed", help="Seed of the evaluation samples."),
    device: str = typer.Option("auto", "--device", help="auto (a GPU when torch sees one, else the CPU), cpu or cuda."),
    json_output: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
    tolerance_mm: Optional[float] = typer.Option(None, "--tolerance-mm", help="Largest acceptable Chamfer-L1 "
                                                 "distance to the true surface, mm (default: 1 % of the "
                                                 "workspace's largest extent, the F-score's distance)."),
    false_free_max: Optional[float] = typer.Option(None, "--false-free-max", help="Largest acceptable share of the "
                                                   "true body the model calls free, percent (default 1)."),
    require_pass: bool = require_pass_option(),
) -> None:
    """Compare a model with the true arm of a simulated session (Chamfer-L1, F-score, IoU, false-free rate)."""
    with user_errors():
        import numpy as np

        from capture.session import load_session
        from rigs.errors import InputError
        from selfmodel.evaluation.metrics import evaluate as evaluate_model
        from selfmodel.inspect.verdicts import eval_verdict
        from selfmodel.model.models import SelfModel

        if voxel <= 0:
            raise InputError(f"--voxel-mm must be positive, got {voxel}.")
        check_positive(tolerance_mm=tolerance_mm, false_free_max=false_free_max)
        from selfmodel.model.runtime import resolve_device

        target = resolve_device(device)
        loaded_model = SelfModel.load(model).to(target)
        loaded = load_session(session)
        pose_ids = loaded.pose_ids[:poses] if poses else None
        with progress_bar("evaluating", len(pose_ids or loaded.pose_ids), unit="poses") as update:
            figures = evaluate_model(loaded_model, loaded, np.random.default_rng(seed), pose_ids, voxel / 1000,
                                     progress=update)
        if loaded_model.kind == "structured":
            from selfmodel.labels.seen_through import training_sessions, unsupported_matter

            trained_on = training_sessions(loaded_model.folder)[0]
            figures["unsupported_matter_cm3"] = unsupported_matter(loaded_model.to("cpu"), trained_on) if trained_on else None
        verdict = eval_verdict(figures, voxel, tolerance_mm, false_free_max)
        if json_output:
            print_json({"verdict": verdict.as_dict()} | figures)
        else:
            say_verdict(verdict)
            typer.echo(f"{figures['kind']} model on {figures['poses']} poses: Chamfer-L1 {figures['chamfer_l1_mm']:.2f} mm "
                       f"({figures['chamfer_pct_workspace']:.3f} % of {figures['workspace_extent_m']:.2f} m), "
                       f"F-score {figures['fscore']:.3f}, IoU {figures['iou']:.3f}, "
                       f"false-free {100 * figures['false_free_rate']:.2f} %")
            typer.echo(f"queries (100k points a call at one configuration, wall clock, load {figures['query_load']:.1f}): "
                       f"network {figures['queries_per_s']:.3g}/s at {figures['query_threads']} thread(s)"
                       + (f", baked grids {figures['baked_queries_per_s']:.3g}/s at {figures['baked_query_threads']} "
                          f"thread(s)" if "baked_queries_per_s" in figures else ""))
            if "baked_queries_per_s" in figures:
                typer.echo(f"baked grids ({figures['baked_pitch_mm']:.0f} mm): x{figures['baked_queries_per_s'] / figures['queries_per_s']:.1f} "
                           f"the network's speed, disagreeing "
                           f"with the network on {100 * figures['baked_disagreement_workspace']:.2f} % of workspace points "
                           f"and {100 * figures['baked_disagreement_arm_box']:.2f} % of points around the arm")
            if "unsupported_matter_cm3" in figures:
                typer.echo(unsupported_line(figures["unsupported_matter_cm3"]))
    exit_for(verdict, require_pass)


@selfmodel_app.command("check")
def check(
    model: Path = typer.Argument(..., help="Structured model folder."),
    urdf: Path = typer.Option(..., "--urdf", help="The description to compare the learned body with."),
    json_output: bool = typer.Option(False, "--json", help="Print the verdict and per-link deviations as JSON."),
    threshold_mm: Optional[float] = typer.Option(None, "--threshold-mm", help="Damage threshold, mm: a link whose "
                                                 "joint correction moves what follows it, or whose measured surface "
                                                 "stands outside or inside the description, by more than this (and "
                                                 "by more than twice its uncertainty) is reported (default: 3 x the "
                                                 "depth noise about the description, and at least 5 mm)."),
    report: Optional[Path] = typer.Option(None, "--report", help="Also write this HTML page: the verdict, the learned "
                                          "body beside the description in a 3D view that opens offline, a row per link."),
    require_pass: bool = require_pass_option(),
) -> None:
    """Is the arm intact? Per link: its joint correction (the estimated bend, degrees) and matter added to or
    missing from the description, each with its uncertainty, judged against a damage threshold."""
    with user_errors():
        from rigs.errors import InputError
        from selfmodel.inspect.check import check_against
        from selfmodel.inspect.page import write_check_page
        from selfmodel.inspect.verdicts import check_threshold, check_verdict
        from selfmodel.model.models import SelfModel

        check_positive(threshold_mm=threshold_mm)  # before minutes of work
        if report is not None and (report.exists() or not report.parent.is_dir()):
            raise InputError(f"--report {report}: " + ("already exists; choose another path." if report.exists() else
                                                       f"its folder {report.parent} does not exist."))
        loaded = SelfModel.load(model)
        result = check_against(loaded, urdf)
        verdict = check_verdict(result, threshold_mm)
        if report is not None:
            write_check_page(report, loaded, result, verdict, check_threshold(result.noise_mm, threshold_mm).value, urdf)
        if json_output:
            print_json({"verdict": verdict.as_dict(), **result.as_dict()})
        else:
            say_verdict(verdict)
            typer.echo(f"depth noise about the description {result.noise_mm:.1f} mm over {result.points} measured points; "
                       + ("described surface the cameras saw through: read from the training sessions' depth images"
                          if result.seen_through_checked else "described surface the cameras saw through: not checked "
                          "(the training sessions are not where the model folder names them, or have no camera poses)"))
            typer.echo(unsupported_line(result.unsupported_cm3))
            typer.echo(unseen_line(result.unseen_cm3, result.as_dict()["unseen_min_poses"]))
            for row in result.rows:
                sd = "" if row.deviation_sd_mm is None else f" +- {row.deviation_sd_mm:4.1f}"
                bend = "" if not row.joint else (f"  [{row.joint}: moves what follows {row.joint_mm:.1f} mm, turned "
                                                 f"{row.bend_deg:.2f}" + ("" if row.bend_sd_deg is None else
                                                                          f" +- {row.bend_sd_deg:.2f}") + " deg]")
                x, y, z = (1000 * v for v in row.where_link)
                typer.echo(f"{row.link:<16} {row.deviation_mm:8.1f}{sd} mm  {row.kind:<16} at ({x:.0f}, {y:.0f}, {z:.0f}) mm "
                           f"in the link frame  [added {row.added_mm:.1f}, missing {row.missing_mm:.1f} mm]{bend}")
    exit_for(verdict, require_pass)
