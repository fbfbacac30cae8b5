"""Benchmark of the visual self-model, written to BENCHMARKS.md section ``selfmodel``.

xarm6-cameras: 300 training poses seen by 4 depth cameras, 30 held-out poses. The structured model
and the free (SIREN) baseline train for the same time budget and are evaluated side by side
against the true posed meshes; the same structured recipe runs on xarm6-cameras-crashed, and
``check`` must name the bent link (link3) first. Captures and models are cached under --workdir.

    nice -n 10 .venv/bin/python scripts/bench_selfmodel.py --minutes 10

The collision-export benchmark may add its own section (e.g. ``selfmodel-export``) next to this one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import table, write_section  # noqa: E402

from capture.session import load_session  # noqa: E402
from capture.simulate import capture_simulated  # noqa: E402
from rigs import load_rig  # noqa: E402
from selfmodel.evaluation.metrics import QUERY_SPEED  # noqa: E402

TARGETS = {"chamfer_pct_workspace": 0.5, "fscore": 0.9, "false_free_rate": 0.02}


def captured(workdir: Path, rig: str, poses: int, seed: int, name: str) -> Path:
    out = workdir / f"{rig}-{name}"
    if not out.exists():
        print(f"capturing {out} ...", flush=True)
        capture_simulated(load_rig(rig), poses, seed, out)
    return out


def trained(workdir: Path, label: str, session: Path, kind: str, minutes: float, seed: int, threads: int | None) -> Path:
    from selfmodel.learn.trainer import SelfModelTrainer
    from selfmodel.model.folder import read_config

    out = workdir / "models" / label
    if out.exists():
        config = read_config(out)["training"]
        if config.get("minutes") == minutes and config.get("seed") == seed:
            print(f"reusing {out}", flush=True)
            return out
        shutil.rmtree(out)
    print(f"training {label} ({kind}, {minutes} min) ...", flush=True)
    loaded = load_session(session)
    result = SelfModelTrainer(kind=kind, minutes=minutes, seed=seed, threads=threads).fit([loaded])
    result.model.save(out, [loaded], {"kind": kind, "minutes": minutes, "seed": seed})
    print(f"  {result.steps} steps in {result.seconds:.0f} s, {result.labelled_points} labelled points", flush=True)
    return out


def evaluated(model_folder: Path, session: Path, poses: int, voxel: float) -> dict:
    from selfmodel.evaluation.metrics import evaluate
    from selfmodel.model.folder import read_config
    from selfmodel.model.models import SelfModel

    cache = model_folder.with_name(model_folder.name + f".eval-{poses}-{voxel}.json")
    if cache.is_file() and cache.stat().st_mtime > (model_folder / "weights.pt").stat().st_mtime:
        print(f"reusing {cache}", flush=True)
        return json.loads(cache.read_text())
    model = SelfModel.load(model_folder)
    loaded = load_session(session)
    start = time.perf_counter()
    figures = evaluate(model, loaded, np.random.default_rng(0), loaded.pose_ids[:poses], voxel)
    figures["eval_seconds"] = time.perf_counter() - start
    training = read_config(model_folder)["training"]
    figures.update(steps=training["steps"], train_seconds=training["seconds"],
                   parameters=sum(p.numel() for p in model.parameters()))
    print(json.dumps(figures, indent=1), flush=True)
    cache.write_text(json.dumps(figures))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/selfmodel-bench"))
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--poses", type=int, default=300)
    parser.add_argument("--heldout", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--skip-free", action="store_true", help="leave out the free baseline")
    parser.add_argument("--free-heldout", type=int, default=None, help="evaluate the free model on fewer held-out poses")
    parser.add_argument("--skip-crashed", action="store_true", help="leave out the crashed rig")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    command = "nice -n 10 .venv/bin/python scripts/bench_selfmodel.py " + " ".join(sys.argv[1:])

    train = captured(args.workdir, "xarm6-cameras", args.poses, 1, "train")
    heldout = captured(args.workdir, "xarm6-cameras", args.heldout, 2, "heldout")
    results, check_rows = {}, None
    structured = trained(args.workdir, "structured", train, "structured", args.minutes, args.seed, args.threads)
    results["structured"] = evaluated(structured, heldout, args.heldout, 0.005)
    report(args, results, check_rows, command)
    if not args.skip_crashed:
        from selfmodel.inspect.check import check_against
        from selfmodel.model.models import SelfModel

        crashed_train = captured(args.workdir, "xarm6-cameras-crashed", args.poses, 1, "train")
        crashed_heldout = captured(args.workdir, "xarm6-cameras-crashed", args.heldout, 2, "heldout")
        crashed = trained(args.workdir, "structured-crashed", crashed_train, "structured", args.minutes, args.seed,
                          args.threads)
        results["structured, crashed rig"] = evaluated(crashed, crashed_heldout, args.heldout, 0.005)
        check_rows = check_against(SelfModel.load(crashed), load_session(crashed_train).urdf_path).rows
        for row in check_rows:
            print(row, flush=True)
        report(args, results, check_rows, command)
    if not args.skip_free:
        free = trained(args.workdir, "free", train, "free", args.minutes, args.seed, args.threads)
        # The free model is meshed over the whole workspace at every pose: an 8 mm voxel keeps that affordable.
        results["free"] = evaluated(free, heldout, args.free_heldout or args.heldout, 0.008)
        report(args, results, check_rows, command)


def report(args, results: dict, check_rows, command: str) -> None:
    header = ["model", "train (steps, s)", "held-out poses", "Chamfer-L1 mm", "% of workspace", "F-score", "IoU",
              "false-free %", "queries/s", "parameters"]
    rows = []
    for label, f in results.items():
        rows.append([label, f"{f['steps']}, {f['train_seconds']:.0f}", f["poses"], f"{f['chamfer_l1_mm']:.2f}",
                     f"{f['chamfer_pct_workspace']:.3f}", f"{f['fscore']:.3f}", f"{f['iou']:.3f}",
                     f"{100 * f['false_free_rate']:.2f}", f"{f['queries_per_s']:.3g}", f["parameters"]])
    s = results["structured"]
    lines = [table(header, rows), "",
             f"xarm6-cameras, {args.poses} training poses x 4 cameras (640x480, depth noise 0.5 %), "
             f"{args.heldout} held-out poses; {args.minutes:g} minutes of training per model (data preparation "
             f"not counted) on this machine, shared with other jobs. Workspace extent {s['workspace_extent_m']:.2f} m; "
             f"F-score at {s['fscore_tau_mm']:.1f} mm (1 %). Surfaces by marching cubes at 5 mm (free model: 8 mm). "
             f"{QUERY_SPEED}; the network at {s['query_threads']} torch thread(s), load average "
             f"{s['query_load']:.1f} when measured.",
             "",
             "Targets for the structured model: "
             + ", ".join(f"{k} {'<=' if k != 'fscore' else '>='} {v}" for k, v in TARGETS.items()) + ": "
             + ", ".join(f"{k} {'met' if (s[k] <= v if k != 'fscore' else s[k] >= v) else 'NOT met'}"
                         for k, v in TARGETS.items()) + "."]
    if "free" in results:
        f = results["free"]
        lines += ["", f"Free (SIREN) baseline over structured, same budget: Chamfer-L1 x{f['chamfer_l1_mm'] / s['chamfer_l1_mm']:.2f}, "
                      f"false-free x{f['false_free_rate'] / max(s['false_free_rate'], 1e-9):.2f}, "
                      f"F-score {f['fscore']:.3f} vs {s['fscore']:.3f}, "
                      f"query throughput x{f['queries_per_s'] / s['queries_per_s']:.2f}."]
    if check_rows is not None:
        lines += ["", "`selfmodel check` of the crashed-rig model against the session's URDF (largest first):", "",
                  table(["link", "deviation mm", "kind", "shape mm", "joint mm"],
                        [[r.link, f"{r.deviation_mm:.1f}", r.kind, f"{r.shape_mm:.1f}", f"{r.joint_mm:.1f}"]
                         for r in check_rows]),
                  "", f"Bent link named first: {'yes' if check_rows[0].link == 'link3' else 'NO'} "
                      f"({check_rows[0].link}; the rig bends link3 by 3 degrees)."]
    write_section("selfmodel", "Visual self-model", "\n".join(lines), command)


if __name__ == "__main__":
    main()
