"""Hand-eye calibration on real recordings kept outside the repository (written to BENCHMARKS.md).

Public hand-eye recordings rarely carry a licence that lets a copy live here, so the recordings
are named in a JSON file the user keeps beside their local copies:

    [{"name": "st_handeye_graph 2023-10-06", "source": "github.com/koide3/st_handeye_graph PR 8, ...",
      "photos": "/data/he1006", "flange_poses": "/data/flange_1006.csv",
      "board": "charuco:5:7:0.024:0.018:4X4_250", "setup": "eye-in-hand"}, ...]

``photos``: a folder of photos and camera_info.yaml, ``flange_poses``: a file `selfcal import
images --flange-poses` reads (paths relative to the JSON file's folder). Per recording: the
import, `selfcal calibrate` (model auto), its verdict, chosen model and least squares, fit and
cross-validated RMS, and in the same run the baseline of scripts/bench_hand_eye.py on the same
folds: every OpenCV closed-form method refined by plain least squares, the best one's held-out RMS.

    .venv/bin/python scripts/bench_real_hand_eye.py --cases ~/recordings/hand_eye.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from bench_hand_eye import baseline, run  # noqa: E402  (benchlib puts the checkout on sys.path)
from benchlib import table, write_section  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=Path, required=True, help="JSON list of recordings (see the docstring)")
    args = parser.parse_args()
    cases = json.loads(args.cases.read_text())
    root = args.cases.resolve().parent
    rows, sources = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for number, case in enumerate(cases):
            session = Path(scratch) / f"s{number}"
            run("import", "images", root / case["photos"], "--flange-poses", root / case["flange_poses"],
                "--board", case["board"], "--setup", case["setup"], "--out", session)
            summary = run("calibrate", session, "--out", Path(scratch) / f"c{number}")
            theirs = baseline(session)
            best = min(theirs, key=theirs.get)
            held = (summary.get("holdout") or {}).get("rms_px")
            corners = [p["corners"] for p in summary["photos"]]
            rows.append([case["name"], case["setup"], f"{len(corners)} ({min(corners)}-{max(corners)} corners)",
                         summary["model_choice"]["model"], summary["weighting"]["chosen"],
                         f"{summary['fit']['rms_px']:.3f}", "-" if held is None else f"{held:.3f}",
                         f"{theirs[best]:.3f} ({best})", "-" if held is None else f"x{held / theirs[best]:.2f}",
                         f"{summary['floor_px']:.3f}", summary["verdict"]["result"]])
            sources.append(f"- {case['name']}: {case['source']}; board `{case['board']}`.")
            print(rows[-1], flush=True)
    body = ("Real recordings, each a photo per reported flange pose and no URDF, kept outside the repository "
            "(their licences do not allow a copy here). Held-out figures: leave-one-pose-out, the same folds for "
            "selfcal and the baseline (each OpenCV closed-form method refined by plain least squares, the best "
            "one chosen with hindsight).\n\n" + "\n".join(sources) + "\n\n"
            + table(["recording", "set-up", "photos", "model", "least squares", "fit RMS px", "held-out RMS px",
                     "best OpenCV + LSQ held-out px", "selfcal / baseline", "floor px", "verdict"], rows))
    write_section("real-hand-eye", "Hand-eye on real recordings", body,
                  f".venv/bin/python scripts/bench_real_hand_eye.py --cases {args.cases.name}")


if __name__ == "__main__":
    main()
