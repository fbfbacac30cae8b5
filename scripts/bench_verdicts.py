"""Verdicts on the simulated iiwa: the tolerances derived from the data against the truth, and the
audit's measuring point.

1. The instrument floor the default tolerances come from (the tracker's stated MPEs, no truth)
   against the simulated tracker's actual noise (truth/, evaluation only), on fresh poses; and the
   verdicts of a full and a zero-offsets-only calibration and of a 1 um tolerance.
2. The audit at a reflector (default) and at the registered tcp: RP, and the RP the tracker alone
   gives at each point (its stated uncertainty sampled through the registration), as a ratio.

    .venv/bin/python scripts/bench_verdicts.py [--poses 40] [--cycles 30]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from benchlib import table, write_section  # noqa: E402  (puts the checkout on sys.path)
from typer.testing import CliRunner  # noqa: E402

from selfcal.cli import app  # noqa: E402

runner = CliRunner()


def run(*args) -> dict:
    result = runner.invoke(app, [str(a) for a in args] + ["--json"])
    if result.exit_code != 0:
        raise SystemExit(f"selfcal {' '.join(map(str, args))} failed: {result.output[-500:]}")
    return json.loads(result.output)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--poses", type=int, default=40)
    parser.add_argument("--cycles", type=int, default=30)
    options = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-verdicts-"))
    run("capture", "--rig", "iiwa-tracker", "--poses", options.poses, "--seed", 1, "--out", root / "fit")
    run("capture", "--rig", "iiwa-tracker", "--poses", 30, "--seed", 2, "--out", root / "fresh")
    calibration = run("calibrate", root / "fit", "--out", root / "cal")
    offsets = run("calibrate", root / "fit", "--out", root / "cal-offsets", "--model", "offsets")
    finer = run("calibrate", root / "fit", "--out", root / "cal-finer", "--tolerance-mm", "0.001")
    fresh = run("validate", root / "cal", root / "fresh")
    derived = fresh["verdict"]["tolerance"]["value"] / 2  # the default is twice the instrument floor
    rows = [["full model", calibration["verdict"]["result"], calibration["verdict"]["measured"],
             calibration["verdict"]["tolerance"]["value"]],
            ["zero offsets only", offsets["verdict"]["result"], offsets["verdict"]["measured"],
             offsets["verdict"]["tolerance"]["value"]],
            ["full model, --tolerance-mm 0.001", finer["verdict"]["result"], finer["verdict"]["measured"], 0.001],
            ["validate on fresh poses", fresh["verdict"]["result"], fresh["verdict"]["measured"],
             fresh["verdict"]["tolerance"]["value"]]]
    body = (f"{options.poses} calibration poses, 30 fresh ones (seeds 1 and 2).\n\n"
            f"Instrument floor from the tracker's stated MPEs (what the default tolerance is twice of): "
            f"{derived:.4f} mm 3D RMS; the simulated tracker's actual noise on the same points (truth/, "
            f"evaluation only): {fresh['floor_rms_mm']:.4f} mm (ratio {derived / fresh['floor_rms_mm']:.2f}).\n\n"
            + table(["", "verdict", "measured RMS (mm)", "tolerance (mm)"], rows))

    run("audit", "plan", "--rig", "iiwa-tracker", "--cycles", options.cycles, "--out", root / "audit.csv")
    run("capture", "--rig", "iiwa-tracker", "--plan", root / "audit.csv", "--seed", 3, "--out", root / "audit")
    reflector = run("audit", "report", root / "audit", "--calibration", root / "cal", "--out", root / "a1")
    tcp = run("audit", "report", root / "audit", "--calibration", root / "cal", "--out", root / "a2", "--point", "tcp")
    audit_rows = []
    for at_reflector, at_tcp in zip(reflector["models"]["calibrated"]["poses"], tcp["models"]["calibrated"]["poses"]):
        audit_rows.append([at_reflector["pose"], at_reflector["RP_mm"], at_reflector["RP_instrument_mm"], at_tcp["RP_mm"],
                           at_tcp["RP_instrument_mm"], at_tcp["RP_instrument_mm"] / at_reflector["RP_instrument_mm"]])
    body += (f"\n\nISO 9283 audit, {options.cycles} cycles, commanded by the calibration: verdict "
             f"{reflector['verdict']['result']} ({reflector['verdict']['reason']}). RP at the default measuring "
             f"point ({reflector['measuring_point']['description']}) and at the registered tcp, with the RP the "
             f"tracker alone gives at each (mm):\n\n"
             + table(["pose", "RP at smr1", "tracker alone at smr1", "RP at tcp", "tracker alone at tcp",
                      "tracker alone, tcp / smr1"], audit_rows)
             + "\n\nThe machine was shared with other jobs; nothing here is a timing.")
    write_section("verdicts", "Verdicts: tolerances derived from the data, the audit's measuring point", body,
                  f"scripts/bench_verdicts.py --poses {options.poses} --cycles {options.cycles}")


if __name__ == "__main__":
    main()
