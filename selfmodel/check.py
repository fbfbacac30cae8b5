"""Where the learned body differs from a description (URDF): per link, the largest deviation.

Two kinds of difference are charged to the link that carries them:

- ``joint``: a joint the link carries sits elsewhere than the description says. Measured as how far
  that joint alone moves everything after it (the child and its descendants, 95th percentile, mm);
  a bent link shows up here, because everything after the bend moves with the joint it carries.
- ``shape``: the link's own surface differs. At training configurations, with every link posed by
  the LEARNED kinematics (so an upstream difference does not pile up downstream), description
  surface samples are compared with the learned union's surface (matter the description has and
  the body lacks: a missing or bent part); only surface near what the cameras measured counts (a
  face no camera saw cannot disagree). A robust maximum (95th percentile) keeps single noisy
  voxels from ranking a link.
- ``added matter``: the other way round: the learned link's surface where the cameras measured it,
  compared with the description's union posed the same way (matter the body has and the
  description lacks: a bolted-on tool, a cable bundle); learned surface inside the described solid
  (where two links' bodies meet) is explained. Its figure is the 95th percentile of the
  distances that exceed ``ADDED`` (what the description explains is not added), times the share
  of the link's observed surface they cover, so that a few stray voxels do not outrank a tool.

A calibration board declared in the training session (``sensors.board``) counts as part of the
description on the tip link: it is equipment the user put there, not damage.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import trimesh
from scipy.spatial import cKDTree

from rigs.errors import InputError
from rigs.link_meshes import link_meshes, posed_union
from rigs.solids import occupancy_vote, raycasting_scene, surface_distance
from selfmodel.chain import ChainSpec, check_joint_names, link_poses_numpy
from selfmodel.meshing import link_meshes_of
from selfmodel.model_io import surface_samples

OBSERVED = 0.015  # m: surface within this distance of a measured point counts as observed
ADDED = 0.01  # m: learned surface farther than this from every described surface is added matter
ADDED_SHARE = 0.02  # added matter must cover at least this share of a link's observed surface to count
PERCENTILE = 95.0
ANCHORS = np.array([[0.0, 0.0, 0.0], [0.05, 0.0, 0.0], [0.0, 0.05, 0.0], [0.0, 0.0, 0.05]])


@dataclass
class LinkDeviation:
    link: str
    deviation_mm: float
    kind: str  # "shape", "added matter" or "joint <name>"
    where_link: list[float]  # (3,) m, link frame: where the largest deviation is
    shape_mm: float
    joint_mm: float
    added_mm: float = 0.0  # matter the description lacks (see the module docstring)


def _board_box(board: dict | None) -> trimesh.Trimesh | None:
    if not board:
        return None
    square = float(board["square_m"])
    size = [board["squares"][0] * square + square, board["squares"][1] * square + square, 0.0035]
    plate = trimesh.creation.box(size, transform=trimesh.transformations.translation_matrix([0, 0, -0.00175]))
    return plate.apply_transform(np.asarray(board["tip_T_board_nominal"], dtype=float))








def _kabsch(source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Rigid 4x4 moving source (n, 3) onto target (n, 3) in the least-squares sense."""
    cs, ct = source.mean(axis=0), target.mean(axis=0)
    u, _, vt = np.linalg.svd((source - cs).T @ (target - ct))
    d = np.sign(np.linalg.det(vt.T @ u.T))
    rotation = vt.T @ np.diag([1.0, 1.0, d]) @ u.T
    transform = np.eye(4)
    transform[:3, :3] = rotation
    transform[:3, 3] = ct - rotation @ cs
    return transform


def _closest(scene, points: np.ndarray) -> np.ndarray:
    import open3d as o3d

    return scene.compute_closest_points(o3d.core.Tensor(points.astype(np.float32)))["points"].numpy().astype(float)


