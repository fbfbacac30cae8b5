"""Running a fleet's arms as Ray tasks: where Ray runs, what each task asks for, isolation, progress.

Without an address Ray starts in this process on this machine (no cluster, nothing to set up) and
stops when the fleet is done; with ``auto`` or ``ray://host:10001`` the same tasks go to a cluster.
A Ray instance that is already running in this process (a notebook, a test module) is used as it
is and left running.

Each arm is one task that asks for ``cpus_per_arm`` CPUs (and ``gpus_per_arm`` GPUs). The driver
keeps a few more tasks in flight than the cluster can run at once and packs the next arm's sessions
only when a slot frees, so its memory does not grow with the fleet. A task that fails in any way,
its worker killed included, is that arm's failure; the others go on.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from rigs.errors import InputError


@dataclass(frozen=True)
class RaySettings:
    address: str | None = None  # None: a local instance in this process
    local_cpus: int | None = None  # CPUs of the local instance (None: every core this process may use)
    cpus_per_arm: float = 1.0
    gpus_per_arm: float = 0.0


@dataclass
class Cluster:
    """What the fleet runs on: address, CPUs and GPUs Ray reports, whether this run started it."""

    address: str
    cpus: float
    gpus: float
    started_here: bool

    def describe(self) -> str:
        where = "a local Ray instance in this process" if self.address == "local" else f"the Ray cluster at {self.address}"
        return f"{where} ({self.cpus:g} CPUs" + (f", {self.gpus:g} GPUs)" if self.gpus else ")")


def _quiet_ray() -> None:
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    for name in ("ray", "ray._private", "ray.util"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _unreachable(address: str) -> str | None:
    """Why nothing can answer at ``address`` (checked in seconds: Ray itself retries for minutes), or None."""
    import socket

    target = address[len("ray://"):] if address.startswith("ray://") else address
    if address == "auto":
        try:  # how `ray.init(address="auto")` finds it: RAY_ADDRESS, else the last `ray start` on this machine
            from ray._private.services import canonicalize_bootstrap_address

            target = canonicalize_bootstrap_address("auto")
        except Exception:
            target = None
        if not target:
            return "no running Ray cluster was found from this machine (set RAY_ADDRESS, or start one with `ray start --head`)"
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        return f"{target!r} is not HOST:PORT (or auto, or ray://HOST:PORT)"
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=5):
            return None
    except OSError as error:
        return f"nothing answers at {host}:{port} ({error.strerror or type(error).__name__})"


def connect(settings: RaySettings) -> Cluster:
    """Join or start Ray as ``settings`` say; InputError when the cluster cannot serve one arm."""
    import ray

    _quiet_ray()
    started = False
    if ray.is_initialized():
        address = "local" if settings.address is None else settings.address
    elif settings.address is None:
        # "local": a new instance of our own, even where RAY_ADDRESS or an earlier `ray start` on this
        # machine would make a bare ray.init() join someone else's.
        ray.init(address="local", num_cpus=settings.local_cpus, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.ERROR, configure_logging=True)
        address, started = "local", True
    else:
        problem = _unreachable(settings.address)
        if problem is not None:
            raise InputError(f"--address {settings.address}: {problem}.")
        try:
            ray.init(address=settings.address, log_to_driver=False, logging_level=logging.ERROR)
        except Exception as error:  # ConnectionError, ValueError, grpc errors: no cluster where the user said
            message = " ".join(str(error).split())[:200] or type(error).__name__
            hint = ("" if os.environ.get("RAY_AUTH_MODE") else
                    "; a cluster with token authentication (Ray's default) also needs RAY_AUTH_MODE=token here, with "
                    "its token in ~/.ray/auth_token or RAY_AUTH_TOKEN")
            raise InputError(f"--address {settings.address}: no Ray cluster could be joined there ({message}{hint}).") from None
        address, started = settings.address, True
    resources = ray.cluster_resources()
    cluster = Cluster(address, float(resources.get("CPU", 0.0)), float(resources.get("GPU", 0.0)), started)
    if settings.cpus_per_arm > cluster.cpus:
        disconnect(cluster)
        raise InputError(f"--cpus-per-arm {settings.cpus_per_arm:g}: {cluster.describe()} has fewer CPUs than one arm asks for.")
    if settings.gpus_per_arm > cluster.gpus:
        disconnect(cluster)
        raise InputError(f"{settings.gpus_per_arm:g} GPUs per arm: {cluster.describe()} has fewer.")
    return cluster


def disconnect(cluster: Cluster) -> None:
    import ray

    if cluster.started_here and ray.is_initialized():
        ray.shutdown()


def _board_class():
    import ray

    @ray.remote(num_cpus=0)
    class ArmBoard:
        """Which arms a worker has started: the 'running' of the progress bar."""

        def __init__(self):
            self.started: set[str] = set()

        def start(self, arm: str) -> None:
            self.started.add(arm)

        def running(self) -> list[str]:
            return sorted(self.started)

    return ArmBoard


def _task(job: dict, sessions_blob: bytes, board) -> dict:
    from selfcal.fleet.tasks import run_arm

    if board is not None:
        board.start.remote(job["arm"])
    return run_arm(job, sessions_blob)


def _died(arm: str, error: BaseException) -> dict:
    """The outcome of a task Ray could not finish (its worker killed, out of memory, cancelled)."""
    first = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
    return {"arm": arm, "status": "failed", "message": f"the Ray task for this arm did not finish "
            f"({type(error).__name__}: {first[:200]}).", "outputs": {}, "result": None, "traceback": str(error)}


def run_arms(jobs: Iterable[tuple[dict, Callable[[], bytes]]], total: int, settings: RaySettings,
             on_done: Callable[[dict], None], progress: Callable[[int, int, int, int], None] | None = None,
             task: Callable | None = None) -> None:
    """Run every (job, pack sessions) as a task; ``on_done(outcome)`` for each as it finishes.

    ``progress(done, running, failed, total)`` is called as things change. ``task`` replaces the
    per-arm function (``(job, sessions_blob) -> outcome``); the fleet passes none.
    """
    import ray

    remote = ray.remote(_task if task is None else (lambda job, blob, board: task(job, blob)))
    remote = remote.options(num_cpus=settings.cpus_per_arm, num_gpus=settings.gpus_per_arm, max_retries=1)
    board = _board_class().remote() if progress is not None else None
    resources = ray.cluster_resources()
    slots = max(1, int(resources.get("CPU", 1.0) // max(settings.cpus_per_arm, 1e-9)))
    queue = iter(jobs)
    pending: dict = {}
    done = failed = 0
    finished: set[str] = set()
    last_report = (-1, -1, -1)

    def submit_one() -> bool:
        for job, make_blob in queue:
            try:
                blob = make_blob()
            except InputError as error:  # its sessions could not be read: this arm's sentence
                record(job["arm"], {"arm": job["arm"], "status": "failed", "message": str(error), "outputs": {},
                                    "result": None, "traceback": None, "exit_code": 2})
                continue
            pending[remote.remote(job, ray.put(blob), board)] = job["arm"]
            return True
        return False

    def record(arm: str, outcome: dict) -> None:
        nonlocal done, failed
        done += 1
        failed += outcome["status"] != "ok"
        finished.add(arm)
        on_done(outcome)

    def report() -> None:
        nonlocal last_report
        if progress is None:
            return
        running = 0
        if board is not None:
            try:
                running = len(set(ray.get(board.running.remote(), timeout=5)) - finished)
            except Exception:  # the board is only for the display; never let it stop the fleet
                running = min(len(pending), slots)
        state = (done, running, failed)
        if state != last_report:
            progress(done, running, failed, total)
            last_report = state

    try:
        while len(pending) < slots + 2 and submit_one():
            pass
        report()
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in ready:
                arm = pending.pop(ref)
                try:
                    outcome = ray.get(ref)
                except Exception as error:  # RayTaskError, WorkerCrashedError, ObjectLostError...
                    outcome = _died(arm, error)
                record(arm, outcome)
                submit_one()
            report()
    except BaseException:
        # Not force: a running task gets KeyboardInterrupt and still removes its scratch folder.
        for ref in pending:
            ray.cancel(ref)
        if pending:
            ray.wait(list(pending), num_returns=len(pending), timeout=5)
        raise
    finally:
        if board is not None:
            ray.kill(board)
