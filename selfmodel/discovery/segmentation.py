"""Which link each observed point belongs to: the link whose motion explains it over every frame.

A point seen at one frame is, under the hypothesis that link k carries it, somewhere fixed in link
k's frame; the chain's forward kinematics (the discovered screws) then say where it is at every
other frame. Projected into each camera there, it is **confirmed** where the camera saw a surface
at that depth, **contradicted** where the camera saw farther (it looked through where the point
would be), and says nothing where something nearer hid it or the pixel has no reading. Each point
goes to the link with the most confirmations less contradictions, over all frames (sweeps and random
poses): the whole recording votes, not one sweep's reference frame.

Points are taken from several frames (home and some random poses) and carried back to home by their
link's motion, so a link's points at home hold the sides that home's view did not show.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial import cKDTree

from rigs.errors import InputError, setting
from selfmodel.discovery.screws import thin
from selfmodel.labels.seen_through import pixels


@dataclass
class MotionSegmentation:
    """Configure, then ``fit(chain, frames, q, source_rows, vote_rows, noise)`` -> per link (0 = base)
    its points (n, 3) at home, base frame.

    ``tolerance``: a projected point agrees with a reading within this many noise sigmas (and
    ``min_tolerance`` m); ``voxel`` (m): thinning of each source frame's points; ``min_votes``:
    confirmations a point needs; a point's link must explain ``margin`` votes and ``lead`` (a fraction
    of its score) more than the runner-up, else the point is left out (two links' motions explain it
    alike: near an axis they share, or on a face that one's motion slides over itself); a point with
    under ``sparse`` of its link's median count of neighbours within ``radius`` m is dropped."""

    tolerance: float = 3.0
    min_tolerance: float = 0.006
    voxel: float = 0.004
    min_votes: int = 3
    margin: float = 3.0
    lead: float = 0.2
    keep: int = 6000
    radius: float = 0.01
    sparse: float = 0.25
    seed: int = 0

    def __post_init__(self):
        for name in ("tolerance", "min_tolerance", "voxel", "radius"):
            if not getattr(self, name) > 0:
                raise InputError(f"{setting(name)} must be positive, got {getattr(self, name)}.")
        for name in ("min_votes", "keep"):
            if getattr(self, name) < 1:
                raise InputError(f"{setting(name)} must be at least 1, got {getattr(self, name)}.")
        for name in ("margin", "lead", "sparse"):
            if not getattr(self, name) >= 0:
                raise InputError(f"{setting(name)} must be >= 0, got {getattr(self, name)}.")

    def fit(self, chain, frames, q: np.ndarray, source_rows: list[int], vote_rows: list[int], noise: float):
        links = len(chain.joints) + 1
        # Link 0 (the base) does not move; links 1..dof as the chain's kinematics take them.
        rows = sorted(set(source_rows) | set(vote_rows))
        moved = chain.predict(q[rows]) if rows else np.zeros((0, len(chain.joints), 4, 4))
        motions = {row: np.concatenate([np.eye(4)[None], motion]) for row, motion in zip(rows, moved)}
        tolerance = max(self.tolerance * noise, self.min_tolerance)
        gathered = [[] for _ in range(links)]
        sources = []
        for source in source_rows:
            seen = np.concatenate([frames.frame(source, c).points[frames.frame(source, c).valid] for c in frames.cameras])
            frames.forget({source})
            seen = thin(seen, self.voxel)
            # Under each hypothesis the point's place at home.
            at_home = np.stack([seen @ np.linalg.inv(m)[:3, :3].T + np.linalg.inv(m)[:3, 3] for m in motions[source]])
            sources.append((source, at_home, np.zeros((links, len(seen))), np.zeros((links, len(seen)))))
        for row in vote_rows:  # frames outermost: each is read once (a 640 x 480 camera is 7 MB a frame)
            for source, at_home, score, confirmed in sources:
                if row == source:
                    continue
                for k in range(links):
                    posed = at_home[k] @ motions[row][k][:3, :3].T + motions[row][k][:3, 3]
                    plus, minus = self._votes(frames, row, posed, tolerance)
                    score[k] += plus - minus
                    confirmed[k] += plus
            frames.forget({row})
        for source, at_home, score, confirmed in sources:
            # Ties go to the farther link (the reversed order's first maximum); the lead below decides.
            best = links - 1 - np.argmax(score[::-1], axis=0)
            columns = np.arange(score.shape[1])
            best_score = score[best, columns]
            others = score.copy()
            others[best, columns] = -np.inf
            runner_up = others.max(axis=0)
            # A face that a motion maps onto itself (across a turn's axis, along a slide) confirms two links
            # alike: such a point is left out unless its link explains clearly more.
            lead = np.maximum(self.margin, self.lead * np.abs(best_score))
            decided = (confirmed[best, columns] >= self.min_votes) & (best_score - runner_up >= lead)
            for k in range(links):
                gathered[k].append(at_home[k][decided & (best == k)])
        rng = np.random.default_rng(self.seed)
        out = []
        for parts in gathered:
            points = self._dense(thin(np.concatenate(parts), self.voxel / 2)) if parts else np.zeros((0, 3))
            if len(points) > self.keep:
                points = points[rng.choice(len(points), self.keep, replace=False)]
            out.append(points)
        return out

    def _dense(self, points: np.ndarray) -> np.ndarray:
        """``points`` (n, 3) less those with under ``sparse`` of the link's median count of neighbours
        within ``radius`` m: a link's own surface is seen densely, a point another link's motion
        happened to explain lies alone (the 1-4 % that blow a convex hull up)."""
        if len(points) < 20:
            return points
        counts = np.array([len(n) for n in cKDTree(points).query_ball_point(points, self.radius)])
        return points[counts >= self.sparse * np.median(counts)]

    @staticmethod
    def _votes(frames, row: int, points: np.ndarray, tolerance: float) -> tuple[np.ndarray, np.ndarray]:
        """Per point (n,): how many cameras at frame ``row`` confirm it, and how many saw through it."""
        plus, minus = np.zeros(len(points)), np.zeros(len(points))
        for camera in frames.cameras:
            info = frames.session.cameras[camera].info
            camera_T_base = np.linalg.inv(frames.session.cameras[camera].base_T_camera)
            local = points @ camera_T_base[:3, :3].T + camera_T_base[:3, 3]
            index, u, v = pixels(local, info.K, info.width, info.height)
            frame = frames.frame(row, camera)
            valid = frame.valid[v, u]
            reading = frame.depth[v, u]
            index, reading = index[valid], reading[valid]
            expected = local[index, 2]
            plus[index] += np.abs(reading - expected) < tolerance
            minus[index] += reading > expected + tolerance
        return plus, minus
