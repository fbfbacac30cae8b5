"""Labelled points from depth images alone: what each camera saw free and what it saw occupied.

Every depth pixel is a ray from the camera centre. A pixel (u, v) with depth z back-projects to
``z * K^-1 [u, v, 1]`` in the camera's optical frame (OpenCV convention, integer pixel = pixel
centre; see docs/session-format.md) and to the base frame with the camera's ``base_T_camera``.
Along a ray that hit the arm at measured depth d (noise sigma):

- a band ``d +- band`` gets samples at EQUAL density on both sides, labelled by the side they fall
  on (occupied behind d, free in front), so the learned boundary sits at the median of the noise
  instead of a sigma in front of the surface;
- a thin shell behind the band is occupied, unless another camera saw that spot free at the same
  moment (in front of its own measured surface by two sigmas): the shell is an assumption (matter
  goes on behind a surface), and a board 3.5 mm thick would otherwise be learned 3 cm thick;
- the segment from where the ray enters the workspace to ``d - band`` is free;
- what lies further behind is unknown and gets no label.

A ray that hit nothing (depth 0) is free across the whole workspace. Segmentation images are never
read here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from capture.session import Session
from rigs.errors import InputError

FAR = 100.0  # m: how far a ray that hit nothing counts as free (clipped to each link's domain)
DEFAULT_DEPTH_NOISE = 0.002  # relative sigma assumed when a session does not state its cameras' noise


@dataclass
class LabelSettings:
    hit_rays_per_image: int = 1500
    miss_rays_per_image: int = 400
    band_samples: int = 4  # per hit ray, uniform in d +- band
    shell_samples: int = 1  # per hit ray, behind the band
    free_samples: int = 2  # per hit ray, in front of the band
    miss_samples: int = 2  # per ray that hit nothing
    band_sigmas: float = 2.5  # band half-width in noise sigmas ...
    band_min: float = 0.004  # ... but at least this many metres
    shell: float = 0.012  # m of occupied shell behind the band
    workspace_margin: float = 0.03  # m added around the measured surface's bounds


@dataclass
class TrainingData:
    """Labelled points of one or more sessions, base frame, metres.

    ``q`` (C, dof) are the configurations; every point row refers to one by ``config``.
    """

    q: np.ndarray  # (C, dof) rad
    points: np.ndarray  # (M, 3) float32
    occupied: np.ndarray  # (M,) float32, 1 occupied, 0 free
    config: np.ndarray  # (M,) int32
    surface: np.ndarray  # (S, 3) float32 measured surface points
    surface_config: np.ndarray  # (S,) int32
    workspace_lo: np.ndarray  # (3,)
    workspace_hi: np.ndarray  # (3,)
    # Every ray's stretch seen free: origin + t * direction for t in [free_start, free_end].
    ray_config: np.ndarray | None = None  # (R,) int32
    ray_origin: np.ndarray | None = None  # (R, 3)
    ray_direction: np.ndarray | None = None  # (R, 3), z component 1 in the camera frame
    ray_free_start: np.ndarray | None = None  # (R,)
    ray_free_end: np.ndarray | None = None  # (R,)


def check_depth_sessions(sessions: list[Session]) -> None:
    """Every session has cameras with poses and depth images; InputError naming the first that lacks one."""
    if not sessions:
        raise InputError("no session given.")
    first = sessions[0]
    for session in sessions:
        if session.joint_names != first.joint_names:
            raise InputError(f"{session.path}: its joints ({', '.join(session.joint_names)}) differ from those of "
                             f"{first.path} ({', '.join(first.joint_names)}).")
        if not session.cameras:
            raise InputError(f"{session.path}: the session has no cameras, so there are no depth images to learn from.")
        if not session.pose_ids:
            raise InputError(f"{session.path}/joints.csv: the session has no poses.")
        for name, camera in session.cameras.items():
            if camera.base_T_camera is None:
                raise InputError(f"{session.path}/session.json: camera {name!r} has no pose (base_T_camera is null); "
                                 f"calibrate the cameras first.")
            depth = session.image_path(name, session.pose_ids[0], "depth")
            if not depth.is_file():
                raise InputError(f"{depth}: depth image missing; the self-model learns from depth images.")


def _ray_box(origin: np.ndarray, directions: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Entry and exit parameters (n,) of rays origin + t * direction through a box; exit < entry: missed."""
    with np.errstate(divide="ignore", invalid="ignore"):
        inverse = 1.0 / directions
        t0 = (lo - origin) * inverse
        t1 = (hi - origin) * inverse
    near = np.nanmax(np.minimum(t0, t1), axis=1)
    far = np.nanmin(np.maximum(t0, t1), axis=1)
    return np.maximum(near, 0.0), far


