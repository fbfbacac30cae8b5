"""Joint placement corrections from depth, with the description's geometry as the fixed reference.

A self-model that learns link shapes and joint corrections together can move a link's shape inside
its frame while the correction moves the frame back: the split is not identifiable, and the
corrections drift on an intact arm as much as on a bent one. Here the gauge is fixed before any
network trains: each link's shape is pinned to its description (URDF visual meshes, and a board
the session declares on the tip), and the corrections are the rigid placements that lay the
measured surface onto that geometry where the two agree:

    minimise  sum_i  rho( n_i . (link_T_base(q_c, delta) p_i - c_i) )  +  prior(delta)

over the measured surface points p_i (base frame) of every training pose c, with c_i and n_i the
closest point and normal of the description link nearest to p_i (point-to-plane ICP through the
chain), rho a Cauchy loss whose scale shrinks from ``start_m`` to ``floor_m`` (a bolted-on tool or a
bent part is an outlier, not a pull), and a weak Gaussian prior towards the starting corrections
that holds still what the data leave free.

The corrections use the chain's convention (``parent_T_child = origin @ exp6(delta) @ motion(q)``,
delta = (dx, dy, dz, wx, wy, wz), m and rad). Which are determined, and how well, comes from two
sources, as the kinematic calibration's identifiability report does: the formal posterior standard
deviation (a direction the geometry cannot see, such as a round link's spin, keeps the prior's) and
a bootstrap over poses (errors that repeat within a pose, not between points). A component is
*determined* when its standard deviation is below a third of the tolerance the self-model promises
(1 mm, 0.2 degrees).

A URDF that a calibration wrote is held as it is instead (``PlacementSettings.hold``): its board or
tracker fit measured the placements to a few tenths of a millimetre, while this fit lays depth onto
the description's shapes, which a bent link no longer has (BENCHMARKS.md "selfmodel-export" has
both on the crashed xArm6).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import trimesh

from rigs.solids import raycasting_scene
from rigs.transforms import exp6
from selfmodel.model.chain import ArmLinks, link_poses_numpy
from selfmodel.model.corrections import JointCorrections

PRIOR_SIGMA = np.array([0.02] * 3 + [np.radians(5.0)] * 3)  # weak: only the null space listens to it
# How a training places the joints: fitted to the depth (this module), held as the URDF gives them,
# or held when the URDF is a calibration's (its board or tracker fit measured them; see
# selfcal.cli_selfmodel.placements_held).
PLACEMENTS = ("auto", "fit", "hold")


@dataclass
class PlacementSettings:
    max_points: int = 60_000  # measured surface points used (a random subset)
    iterations: int = 14
    start_m: float = 0.03  # first inlier scale: a 3 degree bend moves a link end by about 1.5 cm
    floor_m: float = 0.008  # last scale: about twice the depth noise of a camera 1.5 m away
    bootstrap: int = 200
    seed: int = 0
    # Placements held where they were (``initial``): a chain discovered from this very depth was
    # already fitted to it with the links' own points, and its convex-hull meshes are no description
    # to fit against (they cover what one view saw, so they pull joints by degrees).
    hold: bool = False
    # joint -> (6,) standard deviations (m, rad) of held placements that were measured (a calibration's);
    # the others keep the prior's spread.
    held_std: dict | None = None


def _scenes(meshes: dict[str, trimesh.Trimesh]):
    return {link: raycasting_scene(mesh) for link, mesh in meshes.items()}


def _local(poses: np.ndarray, link: int, points: np.ndarray, configs: np.ndarray) -> np.ndarray:
    """Base-frame points (n, 3) into link ``link``'s frame at their configurations (poses (C, L, 4, 4))."""
    pose = poses[configs, link]
    return np.einsum("nji,nj->ni", pose[:, :3, :3], points - pose[:, :3, 3])


def downstream_joints(spec: ArmLinks) -> np.ndarray:
    """(J, L) bool: movable joint j moves link l."""
    movable = [k for k, joint in enumerate(spec.joints) if joint.type != "fixed"]
    moved = np.zeros((len(movable), len(spec.link_names)), dtype=bool)
    for j, k in enumerate(movable):
        moved[j, k + 1] = True
        for later in range(k + 1, len(spec.joints)):
            if moved[j, spec.joints[later].parent_index]:
                moved[j, later + 1] = True
    return moved


