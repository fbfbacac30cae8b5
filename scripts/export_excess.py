"""Where the exported bodies' bulk lies: each link's learned matter outside the true surface, split by
what the training sessions' cameras said about that space (evaluation only: reads truth/).

For a trained model (a bench_export.py workdir holds them) the export's learned bodies are built
twice, as `selfcal selfmodel export` builds them: without carving and with the default carving
(selfmodel/export/carving.py). For every cell of a body (3 mm grid, link frame) the true link's
solid says whether it is matter of the real arm; cells outside it by more than half a cell are
excess, and each is counted as

- seen through: at >= k recorded poses some camera read beyond it (what the carving removes),
- seen through at 1..k-1 poses,
- below the floor: under the lowest point of the true base at some recorded pose (the xArm6 rig's
  sessions state no mount plane, so the export cannot know this space is the floor), not seen through,
- never seen through: space no camera's ray crossed (stays occupied for a planner).

True-matter cells the carving removed are counted too (must stay near 0).

``--sigmas`` also carves the same uncarved bodies at other tolerances (the reading beyond a cell by
that many depth-noise sigmas plus half a cell's diagonal): how much more excess each removes, and
how much true matter and true surface (cells within half a cell of the true surface, what the
pieces must keep covering) it takes with it.

    nice -n 10 .venv/bin/python scripts/export_excess.py --workdir /tmp/be3 [--rig xarm6-cameras] [--steps 6000]
        [--sigmas 1,0.5,0.25]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import cached_row, file_digests, table, write_section  # noqa: E402


def model_folder(workdir: Path, rig: str, steps: int) -> Path:
    """The self-model bench_export.py trained for ``rig``: on the board calibration's URDF where the rig
    carries a board (its folder ends in -calibrated), else on the session's description."""
    calibrated = workdir / f"model-{rig}-{steps}-calibrated"
    return calibrated if calibrated.is_dir() else workdir / f"model-{rig}-{steps}"


