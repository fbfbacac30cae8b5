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

from selfmodel.export.spheres import SphereCover

GAP = 5e-4  # m kept between spheres of links that must not touch at a recorded configuration


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
        padded = np.pad(np.asarray(solid, dtype=bool), cells)
        outside = ndimage.distance_transform_edt(~padded) * voxel
        inside = ndimage.distance_transform_edt(padded) * voxel
        values = np.where(padded, -(inside - voxel / 2), outside - voxel / 2) - grow
        return cls(values.astype(np.float32), np.asarray(origin, dtype=float) - cells * voxel, float(voxel))

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
    """``covers`` (target key -> SphereCover: the link, or ``link#group``) moved and resized jointly; returns the new
    covers and what the fit reports (``uncovered``: link -> share of its surface points it could not
    hold next to a touching neighbour).

    ``targets``: :class:`selfmodel.export.spheres.SphereTarget` with ``field`` (the body's signed distance),
    and optionally ``interior`` points and ``obstacles`` (points of checked links' bodies at the
    recorded configurations, own frame). ``step``: Adam's step, m.
    """
    import torch  # torch adds 1.3 s to a start; only the joint sphere fit needs it

    rng = rng or np.random.default_rng(0)
    links = [t.key for t in targets]
    r_min = 1e-3
    centres, raw = {}, {}
    for t in targets:
        cover = covers[t.key]
        centres[t.key] = torch.tensor(cover.centres, dtype=torch.float64, requires_grad=True)
        excess = np.maximum(cover.radii - r_min, 1e-6)
        raw[t.key] = torch.tensor(excess + np.log(-np.expm1(-excess)), dtype=torch.float64, requires_grad=True)
    fields = {t.key: t.field.torch() for t in targets}
    surface = {t.key: torch.as_tensor(t.surface, dtype=torch.float64) for t in targets}
    interior = {}
    for t in targets:
        points = t.interior if t.interior is not None else np.zeros((0, 3))
        if len(points) > interior_points:
            points = points[rng.choice(len(points), interior_points, replace=False)]
        interior[t.key] = torch.as_tensor(points, dtype=torch.float64)
    obstacles = {t.key: (t.obstacle_tree(), torch.as_tensor(t.obstacles, dtype=torch.float64))
                 for t in targets if t.obstacles is not None and len(t.obstacles)}
    shell = torch.as_tensor(directions(shell_points), dtype=torch.float64)
    pairs = []
    for contact in contacts:
        if contact.a not in centres or contact.b not in centres:
            continue
        # Only the configurations where the two covers (as placed, with room to move) come near.
        ca, cb = covers[contact.a], covers[contact.b]
        posed = np.einsum("cij,kj->cki", contact.a_T_b[:, :3, :3], cb.centres) + contact.a_T_b[:, None, :3, 3]
        near = np.linalg.norm(ca.centres[None, :, None] - posed[:, None], axis=3) < (
            ca.radii[:, None] + cb.radii[None] + 0.03)[None]
        rows = np.flatnonzero(near.any(axis=(1, 2)))
        if len(rows):
            pairs.append((contact.a, contact.b, torch.as_tensor(contact.a_T_b[rows, :3, :3], dtype=torch.float64),
                          torch.as_tensor(contact.a_T_b[rows, :3, 3], dtype=torch.float64)))
    optimiser = torch.optim.Adam([*centres.values(), *raw.values()], lr=step)
    coverage_weight = np.geomspace(coverage_start, coverage_end, iterations)

    def radii(link):
        return r_min + torch.nn.functional.softplus(raw[link])

    for it in range(iterations):
        optimiser.zero_grad()
        coverage = protrusion = apart = 0.0
        for link in links:
            c, r = centres[link], radii(link)
            gaps = (torch.cdist(surface[link], c) - r).min(dim=1).values
            coverage = coverage + torch.mean(torch.relu(gaps + cushion) ** 2)
            if len(interior[link]):
                inner = (torch.cdist(interior[link], c) - r).min(dim=1).values
                coverage = coverage + 0.2 * torch.mean(torch.relu(inner) ** 2)
            points = c[:, None] + r[:, None, None] * shell[None]  # (k, J, 3)
            with torch.no_grad():
                inside_other = torch.cdist(points.reshape(-1, 3), c) < r[None] - 1e-6
                inside_other = inside_other.reshape(len(r), shell_points, len(r))
                inside_other[torch.arange(len(r)), :, torch.arange(len(r))] = False
                outer = (~inside_other.any(dim=2)).double()
                weight = outer * (r.detach() ** 2)[:, None]
            beyond = fields[link](points.reshape(-1, 3)).reshape(len(r), shell_points)
            protrusion = protrusion + (weight * torch.relu(beyond) ** 2).sum() / weight.sum().clamp(min=1e-12)
            if link in obstacles:
                tree, points_o = obstacles[link]
                _, nearest = tree.query(c.detach().numpy())
                reach = r + GAP - torch.linalg.norm(c - points_o[torch.as_tensor(nearest)], dim=1)
                apart = apart + torch.sum(torch.relu(reach) ** 2)
        for a, b, rotation, translation in pairs:
            posed = torch.einsum("cij,kj->cki", rotation, centres[b]) + translation[:, None]  # (C, kb, 3)
            distance = torch.linalg.norm(centres[a][None, :, None] - posed[:, None], dim=3)  # (C, ka, kb)
            apart = apart + torch.sum(torch.relu(radii(a)[None, :, None] + radii(b)[None, None] + GAP - distance) ** 2)
        loss = coverage_weight[it] * coverage + protrusion + 1e4 * apart
        loss.backward()
        optimiser.step()
        if verbose and (it % 50 == 0 or it == iterations - 1):
            print(it, float(coverage.detach()), float(protrusion.detach()), float(torch.as_tensor(apart).detach()))
    result = {t.key: SphereCover(centres[t.key].detach().numpy().copy(), radii(t.key).detach().numpy().copy())
              for t in targets}
    # Links take the room left to their checked neighbours' spheres one after another, so a sphere
    # may use all of a gap its neighbour does not need.
    uncovered = {}
    for t in targets:
        room = _room(result, contacts, t.key)
        result[t.key], uncovered[t.key] = hold_surface(result[t.key], t, room)
    return result, {"uncovered": uncovered, "iterations": iterations}


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
