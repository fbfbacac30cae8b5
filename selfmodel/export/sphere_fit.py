"""The joint fit of every link's spheres: the union held tight to the body, links apart where the arm stood.

A greedy cover (:func:`selfmodel.export.spheres.fit_sphere_covers`) places the spheres and shares the
budget between links; its spheres are then moved and resized together, for all links at once, by
gradient descent (torch, Adam) on

- **coverage**: how far points of the body's (grown) surface, and of its inside, lie outside the
  union of the link's spheres (a ``cushion`` beyond the surface, so that the seams between spheres
  do not leave the surface just outside);
- **protrusion**: how far the union's outer surface (points on each sphere outside every other
  sphere of the link) lies outside the body, read from a signed distance field of the body;
- **contact where the arm really stood**: at every recorded configuration, a sphere may not reach
  into the body of a link it is checked against, nor overlap one of its spheres.

Coverage is a penalty whose weight grows as the descent goes on, so the end is a cover that holds the
surface with the least protrusion the placement allows; a last step grows the sphere nearest to any
surface point still outside, as far as the links it must not reach allow (points it cannot hold are
the ones next to a touching neighbour, and are counted).

Shapes: centres (k, 3) and radii (k,), link frames, metres.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from rigs.solids import cell_distances
from selfmodel.export.spheres import SphereCover

GAP = 5e-4  # m kept between spheres of links that must not touch at a recorded configuration
WATCH = 0.003  # m the refinement's spheres may move before every surface point is looked at again


@dataclass
class DistanceField:
    """Signed distance (m, negative inside) to a body's surface, on a grid in the link frame:
    ``values[i, j, k]`` at ``origin + voxel * (i, j, k)``. Beyond the grid, the value at the nearest
    grid point plus the distance to it (an over-estimate outside, which is the safe side)."""

    values: np.ndarray
    origin: np.ndarray
    voxel: float

    @classmethod
    def of_solid(cls, solid: np.ndarray, origin: np.ndarray, voxel: float, grow: float = 0.0,
                 pad: float = 0.04) -> "DistanceField":
        """The field of a boolean cell grid's body grown by ``grow`` m; ``pad`` m of grid around it.
        The surface is taken half a cell beyond the outermost cell centres (where marching cubes puts
        it)."""
        cells = int(np.ceil(pad / voxel)) + 1
        solid = np.asarray(solid, dtype=bool)
        padded = np.pad(solid, cells)
        values = (cell_distances(~padded) - 0.5) * voxel  # outside
        # Inside, the nearest empty cell is never beyond one cell of padding: the transform of that
        # smaller grid gives the same depths.
        inside = np.pad(cell_distances(np.pad(solid, 1))[1:-1, 1:-1, 1:-1], cells)
        values[padded] = -(inside[padded] - 0.5) * voxel
        return cls((values - grow).astype(np.float32), np.asarray(origin, dtype=float) - cells * voxel, float(voxel))

    def __call__(self, points: np.ndarray) -> np.ndarray:
        """(N, 3) -> (N,) signed distance, m."""
        points = np.asarray(points, dtype=float)
        shape = np.array(self.values.shape)
        index = (points - self.origin) / self.voxel
        clamped = np.clip(index, 0, shape - 1)
        beyond = np.linalg.norm(index - clamped, axis=1) * self.voxel
        return ndimage.map_coordinates(self.values, clamped.T, order=1, mode="nearest") + beyond

    def torch(self):
        """The same field as a differentiable torch function of (N, 3) float64 points."""
        import torch  # torch adds 1.3 s to a start; only the joint sphere fit needs it
        import torch.nn.functional as F  # torch adds 1.3 s to a start; only the joint sphere fit needs it

        grid = torch.as_tensor(self.values, dtype=torch.float64)[None, None]  # (1, 1, nx, ny, nz)
        origin = torch.as_tensor(self.origin, dtype=torch.float64)
        shape = torch.as_tensor(self.values.shape, dtype=torch.float64)

        def field(points):
            index = (points - origin) / self.voxel
            clamped = torch.minimum(torch.clamp(index, min=0.0), shape - 1)
            beyond = torch.linalg.norm(index - clamped, dim=1) * self.voxel
            # grid_sample reads (x, y, z) as (last, middle, first) axis, in [-1, 1] corner to corner.
            normal = 2.0 * clamped / (shape - 1) - 1.0
            sample = F.grid_sample(grid, normal.flip(1)[None, :, None, None], mode="bilinear",
                                   padding_mode="border", align_corners=True)
            return sample.reshape(-1) + beyond

        return field


@dataclass
class Contact:
    """Two links checked against each other, at the recorded configurations: ``a_T_b`` (C, 4, 4)
    poses b's frame in a's."""

    a: str
    b: str
    a_T_b: np.ndarray


def directions(count: int) -> np.ndarray:
    """(count, 3) unit vectors spread evenly over the sphere (a Fibonacci lattice)."""
    k = np.arange(count) + 0.5
    z = 1.0 - 2.0 * k / count
    angle = np.pi * (1.0 + 5 ** 0.5) * k
    radial = np.sqrt(1.0 - z ** 2)
    return np.stack([radial * np.cos(angle), radial * np.sin(angle), z], axis=1)


def refine_covers(targets, covers: dict, contacts: list[Contact] = (), iterations: int = 400, cushion: float = 0.001,
                  step: float = 5e-4, shell_points: int = 64, interior_points: int = 3000,
                  rng: np.random.Generator | None = None, coverage_start: float = 30.0,
                  coverage_end: float = 3e4, verbose: bool = False) -> tuple[dict, dict]:
    """``covers`` (link -> SphereCover) moved and resized jointly; returns the new
    covers and what the fit reports (``uncovered``: link -> share of its surface points it could not
    hold next to a touching neighbour).

    ``targets``: :class:`selfmodel.export.spheres.SphereTarget` with ``field`` (the body's signed distance),
    and optionally ``interior`` points and ``obstacles`` (points of checked links' bodies at the
    recorded configurations, own frame). ``step``: Adam's step, m.
    """
    return refine_starts(targets, [covers], contacts, iterations, cushion, step, shell_points, interior_points, rng,
                         coverage_start, coverage_end, verbose)[0]


def refine_starts(targets, starts: list[dict], contacts: list[Contact] = (), iterations: int = 400,
                  cushion: float = 0.001, step: float = 5e-4, shell_points: int = 64, interior_points: int = 3000,
                  rng: np.random.Generator | None = None, coverage_start: float = 30.0, coverage_end: float = 3e4,
                  verbose: bool = False) -> list[tuple[dict, dict]]:
    """:func:`refine_covers` of several starts (each link -> SphereCover) at once: one
    ``(covers, report)`` a start, each as its own refinement gives it.

    Every start's spheres of every link are one problem of a batch: the loss is the sum of the
    problems' losses and Adam moves each coordinate on its own gradient, so a start's result does not
    depend on the others, and a few tensor operations serve them all, where a refinement a link a
    start paid torch's cost of an operation some 35 times an iteration. Coverage counts only points
    outside or within ``cushion`` of the union's surface; which points those are, and the sphere
    nearest each, is found without gradient (in float32, one distance matrix a link), and the gap
    with gradient taken for them alone: the value and gradient of the minimum over all spheres at a
    fraction of its cost.
    """
    import torch  # torch adds 1.3 s to a start; only the joint sphere fit needs it

    rng = rng or np.random.default_rng(0)
    targets = list(targets)
    keys = [t.link for t in targets]
    r_min = 1e-3
    # Problems: (start, target) pairs, start after start; spheres flat over all of them.
    problems = [(b, n) for b in range(len(starts)) for n in range(len(targets))]
    counts = [len(starts[b][keys[n]].radii) for b, n in problems]
    first = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    owner = np.repeat(np.arange(len(problems)), counts)
    link_of = np.array([n for _, n in problems], dtype=np.int64)
    all_centres = np.vstack([starts[b][keys[n]].centres for b, n in problems]) if first[-1] else np.zeros((0, 3))
    all_radii = np.concatenate([starts[b][keys[n]].radii for b, n in problems])
    centres = torch.tensor(all_centres, dtype=torch.float64, requires_grad=True)
    excess = np.maximum(all_radii - r_min, 1e-6)
    raw = torch.tensor(excess + np.log(-np.expm1(-excess)), dtype=torch.float64, requires_grad=True)

    def padded(rows: list[int]):
        """(R, K) flat sphere indices of problems ``rows`` padded to the most spheres among them, and
        (R, K) whether a slot holds a sphere."""
        width = max(max(counts[p] for p in rows), 1)
        slot = np.zeros((len(rows), width), dtype=np.int64)
        valid = np.zeros((len(rows), width), dtype=bool)
        for row, p in enumerate(rows):
            slot[row, :counts[p]] = np.arange(first[p], first[p + 1])
            valid[row, :counts[p]] = True
        return torch.as_tensor(slot), torch.as_tensor(valid)

    interior_sets = []
    for t in targets:
        points = t.interior if t.interior is not None else np.zeros((0, 3))
        if len(points) > interior_points:
            points = points[rng.choice(len(points), interior_points, replace=False)]
        interior_sets.append(points)
    # Per link: its problems (one a start), their padded spheres, and its surface and interior points
    # as one set, each point with its weight and cushion (one distance matrix a link an iteration:
    # torch's cost of an operation, not the arithmetic, is most of an iteration's time).
    per_link = []
    for n, t in enumerate(targets):
        slot, valid = padded([b * len(targets) + n for b in range(len(starts))])
        parts = [(np.asarray(points, dtype=float).reshape(-1, 3), cushion_here, weight)
                 for points, cushion_here, weight in ((t.surface, cushion, 1.0), (interior_sets[n], 0.0, 0.2))
                 if len(points)]
        points = np.vstack([part for part, _, _ in parts]) if parts else np.zeros((0, 3))
        cushions = np.concatenate([np.full(len(part), c) for part, c, _ in parts]) if parts else np.zeros(0)
        weights = np.concatenate([np.full(len(part), w / len(part)) for part, _, w in parts]) if parts else np.zeros(0)
        per_link.append((slot, valid, torch.as_tensor(points, dtype=torch.float64),
                         torch.as_tensor(points, dtype=torch.float32), torch.as_tensor(cushions, dtype=torch.float64),
                         torch.as_tensor(cushions, dtype=torch.float32), torch.as_tensor(weights, dtype=torch.float64)))
    field = _BatchedField([t.field for t in targets])
    link_t = torch.as_tensor(link_of[owner])  # (S,) each sphere's target
    obstacles = [(n, t.obstacle_tree(), t.obstacles) for n, t in enumerate(targets)
                 if t.obstacles is not None and len(t.obstacles)]
    obstacle_rows = {n: torch.as_tensor(np.flatnonzero(link_of[owner] == n)) for n, _, _ in obstacles}
    shell = torch.as_tensor(directions(shell_points), dtype=torch.float64)
    pairs = _near_pairs(starts, keys, contacts, first)
    owner_t = torch.as_tensor(owner)
    optimiser = torch.optim.Adam([centres, raw], lr=step)
    coverage_weight = np.geomspace(coverage_start, coverage_end, iterations)

    def radii():
        return r_min + torch.nn.functional.softplus(raw)

    # A point whose gap to its nearest sphere was g when the spheres stood at ``placed`` is still
    # outside every sphere by at most g + moved (moved: the most any sphere's centre and radius have
    # since changed), so points held deeper than cushion + WATCH need no look until spheres have
    # moved WATCH; then every point is looked at again.
    placed, watched = None, None
    for it in range(iterations):
        optimiser.zero_grad()
        r_all = radii()
        # Coverage: the points that count and their nearest spheres, then their gaps with gradient.
        chosen_points, chosen_spheres, chosen_weights, chosen_cushions = [], [], [], []
        with torch.no_grad():
            c32, r32 = centres.detach().float(), r_all.detach().float()
            if placed is None or float(torch.max(torch.linalg.norm(centres.detach() - placed[0], dim=1)
                                                 + torch.abs(r_all.detach() - placed[1]))) > WATCH:
                placed, watched = (centres.detach().clone(), r_all.detach().clone()), {}
            for n, (slot, valid, points64, points32, cushions64, cushions32, weights) in enumerate(per_link):
                if not len(points32):
                    continue
                c = c32[slot]  # (B, K, 3)
                r = torch.where(valid, r32[slot], -1e9)[:, :, None]  # a missing sphere holds nothing
                look = watched.get(n)
                here = points32 if look is None else points32[look]
                gaps = torch.cdist(c, here[None].expand(len(c), -1, -1)) - r  # (B, K, N)
                least, nearest = gaps.min(dim=1)  # (B, N)
                if look is None:
                    look = torch.nonzero((least > -cushions32 - WATCH - 1e-5).any(dim=0))[:, 0]
                    watched[n] = look
                    least, nearest = least[:, look], nearest[:, look]
                start_row, point = torch.nonzero(least > -cushions32[look] - 1e-5, as_tuple=True)
                chosen_points.append(points64[look[point]])
                chosen_spheres.append(slot[start_row, nearest[start_row, point]])
                chosen_weights.append(weights[look[point]])
                chosen_cushions.append(cushions64[look[point]])
        spheres = torch.cat(chosen_spheres)
        gaps = torch.linalg.norm(torch.cat(chosen_points) - centres[spheres], dim=1) - r_all[spheres]
        coverage = torch.sum(torch.cat(chosen_weights) * torch.relu(gaps + torch.cat(chosen_cushions)) ** 2)
        # Protrusion: points on each sphere outside every other sphere of its problem, how far beyond
        # the body; the points inside another sphere weigh nothing and are not read.
        with torch.no_grad():
            all_points = centres.detach()[:, None] + r_all.detach()[:, None, None] * shell  # (S, J, 3)
            outer = torch.zeros(len(all_points), shell_points, dtype=torch.bool)
            for slot, valid, *_ in per_link:
                c, r = centres.detach()[slot], torch.where(valid, r_all.detach()[slot], -1.0)
                on_shell = all_points[slot].reshape(len(slot), -1, 3)
                inside_other = torch.cdist(on_shell, c) < r[:, None] - 1e-6  # (B, K J, K)
                inside_other = inside_other.reshape(len(slot), slot.shape[1], shell_points, slot.shape[1])
                inside_other[:, torch.arange(slot.shape[1]), :, torch.arange(slot.shape[1])] = False
                outer[slot[valid]] = ~inside_other.any(dim=3)[valid]
            weight = outer.double() * (r_all.detach() ** 2)[:, None]  # (S, J)
            total = torch.zeros(len(problems), dtype=torch.float64).index_add(0, owner_t, weight.sum(dim=1))
            sphere, direction = torch.nonzero(outer, as_tuple=True)
        beyond = field(centres[sphere] + r_all[sphere, None] * shell[direction], link_t[sphere])
        outside = torch.zeros(len(problems), dtype=torch.float64).index_add(
            0, owner_t[sphere], weight[sphere, direction] * torch.relu(beyond) ** 2)
        protrusion = torch.sum(outside / total.clamp(min=1e-12))
        apart = torch.zeros((), dtype=torch.float64)
        for n, tree, points_o in obstacles:
            rows = obstacle_rows[n]
            _, nearest = tree.query(centres.detach()[rows].numpy())
            reach = r_all[rows] + GAP - torch.linalg.norm(centres[rows] - torch.as_tensor(points_o[nearest]), dim=1)
            apart = apart + torch.sum(torch.relu(reach) ** 2)
        if pairs is not None:
            rotation, translation, a, b, config = pairs
            posed = torch.einsum("mij,mj->mi", rotation[config], centres[b]) + translation[config]
            distance = torch.linalg.norm(centres[a] - posed, dim=1)
            apart = apart + torch.sum(torch.relu(r_all[a] + r_all[b] + GAP - distance) ** 2)
        loss = coverage_weight[it] * coverage + protrusion + 1e4 * apart
        loss.backward()
        optimiser.step()
        if verbose and (it % 50 == 0 or it == iterations - 1):
            print(it, float(coverage.detach()), float(protrusion.detach()), float(apart.detach()))
    final_centres = centres.detach().numpy()
    final_radii = radii().detach().numpy()
    results = []
    for b in range(len(starts)):
        result = {}
        for n, key in enumerate(keys):
            p = b * len(targets) + n
            result[key] = SphereCover(final_centres[first[p]:first[p + 1]].copy(), final_radii[first[p]:first[p + 1]].copy())
        # Links take the room left to their checked neighbours' spheres one after another, so a sphere
        # may use all of a gap its neighbour does not need.
        uncovered = {}
        for t in targets:
            room = _room(result, contacts, t.link)
            result[t.link], uncovered[t.link] = hold_surface(result[t.link], t, room)
        results.append((result, {"uncovered": uncovered, "iterations": iterations}))
    return results


class _BatchedField:
    """The targets' signed distance fields (:class:`DistanceField`) read at points (M, 3), point m in
    the field of target ``link[m]`` -> (M,), differentiable in the points: trilinear on the grid as
    ``torch.nn.functional.grid_sample`` reads it (corners aligned, the border beyond it), plus the
    distance beyond the grid; every target's grid in one flat array."""

    def __init__(self, fields: list[DistanceField]):
        import torch  # only the joint sphere fit needs it

        self.values = torch.as_tensor(np.concatenate([f.values.ravel() for f in fields]), dtype=torch.float64)
        shapes = np.array([f.values.shape for f in fields], dtype=float)
        self.offset = torch.as_tensor(np.concatenate([[0], np.cumsum([f.values.size for f in fields])[:-1]]))
        self.strides = torch.as_tensor(np.array([[s[1] * s[2], s[2], 1] for s in shapes], dtype=np.int64))
        self.origin = torch.as_tensor(np.array([f.origin for f in fields]))  # (L, 3)
        self.voxel = torch.as_tensor(np.array([f.voxel for f in fields]))  # (L,)
        self.top = torch.as_tensor(shapes - 1)  # (L, 3)

    def __call__(self, points, link):
        import torch  # only the joint sphere fit needs it

        voxel, top, strides = self.voxel[link], self.top[link], self.strides[link]
        index = (points - self.origin[link]) / voxel[:, None]
        clamped = torch.minimum(torch.clamp(index, min=0.0), top)
        beyond = torch.linalg.norm(index - clamped, dim=1) * voxel
        low = torch.minimum(torch.floor(clamped.detach()), top - 1).clamp(min=0)
        fraction = clamped - low
        low = low.long()
        base = self.offset[link]
        value = 0.0
        for corner in ((0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1), (1, 0, 0), (1, 0, 1), (1, 1, 0), (1, 1, 1)):
            step = torch.as_tensor(corner)
            flat = base + ((low + step) * strides).sum(dim=1)
            weight = torch.prod(torch.where(step.bool(), fraction, 1.0 - fraction), dim=1)
            value = value + weight * self.values[flat]
        return value + beyond


def _near_pairs(starts: list[dict], keys: list[str], contacts: list[Contact], first: np.ndarray):
    """The sphere pairs of checked links that come near at a recorded configuration, in every start:
    ``(rotation (C, 3, 3), translation (C, 3), a (M,), b (M,), config (M,))``, a and b flat sphere
    indices (a's sphere, b's posed into a's frame by configuration ``config``), None when there are none.
    Near: within 30 mm of touching as placed, room for the spheres to move in the refinement."""
    import torch  # only the joint sphere fit needs it

    rotations, translations, a_index, b_index, config_index = [], [], [], [], []
    configs = 0
    for b in range(len(starts)):
        covers = starts[b]
        for contact in contacts:
            if contact.a not in covers or contact.b not in covers:
                continue
            ca, cb = covers[contact.a], covers[contact.b]
            posed = np.einsum("cij,kj->cki", contact.a_T_b[:, :3, :3], cb.centres) + contact.a_T_b[:, None, :3, 3]
            near = np.linalg.norm(ca.centres[None, :, None] - posed[:, None], axis=3) < (
                ca.radii[:, None] + cb.radii[None] + 0.03)[None]  # (C, ka, kb)
            rows = np.flatnonzero(near.any(axis=(1, 2)))
            if not len(rows):
                continue
            c, i, j = np.nonzero(near[rows])
            rotations.append(contact.a_T_b[rows, :3, :3])
            translations.append(contact.a_T_b[rows, :3, 3])
            offset_a = first[b * len(keys) + keys.index(contact.a)]
            offset_b = first[b * len(keys) + keys.index(contact.b)]
            a_index.append(offset_a + i)
            b_index.append(offset_b + j)
            config_index.append(configs + c)
            configs += len(rows)
    if not rotations:
        return None
    return (torch.as_tensor(np.concatenate(rotations)), torch.as_tensor(np.concatenate(translations)),
            torch.as_tensor(np.concatenate(a_index)), torch.as_tensor(np.concatenate(b_index)),
            torch.as_tensor(np.concatenate(config_index)))


def _room(covers: dict, contacts: list[Contact], link: str) -> np.ndarray:
    """(k,) how far (m) each sphere of ``link`` may grow before it comes within ``GAP`` of a sphere
    of a link it is checked against, at any recorded configuration."""
    room = np.full(len(covers[link].radii), np.inf)
    for contact in contacts:
        if link not in (contact.a, contact.b) or contact.a not in covers or contact.b not in covers:
            continue
        ca, cb = covers[contact.a], covers[contact.b]
        posed = np.einsum("cij,kj->cki", contact.a_T_b[:, :3, :3], cb.centres) + contact.a_T_b[:, None, :3, 3]
        free = (np.linalg.norm(ca.centres[None, :, None] - posed[:, None], axis=3) - ca.radii[None, :, None]
                - cb.radii[None, None] - GAP).min(axis=0)  # (ka, kb)
        free = np.maximum(free, 0.0)
        room = np.minimum(room, free.min(axis=1) if link == contact.a else free.min(axis=0))
    return room


def hold_surface(cover, target, room: np.ndarray | None = None) -> tuple[object, float]:
    """Each surface point still outside grows its nearest sphere that may grow so far: not into a
    checked link's body at a recorded configuration, nor by more than its ``room`` (k,) m. A point
    none may take, next to a touching neighbour, is taken back to the body's own surface (the
    target's ``inner`` point, without the margin) and held there if it can be; the share of points
    held at neither is returned."""
    centres, radii = cover.centres, cover.radii.copy()
    if target.obstacles is not None and len(target.obstacles):
        limit, _ = target.obstacle_tree().query(centres)
        limit = np.maximum(limit - GAP, radii)
    else:
        limit = np.full(len(radii), np.inf)
    if room is not None:
        limit = np.minimum(limit, radii + room)
    left = target.surface
    for attempt in range(2):
        distance = np.linalg.norm(left[:, None] - centres[None], axis=2)
        need = distance - radii[None]
        rows = np.flatnonzero(need.min(axis=1) > 0)
        # The nearest sphere (by how much it must grow) that may grow that far.
        allowed = np.where(distance[rows] <= limit[None], need[rows], np.inf)
        nearest = np.argmin(allowed, axis=1)
        fine = np.isfinite(allowed[np.arange(len(rows)), nearest])
        for k in np.unique(nearest[fine]):
            radii[k] = max(radii[k], float(distance[rows[fine & (nearest == k)], k].max()) + 1e-6)
        if attempt == 0 and target.inner is not None and (~fine).any():
            left = target.inner[rows[~fine]]
            continue
        break
    return SphereCover(centres, radii), float(np.sum(~fine)) / max(len(target.surface), 1)