def check_against(model, urdf_path: Path, configurations: int = 10, samples: int = 3000,
                  rng: np.random.Generator | None = None, voxel: float = 0.004, iterations: int = 10) -> list[LinkDeviation]:
    """Per-link deviations of a structured ``model`` from the description ``urdf_path``, largest first.

    The learned model may split a change between a joint correction and the link's own shape in
    any proportion (the data only fix the posed body), so each description link is first
    registered rigidly (ICP) onto the learned body at training configurations. The residual of that
    fit is the link's ``shape`` deviation; how the registered links sit relative to each other,
    compared with the description's joints, is the ``joint`` deviation of the parent link.
    """
    if getattr(model, "kind", "") != "structured":
        raise InputError("check needs a structured model (trained with --kind structured): a free model has no links.")
    rng = rng or np.random.default_rng(0)
    urdf_path = Path(urdf_path)
    spec = ChainSpec.from_urdf(urdf_path, model.base_link, model.tip_link, model.spec.held)
    check_joint_names(spec, model.joint_names, str(urdf_path))
    if spec.link_names != model.link_names:
        raise InputError(f"{urdf_path}: its links from base to tip ({', '.join(spec.link_names)}) are not the model's "
                         f"({', '.join(model.link_names)}).")
    description = link_meshes(urdf_path, spec.link_names)
    board = _board_box(getattr(model, "board", None))
    if board is not None:
        tip = spec.link_names[-1]
        description[tip] = trimesh.util.concatenate([description[tip], board]) if tip in description else board
    learned = link_meshes_of(model, voxel)
    links = model.link_names

    measured, measured_config, q_train = surface_samples(model)
    chosen = np.sort(rng.choice(len(q_train), min(configurations, len(q_train)), replace=False))
    learned_poses = model.base_T_links(q_train[chosen])  # (K, L, 4, 4)
    description_poses = link_poses_numpy(spec, q_train[chosen])
    scenes, observed = [], []
    for k, config in enumerate(chosen):
        scenes.append(raycasting_scene(posed_union(learned, links, learned_poses[k])))
        points = [trimesh.transform_points(measured[link][measured_config[link] == config], learned_poses[k, i])
                  for i, link in enumerate(links)]
        observed.append(cKDTree(np.concatenate(points)))

    # Register each description link onto the learned body (in the learned link frame).
    alignment = {link: np.eye(4) for link in links}
    residuals = {link: np.zeros(0) for link in links}
    residual_points = {link: np.zeros((0, 3)) for link in links}
    for i, link in enumerate(links):
        if link not in description:
            continue
        mesh = description[link]
        points, _ = trimesh.sample.sample_surface(mesh, samples, seed=int(rng.integers(2**31)))
        pairs = []
        for k in range(len(chosen)):
            base_points = trimesh.transform_points(points, learned_poses[k, i])
            seen = observed[k].query(base_points)[0] < OBSERVED
            pairs.append(seen)
        transform = np.eye(4)
        for _ in range(iterations):
            sources, targets = [], []
            for k in range(len(chosen)):
                source = points[pairs[k]]
                if len(source) == 0:
                    continue
                moved = trimesh.transform_points(source, learned_poses[k, i] @ transform)
                closest = _closest(scenes[k], moved)
                near = np.linalg.norm(closest - moved, axis=1) < 0.03
                sources.append(source[near])
                targets.append(trimesh.transform_points(closest[near], np.linalg.inv(learned_poses[k, i])))
            if not sources or sum(len(x) for x in sources) < 20:
                break
            # Anchors at the link frame hold still what the surface leaves free (a round link's spin).
            count = max(1, sum(len(x) for x in sources) // 80)
            anchors = np.repeat(ANCHORS, count, axis=0)
            transform = _kabsch(np.concatenate(sources + [anchors]), np.concatenate(targets + [anchors]))
        alignment[link] = transform
        distances, where = [], []
        for k in range(len(chosen)):
            source = points[pairs[k]]
            moved = trimesh.transform_points(source, learned_poses[k, i] @ transform)
            distances.append(surface_distance(scenes[k], moved))
            where.append(source)
        if distances:
            residuals[link] = np.concatenate(distances)
            residual_points[link] = np.concatenate(where)

    # Added matter: the learned link's observed surface against the registered description's union.
    added = {link: (0.0, np.zeros(3)) for link in links}
    described_scenes = []
    link_scenes = {name: raycasting_scene(mesh) for name, mesh in description.items()}
    for k in range(len(chosen)):
        posed = {name: description[name].copy().apply_transform(learned_poses[k, i] @ alignment[name])
                 for i, name in enumerate(links) if name in description}
        described_scenes.append(raycasting_scene(trimesh.util.concatenate(list(posed.values()))))
    for i, link in enumerate(links):
        mesh = learned.get(link)
        if mesh is None or len(mesh.faces) == 0:
            continue
        points, _ = trimesh.sample.sample_surface(mesh, samples, seed=int(rng.integers(2**31)))
        distances, where = [], []
        for k in range(len(chosen)):
            base_points = trimesh.transform_points(points, learned_poses[k, i])
            seen = observed[k].query(base_points)[0] < OBSERVED
            if seen.any():
                distance = surface_distance(described_scenes[k], base_points[seen])
                # Where two learned links meet inside the body their surfaces are inner faces: a point
                # inside the described solid is explained, however far from its surface.
                far = np.flatnonzero(distance > ADDED)
                if len(far):
                    far_points = base_points[seen][far]
                    inside = np.zeros(len(far), dtype=bool)
                    for j, name in enumerate(links):  # per link: overlapping meshes break a union's parity
                        if name in link_scenes:
                            local = trimesh.transform_points(far_points, np.linalg.inv(learned_poses[k, j] @ alignment[name]))
                            inside |= occupancy_vote(link_scenes[name], local)
                    distance[far[inside]] = 0.0
                distances.append(distance)
                where.append(points[seen])
        if not distances:
            continue
        distances, where = np.concatenate(distances), np.concatenate(where)
        beyond = distances > ADDED
        share = float(np.mean(beyond))
        if share >= ADDED_SHARE:
            value = float(np.percentile(distances[beyond], PERCENTILE) * 1000)
            centre = where[beyond].mean(axis=0)
            added[link] = (value * min(1.0, share / (5 * ADDED_SHARE)), centre)

    # Joints: registered parent and child against the description's joint, at the same configurations;
    # the deviation is how far that joint alone moves everything after it (child and descendants).
    joint_mm = {link: (0.0, np.zeros(3), "") for link in links}
    for index, joint in enumerate(spec.joints):
        child, parent = spec.link_names[index + 1], spec.link_names[joint.parent_index]
        if child not in description or parent not in description:
            continue
        worst, worst_where = 0.0, np.zeros(3)
        for k in range(len(chosen)):
            child_pose = description_poses[k, index + 1]
            downstream = np.concatenate([
                trimesh.transform_points(description[name].vertices[::4], np.linalg.inv(child_pose) @ description_poses[k, j])
                for j, name in enumerate(spec.link_names) if j >= index + 1 and name in description])
            learned_relative = np.linalg.inv(learned_poses[k, joint.parent_index] @ alignment[parent]) @ (
                learned_poses[k, index + 1] @ alignment[child])
            described_relative = np.linalg.inv(description_poses[k, joint.parent_index]) @ child_pose
            moved = np.linalg.norm(trimesh.transform_points(downstream, learned_relative)
                                   - trimesh.transform_points(downstream, described_relative), axis=1)
            value = float(np.percentile(moved, 95) * 1000)
            if value > worst:
                worst = value
                worst_where = trimesh.transform_points(downstream[int(np.argmax(moved))][None], described_relative)[0]
        if worst > joint_mm[parent][0]:
            label = f"joint {joint.name}" if joint.type != "fixed" else f"fixed joint {joint.name}"
            joint_mm[parent] = (worst, worst_where, label)

    result = []
    for link in links:
        shape_mm, where = 0.0, np.zeros(3)
        if len(residuals[link]):
            shape_mm = float(np.percentile(residuals[link], PERCENTILE) * 1000)
            where = residual_points[link][int(np.argmin(np.abs(residuals[link] * 1000 - shape_mm)))]
        joint_value, joint_where, joint_name = joint_mm[link]
        added_mm, added_where = added[link]
        largest = max(joint_value, shape_mm, added_mm)
        if largest == added_mm and added_mm > 0:
            result.append(LinkDeviation(link, added_mm, "added matter", added_where.tolist(), shape_mm, joint_value, added_mm))
        elif joint_value > shape_mm:
            result.append(LinkDeviation(link, joint_value, joint_name, joint_where.tolist(), shape_mm, joint_value, added_mm))
        else:
            result.append(LinkDeviation(link, shape_mm, "shape", where.tolist(), shape_mm, joint_value, added_mm))
    return sorted(result, key=lambda row: -row.deviation_mm)
