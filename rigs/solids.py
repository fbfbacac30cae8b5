"""The solid a triangle mesh encloses, even when the mesh is open.

Robot meshes are often not watertight (pybullet_data's Panda meshes have thousands of boundary
edges; the xArm6's link2 is a shell of 2000 loose parts), so a ray-parity inside test counts points
outside them as inside. Here a mesh becomes a solid the way a person would read it: the mesh's
surface is drawn into a voxel grid, the outside is flooded from the grid's border, and whatever the
flood cannot reach is inside. Cracks narrower than ``seal`` cells are closed first (a closing of
the outside, so the body does not grow). Near the surface (the surface cells) a point is inside when
it lies behind the nearest face (its outward normal), so the test is exact to the mesh there, not
to the grid.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import trimesh
from scipy import ndimage


def cell_distances(mask: np.ndarray) -> np.ndarray:
    """(X, Y, Z) bool -> (X, Y, Z) float32: each true cell's Euclidean distance, in cells, to the
    nearest false cell of the array (0 on false cells; the array's border is not false).

    The ``edt`` package's transform gives scipy.ndimage.distance_transform_edt's values (within
    float32 rounding) about five times faster on one thread: the sphere fit takes one of a padded
    grid for every link, and scipy's were most of the time it spent before its greedy starts."""
    import edt  # one extension module, loaded where a grid is measured

    return edt.edt(np.ascontiguousarray(mask, dtype=bool), black_border=False, parallel=1)


def _o3d():
    import open3d as o3d  # imported late and before coacd (see selfmodel.export.bodies.import_coacd)

    return o3d


def raycasting_scene(mesh) -> "object":
    """An Open3D raycasting scene of a trimesh (its own frame): distances, occupancy votes, rays."""
    o3d = _o3d()
    scene = o3d.t.geometry.RaycastingScene()
    scene.add_triangles(o3d.core.Tensor(np.asarray(mesh.vertices, dtype=np.float32)),
                        o3d.core.Tensor(np.asarray(mesh.faces, dtype=np.uint32)))
    return scene


def surface_distance(scene, points: np.ndarray) -> np.ndarray:
    """(N, 3) points, m, the scene's frame -> (N,) unsigned distance to its surface, m."""
    o3d = _o3d()
    return scene.compute_distance(o3d.core.Tensor(np.asarray(points, dtype=np.float32))).numpy().astype(float)


def occupancy_vote(scene, points: np.ndarray, rays: int = 3) -> np.ndarray:
    """(N, 3) points -> (N,) bool inside by a vote of ``rays`` parity rays: several rays, because
    not every description's meshes are watertight (FACTS.md)."""
    o3d = _o3d()
    return scene.compute_occupancy(o3d.core.Tensor(np.asarray(points, dtype=np.float32)), nsamples=rays).numpy() > 0.5


@dataclass
class Solid:
    """The inside of a mesh: grid cells of side ``pitch`` (m); cell (i, j, k) is centred at
    ``origin + pitch * (i, j, k)`` in the mesh's frame."""

    mesh: trimesh.Trimesh  # the surface it was made from (frame of the mesh, m)
    origin: np.ndarray  # (3,)
    pitch: float
    inside_cells: np.ndarray  # (nx, ny, nz) bool: flooded from nowhere, and not a surface cell
    surface_cells: np.ndarray  # (nx, ny, nz) bool: cells the outer surface passes through (an outside cell beside them)
    _scene: object = None
    _signed: np.ndarray | None = None

    def _index(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        index = np.rint((np.asarray(points, dtype=float) - self.origin) / self.pitch).astype(int)
        valid = np.all((index >= 0) & (index < self.inside_cells.shape), axis=1)
        return index, valid

    def scene(self):
        if self._scene is None:
            self._scene = raycasting_scene(self.mesh)
        return self._scene

    def contains(self, points: np.ndarray) -> np.ndarray:
        """(N, 3) points, mesh frame -> (N,) bool inside the solid."""
        points = np.asarray(points, dtype=float)
        index, valid = self._index(points)
        inside = np.zeros(len(points), dtype=bool)
        rows = np.flatnonzero(valid)
        cells = tuple(index[rows].T)
        inside[rows] = self.inside_cells[cells]
        near = rows[self.surface_cells[cells]]
        if len(near):
            inside[near] = self._behind_nearest_face(points[near])
        return inside

    def _behind_nearest_face(self, points: np.ndarray) -> np.ndarray:
        o3d = _o3d()
        answer = self.scene().compute_closest_points(o3d.core.Tensor(points.astype(np.float32)))
        closest = answer["points"].numpy().astype(float)
        normals = answer["primitive_normals"].numpy().astype(float)
        return np.einsum("ij,ij->i", points - closest, normals) <= 0.0

    def distance_to_surface(self, points: np.ndarray) -> np.ndarray:
        """(N, 3) -> (N,) m to the nearest point of the mesh surface (unsigned)."""
        o3d = _o3d()
        return self.scene().compute_distance(o3d.core.Tensor(np.asarray(points, dtype=np.float32))).numpy().astype(float)

    def depth(self, points: np.ndarray) -> np.ndarray:
        """(N, 3) -> (N,) m: how deep inside each point lies (0 outside)."""
        points = np.asarray(points, dtype=float)
        inside = self.contains(points)
        result = np.zeros(len(points))
        if inside.any():
            result[inside] = self.distance_to_surface(points[inside])
        return result

    def signed_distance(self, points: np.ndarray) -> np.ndarray:
        """(N, 3) -> (N,) m, negative inside, read from a distance grid at the nearest cell (within
        about one cell of the exact value): the fast test for checks run many times. Points outside
        the grid get at least their distance to its border."""
        if self._signed is None:
            # Surface cells hold the surface (within half a cell): 0 there, cell distances elsewhere.
            outside = cell_distances(~(self.inside_cells | self.surface_cells)) - 0.5
            inside = cell_distances(self.inside_cells) - 0.5
            signed = np.where(self.inside_cells, -inside, np.where(self.surface_cells, 0.0, outside))
            self._signed = (signed * self.pitch).astype(np.float32).ravel()
        shape = np.array(self.inside_cells.shape)
        position = (np.asarray(points, dtype=float) - self.origin) / self.pitch
        index = np.clip(np.rint(position).astype(np.int64), 0, shape - 1)
        flat = (index[:, 0] * shape[1] + index[:, 1]) * shape[2] + index[:, 2]
        beyond = np.sqrt(np.sum((position - index) ** 2 * (np.abs(position - index) > 0.5), axis=1)) * self.pitch
        return self._signed[flat] + beyond

    @property
    def volume(self) -> float:
        """m^3: inside cells, plus half of the surface cells (the surface runs through them)."""
        return float(self.inside_cells.sum() + 0.5 * self.surface_cells.sum()) * self.pitch ** 3

    def watertight_mesh(self) -> trimesh.Trimesh:
        """A closed mesh of the solid (marching cubes of its cells), for tools that need one."""
        from skimage.measure import marching_cubes

        field = np.pad((self.inside_cells | self.surface_cells).astype(np.float32), 1)
        field = ndimage.gaussian_filter(field, 0.6)
        vertices, faces, _, _ = marching_cubes(field, level=0.5, spacing=(self.pitch,) * 3)
        mesh = trimesh.Trimesh(vertices + self.origin - self.pitch, faces[:, ::-1], process=True)
        if mesh.volume < 0:
            mesh.invert()
        return mesh


# Solids made in this process, by the mesh and grid they were made from. A simulated capture checks
# every pose against its arm's solids, and making them (and their distance grids) took 8 of the 8.5 s
# of a three-pose capture of the iiwa; sessions of one arm, a fleet's arms and every training on one
# description share the same meshes. A solid is not changed once made (its distance grid and
# raycasting scene are filled in on first use), so one object serves them all. An iiwa's eight link
# solids hold about 125 MB with their distance grids: the last few arms' links are kept.
_SOLIDS: OrderedDict[bytes, "Solid"] = OrderedDict()
_SOLIDS_KEPT = 32
_SOLIDS_LOCK = threading.Lock()


def solid_of(mesh: trimesh.Trimesh, pitch: float = 0.001, seal: int = 1, pad: float = 0.0) -> Solid:
    """The solid ``mesh`` (any frame, m) encloses, on a grid of ``pitch`` m, cracks up to ``seal``
    cells wide closed; the grid reaches ``pad`` m (at least a few cells) beyond the mesh. The same
    mesh and grid give the same object, made once in a process (see ``_SOLIDS``)."""
    vertices, faces = np.ascontiguousarray(mesh.vertices, dtype=float), np.ascontiguousarray(mesh.faces, dtype=np.int64)
    key = hashlib.sha1(vertices.tobytes() + faces.tobytes() + repr((vertices.shape, float(pitch), int(seal),
                                                                     float(pad))).encode()).digest()
    with _SOLIDS_LOCK:
        if key in _SOLIDS:
            _SOLIDS.move_to_end(key)
            return _SOLIDS[key]
    solid = _make_solid(vertices, faces, pitch, seal, pad)
    with _SOLIDS_LOCK:
        _SOLIDS[key] = solid
        while len(_SOLIDS) > _SOLIDS_KEPT:
            _SOLIDS.popitem(last=False)
    return solid


def _make_solid(vertices: np.ndarray, faces: np.ndarray, pitch: float, seal: int, pad: float) -> Solid:
    mesh = trimesh.Trimesh(vertices, faces, process=True)
    pad = max(pad, (seal + 2) * pitch)
    lo = mesh.bounds[0] - pad
    shape = np.ceil((mesh.bounds[1] + pad - lo) / pitch).astype(int) + 1
    surface = np.zeros(shape, dtype=bool)
    for points in _surface_points(mesh.triangles, pitch / 2):
        surface[tuple(np.clip(np.rint((points - lo) / pitch).astype(int), 0, shape - 1).T)] = True
    wall = ndimage.binary_dilation(surface, iterations=seal) if seal > 0 else surface
    outside = ~ndimage.binary_fill_holes(wall)
    if seal > 0:  # the flood stopped ``seal`` cells short of the surface everywhere: let it come back
        outside = ndimage.binary_dilation(outside, iterations=seal) & ~surface
    # A mesh made of many shells (pybullet_data's xArm6 link2 has 2215) has faces deep inside its body. A
    # cell they pass through with no outside cell around it is matter whichever way its nearest face
    # points: asking that face would call about half of them outside, and the body about 1 % small.
    surface &= ndimage.binary_dilation(outside, structure=np.ones((3, 3, 3), dtype=bool))
    inside = ~outside & ~surface
    return Solid(mesh, lo, pitch, inside, surface)


def _surface_points(triangles: np.ndarray, spacing: float, chunk: int = 2_000_000):
    """Yields (n, 3) points on every triangle (T, 3, 3) on a barycentric lattice whose neighbours lie
    at most ``spacing`` apart: the cells they mark form a wall a 6-connected flood cannot pass."""
    edges = np.linalg.norm(triangles[:, [1, 2, 0]] - triangles, axis=2).max(axis=1)
    steps = np.maximum(np.ceil(edges / spacing).astype(int), 1)
    for n in np.unique(steps):
        i, j = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
        keep = i + j <= n
        weights = np.stack([i[keep], j[keep], n - i[keep] - j[keep]], axis=1) / n  # (K, 3)
        group = triangles[steps == n]
        per = max(1, chunk // len(weights))
        for start in range(0, len(group), per):
            yield np.einsum("kc,tcd->tkd", weights, group[start:start + per]).reshape(-1, 3)
