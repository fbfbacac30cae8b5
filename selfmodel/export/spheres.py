"""Sphere covers of a link body, the shape GPU planners (cuRobo) check fastest.

A cover is ``centres (k, 3)`` and ``radii (k,)`` in a link frame, metres. A good cover holds the
body's surface and gives away little free space, measured as cuRobo measures it
(:func:`cover_metrics`): coverage, the share of the body's points inside some sphere; protrusion,
the share of the union's surface that lies outside the body, with the mean and 95th percentile of
how far; the surface gap (how far uncovered surface points lie outside); and the volume ratio.

The fit works on the union, not on the sum of sphere volumes: spheres are chosen for the surface
they add to the union (one budget for the whole body, so a long link gets more than a short one),
with a bound on how far each may bulge beyond the body, and the union must hold all of the surface
(see :func:`fit_sphere_covers`). Where a sphere may not grow into a neighbour the arm stood next to,
a tight bound can leave surface no sphere holds; a cover is judged on what it holds first
(:func:`uncovered_share`), and on how far it bulges only among those that hold as much.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree


@dataclass
class SphereCover:
    centres: np.ndarray  # (k, 3) m, link frame
    radii: np.ndarray  # (k,) m

    def contains(self, points: np.ndarray, tolerance: float = 1e-9, batch: int = 100_000) -> np.ndarray:
        """(N, 3) -> (N,) bool: inside at least one sphere (within ``tolerance`` m).

        Squared distances from one matrix product (float64, about the spheres' mean so the terms stay
        small: exact to 1e-15 m at link sizes), where the distance of each point to each sphere took an
        (N, k, 3) difference array: union volumes read 200 000 points a cover."""
        points = np.asarray(points, dtype=float)
        if not len(self.radii):
            return np.zeros(len(points), dtype=bool)
        middle = self.centres.mean(axis=0)
        centres = self.centres - middle
        reach = (self.radii + tolerance) ** 2 - np.einsum("ij,ij->i", centres, centres)  # (k,)
        result = np.empty(len(points), dtype=bool)
        for start in range(0, len(points), batch):
            chunk = points[start:start + batch] - middle
            # |p - c|^2 <= (r + tolerance)^2  <=>  2 p.c - |p|^2 >= |c|^2 - (r + tolerance)^2
            closeness = chunk @ (2.0 * centres.T) - np.einsum("ij,ij->i", chunk, chunk)[:, None]
            result[start:start + batch] = np.any(closeness >= -reach[None], axis=1)
        return result

    def outside_distance(self, points: np.ndarray, batch: int = 100_000) -> np.ndarray:
        """(N, 3) -> (N,) m: distance outside the union of spheres (0 inside)."""
        points = np.asarray(points, dtype=float)
        result = np.empty(len(points))
        for start in range(0, len(points), batch):
            chunk = points[start:start + batch]
            gaps = np.linalg.norm(chunk[:, None, :] - self.centres[None], axis=2) - self.radii[None]
            result[start:start + batch] = np.maximum(gaps.min(axis=1), 0.0)
        return result

    def inflated(self, margin: float) -> "SphereCover":
        return SphereCover(self.centres.copy(), self.radii + margin)

    @property
    def summed_volume(self) -> float:
        return float(4.0 / 3.0 * np.pi * np.sum(self.radii ** 3))

    def union_volume(self, samples: int = 200_000, seed: int = 0) -> float:
        """m^3 of the union (overlaps once), by uniform samples in its bounding box (a fixed seed, so
        two covers compare without sampling noise of their own)."""
        if not len(self.radii):
            return 0.0
        low = (self.centres - self.radii[:, None]).min(axis=0)
        high = (self.centres + self.radii[:, None]).max(axis=0)
        points = np.random.default_rng(seed).uniform(low, high, (samples, 3))
        return float(np.prod(high - low) * np.mean(self.contains(points)))

    def surface_points(self, per_sphere: int, rng: np.random.Generator) -> np.ndarray:
        """Points (M, 3) on the union's outer surface: on each sphere, outside every other one."""
        directions = rng.normal(size=(len(self.radii), per_sphere, 3))
        directions /= np.linalg.norm(directions, axis=2, keepdims=True)
        points = (self.centres[:, None] + self.radii[:, None, None] * directions).reshape(-1, 3)
        gaps = np.linalg.norm(points[:, None] - self.centres[None], axis=2) - self.radii[None]
        own = np.repeat(np.arange(len(self.radii)), per_sphere)
        gaps[np.arange(len(points)), own] = np.inf
        return points[gaps.min(axis=1) > -1e-9]


