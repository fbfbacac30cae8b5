"""The export's margin: how far the model's own surface reaches outside the exported geometry.

The body's 0.5 level set is sampled afresh around each link (a search along the normals of the
meshed body and of its vertices), then the samples farthest outside are pushed to the tips of the
corners and edges the grid cut off; the margin is the farthest any of them lies outside.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import trimesh

from rigs.errors import InputError
from selfmodel.export.bodies import LinkBody, pieces_outside_distance
from selfmodel.export.sources import LinkSource


def level_set_samples(occupancy: Callable[[np.ndarray], np.ndarray], mesh: trimesh.Trimesh, count: int,
                      reach: float, rng: np.random.Generator, steps: int = 17) -> np.ndarray:
    """Points (M, 3) on the 0.5 level set of ``occupancy`` near ``mesh`` (same frame, m).

    From ``count`` points on the mesh and up to ``count`` of its vertices, search along the normal within +-``reach`` for the outermost
    crossing from >= 0.5 to < 0.5 and interpolate it linearly; points with no crossing are dropped.
    A finer look than the grid the mesh came from: it finds corners and thin parts the grid cut.
    """
    points, faces = trimesh.sample.sample_surface(mesh, count, seed=int(rng.integers(2**31)))
    # Vertices too, along their (averaged) normals: at an edge or corner the grid cut off, a
    # vertex normal points at the cut-off tip, where face samples rarely look.
    vertices = rng.choice(len(mesh.vertices), size=min(count, len(mesh.vertices)), replace=False)
    points = np.vstack([points, mesh.vertices[vertices]])
    normals = np.vstack([mesh.face_normals[faces], mesh.vertex_normals[vertices]])
    offsets = np.linspace(-reach, reach, steps)
    probes = points[:, None, :] + offsets[None, :, None] * normals[:, None, :]
    values = np.asarray(occupancy(probes.reshape(-1, 3)), dtype=float).reshape(len(points), steps)
    crossing = (values[:, :-1] >= 0.5) & (values[:, 1:] < 0.5)
    has = crossing.any(axis=1)
    last = steps - 2 - np.argmax(crossing[:, ::-1], axis=1)  # outermost crossing
    rows = np.flatnonzero(has)
    k = last[rows]
    v0, v1 = values[rows, k], values[rows, k + 1]
    fraction = np.clip((v0 - 0.5) / np.maximum(v0 - v1, 1e-12), 0.0, 1.0)
    t = offsets[k] + fraction * (offsets[k + 1] - offsets[k])
    return points[rows] + t[:, None] * normals[rows]


def climb_outward(occupancy: Callable[[np.ndarray], np.ndarray], starts: np.ndarray,
                  outside: Callable[[np.ndarray], np.ndarray], radius: float, rng: np.random.Generator,
                  rounds: int = 10, probes: int = 48) -> np.ndarray:
    """Occupied points (K, 3) pushed as far ``outside`` the export as the body reaches.

    A local random search from each start: probes within ``radius`` that are still occupied
    (>= 0.5) and lie farther outside replace the start; the radius shrinks each round. It finds
    the tips of corners and edges between the level-set samples, which set the margin.
    """
    best = np.asarray(starts, dtype=float).copy()
    best_outside = outside(best)
    for _ in range(rounds):
        directions = rng.normal(size=(len(best), probes, 3))
        directions *= (radius * rng.uniform(0, 1, (len(best), probes, 1)) ** (1 / 3)
                       / np.linalg.norm(directions, axis=2, keepdims=True))
        candidates = (best[:, None, :] + directions).reshape(-1, 3)
        occupied = np.asarray(occupancy(candidates), dtype=float) >= 0.5
        scores = np.where(occupied, outside(candidates), -np.inf).reshape(len(best), probes)
        pick = np.argmax(scores, axis=1)
        better = scores[np.arange(len(best)), pick] > best_outside
        best[better] = candidates.reshape(len(best), probes, 3)[better, pick[better]]
        best_outside[better] = scores[np.arange(len(best)), pick][better]
        radius *= 0.7
    return best


def own_level_set(occupancy: Callable[[np.ndarray], np.ndarray], source: LinkSource,
                   body: LinkBody) -> Callable[[np.ndarray], np.ndarray]:
    """Within one grid cell of the kept body only: the level set between grid points lies there
    (corners the grid cut included); occupied specks farther out belong to blobs the body dropped
    as detached, or to noise, not to this link's surface."""

    def own(points: np.ndarray) -> np.ndarray:
        points = np.asarray(points, dtype=float)
        inside = np.all((points >= source.lo) & (points <= source.hi), axis=1) & body.contains(points, grow_cells=1)
        values = np.zeros(len(points))
        if inside.any():
            values[inside] = np.asarray(occupancy(points[inside]), dtype=float) - source.level + 0.5
        return values

    return own


def check_margin(margin: float, bodies: dict[str, LinkBody], what: str, where: str) -> None:
    """A margin as thick as the thickest link's half-thickness would more than double every link."""
    thickest = max(bodies.values(), key=lambda body: body.inscribed_radius)
    if margin >= thickest.inscribed_radius:
        raise InputError(f"{where}: {what} of {margin * 1000:.1f} mm would swallow the arm: it is at least the "
                         f"half-thickness of its thickest link ({thickest.link}, {thickest.inscribed_radius * 1000:.1f} mm).")


def measured_surface_inside(model, export) -> dict | None:
    """How much of the structured model's measured training surface (depth points, noisy) the
    export holds: fraction inside, and the 99th percentile of the distance outside (mm)."""
    if model.surface is None:
        return None
    points, _, _ = model.surface_by_link()
    result = {}
    for kind in ("pieces", "spheres"):
        inside = total = 0
        outside_all = []
        for link, collision in export.links.items():
            local = points.get(link)
            # A link with no geometry at all (a tip that was all board, dropped) is left out, not
            # counted as holding none of its points: the report's board entry says it has none.
            if local is None or not len(local) or not (collision.all_pieces if kind == "pieces" else len(collision.spheres.radii)):
                continue
            local = np.asarray(local, dtype=float)
            outside = (pieces_outside_distance(collision.pieces, local) if kind == "pieces"
                       else collision.spheres.outside_distance(local))
            inside += int(np.sum(outside <= 0))
            total += len(local)
            outside_all.append(outside)
        if total:
            result[kind] = {"fraction_inside": inside / total,
                            "outside_p99_mm": 1000.0 * float(np.percentile(np.concatenate(outside_all), 99)),
                            "samples": total}
    return result or None
