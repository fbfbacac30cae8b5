"""A mesh of the whole arm at one configuration: the model's 0.5 level set by marching cubes.

The workspace box is sampled on a coarse grid first; only coarse cells near the boundary (some
corner neither clearly free nor clearly occupied, and their neighbours) are refined to the fine
voxel, so a 5 mm mesh of a 1.5 m workspace costs about a million queries, not twenty-seven.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import trimesh

from rigs.errors import InputError
from rigs.files import atomic_write_bytes

CLEAR = 0.02  # a coarse corner below this probability is clearly free, above 1 - CLEAR clearly occupied


def _grid_points(lo: np.ndarray, step: float, shape: tuple[int, int, int], index: np.ndarray | None = None) -> np.ndarray:
    if index is None:
        index = np.indices(shape).reshape(3, -1).T
    return (lo + index * step).astype(np.float32)


def occupancy_volume(occupancy, lo: np.ndarray, hi: np.ndarray, voxel: float = 0.005,
                     coarse: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """``occupancy(points (N, 3)) -> (N,)`` on a grid of spacing ``voxel`` m over the box lo..hi.

    Returns (values (nx, ny, nz) float32, grid origin (3,) m).
    """
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    cells = np.maximum(np.ceil((hi - lo) / (voxel * coarse)).astype(int), 1)
    coarse_shape = tuple(cells + 1)
    coarse_values = occupancy(_grid_points(lo, voxel * coarse, coarse_shape)).reshape(coarse_shape)
    corners = [coarse_values[a:a + cells[0], b:b + cells[1], c:c + cells[2]] for a in (0, 1) for b in (0, 1) for c in (0, 1)]
    low = np.min(corners, axis=0)
    high = np.max(corners, axis=0)
    active = ~((high < CLEAR) | (low > 1 - CLEAR))
    # Dilate by one cell: a thin part can pass between coarse corners next to an active cell.
    padded = np.pad(active, 1)
    active = np.zeros_like(active)
    for a in (0, 1, 2):
        for b in (0, 1, 2):
            for c in (0, 1, 2):
                active |= padded[a:a + cells[0], b:b + cells[1], c:c + cells[2]]
    fine_shape = tuple(cells * coarse + 1)
    # Start from the nearest coarse value; refine the nodes of active cells.
    nearest = np.rint(np.indices(fine_shape) / coarse).astype(int)
    values = coarse_values[nearest[0], nearest[1], nearest[2]]
    refine = np.zeros(fine_shape, dtype=bool)
    expanded = np.repeat(np.repeat(np.repeat(active, coarse, 0), coarse, 1), coarse, 2)
    refine[:-1, :-1, :-1] |= expanded
    refine[1:, 1:, 1:] |= expanded
    index = np.argwhere(refine)
    if len(index):
        values[refine] = occupancy(_grid_points(lo, voxel, fine_shape, index))
    return values.astype(np.float32), lo


def level_set_mesh(occupancy, lo: np.ndarray, hi: np.ndarray, voxel: float = 0.005, level: float = 0.5,
                   coarse: int = 4) -> trimesh.Trimesh:
    """The ``level`` surface of ``occupancy(points (N, 3))`` inside the box lo..hi (empty if none)."""
    from skimage.measure import marching_cubes  # scikit-image adds 0.3 s to a start; only meshing needs it

    values, origin = occupancy_volume(occupancy, lo, hi, voxel, coarse)
    if not (values.min() < level < values.max()):
        return trimesh.Trimesh()
    # Pad with free space so that the surface closes at the workspace's walls.
    values = np.pad(values, 1, constant_values=0.0)
    vertices, faces, _, _ = marching_cubes(values, level=level, spacing=(voxel, voxel, voxel))
    vertices = vertices + origin - voxel
    # marching_cubes orients faces towards increasing values; flip so normals point out of the body.
    return trimesh.Trimesh(vertices, faces[:, ::-1], process=True)


def link_meshes_of(model, voxel: float = 0.004) -> dict[str, trimesh.Trimesh]:
    """A structured model's learned links: link name -> surface mesh in the link's frame (metres)."""
    meshes = {}
    for link in model.link_names:
        lo, hi = model.link_bounds(link)
        mesh = level_set_mesh(lambda points, link=link: model.link_occupancy(link, points), lo, hi, voxel)
        if len(mesh.faces):
            meshes[link] = mesh
    return meshes


def arm_mesh(model, q, voxel: float = 0.005, link_meshes: dict[str, trimesh.Trimesh] | None = None) -> trimesh.Trimesh:
    """The arm's surface at configuration q (dof,) as one trimesh in the base frame (metres).

    A structured model's links are meshed once in their own frames (``link_meshes``, computed here
    when not given) and posed by the learned kinematics; their overlaps where links join stay inside
    the union. A free model is meshed over the workspace at q. Empty when the model sees nothing.
    """
    q = np.asarray(q, dtype=float)
    if model.kind == "structured":
        meshes = link_meshes if link_meshes is not None else link_meshes_of(model, voxel)
        poses = model.base_T_links(q)[0]
        posed = [meshes[link].copy().apply_transform(poses[i]) for i, link in enumerate(model.link_names) if link in meshes]
        return trimesh.util.concatenate(posed) if posed else trimesh.Trimesh()
    lo, hi = model.bounds
    return level_set_mesh(lambda points: model.occupancy(points, q), lo, hi, voxel)


def save_mesh(mesh: trimesh.Trimesh, path: Path) -> Path:
    """Write PLY or GLB (by suffix) atomically."""
    path = Path(path)
    kind = path.suffix.lower().lstrip(".")
    if kind not in ("ply", "glb"):
        raise InputError(f"{path}: mesh files are written as .ply or .glb.")
    if len(mesh.faces) == 0:
        raise InputError(f"{path}: the model calls everything free at this configuration; there is no surface to write.")
    atomic_write_bytes(path, mesh.export(file_type=kind))
    return path


def decimated(mesh: trimesh.Trimesh, max_faces: int) -> trimesh.Trimesh:
    """``mesh`` quadric-decimated to at most ``max_faces`` faces (itself when it has no more, or when
    the decimation would leave no closed body)."""
    if len(mesh.faces) <= max_faces:
        return mesh
    import open3d as o3d  # open3d adds 1.2 s to a start; only this step needs it

    simple = o3d.geometry.TriangleMesh(o3d.utility.Vector3dVector(np.asarray(mesh.vertices)),
                                       o3d.utility.Vector3iVector(np.asarray(mesh.faces)))
    simple = simple.simplify_quadric_decimation(target_number_of_triangles=max_faces)
    result = trimesh.Trimesh(np.asarray(simple.vertices), np.asarray(simple.triangles), process=True)
    return result if len(result.faces) >= 4 and result.volume > 0 else mesh
