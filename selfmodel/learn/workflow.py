"""The train job, sessions in and a model folder out: what ``selfcal selfmodel train`` does below its
options, so a benchmark or another program trains exactly as the command does.

:func:`train_model` checks the sessions' depth before anything is written, discovers the chain when
asked (no description read), trains in ``OUT.partial/`` (checkpoints, a lock, ``--resume``), says what
changed against a previous model, and writes the model folder whole. Reading a calibration (camera
poses, measured placements, a fitted board mount) is the caller's: selfmodel never imports calib.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, ContextManager

import numpy as np

from capture.session import Session
from rigs.errors import InputError, setting
from rigs.files import (TEMPORARY_TAG, atomic_write_json, clean_leftovers, current_umask, is_locked, locked_folder,
                        make_parents, read_json, remove_empty_folders, rename_no_replace)
from selfmodel.discovery.chain_discovery import DiscoveredArm
from selfmodel.discovery.urdf_writer import discover_urdf
from selfmodel.inspect.changes import what_changed
from selfmodel.labels.depth import check_depth_sessions, check_no_depth, no_depth_summary
from selfmodel.learn.trainer import CHECKPOINT, Checkpoint, SelfModelTrainer, TrainResult

# ``bars(label, total, unit=...)`` -> a context that yields ``update(done, total)``: the command line's
# progress bars (selfcal.ui.progress_bar), or nothing.
Bars = Callable[..., ContextManager[Callable]]


@contextlib.contextmanager
def no_bars(label: str, total: int | None = None, unit: str = "steps"):
    yield lambda done, total_=None: None


@dataclass
class TrainedModel:
    """What :func:`train_model` wrote and found.

    ``folder``: the model folder; ``result``: the training's :class:`TrainResult`; ``no_depth``: per
    camera, what its pixels without a reading meant (``labels.depth.no_depth_summary``);
    ``changes``: what changed against the previous model (structured models), else None;
    ``discovered``: the chain discovered from the sweeps when no description was read, else None.
    """

    folder: Path
    result: TrainResult
    no_depth: dict
    changes: dict | None = None
    discovered: DiscoveredArm | None = None


def partial_folder(out: Path) -> Path:
    """Where a training of ``out`` keeps its checkpoints: ``OUT.partial/``."""
    return out.with_name(out.name + ".partial")


@contextlib.contextmanager
def training_folder(out: Path, run: dict, resume: bool):
    """``OUT.partial/`` for a training's checkpoints: yields (folder, whether a checkpoint continues).

    The folder appears whole (run.json in it) and is locked while training, so a second run stops
    with a sentence; a run refused for bad input removes the folder it made, so nothing blocks the
    next valid run; an interrupted one leaves it for ``--resume``; a finished one removes it.
    """
    partial = partial_folder(out)
    busy = f"{partial}: another training is writing it now; wait for it to finish or choose another {setting('out')}."
    if is_locked(partial):
        raise InputError(busy)
    if resume:
        if not (partial / "run.json").is_file():
            raise InputError(f"{partial}: nothing to resume (no interrupted training for {out}); run without "
                             f"{setting('resume')}.")
        previous = read_json(partial / "run.json", "training record")
        if previous != run:
            raise InputError(f"{partial}/run.json: the interrupted training used other options ({previous}); "
                             f"resume with the same ones.")
    elif partial.exists():
        raise InputError(f"{partial}: an interrupted training is there; run the same command with {setting('resume')} "
                         f"to continue it, or remove {partial} to start over.")
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


def session_board(session: Session, fitted_mount: tuple[np.ndarray, str] | None = None) -> dict | None:
    """The calibration board ``session`` declares on the tip (``sensors.board``), or None; with
    ``fitted_mount`` = (tip_T_board (4, 4), where it was measured), the mount a board calibration
    fitted on the URDF the model trains on, which the export then takes as exact
    (``selfmodel.export.sources.with_board``)."""
    board = (session.manifest.get("sensors") or {}).get("board")
    if not board or fitted_mount is None:
        return board
    mount, source = fitted_mount
    return {**board, "tip_T_board_fitted": np.asarray(mount, dtype=float).tolist(), "tip_T_board_fitted_from": source}


def train_model(sessions: list[Session], out: Path, trainer: SelfModelTrainer, run: dict, *,
                resume: bool = False, previous=None, discover: bool = False,
                fitted_board_mount: tuple[np.ndarray, str] | None = None, bars: Bars = no_bars) -> TrainedModel:
    """Train ``trainer`` on ``sessions`` and write the model folder ``out`` (which must not exist).

    The description trained on is the trainer's (``description``, else the first session's own);
    ``discover``: read none and discover the chain from the first session's sweeps instead, for a
    trainer that names none. ``run``: the options as the caller
    names them, kept in ``OUT.partial/run.json`` so that ``resume`` continues only the same run (the
    pixels-without-reading summary is added here). ``previous``: a loaded model to start from; what
    changed against it goes to ``changes.json``. ``fitted_board_mount``: see :func:`session_board`.
    ``bars``: progress, as :data:`Bars`.
    """
    if discover and trainer.description is not None:
        raise InputError(f"{setting('discover')} finds the chain from the sweeps and reads no description; the trainer names "
                         f"one ({setting('description')} {trainer.description}).")
    check_depth_sessions(sessions)  # before anything is written: a refusal leaves no folder behind
    check_no_depth(trainer.labels, sessions)
    zeros = no_depth_summary(sessions, trainer.labels)
    run = {**run, "no_depth": zeros}
    with contextlib.ExitStack() as scratch_folder:
        discovered = None
        if discover:
            # The discovered URDF is written to a scratch folder the model copies it from, removed
            # whatever happens to the training.
            scratch = Path(scratch_folder.enter_context(tempfile.TemporaryDirectory(prefix="selfcal-discovered-")))
            with bars("discovering the chain", len(sessions[0].joint_names), unit="joints") as update:
                discovered, urdf = discover_urdf(sessions[0], scratch, update)
            trainer = replace(trainer, description=urdf)  # a trainer of its own: the caller's keeps its settings
        with training_folder(out, run, resume) as (partial, continues):
            unit = "steps" if trainer.steps else "‰ of the minutes"
            with bars(f"training {trainer.kind} self-model", trainer.steps, unit=unit) as update:
                result = trainer.fit(sessions, progress=update, previous=previous,
                                     checkpoint=Checkpoint(partial, resume=continues))
            model = result.model
            if model.kind == "structured":
                # The board's nominal mount is in the described tip frame: a discovered chain's tip
                # frame is another, so its model names no board (the export would add it astray).
                model.board = session_board(sessions[0], fitted_board_mount) if trainer.board_on_tip else None
            changes = None
            if previous is not None and previous.kind == "structured":
                changes = what_changed(previous, model)

            def beside(folder: Path) -> None:
                if changes is not None:
                    atomic_write_json(folder / "changes.json", {"previous": str(previous.folder), **changes})
                if discovered is not None:
                    discovered.save(folder / "discovered_chain.json")

            model.save(out, sessions, run, beside)
    return TrainedModel(Path(out), result, zeros, changes, discovered)
