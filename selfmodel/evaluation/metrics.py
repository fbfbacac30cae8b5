"""How close a self-model is to the true arm of a simulated session (evaluation only: reads truth/).

The truth is the session's ``truth/robot.urdf`` visual meshes (plus the calibration board on the
tip, when the rig carries one) posed at ``truth/joints_reached.csv``; the model is queried at the
commanded angles of ``joints.csv``, as a user would. Figures over the session's poses:

- ``chamfer_l1_mm``: (accuracy + completeness) / 2 between surface samples of the model's mesh
  and of the true arm (faces hidden where links join are not surface);
  ``chamfer_pct_workspace``: the same in percent of the workspace's largest extent;
- ``fscore``: F-score of those samples at 1 % of that extent;
- ``iou``: volumetric IoU on points uniform in the workspace box;
- ``false_free_rate``: fraction of points inside the true body that the model calls free;
- ``queries_per_s``: the query speed as selfcal states it everywhere (``query_speed``): occupancy
  answers per wall second, 100k points uniform in the model's workspace box per call at one
  configuration a call, after one warm-up call, with the answerer's threads (``query_threads``) and
  the machine's 1-minute load average when measured (``query_load``) beside it; ``baked_``: the
  same of the model's baked grids.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np
import trimesh

from capture.session import Session
from capture.truth_files import reached_joints, truth_parameters
from rigs.errors import InputError
from rigs.link_meshes import link_meshes
from rigs.simulator import board_plate
from rigs.solids import occupancy_vote, raycasting_scene, surface_distance
from rigs.transforms import axis_angle, exp6, log6
from selfmodel.inspect.meshing import arm_mesh, link_meshes_of
from selfmodel.model.baked import BAKED, agreement, bake, load_baked
from selfmodel.model.chain import ArmLinks, link_poses_numpy

HIDDEN_OFFSET = 0.002  # m: a true surface sample whose outward neighbour is inside the arm is a hidden face


def _o3d():
    import open3d as o3d  # open3d adds 1.2 s to a start; only this step needs it

    return o3d


@dataclass
class TrueArmPoses:
    """The true arm at the session's poses: meshes per link (link frame), poses (P, L, 4, 4), q commanded."""

    link_names: list[str]
    meshes: dict[str, trimesh.Trimesh]
    base_T_links: np.ndarray
    q_commanded: np.ndarray
    pose_ids: list[str]


def true_board_mesh(parameters, manifest: dict) -> trimesh.Trimesh | None:
    """The true board on the tip; ``parameters``: truth/parameters.json as a Table, or None."""
    board = (manifest.get("sensors") or {}).get("board")
    tip_T_board = None if parameters is None else parameters.get("tip_T_board", "matrix", None, shape=(4, 4))
    if not board or tip_T_board is None:
        return None

    plate = board_plate(tuple(board["squares"]), float(board["square_m"]))
    return plate.apply_transform(tip_T_board)


def true_arm(session: Session, pose_ids: list[str] | None = None) -> TrueArmPoses:
    """The true posed arm of a simulated session (InputError for a session without truth/)."""
    truth = session.path / "truth"
    urdf = truth / "robot.urdf"
    reached_path = truth / "joints_reached.csv"
    if not urdf.is_file() or not reached_path.is_file():
        raise InputError(f"{session.path}: not a simulated session (truth/robot.urdf or truth/joints_reached.csv is "
                         f"missing), so there is no true shape to compare with.")
    reached = reached_joints(session.path, session.joint_names)
    pose_ids = list(session.pose_ids if pose_ids is None else pose_ids)
    missing = [p for p in pose_ids if p not in reached]
    if missing:
        raise InputError(f"{reached_path}: pose {missing[0]!r} has no row.")
    spec = ArmLinks.from_urdf(urdf, session.base_link, session.tip_link, session.held_joints)
    meshes = link_meshes(urdf, spec.link_names)
    board = true_board_mesh(truth_parameters(session.path, required=False), session.manifest)
    if board is not None:
        tip = session.tip_link
        meshes[tip] = trimesh.util.concatenate([meshes[tip], board]) if tip in meshes else board
    q_reached = np.array([reached[p] for p in pose_ids])
    commanded = {p: session.q[i] for i, p in enumerate(session.pose_ids)}
    return TrueArmPoses(spec.link_names, meshes, link_poses_numpy(spec, q_reached),
                        np.array([commanded[p] for p in pose_ids]), pose_ids)






