"""The exported geometry where the arm really stood: links apart at every recorded configuration.

Every recorded (training) configuration is one the real arm occupied, so no two links a planner
checks may overlap there. Pairs are told apart by the model's chain:

- ``adjacent``: parent and child of a joint; planners skip them (SRDF ``Adjacent``);
- ``rigid``: no moving joint between them (closed fingers on a hand); their contact never changes;
- ``checked``: every other pair.

For checked pairs the learned bodies must already be nearly apart (the self-model learns exclusive
ownership of space): space both claim at a recorded configuration goes to the one it lies deeper
in, and space deeper than ``tolerance`` in both is refused with the links, poses and depth. The
convex pieces, whose hulls and margin reach beyond the bodies, are then cut where they overlap
at a recorded configuration: by the plane halfway between the two bodies' parts that the pieces
hold (coal's nearest points between their hulls), each piece keeping its side. Where those parts
cannot be split by a plane (one link's part wraps around the other's), the piece is split in two
first; where no piece may be split any more, the plane (among the two pieces' face normals) that
leaves the least of either body outside cuts them, and what it leaves out is reported. A fixed
piece (a kept board's box: declared geometry, not learned) is never cut: the neighbour's piece
alone is cut back to the plane that parts it from the box. Spheres that overlap shrink, the larger
one more.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage
from scipy.spatial import ConvexHull, QhullError

from rigs.errors import InputError, setting
from rigs.solids import cell_distances
from selfmodel.export.bodies import ConvexPiece, LinkBody, conservative_hull, polytope
from selfmodel.export.spheres import SphereCover

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
    cells_settled: dict[str, int] = field(default_factory=dict)  # grid cells a body gave up to a neighbour
    reach_mm: float = 0.0  # how far from a touching neighbour a cut piece may leave its body uncovered
    forced_cuts: int = 0  # cuts by the best plane where no plane parts the two bodies' parts
    held_by: dict[str, str] = field(default_factory=dict)  # a link with no learned body -> the rigid neighbour holding it
    spheres_uncovered: dict[str, float] = field(default_factory=dict)  # share of a link's surface the spheres leave
                                                                        # to keep clear of a touching neighbour

    def report(self) -> dict:
        return {"configurations": self.configurations, "cells_settled": self.cells_settled,
                "piece_cuts": self.cuts, "piece_splits": self.splits, "forced_cuts": self.forced_cuts,
                "uncovered_near_contact_mm": self.reach_mm,
                "sphere_shrinks": self.sphere_shrinks, "spheres_uncovered_near_contact": self.spheres_uncovered,
                "pairs": {kind: sum(1 for k in self.kinds.values() if k == kind) for kind in ("adjacent", "rigid", "checked")},
                "held_by_rigid_neighbour": self.held_by,
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


def boundary_cells(body: LinkBody) -> np.ndarray:
    """(n, 3) centres of the body's cells that have an empty neighbour, link frame."""
    solid = np.pad(body.solid, 1)
    edge = solid & ~ndimage.binary_erosion(solid)
    return body.origin + body.voxel * (np.argwhere(edge[1:-1, 1:-1, 1:-1]))


def _edt(body: LinkBody) -> np.ndarray:
    return cell_distances(np.pad(body.solid, 1))[1:-1, 1:-1, 1:-1].astype(float) * body.voxel


