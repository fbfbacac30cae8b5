"""What the export's spheres hold, and the fit of every link's spheres under one budget.

Each link's target is its body grown by the link's margin (:func:`sphere_target`), with candidate
centres that may not reach a checked neighbour where the arm stood (:func:`limit_spheres`); the arm's
budget (``max_spheres``) is shared by all links and the covers refined together (:func:`fit_groups`).
A calibration board the session declares is not fitted here: the export takes it out of the tip's
body and writes it as the plate it is (:mod:`selfmodel.export.board`).

Shapes: link frames, metres.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from selfmodel.export.bodies import LinkBody
from selfmodel.export.separation import boundary_cells
from selfmodel.export.sphere_fit import Contact, DistanceField, refine_starts
from selfmodel.export.spheres import SphereCover, SphereTarget, area_share, best_of, sphere_candidates


def limit_spheres(targets: list[SphereTarget], bodies: dict[str, LinkBody], poses: dict[str, np.ndarray],
                  kinds: dict[tuple[str, str], str]) -> None:
    """Each candidate sphere may not reach the body of a checked neighbour at any recorded pose (one
    grid cell to spare): its radius is capped at the distance to the nearest such cell."""
    boundary = {link: boundary_cells(body) for link, body in bodies.items()}
    for target in targets:
        reach = float(np.max(target.clearance)) + 0.05
        centre = target.centres.mean(axis=0)
        span = float(np.linalg.norm(target.centres - centre, axis=1).max()) + reach
        near = []
        for (a, b), kind in kinds.items():
            if kind != "checked" or target.link not in (a, b):
                continue
            other = b if a == target.link else a
            for c in range(len(poses[other])):
                own_T_other = np.linalg.inv(poses[target.link][c]) @ poses[other][c]
                points = boundary[other] @ own_T_other[:3, :3].T + own_T_other[:3, 3]
                near.append(points[np.linalg.norm(points - centre, axis=1) < span])
        near = [points for points in near if len(points)]
        if not near:
            continue
        target.obstacles = np.vstack(near)
        distance, _ = target.obstacle_tree().query(target.centres)
        target.limit = np.maximum(distance - bodies[target.link].voxel, 1e-4)


def sphere_target(link: str, body: LinkBody, margin: float, rng: np.random.Generator, surface_count: int = 4000,
                  candidates: int = 2000) -> SphereTarget:
    """What a link's spheres must hold: the body grown by ``margin`` (its surface moved out along the
    normals), with candidate centres in the body and their clearance to its grown surface."""
    mesh = body.mesh
    points, faces = mesh.sample(surface_count, return_index=True, seed=int(rng.integers(2**31)))
    # Vertices too: the corners and edges, where a cover is likeliest to fall short.
    vertices = rng.choice(len(mesh.vertices), min(surface_count, len(mesh.vertices)), replace=False)
    inner = np.vstack([np.asarray(points), np.asarray(mesh.vertices)[vertices]])
    normals = np.vstack([mesh.face_normals[faces], mesh.vertex_normals[vertices]])
    surface = inner + margin * normals
    depth = ndimage.distance_transform_edt(np.pad(body.solid, 1))[1:-1, 1:-1, 1:-1]
    cells = np.argwhere(body.solid)
    cells = cells[rng.choice(len(cells), min(candidates, len(cells)), replace=False)]
    clearance = np.maximum(depth[tuple(cells.T)] - 0.5, 0.0) * body.voxel + margin
    return SphereTarget(link, surface, float(mesh.area) / len(surface), body.origin + body.voxel * cells, clearance,
                        interior=body.inside, field=DistanceField.of_solid(body.solid, body.origin, body.voxel, margin),
                        inner=inner)


def fit_groups(targets: list[SphereTarget], budget: int, contacts: list[Contact] = (), iterations: int = 250,
               seed: int = 0, rng: np.random.Generator | None = None) -> tuple[dict[str, SphereCover], dict]:
    """Spheres for every link: ``budget`` shared by the ``targets`` (one a link at least), kept apart
    where ``contacts`` say the arm stood and refined together (:func:`selfmodel.export.sphere_fit.refine_starts`).
    Returns link -> cover and a report: ``spheres`` (how many), ``uncovered``, and ``starts``: each
    greedy start (its bulge) with what its refined cover leaves out and its union's volume,
    ``bulge_mm`` the one kept.

    Every greedy start is refined, and the refined cover kept is the one that holds the most of the
    surface (:func:`selfmodel.export.spheres.best_of`), then has the smallest union: which start the
    refinement serves best cannot be read off the greedy covers. Where a neighbour the arm stood
    next to bounds the spheres, the greedy cover that bulges least can leave a link's surface out
    where no refinement finds it again (on the crashed xArm6, 19 % of link4's), while the 12 mm
    start leaves 0.9 % of link4's out (0.13 % of the whole surface) with a smaller union.
    """
    rng = rng or np.random.default_rng(seed)
    starts = sphere_candidates(list(targets), budget, rng=rng)
    refined_starts = refine_starts(list(targets), [start.covers for start in starts], list(contacts),
                                   iterations=iterations, rng=np.random.default_rng(seed))
    scores = [(area_share(targets, fit["uncovered"]), sum(cover.union_volume() for cover in refined.values()))
              for refined, fit in refined_starts]
    kept = best_of(scores)
    refined, fit = refined_starts[kept]
    tried = [{"bulge_mm": round(1000.0 * start.bulge, 1), "uncovered": round(score[0], 5),
              "union_volume_cm3": round(1e6 * score[1], 1)} for start, score in zip(starts, scores)]
    return refined, {"spheres": int(sum(len(cover.radii) for cover in refined.values())), "uncovered": fit["uncovered"],
                     "bulge_mm": round(1000.0 * starts[kept].bulge, 1), "starts": tried}
