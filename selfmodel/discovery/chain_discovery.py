"""Discovering an arm's serial chain from depth and joint readings alone: no description is read.

For each joint (the joint readings' columns, base to tip) its sweep gives pairs of depth frames in
which only that joint moved. What changed between a pair is what the joint carries (plus what it
uncovered or hid); Open3D's point-to-plane ICP registers it onto the second frame, one rigid motion
per consecutive pair. A motion that turns by about the reading's change is a revolute joint (its
rotation vectors give the axis direction, the fixed line of the motions the axis position); one
that only translates by it is prismatic. A joint fit of all pairs against the frame nearest home,
with the angles from the readings, refines the axis. Which points follow the fitted motion at home
says what each link is: a point belongs to the farthest joint that carries it. Where the recording
has poses besides the sweeps (the plan's random poses), all turning axes are then refined at once
over them (:mod:`selfmodel.discovery.refine`): an axis a sweep saw poorly is seen by every pose.

Everything is in the base frame at the home pose (the pose every sweep starts from and returns
to; the sweeps' other joints stand there). The cameras' poses come from the session (its manifest
or a board calibration), never from ``truth/``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from scipy.optimize import least_squares
from scipy.spatial import cKDTree

from capture.session import Session
from rigs.documents import check_format
from rigs.errors import InputError, setting
from rigs.files import atomic_write_json, read_json
from selfmodel.discovery.depth_points import DepthFrames, Sweep, find_sweeps
from selfmodel.discovery.refine import AxisRefinement, RefinedAxes
from selfmodel.discovery.screws import (axis_point, chain_motions, cloud_with_normals, register, rotation_vector,
                                        screw_motion, slide_motion, thin)
from selfmodel.discovery.segmentation import MotionSegmentation

Progress = Callable[[int, int], None]
FORMAT = "selfcal-discovered-chain"
FORMAT_VERSION = 1


@dataclass
class DiscoveredJoint:
    """One joint as discovered: type, axis direction (3,) and a point on it (3,) m, base frame at home.

    ``angle_scale``: the registered motion's size over the reading's change (1 when the readings
    are radians or metres of the motion itself; from the first, step-wise registrations).
    ``direction_sd_deg``/``position_sd_mm``: from the fit over the random poses where there was one
    (a cluster-robust covariance, one cluster per pose), else the spread of single-pair refits around
    the sweep's joint fit over the square root of their number. ``sweep_direction``/``sweep_point``:
    the sweep's own estimate, kept for comparison. ``lower``/``upper``: the range of the readings recorded.
    """

    name: str
    type: str
    direction: list[float]
    point: list[float]
    home: float
    lower: float
    upper: float
    angle_scale: float
    direction_sd_deg: float
    position_sd_mm: float
    steps: int
    moving_points: int
    fit_rms_mm: float
    sweep_direction: list[float] | None = None  # the sweep's own estimate, before the random poses refined it
    sweep_point: list[float] | None = None


@dataclass
class DiscoveredArm:
    """The chain base to tip: joints in the readings' order, home pose (dof,), per-link points at home."""

    joints: list[DiscoveredJoint]
    home: list[float]
    base_link: str = "base"
    tip_link: str = "tip"
    link_points: dict[str, list[list[float]]] = field(default_factory=dict)  # link -> (n, 3) m base frame at home
    source: dict = field(default_factory=dict)
    base_points: list[list[float]] = field(default_factory=list)  # (n, 3) m: what stands still under the first link

    @property
    def joint_names(self) -> list[str]:
        return [j.name for j in self.joints]

    def predict(self, q) -> np.ndarray:
        """q (N, dof) or (dof,) readings, rad or m -> (N, dof, 4, 4): where the chain takes each
        moving link (1..dof), as its motion from home in the base frame (a link's points at home,
        ``link_points``, land at ``motion @ point``). The same kinematics the discovered URDF holds."""
        q = np.atleast_2d(np.asarray(q, float))
        if q.shape[1] != len(self.joints):
            raise ValueError(f"q has {q.shape[1]} joints, the chain {len(self.joints)}")
        axes = [(np.array(j.direction, float), np.array(j.point, float)) for j in self.joints]
        revolute = [j.type == "revolute" for j in self.joints]
        home = np.array(self.home, float)
        return np.array([chain_motions(axes, revolute, pose - home) for pose in q]).reshape(len(q), len(axes), 4, 4)

    def save(self, path: Path) -> None:
        document = {"format": FORMAT, "format_version": FORMAT_VERSION, "units": {"length": "m", "angle": "rad"},
                    **asdict(self)}
        atomic_write_json(Path(path), document)

    @classmethod
    def load(cls, path: Path) -> "DiscoveredArm":
        document = read_json(Path(path), "discovered chain")
        check_format(document, Path(path), FORMAT, FORMAT_VERSION, "discovered chain")
        try:
            joints = [DiscoveredJoint(**joint) for joint in document["joints"]]
            return cls(joints, list(document["home"]), document["base_link"], document["tip_link"],
                       document.get("link_points", {}), document.get("source", {}), document.get("base_points", []))
        except (KeyError, TypeError) as error:
            raise InputError(f"{path}: a discovered chain without a valid {error} field.") from None


