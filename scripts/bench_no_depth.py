"""Benchmark of depth recordings whose background gives no reading, written to BENCHMARKS.md section ``no-depth``.

A rig's arm is recorded natively (the simulator's pybullet path) and as ROS 2 bags rendered by
another path: open3d ray casting of the true link meshes (the session's truth/robot.urdf, posed
at the reached angles), then the rig's own depth model (holes, flying pixels, z^2 noise, 1 mm
steps). Three bags of the same poses:

- ``no background``: nothing behind the arm, so every pixel that misses it reads 0;
- ``room``: a 5 m x 5 m x 3 m room around the arm;
- ``clipped``: the room, masked to 0 beyond a clipping distance (before the depth model).

Each bag is imported with the default ``--no-depth auto``, the no-background bag also with
``--no-depth unknown`` (the old reading), and a self-model trained on each with the same steps as
on the native session; Chamfer-L1 and false-free on held-out native poses. Targets: Chamfer within
1.2x the native session's, false-free under 0.5 %.

    nice -n 5 .venv/bin/python scripts/bench_no_depth.py --poses 30 --steps 1200 --seeds 3,4
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import table, write_section  # noqa: E402

from capture.session import load_session  # noqa: E402
from capture.simulate import capture_simulated  # noqa: E402
from rigs import load_rig  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RIG = ROOT / "tests" / "data" / "selfmodel" / "two_joint_box_room.toml"
TARGETS = {"chamfer_over_native": 1.2, "false_free": 0.005}
CLIP_M = 1.3


def log(message: str) -> None:
    print(message, flush=True)


@dataclass
class Rendered:
    depth: np.ndarray
    rgb: np.ndarray


class RayCaster:
    """The true arm (and optionally a room) ray cast with open3d: another renderer than the rig's."""

    def __init__(self, native: Path, room: bool, clip: float | None):
        import trimesh

        from rigs.link_meshes import link_meshes
        from selfmodel.model.chain import ArmLinks

        session = load_session(native)
        urdf = native / "truth" / "robot.urdf"
        self.spec = ArmLinks.from_urdf(urdf, session.base_link, session.tip_link)
        self.meshes = link_meshes(urdf, self.spec.link_names)
        self.room = trimesh.creation.box((5.0, 5.0, 3.0)).apply_translation((0.0, 0.0, 1.5)) if room else None
        self.clip = clip

    def __call__(self, camera, q: np.ndarray) -> Rendered:
        import open3d as o3d
        import trimesh

        from selfmodel.model.chain import link_poses_numpy

        poses = link_poses_numpy(self.spec, q[None])[0]
        parts = [self.meshes[name].copy().apply_transform(poses[i]) for i, name in enumerate(self.spec.link_names)
                 if name in self.meshes]
        if self.room is not None:
            parts.append(self.room)
        mesh = trimesh.util.concatenate(parts)
        scene = o3d.t.geometry.RaycastingScene()
        scene.add_triangles(o3d.core.Tensor(mesh.vertices.astype(np.float32)),
                            o3d.core.Tensor(mesh.faces.astype(np.uint32)))
        v, u = np.mgrid[0:camera.height, 0:camera.width]
        local = np.stack([u.ravel(), v.ravel(), np.ones(u.size)], axis=1) @ np.linalg.inv(camera.K).T  # z = 1
        directions = local @ camera.base_T_camera[:3, :3].T
        origins = np.broadcast_to(camera.base_T_camera[:3, 3], directions.shape)
        rays = np.hstack([origins, directions]).astype(np.float32)
        t = scene.cast_rays(o3d.core.Tensor(rays))["t_hit"].numpy().reshape(camera.height, camera.width)
        depth = np.where(np.isfinite(t) & (t >= camera.near) & (t <= camera.far), t, 0.0).astype(float)
        if self.clip is not None:
            depth[depth > self.clip] = 0.0
        return Rendered(depth, np.full((camera.height, camera.width, 3), 128, dtype=np.uint8))


def bag_of(workdir: Path, native: Path, name: str, room: bool, clip: float | None) -> Path:
    from capture.simulate_bag import record_bag

    bag = workdir / f"bag-{name}"
    if not bag.exists():
        log(f"writing {bag} ...")
        record_bag(load_rig(RIG), load_session(native).q, 1, bag, renderer=RayCaster(native, room, clip))
    return bag


def imported(workdir: Path, bag: Path, native: Path, name: str, no_depth: str) -> tuple[Path, dict]:
    from capture.importers.assemble import Robot
    from capture.importers.camera_import import CameraOptions, import_rosbag_cameras

    out = workdir / f"imported-{name}"
    cache = workdir / f"imported-{name}.json"
    if out.exists() and cache.is_file():
        return out, json.loads(cache.read_text())
    shutil.rmtree(out, ignore_errors=True)
    session = load_session(native)
    log(f"importing {bag} -> {out} ...")
    summary = import_rosbag_cameras(Robot(session.urdf_path, session.base_link, session.tip_link), bag,
                                    "/joint_states", CameraOptions(no_depth=no_depth), out)
    cache.write_text(json.dumps(summary))
    return out, summary