def pixel_rays(K: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """(n,) integer pixel columns and rows -> (n, 3) directions in the optical frame with z = 1."""
    inverse = np.linalg.inv(K)
    pixels = np.stack([u, v, np.ones_like(u)], axis=1).astype(float)
    return pixels @ inverse.T


def depth_training_data(sessions: list[Session], settings: LabelSettings, rng: np.random.Generator,
                        progress=None) -> TrainingData:
    """Labelled points from every pose and camera of ``sessions`` (see the module docstring)."""
    check_depth_sessions(sessions)
    rays = []  # per image: config, origin (3,), directions (n, 3) base frame, depth (n,), sigma (n,)
    q_all = []
    total = sum(len(s.pose_ids) for s in sessions)
    done = 0
    for session in sessions:
        for row, pose in enumerate(session.pose_ids):
            config = len(q_all)
            q_all.append(session.q[row])
            images = {name: session.image(name, pose, "depth") for name in session.cameras}
            for name, camera in session.cameras.items():
                depth = images[name]
                height, width = depth.shape
                flat = depth.ravel()
                hit = np.flatnonzero(flat > 0)
                miss = np.flatnonzero(flat <= 0)
                hit = rng.choice(hit, min(settings.hit_rays_per_image, hit.size), replace=False) if hit.size else hit
                miss = rng.choice(miss, min(settings.miss_rays_per_image, miss.size), replace=False) if miss.size else miss
                chosen = np.concatenate([hit, miss])
                u, v = chosen % width, chosen // width
                directions = pixel_rays(camera.info.K, u, v) @ camera.base_T_camera[:3, :3].T
                noise = camera.depth_noise if camera.depth_noise is not None else DEFAULT_DEPTH_NOISE
                d = flat[chosen].astype(float)
                band = np.maximum(settings.band_sigmas * noise * d, settings.band_min)
                shell_end = _shell_ends(camera.base_T_camera[:3, 3], directions, d, band, settings.shell, name,
                                        session, images)
                rays.append((config, camera.base_T_camera[:3, 3].copy(), directions, d, noise * d, shell_end))
            done += 1
            if progress is not None:
                progress(done, total)
    surface_list = [origin + d[d > 0, None] * directions[d > 0] for _, origin, directions, d, _, _ in rays]
    surface = np.concatenate(surface_list)
    surface_config = np.concatenate([np.full(int((r[3] > 0).sum()), r[0], dtype=np.int32) for r in rays])
    if len(surface) < 100:
        raise InputError(f"{sessions[0].path}: the depth images show almost nothing ({len(surface)} points); "
                         f"is the arm in view of the cameras?")
    lo = np.percentile(surface, 0.01, axis=0) - settings.workspace_margin
    hi = np.percentile(surface, 99.99, axis=0) + settings.workspace_margin

    points, labels, configs = [], [], []
    free_rays = {"config": [], "origin": [], "direction": [], "start": [], "end": []}
    for config, origin, directions, d, sigma, shell_end in rays:
        entry, exit_ = _ray_box(origin, directions, lo, hi)
        hit = d > 0
        band = np.maximum(settings.band_sigmas * sigma, settings.band_min)
        # A ray is seen free from the camera to the band, outside the workspace too (a missed ray
        # all the way): a link frame's point may lie outside the workspace at some configurations.
        end = np.where(hit, d - band, FAR)
        seen = end > 0
        free_rays["config"].append(np.full(int(seen.sum()), config, dtype=np.int32))
        free_rays["origin"].append(np.broadcast_to(origin, (int(seen.sum()), 3)))
        free_rays["direction"].append(directions[seen])
        free_rays["start"].append(np.zeros(int(seen.sum())))
        free_rays["end"].append(end[seen])
        samples_t, samples_label = [], []
        # Band: equal density both sides of d, labelled by side.
        t = d[hit, None] + band[hit, None] * rng.uniform(-1.0, 1.0, (int(hit.sum()), settings.band_samples))
        samples_t.append((np.flatnonzero(hit), t, (t > d[hit, None]).astype(np.float32)))
        # Shell behind the band: occupied, as far as no other camera saw it free.
        t = d[hit, None] + band[hit, None] + settings.shell * rng.uniform(0.0, 1.0, (int(hit.sum()), settings.shell_samples))
        kept = t <= shell_end[hit, None]
        rows = np.repeat(np.flatnonzero(hit)[:, None], t.shape[1], axis=1)
        samples_t.append((rows[kept], t[kept][:, None], np.ones((int(kept.sum()), 1), dtype=np.float32)))
        # In front of the band, inside the workspace: free.
        start, stop = entry[hit], d[hit] - band[hit]
        keep = stop > start
        t = start[keep, None] + (stop - start)[keep, None] * rng.uniform(0.0, 1.0, (int(keep.sum()), settings.free_samples))
        samples_t.append((np.flatnonzero(hit)[keep], t, np.zeros_like(t, dtype=np.float32)))
        # Rays that hit nothing: free across the workspace.
        miss = ~hit & (exit_ > entry)
        t = entry[miss, None] + (exit_ - entry)[miss, None] * rng.uniform(0.0, 1.0, (int(miss.sum()), settings.miss_samples))
        samples_t.append((np.flatnonzero(miss), t, np.zeros_like(t, dtype=np.float32)))
        for index, t, label in samples_t:
            xyz = origin + t[..., None] * directions[index][:, None, :]
            points.append(xyz.reshape(-1, 3).astype(np.float32))
            labels.append(label.ravel())
            configs.append(np.full(label.size, config, dtype=np.int32))
    points = np.concatenate(points)
    labels = np.concatenate(labels)
    configs = np.concatenate(configs)
    inside = np.all((points >= lo) & (points <= hi), axis=1)
    return TrainingData(np.array(q_all, dtype=float), points[inside], labels[inside], configs[inside],
                        surface.astype(np.float32), surface_config, lo, hi,
                        np.concatenate(free_rays["config"]), np.concatenate(free_rays["origin"]),
                        np.concatenate(free_rays["direction"]), np.concatenate(free_rays["start"]),
                        np.concatenate(free_rays["end"]))


def _shell_ends(origin: np.ndarray, directions: np.ndarray, d: np.ndarray, band: np.ndarray, shell: float, name: str,
                session: Session, images: dict[str, np.ndarray], probes: int = 4) -> np.ndarray:
    """(n,) for each ray of camera ``name``: how far along it (same units as ``d``) its occupied shell
    may reach, d + band + shell unless another camera of the same pose saw a point of the shell in
    front of its own measured surface (by two sigmas of its noise): then up to the last probe before."""
    ends = d + band + shell
    hit = np.flatnonzero(d > 0)
    if not len(hit) or len(images) < 2:
        return ends
    fractions = np.linspace(0.0, 1.0, probes)
    seen_free = np.zeros((len(hit), probes), dtype=bool)
    for other, camera in session.cameras.items():
        if other == name:
            continue
        depth = images[other]
        height, width = depth.shape
        camera_T_base = np.linalg.inv(camera.base_T_camera)
        noise = camera.depth_noise if camera.depth_noise is not None else DEFAULT_DEPTH_NOISE
        for k, fraction in enumerate(fractions):
            t = d[hit] + band[hit] + fraction * shell
            points = origin + t[:, None] * directions[hit]
            local = points @ camera_T_base[:3, :3].T + camera_T_base[:3, 3]
            z = local[:, 2]
            front = z > 1e-3
            u = np.rint(camera.info.K[0, 0] * local[:, 0] / np.where(front, z, 1) + camera.info.K[0, 2]).astype(int)
            v = np.rint(camera.info.K[1, 1] * local[:, 1] / np.where(front, z, 1) + camera.info.K[1, 2]).astype(int)
            inside = front & (u >= 0) & (u < width) & (v >= 0) & (v < height)
            measured = np.zeros(len(points))
            measured[inside] = depth[v[inside], u[inside]]
            seen_free[:, k] |= inside & (measured > 0) & (z < measured * (1.0 - 2.0 * noise))
    first = np.where(seen_free.any(axis=1), np.argmax(seen_free, axis=1), probes)
    limit = np.where(first == 0, d[hit] + band[hit] - 1e-9,
                     d[hit] + band[hit] + fractions[np.maximum(first - 1, 0)] * shell)
    ends[hit] = np.where(first == probes, ends[hit], limit)
    return ends


def never_seen_free(sessions: list[Session], base_T_links: np.ndarray, candidates: list[np.ndarray],
                    settings: LabelSettings, clear_margin: float = 0.01) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Which candidate points no camera ever saw free, at any configuration, in each link's frame.

    ``base_T_links`` (C, L, 4, 4) poses the links at the sessions' configurations (in the order of
    their poses); ``candidates[l]`` (n, 3) are points in link l's frame. A point is seen free by a
    camera when it projects into the image in front of the measured depth (less the label band),
    or onto a pixel that saw nothing. Returns two lists of boolean masks (n,), one per link: never
    seen free, and seen free with ``clear_margin`` m to spare (certainly not part of the link).
    """
    never = [np.ones(len(points), dtype=bool) for points in candidates]
    clear = [np.zeros(len(points), dtype=bool) for points in candidates]
    config = 0
    for session in sessions:
        for pose in session.pose_ids:
            for name, camera in session.cameras.items():
                depth = session.image(name, pose, "depth")
                height, width = depth.shape
                camera_T_base = np.linalg.inv(camera.base_T_camera)
                K = camera.info.K
                noise = camera.depth_noise if camera.depth_noise is not None else DEFAULT_DEPTH_NOISE
                for link, points in enumerate(candidates):
                    camera_T_link = camera_T_base @ base_T_links[config, link]
                    local = points @ camera_T_link[:3, :3].T + camera_T_link[:3, 3]
                    z = local[:, 2]
                    front = z > 1e-3
                    u = np.rint(K[0, 0] * local[:, 0] / np.where(front, z, 1) + K[0, 2]).astype(int)
                    v = np.rint(K[1, 1] * local[:, 1] / np.where(front, z, 1) + K[1, 2]).astype(int)
                    inside = front & (u >= 0) & (u < width) & (v >= 0) & (v < height)
                    measured = np.zeros(len(points))
                    measured[inside] = depth[v[inside], u[inside]]
                    band = np.maximum(settings.band_sigmas * noise * measured, settings.band_min)
                    free = inside & ((measured <= 0) | (z < measured - band))
                    never[link] &= ~free
                    clear[link] |= inside & ((measured <= 0) | (z < measured - band - clear_margin))
            config += 1
    return never, clear
