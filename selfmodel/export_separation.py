"""The exported geometry where the arm really stood: links apart at every recorded configuration.

Every recorded (training) configuration is one the real arm occupied, so no two links a planner
checks may overlap there. Pairs are told apart by the model's chain:

- ``adjacent``: parent and child of a joint; planners skip them (SRDF ``Adjacent``);
- ``rigid``: no moving joint between them (closed fingers on a hand); their contact never changes;
- ``checked``: every other pair.

For checked pairs the learned bodies must already be apart (the self-model learns exclusive
ownership of space); overlap deeper than ``tolerance`` is refused with the links, poses and depth.
The convex pieces, whose hulls and margin reach beyond the bodies, are then cut where they overlap
at a recorded configuration: by the plane halfway between the two bodies' parts that the pieces
hold (coal's nearest points between their hulls), each piece keeping its side. Where those parts
cannot be split by a plane (one link's part wraps around the other's), the piece is split in two
first. Spheres that overlap shrink, each by its share of the overlap.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage
from scipy.spatial import ConvexHull, QhullError

from rigs.errors import InputError
from selfmodel.collision import ConvexPiece, LinkBody, conservative_hull, polytope
from selfmodel.spheres import SphereCover

GAP = 1e-4  # m left between two cut pieces, so that touching is not contact


@dataclass
class Separation:
    """What the separation found and did, for the export report."""

    kinds: dict[tuple[str, str], str]
    body_overlap_mm: dict[tuple[str, str], float] = field(default_factory=dict)  # deepest at any recorded pose
    cuts: int = 0
    splits: int = 0
    sphere_shrinks: int = 0
    configurations: int = 0

    def report(self) -> dict:
        return {"configurations": self.configurations, "piece_cuts": self.cuts, "piece_splits": self.splits,
                "sphere_shrinks": self.sphere_shrinks,
                "pairs": {kind: sum(1 for k in self.kinds.values() if k == kind) for kind in ("adjacent", "rigid", "checked")},
                "deepest_body_overlap_mm": {f"{a}/{b}": round(depth, 2) for (a, b), depth in
                                            sorted(self.body_overlap_mm.items(), key=lambda item: -item[1])[:5] if depth > 0}}


def pair_kinds(spec, links: list[str]) -> dict[tuple[str, str], str]:
    """Each pair (sorted names) of ``links``: ``adjacent``, ``rigid`` or ``checked`` (see the module docstring)."""
    parent = {spec.link_names[k + 1]: (spec.link_names[joint.parent_index], joint) for k, joint in enumerate(spec.joints)}

    def up(link):
        path = []
        while link in parent:
            path.append((link, parent[link][1]))
            link = parent[link][0]
        return path

    kinds = {}
    for a, b in itertools.combinations(sorted(links), 2):
        if parent.get(a, (None,))[0] == b or parent.get(b, (None,))[0] == a:
            kinds[(a, b)] = "adjacent"
            continue
        path_a, path_b = up(a), up(b)
        common = {link for link, _ in path_a} & {link for link, _ in path_b}
        moving = [joint for link, joint in path_a + path_b if link not in common and joint.type != "fixed"]
        kinds[(a, b)] = "rigid" if not moving else "checked"
    return kinds


def _boundary_cells(body: LinkBody) -> np.ndarray:
    """(n, 3) centres of the body's cells that have an empty neighbour, link frame."""
    solid = np.pad(body.solid, 1)
    edge = solid & ~ndimage.binary_erosion(solid)
    return body.origin + body.voxel * (np.argwhere(edge[1:-1, 1:-1, 1:-1]))


def _edt(body: LinkBody) -> np.ndarray:
    return ndimage.distance_transform_edt(np.pad(body.solid, 1))[1:-1, 1:-1, 1:-1] * body.voxel