def settle_bodies(bodies: dict[str, LinkBody], poses: dict[str, np.ndarray], kinds: dict[tuple[str, str], str],
                  pose_ids: list[str], tolerance: float, where: str, separation: Separation) -> dict[str, np.ndarray]:
    """Where two checked links' bodies overlap at a recorded configuration, the space is one link's:
    each contested cell goes to the body it lies deeper in. Returns link -> (n, 3) grid indices of
    the cells its body loses. ``poses``: link -> (C, 4, 4) base frame.

    Depth images blur a thin part (a board, a finger) into a slab a few centimetres thick, so two
    bodies may both claim space near their surfaces; a cell deeper than ``tolerance`` m in both is
    refused (InputError naming the links, the poses and the depth): two links really share space.
    """
    depth = {link: _edt(body) for link, body in bodies.items()}
    cells = {link: np.argwhere(body.solid) for link, body in bodies.items()}
    balls = {}
    for link, body in bodies.items():
        centres = body.origin + body.voxel * cells[link]
        middle = centres.mean(axis=0)
        balls[link] = (middle, float(np.linalg.norm(centres - middle, axis=1).max()) + body.voxel)
    removed: dict[str, set] = {link: set() for link in bodies}
    for (a, b), kind in kinds.items():
        if kind != "checked":
            continue
        refused, worst = [], 0.0
        (ca, ra), (cb, rb) = balls[a], balls[b]
        for c in range(len(pose_ids)):
            pa, pb = poses[a][c], poses[b][c]
            if np.linalg.norm(pa[:3, :3] @ ca + pa[:3, 3] - pb[:3, :3] @ cb - pb[:3, 3]) > ra + rb:
                continue
            for one, other, p_one, p_other in ((a, b, pa, pb), (b, a, pb, pa)):
                mine = cells[one]
                other_T_one = np.linalg.inv(p_other) @ p_one
                points = (bodies[one].origin + bodies[one].voxel * mine) @ other_T_one[:3, :3].T + other_T_one[:3, 3]
                index = np.round((points - bodies[other].origin) / bodies[other].voxel).astype(int)
                valid = np.all((index >= 0) & (index < bodies[other].solid.shape), axis=1)
                rows = np.flatnonzero(valid)
                rows = rows[bodies[other].solid[tuple(index[rows].T)]]
                if not len(rows):
                    continue
                own_depth = depth[one][tuple(mine[rows].T)]
                other_depth = depth[other][tuple(index[rows].T)]
                shared = float(np.minimum(own_depth, other_depth).max())
                worst = max(worst, shared)
                if shared > tolerance:
                    refused.append((shared, pose_ids[c]))
                lose = rows[other_depth >= own_depth]
                removed[one].update(map(tuple, mine[lose]))
        separation.body_overlap_mm[(a, b)] = 1000.0 * worst
        if refused:
            by_pose: dict[str, float] = {}
            for shared, pose in refused:
                by_pose[pose] = max(by_pose.get(pose, 0.0), shared)
            refused = sorted(((d, pose) for pose, d in by_pose.items()), reverse=True)
            deepest, poses_named = refused[0][0], [pose for _, pose in refused]
            shown = ", ".join(f"{pose} ({1000 * d:.0f} mm)" for d, pose in refused[:5])
            raise InputError(f"{where}: the learned bodies of {a} and {b} overlap by up to {1000 * deepest:.0f} mm at "
                             f"{len(poses_named)} of {len(pose_ids)} recorded poses ({shown}{', ...' if len(refused) > 5 else ''}), "
                             f"deeper than {1000 * tolerance:.0f} mm inside both; the arm really stood there, so a model in "
                             f"which two links share space cannot be exported. Train longer, or check the cameras' poses.")
    separation.cells_settled = {link: len(lost) for link, lost in removed.items() if lost}
    return {link: np.array(sorted(lost), dtype=int).reshape(-1, 3) for link, lost in removed.items()}


def without_cells(occupancy, body: LinkBody, cells: np.ndarray):
    """``occupancy`` (link frame) with the given grid cells of ``body`` emptied."""
    gone = np.zeros(body.solid.shape, dtype=bool)
    gone[tuple(cells.T)] = True

    def masked(points: np.ndarray) -> np.ndarray:
        points = np.asarray(points, dtype=float)
        values = np.asarray(occupancy(points), dtype=float).copy()
        index = np.round((points - body.origin) / body.voxel).astype(int)
        valid = np.all((index >= 0) & (index < gone.shape), axis=1)
        rows = np.flatnonzero(valid)
        values[rows[gone[tuple(index[rows].T)]]] = 0.0
        return values

    return masked


def _convex(points: np.ndarray):
    import coal  # coal loads only where a planner's view of the URDF is built

    vector = coal.StdVec_Vec3s()
    for point in np.asarray(points, dtype=float):
        vector.append(point)
    return coal.Convex.convexHull(vector, False, "")


def _transform(pose: np.ndarray):
    import coal  # coal loads only where a planner's view of the URDF is built

    return coal.Transform3s(np.ascontiguousarray(pose[:3, :3]), np.ascontiguousarray(pose[:3, 3]))


def _hull_points(points: np.ndarray) -> np.ndarray:
    try:
        return points[ConvexHull(points).vertices]
    except (QhullError, ValueError):
        return points


