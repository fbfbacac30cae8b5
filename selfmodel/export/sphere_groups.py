"""Sphere groups: what the export's spheres hold, and which budget each part of the body draws on.

A thin plate on the tool (the calibration board a session declares, ``sensors.board``) cannot be
held by a few spheres without large protrusion: a 3.5 mm plate under a 20 mm sphere bulges 18 mm
either side. The arm's budget (``max_spheres``) is for the arm's links; the board is its own group
in the tip's frame with its own budget, fitted jointly with the arm (it must stay clear of the other
links where the arm stood) and written under the tip link with the arm's spheres, so a planner
checks every sphere. The counts of both groups are reported.

Shapes: link frames, metres.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from rigs.errors import InputError
from selfmodel.export.board import PlateBox, board_cells
from selfmodel.export.bodies import LinkBody, link_body
from selfmodel.export.separation import boundary_cells
from selfmodel.export.sphere_fit import Contact, DistanceField, refine_starts
from selfmodel.export.spheres import (SphereCover, SphereTarget, area_share, best_of, fit_sphere_covers,
                                      sphere_candidates)

BOARD = "board"


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


def split_board(body: LinkBody, plate, grow: float, where: str = "model") -> tuple[LinkBody, LinkBody | None]:
    """The tip's body apart into the arm's part and the board's: body cells inside the plate's box
    grown by ``grow`` m (the learned plate is thicker than the real one) belong to the board. The
    board is None when either part has too few cells to be a body (a learned plate thinner than two
    cells): then the tip keeps its whole body and budget, and the report counts no board spheres."""
    in_box = np.zeros(body.solid.shape, dtype=bool)
    in_box[tuple(board_cells(body, PlateBox.of(plate), grow).T)] = True
    on_board, arm_cells = body.solid & in_box, body.solid & ~in_box
    if on_board.sum() < 8 or arm_cells.sum() < 8:
        return body, None

    def part(mask):
        def occupancy(points):
            index = np.rint((np.asarray(points, dtype=float) - body.origin) / body.voxel).astype(int)
            valid = np.all((index >= 0) & (index < mask.shape), axis=1)
            out = np.zeros(len(index))
            out[valid] = mask[tuple(index[valid].T)]
            return out

        return link_body(body.link, occupancy, body.origin, body.origin + body.voxel * (np.array(mask.shape) - 1),
                         body.voxel, 0.5, keep_fraction=0.0, where=where)

    try:
        return part(arm_cells), part(on_board)
    except InputError:
        return body, None


def group_contacts(contacts: list[Contact], groups: dict[str, list[str]]) -> list[Contact]:
    """The contacts of links, repeated for every group of a link (a group moves with its link)."""
    out = list(contacts)
    for contact in contacts:
        for key in groups.get(contact.a, []):
            out.append(Contact(key, contact.b, contact.a_T_b))
        for key in groups.get(contact.b, []):
            out.append(Contact(contact.a, key, contact.a_T_b))
        for key_a in groups.get(contact.a, []):
            for key_b in groups.get(contact.b, []):
                out.append(Contact(key_a, key_b, contact.a_T_b))
    return out


def fit_groups(targets: list[SphereTarget], budget: int, board_targets: list[SphereTarget] = (), board_budget: int = 0,
               contacts: list[Contact] = (), iterations: int = 250, seed: int = 0,
               rng: np.random.Generator | None = None) -> tuple[dict[str, SphereCover], dict]:
    """Spheres for every link: ``budget`` shared by the arm's ``targets`` (one a link at least),
    ``board_budget`` by the ``board_targets`` (groups of a link, ``target.group`` set), placed apart
    and refined together (:func:`selfmodel.export.sphere_fit.refine_covers`). Returns link -> cover (a
    group's spheres after its link's own) and a report: ``spheres`` {"arm": n, "board": m},
    ``groups`` link -> (k,) group name of each sphere ("arm" or the group), ``uncovered``, and
    ``starts``: each greedy start of the arm's spheres (its bulge) with what its refined cover
    leaves out and its union's volume, ``bulge_mm`` the one kept.

    Every greedy start is refined, and the refined cover kept is the one that holds the most of the
    surface (:func:`selfmodel.export.spheres.best_of`), then has the smallest union: which start the
    refinement serves best cannot be read off the greedy covers. Where a neighbour the arm stood
    next to bounds the spheres, the greedy cover that bulges least can leave a link's surface out
    where no refinement finds it again (on the crashed xArm6, 19 % of link4's), while the 12 mm
    start leaves 0.9 % of link4's out (0.13 % of the whole surface) with a smaller union.
    """
    rng = rng or np.random.default_rng(seed)
    starts = sphere_candidates(list(targets), budget, rng=rng)
    board_targets = list(board_targets)
    board_covers = (fit_sphere_covers(board_targets, max(board_budget, len(board_targets)), rng=rng)
                    if board_targets else {})
    groups: dict[str, list[str]] = {}
    for target in board_targets:
        groups.setdefault(target.link, []).append(target.key)
    everything = list(targets) + board_targets
    grouped = group_contacts(list(contacts), groups)
    refined_starts = refine_starts(everything, [{**start.covers, **board_covers} for start in starts], grouped,
                                   iterations=iterations, rng=np.random.default_rng(seed))
    scores = [(area_share(everything, fit["uncovered"]), sum(cover.union_volume() for cover in refined.values()))
              for refined, fit in refined_starts]
    kept = best_of(scores)
    refined, fit = refined_starts[kept]
    merged, names = {}, {}
    for target in targets:
        parts = [(None, refined[target.key])] + [(key.split("#", 1)[1], refined[key]) for key in groups.get(target.link, [])]
        merged[target.link] = SphereCover(np.vstack([cover.centres for _, cover in parts]),
                                          np.concatenate([cover.radii for _, cover in parts]))
        names[target.link] = [group or "arm" for group, cover in parts for _ in cover.radii]
    counts = {"arm": int(sum(len(refined[t.key].radii) for t in targets)),
              BOARD: int(sum(len(refined[t.key].radii) for t in board_targets))}
    tried = [{"bulge_mm": round(1000.0 * start.bulge, 1), "uncovered": round(score[0], 5),
              "union_volume_cm3": round(1e6 * score[1], 1)} for start, score in zip(starts, scores)]
    return merged, {"spheres": counts, "groups": names, "uncovered": fit["uncovered"],
                    "bulge_mm": round(1000.0 * starts[kept].bulge, 1), "starts": tried}
