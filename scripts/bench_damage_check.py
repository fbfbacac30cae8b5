"""The damage check (``selfcal selfmodel check``) both ways, written to BENCHMARKS.md section ``damage-check``.

Each damaged arm beside its intact control, every link's figure and the verdict:

- the xArm6 seen by four depth cameras, intact and crashed (link3 bent 3 degrees), 120 poses and
  fewer (24: the quick demo's): the bend the check estimates (from the placement fit) against the
  truth (read here only, never by the check);
- the 2-joint box arm (tests/data/selfmodel): intact, upper link bent 3 degrees, a 4 x 4 x 8 cm tool
  bolted under the box, on several capture seeds;
- the intact xArm6 whose session does not declare the calibration board on its flange (28 x 21 cm
  of matter the description lacks);
- the Panda with a 4 x 4 x 12 cm box on its hand (``--panda``).

The check reads the placement fit and the measured depth points a model folder keeps, not the
networks, so models train a few steps; a model already in --workdir (or in the self-model trust
benchmark's folder) is reused.

    nice -n 10 .venv/bin/python scripts/bench_damage_check.py [--panda]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import table, write_section  # noqa: E402

from capture.session import load_session  # noqa: E402
from capture.simulate import capture_simulated  # noqa: E402
from rigs import load_rig  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "selfmodel"
# A 4 x 4 x 12 cm box against the hand's +x face (the hand is 64 mm thick), reaching past the fingers.
PANDA_BOX = """
[[truth.added_body]]
link = "panda_hand"
box = [0.04, 0.04, 0.12]
xyz = [0.052, 0.0, 0.03]
"""


def model_of(workdir: Path, label: str, rig, poses: int, seed: int, steps: int) -> tuple[Path, Path]:
    """(model folder, session folder), captured and trained once."""
    from selfmodel.labels.depth import LabelSettings
    from selfmodel.learn.trainer import SelfModelTrainer

    session = workdir / f"{label}-session"
    model = workdir / f"{label}-model"
    if not session.exists():
        print(f"capturing {session} ...", flush=True)
        capture_simulated(load_rig(rig), poses, seed, session)
    if not model.exists():
        print(f"training {model} ({steps} steps: the check needs the placement fit and the depth points) ...", flush=True)
        trainer = SelfModelTrainer(kind="structured", steps=steps, seed=0, threads=1, batch=1024, prior_batch=256,
                                   labels=LabelSettings(hit_rays_per_image=300, miss_rays_per_image=100))
        loaded = load_session(session)
        result = trainer.fit([loaded])
        result.model.save(model, [loaded], {"steps": steps})  # with the session's board, as `selfcal selfmodel train`
    return model, session


def checked(model: Path, session: Path) -> dict:
    from selfmodel.inspect.check import check_against
    from selfmodel.inspect.verdicts import check_verdict
    from selfmodel.model.models import SelfModel

    start = time.perf_counter()
    result = check_against(SelfModel.load(model), load_session(session).urdf_path)
    seconds = time.perf_counter() - start
    verdict = check_verdict(result)
    return {"verdict": verdict.as_dict(), **result.as_dict(), "seconds": seconds}


def true_bend(session: Path, joint: str) -> float | None:
    """Degrees: the rotation of the joint's true placement (truth/, evaluation only)."""
    from selfmodel.evaluation.metrics import true_corrections
    from selfmodel.model.chain import ArmLinks

    s = load_session(session)
    spec = ArmLinks.from_urdf(s.urdf_path, s.base_link, s.tip_link)
    if joint not in spec.joint_names:
        return None
    return float(np.degrees(np.linalg.norm(true_corrections(s, spec)[spec.joint_names.index(joint), 3:])))


def rows_of(label: str, found: dict) -> list[list]:
    out = []
    for row in found["links"]:
        joint = (f"{row['joint']} {row['joint_mm']:.1f} +- {row['joint_sd_mm']:.1f} mm, {row['bend_deg']:.2f} +- "
                 f"{row['bend_sd_deg']:.2f} deg" if row["joint"] and row["joint_sd_mm"] is not None else
                 (row["joint"] or "-"))
        out.append([label, row["link"], f"{row['deviation_mm']:.1f}", row["kind"], joint, f"{row['added_mm']:.1f}",
                    f"{row['missing_mm']:.1f}"])
    return out