def surface_jacobian(spec: ArmLinks, poses: np.ndarray, deltas: np.ndarray, moved: np.ndarray, points: np.ndarray,
              normals: np.ndarray, owner: np.ndarray, configs: np.ndarray) -> np.ndarray:
    """(n, 6 J) derivatives of the point-to-plane residuals n . (link_T_base p - c) by the corrections.

    For joint j, G = base_T_parent @ origin @ exp6(delta_j) is its frame before its motion, and a
    link it moves sits at G exp6(e) H. A right perturbation e = (v, w) moves the point's link-frame
    position by R_H^T (-v + [y]x w) with y = G^-1 p, so the residual moves by -a . v + (a x y) . w
    with a = R_G^T n_base (the normal in G's frame). The corrections are added to delta, not composed
    on the right: exp6(delta + d) = exp6(delta) exp6(Jexp6(delta) d) turns one into the other."""
    import pinocchio as pin  # Pinocchio loads only where a planner's view of the URDF is built

    movable = [k for k, joint in enumerate(spec.joints) if joint.type != "fixed"]
    jacobian = np.zeros((len(points), 6 * len(movable)))
    for j, k in enumerate(movable):
        mine = np.flatnonzero(moved[j][owner])
        if not len(mine):
            continue
        joint = spec.joints[k]
        frame = poses[:, joint.parent_index] @ (joint.origin @ exp6(deltas[j]))  # (C, 4, 4) G per configuration
        rotation = frame[configs[mine], :3, :3]
        a = np.einsum("nji,nj->ni", rotation, normals[mine])  # R_G^T n
        y = np.einsum("nji,nj->ni", rotation, points[mine] - frame[configs[mine], :3, 3])
        right = np.hstack([-a, np.cross(a, y)])
        jacobian[mine, 6 * j:6 * j + 6] = right @ pin.Jexp6(pin.Motion(np.asarray(deltas[j], dtype=float)))
    return jacobian


