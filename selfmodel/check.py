"""Where the learned body differs from a description (URDF): per link, the largest deviation.

Two kinds of difference are charged to the link that carries them:

- ``joint``: a joint the link carries sits elsewhere than the description says. Measured as how far
  the learned placement moves the child link's description geometry (mm); a bent link shows up
  here, because everything after the bend moves with the joint it carries.
- ``shape``: the link's own surface differs. At training configurations, with every link posed by
  the LEARNED kinematics (so an upstream difference does not pile up downstream), description
  surface samples are compared with the learned union's surface and learned surface samples with
  the description's union, both ways; only surface near what the cameras measured counts (a face
  no camera saw cannot disagree). A robust maximum (98th percentile) keeps single noisy voxels from
  ranking a link.

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
from selfmodel.chain import ChainSpec, check_joint_names, link_poses_numpy
from selfmodel.link_meshes import link_meshes, posed_union
from selfmodel.meshing import link_meshes_of
from selfmodel.model_io import surface_samples

OBSERVED = 0.015  # m: surface within this distance of a measured point counts as observed
PERCENTILE = 98.0


@dataclass
class LinkDeviation:
    link: str
    deviation_mm: float
    kind: str  # "shape" or "joint <name>"
    where_link: list[float]  # (3,) m, link frame: where the largest deviation is
    shape_mm: float
    joint_mm: float


def _board_box(board: dict | None) -> trimesh.Trimesh | None:
    if not board:
        return None
    square = float(board["square_m"])
    size = [board["squares"][0] * square + square, board["squares"][1] * square + square, 0.0035]
    plate = trimesh.creation.box(size, transform=trimesh.transformations.translation_matrix([0, 0, -0.00175]))
    return plate.apply_transform(np.asarray(board["tip_T_board_nominal"], dtype=float))


def _scene(mesh: trimesh.Trimesh):
    import open3d as o3d

    scene = o3d.t.geometry.RaycastingScene()
    scene.add_triangles(o3d.core.Tensor(np.asarray(mesh.vertices, dtype=np.float32)),
                        o3d.core.Tensor(np.asarray(mesh.faces, dtype=np.uint32)))
    return scene


def _distance(scene, points: np.ndarray) -> np.ndarray:
    import open3d as o3d

    return scene.compute_distance(o3d.core.Tensor(points.astype(np.float32))).numpy().astype(float)


def _occupied(scene, points: np.ndarray) -> np.ndarray:
    import open3d as o3d

    return scene.compute_occupancy(o3d.core.Tensor(points.astype(np.float32)), nsamples=3).numpy() > 0.5


def check_against(model, urdf_path: Path, configurations: int = 12, samples: int = 20_000,
                  rng: np.random.Generator | None = None, voxel: float = 0.004) -> list[LinkDeviation]:
    """Per-link deviations of a structured ``model`` from the description ``urdf_path``, largest first."""
    if getattr(model, "kind", "") != "structured":
        raise InputError("check needs a structured model (trained with --kind structured): a free model has no links.")
    rng = rng or np.random.default_rng(0)
    urdf_path = Path(urdf_path)
    spec = ChainSpec.from_urdf(urdf_path, model.base_link, model.tip_link)
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

    # Joint placements: how far the learned placement moves the child's description geometry.
    joint_mm = {link: (0.0, np.zeros(3), "") for link in links}
    learned_origins = model.corrected_joint_origins()
    for k, joint in enumerate(spec.joints):
        if joint.type == "fixed":
            continue
        child = spec.link_names[k + 1]
        parent = spec.link_names[joint.parent_index]
        vertices = description[child].vertices if child in description else np.zeros((1, 3))
        moved = trimesh.transform_points(vertices, learned_origins[joint.name]) - trimesh.transform_points(vertices, joint.origin)
        distance = np.linalg.norm(moved, axis=1)
        worst = int(np.argmax(distance))
        if distance[worst] * 1000 > joint_mm[parent][0]:
            where = trimesh.transform_points(vertices[worst:worst + 1], joint.origin)[0]
            joint_mm[parent] = (float(distance[worst] * 1000), where, f"joint {joint.name}")

    # Shapes, at training configurations, every link posed by the learned kinematics.
    measured, measured_config, q_train = surface_samples(model)
    chosen = rng.choice(len(q_train), min(configurations, len(q_train)), replace=False)
    deviations = {link: [] for link in links}
    locations = {link: [] for link in links}
    for config in chosen:
        poses = model.base_T_links(q_train[config])[0]
        observed = np.concatenate([trimesh.transform_points(measured[link][measured_config[link] == config], poses[i])
                                   for i, link in enumerate(links)] or [np.zeros((0, 3))])
        if len(observed) < 10:
            continue
        near_measured = cKDTree(observed)
        learned_union = posed_union(learned, links, poses)
        description_union = posed_union(description, links, poses)
        learned_scene, description_scene = _scene(learned_union), _scene(description_union)
        for i, link in enumerate(links):
            for source, target_scene, own_scene in ((description, learned_scene, description_scene),
                                                    (learned, description_scene, learned_scene)):
                if link not in source:
                    continue
                mesh = source[link].copy().apply_transform(poses[i])
                points, faces = trimesh.sample.sample_surface(mesh, max(200, samples // len(links)),
                                                              seed=int(rng.integers(2**31)))
                outer = ~_occupied(own_scene, points + 0.002 * mesh.face_normals[faces])
                seen = near_measured.query(points)[0] < OBSERVED
                points = points[outer & seen]
                if len(points) == 0:
                    continue
                deviations[link].append(_distance(target_scene, points))
                locations[link].append(trimesh.transform_points(points, np.linalg.inv(poses[i])))
    result = []
    for link in links:
        shape_mm, where = 0.0, np.zeros(3)
        if deviations[link]:
            distance = np.concatenate(deviations[link])
            shape_mm = float(np.percentile(distance, PERCENTILE) * 1000)
            where = np.concatenate(locations[link])[int(np.argmin(np.abs(distance * 1000 - shape_mm)))]
        joint_value, joint_where, joint_name = joint_mm[link]
        if joint_value > shape_mm:
            result.append(LinkDeviation(link, joint_value, joint_name, joint_where.tolist(), shape_mm, joint_value))
        else:
            result.append(LinkDeviation(link, shape_mm, "shape", where.tolist(), shape_mm, joint_value))
    return sorted(result, key=lambda row: -row.deviation_mm)