_DIRECTIONS = np.array([[a, b, c] for a in (-1, 0, 1) for b in (-1, 0, 1) for c in (-1, 0, 1) if (a, b, c) != (0, 0, 0)],
                       dtype=np.float32)
_DIRECTIONS /= np.linalg.norm(_DIRECTIONS, axis=1, keepdims=True)


def _solid(scene, points: np.ndarray) -> np.ndarray:
    """Inside a link mesh: the parity vote, and no straight way out along 26 directions.

    The xArm6's link2 mesh is an open shell with thousands of loose parts; parity alone calls some
    of its grooves inside although the cameras (and the renderer) see straight into them.
    """
    o3d = _o3d()
    inside = occupancy_vote(scene, points)
    rows = np.flatnonzero(inside)
    for direction in _DIRECTIONS:
        if len(rows) == 0:
            break
        rays = np.hstack([points[rows], np.broadcast_to(direction, (len(rows), 3))]).astype(np.float32)
        enclosed = scene.count_intersections(o3d.core.Tensor(rays)).numpy() > 0
        inside[rows[~enclosed]] = False
        rows = rows[enclosed]
    return inside




class PosedTruth:
    """The true arm at one pose, asked per link (overlapping link meshes break a union's inside test)."""

    def __init__(self, scenes: dict[str, object], meshes: dict[str, trimesh.Trimesh], link_names: list[str],
                 base_T_links: np.ndarray):
        self.items = [(scenes[name], np.linalg.inv(base_T_links[i]), base_T_links[i], meshes[name])
                      for i, name in enumerate(link_names) if name in scenes]

    def occupied(self, points: np.ndarray) -> np.ndarray:
        inside = np.zeros(len(points), dtype=bool)
        for scene, link_T_base, _, _ in self.items:
            inside |= _solid(scene, trimesh.transform_points(points, link_T_base))
        return inside

    def distance(self, points: np.ndarray) -> np.ndarray:
        return np.min([surface_distance(scene, trimesh.transform_points(points, link_T_base))
                       for scene, link_T_base, _, _ in self.items], axis=0)

    def surface_samples(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """Samples (n, 3) of the outer surface (faces hidden inside another link, where links join, dropped)."""
        mesh = trimesh.util.concatenate([m.copy().apply_transform(pose) for _, _, pose, m in self.items])
        points, faces = trimesh.sample.sample_surface(mesh, count, seed=int(rng.integers(2**31)))
        return points[~self.occupied(points + HIDDEN_OFFSET * mesh.face_normals[faces])]

    @property
    def bounds(self) -> np.ndarray:
        corners = np.concatenate([trimesh.transform_points(m.bounds, pose) for _, _, pose, m in self.items])
        return np.array([corners.min(axis=0), corners.max(axis=0)])


QUERY_BATCH = 100_000  # points a call: what a planner's collision check of a few thousand spheres asks at once
QUERY_SPEED = ("queries/s: occupancy answers per wall second, 100k points uniform in the workspace a call, "
               "one configuration a call, after a warm-up call (selfmodel.evaluation.metrics.query_speed; "
               "`selfmodel eval` prints the same)")


def query_speed(answerer, q: np.ndarray, rng: np.random.Generator, repeats: int = 3,
                bounds: np.ndarray | None = None) -> dict:
    """The query speed (see the module docstring) of ``answerer`` (a self-model or its baked grids) at
    configurations ``q`` (N, dof), one per call in turn: ``queries_per_s`` (wall), ``queries_per_cpu_s``
    (this process's CPU time, all its threads: what a shared machine does not depress), ``threads``
    (torch's intra-op threads for a network, the grids' own for baked grids) and ``load`` (1-minute
    load average before). ``bounds`` (2, 3): the box the points are drawn in (the answerer's own)."""
    lo, hi = answerer.bounds if bounds is None else bounds
    points = rng.uniform(lo, hi, (QUERY_BATCH, 3)).astype(np.float32)
    load = os.getloadavg()[0]
    answerer.occupancy(points, q[0])  # warm up
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(repeats):
        answerer.occupancy(points, q[i % len(q)])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    threads = answerer.threads if answerer.kind == "baked" else torch_threads()
    return {"queries_per_s": QUERY_BATCH * repeats / wall, "queries_per_cpu_s": QUERY_BATCH * repeats / max(cpu, 1e-9),
            "threads": threads, "load": load}


def torch_threads() -> int:
    import torch  # the networks' own library; evaluation of a baked grid alone does not need it

    return torch.get_num_threads()


def evaluate(model, session: Session, rng: np.random.Generator, pose_ids: list[str] | None = None,
             voxel: float = 0.005, surface_samples: int = 30_000, volume_samples: int = 50_000,
             progress=None) -> dict:
    """The figures of the module docstring for ``model`` on the poses of a simulated ``session``."""
    truth = true_arm(session, pose_ids)
    if list(session.joint_names) != list(model.joint_names):
        raise InputError(f"{session.path}: its joints ({', '.join(session.joint_names)}) are not the model's "
                         f"({', '.join(model.joint_names)}).")
    lo, hi = model.bounds
    extent = float(np.max(hi - lo))
    tau = 0.01 * extent
    accuracy, completeness, inter, union, inside_free, inside_total = [], [], 0, 0, 0, 0
    learned_links = link_meshes_of(model, min(voxel, 0.004)) if model.kind == "structured" else None
    scenes = {name: raycasting_scene(mesh) for name, mesh in truth.meshes.items()}
    for number, pose in enumerate(truth.pose_ids):
        q = truth.q_commanded[number]
        posed = PosedTruth(scenes, truth.meshes, truth.link_names, truth.base_T_links[number])
        true_points = posed.surface_samples(surface_samples, rng)
        model_mesh = arm_mesh(model, q, voxel, learned_links)
        if len(model_mesh.faces):
            model_points, faces = trimesh.sample.sample_surface(model_mesh, surface_samples, seed=int(rng.integers(2**31)))
            if learned_links is not None:
                # Posed link surfaces overlap where links join: keep the union's outer surface only.
                outer = model.occupancy(model_points + HIDDEN_OFFSET * model_mesh.face_normals[faces], q) <= 0.5
                model_points = model_points[outer]
            accuracy.append(posed.distance(model_points))
            completeness.append(surface_distance(raycasting_scene(model_mesh), true_points))
        else:
            completeness.append(np.full(len(true_points), np.inf))
        uniform = rng.uniform(lo, hi, (volume_samples, 3))
        true_occupied = posed.occupied(uniform)
        model_occupied = model.occupancy(uniform, q) > 0.5
        inter += int(np.sum(true_occupied & model_occupied))
        union += int(np.sum(true_occupied | model_occupied))
        # Inside the true body: the uniform samples that fall in it, plus samples in its bounding box.
        box = rng.uniform(posed.bounds[0], posed.bounds[1], (volume_samples, 3))
        inner = np.concatenate([uniform[true_occupied], box[posed.occupied(box)]])
        inside_free += int(np.sum(model.occupancy(inner, q) <= 0.5))
        inside_total += len(inner)
        if progress is not None:
            progress(number + 1, len(truth.pose_ids))
    accuracy_all = np.concatenate(accuracy) if accuracy else np.array([np.inf])
    completeness_all = np.concatenate(completeness)
    chamfer = (accuracy_all.mean() + completeness_all.mean()) / 2
    precision = float(np.mean(accuracy_all < tau))
    recall = float(np.mean(completeness_all < tau))
    fscore = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return {
        "kind": model.kind,
        "session": str(session.path),
        "poses": len(truth.pose_ids),
        "workspace_extent_m": extent,
        "chamfer_l1_mm": float(chamfer * 1000),
        "chamfer_pct_workspace": float(chamfer / extent * 100),
        "accuracy_mm": float(accuracy_all.mean() * 1000),
        "completeness_mm": float(completeness_all.mean() * 1000),
        "fscore": float(fscore),
        "fscore_tau_mm": tau * 1000,
        "precision": precision,
        "recall": recall,
        "iou": inter / union if union else 0.0,
        "false_free_rate": inside_free / inside_total if inside_total else 0.0,
        **speed_figures(model, truth.q_commanded, rng),
        **baked_figures(model, truth.q_commanded, rng),
    }


def baked_figures(model, q: np.ndarray, rng: np.random.Generator) -> dict:
    """A structured model's baked grids beside the network: queries per second (same batches) and
    how often the two disagree (``selfmodel.model.baked.agreement``); {} for a free model."""
    if model.kind != "structured":
        return {}

    folder = model.folder
    baked = load_baked(model, folder) if folder is not None and (folder / BAKED).is_file() else bake(model)
    return {**speed_figures(baked, q, rng, "baked_"), "baked_pitch_mm": baked.pitch * 1000,
            **agreement(model, baked, q[:5], rng)}


def speed_figures(answerer, q: np.ndarray, rng: np.random.Generator, prefix: str = "") -> dict:
    """``query_speed`` as figures: ``{prefix}queries_per_s``, ``{prefix}query_threads``, ``{prefix}query_load``."""
    speed = query_speed(answerer, q, rng)
    return {f"{prefix}queries_per_s": speed["queries_per_s"], f"{prefix}query_threads": speed["threads"],
            f"{prefix}query_load": speed["load"]}


def label_errors(data, session: Session, rng: np.random.Generator, per_pose: int = 4000,
                 far: float = 0.02, deep: float = 0.01) -> dict:
    """How wrong a training set's labels are against the true arm of the simulated ``session``
    (its only session, configurations in pose order): the share of free labels inside the true
    body (and more than ``deep`` m inside it: beyond what depth noise explains), and of occupied
    labels more than ``far`` m outside it. Evaluation only: reads truth/."""
    truth = true_arm(session)
    if len(truth.pose_ids) != len(data.q):
        raise InputError(f"{session.path}: {len(truth.pose_ids)} poses, the labels have {len(data.q)} configurations.")
    scenes = {name: raycasting_scene(mesh) for name, mesh in truth.meshes.items()}
    free_inside = free_deep = free_total = occupied_far = occupied_total = 0
    for config in range(len(data.q)):
        rows = np.flatnonzero(data.config == config)
        if not len(rows):
            continue
        rows = rng.choice(rows, min(per_pose, len(rows)), replace=False)
        points, occupied = data.points[rows].astype(float), data.occupied[rows] > 0.5
        posed = PosedTruth(scenes, truth.meshes, truth.link_names, truth.base_T_links[config])
        inside = posed.occupied(points)
        free_inside += int(np.sum(inside & ~occupied))
        wrong = inside & ~occupied
        if wrong.any():
            free_deep += int(np.sum(posed.distance(points[wrong]) > deep))
        free_total += int(np.sum(~occupied))
        if occupied.any():
            outside = ~inside[occupied]
            occupied_far += int(np.sum(posed.distance(points[occupied][outside]) > far))
            occupied_total += int(occupied.sum())
    return {"free_labels_inside_body": free_inside / max(free_total, 1),
            "free_labels_deep_inside": free_deep / max(free_total, 1),
            "occupied_labels_far_outside": occupied_far / max(occupied_total, 1),
            "free_labels": free_total, "occupied_labels": occupied_total, "labels": len(data.points)}


def true_corrections(session: Session, spec: ArmLinks) -> np.ndarray:
    """(dof, 6) the simulated arm's true joint placements in the self-model's convention
    (``origin @ exp6(delta) @ motion(q)``): placement error, zero offset and a bend of the parent
    link folded into one delta per movable joint. Evaluation only: reads truth/parameters.json."""
    truth = truth_parameters(session.path)
    joints, bends = truth.get("joints", "table"), truth.get("bend_transforms", "table")
    out = np.zeros((spec.dof, 6))
    movable = [joint for joint in spec.joints if joint.type != "fixed"]
    for i, joint in enumerate(movable):
        entry = joints.get(joint.name, "table")
        true = exp6(entry.get("placement_delta", "vector", length=6))
        true[:3, :3] = true[:3, :3] @ axis_angle(joint.axis, entry.get("zero_offset", "number"))
        bend = bends.get(joint.name, "matrix", np.eye(4), shape=(4, 4))
        out[i] = log6(np.linalg.inv(joint.origin) @ bend @ joint.origin @ true)
    return out
