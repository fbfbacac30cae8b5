"""Where the cameras saw through: points that move with the links, posed at recorded poses and
compared with the training sessions' depth images.

A depth pixel vouches for free space in front of what it measured. A point (link frame) posed at a
recorded pose and projected into a camera is *seen through* when its pixel's reading lies beyond
it by more than a tolerance, and *met* when the reading is within the tolerance of it. A ray goes
through only where its pixel's neighbours do too: the reading compared is the minimum over the
3x3 pixels around the point's pixel, because at a silhouette a point rounds to a pixel just past
the body (a pixel is 2-7 mm wide at 1-1.5 m on the test rigs). A reading of 0 goes through up to
the camera's far range where the camera's no-depth mode says that zero means nothing in range
(rigs.no_return), else it vouches for nothing.

The minimum of nine readings lies below the surface by about 1.5 noise sigmas, so the test is
conservative against noise: a point on the true surface reads as seen through in one ray only if
all nine readings lie a tolerance beyond it.

The damage check (:mod:`selfmodel.inspect.check`) reads it for described surface the cameras saw through;
the collision export (:mod:`selfmodel.export.exporter`) for learned matter where the arm was not.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
from scipy.ndimage import minimum_filter

from capture.session import load_session
from rigs.no_return import RIM_PX, no_return_reach, no_return_regions
from selfmodel.labels.depth import far_range
from selfmodel.model.folder import training_session_paths

NEIGHBOURHOOD = 3  # pixels: the square whose minimum reading a point is compared with


@dataclass
class View:
    """One recorded pose: the session, its row, and each link's pose in the base frame (4, 4)."""

    session: object  # capture.session.Session
    row: int
    base_T_links: dict[str, np.ndarray]


def nearest_reading(depth: np.ndarray, camera, far: float = np.inf) -> np.ndarray:
    """(H, W) m -> (H, W) m: the nearest reading among each pixel's 3x3 neighbours. A 0 pixel whose
    zero means nothing in range (the camera's ``no_depth``, rigs.no_return) counts as ``far`` m (on
    the rim of a reading under ``auto``: as that reading), any other 0 as 0 (no ray goes through it)."""
    mode = camera.no_depth or "unknown"
    valid = depth > 0
    values = np.where(valid, depth, 0.0)
    if mode != "unknown" and not valid.all():
        free = no_return_regions(depth).free(mode)
        values = np.where(free, no_return_reach(depth, free, far, RIM_PX if mode == "auto" else None), values)
    return minimum_filter(values, size=NEIGHBOURHOOD)


def pixels(local: np.ndarray, K: np.ndarray, width: int, height: int, near: float = 0.05
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points (n, 3) m in a camera's frame -> (rows, u, v): the indices (m,) of those at least ``near``
    m ahead whose nearest pixel falls inside the ``width`` x ``height`` image, and that pixel's
    column ``u`` and row ``v`` (m,) under the intrinsics ``K`` (3, 3)."""
    ahead = np.flatnonzero(local[:, 2] > near)
    uvw = local[ahead] @ np.asarray(K, float).T
    u = np.rint(uvw[:, 0] / uvw[:, 2]).astype(np.int64)
    v = np.rint(uvw[:, 1] / uvw[:, 2]).astype(np.int64)
    inside = (u >= 0) & (u < width) & (v >= 0) & (v < height)
    return ahead[inside], u[inside], v[inside]


def _view_hits(points: dict[str, np.ndarray], view: View, tolerance: Callable[[object, np.ndarray], np.ndarray],
               far_cache: dict):
    """For each camera with a depth image at ``view``'s pose and each link: (link, went (n,) bool,
    met (n,) bool) over ``points[link]``: the camera saw through the point, or its reading met it."""
    session, pose = view.session, view.session.pose_ids[view.row]
    for name, camera in session.cameras.items():
        if camera.base_T_camera is None or not session.has_image(name, pose, "depth"):
            continue
        depth = session.image(name, pose, "depth")
        height, width = depth.shape
        nearest = nearest_reading(depth, camera, far_range(session, name, far_cache))
        camera_T_base = np.linalg.inv(camera.base_T_camera)
        for link, local in points.items():
            if link not in view.base_T_links or not len(local):
                continue
            transform = camera_T_base @ view.base_T_links[link]
            p = local @ transform[:3, :3].T + transform[:3, 3]
            rows, u, v = pixels(p, camera.info.K, width, height)
            reading = depth[v, u].astype(float)
            z = p[rows, 2]
            allowed = tolerance(camera, z)
            went = np.zeros(len(local), dtype=bool)
            met = np.zeros(len(local), dtype=bool)
            went[rows[nearest[v, u] > z + allowed]] = True
            met[rows[(reading > 0) & (np.abs(reading - z) <= allowed)]] = True
            yield link, went, met


def through_counts(points: dict[str, np.ndarray], views: Iterable[View], tolerance: Callable[[object, np.ndarray], np.ndarray],
                   per_pose: bool = False, progress: Callable[[int, int], None] | None = None,
                   ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per link, (through (n,), met (n,)) counts of ``points[link]`` (n, 3) link frame, m, over the
    ``views``' cameras that have a depth image at that pose.

    ``tolerance(camera, z)``: how far (m) a reading must lie beyond a point at depth ``z`` (n,) for
    the ray to go through it, and within which it meets it. ``per_pose``: count a view once however
    many of its cameras saw through (or met) a point, so a count is a number of recorded poses.
    """
    through, met, _ = pose_counts(points, views, tolerance, per_pose, progress)
    return through, met