def check_bodies(bodies: dict[str, LinkBody], poses: dict[str, np.ndarray], kinds: dict[tuple[str, str], str],
                 pose_ids: list[str], tolerance: float, where: str, separation: Separation) -> None:
    """InputError naming links, poses and depth when two checked links' bodies overlap by more than
    ``tolerance`` m at a recorded configuration; ``poses``: link -> (C, 4, 4) base frame."""
    depth_grids = {link: _edt(body) for link, body in bodies.items()}
    # Where one body enters another, its boundary cells enter too: they are enough to find the depth.
    boundary = {link: _boundary_cells(body) for link, body in bodies.items()}
    balls = {link: (cells.mean(axis=0), float(np.linalg.norm(cells - cells.mean(axis=0), axis=1).max()))
             for link, cells in boundary.items()}
    for (a, b), kind in kinds.items():
        if kind != "checked":
            continue
        worst, where_worst = 0.0, []
        (ca, ra), (cb, rb) = balls[a], balls[b]
        for c in range(len(pose_ids)):
            pa, pb = poses[a][c], poses[b][c]
            if np.linalg.norm(pa[:3, :3] @ ca + pa[:3, 3] - pb[:3, :3] @ cb - pb[:3, 3]) > ra + rb:
                continue
            b_T_a = np.linalg.inv(pb) @ pa
            points = boundary[a] @ b_T_a[:3, :3].T + b_T_a[:3, 3]
            index = np.round((points - bodies[b].origin) / bodies[b].voxel).astype(int)
            valid = np.all((index >= 0) & (index < bodies[b].solid.shape), axis=1)
            if not valid.any():
                continue
            depth = depth_grids[b][tuple(index[valid].T)]
            deepest = float(depth.max()) if len(depth) else 0.0
            if deepest > tolerance:
                where_worst.append((deepest, pose_ids[c]))
            worst = max(worst, deepest)
        separation.body_overlap_mm[(a, b)] = 1000.0 * worst
        if where_worst:
            where_worst.sort(reverse=True)
            shown = ", ".join(f"{pose} ({1000 * depth:.0f} mm)" for depth, pose in where_worst[:5])
            raise InputError(f"{where}: the learned bodies of {a} and {b} overlap by up to {1000 * worst:.0f} mm at "
                             f"{len(where_worst)} of {len(pose_ids)} recorded poses ({shown}{', ...' if len(where_worst) > 5 else ''}), "
                             f"more than the {1000 * tolerance:.0f} mm tolerance; the arm really stood there, so a model in "
                             f"which two links share space cannot be exported. Train longer, or check the cameras' poses.")


def _convex(points: np.ndarray):
    import coal

    vector = coal.StdVec_Vec3s()
    for point in np.asarray(points, dtype=float):
        vector.append(point)
    return coal.Convex.convexHull(vector, False, "")


def _transform(pose: np.ndarray):
    import coal

    return coal.Transform3s(np.ascontiguousarray(pose[:3, :3]), np.ascontiguousarray(pose[:3, 3]))


def _hull_points(points: np.ndarray) -> np.ndarray:
    try:
        return points[ConvexHull(points).vertices]
    except (QhullError, ValueError):
        return points


