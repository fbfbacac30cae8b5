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
        registered = validate(calibration, after, register=("tracker",))
        subset = validate(calibration, after, register=("tracker",), registration_poses=[f"p{i:04d}" for i in range(6)])
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


def bench_payload(root: Path) -> None:
    from calib.dynamics.identification import ArmDynamics
    from calib.dynamics.payload import PayloadIdentifier
    from capture.session import load_session
    from capture.simulate import capture_simulated
    from rigs import load_rig

    rig = load_rig("iiwa-tracker-torques")
    truth_com = np.asarray(rig.robot.payload_com, float)
    rows, worst_mass, worst_com = [], 0.0, 0.0
    for seed in (1, 2):
        arm = capture_simulated(rig, 150, seed, root / f"payload-arm-{seed}")
        start = time.perf_counter()
        dynamics = ArmDynamics().fit([arm])
        fit_seconds = time.perf_counter() - start
        for kg in (1.0, 2.5, 5.0):
            session = capture_simulated(rig, 100, 300 + 10 * seed + int(2 * kg), root / f"payload-{seed}-{kg}",
                                        payload_kg=kg)
            payload = PayloadIdentifier().fit(load_session(session), dynamics)
            mass_error = abs(payload.mass_kg - kg) / kg
            com_error = float(np.linalg.norm(payload.com - truth_com))
            worst_mass, worst_com = max(worst_mass, mass_error), max(worst_com, com_error)
            rows.append([seed, kg, payload.mass_kg, payload.mass_std_kg, 100 * mass_error, com_error * 1e3,
                         float(np.max(payload.com_std)) * 1e3, dynamics.summary["rms_nm"], dynamics.summary["urdf_rms_nm"],
                         fit_seconds])
    met = worst_mass <= 0.02 and worst_com <= 5e-3
    body = (f"iiwa-tracker-torques (joint torque sensors: 0.1 N m noise, 0.3 N m offsets; its URDF's link masses "
            f"40 % off). `selfcal dynamics fit` on 150 static poses without payload, then `selfcal dynamics payload` "
            f"on 100 fresh static poses carrying 1, 2.5 and 5 kg at (0, 0, 80) mm in the tip frame. Targets: mass within 2 %, "
            f"centre of mass within 5 mm (against the simulated truth). **Worst: mass {100 * worst_mass:.2f} %, "
            f"centre of mass {worst_com * 1e3:.2f} mm ({'met' if met else 'NOT met'}).** The arm model's torque RMS "
            f"is next to the URDF's at the same poses. Static torque poses need no tracker, so they are cheap to "
            f"record; with 40 payload poses the 1 kg centre of mass has about 1.8 mm standard deviation per axis and "
            f"its error can pass 5 mm (the reported standard deviations include the arm model's own uncertainty).\n\n"
            + table(["seed", "payload kg", "identified kg", "std kg", "mass error %", "CoM error mm", "CoM std mm (max)",
                     "arm model RMS N m", "URDF RMS N m", "dynamics fit s"], rows) + f"\n\n{SHARED}")
    write_section("real-data-payload", "Payloads identified from joint torques",
                  body, "nice -n 10 .venv/bin/python scripts/bench_real_data.py --only payload")


def bench_deflection(root: Path) -> None:
    from calib.calibrator import Calibrator
    from calib.workflows.validate import validate
    from capture.session import load_session
    from capture.simulate import capture_simulated
    from rigs import load_rig

    rig = load_rig("iiwa-tracker-torques")
    rows = []
    for seed in (1, 2):
        fit = [capture_simulated(rig, 60, 10 * seed + k, root / f"deflection-fit-{seed}-{kg}", payload_kg=kg)
               for k, kg in enumerate((0.0, 2.5))]
        unseen = load_session(capture_simulated(rig, 100, 400 + seed, root / f"deflection-unseen-{seed}", payload_kg=5.0))
        truth = (unseen.path / "truth" / "parameters.json").read_text()
        stiffness = np.array(__import__("json").loads(truth)["stiffness_nm_per_rad"])
        for label, deflection, torques in (("rigid", "none", "model"), ("compliance, URDF torques", "compliance", "model"),
                                           ("compliance, measured torques", "compliance", "measured")):
            calibration = Calibrator(deflection=deflection, torques=torques).fit(fit)
            figures = validate(calibration, unseen)
            error = (np.abs(calibration.compliance[1:4] * stiffness[1:4] - 1.0).max() * 100
                     if calibration.compliance is not None else None)
            rows.append([seed, label, figures["rms_mm"], figures["rms_mm"] / figures["floor_rms_mm"], figures["max_mm"],
                         "n/a" if error is None else f"{error:.1f}"])
    by = {label: [r[2] for r in rows if r[1] == label] for label in {r[1] for r in rows}}
    ratio = np.mean(by["compliance, URDF torques"]) / np.mean(by["compliance, measured torques"])
    body = (f"iiwa-tracker-torques: compliant joints, torque sensors (0.1 N m noise), and a URDF whose link masses are "
            f"each 40 % too high or too low. Calibrated on 60 poses at 0 kg and 60 at 2.5 kg; validated on 100 fresh "
            f"poses at **5 kg, a payload neither fit saw**, the validation session's own measured torques driving the "
            f"sag when the calibration used measured torques. Modelled (URDF) torques give "
            f"{ratio:.2f} x the RMS error of measured torques at the unseen payload (mean of two seeds). The last "
            f"column is the worst relative error of the fitted compliance of joints 2-4 (the ones holding the "
            f"arm's weight) against the simulated truth.\n\n"
            + table(["seed", "deflection", "RMS mm at 5 kg", "x noise floor", "max mm", "compliance error joints 2-4 %"],
                    rows) + f"\n\n{SHARED}")
    write_section("real-data-deflection", "Deflection from measured torques when the URDF's inertials are wrong",
                  body, "nice -n 10 .venv/bin/python scripts/bench_real_data.py --only deflection")


BENCHES = {"partial": bench_partial, "register": bench_register, "payload": bench_payload,
           "deflection": bench_deflection}


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