def pose_counts(points: dict[str, np.ndarray], views: Iterable[View], tolerance: Callable[[object, np.ndarray], np.ndarray],
                per_pose: bool = True, progress: Callable[[int, int], None] | None = None,
                ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """:func:`through_counts` and, third, per link (n,) how many views (``per_pose``) or camera
    images saw each point at all: some camera saw through it or its reading met it. Seen is what
    a capture can tell of a point, free or matter; the rest is unknown."""
    through = {link: np.zeros(len(p), dtype=int) for link, p in points.items()}
    met = {link: np.zeros(len(p), dtype=int) for link, p in points.items()}
    seen = {link: np.zeros(len(p), dtype=int) for link, p in points.items()}

    views = list(views)
    far_cache: dict = {}
    for done, view in enumerate(views, 1):
        went_here = {link: np.zeros(len(p), dtype=bool) for link, p in points.items()}
        met_here = {link: np.zeros(len(p), dtype=bool) for link, p in points.items()}
        for link, went, hit in _view_hits(points, view, tolerance, far_cache):
            if per_pose:
                went_here[link] |= went
                met_here[link] |= hit
            else:
                through[link] += went
                met[link] += hit
                seen[link] += went | hit
        if per_pose:
            for link in points:
                through[link] += went_here[link]
                met[link] += met_here[link]
                seen[link] += went_here[link] | met_here[link]
        if progress is not None:
            progress(done, len(views))
    return through, met, seen


def training_sessions(folder: Path | None) -> tuple[list | None, str]:
    """The sessions a model in ``folder`` was trained on (config.json names them), or (None, why):
    one is gone, or its cameras have no poses of their own (trained with --cameras)."""
    if folder is None:
        return None, "the model was not loaded from a folder, so its training sessions are unknown"
    paths = training_session_paths(Path(folder))
    if not paths:
        return None, f"{folder}/config.json names no training sessions"
    gone = [path for path in paths if not (path / "session.json").is_file()]
    if gone:
        return None, f"the training session {gone[0]} is no longer there"
    sessions = [load_session(path) for path in paths]
    if any(camera.base_T_camera is None for session in sessions for camera in session.cameras.values()):
        return None, "the training sessions' cameras have no poses of their own (the model was trained with --cameras)"
    return sessions, ""


def unsupported_matter(model, sessions: list, pitch: float = 0.01, max_views: int = 60,
                       tolerance: float = 0.01) -> dict[str, float]:
    """Link -> cm3 of the structured ``model``'s learned matter that no depth reading ever supported.

    The link's matter is its network's occupancy above one half on a ``pitch`` m grid over its
    domain (link frame). A grid point is supported when, at some training pose (up to
    ``max_views``, evenly spread; posed with the model's own kinematics), some camera read a surface
    at it or in front of it (a reading > 0 no more than ``tolerance`` m beyond it): a reading met it
    or hides it. What is left is matter only because no camera ever saw it free: where a camera's
    zeros were taken as unknown around an empty background, the shells beside the arm."""
    points = {}
    for link in model.link_names:
        lo, hi = model.link_bounds(link)
        axes = [np.arange(a + pitch / 2, b, pitch) for a, b in zip(lo, hi)]
        grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, 3)
        points[link] = grid[model.link_occupancy(link, grid) > 0.5]
    rows = [(session, row) for session in sessions for row in range(len(session.pose_ids))]
    chosen = np.unique(np.linspace(0, len(rows) - 1, min(max_views, len(rows))).round().astype(int)) if rows else []
    supported = {link: np.zeros(len(p), dtype=bool) for link, p in points.items()}
    for index in chosen:
        session, row = rows[index]
        poses = model.base_T_links(session.q[row])[0]
        pose_id = session.pose_ids[row]
        for name, camera in session.cameras.items():
            if camera.base_T_camera is None or not session.has_image(name, pose_id, "depth"):
                continue
            depth = session.image(name, pose_id, "depth")
            height, width = depth.shape
            camera_T_base = np.linalg.inv(camera.base_T_camera)
            for i, link in enumerate(model.link_names):
                if not len(points[link]):
                    continue
                transform = camera_T_base @ poses[i]
                p = points[link] @ transform[:3, :3].T + transform[:3, 3]
                found, u, v = pixels(p, camera.info.K, width, height)
                reading = depth[v, u]
                ok = (reading > 0) & (reading <= p[found, 2] + tolerance)
                supported[link][found[ok]] = True
    voxel_cm3 = (pitch * 100) ** 3
    return {link: round(float(np.sum(~supported[link]) * voxel_cm3), 1) for link in model.link_names}
