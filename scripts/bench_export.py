"""Collision models a planner can use: the self-model's export judged by a real planner and the true arm.

For each rig (the xArm6 with four depth cameras, its crashed twin with link 3 bent by 3 degrees, and
the Franka Panda with its hand and closed fingers), a structured self-model is trained on 300
simulated poses for a fixed number of steps, exported with ``selfcal selfmodel export``, and measured
(truth/ is read here only, never by the fit). A rig that carries the calibration board is first
calibrated from its board images (``selfcal calibrate``) and its self-model trained on that URDF and
those cameras, the joint placements held, as a user with the board on the flange does
(``--kinematics description`` trains every rig on its session's description instead):

- recorded poses in self-collision: the exported URDF + SRDF loaded as a planner loads them
  (Pinocchio/coal; and mplib 0.2.1 when ``--mplib-python`` names a Python that has it), the spheres
  as cuRobo checks them, and the original URDF's collision meshes with an SRDF made by the same rules;
- the export against the true meshes at held-out poses, with cuRobo's metric definitions
  (surface coverage, protrusion share, mean and p95, surface gap, volume ratio), beside the URDF's
  collision meshes;
- missed collisions: random configurations among box obstacles; every one where the true arm
  touches an obstacle or itself (links joined by two or more moving joints) must be flagged by the
  export; false alarms beside those of the URDF's collision meshes, with the link pairs behind
  most of them and how far apart the true meshes of each are there;
- planning: OMPL RRT-Connect between random configurations that are free for the true arm, around
  box obstacles near the arm, on the export, on the true meshes (the ideal) and on the URDF's
  collision meshes; every planned path replayed on the true arm at 0.25 degree steps.

Beside every figure of the export stands the same figure of the export's own piece pipeline run on
the true link meshes (``true_pieces``: nothing learned, the same pieces, the same margin floor): what
pieces of this kind allow, so a bar below it asks for another kind of piece, not better learning.

    nice -n 10 .venv/bin/python scripts/bench_export.py [--steps 6000] [--configurations 100000] [--kinematics calibrated]
        [--queries 100] [--plan-checks 3000] [--workdir /tmp/bench-export] [--mplib-python /tmp/mplib/bin/python]

With ``--views N`` the run measures the capture loop beside that export (section
selfmodel-views-export): per rig, a model of 300 - N random poses, N poses added for it (planned by
``selfcal plan --views`` to show what it has not seen, and with ``--added planned,random`` also N
random ones, the control), relearned on all of them with ``selfmodel train --previous``; the first
training and the relearning together take ``--steps``. The all-random export is measured as above
and shared with a run without ``--views`` on the same workdir.

    nice -n 5 .venv/bin/python scripts/bench_export.py --steps 6000 --views 60 --views-steps 1000 --added planned,random

Stages are cached as files under --workdir (sessions, models, exports, JSON rows), so a rerun
measures only what is missing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import cached_row, file_digests, table, write_section  # noqa: E402

RIGS = ("xarm6-cameras", "xarm6-cameras-crashed", "panda-cameras")
TRAIN_SEED, HELDOUT_SEED = 1, 101
TRAIN_POSES, HELDOUT_POSES, TRUTH_POSES = 300, 30, 20
SCENES, BOXES = 10, 3
WORLDS = ("export", "true meshes", "URDF collision meshes", "true meshes as pieces")
SLUG = {"export": "export", "true meshes": "true", "URDF collision meshes": "urdf", "true meshes as pieces": "truepieces"}


def slug(name: str, tag: str = "") -> str:
    """A world's name in its cached rows' file names; ``tag`` tells one export of a rig from another
    (the true meshes' and the URDF's rows are shared by every export of the rig)."""
    return SLUG[name] + (tag if name == "export" else "")


VIEWS_SEED = 1000  # the added capture's pose sequence and noise (the training sessions' are seeds 1 and 101)
TARGETS = {"surface_coverage": 0.995, "sphere_p95_mm": 10.0, "spheres": 64, "sphere_volume": 1.8, "planning_points": 5.0}


def cached(path: Path, compute, inputs: dict | None = None, quiet: bool = False):
    """The JSON at ``path``, computed and written the first time, and again when ``inputs`` (what the
    row measured: content hashes of its files) differ from those it was measured on."""
    return cached_row(path, compute, inputs, quiet)


def export_inputs(export: Path, kind: str) -> dict:
    """What a row reads of an export, as content hashes: ``pieces``, the URDF with its collision
    meshes and the SRDF as a planner loads them; ``spheres``, the URDF that poses the links and
    curobo_spheres.yml. Both with the held joints the export report states."""
    from rigs import urdf as urdf_io

    report = json.loads((export / "export_report.json").read_text())
    held = {"export/held_joints": json.dumps(report.get("held_joints") or {}, sort_keys=True)}
    if kind == "spheres":
        return {**file_digests(export, ["robot.urdf", "curobo_spheres.yml"], "export"), **held}
    tree = urdf_io.parse_urdf(export / "robot.urdf")
    meshes = [collision.find("geometry/mesh").get("filename") for link in tree.getroot().findall("link")
              for collision in link.findall("collision") if collision.find("geometry/mesh") is not None]
    return {**file_digests(export, ["robot.urdf", "robot.srdf", *meshes], "export"), **held}


def session_inputs(session: Path, kind: str, label: str = "session") -> dict:
    """What a row reads of a session, as content hashes: ``description``, its URDF and meshes and
    recorded joint angles (the joint limits, the reach the obstacles are placed by); ``truth``, those
    and its truth/ folder (the true meshes, the board's true mount). The manifest's robot and board
    entries count as stated values; the rest of it (the tool's version, the scene) does not."""
    manifest = json.loads((session / "session.json").read_text())
    names = ["robot.urdf", "joints.csv"] + [str(path.relative_to(session)) for path in sorted((session / "meshes").rglob("*"))
                                             if path.is_file()]
    stated = {f"{label}/manifest.robot": json.dumps(manifest.get("robot"), sort_keys=True),
              f"{label}/manifest.board": json.dumps((manifest.get("sensors") or {}).get("board"), sort_keys=True)}
    if kind == "truth":
        # Of the true parameters, the true arm's solids read only the board's true mount.
        names += [str(path.relative_to(session)) for path in sorted((session / "truth").rglob("*"))
                  if path.is_file() and path.name != "parameters.json"]
        parameters = json.loads((session / "truth" / "parameters.json").read_text())
        stated[f"{label}/truth/parameters.tip_T_board"] = json.dumps(parameters.get("tip_T_board"))
    return {**file_digests(session, names, label), **stated}


def captured(workdir: Path, rig: str, poses: int, seed: int) -> Path:
    from capture.simulate import capture_simulated
    from rigs import load_rig

    out = workdir / f"{rig}-{poses}-{seed}"
    if not out.exists():
        print(f"capturing {out.name} ...", flush=True)
        capture_simulated(load_rig(rig), poses, seed, out)
    return out


def calibrated(workdir: Path, rig: str, session: Path, name: str | None = None) -> Path | None:
    """The training session's calibration from its board images (cameras and kinematics), as a user
    with the board on the flange runs it before training; None for a session that declares no board.
    Rigid (``--deflection none``): the self-model reads robot.urdf, which is rigid either way."""
    from capture.session import load_session

    if not (load_session(session).manifest.get("sensors") or {}).get("board"):
        return None
    out = workdir / (name or f"cal-{rig}")
    if not (out / "calibration.yaml").is_file():
        print(f"calibrating {rig} from its board images ...", flush=True)
        subprocess.run([sys.executable, "-m", "selfcal.cli", "calibrate", str(session), "--out", str(out),
                        "--deflection", "none"], check=True, stdout=subprocess.DEVNULL)
    return out


def trained(workdir: Path, rig: str, session: Path, steps: int, calibration: Path | None, name: str | None = None,
            previous: Path | None = None, more: tuple[Path, ...] = ()) -> Path:
    """The self-model: on the calibration's URDF and cameras where there is one (its placements held,
    `selfmodel train --placements auto`), else on the session's description (placements fitted).
    ``previous``: relearned from that model on ``session`` and the ``more`` sessions, as a user does
    after a planned capture (`selfmodel train --previous`), the placements as the first training had
    them (held on a calibration, fitted from depth on a description)."""
    out = workdir / (name or (f"model-{rig}-{steps}" if calibration is None else f"model-{rig}-{steps}-calibrated"))
    if not (out / "config.json").is_file():
        print(f"training {out.name} for {steps} steps ...", flush=True)
        extra = [] if calibration is None else ["--urdf", str(calibration / "robot.urdf"), "--cameras", str(calibration)]
        if previous is not None:
            extra += ["--previous", str(previous), "--placements", "fit" if calibration is None else "hold"]
        subprocess.run([sys.executable, "-m", "selfcal.cli", "selfmodel", "train", str(session), *map(str, more),
                        "--out", str(out), "--steps", str(steps), "--seed", "0", "--threads", "1", *extra], check=True)
    return out


def added_capture(workdir: Path, rig: str, model: Path, poses: int, kind: str) -> Path:
    """``poses`` more poses captured for ``model``: planned with `selfcal plan --views` (the poses that
    show its unseen space to the rig's cameras), or as many random valid poses (the control)."""
    out = workdir / f"{rig}-{kind}-{poses}-for-{model.name}"
    if out.exists():
        return out
    if kind == "random":
        print(f"capturing {out.name} ...", flush=True)
        subprocess.run([sys.executable, "-m", "selfcal.cli", "capture", "--rig", rig, "--out", str(out), "--poses",
                        str(poses), "--seed", str(VIEWS_SEED)], check=True, stdout=subprocess.DEVNULL)
        return out
    plan = workdir / f"{out.name}.csv"
    if not plan.is_file():
        print(f"planning {poses} views for {model.name} ...", flush=True)
        subprocess.run([sys.executable, "-m", "selfcal.cli", "plan", "--views", "--rig", rig, "--model", str(model),
                        "--poses", str(poses), "--out", str(plan), "--seed", "0"], check=True)
    print(f"capturing {out.name} ...", flush=True)
    subprocess.run([sys.executable, "-m", "selfcal.cli", "capture", "--rig", rig, "--out", str(out), "--plan", str(plan),
                    "--seed", str(VIEWS_SEED)], check=True, stdout=subprocess.DEVNULL)
    return out


def exported(workdir: Path, rig: str, model: Path, heldout: Path, tag: str = "") -> tuple[Path, dict]:
    out = workdir / f"export-{rig}{tag}"
    if not (out / "export_report.json").is_file():
        print(f"exporting {rig} ...", flush=True)
        subprocess.run([sys.executable, "-m", "selfcal.cli", "selfmodel", "export", str(model), "--out", str(out),
                        "--no-truth", "--force"], check=True)
    return out, json.loads((out / "export_report.json").read_text())


def baseline_srdf(workdir: Path, rig: str, session: Path) -> Path:
    """The description's own URDF beside an SRDF made by the same rules (its collision meshes)."""
    from capture.session import load_session
    from selfmodel.export.srdf import LinkTree, collision_matrix, write_srdf

    loaded = load_session(session)
    path = workdir / f"baseline-{rig}.srdf"
    if not path.is_file():
        matrix = collision_matrix(loaded.urdf_path, loaded.joint_names, loaded.base_link, 10_000,
                                  np.random.default_rng(0), loaded.held_joints, description=loaded.urdf_path)
        write_srdf(path, "robot", matrix, loaded.base_link, loaded.tip_link, LinkTree(loaded.urdf_path).root,
                   loaded.joint_names)
    return path


def true_pieces(baseline: Path, session: Path) -> Path:
    """The reference for the pieces: the export's own piece pipeline (``convex_pieces`` with the
    export's defaults, each piece grown by the margin floor) run on the true link meshes, the true
    board as the export writes a kept one (its plate as a box grown by the floor), in the true
    URDF, with an SRDF made by the same rules as the export's. What that pipeline gives on the
    truth is as tight as pieces of that kind get for the arm, whatever was learned (not for every
    link: the decomposition sees each true mesh as it is, shells and all). Beside ``baseline``
    (``truepieces-RIG/``); evaluation only (reads truth/)."""
    from types import SimpleNamespace

    from capture.session import load_session
    from capture.truth_files import truth_parameters
    from rigs.link_meshes import link_meshes
    from selfmodel.evaluation.export_truth import load_truth
    from selfmodel.evaluation.metrics import true_board_mesh
    from selfmodel.export.board import PlateBox
    from selfmodel.export.bodies import convex_pieces
    from selfmodel.export.exporter import inflate_piece, write_collision_urdf
    from selfmodel.export.settings import MarginSettings, PieceSettings
    from selfmodel.export.srdf import LinkTree, collision_matrix, write_srdf

    out = baseline.with_name(baseline.stem.replace("baseline-", "truepieces-", 1))
    if (out / "robot.srdf").is_file():
        return out
    print(f"the export's pieces on the true meshes of {session.name} ...", flush=True)
    loaded = load_session(session)
    true_urdf = session / "truth" / "robot.urdf"
    floor, settings = MarginSettings().floor, PieceSettings()
    # The links the truth is measured on, each its own mesh (the board apart, as the export holds it).
    meshes = link_meshes(true_urdf, load_truth(session, loaded.pose_ids[:1]).link_names)
    links = {}
    for link, mesh in meshes.items():
        pieces = convex_pieces(mesh, settings.max_pieces, settings.max_vertices)
        links[link] = SimpleNamespace(pieces=[inflate_piece(piece, floor, settings.max_vertices) for piece in pieces],
                                      board_box=None)
    board = true_board_mesh(truth_parameters(session), loaded.manifest)
    if board is not None:
        links[loaded.tip_link].board_box = PlateBox.of(board).grown(floor)
    work = out.with_name(out.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)  # this function's own, left by a run stopped part way
    work.mkdir(parents=True)
    urdf = write_collision_urdf(true_urdf, SimpleNamespace(links=links, joint_origins={}), work)
    matrix = collision_matrix(urdf, loaded.joint_names, loaded.base_link, 10_000, np.random.default_rng(0),
                              loaded.held_joints, description=true_urdf)
    write_srdf(work / "robot.srdf", "robot", matrix, loaded.base_link, loaded.tip_link, LinkTree(urdf).root,
               loaded.joint_names)
    work.rename(out)
    return out


def reference_inputs(baseline: Path, session: Path) -> dict:
    """What the rows of the true meshes as pieces read: its URDF, SRDF and pieces."""
    reference = true_pieces(baseline, session)
    meshes = sorted(str(path.relative_to(reference)) for path in (reference / "meshes" / "collision").glob("*.stl"))
    return file_digests(reference, ["robot.urdf", "robot.srdf", *meshes], "truepieces")


def worlds(export: Path, session: Path, baseline: Path, obstacles=()):
    """The four worlds a planner could use: the export, the true meshes, the URDF's collision meshes
    and the export's pieces made on the true meshes (:func:`true_pieces`)."""
    from capture.session import load_session
    from selfmodel.evaluation.export_truth import TrueWorld
    from selfmodel.export.world import CollisionWorld

    loaded = load_session(session)
    report = json.loads((export / "export_report.json").read_text())
    held = report.get("held_joints") or loaded.held_joints
    reference = true_pieces(baseline, session)
    return {
        "export": CollisionWorld(export / "robot.urdf", loaded.joint_names, loaded.base_link, srdf=export / "robot.srdf",
                                 held=held, obstacles=list(obstacles)),
        "true meshes": TrueWorld(session, obstacles),
        # As MoveIt and mplib read a mesh by default: a triangle soup (V-HACD files hold several parts).
        "URDF collision meshes": CollisionWorld(loaded.urdf_path, loaded.joint_names, loaded.base_link, srdf=baseline,
                                                held=loaded.held_joints, obstacles=list(obstacles), convex=False),
        "true meshes as pieces": CollisionWorld(reference / "robot.urdf", loaded.joint_names, loaded.base_link,
                                                srdf=reference / "robot.srdf", held=loaded.held_joints,
                                                obstacles=list(obstacles)),
    }


def recorded_rows(export: Path, sessions: list[Path], baseline: Path, mplib_python: str | None, cache: Path,
                  tag: str = "") -> dict:
    """Recorded poses in self-collision per world: the poses of all ``sessions`` (those the model
    trained on). The export's pieces (coal, and mplib), the spheres (the export's own cuRobo check,
    read from its report each run) and the URDF's meshes are cached apart, each against the files it
    reads."""
    from capture.session import load_session
    from selfmodel.export.world import CollisionWorld

    loaded = load_session(sessions[0])  # the description, joints and held joints: every session's the same
    qs = np.vstack([load_session(path).q for path in sessions])
    report = json.loads((export / "export_report.json").read_text())
    held = report.get("held_joints") or loaded.held_joints
    recorded = {}
    for k, path in enumerate(sessions):
        recorded.update({key if k == 0 else f"{key}#{k}": value
                         for key, value in session_inputs(path, "description").items()})

    def pieces() -> dict:
        world = CollisionWorld(export / "robot.urdf", loaded.joint_names, loaded.base_link, srdf=export / "robot.srdf",
                               held=held)
        found = {"export": int(sum(bool(world.colliding_pairs(q)) for q in qs))}
        if mplib_python:
            found["export in mplib 0.2.1"] = _mplib(mplib_python, export / "robot.urdf", export / "robot.srdf",
                                                    loaded.tip_link, qs, loaded.joint_names,
                                                    report.get("held_joints") or {})
        return found

    def description() -> dict:
        world = CollisionWorld(loaded.urdf_path, loaded.joint_names, loaded.base_link, srdf=baseline,
                               held=loaded.held_joints, convex=False)
        return {"URDF collision meshes": int(sum(bool(world.colliding_pairs(q)) for q in qs))}

    found = {}
    mplib = {"mplib": str(bool(mplib_python))}
    found.update(cached(cache / f"recorded-export{tag}.json", pieces, {**export_inputs(export, "pieces"), **recorded, **mplib}))
    found.update(cached(cache / f"recorded-urdf{tag}.json", description,
                        {**recorded, **file_digests(baseline.parent, [baseline.name], "baseline")}))
    found.pop("seconds", None)
    found.pop("inputs", None)
    found["spheres (cuRobo's check)"] = report["recorded_poses_in_collision"]["spheres"]["poses"]
    found["poses"] = len(qs)
    return found


MPLIB_CHECK = """
import json, sys
import numpy as np
import mplib
urdf, srdf, tip = sys.argv[1], sys.argv[2], sys.argv[3]
qs, joints, held = np.array(json.loads(sys.argv[4])), json.loads(sys.argv[5]), json.loads(sys.argv[6])
planner = mplib.Planner(urdf=urdf, srdf=srdf, move_group=tip)
names = planner.user_joint_names
bad = 0
for q in qs:
    values = {**held, **dict(zip(joints, q))}
    bad += bool(planner.check_for_self_collision(np.array([values.get(name, 0.0) for name in names])))
print(bad)
"""


def _mplib(python: str, urdf: Path, srdf: Path, tip: str, q: np.ndarray, joints: list[str], held: dict) -> int:
    output = subprocess.run([python, "-c", MPLIB_CHECK, str(urdf), str(srdf), tip, json.dumps(q.tolist()),
                             json.dumps(joints), json.dumps(held)], check=True, capture_output=True, text=True).stdout
    return int(output.strip().splitlines()[-1])


def truth_rows(export: Path, heldout: Path, session: Path, baseline: Path, cache: Path, tag: str = "") -> dict:
    """The export's pieces, its spheres and the URDF's collision meshes against the true meshes at the
    held-out poses; each cached against the files it reads (new spheres recompute only theirs)."""
    from capture.session import load_session
    from selfmodel.evaluation.export_truth import PosedExport, description_pieces, evaluate_export, load_truth
    from selfmodel.export.separation import pair_kinds  # noqa: F401  (imports coal after open3d)

    base = load_session(session).base_link
    report = json.loads((export / "export_report.json").read_text())
    held = report.get("held_joints") or {}
    truth_at = {}

    def truth():
        if "truth" not in truth_at:
            truth_at["truth"] = load_truth(heldout, load_session(heldout).pose_ids[:TRUTH_POSES])
        return truth_at["truth"]

    def pieces(folder: Path = export, held: dict = held) -> dict:
        # As a planner reads robot.urdf: each collision mesh a hull, a kept board's <box> a box.
        from rigs import urdf as urdf_io

        links = [link.get("name") for link in urdf_io.parse_urdf(folder / "robot.urdf").getroot().findall("link")]
        found = description_pieces(folder / "robot.urdf", links)
        return evaluate_export(PosedExport(folder / "robot.urdf", base, found, {}, held), truth(),
                               np.random.default_rng(5), volume_samples=50_000, kinds=("pieces",))

    def spheres() -> dict:
        import yaml

        from selfmodel.export.spheres import SphereCover

        covers = {link: SphereCover(np.array([s["center"] for s in items]), np.array([s["radius"] for s in items]))
                  for link, items in yaml.safe_load((export / "curobo_spheres.yml").read_text())["collision_spheres"].items()}
        return evaluate_export(PosedExport(export / "robot.urdf", base, {}, covers, held), truth(),
                               np.random.default_rng(5), volume_samples=50_000, kinds=("spheres",))

    def description() -> dict:
        loaded = load_session(heldout)
        return evaluate_export(
            PosedExport(loaded.urdf_path, base, description_pieces(loaded.urdf_path, truth().link_names), {},
                        loaded.held_joints), truth(), np.random.default_rng(5), volume_samples=50_000)

    def sphere_parts() -> dict:
        """The arm's spheres against the arm without its board, the board's against the plate alone
        (the tip's board group is listed after its own spheres)."""
        import yaml
        from bench_spheres import measure, true_parts

        from selfmodel.export.spheres import SphereCover

        posed_truth, tip, arm_tip, board = true_parts(heldout, TRUTH_POSES)
        items = yaml.safe_load((export / "curobo_spheres.yml").read_text())["collision_spheres"]
        covers = {link: SphereCover(np.array([s["center"] for s in spheres]), np.array([s["radius"] for s in spheres]))
                  for link, spheres in items.items()}
        count, on_board = len(covers[tip].radii), report["links"][tip]["spheres_board"]
        groups = {k: "board" if k >= count - on_board else "arm" for k in range(count)}
        parts = measure(export / "robot.urdf", base, covers, posed_truth, tip, arm_tip, board, groups)
        return {part: parts[part] for part in ("whole", "arm", "board") if part in parts}

    held_out = {**session_inputs(heldout, "truth", "heldout"), **metric_inputs()}
    export_pieces = cached(cache / f"truth-export{tag}-pieces.json", pieces, {**export_inputs(export, "pieces"), **held_out})
    export_spheres = cached(cache / f"truth-export{tag}-spheres.json", spheres, {**export_inputs(export, "spheres"), **held_out})
    urdf = cached(cache / "truth-urdf.json", description, held_out)
    reference = true_pieces(baseline, session)
    as_pieces = cached(cache / "truth-truepieces.json", lambda: pieces(reference, load_session(session).held_joints),
                       {**held_out, **reference_inputs(baseline, session)})
    found = {"export": {"pieces": export_pieces["pieces"], "spheres": export_spheres["spheres"]},
             "URDF collision meshes": {kind: urdf[kind] for kind in ("pieces", "spheres") if kind in urdf},
             "true meshes as pieces": {"pieces": as_pieces["pieces"]}}
    if report.get("spheres_board"):
        found["sphere parts"] = cached(cache / f"truth-export{tag}-sphere-parts.json", sphere_parts,
                                       {**export_inputs(export, "spheres"), **held_out,
                                        "export/spheres_board": str(report["spheres_board"])})
    return found


def floor_rows(heldout: Path, budgets=(64, 128)) -> dict:
    """What the sphere fit reaches on the true meshes themselves (no model error, no margin, no
    recorded poses to keep apart), measured the same way: the floor a sphere budget sets on this
    arm and its board. Evaluation only (reads truth/)."""
    from capture.session import load_session
    from rigs.solids import solid_of
    from selfmodel.evaluation.export_truth import PosedExport, evaluate_export, load_truth
    from selfmodel.export.bodies import LinkBody
    from selfmodel.export.exporter import sphere_target
    from selfmodel.export.sphere_fit import refine_covers
    from selfmodel.export.spheres import fit_sphere_covers

    truth = load_truth(heldout, load_session(heldout).pose_ids[:TRUTH_POSES])
    voxel = 0.003
    bodies = {}
    for link in truth.link_names:
        solid = solid_of(truth.meshes[link], voxel)
        cells = solid.inside_cells | solid.surface_cells
        bodies[link] = LinkBody(link, solid.watertight_mesh(), solid.origin + voxel * np.argwhere(cells), voxel, False,
                                0.0, 0.0, cells, solid.origin)
    rows = {}
    for budget in budgets:
        rng = np.random.default_rng(0)
        targets = [sphere_target(link, body, 0.0, rng) for link, body in bodies.items()]
        covers, _ = refine_covers(targets, fit_sphere_covers(targets, budget, rng=rng), [], iterations=250)
        figures = evaluate_export(PosedExport(heldout / "truth" / "robot.urdf", truth.link_names[0], {}, covers), truth,
                                  np.random.default_rng(5), volume_samples=50_000, kinds=("spheres",))
        rows[str(budget)] = {**figures["spheres"], "per_link": {link: len(cover.radii) for link, cover in covers.items()}}
    return rows


def arm_floor_rows(heldout: Path, budgets=(64, 128)) -> dict:
    """The export's own sphere fit (:func:`selfmodel.export.sphere_groups.fit_groups`, no margin) on
    the true meshes of the arm without its board, measured against that arm: what the fitter reaches
    with no model error, the reference the export's arm spheres are held to at the same budget.
    Evaluation only (reads truth/)."""
    from bench_spheres import body_of_mesh, measure, sub_truth, true_parts

    from selfmodel.export.sphere_groups import fit_groups, sphere_target

    truth, tip, arm_tip, board = true_parts(heldout, TRUTH_POSES)
    meshes = dict(truth.meshes)
    if board is not None:
        meshes[tip] = arm_tip
    arm_truth = sub_truth(truth, meshes, truth.link_names)
    bodies = {link: body_of_mesh(link, meshes[link]) for link in truth.link_names}
    rows = {}
    for budget in budgets:
        rng = np.random.default_rng(0)
        targets = [sphere_target(link, body, 0.0, rng) for link, body in bodies.items()]
        covers, _ = fit_groups(targets, budget, seed=0)
        rows[str(budget)] = measure(heldout / "truth" / "robot.urdf", truth.link_names[0], covers, arm_truth, tip, arm_tip,
                                    None, {})["whole"]
    return rows


def met_only_rows(model_path: Path, heldout: Path, beyond: float = 0.010) -> dict:
    """Where the unseen count cannot see the learned excess: per link, the outer layer of the
    model's learned body (selfmodel.labels.unseen's cells) lying more than ``beyond`` m outside the
    true link (the board part of the tip), cm3, split by what the training cameras said at >= POSES
    recorded poses: seen through (the carving removes it), only met (a reading ended there: counted
    as seen, so neither unseen nor carved), or unseen. Evaluation only (reads truth/)."""
    from rigs.solids import solid_of
    from selfmodel.evaluation.export_truth import load_truth
    from selfmodel.labels.seen_through import View, pose_counts, training_sessions
    from selfmodel.labels.unseen import PITCH, POSES, cell_tolerance, learned_cells
    from selfmodel.model.models import SelfModel

    model = SelfModel.load(model_path)
    sessions, why = training_sessions(model.folder)
    if sessions is None:
        raise SystemExit(f"{model_path}: {why}")
    cells = learned_cells(model, PITCH)
    poses = model.base_T_links(np.vstack([session.q for session in sessions]))
    views, row = [], 0
    for session in sessions:
        for k in range(len(session.pose_ids)):
            views.append(View(session, k, {link: poses[row, i] for i, link in enumerate(model.link_names) if link in cells}))
            row += 1
    through, met, seen = pose_counts(cells, views, cell_tolerance(PITCH), per_pose=True)
    meshes = load_truth(heldout, ["p0000"]).meshes
    volume = PITCH ** 3 * 1e6
    found = {}
    for link, points in cells.items():
        if link not in meshes or not len(points):
            continue
        far = solid_of(meshes[link], 0.002).signed_distance(points) > beyond
        found[link] = {"outside_cm3": float(far.sum() * volume),
                       "seen_through_cm3": float(np.sum(far & (through[link] >= POSES)) * volume),
                       "met_only_cm3": float(np.sum(far & (through[link] < POSES) & (met[link] >= POSES)) * volume),
                       "unseen_cm3": float(np.sum(far & (seen[link] < POSES)) * volume)}
    return found


def scenes(rng: np.random.Generator, reach: float) -> list[list]:
    """Box obstacles near the arm: 5-20 cm boxes 0.25-0.75 of its reach from the base axis."""
    from rigs.transforms import make_transform
    from selfmodel.export.world import Box

    result = []
    for s in range(SCENES):
        boxes = []
        for b in range(BOXES):
            radius, angle = rng.uniform(0.3, 0.75) * reach, rng.uniform(-np.pi, np.pi)
            centre = [radius * np.cos(angle), radius * np.sin(angle), rng.uniform(0.1, 0.8) * reach]
            boxes.append(Box(f"s{s}b{b}", rng.uniform(0.05, 0.2, 3), make_transform(centre, [0.0, 0.0, rng.uniform(-np.pi, np.pi)])))
        result.append(boxes)
    return result


def limits(session: Path) -> tuple[np.ndarray, np.ndarray]:
    from capture.session import load_session
    from selfmodel.export.srdf import joint_limits

    loaded = load_session(session)
    return joint_limits(loaded.urdf_path, loaded.joint_names)


def reach_of(session: Path) -> float:
    from capture.session import load_session

    q = load_session(session).q
    from selfmodel.export.world import CollisionWorld

    loaded = load_session(session)
    world = CollisionWorld(loaded.urdf_path, loaded.joint_names, loaded.base_link, held=loaded.held_joints)
    return float(max(np.linalg.norm(world.link_pose(loaded.tip_link, row)[:3, 3]) for row in q))


def sphere_row(rig: str, name: str, figures: dict) -> list:
    """One row of the sphere table: coverage, both readings of the protrusion, both volume ratios."""
    return [rig, name, figures["count"], f"{100 * figures['surface_coverage']:.2f}",
            f"{figures['protrusion_p95_mm']:.1f}", f"{figures['every_sphere_protrusion_p95_mm']:.1f}",
            f"{figures['volume_ratio']:.2f}", f"{figures['summed_volume_ratio']:.2f}"]


def metric_inputs() -> dict:
    """The truth metrics' own code, hashed: a row measured against the true arm is recomputed when
    what it measures changes (selfmodel/evaluation/export_truth.py, and rigs/solids.py: what the true
    meshes enclose)."""
    root = Path(__file__).resolve().parent.parent
    return {**file_digests(root / "selfmodel" / "evaluation", ["export_truth.py"], "code"),
            **file_digests(root / "rigs", ["solids.py"], "code/rigs")}


def fitter_inputs(groups: bool = False) -> dict:
    """The sphere fitter's own code, hashed: the floor rows measure the fitter, not an export
    (``groups``: and the grouped fit the export runs)."""
    import hashlib
    import inspect

    from selfmodel.export import exporter as export

    root = Path(__file__).resolve().parent.parent
    found = file_digests(root / "selfmodel" / "export", ["spheres.py", "sphere_fit.py"], "code")
    if groups:
        found.update(file_digests(root / "selfmodel" / "export", ["sphere_groups.py"], "code"))
    found["code/export.sphere_target"] = hashlib.sha256(inspect.getsource(export.sphere_target).encode()).hexdigest()
    return found


def miss_rows(export: Path, session: Path, baseline: Path, configurations: int, cache: Path, tag: str = "") -> dict:
    """Each scene's configurations flagged by each world are cached on their own
    (``cache``/scene-S-N-WORLD.json, against the files that world reads): a run stopped part way
    resumes where it stood, and a new export recomputes only its own flags."""
    lower, upper = limits(session)
    all_scenes = scenes(np.random.default_rng(11), reach_of(session))
    per = configurations // len(all_scenes)
    counts = {"configurations": 0, "true collisions": 0, "export": {"missed": 0, "false_alarms": 0, "flagged": 0},
              "URDF collision meshes": {"missed": 0, "false_alarms": 0, "flagged": 0},
              "true meshes as pieces": {"missed": 0, "false_alarms": 0, "flagged": 0}}
    inputs = {"true meshes": session_inputs(session, "truth"),
              "export": {**export_inputs(export, "pieces"), **session_inputs(session, "description")},
              "URDF collision meshes": {**session_inputs(session, "description"),
                                        **file_digests(baseline.parent, [baseline.name], "baseline")},
              "true meshes as pieces": {**session_inputs(session, "truth"), **reference_inputs(baseline, session)}}
    for index, boxes in enumerate(all_scenes):
        built = {}

        def flags(name: str) -> dict:
            if not built:
                built.update(worlds(export, session, baseline, boxes))
            qs = np.random.default_rng([11, index]).uniform(lower, upper, (per, len(lower)))
            return {"configurations": per, "flagged": [k for k, q in enumerate(qs) if built[name].collides(q)]}

        found = {name: set(cached(cache / f"scene-{index}-{per}-{slug(name, tag)}.json", lambda: flags(name), inputs[name],
                                  quiet=True)["flagged"]) for name in WORLDS}
        truth = found["true meshes"]
        counts["configurations"] += per
        counts["true collisions"] += len(truth)
        for name in ("export", "URDF collision meshes", "true meshes as pieces"):
            counts[name]["flagged"] += len(found[name])
            counts[name]["missed"] += len(truth - found[name])
            counts[name]["false_alarms"] += len(found[name] - truth)
        print(f"  {counts['configurations']} configurations, {counts['export']['missed']} missed by the export", flush=True)
    return counts


def true_clearances(true, q: np.ndarray) -> dict[str, float]:
    """Link pair ("a/b", sorted; an obstacle is ``obstacle:<name>``) -> how far apart the true arm's
    meshes are at ``q``, m (coal; below 0 they overlap), over the pairs the true arm checks. ``true``:
    the :class:`CollisionWorld` of a :class:`TrueWorld`."""
    import pinocchio as pin

    pin.computeDistances(true.model, true.data, true.geometry, true.geometry_data, true.full(q))
    clearance: dict[str, float] = {}
    for pair, result in zip(true.geometry.collisionPairs, true.geometry_data.distanceResults):
        key = "/".join(sorted((true.link_of[pair.first], true.link_of[pair.second])))
        clearance[key] = min(clearance.get(key, np.inf), float(result.min_distance))
    return clearance


ALARMED = ("export", "true meshes as pieces")


def alarm_pairs(export: Path, session: Path, baseline: Path, configurations: int, misses: Path, cache: Path,
                tag: str = "") -> dict:
    """Where the false alarms are: for each configuration the export (and its pieces made on the
    true meshes) flags and the true arm does not, read from the flags :func:`miss_rows` cached under
    ``misses``, the link pairs it flags there and how far apart the true meshes of each pair are.
    World -> {"configurations": the false alarms counted, "pairs": pair -> {"alarms": how many of them
    flag it, "true_clearance_mm": the true meshes' median distance there}}, most alarms first. Cached
    against the files those flags read."""
    lower, upper = limits(session)
    all_scenes = scenes(np.random.default_rng(11), reach_of(session))
    per = configurations // len(all_scenes)

    def compute() -> dict:
        found = {name: {} for name in ALARMED}
        counted = dict.fromkeys(ALARMED, 0)
        for index, boxes in enumerate(all_scenes):
            truth = set(json.loads((misses / f"scene-{index}-{per}-true.json").read_text())["flagged"])
            alarms = {name: sorted(set(json.loads((misses / f"scene-{index}-{per}-{slug(name, tag)}.json").read_text())
                                       ["flagged"]) - truth) for name in ALARMED}
            if not any(alarms.values()):
                continue
            built = worlds(export, session, baseline, boxes)
            qs = np.random.default_rng([11, index]).uniform(lower, upper, (per, len(lower)))
            for name, ks in alarms.items():
                counted[name] += len(ks)
                for k in ks:
                    clearance = true_clearances(built["true meshes"].world, qs[k])
                    for pair in built[name].colliding_pairs(qs[k]):
                        key = "/".join(pair)
                        found[name].setdefault(key, []).append(1000.0 * clearance.get(key, np.nan))
        return {name: {"configurations": counted[name],
                       "pairs": {key: {"alarms": len(values), "true_clearance_mm": float(np.nanmedian(values))
                                       if np.isfinite(values).any() else None}
                                 for key, values in sorted(pairs.items(), key=lambda item: -len(item[1]))}}
                for name, pairs in found.items()}

    inputs = {**export_inputs(export, "pieces"), **session_inputs(session, "truth"),
              **reference_inputs(baseline, session), "configurations": str(per * len(all_scenes))}
    return cached(cache / f"alarm-pairs{tag}-{per * len(all_scenes)}.json", compute, inputs)


def alarm_words(alarms: dict, name: str, top: int = 3) -> str:
    """The pairs behind most of one world's false alarms: share of them, true meshes' median distance there."""
    row = alarms[name]
    total = max(row["configurations"], 1)
    words = [f"{pair} {100 * found['alarms'] / total:.0f} %"
             + (f" ({found['true_clearance_mm']:.1f} mm)" if found["true_clearance_mm"] is not None else "")
             for pair, found in list(row["pairs"].items())[:top]]
    return ", ".join(words) or "none"


def planning_inputs(export: Path, session: Path, baseline: Path) -> dict:
    """Per world, what its planning rows read: every world plans between ends drawn free for the
    true arm and is replayed on it, so each also reads the session's truth."""
    truth = session_inputs(session, "truth")
    return {"true meshes": truth, "export": {**export_inputs(export, "pieces"), **truth},
            "URDF collision meshes": {**truth, **file_digests(baseline.parent, [baseline.name], "baseline")},
            "true meshes as pieces": {**truth, **reference_inputs(baseline, session)}}


def query_ends(world: dict, k: int, lower: np.ndarray, upper: np.ndarray) -> list[np.ndarray]:
    """Query k's start and goal: its own seed's first two draws free for the true arm."""
    rng, ends = np.random.default_rng([23, k]), []
    while len(ends) < 2:
        q = rng.uniform(lower, upper)
        if not world["true meshes"].collides(q):
            ends.append(q)
    return ends


def planning_rows(export: Path, session: Path, baseline: Path, queries: int, checks: int, cache: Path,
                  seconds: float = 60.0, tag: str = "") -> dict:
    """Query k (of scene k mod 10) draws its ends from its own seed; each world's outcome is cached on
    its own (``cache``/query-K-Cchecks-WORLD.json, against the files that world reads), so a run
    stopped part way resumes, a longer run reuses the first queries, and a new export replans only
    its own world."""
    from selfmodel.evaluation.planning import plan, replay

    lower, upper = limits(session)
    all_scenes = scenes(np.random.default_rng(23), reach_of(session))
    result = {name: {"solved": 0, "colliding_paths": 0, "failures": {}, "seconds": 0.0} for name in WORLDS}
    inputs = planning_inputs(export, session, baseline)
    built: dict[int, dict] = {}

    def one(k: int, name: str) -> dict:
        index = k % len(all_scenes)
        if index not in built:
            built.clear()
            built[index] = worlds(export, session, baseline, all_scenes[index])
        world = built[index]
        ends = query_ends(world, k, lower, upper)
        outcome = plan(world[name], ends[0], ends[1], lower, upper, seconds=seconds, seed=k, checks=checks)
        return {"solved": bool(outcome.solved), "reason": outcome.reason, "seconds": outcome.seconds,
                "colliding": bool(outcome.solved and replay(world["true meshes"], outcome.path) is not None)}

    # Scene by scene, so each scene's worlds are built once.
    order = sorted(range(queries), key=lambda k: (k % len(all_scenes), k))
    for done, k in enumerate(order, 1):
        for name in WORLDS:
            row = cached(cache / f"query-{k}-{checks}checks-{slug(name, tag)}.json", lambda: one(k, name), inputs[name],
                         quiet=True)
            result[name]["seconds"] += row["seconds"]
            if not row["solved"]:
                result[name]["failures"][row["reason"]] = result[name]["failures"].get(row["reason"], 0) + 1
                continue
            result[name]["solved"] += 1
            result[name]["colliding_paths"] += int(row["colliding"])
        if done % 10 == 0:
            print(f"  {done} queries: " + ", ".join(f"{name} {result[name]['solved']}" for name in WORLDS), flush=True)
    result["queries"] = queries
    return result


def rejected_ends(export: Path, session: Path, baseline: Path, cache: Path, queries: int, checks: int,
                  tag: str = "") -> dict:
    """The planning ends free for the true arm that the export refuses: what the export says they
    touch, and how far the true arm's meshes are from it there (coal distance), m."""
    lower, upper = limits(session)
    all_scenes = scenes(np.random.default_rng(23), reach_of(session))
    refused = {}
    for k in range(queries):
        row = json.loads((cache / f"query-{k}-{checks}checks-{slug('export', tag)}.json").read_text())
        if row["reason"] in ("start in collision", "goal in collision"):
            refused[k] = row["reason"]
    found = []
    for index in sorted({k % len(all_scenes) for k in refused}):
        world = worlds(export, session, baseline, all_scenes[index])
        true = world["true meshes"].world
        for k in sorted(k for k in refused if k % len(all_scenes) == index):
            ends = query_ends(world, k, lower, upper)  # the same draw as the planning query
            q = ends[0] if refused[k] == "start in collision" else ends[1]
            clearance = true_clearances(true, q)
            for pair in world["export"].colliding_pairs(q):
                key = "/".join(pair)
                found.append({"query": k, "end": refused[k], "pair": key, "true_clearance_mm":
                              1000.0 * clearance[key] if key in clearance else None})
    return {"rows": found}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench-export"))
    parser.add_argument("--steps", type=int, default=6000, help="training steps of each self-model")
    parser.add_argument("--configurations", type=int, default=100_000, help="random configurations for missed collisions")
    parser.add_argument("--queries", type=int, default=100, help="planning queries a rig")
    parser.add_argument("--plan-checks", type=int, default=3000,
                        help="RRT-Connect budget a query, in collision checks (the same for every world)")
    parser.add_argument("--mplib-python", default=None, help="a Python with mplib 0.2.1 (numpy < 2) for its check")
    parser.add_argument("--rigs", default=",".join(RIGS))
    parser.add_argument("--kinematics", choices=("calibrated", "description"), default="calibrated",
                        help="calibrated: a rig with a board on the flange is calibrated from its images first and "
                             "the self-model trains on that URDF and those cameras, placements held; description: "
                             "every self-model trains on the session's URDF, placements fitted from depth")
    parser.add_argument("--before", type=Path, default=None,
                        help="a workdir of an earlier run on the same models: its export's figures beside this one's, "
                             "on the same queries and configurations (read from its cached rows)")
    parser.add_argument("--before-note", default="", help="what differs in the --before run, for the table's caption")
    parser.add_argument("--views", type=int, default=0,
                        help="the capture loop: N of the training poses planned for a model of the others "
                             "(`selfcal plan --views`), beside this run's all-random export; section selfmodel-views-export")
    parser.add_argument("--views-steps", type=int, default=1000,
                        help="with --views: of --steps, the relearning steps after the added capture (`selfmodel train "
                             "--previous`); the first model trains the rest, so both exports cost the same steps")
    parser.add_argument("--added", default="planned",
                        help="with --views: planned, random or planned,random: the added poses planned, or random "
                             "(the control: the same loop without the planner), or both loops")
    parser.add_argument("--control-rigs", default=None,
                        help="with --added planned,random: the rigs that get the random control (default: every rig)")
    args = parser.parse_args()
    if args.views and not (0 < args.views < TRAIN_POSES and 0 < args.views_steps < args.steps):
        parser.error(f"--views must be within 1-{TRAIN_POSES - 1} and --views-steps below --steps")
    args.added = [kind for kind in args.added.split(",") if kind]
    if not args.added or set(args.added) - {"planned", "random"}:
        parser.error("--added takes planned, random or planned,random")
    workdir = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    results = {}
    for rig in args.rigs.split(","):
        session = captured(workdir, rig, TRAIN_POSES, TRAIN_SEED)
        heldout = captured(workdir, rig, HELDOUT_POSES, HELDOUT_SEED)
        baseline = baseline_srdf(workdir, rig, session)
        # The loops first: the all-random export after them is then most often measured already.
        loops = {}
        controlled = args.control_rigs is None or rig in args.control_rigs.split(",")
        for kind in [kind for kind in args.added if kind != "random" or controlled] if args.views else ():
            model, calibration, sessions = views_loop(workdir, rig, args, kind)
            tag = f"-{kind}{args.views}"
            export, _ = exported(workdir, rig, model, heldout, tag)
            loops[kind] = measured_export(workdir, rig, args, export, model, calibration, sessions, session, heldout,
                                          baseline, tag)
        calibration = calibrated(workdir, rig, session) if args.kinematics == "calibrated" else None
        model = trained(workdir, rig, session, args.steps, calibration)
        export, _ = exported(workdir, rig, model, heldout)
        results[rig] = measured_export(workdir, rig, args, export, model, calibration, [session], session, heldout, baseline)
        if loops:
            results[rig] = {"all random": results[rig], **loops}
    if args.views:
        write_views(results, args)
    else:
        write(results, args)


def views_loop(workdir: Path, rig: str, args, kind: str) -> tuple[Path, Path | None, list[Path]]:
    """The capture loop at the same pose count and training steps: a model of TRAIN_POSES - N random
    poses trained ``steps - views_steps`` steps, N poses added (planned for it, or random), and the
    model relearned from it on all of them for ``views_steps`` steps. The first session is calibrated
    on its own, as a user calibrates what they have. Returns the relearned model, the calibration and
    the training sessions."""
    first = captured(workdir, rig, TRAIN_POSES - args.views, TRAIN_SEED)
    calibration = (calibrated(workdir, rig, first, f"cal-{rig}-{TRAIN_POSES - args.views}")
                   if args.kinematics == "calibrated" else None)
    steps = args.steps - args.views_steps
    model = trained(workdir, rig, first, steps, calibration, f"model-{rig}-{TRAIN_POSES - args.views}-{steps}")
    added = added_capture(workdir, rig, model, args.views, kind)
    relearned = trained(workdir, rig, first, args.views_steps, calibration,
                        f"model-{rig}-{TRAIN_POSES - args.views}-{steps}+{kind}{args.views}-{args.views_steps}",
                        previous=model, more=(added,))
    return relearned, calibration, [first, added]


def measured_export(workdir: Path, rig: str, args, export: Path, model: Path, calibration: Path | None,
                    sessions: list[Path], session: Path, heldout: Path, baseline: Path, tag: str = "") -> dict:
    """Every figure of one export: ``sessions`` are the model's training sessions (its recorded
    poses); ``session`` the rig's 300-pose session, whose reach and limits place the obstacles and
    queries, the same for every export of the rig."""
    from capture.session import load_session

    rows = workdir / "rows" / rig
    report = json.loads((export / "export_report.json").read_text())
    result = {
        "report": report,
        "model": model.name,
        "kinematics": ("board calibration, placements held" if calibration is not None
                       else "description, placements fitted from depth"),
        "mount_plane_z": load_session(session).mount_plane_z,
        "placements": placement_error(model, heldout),
        "recorded": recorded_rows(export, sessions, baseline, args.mplib_python, rows, tag),
        "truth": truth_rows(export, heldout, session, baseline, rows, tag),
        "floor": cached(rows / "sphere-floor.json", lambda: floor_rows(heldout),
                        {**session_inputs(heldout, "truth", "heldout"), **fitter_inputs(), **metric_inputs()}),
        "misses": miss_rows(export, session, baseline, args.configurations, rows / "misses", tag),
        "planning": planning_rows(export, session, baseline, args.queries, args.plan_checks, rows / "planning", tag=tag),
    }
    result["alarms"] = alarm_pairs(export, session, baseline, args.configurations, rows / "misses", rows, tag)
    if args.views:
        result["arm floor"] = cached(rows / "sphere-floor-arm.json", lambda: arm_floor_rows(heldout),
                                     {**session_inputs(heldout, "truth", "heldout"), **fitter_inputs(groups=True),
                                      **metric_inputs()})
        result["met only"] = cached(rows / f"met-only{tag}.json", lambda: met_only_rows(model, heldout),
                                    {**file_digests(model, ["weights.pt", "config.json"], "model"),
                                     **session_inputs(heldout, "truth", "heldout")})
    result["refused_ends"] = cached(rows / f"refused-ends{tag}-{args.queries}.json", lambda: rejected_ends(
        export, session, baseline, rows / "planning", args.queries, args.plan_checks, tag),
        {**export_inputs(export, "pieces"), **session_inputs(session, "truth"),
         "queries": str(args.queries), "checks": str(args.plan_checks)})
    return result


def arm_spheres(result: dict) -> dict:
    """The export's arm spheres against the true arm: apart from a kept board's layer where the rig
    carries one, else the whole cover."""
    return (result["truth"].get("sphere parts") or {}).get("arm") or result["truth"]["export"]["spheres"]


def write_views(results: dict, args) -> None:
    """Section selfmodel-views-export: per rig, the all-random export beside the capture loop's."""
    rows, unseen_rows, met_rows, alarm_rows, verdicts = [], [], [], [], []
    first = TRAIN_POSES - args.views
    words = {"all random": f"{TRAIN_POSES} random, {args.steps} steps",
             "planned": f"{first} random + {args.views} planned, {args.steps - args.views_steps} + {args.views_steps} steps",
             "random": f"{first} random + {args.views} random, {args.steps - args.views_steps} + {args.views_steps} steps"}
    for rig, arms in results.items():
        floor = next(iter(arms.values()))["arm floor"]
        for name, result in arms.items():
            report, truth = result["report"], result["truth"]["export"]
            arm, misses, planning = arm_spheres(result), result["misses"], result["planning"]
            queries = planning["queries"]
            unseen = (report.get("carving") or {}).get("unseen_cm3") or {}
            success = 100 * planning["export"]["solved"] / queries
            ideal = 100 * planning["true meshes"]["solved"] / queries
            alarms = 100 * misses["export"]["false_alarms"] / misses["configurations"]
            p95_ratio = arm["every_sphere_protrusion_p95_mm"] / floor["64"]["every_sphere_protrusion_p95_mm"]
            volume_ratio = arm["volume_ratio"] / floor["64"]["volume_ratio"]
            rows.append([rig, words[name], f"{sum(unseen.values()):.0f}", f"{truth['pieces']['volume_ratio']:.2f}",
                         f"{100 * truth['pieces']['surface_coverage']:.2f}", arm["count"],
                         f"{100 * arm['surface_coverage']:.2f}",
                         f"{arm['every_sphere_protrusion_p95_mm']:.1f} (x{p95_ratio:.2f})",
                         f"{arm['volume_ratio']:.2f} (x{volume_ratio:.2f})",
                         f"{misses['export']['missed']} of {misses['true collisions']}", f"{alarms:.1f}",
                         f"{success:.0f} vs {ideal:.0f} ({success - ideal:+.0f})", planning["export"]["colliding_paths"],
                         f"{report['seconds']['export_total']:.0f}"])
            alarm_rows.append([rig, words[name], f"{alarms:.1f}", alarm_words(result["alarms"], "export")])
            unseen_rows.append([rig, words[name], ", ".join(f"{link} {unseen.get(link, 0.0):.0f}" for link in report["links"])])
            excess = {link: row for link, row in result["met only"].items() if link not in ("seconds", "inputs")}
            held = (report.get("board") or {}).get("held_by_other_links_cm3") or {}
            met_rows.append([rig, words[name], *(f"{sum(row[key] for row in excess.values()):.0f}" for key in
                                                 ("outside_cm3", "seen_through_cm3", "met_only_cm3", "unseen_cm3")),
                             ", ".join(f"{link} {row['met_only_cm3']:.0f}" for link, row in excess.items()
                                       if row["met_only_cm3"] >= 1),
                             ", ".join(f"{link} {cm3:.0f}" for link, cm3 in held.items()) or "none"])
            met = {"pieces volume <= 1.15": truth["pieces"]["volume_ratio"] <= 1.15,
                   "arm spheres <= 1.25x the true-mesh fit": p95_ratio <= 1.25 and volume_ratio <= 1.25
                   and arm["surface_coverage"] >= TARGETS["surface_coverage"],
                   "planning within 3 points": success >= ideal - 3, "0 colliding paths": planning["export"]["colliding_paths"] == 0,
                   "0 missed": misses["export"]["missed"] == 0, "false alarms <= 1 %": alarms <= 1.0}
            verdicts.append(f"- **{rig}, {words[name]}**: "
                            + ", ".join(f"{what} {'met' if ok else 'NOT met'}" for what, ok in met.items()) + ".")
        reference = next(iter(arms.values()))
        alarm_rows.append([rig, "the export's pieces on the true meshes (reference)",
                           f"{100 * reference['misses']['true meshes as pieces']['false_alarms'] / reference['misses']['configurations']:.1f}",
                           alarm_words(reference["alarms"], "true meshes as pieces")])
        for budget in ("64", "128"):
            f = floor[budget]
            rows.append([rig, f"the same fit on the true meshes, {budget} spheres (reference)", "", "", "", f["count"],
                         f"{100 * f['surface_coverage']:.2f}", f"{f['every_sphere_protrusion_p95_mm']:.1f}",
                         f"{f['volume_ratio']:.2f}", "", "", "", "", ""])
    body = (f"The capture loop at the same pose count and training steps, per rig: {words['all random']} (section "
            f"selfmodel-export's self-model), against a model of {first} random poses trained "
            f"{args.steps - args.views_steps} steps, {args.views} poses added for it"
            " (`selfcal plan --views --rig RIG --model MODEL`: planned to show the cameras what the model has not seen; "
            "or random valid poses, the control), captured by the simulator and relearned on all of them for "
            f"{args.views_steps} steps (`selfmodel train FIRST ADDED --previous MODEL`). Each is exported with the "
            "defaults (the board kept) and measured as in section selfmodel-export: the same held-out poses, "
            f"{args.configurations} configurations among box obstacles, {args.queries} planning queries. Kinematics as "
            "there: where the rig carries the board, the first session's board calibration, placements held.\n\n"
            "Targets: pieces volume ratio <= 1.15; the arm's spheres (without the board's layer) within 1.25x of the "
            "same fitter on the arm's true meshes at the same budget (64), by p95 protrusion over every sphere's "
            "surface and by union volume ratio, at >= 99.5 % surface coverage; planning within 3 points of the true "
            "meshes, 0 colliding paths, 0 missed collisions, false alarms <= 1 %.\n\n"
            + "\n".join(verdicts) + "\n\n"
            + table(["rig", "training", "unseen cm3", "pieces volume ratio", "pieces surface coverage %", "arm spheres",
                     "arm spheres surface coverage %", "arm spheres p95 mm, every sphere (x the true-mesh fit at 64)",
                     "arm spheres union volume ratio (x the true-mesh fit at 64)", "missed collisions", "false alarms %",
                     "planning success % vs true meshes", "colliding paths", "export s"], rows)
            + "\n\nUnseen volume per link (cm3, the export's report: the carved body's outer layer no camera saw "
              "through or met at >= 3 recorded poses; matter only because unknown):\n\n"
            + table(["rig", "training", "unseen cm3 per link"], unseen_rows)
            + "\n\nWhere the false alarms are (as in section selfmodel-export: the link pairs flagged at most of them, "
              "each with its share and, in brackets, how far apart the true meshes of that pair are there, median mm):\n\n"
            + table(["rig", "training", "false alarms %", "pairs behind most of them"], alarm_rows)
            + "\n\nWhat the unseen count misses: the outer layer of each model's learned bodies (the same 5 mm cells) "
              "more than 10 mm outside the true link (the board counts as the tip's), cm3, by what the training "
              "cameras said at >= 3 recorded poses: seen through (the export carves it), only met (a reading "
              "ended there, never went through: counted as seen, so the view planner has nothing to show and "
              "the carving keeps it), unseen; and what the export took out of links other than the tip as the "
              "board's plate (cells in the plate's box at half the recorded poses or more: a plate that turns about "
              "the last joint sweeps one disc in the frame of the link before it, whose network learns it; the "
              "export report's board.held_by_other_links_cm3, 3 mm cells). Evaluation only (reads truth/):\n\n"
            + table(["rig", "training", "outside cm3", "seen through", "only met", "unseen", "only met per link",
                     "taken out by the export as the board, cm3"], met_rows))
    command = "scripts/bench_export.py " + " ".join(sys.argv[1:])
    write_section("selfmodel-views-export", "Collision models after a view-planned capture", body, command.strip())


def placement_error(model_path: Path, heldout: Path) -> dict:
    """How far each link of the model's kinematics stands off the true arm at the held-out poses (its
    commanded angles), the part that changes with the pose: after the one rigid transform of the
    whole arm that best lays it onto the truth (the camera frame the model was trained in may sit
    another way on the base) and, per link, after the constant offset its own learned shape absorbs.
    link -> {"p95_mm", "max_mm"} over the link's mesh vertices and the poses. Reads truth/."""
    from scipy.spatial.transform import Rotation

    from capture.session import load_session
    from rigs.transforms import transform_points
    from selfmodel.evaluation.export_truth import load_truth
    from selfmodel.model.models import SelfModel

    truth = load_truth(heldout, load_session(heldout).pose_ids)
    model = SelfModel.load(model_path)
    learned = model.base_T_links(truth.q_commanded)[:, [model.link_names.index(link) for link in truth.link_names]]
    vertices = {link: np.asarray(truth.meshes[link].vertices)[::max(1, len(truth.meshes[link].vertices) // 300)]
                for link in truth.link_names}
    poses = range(len(truth.pose_ids))
    true_points = np.vstack([transform_points(truth.base_T_links[p, i], vertices[link])
                             for p in poses for i, link in enumerate(truth.link_names)])
    model_points = np.vstack([transform_points(learned[p, i], vertices[link])
                              for p in poses for i, link in enumerate(truth.link_names)])
    # The rigid alignment (Kabsch) of the model's points onto the true ones.
    mean_true, mean_model = true_points.mean(axis=0), model_points.mean(axis=0)
    u, _, vt = np.linalg.svd((model_points - mean_model).T @ (true_points - mean_true))
    rotation = vt.T @ np.diag([1.0, 1.0, np.sign(np.linalg.det(vt.T @ u.T))]) @ u.T
    align = np.eye(4)
    align[:3, :3], align[:3, 3] = rotation, mean_true - rotation @ mean_model
    out = {}
    for i, link in enumerate(truth.link_names):
        offsets = np.array([np.linalg.inv(align @ learned[p, i]) @ truth.base_T_links[p, i] for p in poses])
        mean_rotation = Rotation.from_matrix(offsets[:, :3, :3]).mean().as_matrix()
        steady = vertices[link] @ mean_rotation.T + offsets[:, :3, 3].mean(axis=0)
        error = np.array([np.linalg.norm(vertices[link] @ offsets[p, :3, :3].T + offsets[p, :3, 3] - steady, axis=1)
                          for p in poses])
        out[link] = {"p95_mm": 1000.0 * float(np.percentile(error, 95)), "max_mm": 1000.0 * float(error.max())}
    return out


def before_rows(before: Path, rig: str, queries: int, checks: int, configurations: int) -> list | None:
    """The earlier run's export on the same held-out poses, configurations and first ``queries``
    queries, from its cached rows (None where they are missing)."""
    rows = before / "rows" / rig
    per = configurations // SCENES

    def read(name: str):
        return json.loads((rows / name).read_text())

    try:
        if (rows / "truth-export-pieces.json").is_file():  # rows cached world by world
            truth = {"pieces": read("truth-export-pieces.json")["pieces"],
                     "spheres": read("truth-export-spheres.json")["spheres"]}
            misses = []
            for s in range(SCENES):
                true = set(read(f"misses/scene-{s}-{per}-true.json")["flagged"])
                flagged = set(read(f"misses/scene-{s}-{per}-export.json")["flagged"])
                misses.append({"missed": len(true - flagged), "false_alarms": len(flagged - true)})
            plans = [read(f"planning/query-{k}-{checks}checks-export.json") for k in range(queries)]
        else:  # an earlier layout: one file for all worlds
            truth = read("truth.json")["export"]
            misses = [read(f"misses/scene-{s}-{per}.json")["export"] for s in range(SCENES)]
            plans = [read(f"planning/query-{k}-{checks}checks.json")["export"] for k in range(queries)]
    except (OSError, KeyError, ValueError):
        return None
    refused = sum(row["reason"] in ("start in collision", "goal in collision") for row in plans)
    return [truth["pieces"]["protrusion_p95_mm"], truth["pieces"]["volume_ratio"], truth["spheres"]["surface_coverage"],
            truth["spheres"]["protrusion_p95_mm"], truth["spheres"]["volume_ratio"], sum(m["missed"] for m in misses),
            100 * sum(m["false_alarms"] for m in misses) / configurations, 100 * sum(row["solved"] for row in plans) / queries,
            refused, sum(row["colliding"] for row in plans)]


def starts_words(starts: dict | None) -> str:
    """The sphere fit's greedy starts as the report lists them, the one kept first; '' for an export
    written before the report listed them."""
    if not starts:
        return ""
    each = " / ".join(f"{start['bulge_mm']:g} mm{' (refined)' if start.get('refined', True) else ''}: "
                      f"{100 * start['uncovered']:.2f} % of the surface left out, "
                      + (f"p95 {start['stands_out_p95_mm']:.1f} mm beyond the body, "
                         if start.get("stands_out_p95_mm") is not None else "")
                      + f"union {start['union_volume_cm3']:.0f} cm3" for start in starts["starts"])
    return f"sphere fit, greedy starts: {each}; the {starts['bulge_mm']:g} mm start kept; "


def write(results: dict, args) -> None:
    from selfmodel.export.settings import MarginSettings, PieceSettings
    from selfmodel.export.sphere_groups import STAND_OUT_TIE
    from selfmodel.export.spheres import UNCOVERED_TIE

    pieces = PieceSettings()

    recorded_rows_table, truth_table, sphere_table, miss_table, plan_table, notes = [], [], [], [], [], []
    alarm_table = []
    verdicts = []
    for rig, result in results.items():
        recorded = result["recorded"]
        recorded_rows_table.append([rig, recorded["poses"]] + [recorded.get(name, "-") for name in (
            "export", "export in mplib 0.2.1", "spheres (cuRobo's check)", "URDF collision meshes")])
        for name, figures in result["truth"].items():
            if name in ("seconds",):
                continue
            for kind in ("pieces", "spheres"):
                if kind not in figures:
                    continue
                f = figures[kind]
                truth_table.append([rig, name if kind == "pieces" or name != "export" else "export", kind,
                                    f"{100 * f['surface_coverage']:.2f}", f"{100 * f['coverage']:.2f}",
                                    f"{f['surface_gap_mean_mm']:.1f}", f"{f['surface_gap_p95_mm']:.1f}",
                                    f"{f['largest_gap_mm']:.1f}", f"{100 * f['protrusion_share']:.0f}",
                                    f"{f['protrusion_mean_mm']:.1f}", f"{f['protrusion_p95_mm']:.1f}",
                                    f"{f['volume_ratio']:.2f}", f"{f.get('summed_volume_ratio', float('nan')):.2f}"
                                    if kind == "spheres" else ""])
        spheres = result["truth"]["export"]["spheres"]
        sphere_table.append(sphere_row(rig, "export (learned body + margin)", spheres))
        for part, words in (("arm", "export: the arm's spheres, against the arm without its board"),
                            ("board", "export: the board's spheres, against the plate alone")):
            found = result["truth"].get("sphere parts", {}).get(part)
            if found is not None:
                sphere_table.append(sphere_row(rig, words, found))
        for budget, floor in result["floor"].items():
            if not budget.isdigit():  # the row's seconds, inputs
                continue
            sphere_table.append(sphere_row(rig, f"same fit on the true meshes, {budget} spheres (floor)", floor))
        misses = result["misses"]
        miss_table.append([rig, misses["configurations"], misses["true collisions"], misses["export"]["missed"],
                           misses["URDF collision meshes"]["missed"],
                           f"{100 * misses['export']['false_alarms'] / misses['configurations']:.1f}",
                           f"{100 * misses['URDF collision meshes']['false_alarms'] / misses['configurations']:.1f}",
                           misses["true meshes as pieces"]["missed"],
                           f"{100 * misses['true meshes as pieces']['false_alarms'] / misses['configurations']:.1f}"])
        for name, words in (("export", "export"), ("true meshes as pieces", "the export's pieces on the true meshes")):
            alarm_table.append([rig, words, result["alarms"][name]["configurations"], alarm_words(result["alarms"], name)])
        planning = result["planning"]
        queries = planning["queries"]
        plan_table.append([rig, queries] + [f"{100 * planning[name]['solved'] / queries:.0f} ({planning[name]['colliding_paths']})"
                                            for name in ("export", "true meshes", "URDF collision meshes",
                                                         "true meshes as pieces")])
        report = result["report"]
        srdf = report["srdf"]
        margins = {link: row.get("margin_mm", report["margin_mm"]) for link, row in report["links"].items()}
        mount = result.get("mount_plane_z")
        notes.append(f"{rig}: the sessions state " + ("no mount plane" if mount is None else
                                                      f"the surface the base stands on, z = {mount:g} m") + "; margin ("
                     f"{report['margin_mode']}) "
                     + ", ".join(f"{link} {value:.1f}" for link, value in margins.items())
                     + f" mm; SRDF over {srdf['samples']} "
                     f"samples: {srdf['adjacent']} adjacent, {srdf['default']} default, {srdf['always']} always "
                     f"(threshold {100 * srdf['always_threshold']:g} %), {srdf['never']} never, {srdf['enabled']} enabled "
                     f"of {srdf['checked_pairs']} pairs; {srdf['kept_enabled']} kept enabled because the description's meshes "
                     f"can touch; separation: {report['separation']}; {starts_words(report.get('sphere_starts'))}"
                     "planning failures: "
                     + "; ".join(f"{name} {planning[name]['failures']}" for name in WORLDS))
        refused = result["refused_ends"]["rows"]
        if refused:
            def is_box(row):
                return "obstacle:" in row["pair"]

            def spread(values):
                return f"{min(values):.1f}-{max(values):.1f} mm, median {float(np.median(values)):.1f} mm" if values else "-"

            boxes = [row["true_clearance_mm"] for row in refused if is_box(row) and row["true_clearance_mm"] is not None]
            own = [row["true_clearance_mm"] for row in refused if not is_box(row) and row["true_clearance_mm"] is not None]
            notes.append(f"{rig}: planning ends free for the true arm that the export refuses: "
                         f"{len({(row['query'], row['end']) for row in refused})} ends, {len(refused)} contacts: "
                         f"{len(refused) - len(own)} with a box (the true arm's meshes {spread(boxes)} from it there), "
                         f"{len(own)} between the arm's own links (the true meshes {spread(own)} apart there); the exported "
                         f"pieces stand out of the true surface by "
                         f"{result['truth']['export']['pieces']['protrusion_p95_mm']:.1f} mm at the 95th percentile. Each "
                         "contact, with the margins of the links it names:\n\n"
                         + table(["query", "end", "pair", "true clearance mm", "margins mm"],
                                 [[row["query"], row["end"], row["pair"],
                                   "-" if row["true_clearance_mm"] is None else f"{row['true_clearance_mm']:.1f}",
                                   " / ".join(f"{margins[link]:.1f}" for link in row["pair"].split("/") if link in margins)]
                                  for row in sorted(refused, key=lambda row: (row["pair"], row["query"]))]) + "\n")
        carving = report.get("carving") or {}
        if carving.get("status") == "carved":
            below = sum(volume * carving.get("below_mount", {}).get(link, 0) / max(carving["cells_removed"].get(link, 1), 1)
                        for link, volume in carving["volume_removed_cm3"].items())
            notes.append(f"{rig}: carving by the training depth images: {sum(carving['volume_removed_cm3'].values()):.0f} cm3 "
                         f"removed where a camera saw through (the reading beyond the cell by {carving['sigmas']:g} depth-noise "
                         f"sigma plus half a cell's diagonal) or that lay below the stated mount plane "
                         f"({below:.0f} cm3 of it), at >= {carving['min_poses']} of {carving['poses']} recorded poses ("
                         + ", ".join(f"{link} {volume:.0f}" for link, volume in carving["volume_removed_cm3"].items() if volume >= 1)
                         + " cm3)")
        elif carving:
            notes.append(f"{rig}: not carved: {carving.get('warning')}")
        export_rate = 100 * planning["export"]["solved"] / queries
        ideal_rate = 100 * planning["true meshes"]["solved"] / queries
        verdicts.append(
            f"- **{rig}** ({result['kinematics']}): recorded poses in collision {recorded['export']} (bar 0); missed collisions "
            f"{misses['export']['missed']} of {misses['true collisions']} (bar 0); planning success {export_rate:.0f} % vs "
            f"{ideal_rate:.0f} % on the true meshes ({export_rate - ideal_rate:+.0f} points, bar -3), colliding paths "
            f"{planning['export']['colliding_paths']} (bar 0); pieces surface coverage "
            f"{100 * result['truth']['export']['pieces']['surface_coverage']:.2f} % and spheres "
            f"{100 * spheres['surface_coverage']:.2f} % (bar 99.5); {spheres['count']} spheres ({report.get('spheres_arm', spheres['count'])} "
            f"for the arm, bar 64, and {report.get('spheres_board', 0)} for the calibration board), p95 protrusion "
            f"{spheres['protrusion_p95_mm']:.1f} mm over the union's outer surface and "
            f"{spheres['every_sphere_protrusion_p95_mm']:.1f} mm over every sphere's surface, volume ratio "
            f"{spheres['volume_ratio']:.2f} union / {spheres['summed_volume_ratio']:.2f} summed (the arm's bar, within 1.25x "
            "of the same fit on the arm's true meshes, is judged in section selfmodel-views-export)"
            + ("" if "sphere parts" not in result["truth"] else
               f"; the arm's spheres alone, against the arm without its board: volume ratio "
               f"{result['truth']['sphere parts']['arm']['volume_ratio']:.2f} union, p95 protrusion "
               f"{result['truth']['sphere parts']['arm']['protrusion_p95_mm']:.1f} mm")
            + f"; beside the export's pieces made on the true meshes: pieces volume ratio "
              f"{result['truth']['export']['pieces']['volume_ratio']:.3f} vs "
              f"{result['truth']['true meshes as pieces']['pieces']['volume_ratio']:.3f} (bar 1.15), false alarms "
              f"{100 * misses['export']['false_alarms'] / misses['configurations']:.2f} % vs "
              f"{100 * misses['true meshes as pieces']['false_alarms'] / misses['configurations']:.2f} % (bar 1 %), planning "
              f"{export_rate:.0f} % vs {100 * planning['true meshes as pieces']['solved'] / queries:.0f} %.")
    body = ("Each rig: 300 training poses (seed 1) captured by the simulator, which now refuses poses where the true "
            f"meshes pass through each other; a structured self-model trained {args.steps} steps (seed 0, 1 thread; the "
            "machine was shared with other jobs, so no wall-clock figure here is comparable), on kinematics named per rig: "
            "where the rig carries the calibration board, `selfcal calibrate` of the training session first (rigid, from "
            "its board images) and the self-model on its URDF and cameras with the joint placements held (`selfmodel "
            "train --placements auto`), else on the session's description with the placements fitted from depth; "
            "`selfcal selfmodel export` "
            "with its defaults (automatic margins, each link its own, 8 pieces a link, 64 spheres for the arm's links, the "
            "declared calibration board kept: one box in the URDF and a layer of at most 256 spheres listed under the tip, "
            "SRDF over 10,000 samples, bodies carved where the training cameras saw through). The URDF baseline is the description's own collision meshes with an SRDF made by the same rules. "
            "The reference 'the export's pieces on the true meshes' is the export's own piece pipeline run on the true "
            f"link meshes (the default {pieces.max_pieces} pieces of at most {pieces.max_vertices} vertices a link, each "
            f"grown by the {1000 * MarginSettings().floor:g} mm margin floor, the "
            "true plate as a box grown by the floor, an SRDF by the same rules, no cuts between neighbours; "
            "evaluation only): what pieces of this kind give when nothing is learned.\n\n"
            + "\n".join(verdicts)
            + "\n\nRecorded poses in self-collision (the arm really stood at all of them):\n\n"
            + table(["rig", "poses", "export URDF + SRDF (Pinocchio/coal)", "export in mplib 0.2.1", "spheres (cuRobo's check)",
                     "URDF collision meshes + SRDF"], recorded_rows_table)
            + f"\n\nAgainst the true meshes (read as solids) at {TRUTH_POSES} held-out poses (seed 101), cuRobo's metric "
              "definitions on the posed arm: surface coverage (true surface samples inside; faces hidden in another link "
              "left out), coverage (points inside the true body inside), surface gap (how far uncovered true surface lies outside: mean over the uncovered samples, p95 over all, largest), protrusion share of the outer surface "
              "outside the body with the mean and p95 of how far, volume ratio of the union (and of summed sphere volumes, "
              "cuRobo's):\n\n"
            + table(["rig", "geometry", "kind", "surface coverage %", "coverage %", "surface gap mean mm",
                     "surface gap p95 mm", "largest gap mm", "protrusion share %",
                     "protrusion mean mm", "protrusion p95 mm", "volume ratio", "summed sphere volume ratio"], truth_table)
            + "\n\nSpheres for cuRobo (targets: surface coverage >= 99.5 % with <= 64 spheres for the arm, and the arm's "
              "spheres within 1.25x of the same fitter on the arm's true meshes, judged in section selfmodel-views-export). The export's spheres are fitted as one union (a greedy cover for each of five "
              "bulges, each refined: every link's centres and radii moved together on coverage, protrusion and "
              "contact at the recorded poses, selfmodel/export/sphere_fit.py; the refined cover kept that leaves the least "
              f"of the surface out, within {100 * UNCOVERED_TIE:g} %, then stands out least: the 95th percentile "
              f"over every sphere's surface beyond the body it is fitted to, within {1000 * STAND_OUT_TIE:g} mm, then has the smallest union), the arm's links "
              "on one budget and the declared board on its own "
              "(selfmodel/export/sphere_groups.py). Protrusion two ways: over the union's outer surface (the stricter) "
              "and over every sphere's whole surface, the parts inside another sphere too (cuRobo's reading; those "
              "parts lie nearer the body). Where the rig carries a board, its two groups are also measured apart: "
              "the arm's spheres (the tip's own ones with the other links') against the true arm without the board, "
              "the board's against the true plate alone. The floor rows run the one-budget fit on the true meshes themselves, arm "
              "and 3.5 mm board sharing the budget (no model error, no margin, nothing to keep apart; evaluation "
              "only); the arm and board groups on the true meshes are in section selfmodel-spheres "
              "(scripts/bench_spheres.py):\n\n"
            + table(["rig", "spheres of", "spheres", "surface coverage %", "protrusion p95 mm (union's outer surface)",
                     "protrusion p95 mm (every sphere's surface)", "union volume ratio", "summed volume ratio"],
                    sphere_table)
            + f"\n\nMissed collisions: random configurations within the joint limits among {SCENES} scenes of {BOXES} boxes "
              "(5-20 cm, 0.3-0.75 of the reach from the base axis); the true arm collides when its meshes touch a box or "
              "two of its links joined by two or more moving joints touch:\n\n"
            + table(["rig", "configurations", "true collisions", "missed by the export", "missed by the URDF meshes",
                     "export false alarms %", "URDF false alarms %", "missed by the export's pieces on the true meshes",
                     "their false alarms %"], miss_table)
            + "\n\nWhere the false alarms are: the link pairs flagged at most of them (an obstacle is obstacle:NAME), "
              "each with its share of the false alarms and, in brackets, how far apart the true meshes of that pair are "
              "there (median, mm): a pair whose true meshes clear each other by less than the pieces' margin and slack "
              "is a false alarm wherever the arm folds it that close:\n\n"
            + table(["rig", "world", "false alarms", "pairs behind most of them"], alarm_table)
            + f"\n\nPlanning: OMPL 2.0.1 RRT-Connect (a budget of {args.plan_checks} collision checks a query for every "
              "world, so a slower checker is not a worse planner; motions checked every 0.5 degree of joint-space "
              "distance, then simplified for up to 1 s) between random configurations free for the true arm, among boxes "
              "placed as above; success % (paths that touch the true arm when replayed at 0.25 degree steps):\n\n"
            + table(["rig", "queries", "export", "true meshes (ideal)", "URDF collision meshes",
                     "the export's pieces on the true meshes"], plan_table)
            + "\n\n" + "\n".join(f"- {note}" for note in notes))
    compare = []
    for rig, result in results.items():
        if args.before is None:
            continue
        earlier = before_rows(args.before, rig, result["planning"]["queries"], args.plan_checks, args.configurations)
        if earlier is None:
            continue
        truth, misses, planning = result["truth"]["export"], result["misses"], result["planning"]
        queries = planning["queries"]
        now = [truth["pieces"]["protrusion_p95_mm"], truth["pieces"]["volume_ratio"], truth["spheres"]["surface_coverage"],
               truth["spheres"]["protrusion_p95_mm"], truth["spheres"]["volume_ratio"], misses["export"]["missed"],
               100 * misses["export"]["false_alarms"] / misses["configurations"],
               100 * planning["export"]["solved"] / queries,
               sum(planning["export"]["failures"].get(reason, 0) for reason in ("start in collision", "goal in collision")),
               planning["export"]["colliding_paths"]]
        for label, values in ((f"before ({args.before})", earlier), ("this run", now)):
            compare.append([rig, label, f"{values[0]:.1f}", f"{values[1]:.2f}", f"{100 * values[2]:.2f}", f"{values[3]:.1f}",
                            f"{values[4]:.2f}", values[5], f"{values[6]:.1f}", f"{values[7]:.0f}", values[8], values[9]])
    placed = []
    for rig, result in results.items():
        # The earlier run's model trained as this one was (on its calibration or on the description).
        earlier = args.before / result["model"] if args.before is not None else None
        runs = [(f"before ({args.before})", placement_error(earlier, args.before / f"{rig}-{HELDOUT_POSES}-{HELDOUT_SEED}"))
                if earlier is not None and (earlier / "config.json").is_file() else None,
                (f"this run: {result['kinematics']}", result["placements"])]
        for label, errors in [run for run in runs if run is not None]:
            worst = max(errors, key=lambda link: errors[link]["max_mm"])
            placed.append([rig, label, ", ".join(f"{link} {row['max_mm']:.1f}" for link, row in errors.items()),
                           f"{max(row['p95_mm'] for row in errors.values()):.1f}", f"{worst} {errors[worst]['max_mm']:.1f}"])
    body += (f"\n\nJoint placements of each self-model against the true arm, at the {HELDOUT_POSES} held-out poses' "
             "commanded angles: "
             "how far a link's mesh vertices stand off where the truth has them, the part that changes with the pose "
             "(after the one rigid transform of the whole arm that best aligns it, the frame the cameras were posed in, "
             "and per link after the constant offset its own learned shape absorbs), mm:\n\n"
             + table(["rig", "kinematics", "largest per link mm", "p95 over links mm", "worst link mm"], placed))
    if compare:
        body += ("\n\nAn earlier run's export (--before) beside this one, on the same held-out poses, configurations and "
                 f"planning queries (the earlier run's cached rows){': ' + args.before_note if args.before_note else ''}:\n\n"
                 + table(["rig", "export", "pieces protrusion p95 mm", "pieces volume ratio", "spheres surface coverage %",
                          "spheres protrusion p95 mm", "spheres volume ratio", "missed collisions", "false alarms %",
                          "planning success %", "refused ends", "colliding paths"], compare))
    command = "scripts/bench_export.py " + " ".join(sys.argv[1:])
    write_section("selfmodel-export", "Collision models a planner can use", body, command.strip())


if __name__ == "__main__":
    main()
