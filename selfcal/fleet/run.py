"""One fleet run, start to finish: the table, resume, the Ray tasks, the results, the comparison.

``DIR/`` holds ``fleet.json`` (rewritten after every arm, so an interrupted run can be resumed),
``index.html`` (written at the end) and one folder per arm that succeeded, exactly as the per-arm
command writes it. A folder is written whole (built under a temporary name, then renamed); an
arm that fails leaves no folder, only its sentence in ``fleet.json``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from rigs.errors import InputError
from rigs.files import (atomic_write_json, check_new_output, locked_folder, make_parents, output_folder,
                        remove_empty_folders)
from rigs.version import VERSION
from selfcal.fleet import records
from selfcal.fleet.archive import TRUTH, folder_hash, pack, unpack
from selfcal.fleet.commands import options_problem
from selfcal.fleet.engine import RaySettings, connect, disconnect, run_arms
from selfcal.fleet.table import ArmRow, read_fleet_table


@dataclass(frozen=True)
class FleetJob:
    """What a fleet runs per arm: ``kind`` names the task's commands (see :mod:`selfcal.fleet.tasks`)."""

    kind: str  # "calibrate" or "selfmodel"
    command: tuple[str, ...]  # the command whose options the table's options column holds
    placeholders: tuple[str, ...]  # a whole command line around the options, for their check
    may_use_gpu: bool = False  # ask Ray for a GPU per arm where the cluster and the command can use one


CALIBRATE = FleetJob("calibrate", ("calibrate",), ("SESSION", "--out", "OUT"))
SELFMODEL = FleetJob("selfmodel", ("selfmodel", "train"), ("SESSION", "--out", "OUT"), may_use_gpu=True)


def _record_base(row: ArmRow) -> dict:
    return {"status": "failed", "message": None, "exit_code": None, "flagged": False, "flags": [], "line": row.line,
            "sessions": row.sessions, "validate": row.validate, "options": row.options}


def _arm_jobs(job: FleetJob, rows: list[ArmRow], folder: Path, threads: int, device: str | None):
    """(job dict, sessions packer) per arm that runs; packing waits until a slot is free."""
    for row in rows:
        task = {"kind": job.kind, "arm": row.arm, "sessions": row.sessions, "validate": row.validate,
                "options": row.options, "version": VERSION, "threads": threads, "device": device}

        def make_blob(row=row) -> bytes:
            fit, held = records.shipped_folders(row, folder)
            return pack(fit, skip=(TRUTH,), whole=held)
        yield task, make_blob