def separate_pieces(pieces: dict[str, list[ConvexPiece]], bodies: dict[str, LinkBody], poses: dict[str, np.ndarray],
                    kinds: dict[tuple[str, str], str], pose_ids: list[str], max_pieces: int, max_vertices: int,
                    tolerance: float, where: str, separation: Separation,
                    attempts: int = 40, sweeps: int = 6,
                    fixed: dict[str, list[ConvexPiece]] | None = None) -> dict[str, list[ConvexPiece]]:
    """Cut (and where needed split) pieces until no checked pair overlaps at any recorded pose. A cut
    piece with too many vertices is simplified to a polytope that may reach a little beyond where
    it was cut elsewhere, so the sweep over all pairs and poses repeats until one finds nothing.
    When the sweeps run out, what still overlaps is measured and named: the links, the poses and
    how deep. ``fixed``: link -> pieces that count in the checks but are never cut (a kept board's
    box); they are not in what is returned."""
    fixed = fixed or {}
    pieces = {link: list(pieces.get(link, [])) + list(fixed.get(link, [])) for link in {**pieces, **fixed}}
    ids = {id(piece) for items in fixed.values() for piece in items}
    separated = _separated(pieces, bodies, poses, kinds, pose_ids, max_pieces, max_vertices, tolerance, where,
                           separation, attempts, sweeps, ids)
    return {link: [piece for piece in items if id(piece) not in ids] for link, items in separated.items()}


def _separated(pieces, bodies, poses, kinds, pose_ids, max_pieces, max_vertices, tolerance, where, separation, attempts,
               sweeps, fixed: set[int]) -> dict[str, list[ConvexPiece]]:
    checked = [pair for pair, kind in kinds.items() if kind == "checked" and pair[0] in pieces and pair[1] in pieces]
    for _ in range(sweeps):
        before = separation.cuts + separation.splits + separation.forced_cuts
        _sweep(pieces, bodies, poses, checked, pose_ids, max_pieces, max_vertices, tolerance, where,
               separation, attempts, fixed)
        if separation.cuts + separation.splits + separation.forced_cuts == before:
            return pieces
    left = piece_overlaps(pieces, poses, checked, pose_ids)
    if not left:  # the last sweep's cuts left nothing behind
        return pieces
    shown = "; ".join(f"{a} and {b} at {pose} by {1000 * depth:.1f} mm" for depth, a, b, pose in left[:5])
    pairs = sorted({(a, b) for _, a, b, _ in left})
    raise InputError(f"{where}: after {sweeps} sweeps of cuts the convex pieces still overlap at "
                     f"{len({pose for *_, pose in left})} recorded pose(s), {len(pairs)} pair(s) of links: {shown}"
                     f"{'; and more' if len(left) > 5 else ''}. A cut piece simplified to {max_vertices} vertices reaches "
                     f"back into its neighbour: train longer (or on more poses of these links) so the bodies part "
                     f"cleanly, or raise {setting('max_vertices')} so a cut piece keeps its cut.")


def piece_overlaps(pieces: dict[str, list[ConvexPiece]], poses: dict[str, np.ndarray],
                   checked: list[tuple[str, str]], pose_ids: list[str]) -> list[tuple[float, str, str, str]]:
    """(depth m, link a, link b, pose id) for every checked pair whose convex pieces overlap at a recorded
    pose (the deepest pair of pieces; ``poses``: link -> (P, 4, 4) base frame), deepest first."""
    import coal  # coal loads only where a planner's view of the URDF is built

    request, result = coal.DistanceRequest(), coal.DistanceResult()
    shapes = {link: [_convex(piece.vertices) for piece in items] for link, items in pieces.items()}
    balls = {link: [_ball(piece) for piece in items] for link, items in pieces.items()}
    found = []
    for a, b in checked:
        for c, pose_id in enumerate(pose_ids):
            pa, pb = poses[a][c], poses[b][c]
            deepest = 0.0
            for i, j in itertools.product(range(len(pieces[a])), range(len(pieces[b]))):
                (ca, ra), (cb, rb) = balls[a][i], balls[b][j]
                if np.linalg.norm(pa[:3, :3] @ ca + pa[:3, 3] - pb[:3, :3] @ cb - pb[:3, 3]) > ra + rb:
                    continue
                result.clear()
                distance = coal.distance(shapes[a][i], _transform(pa), shapes[b][j], _transform(pb), request, result)
                deepest = max(deepest, -float(distance))
            if deepest > 0.0:
                found.append((deepest, a, b, pose_id))
    return sorted(found, reverse=True)