def fit_placements(spec: ArmLinks, meshes: dict[str, trimesh.Trimesh], surface: np.ndarray, surface_config: np.ndarray,
                   q: np.ndarray, initial: np.ndarray | None = None,
                   settings: PlacementSettings | None = None) -> JointCorrections:
    """Corrections (see the module docstring) from measured surface points ``surface`` (S, 3) base frame
    m, their configuration index ``surface_config`` (S,) into ``q`` (C, dof), and the description's
    ``meshes`` (link -> trimesh in the link frame). ``initial`` (J, 6): the start and the prior's centre
    (a previous model's corrections), zero by default."""
    import open3d as o3d  # open3d adds 1.2 s to a start; only this step needs it

    settings = settings or PlacementSettings()
    rng = np.random.default_rng(settings.seed)
    J = spec.dof
    start = np.zeros((J, 6)) if initial is None else np.asarray(initial, dtype=float).reshape(J, 6)
    if settings.hold:  # nothing learned: what is known is the prior's spread, or the calibration's
        std = np.tile(PRIOR_SIGMA, (J, 1))
        for j, name in enumerate(spec.joint_names):
            if settings.held_std and name in settings.held_std:
                std[j] = np.asarray(settings.held_std[name], dtype=float)
        return JointCorrections(list(spec.joint_names), start.copy(), std, 0, 0.0, held=True)
    deltas = start.copy()
    rows = rng.choice(len(surface), min(settings.max_points, len(surface)), replace=False)
    points, configs = surface[rows].astype(float), surface_config[rows].astype(np.int64)
    links = [(index, link) for index, link in enumerate(spec.link_names) if link in meshes]
    scenes = _scenes(meshes)
    boxes = {index: np.asarray(meshes[link].bounds, dtype=float) for index, link in links}
    moved = downstream_joints(spec)
    prior = 1.0 / PRIOR_SIGMA ** 2
    scales = np.geomspace(settings.start_m, settings.floor_m, max(2, settings.iterations // 2))
    scales = np.concatenate([scales, np.full(max(0, settings.iterations - len(scales)), settings.floor_m)])
    for iteration, scale in enumerate(scales):
        poses = link_poses_numpy(spec, q, deltas)
        # Which description link each point lies nearest to, and the tangent plane there.
        best = np.full(len(points), np.inf)
        owner = np.full(len(points), -1)
        closest = np.zeros((len(points), 3))
        normal = np.zeros((len(points), 3))
        reach = 3 * scale  # farther than this from every link, a point is an outlier whichever is nearest
        for index, link in links:
            local = _local(poses, index, points, configs)
            # Only points within reach of the link's bounding box can have it as their inlier's link.
            lo, hi = boxes[index]
            near_box = np.flatnonzero(np.linalg.norm(local - np.clip(local, lo, hi), axis=1) < np.minimum(best, reach))
            if not len(near_box):
                continue
            answer = scenes[link].compute_closest_points(o3d.core.Tensor(local[near_box].astype(np.float32)))
            near = answer["points"].numpy().astype(float)
            distance = np.linalg.norm(near - local[near_box], axis=1)
            better = distance < best[near_box]
            rows_better = near_box[better]
            best[rows_better], owner[rows_better] = distance[better], index
            closest[rows_better] = near[better]
            normal[rows_better] = answer["primitive_normals"].numpy()[better]
        inlier = best < reach
        if inlier.sum() < 100:
            break
        p, c, n, o, k = points[inlier], closest[inlier], normal[inlier], owner[inlier], configs[inlier]
        residual = np.zeros(len(p))
        # In the base frame: each point's normal (n_base), for the placement Jacobian below.
        n_base = np.zeros((len(p), 3))
        for index, _ in links:
            mine = o == index
            if not mine.any():
                continue
            residual[mine] = np.sum(n[mine] * (_local(poses, index, p[mine], k[mine]) - c[mine]), axis=1)
            n_base[mine] = np.einsum("nij,nj->ni", poses[k[mine], index, :3, :3], n[mine])
        jacobian = surface_jacobian(spec, poses, deltas, moved, p, n_base, o, k)
        weight = 1.0 / (1.0 + (residual / scale) ** 2)  # Cauchy: what disagrees with the description pulls little
        sigma2 = max(float(np.sum(weight * residual ** 2) / max(weight.sum(), 1.0)), 1e-8)
        hessian = (jacobian * weight[:, None]).T @ jacobian / sigma2 + np.diag(np.tile(prior, J))
        gradient = (jacobian * weight[:, None]).T @ residual / sigma2 + np.tile(prior, J) * (deltas - start).ravel()
        step = -np.linalg.solve(hessian, gradient)
        deltas = deltas + step.reshape(J, 6)
        last = (hessian, jacobian, weight, residual, k, sigma2)
        if iteration >= len(scales) - 1:
            break
    hessian, jacobian, weight, residual, k, sigma2 = last
    formal = np.linalg.inv(hessian)
    # Bootstrap over poses: resample whole poses and re-solve the linear step at the fit.
    count = len(q)
    per_pose_h = np.zeros((count, J * 6, J * 6))
    per_pose_g = np.zeros((count, J * 6))
    weighted = jacobian * weight[:, None] / sigma2
    for config in np.unique(k):
        here = k == config
        per_pose_h[config] = weighted[here].T @ jacobian[here]
        per_pose_g[config] = weighted[here].T @ residual[here]
    draws = []
    for _ in range(settings.bootstrap):
        pick = np.bincount(rng.integers(0, count, count), minlength=count).astype(float)
        h = np.tensordot(pick, per_pose_h, axes=1) + np.diag(np.tile(prior, J))
        g = np.tensordot(pick, per_pose_g, axes=1)
        draws.append(-np.linalg.solve(h, g))
    spread = np.std(np.array(draws), axis=0) if draws else np.zeros(J * 6)
    std = np.sqrt(np.diag(formal) + spread ** 2).reshape(J, 6)
    return JointCorrections(list(spec.joint_names), deltas, std, int(len(residual)),
                            float(np.sqrt(np.mean(residual ** 2)) * 1000))