@dataclass
class SphereTarget:
    """One link's body for the sphere fit (link frame, m): ``surface`` (S, 3) points to hold, each
    worth ``area`` m^2 of surface; candidate centres ``centres`` (C, 3) inside the body with
    ``clearance`` (C,), their distance to the body's surface; ``limit`` (C,): the largest radius a
    sphere there may have (it must not reach other links where the arm really stood). For the joint
    fit (:mod:`selfmodel.export.sphere_fit`): ``interior`` (P, 3) points inside, ``field`` the signed
    distance to the surface held (a :class:`selfmodel.export.sphere_fit.DistanceField`), and ``obstacles``
    (M, 3) points of the bodies of links checked against this one, at the recorded configurations;
    ``inner`` (S, 3) the surface points without the margin (on the body itself), row for row."""

    link: str
    surface: np.ndarray
    area: float
    centres: np.ndarray
    clearance: np.ndarray
    limit: np.ndarray | None = None
    interior: np.ndarray | None = None
    field: object = None
    obstacles: np.ndarray | None = None
    inner: np.ndarray | None = None
    # dataclasses.field: ``field`` in this class is the distance field
    _tree: tuple | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def obstacle_tree(self):
        """A KD-tree (scipy cKDTree) of ``obstacles``, built once for the array they are: at 300
        recorded poses they are millions of points, and every refinement of every start asks."""
        if self._tree is None or self._tree[0] is not self.obstacles:
            self._tree = (self.obstacles, cKDTree(self.obstacles))
        return self._tree[1]

    def radii(self, bulge: float) -> np.ndarray:
        radii = self.clearance + bulge
        return radii if self.limit is None else np.minimum(radii, self.limit)


UNCOVERED_TIE = 0.002  # share of the held surface within which two covers hold "as much"
# m each greedy start may bulge beyond the body: a small bulge suits a slender link, a large one a
# blunt one, and one bulge serves all links of a start.
BULGES = (0.004, 0.008, 0.012, 0.018, 0.025)


@dataclass
class Candidate:
    """One greedy cover of every target, at one ``bulge`` (m): ``covers`` key -> SphereCover, and the
    area ``uncovered`` share of the targets' surface no sphere holds."""

    bulge: float
    covers: dict
    uncovered: float


def area_share(targets: list[SphereTarget], shares: dict[str, float]) -> float:
    """The share of all targets' surface area (their points, each worth its target's ``area``) from
    each target's share of its own points (target key -> share)."""
    total = sum(t.area * len(t.surface) for t in targets)
    return sum(t.area * len(t.surface) * shares[t.link] for t in targets) / total if total > 0 else 0.0


def uncovered_share(targets: list[SphereTarget], covers: dict) -> float:
    """The share of all targets' surface area that no sphere of its cover holds."""
    return area_share(targets, {t.link: float(np.mean(~covers[t.link].contains(t.surface))) for t in targets})


def best_of(scores: list[tuple[float, ...]]) -> int:
    """The index of the best of ``(uncovered, *rest)`` scores: of those that leave at most
    ``UNCOVERED_TIE`` more of the surface out than the least any leaves, the one with the smallest
    ``rest``. Holding the surface comes first; a cover that bulges less by leaving more out does
    not win."""
    least = min(score[0] for score in scores)
    tied = [k for k, score in enumerate(scores) if score[0] <= least + UNCOVERED_TIE]
    return min(tied, key=lambda k: scores[k][1:])


