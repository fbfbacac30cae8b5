"""``selfcal selfmodel train|eval|check``: the arm's shape learned from depth images."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import List, Optional

import typer

from selfcal.ui import print_json, progress_bar, user_errors

selfmodel_app = typer.Typer(help="Learn the arm's shape from depth images, evaluate it, check it against a URDF.",
                            no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(selfmodel_app, name="selfmodel")


def _partial(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


def camera_poses_from_calibration(folder: Path) -> dict:
    """Camera name -> base_T_camera (4, 4) from a camera calibration folder (read by calib's reader)."""
    from calib.calibration import Calibration

    return Calibration.load(folder).base_T_camera


@contextlib.contextmanager
def _training_folder(out: Path, run: dict, resume: bool):
    """``MODEL.partial/`` for a training's checkpoints: yields (folder, whether a checkpoint continues).

    The folder appears whole (run.json in it) and is locked while training, so a second run stops
    with a sentence; a run refused for bad input removes the folder it made, so nothing blocks the
    next valid run; an interrupted one leaves it for ``--resume``; a finished one removes it.
    """
    from rigs.errors import InputError
    from rigs.files import (TEMPORARY_TAG, atomic_write_json, clean_leftovers, current_umask, is_locked, locked_folder,
                            make_parents, read_json, remove_empty_folders, rename_no_replace)
    from selfmodel.training import CHECKPOINT

    partial = _partial(out)
    busy = f"{partial}: another training is writing it now; wait for it to finish or choose another --out."
    if is_locked(partial):
        raise InputError(busy)
    if resume:
        if not (partial / "run.json").is_file():
            raise InputError(f"{partial}: nothing to resume (no interrupted training for {out}); run without --resume.")
        previous = read_json(partial / "run.json", "training record")
        if previous != run:
            raise InputError(f"{partial}/run.json: the interrupted training used other options ({previous}); "
                             f"resume with the same ones.")
    elif partial.exists():
        raise InputError(f"{partial}: an interrupted training is there; run the same command with --resume to continue "
                         f"it, or remove {partial} to start over.")
    clean_leftovers(partial)
    created = False
    if not resume:
        parents = make_parents(partial.parent)
        layout = Path(tempfile.mkdtemp(dir=partial.parent, prefix=f".{partial.name}{TEMPORARY_TAG}", suffix=".tmp"))
        try:
            atomic_write_json(layout / "run.json", run)
            os.chmod(layout, 0o777 & ~current_umask())  # mkdtemp makes 0700
            rename_no_replace(layout, partial)
        except FileExistsError:
            shutil.rmtree(layout, ignore_errors=True)
            raise InputError(busy) from None
        except BaseException:
            shutil.rmtree(layout, ignore_errors=True)
            remove_empty_folders(parents)
            raise
        created = True
    with locked_folder(partial, busy):
        try:
            # Killed before its first checkpoint, a resumed training starts over: the same run, bit for bit.
            yield partial, resume and (partial / CHECKPOINT).is_file()
        except InputError:
            if created:
                shutil.rmtree(partial, ignore_errors=True)
                remove_empty_folders(parents)
            raise
    shutil.rmtree(partial, ignore_errors=True)


@selfmodel_app.command("train")
def train(
    sessions: List[Path] = typer.Argument(..., help="Session folder(s) with depth images and camera poses."),
    out: Path = typer.Option(..., "--out", help="Model folder to create."),
    kind: str = typer.Option("structured", "--kind", help="structured (per-link networks on the URDF's chain) or free."),
    minutes: float = typer.Option(10.0, "--minutes", help="Training time budget in minutes."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Exact number of training steps (bit-for-bit repeatable; overrides --minutes)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the label sampling, initialisation and batches."),
    urdf: Optional[Path] = typer.Option(None, "--urdf", help="A (calibrated) URDF to use instead of the session's."),
    no_urdf: bool = typer.Option(False, "--no-urdf", help="Read no description: discover the chain from the first "
                                 "session's joint sweeps (`selfcal plan --sweeps`) and train on it."),
    cameras: Optional[Path] = typer.Option(None, "--cameras", help="A camera calibration folder (`selfcal calibrate` of sessions with the board on the flange): train with the camera poses it found."),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads for torch (default: every core this process may use)."),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted training of the same --out."),
    json_output: bool = typer.Option(False, "--json", help="Print a machine-readable summary."),
) -> None:
    """Train a self-model: occupancy queried by (point, joint angles), learned from depth alone."""
    with user_errors():
        from capture.session import load_session
        from rigs.errors import InputError
        from rigs.files import check_new_output, output_folder
        from selfmodel.model_io import save_model
        from selfmodel.training import SelfModelTrainer

        check_new_output(out)
        trainer = SelfModelTrainer(kind=kind, minutes=minutes, steps=steps, seed=seed, threads=threads)
        if urdf is not None and not urdf.is_file():
            raise InputError(f"{urdf}: URDF not found.")
        if urdf is not None and kind == "free":
            raise InputError("--urdf gives the structured model its chain; the free model uses no URDF.")
        if no_urdf and (urdf is not None or kind == "free"):
            raise InputError("--no-urdf discovers the structured model's chain; it goes with neither --urdf nor --kind free.")
        if threads is not None and threads < 1:
            raise InputError(f"--threads must be at least 1, got {threads}.")
        loaded = [load_session(path) for path in sessions]
        if cameras is not None:
            poses = camera_poses_from_calibration(cameras)
            loaded = [session.with_camera_poses(poses, str(cameras / "calibration.yaml")) for session in loaded]
        from selfmodel.depth_labels import check_depth_sessions

        check_depth_sessions(loaded)  # before anything is written: a refusal leaves no folder behind
        discovered = None
        if no_urdf:
            import tempfile

            from selfmodel.discovery.urdf_writer import discover_urdf

            scratch = Path(tempfile.mkdtemp(prefix="selfcal-discovered-"))
            with progress_bar("discovering the chain", len(loaded[0].joint_names)) as update:
                discovered, urdf = discover_urdf(loaded[0], scratch, update)
        run = {"kind": kind, "seed": seed, "minutes": minutes, "steps": steps, "sessions": [str(s) for s in sessions],
               "urdf": None if urdf is None or no_urdf else str(urdf), "discovered": no_urdf,
               "cameras": None if cameras is None else str(cameras)}
        with _training_folder(out, run, resume) as (partial, continues):
            with progress_bar(f"training {kind} self-model", steps or 0) as update:
                result = trainer.fit(loaded, urdf, checkpoint_dir=partial, resume=continues, progress=update)
            board = (loaded[0].manifest.get("sensors") or {}).get("board")
            with output_folder(out) as folder:
                save_model(result, folder, loaded, run, board)
                if discovered is not None:
                    discovered.save(folder / "discovered_chain.json")
        if discovered is not None:
            import shutil

            shutil.rmtree(urdf.parent, ignore_errors=True)
        summary = {"model": str(out), "kind": kind, "steps": result.steps, "seconds": round(result.seconds, 1),
                   "final_loss": result.final_loss, "labelled_points": result.labelled_points,
                   "configurations": result.configurations}
        if json_output:
            print_json(summary)
        else:
            typer.echo(f"{out}: {kind} self-model, {result.steps} steps in {result.seconds / 60:.1f} min on "
                       f"{result.labelled_points} labelled points from {result.configurations} poses")


@selfmodel_app.command("eval")
def evaluate(
    model: Path = typer.Argument(..., help="Model folder."),
    session: Path = typer.Argument(..., help="A simulated session (held-out poses) with truth/."),
    poses: Optional[int] = typer.Option(None, "--poses", help="Evaluate the first N poses only."),
    voxel: float = typer.Option(5.0, "--voxel-mm", help="Marching-cubes voxel in mm for the model's surface."),
    seed: int = typer.Option(0, "--seed", help="Seed of the evaluation samples."),
    json_output: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
) -> None:
    """Compare a model with the true arm of a simulated session (Chamfer-L1, F-score, IoU, false-free rate)."""
    with user_errors():
        import numpy as np

        from capture.session import load_session
        from rigs.errors import InputError
        from selfmodel.metrics import evaluate as evaluate_model
        from selfmodel.model_io import load_model

        if voxel <= 0:
            raise InputError(f"--voxel-mm must be positive, got {voxel}.")
        loaded_model = load_model(model)
        loaded = load_session(session)
        pose_ids = loaded.pose_ids[:poses] if poses else None
        with progress_bar("evaluating", len(pose_ids or loaded.pose_ids)) as update:
            figures = evaluate_model(loaded_model, loaded, np.random.default_rng(seed), pose_ids, voxel / 1000,
                                     progress=update)
        if json_output:
            print_json(figures)
        else:
            typer.echo(f"{figures['kind']} model on {figures['poses']} poses: Chamfer-L1 {figures['chamfer_l1_mm']:.2f} mm "
                       f"({figures['chamfer_pct_workspace']:.3f} % of {figures['workspace_extent_m']:.2f} m), "
                       f"F-score {figures['fscore']:.3f}, IoU {figures['iou']:.3f}, "
                       f"false-free {100 * figures['false_free_rate']:.2f} %, {figures['queries_per_s']:.0f} queries/s")


@selfmodel_app.command("check")
def check(
    model: Path = typer.Argument(..., help="Structured model folder."),
    urdf: Path = typer.Option(..., "--urdf", help="The description to compare the learned body with."),
    json_output: bool = typer.Option(False, "--json", help="Print per-link deviations as JSON."),
) -> None:
    """Where the learned body differs from a URDF: per link the largest deviation (mm) and where, largest first."""
    with user_errors():
        from dataclasses import asdict

        from selfmodel.check import check_against
        from selfmodel.model_io import load_model

        rows = check_against(load_model(model), urdf)
        if json_output:
            print_json([asdict(row) for row in rows])
        else:
            for row in rows:
                x, y, z = (1000 * v for v in row.where_link)
                typer.echo(f"{row.link:<16} {row.deviation_mm:8.1f} mm  {row.kind:<14} at ({x:.0f}, {y:.0f}, {z:.0f}) mm "
                           f"in the link frame  [shape {row.shape_mm:.1f}, joint {row.joint_mm:.1f}]")
