#!/usr/bin/env python3
"""The calibration board in the collision export: kept as one box and a layer of spheres, dropped,
and the export before (a checkout of an earlier commit, whose board was a fitted sphere group).

Runs ``selfcal selfmodel export`` (no truth: figures from the written files) on one model with
``--board keep`` and ``--board drop`` from this checkout, and with that checkout's defaults from
``--before``; an export folder already in the workdir is read back, not rerun. For each: the board's
spheres (those the report counts as the board's; before, when it counted none, the tip's spheres
whose centres lie in the plate's box grown by 6 mm) and their union volume against the plate's, the
tip's learned body volume, and the export's own seconds. A refused export is a row with its sentence.
Writes the ``selfmodel-board`` section of BENCHMARKS.md.

    nice -n 5 env OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_board.py --model /tmp/v/bench/xarm-model \\
        --workdir /tmp/board-bench --before /work/wt-board-before
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import table, write_section  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def export(checkout: Path, model: Path, out: Path, extra: list[str]) -> dict:
    """The export's report, run once into ``out`` (its refusal kept beside it)."""
    refusal = out.with_suffix(".refused")
    if not (out / "export_report.json").is_file() and not refusal.is_file():
        environment = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": "1"}
        start = time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "selfcal.cli", "selfmodel", "export", str(model), "--out", str(out),
                              "--no-truth", *extra], cwd=checkout, env=environment, capture_output=True, text=True)
        if run.returncode:
            refusal.write_text(json.dumps({"error": run.stderr.strip().splitlines()[-1],
                                           "seconds": time.perf_counter() - start}))
    if refusal.is_file():
        return json.loads(refusal.read_text())
    return json.loads((out / "export_report.json").read_text())


def figures(model: Path, out: Path, report: dict) -> dict:
    from selfmodel.export.board import PlateBox
    from selfmodel.export.spheres import SphereCover
    from selfmodel.labels.description import board_mesh
    from selfmodel.model.models import SelfModel

    if "error" in report:
        return {"refused": report["error"], "seconds": report["seconds"]}
    loaded = SelfModel.load(model)
    plate, tip = PlateBox.of(board_mesh(loaded.board)), loaded.tip_link
    written = yaml.safe_load((out / "curobo_spheres.yml").read_text())["collision_spheres"].get(tip, [])
    centres = np.array([s["center"] for s in written]).reshape(-1, 3)
    radii = np.array([s["radius"] for s in written])
    count = report["links"][tip]["spheres_board"]
    on_board = (np.arange(len(radii)) >= len(radii) - count) if count else plate.grown(0.006).contains(centres)
    board = SphereCover(centres[on_board], radii[on_board])
    return {"board_spheres": int(on_board.sum()), "counted_as_board": count,
            "radius_mm": f"{1000 * board.radii.min():.1f}-{1000 * board.radii.max():.1f}" if len(board.radii) else "-",
            "union_ratio": board.union_volume() / plate.volume if len(board.radii) else 0.0,
            "shrunk": int(np.sum(board.radii < board.radii.max() - 1e-6)) if len(board.radii) else 0,
            "tip_body_cm3": 1e6 * report["links"][tip]["body_volume_m3"],
            "tip_margin_mm": report["links"][tip]["margin_mm"],
            "spheres_total": report["spheres_total"], "seconds": report["seconds"]["export_total"],
            "board": report.get("board")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--before", type=Path, help="a checkout of the commit to compare against (its defaults)")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    runs = [("keep", ROOT, ["--board", "keep"]), ("drop", ROOT, ["--board", "drop"])]
    if args.before is not None:
        runs.insert(0, ("before", args.before, []))
    rows, notes = [], []
    for name, checkout, extra in runs:
        out = args.workdir / name
        row = figures(args.model, out, export(checkout, args.model, out, extra))
        if "refused" in row:
            rows.append([name, "refused", "-", "-", "-", "-", "-", "-", f"{row['seconds']:.0f}"])
            notes.append(f"- {name}: {row['refused']}")
            continue
        rows.append([name, row["board_spheres"], row["radius_mm"], row["shrunk"] if name == "keep" else "-",
                     f"{row['union_ratio']:.2f}",
                     f"{row['tip_body_cm3']:.1f}", f"{row['tip_margin_mm']:.1f}", row["spheres_total"],
                     f"{row['seconds']:.0f}"])
        if name == "before" and not row["counted_as_board"]:
            notes.append("- before: the report counted no board spheres (its split found no board body of its own), "
                         "so the board's are the tip's spheres centred within 6 mm of the plate's box.")
        board = row["board"]
        if board and "treatment" not in board:  # an export from before the board was kept or dropped
            notes.append(f"- {name}: board entry of the report: {json.dumps(board)}")
        elif board:
            notes.append(f"- {name}: the tip's learned body {board['tip_body_volume_with_board_cm3']:.1f} cm3 with the "
                         f"board's cells, {board['tip_body_volume_cm3']:.1f} cm3 without"
                         + ("" if name != "keep" else
                            f"; the layer's spheres {board['sphere_radius_mm']:.1f} mm, {board['spheres_shrunk_at_recorded_poses']} "
                            f"of them shrunk apart from a neighbour's at a recorded pose; no layer is thinner than "
                            f"{board['thinnest_layer_mm']:.1f} mm (the plate and the tip's margin)")
                         + f". Report: {json.dumps(board)}")
    body = ("The export of one model with the calibration board kept (one box, one layer of spheres), dropped, and "
            "before (the board a fitted sphere group, or part of the tip's spheres). Union volume ratio: the "
            "board's spheres' union (by samples) over the plate's volume. Tip body: the tip's learned body the "
            "pieces are made from. Shrunk apart: spheres of the kept layer (all one radius as made) made smaller "
            "to stay clear of a neighbour's spheres at a recorded pose. Seconds: the export's own (fit and writing); the machine was shared.\n\n"
            + table(["export", "board spheres", "radius mm", "shrunk apart", "union volume / plate", "tip body cm3", "tip margin mm",
                     "spheres in all", "export s"], rows) + "\n\n" + "\n".join(notes))
    command = "nice -n 5 env OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_board.py " + " ".join(sys.argv[1:])
    write_section("selfmodel-board", "The calibration board in the collision export: keep, drop, before", body, command)


if __name__ == "__main__":
    main()
