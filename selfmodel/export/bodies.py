"""A link's learned body as collision geometry: occupancy grid -> closed mesh -> convex pieces.

Everything here lives in one link's frame, in metres. The body is the 0.5 level set of the
model's occupancy on a regular grid over the link's bounds, meshed with marching cubes
(scikit-image). Convex pieces come from coacd and are then made *conservative*: each piece is
held as a set of planes ``n . x <= d`` chosen so that the polytope contains the piece's own hull
and has at most a set number of vertices; a margin moves every plane outwards, which contains
the piece grown by that margin in every direction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import trimesh
from scipy import ndimage
from scipy.optimize import linprog
from scipy.spatial import ConvexHull, HalfspaceIntersection, QhullError

from rigs.errors import InputError
from rigs.solids import cell_distances
from selfmodel.inspect.meshing import decimated

OccupancyFn = Callable[[np.ndarray], np.ndarray]  # points (N, 3) m -> (N,) probabilities


class EmptyBody(InputError):
    """A link's learned body is empty or thinner than two grid cells."""


@dataclass
class LinkBody:
    """A link's body in its own frame.

    ``mesh``: closed triangle mesh, m. ``inside``: (P, 3) centres of grid cells inside the body,
    m (a volume sample). ``voxel``: grid spacing, m. ``touches_bounds``: the body reached the
    edge of the bounds it was searched in (the bounds may be too small).
    """

    link: str
    mesh: trimesh.Trimesh
    inside: np.ndarray
    voxel: float
    touches_bounds: bool
    dropped_fraction: float  # occupied volume removed as small detached blobs
    inscribed_radius: float  # m, radius of the largest ball inside the body
    solid: np.ndarray  # (nx, ny, nz) bool grid of the body
    origin: np.ndarray  # (3,) m, position of grid cell (0, 0, 0)

    def contains(self, points: np.ndarray, grow_cells: int = 0) -> np.ndarray:
        """(N, 3) link frame -> (N,) bool: in a body cell of the grid (nearest cell), the body
        grown by ``grow_cells`` cells first."""
        solid = self.solid if grow_cells == 0 else ndimage.binary_dilation(
            np.pad(self.solid, grow_cells), iterations=grow_cells)
        index = np.round((np.asarray(points) - self.origin) / self.voxel).astype(int) + grow_cells
        valid = np.all((index >= 0) & (index < solid.shape), axis=1)
        inside = np.zeros(len(index), dtype=bool)
        inside[valid] = solid[tuple(index[valid].T)]
        return inside

    @property
    def volume(self) -> float:
        return float(len(self.inside)) * self.voxel ** 3


def occupancy_grid(occupancy: OccupancyFn, lo: np.ndarray, hi: np.ndarray, voxel: float,
                   batch: int = 200_000) -> tuple[np.ndarray, np.ndarray]:
    """Occupancy on a grid: returns ``(values (nx, ny, nz), origin (3,))``; cell (i, j, k) sits at
    ``origin + voxel * (i, j, k)`` (m)."""
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    counts = np.maximum(np.ceil((hi - lo) / voxel).astype(int) + 1, 2)
    axes = [lo[a] + voxel * np.arange(counts[a]) for a in range(3)]
    points = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
    values = np.empty(len(points))
    for start in range(0, len(points), batch):
        values[start:start + batch] = np.asarray(occupancy(points[start:start + batch]), dtype=float).reshape(-1)
    return values.reshape(counts), lo