def trained_figures(workdir: Path, label: str, session_path: Path, heldout: Path, steps: int, seed: int) -> dict:
    from selfmodel.evaluation.metrics import evaluate
    from selfmodel.labels.depth import LabelSettings
    from selfmodel.learn.trainer import SelfModelTrainer

    cache = workdir / f"figures-{label}-{steps}-{seed}.json"
    if cache.is_file():
        return json.loads(cache.read_text())
    log(f"training {label} ({steps} steps) ...")
    # The labels `selfcal selfmodel train` uses: fewer rays per image leave the surface too sparsely
    # labelled for a false-free figure under half a percent even on the native session.
    trainer = SelfModelTrainer(steps=steps, seed=seed, batch=2048, prior_batch=512, threads=1,
                               labels=LabelSettings())
    start = time.perf_counter()
    model = trainer.fit([load_session(session_path)]).model
    seconds = time.perf_counter() - start
    held = load_session(heldout)
    figures = evaluate(model, held, np.random.default_rng(0), voxel=0.005, surface_samples=4000, volume_samples=10_000)
    figures["train_seconds"] = seconds
    cache.write_text(json.dumps(figures))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/no-depth-bench"))
    parser.add_argument("--poses", type=int, default=30)
    parser.add_argument("--heldout", type=int, default=6)
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--seeds", type=lambda text: [int(v) for v in text.split(",")], default=[3],
                        help="training seeds, comma-separated (each trains every session once)")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    command = "nice -n 5 .venv/bin/python scripts/bench_no_depth.py " + " ".join(sys.argv[1:])
    native = args.workdir / "native"
    if not native.exists():
        capture_simulated(load_rig(RIG), args.poses, 1, native)
    heldout = args.workdir / "heldout"
    if not heldout.exists():
        capture_simulated(load_rig(RIG), args.heldout, 2, heldout)
    bags = {"no background": bag_of(args.workdir, native, "empty", False, None),
            "room": bag_of(args.workdir, native, "room", True, None),
            f"clipped at {CLIP_M} m": bag_of(args.workdir, native, "clipped", True, CLIP_M)}
    runs = {"native session": (native, None)}
    for (label, bag), slug in zip(bags.items(), ("empty", "room", "clipped")):
        runs[f"bag, {label}, --no-depth auto"] = imported(args.workdir, bag, native, f"{slug}-auto", "auto")
    runs["bag, no background, --no-depth unknown"] = imported(args.workdir, bags["no background"], native,
                                                              "empty-unknown", "unknown")
    rows, verdicts = [], []
    for seed in args.seeds:
        results = {label: trained_figures(args.workdir, f"r{k}", path, heldout, args.steps, seed)
                   for k, (label, (path, _)) in enumerate(runs.items())}
        native_chamfer = results["native session"]["chamfer_l1_mm"]
        for label, figures in results.items():
            summary = runs[label][1]
            zeros = "-" if summary is None else ", ".join(
                f"{100 * c['no_reading']['no_reading']:.0f} %" for c in summary["cameras"].values())
            ratio = figures["chamfer_l1_mm"] / native_chamfer
            met = "-" if summary is None else ("met" if ratio <= TARGETS["chamfer_over_native"]
                                               and figures["false_free_rate"] < TARGETS["false_free"] else "NOT met")
            if label.endswith("--no-depth auto"):
                verdicts.append(met == "met")
            rows.append([seed, label, zeros, f"{figures['chamfer_l1_mm']:.2f}", f"x{ratio:.2f}",
                         f"{figures['accuracy_mm']:.2f}", f"{figures['completeness_mm']:.2f}",
                         f"{100 * figures['false_free_rate']:.2f}", met])
    lines = [f"two_joint_box_room rig (3 stereo cameras, 160 x 120), {args.poses} poses natively and as ROS 2 bags "
             f"rendered by open3d ray casting of the true meshes (not the rig's pybullet path), the rig's stereo depth "
             f"model on top; self-models of {args.steps} steps (seeds {', '.join(map(str, args.seeds))}, 1 thread) "
             f"evaluated on "
             f"{args.heldout} held-out native poses. Targets: Chamfer-L1 within "
             f"{TARGETS['chamfer_over_native']}x the native session's and false-free under "
             f"{100 * TARGETS['false_free']:.1f} % (both, per bag imported with auto); labels as `selfmodel train` "
             f"makes them (LabelSettings' defaults).", "",
             f"**Targets met on {sum(verdicts)} of {len(verdicts)} trainings on bags imported with auto.**", "",
             table(["seed", "training session", "no reading per camera", "Chamfer-L1 mm", "over native", "accuracy mm",
                    "completeness mm", "false-free %", "targets"], rows)]
    write_section("no-depth", "Depth with no background: what a pixel with no reading means", "\n".join(lines), command)


if __name__ == "__main__":
    main()
