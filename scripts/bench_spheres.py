#!/usr/bin/env python3
"""How tight cuRobo spheres can be, the arm apart from the calibration board it carries.

Fits sphere covers with the project's fitter, before (the whole tip, board included, as one link
under one budget) and after (the arm's links under the arm's budget, the board taken out of the tip
and kept as one layer of spheres in its plane, as `selfmodel export --board keep` writes it), on

- the true meshes of the simulated rigs (evaluation only: reads the sessions' truth/), the floor
  any learned body meets;
- the learned bodies of a cached xArm6 self-model, the export's first stage as it runs (carved,
  settled apart at the recorded poses, grown by the export's margin), with the contact limits at the
  recorded poses; their spheres are checked for self-collision at every recorded pose.

Each cover is measured against the held-out true arm with cuRobo's metric definitions
(selfmodel.evaluation.export_truth.evaluate_export): whole body, the arm alone (the tip's own mesh) and the
board alone. Writes the ``selfmodel-spheres`` section of BENCHMARKS.md.

    nice -n 10 env OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_spheres.py --workdir /tmp/sph4 \
        --model /tmp/be3/model-xarm6-cameras-6000 --heldout /tmp/be3/xarm6-cameras-30-101

``--only peer`` times our fitter against MorphIt (morphit-rs, the ``bench`` extra) on the true meshes
of captured sessions, in one run, and writes the ``selfmodel-spheres-peer`` section:

    .venv/bin/pip install -e '.[bench]'
    nice -n 5 env OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_spheres.py --only peer --poses 5 \
        --peer-sessions /tmp/v/bench/xarm,/tmp/v/bench/panda --peer-budgets 64,128 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import table, write_section  # noqa: E402

TARGETS = {"surface_coverage": 0.995, "protrusion_p95_mm": 10.0, "arm_spheres": 64, "volume_ratio": 1.8}


def cached(path: Path, compute):
    if path.is_file():
        return json.loads(path.read_text())
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=1))
    return value


def body_of_mesh(link: str, mesh, voxel: float = 0.003):
    from rigs.solids import solid_of
    from selfmodel.export.bodies import LinkBody

    solid = solid_of(mesh, voxel)
    cells = solid.inside_cells | solid.surface_cells
    return LinkBody(link, solid.watertight_mesh(), solid.origin + voxel * np.argwhere(cells), voxel, False, 0.0, 0.0,
                    cells, solid.origin)


def true_parts(heldout: Path, poses: int):
    """The held-out truth, and the tip's own mesh and the board's (tip frame), apart."""
    from capture.session import load_session
    from capture.truth_files import truth_parameters
    from rigs.link_meshes import link_meshes
    from selfmodel.evaluation.export_truth import load_truth
    from selfmodel.evaluation.metrics import true_board_mesh

    session = load_session(heldout)
    truth = load_truth(heldout, session.pose_ids[:poses])
    tip = session.tip_link
    board = true_board_mesh(truth_parameters(heldout), session.manifest)
    arm_tip = link_meshes(heldout / "truth" / "robot.urdf", [tip])[tip]
    return truth, tip, arm_tip, board


def sub_truth(truth, meshes: dict, links: list[str]):
    from selfmodel.evaluation.export_truth import TruthAtPoses

    columns = [truth.link_names.index(link) for link in links]
    return TruthAtPoses(truth.pose_ids, links, meshes, truth.base_T_links[:, columns], truth.q_commanded,
                        truth.joint_names)


def measure(urdf: Path, base: str, covers: dict, truth, tip: str, arm_tip, board, groups: dict) -> dict:
    """cuRobo's metrics of ``covers`` (link -> SphereCover) on the whole arm, on the arm without the
    board and on the board alone; ``groups``: tip sphere index -> 'board' or 'arm'."""
    from selfmodel.evaluation.export_truth import PosedExport, evaluate_export
    from selfmodel.export.spheres import SphereCover

    def run(spheres, sub):
        figures = evaluate_export(PosedExport(urdf, base, {}, spheres), sub, np.random.default_rng(5),
                                  volume_samples=50_000, kinds=("spheres",))["spheres"]
        return {key: figures[key] for key in ("count", "surface_coverage", "coverage", "largest_gap_mm",
                                              "surface_gap_p95_mm", "protrusion_mean_mm", "protrusion_p95_mm",
                                              "every_sphere_protrusion_p95_mm", "volume_ratio", "summed_volume_ratio")}

    on_board = np.array([groups.get(k) == "board" for k in range(len(covers[tip].radii))], dtype=bool)
    arm = dict(covers)
    arm[tip] = SphereCover(covers[tip].centres[~on_board], covers[tip].radii[~on_board])
    result = {"whole": run(covers, truth)}
    if board is not None:
        meshes = dict(truth.meshes)
        meshes[tip] = arm_tip
        result["arm"] = run(arm, sub_truth(truth, meshes, truth.link_names))
        result["board"] = run({tip: SphereCover(covers[tip].centres[on_board], covers[tip].radii[on_board])},
                              sub_truth(truth, {tip: board}, [tip]))
    result["per_link"] = {link: len(cover.radii) for link, cover in covers.items()}
    return result


def nearest_groups(cover, arm_tip, board) -> dict:
    """Which part of the tip each sphere of one undivided cover serves (its centre's nearer surface)."""
    from scipy.spatial import cKDTree

    if board is None:
        return {}
    arm_points = np.asarray(arm_tip.sample(20000, seed=1))
    board_points = np.asarray(board.sample(20000, seed=1))
    d_arm, _ = cKDTree(arm_points).query(cover.centres)
    d_board, _ = cKDTree(board_points).query(cover.centres)
    return {k: ("board" if d_board[k] < d_arm[k] else "arm") for k in range(len(cover.radii))}


def fit_before(bodies: dict, margin: float, budget: int, iterations: int | None, seed: int = 0) -> dict:
    """Main's fit before the groups: one budget for every link, the board part of the tip (250
    iterations, its own, unless ``iterations`` says)."""
    from selfmodel.export.sphere_fit import refine_covers
    from selfmodel.export.sphere_groups import sphere_target
    from selfmodel.export.spheres import fit_sphere_covers

    rng = np.random.default_rng(seed)
    targets = [sphere_target(link, body, margin, rng) for link, body in bodies.items()]
    covers, _ = refine_covers(targets, fit_sphere_covers(targets, budget, rng=rng), [],
                              iterations=250 if iterations is None else iterations, rng=np.random.default_rng(seed))
    return covers


def fit_after(bodies: dict, tip: str, board, margin: float, budget: int, board_budget: int, iterations: int,
              seed: int = 0) -> tuple[dict, dict]:
    """The export's fit now: the arm's links (the tip without the board) under one budget, and a
    declared board (trimesh, tip frame) kept as one layer of at most ``board_budget`` spheres after the
    tip's own (selfmodel.export.board.sphere_layer). Returns link -> cover and tip sphere index ->
    'arm' or 'board'."""
    from selfmodel.export.board import PlateBox, sphere_layer
    from selfmodel.export.sphere_groups import fit_groups, sphere_target
    from selfmodel.export.spheres import SphereCover

    rng = np.random.default_rng(seed)
    targets = [sphere_target(link, body, margin, rng) for link, body in bodies.items()]
    covers, _ = fit_groups(targets, budget, iterations=iterations, seed=seed)
    groups = {k: "arm" for k in range(len(covers[tip].radii))}
    if board is not None:
        layer = sphere_layer(PlateBox.of(board), margin, board_budget)
        groups.update({len(groups) + k: "board" for k in range(len(layer.radii))})
        covers[tip] = SphereCover(np.vstack([covers[tip].centres, layer.centres]),
                                  np.concatenate([covers[tip].radii, layer.radii]))
    return covers, groups


def truth_rows(heldout: Path, poses: int, budget: int, board_budgets: list[int], iterations: int) -> dict:
    """Before and after on the true meshes (evaluation only)."""
    truth, tip, arm_tip, board = true_parts(heldout, poses)
    urdf = heldout / "truth" / "robot.urdf"
    base = truth.link_names[0]
    whole = {link: body_of_mesh(link, truth.meshes[link]) for link in truth.link_names}
    rows = {}
    start = time.perf_counter()
    covers = fit_before(whole, 0.0, budget, iterations)
    rows["before"] = measure(urdf, base, covers, truth, tip, arm_tip, board, nearest_groups(covers[tip], arm_tip, board))
    rows["before"]["seconds"] = time.perf_counter() - start
    arm_bodies = dict(whole)
    arm_bodies[tip] = body_of_mesh(tip, arm_tip)
    for board_budget in board_budgets:
        start = time.perf_counter()
        covers, groups = fit_after(arm_bodies, tip, board, 0.0, budget, board_budget, iterations)
        row = measure(urdf, base, covers, truth, tip, arm_tip, board, groups)
        row["seconds"] = time.perf_counter() - start
        rows[f"after, board {board_budget}"] = row
    return rows


def curve_rows(heldout: Path, poses: int, budgets: list[int], board_budget: int, iterations: int) -> dict:
    """The arm's figures on the true meshes (evaluation only) as its budget grows, the board kept as
    a layer of at most ``board_budget``: how many spheres the protrusion bar takes with no model error
    and no margin."""
    truth, tip, arm_tip, board = true_parts(heldout, poses)
    urdf = heldout / "truth" / "robot.urdf"
    arm_bodies = {link: body_of_mesh(link, truth.meshes[link]) for link in truth.link_names}
    arm_bodies[tip] = body_of_mesh(tip, arm_tip)
    rows = {}
    for budget in budgets:
        start = time.perf_counter()
        covers, groups = fit_after(arm_bodies, tip, board, 0.0, budget, board_budget, iterations)
        row = measure(urdf, truth.link_names[0], covers, truth, tip, arm_tip, board, groups)
        row["seconds"] = time.perf_counter() - start
        rows[str(budget)] = row
    return rows


PEER_INSTALL = ("the MorphIt peer needs morphit-rs, a benchmark-only extra: pip install -e '.[bench]' "
                "(morphit-rs==0.2.0)")


def peer_rows(heldout: Path, poses: int, budgets: list[int], iterations: int, preset: str = "MorphIt-B",
              seed: int = 0, repeats: int = 3) -> dict:
    """Our fitter and MorphIt (morphit-rs) on the same true meshes (evaluation only), the tip without
    its board, timed in this run on one thread each, measured with the project's metric.

    The peer gets each link's mesh and our fit's sphere count for that link, its ``preset`` with
    ``seed``, then the project's own last step (:func:`selfmodel.export.sphere_fit.hold_surface`):
    each point of the link's target surface still outside grows its nearest sphere to hold it, so
    both covers hold the same surface samples and tightness compares at equal coverage. Ours is timed
    from building the targets (surface samples and distance fields) to the covers; MorphIt from its
    packing to the grown covers (the targets it grows against are built outside its time). The voxel
    bodies our fit reads from a mesh are built outside both times. Each fitter runs ``repeats`` times
    (the same fit each time) and its median time is kept: one run's time varies by 10-20 % on a
    shared machine, as much as the difference being measured."""
    import morphit_rs

    from selfmodel.export.sphere_fit import hold_surface
    from selfmodel.export.sphere_groups import fit_groups, sphere_target
    from selfmodel.export.spheres import SphereCover

    truth, tip, arm_tip, board = true_parts(heldout, poses)
    urdf = heldout / "truth" / "robot.urdf"
    meshes = dict(truth.meshes)
    if board is not None:
        meshes[tip] = arm_tip
    arm_truth = sub_truth(truth, meshes, truth.link_names)
    bodies = {link: body_of_mesh(link, meshes[link]) for link in truth.link_names}
    # Each fitter runs once on the first link before any clock starts: the first call in a process
    # pays one-time set-up (torch's kernels, MorphIt's), about a second, which is not the fit.
    first = truth.link_names[0]
    fit_groups([sphere_target(first, bodies[first], 0.0, np.random.default_rng(seed))], 4, seed=seed)
    morphit_rs.pack(morphit_rs.Mesh.from_arrays(np.asarray(meshes[first].vertices, dtype=float),
                                                np.asarray(meshes[first].faces)),
                    morphit_rs.Config.preset(preset, num_spheres=4, seed=seed, device="cpu"))
    rows = {}
    for budget in budgets:
        ours_times, peer_times = [], []
        for _ in range(repeats):  # the same fit each time (same seed); the median time is reported
            start = time.perf_counter()
            rng = np.random.default_rng(seed)
            targets = [sphere_target(link, body, 0.0, rng) for link, body in bodies.items()]
            ours, _ = fit_groups(targets, budget, iterations=iterations, seed=seed)
            ours_times.append(time.perf_counter() - start)
        for _ in range(repeats):
            packed_covers, peer, peer_seconds = {}, {}, 0.0
            for target in targets:
                mesh = meshes[target.link]
                config = morphit_rs.Config.preset(preset, num_spheres=len(ours[target.link].radii), seed=seed, device="cpu")
                start = time.perf_counter()
                packed = morphit_rs.pack(morphit_rs.Mesh.from_arrays(np.asarray(mesh.vertices, dtype=float),
                                                                     np.asarray(mesh.faces)), config)
                packed_covers[target.link] = SphereCover(np.asarray(packed.centers), np.asarray(packed.radii))
                peer[target.link], _ = hold_surface(packed_covers[target.link], target)
                peer_seconds += time.perf_counter() - start
            peer_times.append(peer_seconds)
        ours_seconds, peer_seconds = float(np.median(ours_times)), float(np.median(peer_times))
        rows[str(budget)] = {
            "ours": {**measure(urdf, truth.link_names[0], ours, arm_truth, tip, arm_tip, None, {}), "seconds": ours_seconds},
            "morphit": {**measure(urdf, truth.link_names[0], peer, arm_truth, tip, arm_tip, None, {}),
                        "seconds": peer_seconds, "preset": preset, "version": morphit_rs.version()},
            "morphit_packed": {**measure(urdf, truth.link_names[0], packed_covers, arm_truth, tip, arm_tip, None, {}),
                               "preset": preset}}
        print(budget, json.dumps({name: {"seconds": row.get("seconds"), **row["whole"]} for name, row in rows[str(budget)].items()}),
              flush=True)
    return rows


def write_peer(results: dict, args) -> None:
    """The ``selfmodel-spheres-peer`` section: both fitters a row, the ratios, and the verdict."""
    header = ["rig", "arm budget", "fitter", "spheres", "seconds", "surface coverage %", "every-sphere protrusion p95 mm",
              "protrusion p95 mm", "protrusion mean mm", "union volume ratio"]
    rows, notes, verdicts = [], [], []
    version = preset = "?"
    for rig, by_budget in results.items():
        for budget, pair in by_budget.items():
            for name, row in pair.items():
                whole = row["whole"]
                fitter = {"ours": "ours", "morphit": f"MorphIt ({row.get('preset')}, grown)",
                          "morphit_packed": f"MorphIt ({row.get('preset')}) as it packs, not grown"}[name]
                rows.append([rig, budget, fitter, whole["count"],
                             f"{row['seconds']:.1f}" if "seconds" in row else "-", f"{100 * whole['surface_coverage']:.2f}",
                             f"{whole['every_sphere_protrusion_p95_mm']:.1f}", f"{whole['protrusion_p95_mm']:.1f}",
                             f"{whole['protrusion_mean_mm']:.1f}", f"{whole['volume_ratio']:.3f}"])
            ours, peer = pair["ours"], pair["morphit"]
            version, preset = peer["version"], peer["preset"]
            time_ratio = ours["seconds"] / peer["seconds"]
            p95_ratio = ours["whole"]["every_sphere_protrusion_p95_mm"] / peer["whole"]["every_sphere_protrusion_p95_mm"]
            volume_ratio = ours["whole"]["volume_ratio"] / peer["whole"]["volume_ratio"]
            notes.append(f"- {rig}, {budget} spheres, ours over MorphIt: time x{time_ratio:.2f}, every-sphere p95 "
                         f"protrusion x{p95_ratio:.3f}, union volume x{volume_ratio:.3f}; surface coverage "
                         f"{100 * ours['whole']['surface_coverage']:.2f} % against {100 * peer['whole']['surface_coverage']:.2f} %.")
            tighter = (p95_ratio <= 1.0 and volume_ratio <= 1.0
                       and ours["whole"]["surface_coverage"] >= min(peer["whole"]["surface_coverage"], 0.995))
            verdicts.append((rig, budget, time_ratio <= 1.0, tighter, time_ratio))
    met = all(fast and tight for _, _, fast, tight, _ in verdicts)
    verdict = ("- At least as fast as MorphIt at equal or better tightness: " + ("met" if met else "NOT met") + " ("
               + "; ".join(f"{rig} {budget}: {'as fast' if fast else 'slower'} (time x{ratio:.2f}), "
                           f"{'as tight or tighter' if tight else 'looser'}" for rig, budget, fast, tight, ratio in verdicts)
               + ").")
    steps = "its default 100" if args.iterations is None else args.iterations
    body = ("Our fitter (selfmodel/export/sphere_groups.py `fit_groups`, the export's sphere fit: five greedy "
            f"starts ranked, the best refined for {steps} iterations, as with nothing to keep clear of) and MorphIt (morphit-rs {version}, preset {preset}, seed 0, CPU) on "
            "the true meshes of each rig's arm (the tip without its calibration board; evaluation only), in one run, "
            "both on one thread, measured with the project's metric "
            "(selfmodel.evaluation.export_truth.evaluate_export, first "
            f"{args.poses} held-out poses). MorphIt gets each link's mesh and the number of spheres our fit gave that "
            "link, then the project's own last step (`hold_surface`): every target surface point still outside grows "
            "its nearest sphere to hold it, so both hold the same surface samples (MorphIt as it packs leaves much of "
            "the surface out, its row below; a planner's spheres must hold the body). Seconds: ours from the targets (surface samples and distance "
            "fields) to the covers, MorphIt from packing to the grown covers (the targets it is grown against are "
            f"built outside its time); each the median of {args.repeats} runs of the same fit, after one untimed run of "
            "each fitter on one link (a process's first call pays one-time set-up, about a second); the machine "
            "was shared, so compare the ratios of one run, not seconds across runs. "
            "Every-sphere protrusion: how far every sphere's surface stands outside the true body, 95th percentile; "
            "union volume ratio: the union over the true volume.\n\n"
            + table(header, rows) + "\n\n" + "\n".join(notes + [verdict]))
    if not args.no_write:
        write_section("selfmodel-spheres-peer", "Spheres for cuRobo: our fitter against MorphIt", body,
                      "scripts/bench_spheres.py " + " ".join(sys.argv[1:]))
    else:
        print(body)


def consumer_check(out: Path) -> dict:
    """The written cuRobo files read back with a YAML library: every link they name is a link of
    the exported URDF, every file they name exists, and the robot file lists the sphere file's spheres."""
    import xml.etree.ElementTree as ET

    import yaml

    spheres = yaml.safe_load((out / "curobo_spheres.yml").read_text())["collision_spheres"]
    kinematics = yaml.safe_load((out / "curobo_robot.yml").read_text())["robot_cfg"]["kinematics"]
    links = {link.get("name") for link in ET.parse(out / "robot.urdf").getroot().iter("link")}
    named = set(spheres) | set(kinematics["collision_link_names"]) | set(kinematics["collision_spheres"]) | {
        kinematics["base_link"], kinematics["ee_link"]} | set(kinematics["self_collision_ignore"])
    for others in kinematics["self_collision_ignore"].values():
        named |= set(others)
    return {"links_not_in_urdf": sorted(named - links),
            "files_missing": [path for path in (kinematics["urdf_path"], kinematics["asset_root_path"]) if not Path(path).exists()],
            "spheres_in_sphere_file": sum(len(items) for items in spheres.values()),
            "spheres_in_robot_file": sum(len(items) for items in kinematics["collision_spheres"].values()),
            "same_spheres": spheres == kinematics["collision_spheres"]}


def learned_rows(workdir: Path, model_path: Path, heldout: Path, poses: int, budget: int, board_budget: int) -> dict:
    """The export of a cached self-model as `selfmodel export` makes it, the board kept (its box and
    one flat layer of at most ``board_budget`` spheres) and dropped, measured against the held-out
    truth; the export refuses a model whose spheres collide at a recorded pose, and its report
    counts them. (The board as part of the tip's spheres, and as its own fitted group, are rows of
    earlier commits: the section keeps them as measured.)"""
    import yaml

    from capture.session import load_session
    from selfmodel.export.exporter import CollisionExporter, export_model
    from selfmodel.export.settings import BodySettings, SphereSettings
    from selfmodel.export.spheres import SphereCover

    truth, tip, arm_tip, board = true_parts(heldout, poses)
    base = load_session(heldout).base_link
    rows = {}
    for name, treatment in ((f"keep, board {board_budget}", "keep"), ("drop", "drop")):
        out = workdir / f"export-board-{treatment}-{board_budget}"
        start = time.perf_counter()
        exporter = CollisionExporter(body=BodySettings(board=treatment),
                                     spheres=SphereSettings(max_spheres=budget, board_spheres=board_budget), seed=0)
        report = export_model(model_path, out, exporter, force=True)
        seconds = time.perf_counter() - start
        covers = {link: SphereCover(np.array([s["center"] for s in items]), np.array([s["radius"] for s in items]))
                  for link, items in yaml.safe_load((out / "curobo_spheres.yml").read_text())["collision_spheres"].items()}
        on_board = report["links"][tip]["spheres_board"]
        count = len(covers[tip].radii)
        groups = {k: ("board" if k >= count - on_board else "arm") for k in range(count)}
        row = measure(out / "robot.urdf", base, covers, truth, tip, arm_tip, board if on_board else None, groups)
        row.update(seconds=seconds, spheres_arm=report["spheres_arm"], spheres_board=report["spheres_board"],
                   spheres_total=report["spheres_total"], margin_mm=report["margin_mm"],
                   recorded_in_collision=report["recorded_poses_in_collision"],
                   uncovered_near_contact=report["separation"].get("spheres_uncovered_near_contact"),
                   consumer=consumer_check(out))
        rows[name] = row
    return rows


def format_rows(rig: str, name: str, rows: dict) -> list[list]:
    out = []
    for variant, row in rows.items():
        if "board" not in row and variant.startswith("after"):
            variant = "after (no board declared: the same fit)"
        for part in ("whole", "arm", "board"):
            if part not in row:
                continue
            m = row[part]
            out.append([rig, name, variant, part, m["count"], f"{100 * m['surface_coverage']:.2f}",
                        f"{100 * m['coverage']:.2f}", f"{m['largest_gap_mm']:.1f}", f"{m['protrusion_mean_mm']:.1f}",
                        f"{m['protrusion_p95_mm']:.1f}", f"{m['volume_ratio']:.2f}", f"{m['summed_volume_ratio']:.2f}"])
    return out


def main() -> None:
    from selfmodel.export.settings import SphereSettings

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/sph4"))
    parser.add_argument("--heldout", type=Path, default=Path("/tmp/be3/xarm6-cameras-30-101"))
    parser.add_argument("--model", type=Path, default=None, help="a cached structured self-model (its export's bodies)")
    parser.add_argument("--poses", type=int, default=10, help="held-out poses the metrics are taken at")
    parser.add_argument("--budget", type=int, default=64, help="spheres for the arm")
    parser.add_argument("--board-budgets", type=str, default="64", help="comma list of board sphere budgets")
    parser.add_argument("--iterations", type=int, default=SphereSettings().iterations,
                        help="steps of the joint sphere fit (default: fit_groups' own)")
    parser.add_argument("--only", choices=["truth", "learned", "all", "peer"], default="all",
                        help="peer: our fitter against MorphIt on the true meshes of --peer-sessions, in one run")
    parser.add_argument("--peer-sessions", type=str, default="",
                        help="comma list of captured sessions with truth/ for the peer (default: --heldout)")
    parser.add_argument("--peer-budgets", type=str, default="64,128", help="comma list of arm budgets for the peer")
    parser.add_argument("--peer-preset", type=str, default="MorphIt-B", help="MorphIt's preset for the peer")
    parser.add_argument("--repeats", type=int, default=3, help="peer: runs of each fitter, the median time kept")
    parser.add_argument("--panda-poses", type=int, default=0, help="also fit the Panda's true meshes (a session captured "
                        "with this many poses)")
    parser.add_argument("--arm-budgets", type=str, default="",
                        help="comma list of arm budgets for the curve on the true meshes (the board at the last "
                             "--board-budgets)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    if args.only == "peer":
        import importlib.util

        if importlib.util.find_spec("morphit_rs") is None:  # said before any fit, not after the first
            print(PEER_INSTALL, file=sys.stderr)
            sys.exit(2)
        sessions = [Path(path) for path in args.peer_sessions.split(",") if path] or [args.heldout]
        budgets = [int(budget) for budget in args.peer_budgets.split(",")]
        results = {}
        import morphit_rs

        from capture.session import load_session

        morphit_rs.set_num_threads(1)  # as our fit runs (torch on one thread); its pool starts once a process
        for session in sessions:
            rig = load_session(session).manifest.get("source", {}).get("rig", session.name)
            results[rig] = peer_rows(session, args.poses, budgets, args.iterations, args.peer_preset,
                                     repeats=args.repeats)
        write_peer(results, args)
        return
    board_budgets = [int(b) for b in args.board_budgets.split(",")]
    args.workdir.mkdir(parents=True, exist_ok=True)
    key = f"{args.budget}-{args.board_budgets.replace(',', '_')}-{args.iterations}-{args.poses}"
    results = {}
    if args.only in ("truth", "all"):
        results["truth"] = cached(args.workdir / f"truth-{key}.json",
                                  lambda: truth_rows(args.heldout, args.poses, args.budget, board_budgets, args.iterations))
        print(json.dumps(results["truth"], indent=1))
    if args.only in ("learned", "all") and args.model is not None:
        results["learned"] = cached(args.workdir / f"learned-{args.budget}-{board_budgets[-1]}-{args.poses}.json",
                                    lambda: learned_rows(args.workdir, args.model, args.heldout, args.poses, args.budget,
                                                         board_budgets[-1]))
        print(json.dumps(results["learned"], indent=1))
    if args.arm_budgets:
        budgets = [int(b) for b in args.arm_budgets.split(",")]
        results["curve"] = {}
        for budget in budgets:  # one file a budget: a longer curve reuses the shorter one's fits
            results["curve"].update(cached(
                args.workdir / f"curve-{budget}-{board_budgets[-1]}-{args.iterations}-{args.poses}.json",
                lambda budget=budget: curve_rows(args.heldout, args.poses, [budget], board_budgets[-1],
                                                  args.iterations)))
        print(json.dumps(results["curve"], indent=1))
    if args.panda_poses:
        from capture.simulate import capture_simulated
        from rigs import load_rig

        session = args.workdir / f"panda-cameras-{args.panda_poses}-101"
        if not session.exists():
            capture_simulated(load_rig("panda-cameras"), args.panda_poses, 101, session)
        results["panda"] = cached(args.workdir / f"panda-{key}.json",
                                  lambda: truth_rows(session, args.poses, args.budget, board_budgets[-1:], args.iterations))
        print(json.dumps(results["panda"], indent=1))
    write(results, args)


def write(results: dict, args) -> None:
    header = ["rig", "bodies", "fit", "part", "spheres", "surface coverage %", "coverage %", "largest gap mm",
              "protrusion mean mm", "protrusion p95 mm", "union volume ratio", "summed volume ratio"]
    rows = format_rows("xarm6-cameras", "true meshes (floor)", results.get("truth", {}))
    rows += format_rows("xarm6-cameras", "learned export", results.get("learned", {}))
    rows += format_rows("panda-cameras", "true meshes (floor)", results.get("panda", {}))
    notes = []
    for source, name in (("truth", "true meshes"), ("learned", "learned export")):
        found = results.get(source)
        if not found or "before" not in found:  # the learned export's keep and drop have no "before" to divide by
            continue
        before = found["before"]
        for variant, row in found.items():
            if variant == "before":
                continue
            ratios = {part: (row[part]["protrusion_p95_mm"] / before[part]["protrusion_p95_mm"],
                             row[part]["volume_ratio"] / before[part]["volume_ratio"]) for part in ("whole", "arm")
                      if part in row}
            notes.append(f"- {name}, {variant} over before: " + "; ".join(
                f"{part} p95 protrusion x{p:.2f}, union volume ratio x{v:.2f}" for part, (p, v) in ratios.items())
                + f"; arm {row['arm']['count']} spheres (before {before['arm']['count']} of the arm's budget went "
                f"to the arm, {before['board']['count']} to the board).")
            arm = row["arm"]
            verdict = {"surface coverage >= 99.5 %": arm["surface_coverage"] >= TARGETS["surface_coverage"],
                       "p95 protrusion <= 10 mm": arm["protrusion_p95_mm"] <= TARGETS["protrusion_p95_mm"],
                       "<= 64 spheres for the arm": arm["count"] <= TARGETS["arm_spheres"],
                       "union volume ratio <= 1.8": arm["volume_ratio"] <= TARGETS["volume_ratio"]}
            notes.append(f"  bars on the arm ({name}, {variant}): " + ", ".join(
                f"{bar} {'met' if ok else 'NOT met'}" for bar, ok in verdict.items()) + ".")
    learned = results.get("learned") or {}
    for variant, row in learned.items():
        recorded = row["recorded_in_collision"]
        consumer = row["consumer"]
        notes.append(f"- learned export, {variant}: {row['spheres_total']} spheres in the cuRobo files "
                     f"({row['spheres_arm']} arm, {row['spheres_board']} board), margin {row['margin_mm']:.1f} mm; "
                     f"recorded poses whose spheres collide {recorded['spheres']['poses']} of {recorded['configurations']} "
                     f"(pieces {recorded['pieces']['poses']}); curobo_spheres.yml and curobo_robot.yml read by PyYAML: "
                     f"links not in the URDF {consumer['links_not_in_urdf'] or 'none'}, files missing "
                     f"{consumer['files_missing'] or 'none'}, {consumer['spheres_in_sphere_file']} spheres in the sphere "
                     f"file and {consumer['spheres_in_robot_file']} in the robot file (same: {consumer['same_spheres']}); "
                     f"surface the spheres leave next to a touching neighbour {row['uncovered_near_contact'] or {}}; "
                     f"{row['seconds']:.0f} s for the whole export.")
    if "before" in learned and len(learned) > 1:
        before, after = learned["before"], learned[list(learned)[-1]]
        worse = {link: (share, (after["uncovered_near_contact"] or {}).get(link, 0.0))
                 for link, share in (before["uncovered_near_contact"] or {}).items()
                 if (after["uncovered_near_contact"] or {}).get(link, 0.0) > share}
        counts = ", ".join(f"{before['per_link'][link]} -> {after['per_link'][link]}" for link in worse)
        notes.append(f"- Learned export, whole-body surface coverage {100 * before['whole']['surface_coverage']:.2f} % "
                     f"before, {100 * after['whole']['surface_coverage']:.2f} % after (bar 99.5): the share of a link's "
                     "held surface its spheres cannot reach next to a neighbour it nearly touches at a recorded pose "
                     "rose (" + ", ".join(f"{link} {100 * a:.1f} % -> {100 * b:.1f} %" for link, (a, b) in worse.items())
                     + "; those links' spheres " + counts + "): "
                     "more, smaller spheres on the arm's links, and the board's own kept apart from them at all 300 "
                     "recorded poses, leave less room to grow into there; which of the two weighs more was not separated"
+ ". `--board-spheres 0` gives the fit as before.")
    notes.append("- The learned export's arm protrusion is the learned body's own excess over the true arm, not the "
                 "fit's: the same fit on the true meshes gives the arm a p95 of about 19 mm, the learned bodies stand "
                 "out of the true surface by 11.3 mm at the 95th percentile as pieces (link5 by up to 70 mm where no "
                 "camera saw through: section selfmodel-export-carving), and the spheres hold that body plus the "
                 "margin. The 10 mm bar is not met by this fitter on the true meshes either: the xArm6's links are "
                 "near-cylinders about 50 mm in radius with flat ends, and a sphere holding a flat end's rim stands "
                 "out over its middle.")
    curve = results.get("curve") or {}
    if curve:
        notes.append("\nThe arm's budget on the true meshes (the after fit, the board its own group of "
                     f"{args.board_budgets.split(',')[-1]}; no model error, no margin): how many spheres the bars take.\n\n"
                     + table(["arm budget", "arm spheres", "surface coverage %", "protrusion mean mm",
                              "protrusion p95 mm", "union volume ratio", "bars met"],
                             [[budget, row["arm"]["count"], f"{100 * row['arm']['surface_coverage']:.2f}",
                               f"{row['arm']['protrusion_mean_mm']:.1f}", f"{row['arm']['protrusion_p95_mm']:.1f}",
                               f"{row['arm']['volume_ratio']:.2f}",
                               ", ".join(bar for bar, ok in (
                                   ("coverage", row["arm"]["surface_coverage"] >= TARGETS["surface_coverage"]),
                                   ("p95", row["arm"]["protrusion_p95_mm"] <= TARGETS["protrusion_p95_mm"]),
                                   ("count", row["arm"]["count"] <= TARGETS["arm_spheres"]),
                                   ("volume", row["arm"]["volume_ratio"] <= TARGETS["volume_ratio"])) if ok) or "none"]
                              for budget, row in sorted(curve.items(), key=lambda item: int(item[0]))]))
    body = ("Sphere covers for cuRobo with cuRobo's metric definitions, measured against the held-out true arm "
            f"(xarm6-cameras-30-101, first {args.poses} poses; evaluation only, the fit never reads truth/). Before: the "
            "fit as it was, one budget over every link with the 3.5 mm calibration board part of the tip. After: the "
            "board its own sphere group in the tip's frame with its own budget (selfmodel/export/sphere_groups.py), listed "
            "under the tip in the cuRobo files beside the tip's own spheres. Parts: whole (arm and board against the "
            "whole true arm), arm (the links without the board, the tip's own mesh), board (the board's spheres "
            "against the plate alone; a before sphere counts as the board's when its centre is nearer the plate). "
            "Coverage: true surface samples (faces hidden in another link left out) inside some sphere; protrusion: "
            "the union's outer surface, area-weighted, how far outside the true body. The true-mesh rows are the "
            "floor a sphere budget meets with no model error and no margin; the learned rows are the whole export "
            "(`selfcal selfmodel export` defaults, the cached 6000-step model of bench_export.py). The machine was "
            "shared with other jobs: seconds are not comparable. Every fit is kept in the workdir (a file a fit, "
            "named by its budgets, iterations and poses) and read back when present, so a row can come from an "
            "earlier commit's run than the one this header names.\n\n"
            + table(header, rows) + "\n\n" + "\n".join(notes))
    if not args.no_write:
        write_section("selfmodel-spheres", "Spheres for cuRobo: the arm and its calibration board", body,
                      "scripts/bench_spheres.py " + " ".join(sys.argv[1:]))
    else:
        print(body)


if __name__ == "__main__":
    main()
