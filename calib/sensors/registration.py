"""Starting values with no hand guess: closed-form registration and a linear solve for reflectors;
and the joint fit of a tracker placement with reflector offsets for arm models held fixed."""

from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares
from scipy.spatial.transform import Rotation

from rigs.errors import InputError


def register_points(points_a: np.ndarray, points_b: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Rigid ``b_T_a`` (4, 4) minimising sum w |points_b - b_T_a points_a|^2 (Kabsch / Umeyama, no scale).

    ``points_a``, ``points_b``: (N, 3) corresponding points, metres.
    """
    points_a, points_b = np.asarray(points_a, float), np.asarray(points_b, float)
    w = np.ones(len(points_a)) if weights is None else np.asarray(weights, float)
    w = w / w.sum()
    mean_a, mean_b = w @ points_a, w @ points_b
    covariance = ((points_b - mean_b) * w[:, None]).T @ (points_a - mean_a)
    u, _, vt = np.linalg.svd(covariance)
    correction = np.diag([1.0, 1.0, np.sign(np.linalg.det(u @ vt))])  # a rotation, never a reflection
    rotation = u @ correction @ vt
    transform = np.eye(4)
    transform[:3, :3] = rotation
    transform[:3, 3] = mean_b - rotation @ mean_a
    return transform


def initial_frame_and_targets(base_T_tip: np.ndarray, targets: list[str], measured: np.ndarray,
                              nominal_targets: dict[str, np.ndarray], rounds: int = 3
                              ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``tracker_T_base`` (4, 4) and reflector offsets from nominal tip poses and measured points.

    ``base_T_tip`` (M, 4, 4) nominal tip pose of each point's pose; ``targets`` (M,) names;
    ``measured`` (M, 3) m in the tracker frame; ``nominal_targets`` name -> (3,) m in the tip frame
    (a reflector without a nominal offset starts at the tip origin). Registration and the linear
    solve alternate; after the first round, points far beyond the robust spread (gross outliers)
    are left out of the registration.
    """
    names = sorted(set(targets))
    offsets = {name: np.asarray(nominal_targets.get(name, np.zeros(3)), float) for name in names}
    index = np.array([names.index(t) for t in targets])
    keep = np.ones(len(measured), dtype=bool)
    tracker_T_base = np.eye(4)
    for _ in range(rounds):
        points_base = np.einsum("mij,mj->mi", base_T_tip[:, :3, :3], np.array([offsets[n] for n in targets])) + base_T_tip[:, :3, 3]
        tracker_T_base = register_points(points_base[keep], measured[keep])
        # Reflector offsets: tracker_R_tip p = measured - tracker_T_base (tip origin), linear in p.
        rotation = tracker_T_base[:3, :3] @ base_T_tip[:, :3, :3]
        origin = base_T_tip[:, :3, 3] @ tracker_T_base[:3, :3].T + tracker_T_base[:3, 3]
        for k, name in enumerate(names):
            rows = (index == k) & keep
            if rows.sum() < 2:
                continue
            offsets[name] = np.linalg.lstsq(rotation[rows].reshape(-1, 3),
                                            (measured[rows] - origin[rows]).reshape(-1), rcond=None)[0]
        predicted = np.einsum("mij,mj->mi", rotation, np.array([offsets[n] for n in targets])) + origin
        error = np.linalg.norm(measured - predicted, axis=1)
        scale = 1.4826 * np.median(error)
        keep = error <= max(5.0 * scale, 1e-6)
    if not np.all(np.isfinite(tracker_T_base)):
        raise InputError("tracker points: the base registration failed (points are degenerate).")
    return tracker_T_base, offsets


def register_frame_and_targets(base_T_tip: np.ndarray, targets: list[str], measured: np.ndarray,
                               nominal_targets: dict[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``tracker_T_base`` (4, 4) and reflector offsets (name -> (3,) m, tip frame) that minimise the
    point errors for tip poses held fixed (a calibration's or the URDF's), as validation registers
    them; arguments as :func:`initial_frame_and_targets`.

    The alternation of :func:`initial_frame_and_targets` moves the placement and the offsets one at a
    time, so where they trade (a sweep of two joints turns the flange about two axes only) it stops
    far from the optimum: on the xArm6 partial rig ten rounds left 3.4 mm RMS where the joint optimum
    is 1.0 mm. Its result starts a Levenberg-Marquardt fit of the six placement parameters and every
    offset together, over the points the alternation kept (gross outliers stay out); the damping
    leaves a direction the poses cannot determine at its start, where it changes no error.
    """
    frame, offsets = initial_frame_and_targets(base_T_tip, targets, measured, nominal_targets, rounds=10)
    names = sorted(offsets)
    index = np.array([names.index(t) for t in targets])
    rotation0 = frame[:3, :3]

    def unpack(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return Rotation.from_rotvec(x[:3]).as_matrix() @ rotation0, frame[:3, 3] + x[3:6], x[6:].reshape(-1, 3)

    def predicted(x: np.ndarray) -> np.ndarray:
        rotation, translation, points = unpack(x)
        base = np.einsum("mij,mj->mi", base_T_tip[:, :3, :3], points[index]) + base_T_tip[:, :3, 3]
        return base @ rotation.T + translation

    start = np.concatenate([np.zeros(6), np.concatenate([offsets[n] for n in names])])
    error = np.linalg.norm(predicted(start) - measured, axis=1)
    keep = error <= max(5.0 * 1.4826 * np.median(error), 1e-6)
    if 3 * keep.sum() < len(start):  # fewer coordinates than unknowns: any exact fit is as good as the start
        return frame, offsets
    solution = least_squares(lambda x: (predicted(x)[keep] - measured[keep]).ravel(), start, method="lm",
                             x_scale=1e-3)  # rad and m: a tracker's placement and a tool's offset move by ~1e-3
    rotation, translation, points = unpack(solution.x)
    fitted = np.eye(4)
    fitted[:3, :3], fitted[:3, 3] = rotation, translation
    return fitted, {name: points[k] for k, name in enumerate(names)}