def figures(workdir: Path, rig: str, steps: int, sigmas: list[float]) -> dict:
    from selfmodel.evaluation.export_truth import load_truth
    from selfmodel.export.carving import POSES, SIGMAS, cell_centres, seen_through_cells, training_sessions
    from selfmodel.export.exporter import CollisionExporter, name_recorded_poses
    from selfmodel.export.settings import BodySettings
    from selfmodel.model.models import SelfModel

    folder = model_folder(workdir, rig, steps)
    session_path = workdir / f"{rig}-300-1"
    model = SelfModel.load(folder)
    name_recorded_poses(model, folder)
    truth = load_truth(session_path, ["p0000"])
    start = time.perf_counter()
    staged = CollisionExporter(body=BodySettings(carve_poses=0)).bodies(model, str(folder))
    carved = CollisionExporter().bodies(model, str(folder))
    seconds = time.perf_counter() - start
    sessions, why = training_sessions(folder)
    if sessions is None:
        raise SystemExit(f"{folder}: {why}")
    through, below_mount, _ = seen_through_cells(staged.bodies, staged.poses, sessions)
    floor = float(truth.meshes[truth.link_names[0]].vertices[:, 2].min())
    rows = {}
    signed_of = {}
    for link, body in staged.bodies.items():
        _, centres = cell_centres(body)
        half = 0.5 * body.voxel
        signed = truth.solid(link).signed_distance(centres)
        signed_of[link] = signed
        excess = signed > half
        lowest = np.min([centres @ pose[2, :3] + pose[2, 3] for pose in staged.poses[link]], axis=0)
        below = lowest < floor - half
        seen = (through[link] >= POSES) | (below_mount[link] >= POSES)  # what the export carves
        some = (through[link] > 0) & ~seen
        cell = body.voxel ** 3 * 1e6  # cm^3
        after = carved.bodies[link]
        _, after_centres = cell_centres(after)
        after_signed = truth.solid(link).signed_distance(after_centres)
        rows[link] = {
            "body_cm3": float(len(centres) * cell), "excess_cm3": float(excess.sum() * cell),
            "seen_through_cm3": float((excess & seen).sum() * cell),
            "seen_1_to_k_cm3": float((excess & some).sum() * cell),
            "below_floor_unseen_cm3": float((excess & below & ~seen).sum() * cell),
            "never_seen_cm3": float((excess & (through[link] == 0) & ~below).sum() * cell),
            "true_matter_seen_through_cm3": float(((signed < -half) & seen).sum() * cell),
            "excess_p95_mm": float(np.percentile(signed[excess], 95) * 1000) if excess.any() else 0.0,
            "carved_body_cm3": float(len(after_centres) * after.voxel ** 3 * 1e6),
            "carved_excess_cm3": float((after_signed > half).sum() * after.voxel ** 3 * 1e6),
            "carved_excess_p95_mm": float(np.percentile(after_signed[after_signed > half], 95) * 1000)
            if (after_signed > half).any() else 0.0,
        }
    tolerances = {}
    for sigma in sigmas:
        counts = (through, below_mount) if sigma == SIGMAS else seen_through_cells(staged.bodies, staged.poses, sessions,
                                                                                 sigmas=sigma)
        per_link = {}
        for link, body in staged.bodies.items():
            half = 0.5 * body.voxel
            gone = (counts[0][link] >= POSES) | (counts[1][link] >= POSES)
            signed = signed_of[link]
            cell = body.voxel ** 3 * 1e6
            left = signed[(signed > half) & ~gone]
            per_link[link] = {"excess_carved_cm3": float(((signed > half) & gone).sum() * cell),
                              "excess_left_cm3": float(len(left) * cell),
                              "excess_left_p95_mm": float(np.percentile(left, 95) * 1000) if len(left) else 0.0,
                              "true_matter_carved_cm3": float(((signed < -half) & gone).sum() * cell),
                              "true_surface_carved_cm3": float(((np.abs(signed) <= half) & gone).sum() * cell),
                              "true_surface_cm3": float((np.abs(signed) <= half).sum() * cell)}
        tolerances[f"{sigma:g}"] = per_link
    return {"rows": rows, "carving": carved.carving.report(), "floor_z_m": floor, "seconds": seconds,
            "poses": int(len(staged.recorded.q)), "tolerances": tolerances,
            "mount_plane_z": sessions[0].mount_plane_z}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-export"))
    parser.add_argument("--rig", default="xarm6-cameras")
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--sigmas", default="1,0.5,0.25",
                        help="carving tolerances to compare, in depth-noise sigmas (comma-separated)")
    args = parser.parse_args()
    sigmas = [float(value) for value in args.sigmas.split(",")]
    folder = model_folder(args.workdir, args.rig, args.steps)
    inputs = {**file_digests(folder, ["weights.pt", "config.json"], "model"), "sigmas": args.sigmas}
    result = cached_row(args.workdir / "rows" / args.rig / "excess.json",
                        lambda: figures(args.workdir, args.rig, args.steps, sigmas), inputs)
    rows = []
    total = {key: 0.0 for key in next(iter(result["rows"].values()))}
    for link, row in result["rows"].items():
        for key, value in row.items():
            total[key] += value
        rows.append([link] + [f"{row[key]:.0f}" if key.endswith("cm3") else f"{row[key]:.1f}" for key in row])
    rows.append(["all links"] + [f"{total[key]:.0f}" if key.endswith("cm3") else "" for key in total])
    for row in rows:
        print("  ".join(str(cell) for cell in row))
    share = total["seen_through_cm3"] / max(total["excess_cm3"], 1e-9)
    body = (f"{args.rig}, the bench_export.py model trained {args.steps} steps, its {result['poses']} recorded poses; "
            "each link's learned body as the export builds it (3 mm cells, link frame, settled apart at the recorded "
            "poses) against the true link's solid (evaluation only). Excess: body cells outside the true solid by more "
            "than half a cell. Seen through: some camera's 3x3-pixel minimum reading lay beyond the cell by more than "
            f"{result['carving']['sigmas']:g} depth-noise sigma plus half a cell's diagonal at >= "
            f"{result['carving']['min_poses']} recorded poses (what the export now carves). Below the floor: under the "
            "true base's lowest point at some pose and not carved"
            + (" (these sessions state no mount plane)." if result.get("mount_plane_z") is None else
               f" (these sessions state the mount plane z = {result['mount_plane_z']:g} m: cells below it at >= 3 poses "
               "count as seen through).") + " Never "
            "seen: no ray crossed it. True matter seen through: cells inside the true solid the carving would remove. "
            "After: the carved body as the export builds it. "
            f"Seen-through share of the excess: {100 * share:.0f} %. The machine was shared with other jobs.\n\n"
            + table(["link", "body cm3", "excess cm3", "seen through cm3", "seen at 1..k-1 poses cm3",
                     "below floor, unseen cm3", "never seen cm3", "true matter seen through cm3", "excess p95 mm",
                     "carved body cm3", "carved excess cm3", "carved excess p95 mm"], rows))
    tolerance_rows = []
    for sigma, per_link in result["tolerances"].items():
        total = {key: sum(row[key] for row in per_link.values()) for key in next(iter(per_link.values()))}
        tolerance_rows.append([sigma, f"{total['excess_carved_cm3']:.0f}", f"{total['excess_left_cm3']:.0f}",
                               f"{total['true_matter_carved_cm3']:.1f}",
                               f"{100 * total['true_surface_carved_cm3'] / max(total['true_surface_cm3'], 1e-9):.2f}"]
                              + [f"{per_link[link]['excess_left_cm3']:.0f} / {per_link[link]['excess_left_p95_mm']:.1f}"
                                 for link in per_link])
        print(tolerance_rows[-1])
    links = list(next(iter(result["tolerances"].values())))
    body += ("\n\nThe carving's tolerance: the same uncarved bodies carved with the reading beyond a cell by k depth-noise "
             "sigmas plus half a cell's diagonal, at >= 3 poses (or below the stated mount plane). True surface carved: "
             "body cells within half a cell of the true surface that the carving removes (the pieces must still cover "
             "the surface there: each piece is a hull, so a lost surface cell is a possible gap, not a gap). Per link: "
             "excess left cm3 / its p95 mm outside the true solid (before the bodies are settled apart).\n\n"
             + table(["sigmas", "excess carved cm3", "excess left cm3", "true matter carved cm3", "true surface carved %"]
                     + [f"{link} left" for link in links], tolerance_rows))
    write_section("selfmodel-export-carving", "Where the exported bodies' bulk lies, and what the depth images carve",
                  body, "scripts/export_excess.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
