"""What one Ray task does for one arm, on whichever worker runs it.

The task gets the arm's job (which command, its sessions as the table names them, options) and the
sessions as bytes; it unpacks them into a scratch folder of its own, runs selfcal's commands there
with the same relative paths the table uses (so the calibration records the sessions as the user
named them), and hands back a plain dict: status, the command's own sentence when it failed, the
commands' JSON, and the result folder as bytes. Nothing is left on the worker.

``calibrate``: ``selfcal calibrate SESSIONS --out ARM OPTIONS --json``, then, when the row names a
held-out session, ``selfcal validate ARM VALIDATE --json``.

``selfmodel``: ``selfcal selfmodel train SESSIONS --out ARM OPTIONS --json``; with a held-out
session ``selfcal selfmodel eval ARM VALIDATE --json`` (Chamfer and the rest where it has the
simulated truth); and ``selfcal selfmodel check ARM --urdf SESSION/robot.urdf --json`` (where the
learned body differs from the description the arm was recorded with).
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import tempfile
import time
import traceback
from pathlib import Path

from selfcal.fleet.archive import pack, unpack

RESULT = "result"  # the arm's result folder inside the scratch folder


@contextlib.contextmanager
def _working_in(folder: Path):
    previous = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def _steps(job: dict) -> list[tuple[str, list[str]]]:
    """(name, argv) of the commands an arm runs, in order; argv relative to the scratch folder."""
    kind, sessions, validate, options = job["kind"], job["sessions"], job.get("validate"), job["options"]
    if kind == "calibrate":
        steps = [("calibrate", ["calibrate", *sessions, "--out", RESULT, *options, "--json"])]
        if validate:
            steps.append(("validate", ["validate", RESULT, validate, "--json"]))
        return steps
    if kind == "selfmodel":
        extra = [] if "--threads" in options else ["--threads", str(job.get("threads", 1))]
        if job.get("device") and "--device" not in options:
            extra += ["--device", job["device"]]
        steps = [("train", ["selfmodel", "train", *sessions, "--out", RESULT, *options, *extra, "--json"])]
        if validate:
            steps.append(("eval", ["selfmodel", "eval", RESULT, validate, "--json"]))
        steps.append(("check", ["selfmodel", "check", RESULT, "--urdf", f"{sessions[0]}/robot.urdf", "--json"]))
        return steps
    raise ValueError(f"unknown fleet job kind {kind!r}")


def run_arm(job: dict, sessions_blob: bytes) -> dict:
    """Run one arm's commands; never raises for the arm's own failures (they are its status)."""
    from rigs.version import VERSION
    from selfcal.fleet.commands import run_selfcal

    start, start_cpu = time.perf_counter(), time.process_time()
    outcome = {"arm": job["arm"], "status": "failed", "message": None, "outputs": {}, "result": None,
               "host": platform.node(), "worker_version": VERSION, "traceback": None, "step_seconds": {},
               "exit_code": None}
    steps = outcome["step_seconds"]
    if job.get("version") and job["version"] != VERSION:
        outcome["message"] = (f"the worker on {platform.node()} runs selfcal {VERSION}, the fleet was started with "
                              f"{job['version']}; install the same selfcal on every worker.")
        return outcome
    scratch = Path(tempfile.mkdtemp(prefix="selfcal-fleet-arm-"))
    try:
        unpack(sessions_blob, scratch)
        steps["unpack"] = time.perf_counter() - start
        with _working_in(scratch):
            for name, argv in _steps(job):
                began = time.perf_counter()
                try:
                    run = run_selfcal(argv)
                except Exception as error:  # a bug in a command, not the user's input: this arm's failure, named
                    outcome["message"] = f"selfcal {name} crashed ({type(error).__name__}: {error})."
                    outcome["traceback"] = traceback.format_exc()
                    return outcome
                if run.exit_code != 0:
                    outcome["message"] = f"selfcal {name}: {run.sentence}"
                    outcome["exit_code"] = run.exit_code
                    return outcome
                outcome["outputs"][name] = run.json()
                steps[name] = time.perf_counter() - began
        began = time.perf_counter()
        outcome["result"] = pack({"": scratch / RESULT})
        steps["pack"] = time.perf_counter() - began
        outcome["status"], outcome["exit_code"] = "ok", 0
        return outcome
    except Exception as error:
        outcome["message"] = f"the fleet task for {job['arm']} failed on {platform.node()} ({type(error).__name__}: {error})."
        outcome["traceback"] = traceback.format_exc()
        return outcome
    finally:
        outcome["seconds"] = time.perf_counter() - start
        outcome["cpu_seconds"] = time.process_time() - start_cpu  # this worker process's CPU, every thread
        shutil.rmtree(scratch, ignore_errors=True)
