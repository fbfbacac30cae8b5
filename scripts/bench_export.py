"""Collision export figures (issue 7): a learned xArm6 body as convex pieces and cuRobo spheres,
measured against the true arm at held-out poses, beside the URDF's own collision meshes.

Rows, each measured on the same held-out poses of a simulated session (truth/ is read here only):

- ``export (structured model)``: `selfcal selfmodel export` of a structured self-model trained on
  `xarm6-cameras` (or a model folder given with --model);
- ``export of the true meshes``: the same export pipeline fed the true link bodies instead of a
  learned model (isolates what the export itself loses from what the model got wrong);
- ``URDF collision meshes (baseline)``: the description's own V-HACD meshes posed by the nominal
  chain; on `xarm6-cameras-crashed` (link 3 bent by 3 degrees) this is what a planner would use.

    nice -n 10 .venv/bin/python scripts/bench_export.py [--selfmodel-workdir /tmp/selfmodel-bench]

Run it after scripts/bench_selfmodel.py: its held-out sessions and trained models are used (no
second training run); measured rows are cached under --workdir.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import table, write_section  # noqa: E402

RIG = "xarm6-cameras"
CRASHED = "xarm6-cameras-crashed"
TRAIN_SEED, HELDOUT_SEED = 1, 101
HELDOUT_POSES = 30
TARGETS = {"coverage": 0.995, "gap_mm": 5.0, "pieces_volume": 2.0, "spheres_volume": 3.0}


def capture(workdir: Path, rig: str, poses: int, seed: int) -> Path:
    from capture.simulate import capture_simulated
    from rigs import load_rig

    out = workdir / f"{rig}-{poses}-{seed}"
    if not out.exists():
        capture_simulated(load_rig(rig), poses, seed, out)
    return out


def train(session: Path, minutes: float, seed: int = 0):
    from capture.session import load_session
    from selfmodel.training import SelfModelTrainer

    return SelfModelTrainer(kind="structured", minutes=minutes, seed=seed).fit([load_session(session)]).model


class TrueBodyModel:
    """The structured-model contract answered from the true link meshes (evaluation only)."""

    kind = "structured"

    def __init__(self, session: Path):
        import open3d as o3d

        from capture.session import load_session
        from selfmodel.metrics import true_arm

        loaded = load_session(session)
        arm = true_arm(loaded, loaded.pose_ids[:1])
        self.link_names = [link for link in arm.link_names if link in arm.meshes]
        self.meshes = arm.meshes
        self.urdf_path = loaded.path / "truth" / "robot.urdf"
        self.base_link = loaded.base_link
        self.joint_names = list(loaded.joint_names)
        self.scenes = {}
        for link in self.link_names:
            scene = o3d.t.geometry.RaycastingScene()
            scene.add_triangles(o3d.core.Tensor(np.asarray(arm.meshes[link].vertices, dtype=np.float32)),
                                o3d.core.Tensor(np.asarray(arm.meshes[link].faces, dtype=np.uint32)))
            self.scenes[link] = scene

    def link_bounds(self, link):
        lo, hi = self.meshes[link].bounds
        return lo - 0.01, hi + 0.01

    def link_occupancy(self, link, points):
        import open3d as o3d

        scene = self.scenes[link]
        tensor = o3d.core.Tensor(np.asarray(points, dtype=np.float32))
        inside = scene.compute_occupancy(tensor, nsamples=3).numpy() > 0.5
        distance = scene.compute_distance(tensor).numpy()
        # A smooth step across the surface (1 mm), so marching cubes finds it between grid points.
        signed = np.where(inside, -distance, distance)
        return 1.0 / (1.0 + np.exp(np.clip(signed / 0.001, -50, 50)))


def export_and_measure(model, truth, workdir: Path, name: str, exporter) -> dict:
    from selfmodel.export import write_export
    from selfmodel.export_truth import PosedExport, evaluate_export

    start = time.perf_counter()
    fitted = exporter.fit(model, where=name)
    out = workdir / f"export-{name}"
    report = write_export(fitted, Path(model.urdf_path), out, exporter.srdf_samples, force=True)
    seconds = time.perf_counter() - start
    figures = evaluate_export(PosedExport(out / "robot.urdf", model.base_link if hasattr(model, "base_link") else truth.link_names[0],
                                          fitted.pieces, fitted.spheres), truth, np.random.default_rng(5))
    return {"report": report, "figures": figures, "seconds": seconds}


def baseline(session: Path, truth) -> dict:
    from capture.session import load_session
    from selfmodel.export_truth import PosedExport, description_pieces, evaluate_export

    loaded = load_session(session)
    pieces = description_pieces(loaded.urdf_path, truth.link_names)
    return evaluate_export(PosedExport(loaded.urdf_path, loaded.base_link, pieces), truth, np.random.default_rng(5))


def rows_for(label: str, figures: dict, counts: dict | None, seconds: float | None) -> list[list]:
    rows = []
    for kind in ("pieces", "spheres"):
        if kind not in figures:
            continue
        f = figures[kind]
        count = "" if counts is None else counts[kind]
        rows.append([label, kind, f"{100 * f['coverage']:.2f}", f"{f['largest_gap_mm']:.1f}", f"{f['protrusion_mm']:.1f}",
                     f"{f['volume_ratio']:.2f}", count, "" if seconds is None else f"{seconds:.0f}"])
    return rows


def counts_of(report: dict) -> dict:
    links = report["links"].values()
    return {"pieces": f"{max(r['pieces'] for r in links)} / {max(max(r['vertices_per_piece']) for r in links)}",
            "spheres": f"{max(r['spheres'] for r in links)}"}


def cached(workdir: Path, name: str, compute) -> dict:
    """A row's figures, kept as JSON under ``workdir/rows`` so a rerun after more models are trained
    does not measure the unchanged rows again."""
    import json

    path = workdir / "rows" / f"{name}.json"
    if path.is_file():
        print(f"{name}: reusing {path}", flush=True)
        return json.loads(path.read_text())
    print(f"{name}: measuring", flush=True)
    result = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    from selfcal.ui import to_jsonable

    path.write_text(json.dumps(to_jsonable(result)))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--selfmodel-workdir", type=Path, default=Path("/tmp/selfmodel-bench"),
                        help="scripts/bench_selfmodel.py's --workdir: its held-out sessions and trained models are "
                             "used when present (no second training run)")
    parser.add_argument("--train-minutes", type=float, default=None,
                        help="train a structured model here for this long when the self-model bench has none")
    parser.add_argument("--poses", type=int, default=300, help="training poses when training here")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-export"),
                        help="captures, exports and measured rows are kept here")
    args = parser.parse_args()

    from selfmodel.export import CollisionExporter, load_model_folder
    from selfmodel.export_truth import load_truth

    workdir = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    exporter = CollisionExporter(max_spheres=20, max_pieces=8, seed=0)
    table_rows, notes, missing = [], [], []

    for rig, model_name in ((RIG, "structured"), (CRASHED, "structured-crashed")):
        heldout = args.selfmodel_workdir / f"{rig}-heldout"
        if not (heldout / "session.json").is_file():
            heldout = capture(workdir, rig, HELDOUT_POSES, HELDOUT_SEED)
        truth = load_truth(heldout)
        notes.append(f"{rig}: {len(truth.pose_ids)} held-out poses from {heldout.name}")
        figures = cached(workdir, f"{rig}-baseline", lambda: baseline(heldout, truth))
        table_rows += rows_for(f"{rig}: URDF collision meshes (baseline)", figures, None, None)
        if rig == RIG:
            oracle = cached(workdir, f"{rig}-true-export",
                            lambda: export_and_measure(TrueBodyModel(heldout), truth, workdir, f"{rig}-true", exporter))
            table_rows += rows_for(f"{rig}: export of the true meshes", oracle["figures"], counts_of(oracle["report"]),
                                   oracle["seconds"])
        folder = args.selfmodel_workdir / "models" / model_name
        if (folder / "config.json").is_file():
            model, source = load_model_folder(folder), f"model {folder}"
        elif args.train_minutes:
            session = capture(workdir, rig, args.poses, TRAIN_SEED)
            print(f"{rig}: training {args.train_minutes} min on {args.poses} poses", flush=True)
            model, source = train(session, args.train_minutes), f"structured, {args.poses} poses, {args.train_minutes:g} min"
        else:
            missing.append(f"{rig}: no trained model in {folder} yet, so no export row for it")
            continue
        learned = export_and_measure(model, truth, workdir, f"{rig}-model", exporter)
        table_rows += rows_for(f"{rig}: export of the learned model", learned["figures"], counts_of(learned["report"]),
                               learned["seconds"])
        report = learned["report"]
        notes.append(f"{rig}: learned model from {source}; automatic margin {report['margin_mm']:.1f} mm; SRDF: "
                     f"{report['srdf']['adjacent']} adjacent and {report['srdf']['never']} never disabled, "
                     f"{report['srdf']['touching_in_every_sample']} touching in every sample kept, of {report['srdf']['checked_pairs']} pairs over {report['srdf']['samples']} configurations; "
                     "export seconds " + ", ".join(f"{k} {v:.0f}" for k, v in report["seconds"].items()))
        notes.append(f"{rig}: per-link coverage of the learned export (pieces / spheres, %): " + ", ".join(
            f"{link} {100 * v['pieces']['coverage']:.1f} / {100 * v['spheres']['coverage']:.1f}"
            for link, v in learned["figures"]["per_link"].items()))

    body = ("True surface samples of the true meshes (calibration board included) posed at truth/joints_reached.csv, "
            "faces hidden inside another link left out; each export is posed by its own URDF at the commanded angles. "
            "Coverage: true surface samples inside; gap: the farthest uncovered sample; protrusion: mean distance of the "
            "export's outer surface from the true body; volume ratio: export volume over true volume (uniform samples). "
            "Targets: coverage >= 99.5 %, gap <= 5 mm, volume ratio <= 2.0 (pieces), <= 3.0 (spheres), <= 20 spheres "
            "and <= 8 pieces of <= 64 vertices a link.\n\n"
            + table(["geometry", "kind", "coverage %", "largest gap mm", "protrusion mm", "volume ratio",
                     "max a link: spheres, or pieces / vertices", "export s"], table_rows)
            + "\n\n" + "\n".join(f"- {note}" for note in notes + missing))
    command = "scripts/bench_export.py " + " ".join(sys.argv[1:])
    write_section("selfmodel-export", "Collision export from the self-model (issue 7)", body, command.strip())


if __name__ == "__main__":
    main()