def _sweep(pieces, bodies, poses, checked, pose_ids, max_pieces, max_vertices, tolerance, where, separation,
           attempts, fixed: set[int]) -> None:
    import coal  # coal loads only where a planner's view of the URDF is built

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
                if not _cut(pieces, bodies, a, hit[0], b, hit[1], pa, pb, max_pieces, max_vertices, tolerance, separation,
                            fixed):
                    raise InputError(f"{where}: at recorded pose {pose_ids[c]} the convex pieces of {a} and {b} overlap "
                                     f"and the parts of the two bodies they hold cannot be told apart by a plane, even "
                                     f"with {2 * max_pieces} pieces a link; raise {setting('max_pieces')} or train "
                                     f"longer.")
                for link in (a, b):
                    shapes[link] = [_convex(piece.vertices) for piece in pieces[link]]
                    balls[link] = [_ball(piece) for piece in pieces[link]]
            else:
                left = piece_overlaps(pieces, {a: pa[None], b: pb[None]}, [(a, b)], [pose_ids[c]])
                depth = f" by {1000 * left[0][0]:.1f} mm" if left else ""
                raise InputError(f"{where}: the convex pieces of {a} and {b} still overlap{depth} at recorded pose "
                                 f"{pose_ids[c]} after {attempts} cuts of them there: train longer (or on more poses "
                                 f"of these links) so the bodies part cleanly, or raise {setting('max_pieces')} so "
                                 f"each piece holds less.")


def _ball(piece: ConvexPiece) -> tuple[np.ndarray, float]:
    centre = piece.vertices.mean(axis=0)
    return centre, float(np.linalg.norm(piece.vertices - centre, axis=1).max())


def _held_points(piece: ConvexPiece, body: LinkBody) -> np.ndarray:
    """The body's points (its grid cells and surface vertices) that this piece holds, link frame."""
    points = np.vstack([body.inside, np.asarray(body.mesh.vertices)])
    return points[piece.contains(points, tolerance=1e-7)]


def _cut(pieces, bodies, a, i, b, j, pa, pb, max_pieces, max_vertices, tolerance, separation,
         fixed: set[int] = frozenset()) -> bool:
    """Cut piece i of a and piece j of b (posed by pa, pb) apart, or split one; False when impossible.
    ``fixed``: ids of pieces never cut (only the other piece of the pair is)."""
    import coal  # coal loads only where a planner's view of the URDF is built

    if id(pieces[a][i]) in fixed:
        return _cut_from_fixed(pieces, bodies, b, j, pieces[a][i], pb, pa, max_pieces, max_vertices, tolerance, separation)
    if id(pieces[b][j]) in fixed:
        return _cut_from_fixed(pieces, bodies, a, i, pieces[b][j], pa, pb, max_pieces, max_vertices, tolerance, separation)
    held_a = _held_points(pieces[a][i], bodies[a]) @ pa[:3, :3].T + pa[:3, 3]
    held_b = _held_points(pieces[b][j], bodies[b]) @ pb[:3, :3].T + pb[:3, 3]
    for link, k, held in ((a, i, held_a), (b, j, held_b)):
        if not len(held) and len(pieces[link]) > 1:  # a piece holding none of its body is only margin
            pieces[link].pop(k)
            return True
    if not len(held_a) or not len(held_b):
        return False
    # Where the two bodies touch, their parts may wrap round each other: the cells next to the other
    # body (one cell, then more, up to ``tolerance``) need not stay inside, so that a plane can split them.
    request, result = coal.DistanceRequest(), coal.DistanceResult()
    identity = coal.Transform3s.Identity()
    for reach in np.arange(bodies[a].voxel, tolerance + 1e-9, bodies[a].voxel):
        kept_a = _outside(held_a, bodies[b], pb, reach)
        kept_b = _outside(held_b, bodies[a], pa, reach)
        result.clear()
        try:
            gap = coal.distance(_convex(_hull_points(kept_a)), identity, _convex(_hull_points(kept_b)), identity,
                                request, result)
        except ValueError:  # fewer than four points, or all in a plane: no hull to part
            gap = 0.0
        if gap > 2 * GAP:
            separation.reach_mm = max(separation.reach_mm, 1000.0 * reach)
            break
    if gap <= 2 * GAP:
        # Not separable by a plane: split one of the two pieces (each half holds its side) and retry.
        for link, k, held in ((a, i, held_a), (b, j, held_b)):
            if len(pieces[link]) < 2 * max_pieces and len(held) >= 8:
                halves = _split(held, pieces[link][k], pa if link == a else pb, max_vertices)
                if halves is not None:
                    pieces[link][k:k + 1] = halves
                    separation.splits += 1
                    return True
        # No piece left to split: of the two pieces' face normals (and the line between what each
        # holds), the plane that leaves the least of either's held parts on the wrong side, halfway;
        # the cells near the contact (within ``tolerance``) need not stay inside. What is left out is
        # reported as ``uncovered_near_contact_mm``.
        kept_a = _outside(held_a, bodies[b], pb, tolerance)
        kept_b = _outside(held_b, bodies[a], pa, tolerance)
        candidates = np.vstack([pieces[a][i].normals @ pa[:3, :3].T, -(pieces[b][j].normals @ pb[:3, :3].T),
                                (kept_b.mean(axis=0) - kept_a.mean(axis=0))[None]])
        candidates /= np.maximum(np.linalg.norm(candidates, axis=1, keepdims=True), 1e-12)
        reach_a, reach_b = (kept_a @ candidates.T).max(axis=0), (kept_b @ candidates.T).min(axis=0)
        best = int(np.argmin(reach_a - reach_b))
        normal = candidates[best]
        middle = float((reach_a[best] + reach_b[best]) / 2)
        lost = max(float((held_a @ normal).max() - middle), float(middle - (held_b @ normal).min()), 0.0)
        separation.forced_cuts += 1
        separation.reach_mm = max(separation.reach_mm, 1000.0 * lost)
    else:
        near_a, near_b = np.asarray(result.getNearestPoint1()), np.asarray(result.getNearestPoint2())
        normal = (near_b - near_a) / np.linalg.norm(near_b - near_a)
        middle = float(normal @ (near_a + near_b) / 2)
    pieces[a][i] = _clipped(pieces[a][i], pa, normal, middle - GAP, max_vertices)
    pieces[b][j] = _clipped(pieces[b][j], pb, -normal, -(middle + GAP), max_vertices)
    separation.cuts += 1
    return True


