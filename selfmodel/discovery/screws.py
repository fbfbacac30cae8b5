"""Rigid motions of what a joint carries: registering two depth clouds, and the screw a motion is.

A revolute joint turning by ``angle`` about the line through ``point`` along unit ``direction``
moves what it carries by ``screw_motion(direction, point, angle)``; a prismatic joint sliding by
``distance`` moves it by a pure translation ``distance * direction``.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation


def screw_motion(direction: np.ndarray, point: np.ndarray, angle: float) -> np.ndarray:
    """(4, 4) rotation by ``angle`` rad about the line through ``point`` (3,) m along ``direction`` (3,)."""
    direction = np.asarray(direction, float) / np.linalg.norm(direction)
    rotation = Rotation.from_rotvec(direction * angle).as_matrix()
    motion = np.eye(4)
    motion[:3, :3] = rotation
    motion[:3, 3] = point - rotation @ point
    return motion


def slide_motion(direction: np.ndarray, distance: float) -> np.ndarray:
    """(4, 4) translation by ``distance`` m along ``direction`` (3,)."""
    motion = np.eye(4)
    motion[:3, 3] = np.asarray(direction, float) / np.linalg.norm(direction) * distance
    return motion


def chain_motions(axes: list[tuple[np.ndarray, np.ndarray]], revolute: list[bool], delta) -> list[np.ndarray]:
    """(dof,) list of (4, 4): the motion of each link 1..dof from home to the readings ``delta``
    (dof,) rad or m from home, the product of the joints' screw motions (``axes``: per joint a unit
    direction (3,) and a point (3,) m on it, base frame at home; a slide uses only the direction)."""
    total, out = np.eye(4), []
    for (direction, point), turns, value in zip(axes, revolute, delta):
        total = total @ (screw_motion(direction, point, value) if turns else slide_motion(direction, value))
        out.append(total)
    return out


def rotation_vector(motion: np.ndarray) -> np.ndarray:
    """(3,) axis times angle (rad) of a motion's rotation."""
    return Rotation.from_matrix(motion[:3, :3]).as_rotvec()


def axis_point(motions: list[np.ndarray], direction: np.ndarray, near: np.ndarray) -> np.ndarray:
    """The point (3,) m on the common rotation axis of ``motions`` (each (4, 4), rotating about
    ``direction``) closest to ``near`` (3,): least squares of (I - R_k) p = t_k across motions."""
    direction = direction / np.linalg.norm(direction)
    rows, values = [], []
    for motion in motions:
        rotation, translation = motion[:3, :3], motion[:3, 3]
        rows.append(np.eye(3) - rotation)
        values.append(translation - direction * (direction @ translation))
    rows.append(direction[None, :])  # the free position along the axis: the foot of ``near``
    values.append(np.array([direction @ near]))
    point, *_ = np.linalg.lstsq(np.vstack(rows), np.concatenate(values), rcond=None)
    return point


def line_distance(point: np.ndarray, line_point: np.ndarray, direction: np.ndarray) -> float:
    """Distance (m) of ``point`` (3,) from the line through ``line_point`` along ``direction``."""
    direction = direction / np.linalg.norm(direction)
    offset = np.asarray(point, float) - line_point
    return float(np.linalg.norm(offset - direction * (direction @ offset)))


def register(source: np.ndarray, target: np.ndarray, target_normals: np.ndarray, initial: np.ndarray,
             distances: tuple[float, ...], noise: float, iterations: int = 30) -> tuple[np.ndarray, float]:
    """Point-to-plane ICP (Open3D) of ``source`` (n, 3) onto ``target`` (m, 3) with its normals,
    from ``initial`` (4, 4), through the correspondence distances given (m, coarse to fine) with a
    Tukey kernel at half the stage's distance, and no less than 3 ``noise`` (a tight kernel in a
    coarse stage keeps only what already fits and stops short). Returns the motion (4, 4) and the
    inlier fraction of the last stage."""
    import open3d as o3d  # open3d adds 1.2 s to a start; only this step needs it

    source_cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(source))
    target_cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(target))
    target_cloud.normals = o3d.utility.Vector3dVector(target_normals)
    motion = np.asarray(initial, float)
    fitness = 0.0
    registration = o3d.pipelines.registration
    for distance in distances:
        kernel = registration.TukeyLoss(k=max(distance / 2, 3 * noise, 1e-4))
        estimation = registration.TransformationEstimationPointToPlane(kernel)
        result = registration.registration_icp(source_cloud, target_cloud, distance, motion, estimation,
                                               registration.ICPConvergenceCriteria(max_iteration=iterations))
        motion, fitness = np.asarray(result.transformation), float(result.fitness)
    return motion, fitness


def cloud_with_normals(points: np.ndarray, voxel: float, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """Voxel-thinned ``points`` (n, 3) and their normals (PCA of neighbours within ``radius`` m)."""
    import open3d as o3d  # open3d adds 1.2 s to a start; only this step needs it

    cloud = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(points)).voxel_down_sample(voxel)
    cloud.estimate_normals(o3d.geometry.KDTreeSearchParamHybrid(radius=radius, max_nn=30))
    return np.asarray(cloud.points), np.asarray(cloud.normals)


def thin(points: np.ndarray, voxel: float) -> np.ndarray:
    """``points`` (n, 3) thinned to one per ``voxel`` m cube."""
    import open3d as o3d  # open3d adds 1.2 s to a start; only this step needs it

    return np.asarray(o3d.geometry.PointCloud(o3d.utility.Vector3dVector(points)).voxel_down_sample(voxel).points)