def separate_pieces(pieces: dict[str, list[ConvexPiece]], bodies: dict[str, LinkBody], poses: dict[str, np.ndarray],
                    kinds: dict[tuple[str, str], str], pose_ids: list[str], max_pieces: int, max_vertices: int,
                    tolerance: float, rng: np.random.Generator, where: str, separation: Separation,
                    attempts: int = 40) -> dict[str, list[ConvexPiece]]:
    """Cut (and where needed split) pieces until no checked pair overlaps at any recorded pose. Cuts
    and splits only take away, so a pose once cleared stays clear."""
    import coal

    pieces = {link: list(items) for link, items in pieces.items()}
    checked = [pair for pair, kind in kinds.items() if kind == "checked" and pair[0] in pieces and pair[1] in pieces]
    request, result = coal.CollisionRequest(), coal.CollisionResult()
    shapes = {link: [_convex(piece.vertices) for piece in items] for link, items in pieces.items()}
    balls = {link: [_ball(piece) for piece in items] for link, items in pieces.items()}
    for a, b in checked:
        for c in range(len(pose_ids)):
            pa, pb = poses[a][c], poses[b][c]
            for _ in range(attempts):
                hit = None
                for i, j in itertools.product(range(len(pieces[a])), range(len(pieces[b]))):
                    (ca, ra), (cb, rb) = balls[a][i], balls[b][j]
                    if np.linalg.norm(pa[:3, :3] @ ca + pa[:3, 3] - pb[:3, :3] @ cb - pb[:3, 3]) > ra + rb:
                        continue
                    result.clear()
                    if coal.collide(shapes[a][i], _transform(pa), shapes[b][j], _transform(pb), request, result):
                        hit = (i, j)
                        break
                if hit is None:
                    break
                if not _cut(pieces, bodies, a, hit[0], b, hit[1], pa, pb, max_pieces, max_vertices, tolerance, rng, separation):
                    raise InputError(f"{where}: at recorded pose {pose_ids[c]} the convex pieces of {a} and {b} overlap "
                                     f"and the parts of the two bodies they hold cannot be told apart by a plane, even "
                                     f"with {max_pieces} pieces a link; raise --pieces or train longer.")
                for link in (a, b):
                    shapes[link] = [_convex(piece.vertices) for piece in pieces[link]]
                    balls[link] = [_ball(piece) for piece in pieces[link]]
            else:
                raise InputError(f"{where}: the convex pieces of {a} and {b} still overlap at recorded pose {pose_ids[c]} "
                                 f"after {attempts} cuts.")
    return pieces


def _ball(piece: ConvexPiece) -> tuple[np.ndarray, float]:
    centre = piece.vertices.mean(axis=0)
    return centre, float(np.linalg.norm(piece.vertices - centre, axis=1).max())


def _held_points(piece: ConvexPiece, body: LinkBody) -> np.ndarray:
    """The body's points (its grid cells and surface vertices) that this piece holds, link frame."""
    points = np.vstack([body.inside, np.asarray(body.mesh.vertices)])
    return points[piece.contains(points, tolerance=1e-7)]


def _cut(pieces, bodies, a, i, b, j, pa, pb, max_pieces, max_vertices, tolerance, rng, separation) -> bool:
    """Cut piece i of a and piece j of b (posed by pa, pb) apart, or split one; False when impossible."""
    import coal

    held_a = _held_points(pieces[a][i], bodies[a]) @ pa[:3, :3].T + pa[:3, 3]
    held_b = _held_points(pieces[b][j], bodies[b]) @ pb[:3, :3].T + pb[:3, 3]
    for link, k, held in ((a, i, held_a), (b, j, held_b)):
        if not len(held) and len(pieces[link]) > 1:  # a piece holding none of its body is only margin
            pieces[link].pop(k)
            return True
    if not len(held_a) or not len(held_b):
        return False
    # Cells within the overlap tolerance of the other body are contested: neither piece must keep them.
    held_a = _outside(held_a, bodies[b], pb, tolerance)
    held_b = _outside(held_b, bodies[a], pa, tolerance)
    hull_a, hull_b = _hull_points(held_a), _hull_points(held_b)
    request, result = coal.DistanceRequest(), coal.DistanceResult()
    identity = coal.Transform3s.Identity()
    gap = coal.distance(_convex(hull_a), identity, _convex(hull_b), identity, request, result)
    if gap <= 2 * GAP:
        # Not separable by a plane: split the larger-volume piece of the two and let the next round retry.
        for link, k, held in ((a, i, held_a), (b, j, held_b)):
            if len(pieces[link]) < max_pieces and len(held) >= 8:
                halves = _split(held, pieces[link][k], pa if link == a else pb, max_vertices, rng)
                if halves is not None:
                    pieces[link][k:k + 1] = halves
                    separation.splits += 1
                    return True
        return False
    near_a, near_b = np.asarray(result.getNearestPoint1()), np.asarray(result.getNearestPoint2())
    normal = (near_b - near_a) / np.linalg.norm(near_b - near_a)
    middle = float(normal @ (near_a + near_b) / 2)
    pieces[a][i] = _clipped(pieces[a][i], pa, normal, middle - GAP, max_vertices, rng)
    pieces[b][j] = _clipped(pieces[b][j], pb, -normal, -(middle + GAP), max_vertices, rng)
    separation.cuts += 1
    return True