def sphere_candidates(targets: list[SphereTarget], budget: int,
                      bulges: tuple[float, ...] = BULGES) -> list[Candidate]:
    """One greedy cover a bulge: at most ``budget`` spheres over all links (at least one a link)
    that hold every surface point the candidates' radius bounds (``limit``) let them.

    A sphere centred at a candidate with radius ``clearance + bulge`` reaches at most ``bulge``
    beyond the body (every point of it is within ``bulge`` of the ball of radius ``clearance``,
    which lies inside). For each bulge, spheres are chosen greedily, over all links at once, by the
    surface area they newly hold; what the budget leaves uncovered is taken in by growing the
    nearest chosen sphere as far as its bound allows.
    """
    bulges = tuple(sorted(bulges))  # held_levels counts on radii that grow from one bulge to the next
    if budget < len(targets):
        raise ValueError(f"a sphere budget of {budget} cannot give each of {len(targets)} links one")
    held = [held_levels(t, bulges) for t in targets]  # a target: (S, C) uint8 and (bulges, C) counts
    candidates = []
    for b, bulge in enumerate(bulges):
        chosen = _greedy(targets, [levels for levels, _ in held], [counts[b] for _, counts in held],
                         len(bulges) - 1 - b, budget)
        covers = {t.link: tighten(_hold_all(t, picks, bulge), t.surface) for t, picks in zip(targets, chosen)}
        candidates.append(Candidate(bulge, covers, uncovered_share(targets, covers)))
    return candidates


def fit_sphere_covers(targets: list[SphereTarget], budget: int, bulges: tuple[float, ...] = BULGES,
                      rng: np.random.Generator | None = None) -> dict[str, SphereCover]:
    """The best of :func:`sphere_candidates`: of the covers that hold as much of the surface as the
    best (:func:`best_of`), the one with the smallest 95th percentile of protrusion (its union's
    surface outside the body, approximated against the candidate centres' clearance), then the
    smallest mean."""
    rng = rng or np.random.default_rng(0)
    candidates = sphere_candidates(targets, budget, bulges)
    scores = []
    for c in candidates:
        protrusion = np.concatenate([_protrusion(c.covers[t.link], t, rng) for t in targets])
        scores.append((c.uncovered, float(np.percentile(protrusion, 95)), float(protrusion.mean())))
    return candidates[best_of(scores)].covers


