"""Shared fixtures: small simulated sessions, captured once per test run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Keep torch and BLAS from oversubscribing the two cores the suite runs on.
os.environ.setdefault("OMP_NUM_THREADS", "2")


@pytest.fixture(scope="session")
def sessions_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("sessions")


def _capture(root: Path, rig: str, poses: int, seed: int, payload: float = 0.0) -> Path:
    from capture.simulate import capture_simulated
    from rigs import load_rig

    # A rig may be a path to a TOML file: name the folder by its stem, inside root.
    out = root / f"{Path(rig).stem}-{poses}-{seed}-{payload:g}"
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