def link_body(link: str, occupancy: OccupancyFn, lo: np.ndarray, hi: np.ndarray, voxel: float,
              level: float = 0.5, keep_fraction: float = 0.02, where: str = "model") -> LinkBody:
    """Mesh the ``level`` set of ``occupancy`` inside the box ``lo``..``hi`` (link frame, m).

    Detached blobs smaller than ``keep_fraction`` of the largest piece are dropped (learned
    occupancy leaves floaters); cavities are filled, because a planner needs a solid body.
    InputError when the body is empty or degenerate (thinner than two grid cells).
    """
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(hi > lo)):
        raise InputError(f"{where}: link {link!r} has empty or invalid bounds {lo.tolist()} .. {hi.tolist()}.")
    values, origin = occupancy_grid(occupancy, lo, hi, voxel)
    occupied = values >= level
    if not occupied.any():
        raise EmptyBody(f"{where}: link {link!r} has an empty body: no point of its bounds has occupancy >= {level}.")
    labels, count = ndimage.label(occupied)
    sizes = ndimage.sum_labels(occupied, labels, index=np.arange(1, count + 1))
    keep = np.flatnonzero(sizes >= keep_fraction * sizes.max()) + 1
    solid = ndimage.binary_fill_holes(np.isin(labels, keep))
    dropped = 1.0 - float(sizes[keep - 1].sum()) / float(sizes.sum())
    extent = np.ptp(np.argwhere(solid), axis=0) + 1
    if solid.sum() < 8 or extent.min() < 2:
        raise EmptyBody(f"{where}: link {link!r} has a degenerate body ({int(solid.sum())} grid cells, "
                         f"{extent.min()} cell(s) thick at {voxel * 1000:.1f} mm); it cannot enclose any volume.")
    touches = bool(solid[[0, -1]].any() or solid[:, [0, -1]].any() or solid[:, :, [0, -1]].any())
    # Cells outside the kept body must read as free, else marching cubes draws the dropped blobs.
    field = np.where(solid, np.maximum(values, level + 1e-3), np.minimum(values, level - 1e-3))
    field = np.pad(field, 1, constant_values=0.0)  # closes a body that touches the bounds
    from skimage.measure import marching_cubes  # scikit-image adds 0.3 s to a start; only meshing needs it

    vertices, faces, _, _ = marching_cubes(field, level=level, spacing=(voxel, voxel, voxel))
    vertices += origin - voxel
    mesh = trimesh.Trimesh(vertices, faces[:, ::-1], process=True)  # outward normals
    mesh.update_faces(mesh.nondegenerate_faces())
    mesh.remove_unreferenced_vertices()
    if mesh.volume < 0:
        mesh.invert()
    inside = origin + voxel * np.argwhere(solid)
    inscribed = float(cell_distances(np.pad(solid, 1)).max()) * voxel
    return LinkBody(link, mesh, inside, voxel, touches, dropped, inscribed, solid, origin)


# -- convex pieces --------------------------------------------------------------------------------

@dataclass
class ConvexPiece:
    """A convex polytope ``{x : normals @ x <= offsets}`` in a link frame (m).

    ``vertices`` (V, 3) and ``faces`` (F, 3) are its boundary as a closed triangle mesh.
    """

    normals: np.ndarray  # (K, 3) unit
    offsets: np.ndarray  # (K,) m
    vertices: np.ndarray
    faces: np.ndarray

    def contains(self, points: np.ndarray, tolerance: float = 1e-9) -> np.ndarray:
        """(N, 3) -> (N,) bool: inside or on the boundary."""
        points = np.asarray(points, dtype=float)
        lo, hi = self.vertices.min(axis=0) - 1e-6, self.vertices.max(axis=0) + 1e-6
        near = np.flatnonzero(np.all((points >= lo) & (points <= hi), axis=1))  # the plane test is the costly part
        inside = np.zeros(len(points), dtype=bool)
        inside[near] = np.all(points[near] @ self.normals.T <= self.offsets + tolerance, axis=1)
        return inside

    def inflated(self, margin: float) -> "ConvexPiece":
        """Every plane moved out by ``margin`` m: contains this piece grown by ``margin`` everywhere."""
        return polytope(self.normals, self.offsets + margin)

    def mesh(self) -> trimesh.Trimesh:
        return trimesh.Trimesh(self.vertices, self.faces, process=False)

    @property
    def volume(self) -> float:
        return float(ConvexHull(self.vertices).volume)