def learned_surface_offsets(model_folder: Path, links: list[str], configurations: int = 10) -> dict:
    """Where the learned networks' surfaces lie against the description posed with the fitted
    placements (what the earlier check read): per link, the share of the learned surface (meshed at
    4 mm) inside other links' described solids, and more than 10 mm outside every described link."""
    import trimesh

    from selfmodel.inspect.meshing import link_meshes_of
    from selfmodel.labels.description import described_meshes, described_solids
    from selfmodel.model.chain import link_poses_numpy
    from selfmodel.model.models import SelfModel

    model = SelfModel.load(model_folder)
    spec = model.spec
    solids = described_solids(described_meshes(spec, model.urdf_path, model.tip_link, model.board))
    learned = link_meshes_of(model, 0.004)
    q = model.training_q
    poses = link_poses_numpy(spec, q[np.linspace(0, len(q) - 1, configurations).astype(int)], model.corrections.deltas)
    out = {}
    for link in links:
        index = spec.link_names.index(link)
        points = np.asarray(trimesh.sample.sample_surface(learned[link], 5000, seed=0)[0])
        own = np.tile(solids[link].signed_distance(points), len(poses))
        union = []
        for pose in poses:
            base = points @ pose[index, :3, :3].T + pose[index, :3, 3]
            union.append(np.min([solids[name].signed_distance((base - pose[j, :3, 3]) @ pose[j, :3, :3])
                                 for j, name in enumerate(spec.link_names) if name in solids], axis=0))
        union = np.concatenate(union)
        out[link] = {"inside_other_pct": float(100 * np.mean((own > 0.01) & (union < 0.003))),
                     "outside_all_pct": float(100 * np.mean(union > 0.01)),
                     "outside_all_p95_mm": float(1000 * np.percentile(union, 95))}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/damage-check"))
    parser.add_argument("--xarm-models", type=Path, default=Path("/tmp/selfmodel-trust"),
                        help="folder of the self-model trust benchmark (its 120-pose intact and crashed models are reused)")
    parser.add_argument("--poses", type=int, default=120)
    parser.add_argument("--few-poses", type=int, nargs="*", default=[24, 60],
                        help="also capture the xArm6 intact and crashed with these few poses (the quick demo takes 24)")
    parser.add_argument("--box-seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--panda", action="store_true")
    parser.add_argument("--panda-poses", type=int, default=60)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    args.workdir.mkdir(parents=True, exist_ok=True)
    results = {}
    for label, rig in (("intact", "xarm6-cameras"), ("crashed", "xarm6-cameras-crashed")):
        reuse = args.xarm_models / "models" / f"{label}-{args.poses}"
        session = args.xarm_models / f"{rig}-{args.poses}-1"
        if reuse.is_dir() and session.is_dir():
            model = reuse
        else:
            model, session = model_of(args.workdir, f"xarm6-{label}", rig, args.poses, 1, 20)
        results[f"xArm6 {label}"] = (checked(model, session), session)
    # The intact xArm6 whose session does not declare its calibration board: 28 x 21 cm of matter on
    # link6 that the description lacks, as a bolted-on tool would be.
    undeclared = args.workdir / "xarm6-intact-board-undeclared-model"
    if not undeclared.exists():
        import shutil

        reuse = args.xarm_models / "models" / f"intact-{args.poses}"
        shutil.copytree(reuse if reuse.is_dir() else args.workdir / "xarm6-intact-model", undeclared)
        config = json.loads((undeclared / "config.json").read_text())
        config["board"] = None
        config["training"]["sessions"] = [os.path.relpath(results["xArm6 intact"][1].resolve(), undeclared.resolve())]
        (undeclared / "config.json").write_text(json.dumps(config))
    results["xArm6 intact, board not declared"] = (checked(undeclared, results["xArm6 intact"][1]),
                                                   results["xArm6 intact"][1])
    for poses in args.few_poses:
        for label, rig in (("intact", "xarm6-cameras"), ("crashed", "xarm6-cameras-crashed")):
            model, session = model_of(args.workdir, f"xarm6-{label}-{poses}", rig, poses, 5, 5)
            results[f"xArm6 {label}, {poses} poses"] = (checked(model, session), session)
    for seed in args.box_seeds:
        for label, rig in (("intact", "two_joint_box"), ("bent", "two_joint_box_bent"), ("tool", "two_joint_box_tool")):
            model, session = model_of(args.workdir, f"box-{label}-{seed}", DATA / f"{rig}.toml", 40, seed, 5)
            results[f"box arm {label} (seed {seed})"] = (checked(model, session), session)
    if args.panda:
        rig_file = args.workdir / "panda-cameras-box.toml"
        builtin = Path(__file__).resolve().parent.parent / "rigs" / "builtin" / "panda-cameras.toml"
        text = builtin.read_text()
        rig_file.write_text(text.replace('name = "panda-cameras"', 'name = "panda-cameras-box"') + PANDA_BOX)
        for label, rig in (("intact", builtin), ("box on the hand", rig_file)):
            model, session = model_of(args.workdir, f"panda-{label.split()[0]}", rig, args.panda_poses, 1, 5)
            results[f"Panda {label}"] = (checked(model, session), session)
    intact_model = args.xarm_models / "models" / f"intact-{args.poses}"
    if not intact_model.is_dir():
        intact_model = args.workdir / "xarm6-intact-model"
    offsets = learned_surface_offsets(intact_model, ["link5", "link6"])
    (args.workdir / "results.json").write_text(json.dumps({k: v[0] for k, v in results.items()}, indent=1))

    lines = ["Each damaged arm beside its intact control. The check reads the placement fit's corrections (with "
             "their standard deviations) and the measured depth points against the description posed with them; "
             "threshold: 3 x the depth noise about the description, at least 5 mm; FAIL when a figure exceeds it "
             "by more than two standard deviations. Truth is read by this script only.", "",
             table(["arm", "verdict", "threshold mm", "depth noise mm", "largest figure", "check s"],
                   [[label, found["verdict"]["result"], f"{found['verdict']['tolerance']['value']:.1f}",
                     f"{found['noise_mm']:.1f}", f"{found['links'][0]['link']} {found['links'][0]['deviation_mm']:.1f} mm "
                     f"({found['links'][0]['kind']})", f"{found['seconds']:.1f}"] for label, (found, _) in results.items()]),
             ""]
    for label, (found, session) in results.items():
        lines.append(f"- {label}: **{found['verdict']['result']}**: {found['verdict']['reason']}")
    bends = []
    for label, (found, session) in results.items():
        for row in found["links"]:
            if row["joint"] and row["kind"] == f"joint {row['joint']}" and found["verdict"]["result"] == "FAIL" \
                    and row is found["links"][0]:
                truth = true_bend(session, row["joint"])
                bends.append([label, row["link"], row["joint"], f"{row['bend_deg']:.2f} +- {row['bend_sd_deg']:.2f}",
                              "-" if truth is None else f"{truth:.2f}",
                              "-" if truth is None else f"{row['bend_deg'] - truth:+.2f}"])
    if bends:
        lines += ["", "The bend the check names against the truth (degrees):", "",
                  table(["arm", "link", "joint", "estimated deg", "true deg", "error deg"], bends)]
    xarm = [r for label, (found, _) in results.items() if label in ("xArm6 intact", "xArm6 crashed")
            for r in rows_of(label, found)]
    lines += ["", "Every link of the 120-pose xArm6, intact and crashed (mm; joint: how far the joint's correction moves what "
                  "follows it, and its rotation):", "",
              table(["arm", "link", "figure mm", "kind", "joint", "added mm", "missing mm"], xarm),
              "", "Why the earlier check saw about 20 mm of added matter on link5 and link6 of the intact xArm6: it read "
                  "the learned networks' surfaces, and those are where the learning error lives. The learned surfaces of "
                  "the intact model (meshed at 4 mm, posed at 10 training configurations with the fitted placements): "
                  + "; ".join(f"{link}: {o['inside_other_pct']:.0f} % inside other links' described solids (space its "
                              f"network claims from its neighbours), {o['outside_all_pct']:.0f} % more than 10 mm outside "
                              f"every described link (95th percentile {o['outside_all_p95_mm']:.1f} mm)"
                              for link, o in offsets.items())
                  + ". Not the board mount, not a camera-facing side: the measured depth points on the same links sit "
                    "within the figures above (2-5 mm) of the description posed with the fitted placements, the board "
                    "declared in the session being part of it.",
              "", "Machine shared with other helpers' jobs: the seconds are noisy; the figures are not timing."]
    command = "nice -n 10 .venv/bin/python scripts/bench_damage_check.py" + (" --panda" if args.panda else "")
    write_section("damage-check", "Damage check: intact against damaged, both ways", "\n".join(lines), command)


if __name__ == "__main__":
    main()