def _cut_from_fixed(pieces, bodies, link, k, fixed: ConvexPiece, pose: np.ndarray, pose_fixed: np.ndarray,
                    max_pieces: int, max_vertices: int, tolerance: float, separation: Separation) -> bool:
    """Piece k of ``link`` (posed by ``pose``) cut back from a ``fixed`` piece (posed by ``pose_fixed``)
    that is never cut: to the plane through the fixed piece's point nearest to what piece k holds
    outside it (those parts within ``tolerance`` of it need not stay inside), else, where the held
    parts wrap round it, split, else to the best of the fixed piece's face planes. The box is the
    declared plate the arm carried; learned matter inside it at a recorded pose is the plate's."""
    import coal  # coal loads only where a planner's view of the URDF is built

    held = _held_points(pieces[link][k], bodies[link]) @ pose[:3, :3].T + pose[:3, 3]
    if not len(held):
        if len(pieces[link]) > 1:  # a piece holding none of its body is only margin
            pieces[link].pop(k)
            return True
        return False
    corners = fixed.vertices @ pose_fixed[:3, :3].T + pose_fixed[:3, 3]
    normals = fixed.normals @ pose_fixed[:3, :3].T
    offsets = fixed.offsets + normals @ pose_fixed[:3, 3]

    def outside(reach: float) -> np.ndarray:
        """The held points farther than ``reach`` outside the fixed piece (or all, if none is)."""
        beyond = np.max(held @ normals.T - offsets, axis=1) > reach
        return held[beyond] if beyond.any() else held

    request, result = coal.DistanceRequest(), coal.DistanceResult()
    identity = coal.Transform3s.Identity()
    gap, voxel = 0.0, bodies[link].voxel
    for reach in np.arange(0.0, tolerance + 1e-9, voxel):
        kept = outside(reach)
        result.clear()
        try:
            gap = coal.distance(_convex(corners), identity, _convex(_hull_points(kept)), identity, request, result)
        except ValueError:  # fewer than four points, or all in a plane: no hull to part
            gap = 0.0
        if gap > 2 * GAP:
            separation.reach_mm = max(separation.reach_mm, 1000.0 * reach)
            break
    if gap > 2 * GAP:
        near_fixed, near_piece = np.asarray(result.getNearestPoint1()), np.asarray(result.getNearestPoint2())
        normal = (near_piece - near_fixed) / np.linalg.norm(near_piece - near_fixed)
        offset = float(normal @ near_fixed)
    else:
        if len(pieces[link]) < 2 * max_pieces and len(held) >= 8:
            halves = _split(held, pieces[link][k], pose, max_vertices)
            if halves is not None:
                pieces[link][k:k + 1] = halves
                separation.splits += 1
                return True
        # Of the fixed piece's face planes, the one that leaves the least of the held parts behind it.
        kept = outside(tolerance)
        lost = np.max(offsets[None] - kept @ normals.T, axis=0)
        best = int(np.argmin(lost))
        normal, offset = normals[best], float(offsets[best])
        separation.forced_cuts += 1
        separation.reach_mm = max(separation.reach_mm, 1000.0 * max(float(offset - (held @ normal).min()), 0.0))
    pieces[link][k] = _clipped(pieces[link][k], pose, -normal, -(offset + GAP), max_vertices)
    separation.cuts += 1
    return True