def polytope(normals: np.ndarray, offsets: np.ndarray) -> ConvexPiece:
    """The bounded polytope of the planes; its vertices by halfspace intersection (scipy/Qhull)."""
    normals = np.asarray(normals, dtype=float)
    offsets = np.asarray(offsets, dtype=float)
    interior = _interior_point(normals, offsets)
    halfspaces = np.hstack([normals, -offsets[:, None]])  # Qhull form: A x + b <= 0
    points = HalfspaceIntersection(halfspaces, interior).intersections
    hull = ConvexHull(points)
    vertices = points[hull.vertices]
    remap = np.full(len(points), -1)
    remap[hull.vertices] = np.arange(len(hull.vertices))
    faces = remap[hull.simplices]
    # Qhull does not orient simplices; make every normal point away from the interior point.
    centre = vertices.mean(axis=0)
    triangles = vertices[faces]
    outward = np.einsum("ij,ij->i", np.cross(triangles[:, 1] - triangles[:, 0], triangles[:, 2] - triangles[:, 0]),
                        triangles.mean(axis=1) - centre)
    faces[outward < 0] = faces[outward < 0][:, ::-1]
    # Drop planes that touch no vertex (redundant), so ``normals`` describes the faces there are.
    active = np.any(np.abs(vertices @ normals.T - offsets) < 1e-7 * max(1.0, np.abs(offsets).max()), axis=0)
    return ConvexPiece(normals[active], offsets[active], vertices, faces)


