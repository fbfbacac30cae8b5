"""Shared fixtures: small simulated sessions, captured once per test run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Not selfmodel.model.runtime.usable_cores: importing it loads torch, which must not start before
# OMP_NUM_THREADS below is set.
def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


# Keep torch and BLAS from oversubscribing the cores: the suite's workers (pytest-xdist) share them.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
os.environ.setdefault("OMP_NUM_THREADS", str(max(1, min(2, _cores() // _WORKERS))))


@pytest.fixture(scope="session")
def sessions_dir(tmp_path_factory) -> Path:
    """Simulated sessions of this run, shared by all its workers: a capture is seeded, so the first
    worker that needs one records it and the others read it."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = tmp_path_factory.getbasetemp().parent / "sessions"
        shared.mkdir(exist_ok=True)
        return shared
    return tmp_path_factory.mktemp("sessions")


def _capture(root: Path, rig: str, poses: int, seed: int, payload: float = 0.0) -> Path:
    from filelock import FileLock

    from capture.simulate import capture_simulated
    from rigs import load_rig

    # A rig may be a path to a TOML file: name the folder by its stem, inside root.
    out = root / f"{Path(rig).stem}-{poses}-{seed}-{payload:g}"
    # One worker records a session while the others wait on its lock; then they all read it.
    with FileLock(str(out) + ".lock"):
        if not out.exists():
            capture_simulated(load_rig(rig), poses, seed, out, payload_kg=payload)
    return out


@pytest.fixture(scope="session")
def capture_session(sessions_dir):
    """``capture_session(rig, poses, seed, payload=0.0) -> Path``, cached across tests."""
    return lambda rig, poses, seed, payload=0.0: _capture(sessions_dir, rig, poses, seed, payload)


@pytest.fixture(scope="session")
def iiwa_session(capture_session) -> Path:
    """60 poses of iiwa-tracker (seed 1)."""
    return capture_session("iiwa-tracker", 60, 1)