def _near(points_base: np.ndarray, other: LinkBody, pose_other: np.ndarray, reach: float) -> np.ndarray:
    """(N,) bool: within ``reach`` m of the other body (posed by ``pose_other``)."""
    local = (points_base - pose_other[:3, 3]) @ pose_other[:3, :3]
    return other.contains(local, grow_cells=max(1, int(round(reach / other.voxel))))


def _outside(points_base: np.ndarray, other: LinkBody, pose_other: np.ndarray, tolerance: float) -> np.ndarray:
    local = (points_base - pose_other[:3, 3]) @ pose_other[:3, :3]
    grow = max(0, int(round(tolerance / other.voxel)))
    keep = ~other.contains(local, grow_cells=grow)
    return points_base[keep] if keep.any() else points_base


def _clipped(piece: ConvexPiece, pose: np.ndarray, normal_base: np.ndarray, offset_base: float,
             max_vertices: int) -> ConvexPiece:
    """The piece less the side of the plane ``normal . x > offset`` (base frame) at this pose."""
    normal = pose[:3, :3].T @ normal_base
    offset = offset_base - normal_base @ pose[:3, 3]
    cut = polytope(np.vstack([piece.normals, normal]), np.append(piece.offsets, offset))
    if len(cut.vertices) > max_vertices:
        cut = conservative_hull(cut.vertices, max_vertices, keep=normal[None])
    return cut


def _split(held_base: np.ndarray, piece: ConvexPiece, pose: np.ndarray,
           max_vertices: int) -> list[ConvexPiece] | None:
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
            half = conservative_hull(half.vertices, max_vertices, keep=(sign * axis)[None])
        halves.append(half)
    return halves


def separate_spheres(covers: dict[str, SphereCover], poses: dict[str, np.ndarray], kinds: dict[tuple[str, str], str],
                     separation: Separation, rounds: int = 20, first: dict[str, np.ndarray] | None = None,
                     floor: float = 0.0) -> dict[str, SphereCover]:
    """Shrink spheres of checked pairs that overlap at a recorded pose, each by its share of the
    overlap in proportion to its radius. ``first``: link -> (k,) bool, spheres that give way first,
    down to ``floor`` m, before the other sphere gives anything (a kept board's layer: its spheres
    stand out of the thin plate far more than an arm sphere out of its link, and an arm sphere shrunk
    leaves the link's own surface out at every pose)."""
    covers = {link: SphereCover(cover.centres.copy(), cover.radii.copy()) for link, cover in covers.items()}
    first = {link: np.asarray(first.get(link, np.zeros(len(cover.radii), dtype=bool)), dtype=bool)
             for link, cover in covers.items()} if first else {}
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
                need = worst[i, j]
                separation.sphere_shrinks += 1
                changed = True
                yields_a, yields_b = (bool(first[a][i]), bool(first[b][j])) if first else (False, False)
                if yields_a != yields_b:
                    link, k = (a, i) if yields_a else (b, j)
                    given = min(need, max(covers[link].radii[k] - floor, 0.0))
                    covers[link].radii[k] -= given
                    need -= given
                    if need <= 0:
                        continue
                # The larger sphere gives up more: it bulges more beyond its body.
                share = covers[a].radii[i] / (covers[a].radii[i] + covers[b].radii[j])
                covers[a].radii[i] = max(covers[a].radii[i] - need * share, 1e-4)
                covers[b].radii[j] = max(covers[b].radii[j] - need * (1 - share), 1e-4)
        if not changed:
            break
    return covers