def _outside(points_base: np.ndarray, other: LinkBody, pose_other: np.ndarray, tolerance: float) -> np.ndarray:
    local = (points_base - pose_other[:3, 3]) @ pose_other[:3, :3]
    grow = max(0, int(round(tolerance / other.voxel)))
    keep = ~other.contains(local, grow_cells=grow)
    return points_base[keep] if keep.any() else points_base


def _clipped(piece: ConvexPiece, pose: np.ndarray, normal_base: np.ndarray, offset_base: float, max_vertices: int,
             rng: np.random.Generator) -> ConvexPiece:
    """The piece less the side of the plane ``normal . x > offset`` (base frame) at this pose."""
    normal = pose[:3, :3].T @ normal_base
    offset = offset_base - normal_base @ pose[:3, 3]
    cut = polytope(np.vstack([piece.normals, normal]), np.append(piece.offsets, offset))
    if len(cut.vertices) > max_vertices:
        cut = conservative_hull(cut.vertices, max_vertices, rng, keep=normal[None])
    return cut


def _split(held_base: np.ndarray, piece: ConvexPiece, pose: np.ndarray, max_vertices: int,
           rng: np.random.Generator) -> list[ConvexPiece] | None:
    """Two pieces in place of one: the piece cut by the plane through the middle of what it holds,
    across its longest spread (each half still holds its side's points)."""
    local = (held_base - pose[:3, 3]) @ pose[:3, :3]
    centre = local.mean(axis=0)
    axis = np.linalg.svd(local - centre, full_matrices=False)[2][0]
    offset = float(axis @ centre)
    halves = []
    for sign in (1.0, -1.0):
        try:
            half = polytope(np.vstack([piece.normals, sign * axis]), np.append(piece.offsets, sign * offset))
        except (ValueError, QhullError):
            return None
        if len(half.vertices) > max_vertices:
            half = conservative_hull(half.vertices, max_vertices, rng, keep=(sign * axis)[None])
        halves.append(half)
    return halves


def separate_spheres(covers: dict[str, SphereCover], poses: dict[str, np.ndarray], kinds: dict[tuple[str, str], str],
                     separation: Separation, rounds: int = 20) -> dict[str, SphereCover]:
    """Shrink spheres of checked pairs that overlap at a recorded pose, each by half the overlap."""
    covers = {link: SphereCover(cover.centres.copy(), cover.radii.copy()) for link, cover in covers.items()}
    checked = [pair for pair, kind in kinds.items() if kind == "checked" and pair[0] in covers and pair[1] in covers]
    for _ in range(rounds):
        changed = False
        for a, b in checked:
            ca = np.einsum("cij,kj->cki", poses[a][:, :3, :3], covers[a].centres) + poses[a][:, None, :3, 3]
            cb = np.einsum("cij,kj->cki", poses[b][:, :3, :3], covers[b].centres) + poses[b][:, None, :3, 3]
            distance = np.linalg.norm(ca[:, :, None] - cb[:, None], axis=3)  # (C, ka, kb)
            overlap = covers[a].radii[None, :, None] + covers[b].radii[None, None, :] - distance + GAP
            worst = overlap.max(axis=0)
            hit = np.argwhere(worst > 0)
            for i, j in hit:
                shrink = worst[i, j] / 2
                covers[a].radii[i] = max(covers[a].radii[i] - shrink, 1e-4)
                covers[b].radii[j] = max(covers[b].radii[j] - shrink, 1e-4)
                separation.sphere_shrinks += 1
                changed = True
        if not changed:
            break
    return covers