def _interior_point(normals: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The centre of the largest ball inside the planes (a linear programme)."""
    norms = np.linalg.norm(normals, axis=1, keepdims=True)
    result = linprog(c=[0, 0, 0, -1], A_ub=np.hstack([normals, norms]), b_ub=offsets,
                     bounds=[(None, None)] * 3 + [(0, None)], method="highs")
    if not result.success or result.x[3] <= 0:
        raise ValueError("planes enclose no volume")
    return result.x[:3]


def conservative_hull(points: np.ndarray, max_vertices: int = 64, keep: np.ndarray | None = None) -> ConvexPiece:
    """A convex polytope with at most ``max_vertices`` vertices that contains every point (N, 3).

    The exact hull when it is small enough. Else corners are cut one at a time: from the six box
    planes (and the ``keep`` (K, 3) unit normals: a piece cut flat by a plane stays cut), the vertex
    standing farthest outside the hull is cut off by the hull's face plane it lies farthest beyond,
    while the vertex count stays within the limit. Every plane is a support plane of the points, so
    the polytope contains them; what it adds is where its worst corner was when the count ran out.
    Planes along area-weighted clusters of face normals, as before, gave a flat part's rim few
    planes of its own: the crashed xArm6's base foot (a disc 136 mm across, 29 mm thick) came out
    nearly square, its exported piece reaching 31 mm beyond the learned body, 12 mm now (the base's
    3-4 mm margin included).
    """
    points = np.asarray(points, dtype=float)
    hull = ConvexHull(points)
    if len(hull.vertices) <= max_vertices:
        return polytope(hull.equations[:, :3], hull.equations[:, 3] * -1.0)
    hull_points = points[hull.vertices]
    faces = hull.equations[:, :3]
    face_offsets = (hull_points @ faces.T).max(axis=0)  # support planes, exact for these points
    normals = np.vstack([np.eye(3), -np.eye(3)] + ([np.asarray(keep, dtype=float).reshape(-1, 3)] if keep is not None else []))
    offsets = (hull_points @ normals.T).max(axis=0)
    best = polytope(normals, offsets)
    tried = np.zeros(len(faces), dtype=bool)
    while True:
        beyond = best.vertices @ faces.T - face_offsets  # (V, F): > 0 where a vertex lies outside a face's plane
        beyond[:, tried] = -np.inf
        corner, face = np.unravel_index(np.argmax(beyond), beyond.shape)
        if not beyond[corner, face] > 1e-7:
            return best
        tried[face] = True
        try:
            trial = polytope(np.vstack([normals, faces[face]]), np.append(offsets, face_offsets[face]))
        except (QhullError, ValueError):  # a plane all but parallel to one there already: the next corner
            continue
        if len(trial.vertices) > max_vertices:
            return best
        normals, offsets, best = np.vstack([normals, faces[face]]), np.append(offsets, face_offsets[face]), trial


def import_coacd():
    """coacd, imported after open3d: importing coacd first breaks ``import open3d`` (std::bad_cast)."""
    try:
        import open3d  # noqa: F401
    except ImportError:
        pass
    import coacd  # coacd must load after open3d (import_coacd says why)

    coacd.set_log_level("error")
    return coacd


def convex_pieces(mesh: trimesh.Trimesh, max_pieces: int = 8, max_vertices: int = 64, threshold: float = 0.05,
                  seed: int = 0, max_faces: int = 6000) -> list[ConvexPiece]:
    """Decompose a closed mesh (link frame, m) into at most ``max_pieces`` conservative convex pieces
    that together contain every vertex of the mesh.

    coacd's time grows fast with the face count (a 55k-face link body took 37 s here), so it sees
    a quadric-decimated copy of at most ``max_faces`` faces; the pieces are then grown to take in
    every vertex of the full mesh that fell outside them.
    """
    coacd = import_coacd()
    work = decimated(mesh, max_faces)
    parts = coacd.run_coacd(coacd.Mesh(np.asarray(work.vertices), np.asarray(work.faces)), threshold=threshold,
                            max_convex_hull=max_pieces, preprocess_mode="off" if work.is_watertight else "on",
                            resolution=1000, mcts_iterations=60, mcts_nodes=15, mcts_max_depth=2, seed=seed)
    pieces = []
    for vertices, _faces in parts:
        vertices = np.asarray(vertices, dtype=float)
        if len(vertices) < 4:
            continue
        try:
            pieces.append(conservative_hull(vertices, max_vertices))
        except (QhullError, ValueError):  # a flat sliver of the decomposition: no volume to cover
            continue
    if not pieces:
        raise InputError("the convex decomposition returned no piece with volume.")
    # coacd may return more hulls than asked when merging is impossible; merge the smallest pairs.
    while len(pieces) > max_pieces:
        order = np.argsort([piece.volume for piece in pieces])
        a = pieces.pop(int(order[0]))
        centre = a.vertices.mean(axis=0)
        b_index = int(np.argmin([np.linalg.norm(piece.vertices.mean(axis=0) - centre) for piece in pieces]))
        b = pieces.pop(b_index)
        pieces.append(conservative_hull(np.vstack([a.vertices, b.vertices]), max_vertices))
    # Every vertex of the full mesh goes into the piece it is least outside of.
    vertices = np.asarray(mesh.vertices, dtype=float)
    violation = np.stack([(vertices @ piece.normals.T - piece.offsets).max(axis=1) for piece in pieces], axis=1)
    owner = np.argmin(violation, axis=1)
    outside = violation[np.arange(len(vertices)), owner] > 1e-9
    for index in np.unique(owner[outside]):
        extra = vertices[outside & (owner == index)]
        pieces[index] = conservative_hull(np.vstack([pieces[index].vertices, extra]), max_vertices)
    return pieces


def pieces_contain(pieces: list[ConvexPiece], points: np.ndarray) -> np.ndarray:
    """(N, 3) -> (N,) bool: inside at least one piece."""
    inside = np.zeros(len(points), dtype=bool)
    for piece in pieces:
        inside |= piece.contains(points)
    return inside


def piece_shifts(pieces: list[ConvexPiece], points: np.ndarray) -> np.ndarray:
    """(N, 3) -> (N, P) m: the smallest plane shift that puts each point inside each piece (0 inside).

    Exactly the margin a point needs of that piece (``inflated`` shifts the planes); it never
    exceeds the point's true distance from the piece and equals it where the nearest boundary is a face.
    """
    return np.stack([np.maximum((np.asarray(points) @ piece.normals.T - piece.offsets).max(axis=1), 0.0)
                     for piece in pieces], axis=1) if pieces else np.full((len(points), 0), np.inf)


def piece_needs(pieces: list[ConvexPiece], points: np.ndarray) -> list[float]:
    """(N, 3) -> per piece (m): the farthest outside it (:func:`piece_shifts`) of the points nearest
    it, 0 for a piece no point is nearest. Each piece grown by its own need holds every point."""
    if not len(points):
        return [0.0] * len(pieces)
    shifts = piece_shifts(pieces, points)
    nearest = np.argmin(shifts, axis=1)
    return [float(shifts[nearest == k, k].max()) if np.any(nearest == k) else 0.0 for k in range(len(pieces))]


def pieces_outside_distance(pieces: list[ConvexPiece], points: np.ndarray) -> np.ndarray:
    """(N, 3) -> (N,) m: the smallest plane shift that puts each point inside some piece (0 inside):
    the least of :func:`piece_shifts` over the pieces."""
    if not pieces:
        return np.full(len(points), np.inf)
    return piece_shifts(pieces, points).min(axis=1)