def pairwise_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(A, 3), (B, 3) -> (A, B) float32 distances, m, about b's mean so the float32 terms stay small
    (within 1e-6 m at link sizes, a hundredth of the greedy's sampling). torch's cdist forms them from
    one matrix product in a single pass, five times faster on one thread than the same sum in numpy
    (|a|^2 + |b|^2 - 2 a.b takes a pass over the (A, B) array for each of its terms)."""
    import torch  # torch adds 1.3 s to a start; only the sphere fit needs it

    middle = np.mean(b, axis=0)
    a = torch.as_tensor((np.asarray(a, dtype=float) - middle).astype(np.float32))
    b = torch.as_tensor((np.asarray(b, dtype=float) - middle).astype(np.float32))
    return torch.cdist(a, b, compute_mode="use_mm_for_euclid_dist").numpy()


def held_levels(target: SphereTarget, bulges: tuple[float, ...], rows: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """(S, C) uint8: at how many of the ``bulges`` (ascending) surface point s lies within the radius
    candidate c has there. A candidate's radius grows with the bulge, so s lies within it at
    ``bulges[b]`` exactly where the count exceeds ``len(bulges) - 1 - b``: one count holds every
    bulge's answer, in the memory of one boolean matrix. With it, (len(bulges), C) int: how many
    surface points each candidate holds at each bulge.

    The distances are formed a block of rows at a time (float32, torch's cdist from one matrix
    product) and compared while the block is in cache: the (S, C) float32 distance matrix, four
    times the size of the answer, is never written out."""
    import torch  # torch adds 1.3 s to a start; only the sphere fit needs it

    middle = np.mean(target.centres, axis=0)
    centres = torch.as_tensor((target.centres - middle).astype(np.float32))
    surface = torch.as_tensor((np.asarray(target.surface, dtype=float) - middle).astype(np.float32))
    # Radii in the distances' float32: a float64 bound would compare every distance in float64.
    bounds = [target.radii(bulge).astype(np.float32)[None] for bulge in bulges]
    levels = np.zeros((len(surface), len(centres)), dtype=np.uint8)
    held = np.zeros((len(bulges), len(centres)), dtype=np.int64)
    within = np.empty((min(rows, len(surface)), len(centres)), dtype=bool)
    for start in range(0, len(surface), rows):
        block = torch.cdist(surface[start:start + rows], centres, compute_mode="use_mm_for_euclid_dist").numpy()
        answer = within[:len(block)]
        count = levels[start:start + rows]
        for b, bound in enumerate(bounds):
            np.less_equal(block, bound, out=answer)  # numpy's compare is the faster
            np.add(count, answer.view(np.uint8), out=count)  # bytes added as they are, not cast
            held[b] += _column_counts(answer)
    return levels, held


def _greedy(targets: list[SphereTarget], levels: list[np.ndarray], held: list[np.ndarray], above: int,
            budget: int) -> list[list[int]]:
    """Candidate indices a target, chosen one at a time over all targets by the surface area they
    newly hold at one bulge: point s lies within candidate c's radius where a target's ``levels``
    (S, C) exceed ``above``, and ``held`` (C,) counts those points (:func:`held_levels`)."""
    # Surface points by rows (S, C): a chosen sphere's newly held points are a few rows, read in one
    # pass, where columns of a (C, S) matrix are strided reads through all of it.
    gains = [counts * t.area for t, counts in zip(targets, held)]  # area each would add now
    covered = [np.zeros(len(t.surface), dtype=bool) for t in targets]
    chosen: list[list[int]] = [[] for _ in targets]
    for step in range(budget):
        # The first round gives every link its first sphere; then the best over all links.
        candidates = [step] if step < len(targets) else range(len(targets))
        i = max(candidates, key=lambda n: gains[n].max())
        k = int(np.argmax(gains[i]))
        if gains[i][k] <= 0 and step >= len(targets):
            break
        chosen[i].append(k)
        new = (levels[i][:, k] > above) & ~covered[i]
        covered[i] |= new
        gains[i] = gains[i] - _column_counts(levels[i][new] > above) * targets[i].area
    return chosen


def _column_counts(matrix: np.ndarray) -> np.ndarray:
    """(R, C) bool -> (C,) int: how many rows are true in each column: the boolean bytes summed in
    the narrowest integer that holds R (numpy adds 16-bit lanes five times faster than 64-bit ones,
    and count_nonzero along an axis slower still)."""
    return matrix.view(np.uint8).sum(axis=0, dtype=np.uint16 if len(matrix) < 2 ** 16 else np.int64)


def _hold_all(target: SphereTarget, picks: list[int], bulge: float) -> SphereCover:
    centres = target.centres[picks]
    radii = target.radii(bulge)[picks]
    limit = np.full(len(picks), np.inf) if target.limit is None else target.limit[picks]
    gaps = pairwise_distances(target.surface, centres) - radii[None]  # (S, k)
    # Points the chosen spheres miss go to the nearest sphere that may grow enough to take them.
    room = limit[None] - radii[None] - gaps
    gaps = np.where(room >= 0, gaps, np.inf)
    nearest = np.argmin(gaps, axis=1)
    need = gaps[np.arange(len(gaps)), nearest]
    for k in range(len(radii)):
        mine = need[(nearest == k) & np.isfinite(need)]
        if len(mine) and mine.max() > 0:
            radii[k] = min(radii[k] + float(mine.max()), limit[k])
    return SphereCover(centres.astype(float), radii.astype(float) + 1e-6)


def tighten(cover: SphereCover, surface: np.ndarray, rounds: int = 1) -> SphereCover:
    """Each sphere, largest first, becomes the smallest ball around the surface points no other
    sphere holds (dropped when there are none): the union still holds every point it held. One
    round by default: on the xArm6 and Panda true meshes at 64 and 128 spheres, two rounds gave
    refined covers whose unions were within 0.3 % and no more often tighter."""
    centres, radii = cover.centres.copy(), cover.radii.copy()
    keep = np.ones(len(radii), dtype=bool)
    distance = np.linalg.norm(surface[:, None] - centres[None], axis=2)  # (S, k), a column per sphere moved
    held = distance <= radii[None] + 1e-9
    holders = held.sum(axis=1)  # (S,) spheres kept that hold each point, updated a column at a time
    for _ in range(rounds):
        for k in np.argsort(-radii):
            if not keep[k]:
                continue
            mine = surface[held[:, k] & (holders == 1)]
            if not len(mine):
                if keep.sum() > 1:
                    keep[k] = False
                    holders -= held[:, k]
                    held[:, k] = False
                continue
            centre, radius = enclosing_ball(mine)
            if radius < radii[k]:
                centres[k], radii[k] = centre, radius + 1e-7
                distance[:, k] = np.linalg.norm(surface - centre, axis=1)
                holders -= held[:, k]
                held[:, k] = distance[:, k] <= radii[k] + 1e-9
                holders += held[:, k]
    return SphereCover(centres[keep], radii[keep])


def enclosing_ball(points: np.ndarray, rounds: int = 30) -> tuple[np.ndarray, float]:
    """A near-smallest ball around points (N, 3): Badoiu-Clarkson core-set steps, then the exact
    radius about the centre found, so the ball always contains every point."""
    centre = points.mean(axis=0)
    for step in range(1, rounds + 1):
        offset = points - centre
        farthest = points[np.argmax(np.einsum("ij,ij->i", offset, offset))]
        centre = centre + (farthest - centre) / (step + 1)
    offset = points - centre
    return centre, float(np.sqrt(np.max(np.einsum("ij,ij->i", offset, offset))))


def _protrusion(cover: SphereCover, target: SphereTarget, rng: np.random.Generator, per_sphere: int = 200) -> np.ndarray:
    """How far (m) points of the union's outer surface lie beyond the body, approximated by their
    distance beyond the body's surface points (0 where a surface point is as far out)."""
    shell = cover.surface_points(per_sphere, rng)
    tree = cKDTree(target.centres)
    depth_of, index = tree.query(shell)
    # Outside by at least (distance to the nearest candidate) - (its clearance); candidates fill the
    # body, so this is the distance beyond the body to within their spacing.
    return np.maximum(depth_of - target.clearance[index], 0.0)


def cover_metrics(cover: SphereCover, surface: np.ndarray, interior: np.ndarray, body_volume: float,
                  outside_distance, inside, rng: np.random.Generator, per_sphere: int = 400) -> dict:
    """cuRobo's sphere metrics of a cover against a body (one frame, m).

    ``surface`` (S, 3) and ``interior`` (P, 3) sample the body; ``outside_distance(points)`` (m, 0
    inside) and ``inside(points)`` (bool) answer for the body; ``body_volume`` m^3.
    """
    gaps = cover.outside_distance(surface)
    shell = cover.surface_points(per_sphere, rng)
    out = ~inside(shell)
    distance = outside_distance(shell[out]) if out.any() else np.zeros(1)
    return {
        "spheres": int(len(cover.radii)),
        "coverage": float(np.mean(cover.contains(interior))) if len(interior) else 1.0,
        "surface_coverage": float(np.mean(gaps <= 1e-9)),
        "surface_gap_mean_mm": 1000.0 * float(gaps[gaps > 0].mean()) if np.any(gaps > 0) else 0.0,
        "surface_gap_p95_mm": 1000.0 * float(np.percentile(gaps, 95)),
        "largest_gap_mm": 1000.0 * float(gaps.max()),
        "protrusion_share": float(out.mean()) if len(shell) else 0.0,
        "protrusion_mean_mm": 1000.0 * float(distance.mean()),
        "protrusion_p95_mm": 1000.0 * float(np.percentile(distance, 95)),
        "volume_ratio": cover.summed_volume / body_volume if body_volume > 0 else float("inf"),
    }
