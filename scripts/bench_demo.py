"""How long the end-to-end demo takes (targets: full under 20 minutes, --quick under 4, on 2 cores).

    .venv/bin/python scripts/bench_demo.py [--quick-only]

Runs `selfcal demo` (and `--quick`) through the command line into temporary folders and writes
the total and per-step times to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib  # noqa: F401  (puts the checkout on sys.path)
from benchlib import ROOT, table, write_section


def run(quick: bool) -> tuple[float, dict]:
    work = Path(tempfile.mkdtemp(prefix="bench-demo-"))
    try:
        start = time.perf_counter()
        process = subprocess.run([sys.executable, "-m", "selfcal.cli", "demo", "--out", str(work / "demo"), "--json",
                                  *(["--quick"] if quick else [])], cwd=ROOT, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if process.returncode != 0:
            raise SystemExit(f"demo failed: {process.stderr[-2000:]}")
        return seconds, json.loads(process.stdout)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick-only", action="store_true")
    args = parser.parse_args()
    runs = [("--quick", True, 240.0)] + ([] if args.quick_only else [("full", False, 1200.0)])
    rows, steps = [], {}
    for label, quick, limit in runs:
        seconds, figures = run(quick)
        rows.append([label, f"{seconds:.0f}", f"{limit:.0f}", "yes" if seconds <= limit else "NO",
                     f"{figures['validate']['rms_mm']:.4f}", figures["recalibrate"]["changed"][0]["joint"],
                     f"{figures['eval'].get('chamfer_pct_workspace', float('nan')):.3f}"])
        steps[label] = figures["steps"]
    body = table(["demo", "seconds", "limit (s)", "within", "calibrated RMS on fresh poses (mm)", "first named joint",
                  "self-model Chamfer-L1 (% workspace)"], rows)
    for label, items in steps.items():
        body += f"\n\nSteps of `selfcal demo {'--quick' if label == '--quick' else ''}`:\n\n"
        body += table(["step", "seconds"], [[item["title"], item["seconds"]] for item in items])
    body += ("\n\nTimes are wall-clock on a 2-core machine and grow with whatever else runs on it "
             "(training is by the clock in the full demo, by a fixed step count in the quick one).")
    write_section("demo-quick" if args.quick_only else "demo",
                  "End-to-end demo, quick" if args.quick_only else "End-to-end demo", body,
                  ".venv/bin/python scripts/bench_demo.py" + (" --quick-only" if args.quick_only else ""))


if __name__ == "__main__":
    main()
