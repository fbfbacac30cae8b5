"""Benchmarks of calibration on data the way plants record it (written to BENCHMARKS.md).

    nice -n 10 .venv/bin/python scripts/bench_real_data.py [--only partial,register,payload,deflection]

- partial: a tracker run moving only joints 1 and 2 (3-7 held still) calibrates, then validates
  on fresh poses inside its validity envelope; target within 1.2 x the noise floor.
- register: ``validate --register`` after moving the tracker 10 mm / 2 degrees against the same
  validation before the move; target within 5 %.
- payload: payload mass and centre of mass identified from joint torques at 1, 2.5 and 5 kg
  against the simulated truth; targets 2 % and 5 mm.
- deflection: compliance driven by measured torques against modelled (URDF) torques when the
  URDF's link masses are 40 % wrong, at a payload the fit never saw.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

from benchlib import table, write_section  # noqa: E402

SHARED = ("The machine was shared with other helpers' jobs while this ran; times are wall-clock and noisy, "
          "the accuracy figures are not affected.")
HELD = np.array([0.0, 0.0, 0.3, -1.2, 0.2, 0.9, 0.4])


def two_joint_plan(seed: int, count: int):
    from capture.poses import Plan

    rng = np.random.default_rng(seed)
    q = np.tile(HELD, (count, 1))
    q[:, 0] = rng.uniform(-1.5, 1.5, count)
    q[:, 1] = rng.uniform(-0.9, 0.9, count)
    return Plan([f"p{i:04d}" for i in range(count)], q, {})


def bench_partial(root: Path) -> None:
    from calib.calibrator import Calibrator
    from calib.workflows.validate import validate
    from capture.session import load_session
    from capture.simulate import capture_simulated
    from rigs import load_rig

    rig = load_rig("iiwa-tracker")
    rows = []
    for seed in (1, 2, 3):
        fit = capture_simulated(rig, 0, seed, root / f"partial-fit-{seed}", plan=two_joint_plan(seed, 60))
        check = capture_simulated(rig, 0, 100 + seed, root / f"partial-check-{seed}", plan=two_joint_plan(100 + seed, 100))
        start = time.perf_counter()
        calibration = Calibrator(deflection="none").fit([fit])
        seconds = time.perf_counter() - start
        figures = validate(calibration, load_session(check))
        ident = calibration.summary["identifiability"]
        rows.append([seed, f"{ident['rank']} of {ident['parameters']}", figures["rms_mm"], figures["floor_rms_mm"],
                     figures["rms_mm"] / figures["floor_rms_mm"], figures["nominal_rms_mm"],
                     "none" if figures["envelope_warning"] is None else "warned", seconds])
    worst = max(r[4] for r in rows)
    body = (f"iiwa-tracker, 60 poses moving joints 1 and 2 only (3-7 held still), `calibrate --deflection none`; "
            f"validated on 100 fresh poses of the same sweep (inside the validity envelope). Target: within 1.2 x "
            f"the noise floor. **Worst of three seeds: {worst:.3f} x the floor ({'met' if worst <= 1.2 else 'NOT met'}).** "
            f"The still joints keep their nominal zero offsets and placements; `calibrate` says so in one sentence "
            f"and `--require-full` refuses the data instead.\n\n"
            + table(["seed", "identifiable", "validation RMS mm", "noise floor mm", "ratio", "nominal RMS mm",
                     "envelope warning", "calibrate s"], rows) + f"\n\n{SHARED}")
    write_section("real-data-partial", "Partial sweeps: two joints moving",
                  body, "nice -n 10 .venv/bin/python scripts/bench_real_data.py --only partial")


def moved_rig(root: Path) -> Path:
    """iiwa-tracker with the tracker head 10 mm away and turned about 2 degrees."""
    from rigs import load_rig

    text = Path(load_rig("iiwa-tracker").source).read_text()
    moved = (text.replace('name = "iiwa-tracker"', 'name = "iiwa-tracker-moved"')
             .replace("xyz = [2.6, 1.2, 0.7]", "xyz = [2.606, 1.208, 0.7]")
             .replace("look_at = [0.0, 0.0, 0.6]", "look_at = [0.0, 0.118, 0.6]"))
    path = root / "iiwa-tracker-moved.toml"
    path.write_text(moved)
    return path


def bench_register(root: Path) -> None:
    from calib.calibrator import Calibrator
    from calib.workflows.validate import validate
    from capture.session import load_session
    from capture.simulate import capture_simulated
    from rigs import load_rig

    rig, moved = load_rig("iiwa-tracker"), load_rig(moved_rig(root))
    rows, ratios = [], []
    for seed in (1, 2):
        fit = capture_simulated(rig, 60, seed, root / f"register-fit-{seed}")
        before = load_session(capture_simulated(rig, 100, 200 + seed, root / f"register-before-{seed}"))
        after = load_session(capture_simulated(moved, 100, 200 + seed, root / f"register-after-{seed}"))
        calibration = Calibrator(deflection="none").fit([fit])
        plain = validate(calibration, before)
        registered = validate(calibration, after, register=True)
        subset = validate(calibration, after, register=True, registration_poses=[f"p{i:04d}" for i in range(6)])
        ratio = registered["rms_mm"] / plain["rms_mm"]
        ratios.append(ratio)
        move = registered["registration"]
        rows.append([seed, f"{move['tracker_moved_mm']:.2f} mm / {move['tracker_turned_deg']:.2f} deg",
                     plain["rms_mm"], registered["unregistered"]["rms_mm"], registered["rms_mm"], ratio,
                     subset["rms_mm"], plain["nominal_rms_mm"], registered["nominal_rms_mm"], subset["nominal_rms_mm"]])
    worst = max(abs(r - 1.0) for r in ratios)
    body = (f"iiwa-tracker, calibrated on 60 poses (`--deflection none`); validated on 100 fresh poses, once with "
            f"the tracker where it was and once after moving it 10 mm and turning it 2 degrees (same poses and "
            f"seed). `validate --register` fits only the tracker's placement on the new session; the nominal URDF "
            f"is registered the same way (tracker and reflectors on the same poses). Target: registered error within "
            f"5 % of the error before the move. **Worst difference: {100 * worst:.2f} % "
            f"({'met' if worst <= 0.05 else 'NOT met'}).** The 6-pose column registers on poses p0000-p0005 only "
            f"and reports the other 94.\n\n"
            + table(["seed", "tracker move (recovered)", "before the move mm", "after, unregistered mm",
                     "after, --register mm", "ratio to before", "after, 6 registration poses mm",
                     "nominal before mm", "nominal --register mm", "nominal 6 poses mm"], rows) + f"\n\n{SHARED}")
    write_section("real-data-register", "Validation after the tracker moved: validate --register",
                  body, "nice -n 10 .venv/bin/python scripts/bench_real_data.py --only register")


BENCHES = {"partial": bench_partial, "register": bench_register}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(BENCHES), help="comma-separated: " + ", ".join(BENCHES))
    args = parser.parse_args()
    wanted = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in BENCHES]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}; choose from {', '.join(BENCHES)}")
    with tempfile.TemporaryDirectory(prefix="bench-real-data-") as folder:
        for name in wanted:
            BENCHES[name](Path(folder))


if __name__ == "__main__":
    main()
