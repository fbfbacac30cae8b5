"""All axes at once over the random poses: the sweeps' estimates refined where the whole chain moves.

A sweep sees one joint turn through a small range with the others at home, so an axis error that
the sweep barely sees (a near-symmetric flange turning about a line a few millimetres off its own)
grows with every other joint's turn over the whole range. The random poses move all joints at once:
each link's points at home (what the sweeps segmented) are carried to a random pose by the chain's
forward kinematics (the product of the joints' screw motions, base frame at home) and should land on
the surface the cameras saw there. Point-to-plane distances of all links over all random poses,
with a robust loss, are minimised over every turning axis's direction and position (two angles and
two offsets across the axis), starting from the sweep estimates; a slide keeps its sweep's direction.

Uncertainty: a two-way cluster-robust (sandwich) covariance of the fit, clustered by pose (the points
of one view share the camera's errors) and by patch of each link's surface (a link's points at home
carry one shape error into every pose it is carried to), because independent-point covariance, or
one clustered by pose only, is far too confident.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares
from scipy.spatial import cKDTree

from rigs.errors import InputError, setting
from selfmodel.discovery.screws import chain_motions, cloud_with_normals, thin


@dataclass
class RefinedAxes:
    """What :class:`AxisRefinement` gives back: ``chain``, a refined copy of the DiscoveredArm it
    was given (directions, points and their standard deviations), and ``report``: poses used, RMS
    point-to-plane residual (mm) before and after, per joint the change and the standard deviations."""

    chain: object
    report: dict


@dataclass
class AxisRefinement:
    """Configure, then ``fit(chain, frames, rows, noise, q)`` -> :class:`RefinedAxes`; the chain it
    is given stays as it was (the sweeps' estimate, which a caller may want to compare against).

    ``max_poses``: random poses used at most (spread over those recorded); ``points_per_link``:
    each link's home points used at most per pose; ``voxel`` (m): thinning of the observed clouds;
    ``gate`` (m): the first correspondence distance, halved each round down to 4 noise sigmas;
    consecutive turning axes fitted within ``cross_within`` (m) of crossing are held to cross where
    that raises the residual by under ``cross_cost`` (a fraction).
    """

    max_poses: int = 40
    points_per_link: int = 2000
    voxel: float = 0.005
    gate: float = 0.04
    rounds: int = 5
    cross_within: float = 0.004
    cross_cost: float = 0.01
    patch: float = 0.03
    seed: int = 0

    def __post_init__(self):
        for name in ("max_poses", "points_per_link", "rounds"):
            if getattr(self, name) < 1:
                raise InputError(f"{setting(name)} must be at least 1, got {getattr(self, name)}.")
        for name in ("voxel", "gate", "patch"):
            if not getattr(self, name) > 0:
                raise InputError(f"{setting(name)} must be positive, got {getattr(self, name)}.")
        for name in ("cross_within", "cross_cost"):
            if not getattr(self, name) >= 0:
                raise InputError(f"{setting(name)} must be >= 0, got {getattr(self, name)}.")

    def fit(self, chain, frames, rows: list[int], noise: float, q: np.ndarray) -> RefinedAxes:
        """The axes of ``chain`` (a DiscoveredArm) refined with the frames of session ``rows``
        (random poses; ``q`` (N, dof) the session's readings; ``noise`` m, the depth noise)."""
        chain = copy.deepcopy(chain)
        rng = np.random.default_rng(self.seed)
        if len(rows) > self.max_poses:
            rows = [rows[i] for i in np.linspace(0, len(rows) - 1, self.max_poses).round().astype(int)]
        links = list(chain.link_points)
        home = np.array(chain.home)
        model = []
        for k, name in enumerate(links):
            points = np.array(chain.link_points[name], float).reshape(-1, 3)
            if len(points) > self.points_per_link:
                points = points[rng.choice(len(points), self.points_per_link, replace=False)]
            model.append(points)  # link k + 1 is carried by joints 0..k
        views = []
        for row in rows:
            cloud = np.concatenate([frames.frame(row, c).points[frames.frame(row, c).valid] for c in frames.cameras])
            frames.forget({row})
            if len(cloud) < 100:
                continue
            target, normals = cloud_with_normals(thin(cloud, self.voxel), self.voxel, 5 * self.voxel)
            views.append((q[row] - home, target, normals, cKDTree(target)))
        joints = chain.joints
        revolute = [j.type == "revolute" for j in joints]
        # A slide's direction stays the sweep's: in its own sweep nothing else moves and its length is
        # known, while over random poses a sliding part's long faces slide over themselves and its
        # few end faces pull it off course (the slider arm's 0.2 degrees became 0.8).
        state = {}

        def layout(start, constrained):
            """Parameters per joint: a turning axis two angles and two offsets across it, or, held to
            cross the previous axis, two angles and where along that axis it crosses."""
            state["start"] = start
            state["bases"] = [_across(d) for d, _ in start]
            state["constrained"] = constrained
            state["along"] = {i: float((start[i][1] - start[i - 1][1]) @ start[i - 1][0]) for i in constrained}
            sizes = [0 if not r else (3 if i in constrained else 4) for i, r in enumerate(revolute)]
            state["offsets"] = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
            return np.zeros(state["offsets"][-1])

        def axes(x):
            out = []
            offsets, constrained = state["offsets"], state["constrained"]
            for i, ((d0, p0), (e1, e2)) in enumerate(zip(state["start"], state["bases"])):
                if not revolute[i]:
                    out.append((d0, p0))
                    continue
                a = x[offsets[i]:offsets[i + 1]]
                d = d0 + a[0] * e1 + a[1] * e2
                d /= np.linalg.norm(d)
                if i in constrained:
                    d_before, p_before = out[i - 1]
                    out.append((d, p_before + (state["along"][i] + a[2]) * d_before))
                else:
                    out.append((d, p0 + a[2] * e1 + a[3] * e2))
            return out

        def carried(x, delta):
            """(dof, 4, 4): the motion of each link (1..dof) from home to the pose ``delta`` from home."""
            return chain_motions(axes(x), revolute, delta)

        def posed(x, delta):
            motions = carried(x, delta)
            return [m @ motions[k][:3, :3].T + motions[k][:3, 3] for k, m in enumerate(model)]

        def match(x, gate):
            matched = []
            for delta, target, normals, tree in views:
                pairs = []
                for k, moved in enumerate(posed(x, delta)):
                    distance, index = tree.query(moved, distance_upper_bound=gate)
                    keep = np.isfinite(distance)
                    pairs.append((k, np.flatnonzero(keep), target[index[keep]], normals[index[keep]]))
                matched.append((delta, pairs))
            return matched

        def residuals(x, matched, per_pose=False):
            out = []
            for delta, pairs in matched:
                moved = posed(x, delta)
                pose = [np.einsum("ij,ij->i", moved[k][keep] - target, normal) for k, keep, target, normal in pairs]
                out.append(np.concatenate(pose) if pose else np.zeros(0))
            return out if per_pose else (np.concatenate(out) if out else np.zeros(1))

        def solve(x, gate, rounds):
            for _ in range(rounds):
                matched = match(x, gate)
                x = least_squares(residuals, x, args=(matched,), loss="soft_l1", f_scale=noise, x_scale="jac",
                                  method="trf", max_nfev=30).x
                gate = max(gate / 2, 4 * noise)
            return x, gate

        x = layout([(np.array(j.direction, float), np.array(j.point, float)) for j in joints], set())
        if not views or not len(x):
            return RefinedAxes(chain, {"poses": len(views), "joints": []})
        before = _robust_rms(residuals(x, match(x, self.gate)), noise)
        x, gate = solve(x, self.gate, self.rounds + 1)
        matched = match(x, gate)
        free_rms = _robust_rms(residuals(x, matched), noise)
        # A serial arm's consecutive axes often cross (a wrist, a shoulder). Where the free fit puts two
        # non-parallel axes within ``cross_within`` of each other, they are held to cross, and kept so
        # only if that costs the data under ``cross_cost`` of their residual: the data agree.
        fitted = axes(x)
        crossing = {i for i in range(1, len(joints)) if revolute[i] and revolute[i - 1]
                    and _crossing_distance(fitted[i - 1], fitted[i]) < self.cross_within}
        held = set()
        if crossing:
            free = x.copy(), dict(state)
            x_held = layout([(d, p if i not in crossing else _foot_on(fitted[i - 1], (d, p)))
                             for i, (d, p) in enumerate(fitted)], crossing)
            x_held, _ = solve(x_held, gate, 2)
            matched_held = match(x_held, gate)
            held_rms = _robust_rms(residuals(x_held, matched_held), noise)
            if held_rms <= free_rms * (1 + self.cross_cost):
                x, matched, held = x_held, matched_held, crossing
            else:
                x = free[0]
                state.clear()
                state.update(free[1])
        jacobian = _numeric_jacobian(lambda v: residuals(v, matched), x)
        per_pose = residuals(x, matched, per_pose=True)
        # The clusters: each pose's view, and each patch of a link's surface (its points at home
        # carry one shape error into every pose), the residuals' two ways of sharing an error.
        patches = [np.unique(np.floor(m / self.patch).astype(np.int64), axis=0, return_inverse=True)[1].ravel()
                   for m in model]
        patch_offsets = np.concatenate([[0], np.cumsum([patch.max() + 1 if len(patch) else 0 for patch in patches])])
        pose_of, patch_of = [], []
        for number, (_, pairs) in enumerate(matched):
            for k, keep, _, _ in pairs:
                pose_of.append(np.full(len(keep), number))
                patch_of.append(patches[k][keep] + patch_offsets[k])
        covariance = _two_way_covariance(jacobian, np.concatenate(per_pose), np.concatenate(pose_of),
                                         np.concatenate(patch_of), noise)
        report = {"poses": len(views), "residual_rms_mm_before": 1000 * before,
                  "residual_rms_mm_after": 1000 * _robust_rms(residuals(x, matched), noise),
                  "residual_rms_mm_free": 1000 * free_rms, "crossing_tried": sorted(joints[i].name for i in crossing),
                  "crossing_held": sorted(joints[i].name for i in held), "joints": []}
        start, offsets = [(np.array(j.direction, float), np.array(j.point, float)) for j in joints], state["offsets"]
        previous = np.zeros(3)
        for i, ((d, p), joint) in enumerate(zip(axes(x), joints)):
            if not revolute[i]:
                report["joints"].append({"joint": joint.name, "turned_deg": 0.0, "moved_mm": 0.0, "held": True,
                                         "direction_sd_deg": joint.direction_sd_deg, "position_sd_mm": 0.0})
                continue
            block = covariance[offsets[i]:offsets[i + 1], offsets[i]:offsets[i + 1]]
            turn = float(np.degrees(np.arccos(np.clip(abs(d @ start[i][0]), -1, 1))))
            # Held to cross the previous axis: where along it (one number), and that axis's own place.
            if i in held:
                across = block[2, 2] + (joints[i - 1].position_sd_mm / 1000) ** 2
            else:
                across = block[2, 2] + block[3, 3]
            p = p + d * (d @ (previous - p))  # the foot of the previous joint's point, as the sweeps give it
            previous = p
            moved_mm = 1000 * float(np.linalg.norm(np.cross(p - start[i][1], d)))
            joint.direction_sd_deg = float(np.degrees(np.sqrt(max(block[0, 0] + block[1, 1], 0.0))))
            joint.position_sd_mm = float(1000 * np.sqrt(max(across, 0.0)))
            joint.direction, joint.point = d.tolist(), p.tolist()
            report["joints"].append({"joint": joint.name, "turned_deg": turn, "moved_mm": moved_mm,
                                     "crosses_previous": i in held, "direction_sd_deg": joint.direction_sd_deg,
                                     "position_sd_mm": joint.position_sd_mm})
        return RefinedAxes(chain, report)


def _crossing_distance(first: tuple[np.ndarray, np.ndarray], second: tuple[np.ndarray, np.ndarray],
                       min_angle_deg: float = 10.0) -> float:
    """Shortest distance (m) between two lines (direction (3,), point (3,)); infinite for lines
    within ``min_angle_deg`` of parallel (where crossing says nothing)."""
    normal = np.cross(first[0], second[0])
    if np.linalg.norm(normal) < np.sin(np.radians(min_angle_deg)):
        return float("inf")
    return float(abs((second[1] - first[1]) @ normal) / np.linalg.norm(normal))


def _foot_on(line: tuple[np.ndarray, np.ndarray], other: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The point (3,) of ``line`` nearest the line ``other`` (both (direction, point), not parallel)."""
    (d1, p1), (d2, p2) = line, other
    b = d1 @ d2
    w = p1 - p2
    t = (b * (d2 @ w) - (d1 @ w)) / (1 - b * b)
    return p1 + t * d1


def _across(direction: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two unit vectors (3,) across ``direction`` (3,) and across each other."""
    helper = np.eye(3)[np.argmin(np.abs(direction))]
    e1 = np.cross(direction, helper)
    e1 /= np.linalg.norm(e1)
    return e1, np.cross(direction, e1)


def _robust_rms(residuals: np.ndarray, noise: float) -> float:
    """RMS (m) of residuals clipped at 3 noise sigmas (what is left of the outliers the loss ignores)."""
    return float(np.sqrt(np.mean(np.minimum(np.abs(residuals), 3 * noise) ** 2))) if len(residuals) else float("nan")


def _numeric_jacobian(function, x: np.ndarray, step: float = 1e-6) -> np.ndarray:
    """(M, P) forward differences of ``function`` (P,) -> (M,) at ``x`` (the correspondences fixed)."""
    base = function(x)
    columns = []
    for k in range(len(x)):
        shifted = x.copy()
        shifted[k] += step
        columns.append((function(shifted) - base) / step)
    return np.stack(columns, axis=1)


def _two_way_covariance(jacobian: np.ndarray, residual: np.ndarray, pose: np.ndarray, patch: np.ndarray,
                        noise: float) -> np.ndarray:
    """Sandwich covariance (P, P) of a robust least-squares fit whose residuals (M,) share errors two
    ways: within a pose ``pose`` (M,) and within a patch of a link's surface ``patch`` (M,).
    (J'WJ)^-1 (S_pose + S_patch - S_both) (J'WJ)^-1 with S_g the sum over clusters g of the clusters'
    score outer products, W the soft-L1 loss's weights 1 / sqrt(1 + (r / noise)^2) (its reweighted
    least squares at the solution); where the difference is not positive, the larger one-way one."""
    weight = 1.0 / np.sqrt(1.0 + (residual / noise) ** 2)
    bread = np.linalg.pinv((jacobian * weight[:, None]).T @ jacobian)
    scores = jacobian * (weight * residual)[:, None]

    def meat(groups: np.ndarray) -> np.ndarray:
        _, inverse = np.unique(groups, return_inverse=True)
        summed = np.zeros((inverse.max() + 1 if len(inverse) else 0, scores.shape[1]))
        np.add.at(summed, inverse.ravel(), scores)
        return summed.T @ summed

    by_pose, by_patch = meat(pose), meat(patch)
    both = meat(pose.astype(np.int64) * (int(patch.max()) + 1 if len(patch) else 1) + patch)
    two_way = bread @ (by_pose + by_patch - both) @ bread
    one_way = [bread @ by_pose @ bread, bread @ by_patch @ bread]
    if np.any(np.linalg.eigvalsh((two_way + two_way.T) / 2) < 0):
        return max(one_way, key=np.trace)
    return two_way
