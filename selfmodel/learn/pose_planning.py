"""Poses to relearn a self-model from: those whose depth images fix the joint placements best.

After a crash the question the new recording must answer first is where the links now sit; the
shapes then follow in those frames. The placement fit (``selfmodel.learn.placement``) lays measured
surface points onto the description's geometry through the chain, so a pose informs it through the
point-to-plane residuals of the surface its cameras see. For each candidate configuration this
module poses samples of every link's description surface (with the previous model's corrections),
keeps those some camera sees (in its image, facing it, and with nothing of the posed description
between: one ray per point and camera), and sums their residual Jacobians (``placement.surface_jacobian``) into the
information matrix of the corrections. The plan is the D-optimal subset of the candidates on the
combinations the candidates can determine at all (the calibration planner's
``calib.workflows.pose_selection.d_optimal``), so each pose adds what the others do not yet see: another side of a link,
another joint angle for the links downstream of a possible bend. ``placement_blocks`` gives the
candidates' information in the shape ``selfcal plan`` hands to that chooser.
"""

from __future__ import annotations

import numpy as np
import trimesh

from selfmodel.learn.placement import downstream_joints, surface_jacobian
from selfmodel.model.chain import ArmLinks, link_poses_numpy


def surface_samples(meshes: dict, spec: ArmLinks, per_link: int, rng: np.random.Generator):
    """Points (P, 3) and outward normals (P, 3) on each described link's surface (link frame), and
    their link index (P,)."""
    points, normals, owners = [], [], []
    for index, link in enumerate(spec.link_names):
        mesh = meshes.get(link)
        if mesh is None or not len(mesh.faces):
            continue
        found, faces = trimesh.sample.sample_surface(mesh, per_link, seed=int(rng.integers(2**31)))
        points.append(found)
        normals.append(mesh.face_normals[faces])
        owners.append(np.full(len(found), index))
    return np.concatenate(points), np.concatenate(normals), np.concatenate(owners)


def seen(points: np.ndarray, normals: np.ndarray | None, cameras, scene=None, slack=0.002) -> np.ndarray:
    """(P,) how many ``cameras`` (CameraSpec-like: base_T_camera, K, width, height, near, far) have
    each base-frame point in their image and in range with its normal facing them (``normals``
    None: a point of space, which faces every camera), and, given an open3d RaycastingScene of the
    posed arm, nothing of it in front by more than ``slack`` m: a number, or ``slack(camera,
    distance (n,) m) -> (n,) m`` where it grows with the camera's noise at that distance."""
    count = np.zeros(len(points))
    for camera in cameras:
        camera_T_base = np.linalg.inv(camera.base_T_camera)
        local = points @ camera_T_base[:3, :3].T + camera_T_base[:3, 3]
        depth = local[:, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            u = camera.K[0, 0] * local[:, 0] / depth + camera.K[0, 2]
            v = camera.K[1, 1] * local[:, 1] / depth + camera.K[1, 2]
        centre = camera.base_T_camera[:3, 3]
        facing = True if normals is None else np.sum(normals * (centre - points), axis=1) > 0
        visible = (depth > camera.near) & (depth < camera.far) & (u >= 0) & (u < camera.width) & (v >= 0) \
            & (v < camera.height) & facing
        if scene is not None and visible.any():
            import open3d as o3d  # open3d adds 1.2 s to a start; only this step needs it

            rows = np.flatnonzero(visible)
            ray = points[rows] - centre
            length = np.linalg.norm(ray, axis=1)
            rays = np.hstack([np.broadcast_to(centre, (len(rows), 3)), ray / length[:, None]]).astype(np.float32)
            hit = scene.cast_rays(o3d.core.Tensor(rays))["t_hit"].numpy()
            allowed = slack(camera, length) if callable(slack) else slack
            visible[rows[hit < length - allowed]] = False
        count += visible
    return count


def posed_scene(meshes: dict, spec: ArmLinks, poses: np.ndarray):
    """An open3d RaycastingScene of the description's links posed by ``poses`` (L, 4, 4)."""
    import open3d as o3d  # open3d adds 1.2 s to a start; only this step needs it

    scene = o3d.t.geometry.RaycastingScene()
    for index, link in enumerate(spec.link_names):
        mesh = meshes.get(link)
        if mesh is None or not len(mesh.faces):
            continue
        vertices = mesh.vertices @ poses[index, :3, :3].T + poses[index, :3, 3]
        scene.add_triangles(o3d.core.Tensor(vertices.astype(np.float32)), o3d.core.Tensor(mesh.faces.astype(np.uint32)))
    return scene


def placement_information(spec: ArmLinks, meshes: dict, q: np.ndarray, cameras, deltas: np.ndarray | None = None,
                          per_link: int = 60, seed: int = 0) -> np.ndarray:
    """(M, 6 J, 6 J) information of the placement corrections from each candidate configuration of
    ``q`` (M, dof): sum over seen description surface samples of J^T J times the cameras that see them
    (unit noise; only ratios between candidates matter)."""
    rng = np.random.default_rng(seed)
    local, local_normals, owner = surface_samples(meshes, spec, per_link, rng)
    deltas = np.zeros((spec.dof, 6)) if deltas is None else np.asarray(deltas, dtype=float)
    moved = downstream_joints(spec)
    poses = link_poses_numpy(spec, q, deltas)  # (M, L, 4, 4)
    out = np.zeros((len(q), 6 * spec.dof, 6 * spec.dof))
    for m in range(len(q)):
        pose = poses[m, owner]
        points = np.einsum("nij,nj->ni", pose[:, :3, :3], local) + pose[:, :3, 3]
        normals = np.einsum("nij,nj->ni", pose[:, :3, :3], local_normals)
        weight = seen(points, normals, cameras, posed_scene(meshes, spec, poses[m]))
        rows = np.flatnonzero(weight)
        if not len(rows):
            continue
        jacobian = surface_jacobian(spec, poses[m:m + 1], deltas, moved, points[rows], normals[rows], owner[rows],
                             np.zeros(len(rows), dtype=np.int64))
        out[m] = (jacobian * weight[rows, None]).T @ jacobian
    return out


def placement_blocks(spec: ArmLinks, meshes: dict, q: np.ndarray, cameras, deltas: np.ndarray | None = None,
                     seed: int = 0) -> tuple[np.ndarray, int]:
    """Per-candidate blocks (M, r, r) with B^T B each candidate's information on the r combinations
    of corrections some candidate's cameras see, and r: the shape the calibration planner's
    ``d_optimal`` chooses from."""
    information = placement_information(spec, meshes, q, cameras, deltas, seed=seed)
    values, vectors = np.linalg.eigh(information.sum(axis=0))
    basis = vectors[:, values > 1e-9 * values.max()]
    reduced = np.einsum("ri,mij,js->mrs", basis.T, information, basis)
    eigen, rotation = np.linalg.eigh(reduced)  # a symmetric square root of each candidate's information
    return np.sqrt(np.clip(eigen, 0.0, None))[:, :, None] * np.transpose(rotation, (0, 2, 1)), basis.shape[1]