@dataclass
class ChainDiscovery:
    """Configure, then ``fit(session)`` -> :class:`DiscoveredArm`.

    ``max_step``: the largest change of one reading between consecutive sweep frames (rad or m);
    ``pair_step``: frames paired for a first registration are this far apart at least (or a quarter
    of the sweep), so that what moved moved by more than the depth noise;
    ``voxel`` (m): the clouds are thinned to one point per cube of this side; ``change``: a pixel
    changed between frames when its depth moved by more than this many noise sigmas (and 5 mm);
    a joint turning by under 3 degrees a step may be a slide: it is revolute only if the turn
    explains ``prefer_slide`` more of the moved points and its axis passes within ``axis_reach`` m
    of them. ``max_points``: source points per frame pair in the joint fit (twice that in a step).
    """

    max_step: float = 0.2
    pair_step: float = 0.0
    min_noise: float = 0.002
    prefer_slide: float = 0.02
    axis_reach: float = 0.1
    max_points: int = 3000
    voxel: float = 0.004
    change: float = 4.0
    refine_pairs: int = 8
    refine_poses: int = 40
    segment_sources: int = 4
    segment_votes: int = 120
    seed: int = 0

    def __post_init__(self):
        # Checked and kept as given: a bad setting is refused before a depth frame is read.
        positive = ("max_step", "min_noise", "axis_reach", "voxel", "change")
        at_least_one = ("max_points", "refine_pairs", "segment_sources", "segment_votes")
        for name in positive:
            if not getattr(self, name) > 0:
                raise InputError(f"{setting(name)} must be positive, got {getattr(self, name)}.")
        for name in ("pair_step", "prefer_slide", "refine_poses"):  # refine_poses 0: the sweeps' axes as they are
            if not getattr(self, name) >= 0:
                raise InputError(f"{setting(name)} must be >= 0, got {getattr(self, name)}.")
        for name in at_least_one:
            if getattr(self, name) < 1:
                raise InputError(f"{setting(name)} must be at least 1, got {getattr(self, name)}.")

    def fit(self, session: Session, progress: Progress | None = None) -> DiscoveredArm:
        """The chain of ``session``'s arm from its joint sweeps and random poses (depth, camera poses
        and joint readings; never its URDF). ``progress(done, total)`` after each joint."""
        frames = DepthFrames(session)
        q = session.q
        sweeps = {}
        for sweep in find_sweeps(q, self.max_step):
            if sweep.joint not in sweeps or len(sweep.rows) > len(sweeps[sweep.joint].rows):
                sweeps[sweep.joint] = sweep
        missing = [name for j, name in enumerate(session.joint_names) if j not in sweeps]
        if missing:
            raise InputError(f"{session.path / 'joints.csv'}: no sweep of joint {missing[0]!r} (3 or more consecutive "
                             f"poses moving it alone by at most {self.max_step} per step); record a plan from "
                             f"`selfcal plan --sweeps`.")
        joints, moved_masks, home_points = [], [], None
        previous_point = np.zeros(3)
        for j, name in enumerate(session.joint_names):
            joint, moved, reference = self._fit_joint(frames, session, sweeps[j], name, previous_point)
            joints.append(joint)
            moved_masks.append(moved)
            if home_points is None:
                home_points = {c: frames.frame(reference, c).points.copy() for c in frames.cameras}
            if joint.type == "revolute":
                previous_point = np.array(joint.point)
            frames.forget(set(sweeps[j].rows))
            if progress is not None:
                progress(j + 1, len(session.joint_names))
        dof = q.shape[1]
        # Home: where each joint stands while the others sweep.
        home = [float(q[sweeps[(j + 1) % dof].rows[0], j]) if dof > 1 else float(np.median(q[sweeps[0].rows, 0]))
                for j in range(dof)]
        for joint, value in zip(joints, home):
            joint.home = value
        base = session.manifest.get("robot", {}).get("base_link") or "base"
        tip = session.manifest.get("robot", {}).get("tip_link") or "tip"
        link_names = [base] + [f"{joint.name}_link" for joint in joints[:-1]] + [tip]
        link_points = self._link_points(home_points, moved_masks, link_names)
        chain = DiscoveredArm(joints, home, base, tip, link_points,
                                {"session": str(session.path), "sweep_poses": sum(len(s.rows) for s in sweeps.values()),
                                 "cameras": frames.cameras})
        for joint in joints:
            joint.sweep_direction, joint.sweep_point = list(joint.direction), list(joint.point)
        swept = {row for sweep in find_sweeps(q, self.max_step) for row in sweep.rows}
        others = [row for row in range(len(q)) if row not in swept]
        if others and self.refine_poses:
            # The axes rest on the sweeps' point sets: pixels that their own joint's sweep moved,
            # that the fitted motion explains, and that no later joint's sweep moved.
            refined = self.refine(chain, frames, session, others)
            chain = refined.chain
            chain.source["refinement"] = refined.report
        # What each link is, voted by every frame now that the chain's motion is known (each sweep's
        # own reference frame only saw its joint's part of the story): the links' shapes, not the
        # axes. The vote is inclusive where two links' motions explain a point alike (a flange board
        # that the last joint turns within its own plane lands on the link before), and a link given
        # such points pulls its axis towards explaining them: refined on these, the iiwa's joint 6
        # turned 0.4 degrees off.
        self._segment(chain, frames, session, others)
        return chain

    def _segment(self, chain: DiscoveredArm, frames: DepthFrames, session: Session, others: list[int]) -> None:
        """Each link's points at home by :class:`MotionSegmentation`: seen at home and at a few random
        poses (sides home did not show), voted on by every frame (at most ``segment_votes``)."""
        q, home = session.q, np.array(chain.home)
        at_home = [row for row in range(len(q)) if np.allclose(q[row], home, atol=1e-9)]
        sources = at_home[:1] + [others[i] for i in np.linspace(0, len(others) - 1, min(self.segment_sources, len(others)))
                                 .round().astype(int)] if others else at_home[:1]
        if not sources:
            sources = [int(np.argmin(np.abs(q - home).sum(axis=1)))]
        votes = list(range(len(q)))
        if len(votes) > self.segment_votes:
            votes = [votes[i] for i in np.linspace(0, len(votes) - 1, self.segment_votes).round().astype(int)]
        noise = self._noise(frames, sources)
        links = MotionSegmentation(voxel=max(self.voxel, noise), seed=self.seed).fit(
            chain, frames, q, sorted(set(sources)), votes, noise)
        names = list(chain.link_points) or [f"link_{k}" for k in range(1, len(chain.joints) + 1)]
        chain.link_points = {name: points.round(6).tolist() for name, points in zip(names, links[1:])}
        chain.base_points = base_under(chain, links[0], links[1]).round(6).tolist()
        chain.source["segmentation"] = {"sources": len(set(sources)), "votes": len(votes),
                                        "points": {name: len(points) for name, points in zip(names, links[1:])},
                                        "static_points": len(links[0]), "base_points": len(chain.base_points)}

    def refine(self, chain: DiscoveredArm, frames: DepthFrames, session: Session, rows: list[int]) -> RefinedAxes:
        """All axes refined at once over the poses ``rows`` (the random ones: every joint away from
        home), and each axis's uncertainty from that fit: a refined copy of ``chain`` and a report."""
        noise = self._noise(frames, rows)
        return AxisRefinement(max_poses=self.refine_poses, voxel=max(self.voxel, noise),
                              seed=self.seed).fit(chain, frames, rows, noise, session.q)

    # -- one joint ---------------------------------------------------------------------------------

    def _masks(self, frames: DepthFrames, rows: list[int], camera: str) -> tuple[np.ndarray, float]:
        """Pixels (H, W) that change anywhere in the sweep, and the change threshold at their depth."""
        depth = np.stack([frames.frame(r, camera).depth for r in rows])
        valid = np.stack([frames.frame(r, camera).valid for r in rows])
        reference = np.median(np.where(valid, depth, np.nan), axis=0)
        threshold = self._threshold(frames, camera, np.nan_to_num(reference, nan=1.0))
        deviates = valid & (np.abs(depth - reference) > threshold)
        return deviates.any(axis=0) | ~np.isfinite(reference), threshold

    def _threshold(self, frames: DepthFrames, camera: str, depth: np.ndarray) -> np.ndarray:
        return np.maximum(self.change * frames.sigma(camera, depth), 0.005)

    def _pair_points(self, frames: DepthFrames, a: int, b: int, moving: dict[str, np.ndarray]):
        """Source: frame a's pixels that changed by frame b; target: frame b's pixels that change in the sweep."""
        source, target = [], []
        for camera in frames.cameras:
            fa, fb = frames.frame(a, camera), frames.frame(b, camera)
            threshold = self._threshold(frames, camera, fa.depth)
            same = fb.valid & (np.abs(fa.depth - fb.depth) < threshold)
            source.append(fa.points[fa.valid & moving[camera] & ~same])
            target.append(fb.points[fb.valid & moving[camera]])
        return np.concatenate(source), np.concatenate(target)

    def _noise(self, frames: DepthFrames, rows: list[int]) -> float:
        """A typical registration residual (m): the filtered depth noise of the arm's pixels, and no
        less than ``min_noise`` (what filtering does to corners, the clouds' thinning)."""
        camera = frames.cameras[0]
        depth = frames.frame(rows[0], camera).depth
        sigma = float(np.median(frames.sigma(camera, depth[depth > 0]))) if (depth > 0).any() else 0.0
        return max(sigma, self.min_noise)

    def _fit_joint(self, frames: DepthFrames, session: Session, sweep: Sweep, name: str,
                   previous_point: np.ndarray) -> tuple[DiscoveredJoint, dict[str, np.ndarray], int]:
        j, rows = sweep.joint, sweep.rows
        readings = session.q[rows, j]
        moving = {camera: self._masks(frames, rows, camera)[0] for camera in frames.cameras}
        noise = self._noise(frames, rows)
        voxel = max(self.voxel, noise)
        steps = []
        step = float(np.median(np.abs(np.diff(readings))))
        stride = int(max(1, min(np.ceil(self.pair_step / max(step, 1e-9)), (len(rows) - 1) // 4)))
        for a, b in zip(rows[:-stride], rows[stride:]):
            source, target = self._pair_points(frames, a, b, moving)
            if len(source) < 30 or len(target) < 30:
                continue
            source = self._at_most(thin(source, voxel), 2 * self.max_points)
            target, normals = cloud_with_normals(target, voxel, 5 * voxel)
            motion, fitness = register(source, target, normals, np.eye(4), (0.12, 0.06, 0.03, 6 * noise), noise)
            steps.append((a, b, float(session.q[b, j] - session.q[a, j]), motion, fitness))
        if len(steps) < 2:
            raise InputError(f"joint {name!r}: fewer than 2 sweep steps where the cameras saw something move; the "
                             f"cameras may not see what this joint carries.")
        deltas = np.array([s[2] for s in steps])
        vectors = np.array([rotation_vector(s[3]) for s in steps])
        angles = np.linalg.norm(vectors, axis=1)
        shifts = np.array([np.linalg.norm(s[3][:3, 3]) for s in steps])
        rotation_ratio = float(np.median(angles / np.abs(deltas)))
        hypotheses = []
        if rotation_ratio > 0.3:
            signed = vectors * np.sign(deltas)[:, None]
            direction = signed.sum(axis=0)
            direction /= np.linalg.norm(direction)
            point = axis_point([s[3] for s in steps], direction, previous_point)
            hypotheses.append((True, direction, point, rotation_ratio))
        else:  # a part turning about its own axis of symmetry stalls the steps too: search for the turn
            hypotheses.append((True, None, None, rotation_ratio))
        if np.median(angles) < 0.05:  # turning by under 3 degrees a step: it may slide instead
            signed = np.array([s[3][:3, 3] for s in steps]) * np.sign(deltas)[:, None]
            direction = signed.sum(axis=0)
            direction /= np.linalg.norm(direction)
            hypotheses.append((False, direction, previous_point.copy(), float(np.median(shifts / np.abs(deltas)))))
        fits = [(self._refine(frames, session, rows, j, moving, revolute, direction, point, noise, voxel,
                              previous_point), revolute, scale) for revolute, direction, point, scale in hypotheses]
        fit, revolute, scale = fits[0]
        if len(fits) == 2:
            # A small turn about a far line looks like a slide. A real joint's axis runs through the
            # body it carries, and a turn must explain clearly more than a slide (two fewer numbers).
            turn, slide = fits[0][0], fits[1][0]
            if not (turn["explained"] > slide["explained"] + self.prefer_slide and turn["axis_clearance"] < self.axis_reach):
                fit, revolute, scale = fits[1]
        direction, point, rms, moved = fit["direction"], fit["point"], fit["rms"], fit["moved"]
        direction_sd, position_sd, reference = fit["direction_sd"], fit["position_sd"], fit["reference"]
        joint = DiscoveredJoint(name, "revolute" if revolute else "prismatic", direction.tolist(), point.tolist(),
                                0.0, float(session.q[:, j].min()), float(session.q[:, j].max()), scale, direction_sd,
                                position_sd * 1000.0, len(steps), int(sum(m.sum() for m in moved.values())), rms * 1000)
        return joint, moved, reference

    @staticmethod
    def _sphere(count: int = 1600) -> np.ndarray:
        """``count`` unit vectors (count, 3) spread evenly over the sphere (a Fibonacci lattice)."""
        golden = np.pi * (3 - np.sqrt(5))
        z = 1 - 2 * (np.arange(count) + 0.5) / count
        ring = np.sqrt(1 - z ** 2)
        return np.stack([ring * np.cos(golden * np.arange(count)), ring * np.sin(golden * np.arange(count)), z], 1)

    def _search_turn(self, pairs, noise: float) -> tuple[np.ndarray, np.ndarray]:
        """A turn's axis where the steps saw none: every direction through the centre of what moved
        (a part that turns about its own symmetry has its axis through its middle), then the best
        line of that direction near the centre; then both again from that line, and a finer look at
        directions."""
        if not pairs:
            raise InputError("no frame pair shows what this joint carries.")
        chosen = sorted(pairs, key=lambda pair: -abs(pair[4]))[:3]
        centre = np.median(np.concatenate([pair[0] for pair in chosen]), axis=0)

        def score(direction: np.ndarray, point: np.ndarray) -> float:
            total = 0.0
            for source, target, normals, tree, delta in chosen:
                motion = screw_motion(direction, point, delta)
                distance, _ = tree.query(source @ motion[:3, :3].T + motion[:3, 3], distance_upper_bound=3 * noise)
                total += np.isfinite(distance).mean()
            return total

        point, rng = centre, np.random.default_rng(self.seed)
        for square in (0.15, 0.04):  # twice: a direction through a point off the axis is itself off
            directions = self._sphere()
            direction = directions[int(np.argmax([score(candidate, point) for candidate in directions]))]
            # Then where the axis crosses the plane through the point across it.
            helper = np.eye(3)[np.argmin(np.abs(direction))]
            e1 = np.cross(direction, helper)
            e1 /= np.linalg.norm(e1)
            e2 = np.cross(direction, e1)
            grid = np.linspace(-square, square, 31)
            points = [point + a * e1 + b * e2 for a in grid for b in grid]
            point = points[int(np.argmax([score(direction, candidate) for candidate in points]))]
        directions = direction + rng.normal(0, np.radians(3), (200, 3))
        directions = np.vstack([direction, directions / np.linalg.norm(directions, axis=1, keepdims=True)])
        direction = directions[int(np.argmax([score(candidate, point) for candidate in directions]))]
        return direction, point

    def _search_slide(self, pairs, direction: np.ndarray, noise: float) -> np.ndarray:
        """The slide direction that explains most moved points: every direction on the sphere
        (about 5 degrees apart), then a finer look around the best.

        A step's free registration of a part sliding along itself stalls short and off course (its
        long faces slide over themselves and pull nowhere); knowing the slide's length from the
        readings, a search over directions does not stall."""
        chosen = sorted(pairs, key=lambda pair: -abs(pair[4]))[:3]

        def score(candidates: np.ndarray) -> np.ndarray:
            scores = np.zeros(len(candidates))
            for source, target, normals, tree, delta in chosen:
                for k, candidate in enumerate(candidates):
                    distance, _ = tree.query(source + candidate * delta, distance_upper_bound=3 * noise)
                    scores[k] += np.isfinite(distance).mean()
            return scores

        candidates = np.vstack([direction, self._sphere()])
        best = candidates[int(np.argmax(score(candidates)))]
        rng = np.random.default_rng(self.seed)
        local = best + rng.normal(0, np.radians(3), (200, 3))
        local = np.vstack([best, local / np.linalg.norm(local, axis=1, keepdims=True)])
        return local[int(np.argmax(score(local)))]

    def _at_most(self, points: np.ndarray, count: int) -> np.ndarray:
        """``points`` (n, 3), a seeded random ``count`` of them where there are more."""
        if len(points) <= count:
            return points
        return points[np.random.default_rng(self.seed).choice(len(points), count, replace=False)]

    def _motion(self, revolute: bool, direction: np.ndarray, point: np.ndarray, delta: float) -> np.ndarray:
        return screw_motion(direction, point, delta) if revolute else slide_motion(direction, delta)

    def _refine(self, frames, session, rows, j, moving, revolute, direction, point, noise, voxel, previous_point):
        """All pairs (reference frame, another sweep frame) at once, the angles from the readings."""
        readings = session.q[rows, j]
        reference = rows[int(np.argmin(np.abs(readings - np.median(readings))))]
        others = [r for r in rows if r != reference]
        if len(others) > self.refine_pairs:
            others = [others[i] for i in np.linspace(0, len(others) - 1, self.refine_pairs).round().astype(int)]
        pairs = []
        for other in others:
            source, target = self._pair_points(frames, reference, other, moving)
            if len(source) < 30 or len(target) < 30:
                continue
            target, normals = cloud_with_normals(target, voxel, 5 * voxel)
            pairs.append((self._at_most(thin(source, voxel), self.max_points), target, normals, cKDTree(target),
                          float(session.q[other, j] - session.q[reference, j])))

        def pack(d, p):
            return np.concatenate([d, p]) if revolute else d.copy()

        def unpack(x):
            d = x[:3] / np.linalg.norm(x[:3])
            return d, (x[3:6] if revolute else point)

        if not revolute and pairs:
            direction = self._search_slide(pairs, direction, noise)
        if revolute and direction is None:
            direction, point = self._search_turn(pairs, noise)
        x = pack(direction, point)
        gate = 0.06
        for _ in range(7):
            d, p = unpack(x)
            matched = []
            for source, target, normals, tree, delta in pairs:
                moved = source @ self._motion(revolute, d, p, delta)[:3, :3].T + self._motion(revolute, d, p, delta)[:3, 3]
                distance, index = tree.query(moved, distance_upper_bound=gate)
                keep = np.isfinite(distance)
                matched.append((source[keep], target[index[keep]], normals[index[keep]], delta))

            def residuals(x):
                d, p = unpack(x)
                out = []
                for source, target, normals, delta in matched:
                    motion = self._motion(revolute, d, p, delta)
                    out.append(np.einsum("ij,ij->i", source @ motion[:3, :3].T + motion[:3, 3] - target, normals))
                return np.concatenate(out) if out else np.zeros(1)

            x = least_squares(residuals, x, loss="soft_l1", f_scale=noise, method="trf", x_scale="jac", max_nfev=40).x
            gate = max(gate / 2, 4 * noise)
        d, p = unpack(x)
        final = residuals(x)
        rms = float(np.sqrt(np.mean(np.minimum(final, 3 * noise) ** 2)))
        if revolute:
            p = p + d * (d @ (previous_point - p))  # the foot of the previous joint's point
        # Which of the reference frame's pixels follow this joint: they changed and the motion explains them.
        moved_masks = {camera: np.zeros(frames.frame(reference, camera).depth.shape, bool) for camera in frames.cameras}
        for other in others:
            delta = float(session.q[other, j] - session.q[reference, j])
            motion = self._motion(revolute, d, p, delta)
            target = np.concatenate([frames.frame(other, c).points[frames.frame(other, c).valid] for c in frames.cameras])
            tree = cKDTree(thin(target, voxel / 2))
            for camera in frames.cameras:
                ref, fo = frames.frame(reference, camera), frames.frame(other, camera)
                threshold = self._threshold(frames, camera, ref.depth)
                changed = ref.valid & moving[camera] & ~(fo.valid & (np.abs(ref.depth - fo.depth) < threshold))
                candidates = np.flatnonzero(changed.ravel())
                if not len(candidates):
                    continue
                moved = ref.points.reshape(-1, 3)[candidates] @ motion[:3, :3].T + motion[:3, 3]
                distance, _ = tree.query(moved, distance_upper_bound=max(3 * noise, voxel))
                moved_masks[camera].ravel()[candidates[np.isfinite(distance)]] = True
        # Uncertainty: the spread of single-pair refits around the joint fit, over the square root
        # of their number (the pairs share the reference frame, so this is a lower bound).
        turns, feet = [], []
        for source, target, normals, delta in matched:
            if len(source) < 30:
                continue

            def one(x, source=source, target=target, normals=normals, delta=delta):
                dd, pp = unpack(x)
                motion = self._motion(revolute, dd, pp, delta)
                return np.einsum("ij,ij->i", source @ motion[:3, :3].T + motion[:3, 3] - target, normals)

            fitted_d, fitted_p = unpack(least_squares(one, pack(d, p), loss="soft_l1", f_scale=noise, x_scale="jac",
                                                      max_nfev=20).x)
            turns.append(np.degrees(np.arccos(np.clip(abs(fitted_d @ d), -1, 1))))
            if revolute:
                offset = fitted_p - p
                offset = offset - fitted_d * (fitted_d @ offset)
                feet.append(np.linalg.norm(offset - d * (d @ offset)))
        direction_sd = float(np.sqrt(np.mean(np.square(turns))) / np.sqrt(len(turns))) if turns else float("nan")
        position_sd = float(np.sqrt(np.mean(np.square(feet))) / np.sqrt(len(feet))) if feet else 0.0
        clearance = 0.0
        if revolute and pairs:
            offsets = pairs[0][0] - p
            clearance = float(np.min(np.linalg.norm(offsets - np.outer(offsets @ d, d), axis=1)))
        explained, total = 0, 0
        for source, target, normals, tree, delta in pairs:
            motion = self._motion(revolute, d, p, delta)
            distance, _ = tree.query(source @ motion[:3, :3].T + motion[:3, 3], distance_upper_bound=2 * noise)
            explained += int(np.isfinite(distance).sum())
            total += len(source)
        return {"direction": d, "point": p, "rms": rms, "moved": moved_masks, "direction_sd": direction_sd,
                "position_sd": position_sd, "reference": reference, "explained": explained / max(total, 1),
                "axis_clearance": clearance}

    def _link_points(self, home_points: dict[str, np.ndarray], moved_masks: list[dict[str, np.ndarray]],
                     link_names: list[str], keep: int = 4000) -> dict[str, list[list[float]]]:
        """Each moving link's points at home (base frame, at most ``keep``): moved by its joint and by
        no later one. The base link is not separated from the world around it, so it has none."""
        rng = np.random.default_rng(self.seed)
        out = {}
        for k in range(1, len(link_names)):
            chosen = []
            for camera, points in home_points.items():
                mine = moved_masks[k - 1][camera].copy()
                for later in moved_masks[k:]:
                    mine &= ~later[camera]
                chosen.append(points[mine])
            points = np.concatenate(chosen) if chosen else np.zeros((0, 3))
            if len(points) > keep:
                points = points[rng.choice(len(points), keep, replace=False)]
            out[link_names[k]] = points.round(6).tolist()
        return out


def base_under(chain: DiscoveredArm, still: np.ndarray, first: np.ndarray, gap: float = 0.02,
               reach: float = 1.5) -> np.ndarray:
    """The base's points (n, 3) at home: of the points that stand still in every frame (``still``),
    those joined (within ``gap`` m, one DBSCAN cluster) to what the first joint carries (``first``),
    no farther from the first axis than ``reach`` times the first link's own extent across it (95 %
    of its points) and not past that link's foot (5 % of its points along the axis, plus ``gap``). A still scene (a table, a fixture) joined to the base is
    cut to the disc around the first joint: nothing in the data tells them apart."""
    import open3d as o3d  # open3d adds 1.2 s to a start; only this step needs it

    if len(still) < 20 or len(first) < 20:
        return np.zeros((0, 3))
    d, p = np.array(chain.joints[0].direction, float), np.array(chain.joints[0].point, float)

    def across(points):
        offsets = points - p
        return np.linalg.norm(offsets - np.outer(offsets @ d, d), axis=1)

    along_first = (first - p) @ d
    # The base stands on the side of the first link where the axis enters it.
    sign = 1.0 if np.median(along_first) >= 0 else -1.0
    near = (across(still) <= reach * np.percentile(across(first), 95)) & (
        sign * ((still - p) @ d) <= np.percentile(sign * along_first, 5) + gap)
    candidates = still[near]
    if len(candidates) < 20:
        return np.zeros((0, 3))
    both = np.vstack([candidates, first])
    labels = np.asarray(o3d.geometry.PointCloud(o3d.utility.Vector3dVector(both)).cluster_dbscan(eps=gap, min_points=5))
    touching = set(labels[len(candidates):][labels[len(candidates):] >= 0].tolist())
    return candidates[np.isin(labels[:len(candidates)], list(touching))]
