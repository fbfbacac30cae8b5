"""Capture speed on the built-in simulated rigs.

    .venv/bin/python scripts/bench_capture.py

Times `capture_simulated` for 200 tracker poses (iiwa-tracker) and for 50 poses seen by 4 RGB-D
cameras at 640x480 (xarm6-cameras), and writes them to BENCHMARKS.md.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import benchlib  # noqa: F401  (puts the checkout on sys.path)
from benchlib import table, write_section

from capture.session import load_session
from capture.simulate import capture_simulated
from rigs import load_rig


def main() -> None:
    rows = []
    work = Path(tempfile.mkdtemp(prefix="bench-capture-"))
    try:
        for rig_name, poses in (("iiwa-tracker", 200), ("xarm6-cameras", 50)):
            rig = load_rig(rig_name)
            start = time.perf_counter()
            out = capture_simulated(rig, poses, 0, work / rig_name)
            seconds = time.perf_counter() - start
            session = load_session(out)
            images = len(list(out.glob("cameras/*/*_rgb.png")))
            points = 0 if session.tracker is None else len(session.tracker.targets)
            size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) / 1e6
            rows.append([rig_name, poses, points, images, f"{seconds:.1f}", f"{seconds / poses * 1e3:.0f}", f"{size:.0f}"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    body = table(["rig", "poses", "tracker points", "images (x3: rgb, depth, seg)", "seconds", "ms per pose", "MB on disk"], rows)
    write_section("capture", "Capture", body, ".venv/bin/python scripts/bench_capture.py")


if __name__ == "__main__":
    main()