def run_fleet(job: FleetJob, table_path: Path, out: Path, settings: RaySettings, resume: bool = False,
              progress: Callable[[int, int, int, int], None] | None = None,
              compare: Callable[[dict, Path, Path], dict] | None = None,
              report: Callable[[dict, Path], None] | None = None) -> dict:
    """Run a fleet; returns the fleet document (also written to ``out/fleet.json``).

    ``compare(document, out, table_folder)`` adds the sibling comparison to the document and
    ``report(document, out)`` writes index.html (the fleet commands pass theirs).
    """
    out = Path(out)
    if settings.cpus_per_arm <= 0:
        raise InputError(f"--cpus-per-arm must be positive, got {settings.cpus_per_arm:g}.")
    if settings.local_cpus is not None and settings.local_cpus < 1:
        raise InputError(f"--cpus must be at least 1, got {settings.local_cpus}.")
    if settings.local_cpus is not None and settings.address is not None:
        raise InputError("--cpus sizes the local Ray instance; a cluster given with --address has its own CPUs.")
    table = read_fleet_table(table_path, lambda tokens: options_problem(list(job.command), tokens, list(job.placeholders)))
    previous = records.read_previous(out, job.kind) if resume else {}
    if not resume:
        check_new_output(out)
    arms: dict[str, dict] = {}
    to_run: list[ArmRow] = []
    for row in table.arms:
        record = _record_base(row)
        arms[row.arm] = record
        if row.problem is not None:  # refused before it runs, as the command would refuse it: exit status 2
            record.update(message=row.problem, exit_code=2)
            continue
        try:
            record["inputs_hash"] = records.inputs_hash(job.kind, row, table.folder)
        except InputError as error:
            record.update(message=str(error), exit_code=2)
            continue
        earlier = previous.get(row.arm)
        if resume and records.verified(out, row.arm, earlier, record["inputs_hash"]):
            arms[row.arm] = dict(earlier, line=row.line, reused=True, flagged=False, flags=[], flag_details=[])
            continue
        if os.path.lexists(out / row.arm) and not (isinstance(earlier, dict) and earlier.get("result_hash")):
            record.update(message=f"{out / row.arm}: exists and is not a result of this fleet; move it away to let "
                                  f"the fleet write {row.arm}'s results there.", exit_code=2)
            continue
        record.update(status="pending", message="not run yet: the fleet run stopped before this arm finished; "
                                                 "--resume continues it.")
        to_run.append(row)
    created = [] if out.is_dir() else make_parents(out)
    document = {"format": records.FORMAT, "format_version": records.FORMAT_VERSION, "job": job.kind,
                "selfcal_version": VERSION, "fleet_table": str(table.path), "complete": False, "arms": arms}
    busy = f"{out}: another fleet run is writing it now; wait for it to finish or choose another --out."
    try:
        with locked_folder(out, busy):
            started = time.perf_counter()
            # Arms that do not run (reused, or failed before they could) count as done from the start.
            settled = [arms[row.arm] for row in table.arms if row not in to_run]
            skipped, failed_before = len(settled), sum(1 for record in settled if record["status"] != "ok")
            if progress is not None:
                progress(skipped, 0, failed_before, len(table.arms))  # the bar has its total while Ray starts
            cluster = connect(settings) if to_run else None
            try:
                device = None
                if cluster is not None:
                    gpus, why = 0.0, "this job runs on CPUs"
                    if job.may_use_gpu:
                        from selfcal.fleet.commands import accepts_option
                        from selfcal.fleet.selfmodels import DEVICE_OPTION, gpu_plan

                        gpus, why = gpu_plan(cluster.gpus, accepts_option(list(job.command), DEVICE_OPTION))
                        device = "auto" if gpus else None
                    settings = replace(settings, gpus_per_arm=gpus)
                    document["ray"] = {"address": cluster.address, "cpus": cluster.cpus, "gpus": cluster.gpus,
                                       "cpus_per_arm": settings.cpus_per_arm, "gpus_per_arm": gpus, "gpus_why": why,
                                       "described": cluster.describe()}
                atomic_write_json(out / records.RECORD, document)

                def on_done(outcome: dict) -> None:
                    arms[outcome["arm"]] = _finish_arm(job, out, table.folder, arms[outcome["arm"]], outcome)
                    atomic_write_json(out / records.RECORD, document)

                threads = max(1, int(settings.cpus_per_arm))
                shown = None if progress is None else (
                    lambda done, running, failed, total: progress(done + skipped, running, failed + failed_before,
                                                                  len(table.arms)))
                if to_run:
                    run_arms(_arm_jobs(job, to_run, table.folder, threads, device), len(to_run), settings, on_done, shown)
            finally:
                if cluster is not None:
                    disconnect(cluster)
            document["seconds"] = time.perf_counter() - started
            document["ran"] = [row.arm for row in to_run]
            if compare is not None:
                compare(document, out, table.folder)
            document["complete"] = True
            document["summary"] = _summary(arms)
            atomic_write_json(out / records.RECORD, document)
            if report is not None:
                report(document, out)
    except BaseException:
        if created and out.is_dir() and not any(out.iterdir()):
            remove_empty_folders(created)  # refused before anything was written: leave no trace
        raise
    return document


def _finish_arm(job: FleetJob, out: Path, table_folder: Path, record: dict, outcome: dict) -> dict:
    """Write an arm's result folder (when it succeeded) and fold the outcome into its record."""
    record = dict(record, reused=False, seconds=outcome.get("seconds"), cpu_seconds=outcome.get("cpu_seconds"),
                  step_seconds=outcome.get("step_seconds"), exit_code=outcome.get("exit_code"),
                  host=outcome.get("host"), outputs=outcome.get("outputs") or {})
    if outcome.get("traceback"):
        record["traceback"] = outcome["traceback"]
    if outcome["status"] != "ok":
        record.update(status="failed", message=outcome.get("message") or "failed without a message.")
        return record
    target = out / outcome["arm"]
    try:
        with output_folder(target, force=target.is_dir()) as folder:
            unpack(outcome["result"], folder)
            if job.kind == "selfmodel":
                from selfcal.fleet.selfmodels import relocate_training_sessions

                relocate_training_sessions(folder, table_folder, record["sessions"])
        record["result_hash"] = folder_hash(target)
    except InputError as error:
        record.update(status="failed", message=str(error))
        return record
    for output in record["outputs"].values():  # the commands ran on the worker, into its scratch folder
        for key in ("calibration", "model"):
            if isinstance(output, dict) and key in output:
                output[key] = str(target)
    record.update(status="ok", message=None)
    return record


def _summary(arms: dict) -> dict:
    ok = [arm for arm, record in arms.items() if record["status"] == "ok"]
    return {"arms": len(arms), "ok": len(ok), "failed": len(arms) - len(ok),
            "flagged": sum(1 for record in arms.values() if record.get("flagged")),
            "reused": sum(1 for record in arms.values() if record.get("reused"))}
