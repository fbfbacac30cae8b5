"""Sphere covers of a link body, the shape GPU planners (cuRobo) check fastest.

A cover is ``centres (k, 3)`` and ``radii (k,)`` in a link frame, metres, whose union contains
every given point of the body (surface and interior samples). It is built like k-means: points
go to the sphere that must grow least, each sphere becomes the smallest ball around its points,
and the rounds repeat while the summed sphere volume drops. Surface triangles are assigned whole
and the final radii are measured, so the cover contains the whole surface by construction,
whatever the quality of the fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.cluster.vq import kmeans2
from scipy.spatial import ConvexHull, QhullError


@dataclass
class SphereCover:
    centres: np.ndarray  # (k, 3) m, link frame
    radii: np.ndarray  # (k,) m

    def contains(self, points: np.ndarray, tolerance: float = 1e-9) -> np.ndarray:
        """(N, 3) -> (N,) bool: inside at least one sphere."""
        return self.outside_distance(points) <= tolerance

    def outside_distance(self, points: np.ndarray, batch: int = 100_000) -> np.ndarray:
        """(N, 3) -> (N,) m: distance outside the union of spheres (0 inside)."""
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


def enclosing_ball(points: np.ndarray, rounds: int = 40) -> tuple[np.ndarray, float]:
    """A near-smallest ball around points (N, 3): Badoiu-Clarkson core-set steps, then the exact
    radius about the centre found, so the ball always contains every point."""
    if len(points) > 64:
        try:  # the farthest point is always a hull vertex: work on those alone
            points = points[ConvexHull(points).vertices]
        except QhullError:
            pass
    centre = points.mean(axis=0)
    for step in range(1, rounds + 1):
        farthest = points[np.argmax(np.einsum("ij,ij->i", points - centre, points - centre))]
        centre = centre + (farthest - centre) / (step + 1)
    return centre, float(np.sqrt(np.max(np.einsum("ij,ij->i", points - centre, points - centre))))


def fit_sphere_cover(triangles: np.ndarray, max_spheres: int, rng: np.random.Generator,
                     volume_points: np.ndarray | None = None, rounds: int = 15, restarts: int = 2) -> SphereCover:
    """At most ``max_spheres`` spheres whose union contains a surface and sampled volume.

    ``triangles`` (T, 3, 3), m: the body's surface; each triangle goes whole to one sphere, and a
    ball holding a triangle's corners holds the triangle, so the union contains the whole surface
    exactly, not just samples of it. ``volume_points`` (P, 3), m, interior samples, seed the
    centres (spheres spread along the body's volume, not its skin) and are covered too.
    """
    triangles = np.asarray(triangles, dtype=float).reshape(-1, 3, 3)
    volume_points = np.zeros((0, 3)) if volume_points is None else np.asarray(volume_points, dtype=float)
    # A unit is a triangle or a volume point; units are assigned by their centroid.
    units = np.vstack([triangles.mean(axis=1), volume_points])
    unit_points = [triangles, volume_points[:, None, :]]
    seeds = volume_points if len(volume_points) >= 4 * max_spheres else units
    count = int(min(max_spheres, len(np.unique(np.round(seeds, 6), axis=0))))
    best: SphereCover | None = None
    for _ in range(restarts):
        centres, _ = kmeans2(seeds, count, minit="++", seed=rng, iter=10)
        radii = np.zeros(len(centres))
        previous, cover = np.inf, None
        for _ in range(rounds):
            # Assign to the sphere that has to grow least: big spheres keep what they already cover.
            owner = _assign(units, centres, radii)
            cover = _balls(unit_points, owner, len(centres))
            centres, radii = cover.centres, cover.radii
            if cover.summed_volume >= previous * (1 - 1e-4):
                break
            previous = cover.summed_volume
        # Exact radii for the last assignment: every unit's every corner is inside its sphere.
        owner = _assign(units, cover.centres, cover.radii)
        cover = _radii_for(unit_points, owner, cover.centres)
        if best is None or cover.summed_volume < best.summed_volume:
            best = cover
    return best


def _split(unit_points: list[np.ndarray], owner: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(corner points (n, 3), their sphere) pairs per kind of unit."""
    pieces, start = [], 0
    for corners in unit_points:
        mine = owner[start:start + len(corners)]
        pieces.append((corners.reshape(-1, 3), np.repeat(mine, corners.shape[1])))
        start += len(corners)
    return pieces


def _balls(unit_points: list[np.ndarray], owner: np.ndarray, count: int) -> SphereCover:
    points = np.vstack([p for p, _ in _split(unit_points, owner)])
    labels = np.concatenate([o for _, o in _split(unit_points, owner)])
    balls = [enclosing_ball(points[labels == index]) for index in range(count) if np.any(labels == index)]
    return SphereCover(np.array([centre for centre, _ in balls]), np.array([radius for _, radius in balls]))


def _radii_for(unit_points: list[np.ndarray], owner: np.ndarray, centres: np.ndarray) -> SphereCover:
    radii = np.zeros(len(centres))
    for points, labels in _split(unit_points, owner):
        if len(points):
            np.maximum.at(radii, labels, np.linalg.norm(points - centres[labels], axis=1))
    used = np.bincount(owner, minlength=len(centres)) > 0
    return SphereCover(centres[used].copy(), radii[used])


def _assign(points: np.ndarray, centres: np.ndarray, radii: np.ndarray, batch: int = 100_000) -> np.ndarray:
    owner = np.empty(len(points), dtype=int)
    for start in range(0, len(points), batch):
        chunk = points[start:start + batch]
        squared = (chunk ** 2).sum(axis=1)[:, None] - 2.0 * chunk @ centres.T + (centres ** 2).sum(axis=1)[None]
        owner[start:start + batch] = np.argmin(np.sqrt(np.maximum(squared, 0.0)) - radii[None], axis=1)
    return owner
