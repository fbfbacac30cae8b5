"""Labelled points from depth images alone: what each camera saw free and what it saw occupied.

Every depth pixel is a ray from the camera centre. A pixel (u, v) with depth z back-projects to
``z * K^-1 [u, v, 1]`` in the camera's optical frame (OpenCV convention, integer pixel = pixel
centre; see docs/session-format.md) and to the base frame with the camera's ``base_T_camera``.
Along a ray that hit the arm at measured depth d (noise sigma from the camera's noise law):

- a band ``d +- band`` gets samples at EQUAL density on both sides, labelled by the side they fall
  on (occupied behind d, free in front), so the learned boundary sits at the median of the noise
  instead of a sigma in front of the surface;
- a thin shell behind the band is occupied;
- the segment from where the ray enters the workspace to ``d - band`` is free;
- what lies further behind is unknown and gets no label.

Real depth images are not that clean, and the labels say only what a pixel can vouch for:

- a pixel with no reading (0) is unknown: a hole, a stereo shadow, a dark or shiny surface, or
  nothing in range. Only a camera whose session says its zeros are free (``no_depth: free``, the
  simulator's ideal cameras in empty space) makes such a ray free across the workspace;
- a pixel on a depth edge (a neighbour more than ``edge_jump`` or ``edge_sigmas`` sigma away) may
  be a flying pixel between foreground and background: it labels nothing occupied, and its ray is
  free only up to the nearest depth among its neighbours (less the band);
- a hit that cannot be the arm is background (a table, a wall): free up to it, nothing occupied.
  It cannot be the arm when it lies below the session's mount plane (the surface the base stands
  on, plus the band) or, given an ``arm_region``, outside every link's domain at that pose.

Segmentation images are never read here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from capture.session import Session
from rigs.errors import InputError

FAR = 100.0  # m: how far a ray that hit nothing counts as free (clipped to each link's domain)
ArmRegion = Callable[[np.ndarray, int], np.ndarray]  # (points (n, 3) base frame, configuration) -> (n,) bool


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
    no_depth: str | None = None  # what a 0 pixel means: None as each camera says; "free" or "unknown" for all
    edge_pixels: str = "drop"  # "drop": edge pixels label nothing occupied (module docstring); "keep": as any
    edge_jump: float = 0.03  # m: a neighbour this much nearer or farther makes a pixel an edge pixel ...
    edge_sigmas: float = 4.0  # ... or this many noise sigmas, whichever is larger


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
        unknown = [name for name, camera in session.cameras.items() if camera.base_T_camera is None]
        if unknown:
            names = ", ".join(repr(n) for n in unknown)
            raise InputError(f"{session.path}/session.json: camera {names} has no pose (base_T_camera is null); find "
                             f"the camera poses from the board on the flange with `selfcal calibrate {session.path} "
                             f"--out CAL` and train with `--cameras CAL`, or import the recording with /tf_static "
                             f"(bags) or pose.yaml (image folders).")
        depths = [name for name in session.cameras
                  if any(session.has_image(name, pose, "depth") for pose in session.pose_ids)]
        if not depths:
            raise InputError(f"{session.path}/cameras: no depth images (<pose>_depth.png); the self-model learns from "
                             f"depth images.")


def edge_pixels(depth: np.ndarray, sigma: np.ndarray, settings: LabelSettings) -> tuple[np.ndarray, np.ndarray]:
    """Edge pixels (H, W) bool and the depth (H, W) up to which each pixel's ray is free (module docstring)."""
    from rigs.depth_model import neighbourhood_range

    low, high = neighbourhood_range(depth)
    threshold = np.maximum(settings.edge_jump, settings.edge_sigmas * sigma)
    edge = (depth > 0) & (high - low > threshold)
    if settings.edge_pixels == "keep":
        return np.zeros_like(edge), depth
    return edge, np.where(edge, low, depth)


def _zeros_free(camera, settings: LabelSettings) -> bool:
    return (settings.no_depth or camera.no_depth) == "free"


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
                        progress=None, arm_region: ArmRegion | None = None) -> TrainingData:
    """Labelled points from every pose and camera of ``sessions`` (see the module docstring).

    ``arm_region(points, config)``: which base-frame points (n, 3) can be the arm at configuration
    ``config`` (the index into the result's ``q``); None: any point above the mount plane.
    """
    check_depth_sessions(sessions)
    if settings.no_depth not in (None, "free", "unknown"):
        raise InputError(f"no_depth must be 'free' or 'unknown', got {settings.no_depth!r}.")
    if settings.edge_pixels not in ("drop", "keep"):
        raise InputError(f"edge_pixels must be 'drop' or 'keep', got {settings.edge_pixels!r}.")
    rays = []  # per image: config, origin (3,), directions (n, 3) base frame, depth (n,), sigma (n,), free depth, arm
    q_all = []
    total = sum(len(s.pose_ids) for s in sessions)
    done = 0
    for session in sessions:
        mount = session.mount_plane_z
        for row, pose in enumerate(session.pose_ids):
            config = len(q_all)
            q_all.append(session.q[row])
            for name, camera in session.cameras.items():
                if not session.has_image(name, pose, "depth"):
                    continue  # an imported recording may lack a camera's frame at a pose
                depth = session.image(name, pose, "depth")
                height, width = depth.shape
                edge, free_depth = edge_pixels(depth, camera.depth_sigma(depth), settings)
                flat = depth.ravel()
                hit = np.flatnonzero(flat > 0)
                miss = np.flatnonzero(flat <= 0) if _zeros_free(camera, settings) else np.zeros(0, dtype=int)
                hit = rng.choice(hit, min(settings.hit_rays_per_image, hit.size), replace=False) if hit.size else hit
                miss = rng.choice(miss, min(settings.miss_rays_per_image, miss.size), replace=False) if miss.size else miss
                chosen = np.concatenate([hit, miss])
                u, v = chosen % width, chosen // width
                directions = pixel_rays(camera.info.K, u, v) @ camera.base_T_camera[:3, :3].T
                origin = camera.base_T_camera[:3, 3].copy()
                d = flat[chosen].astype(float)
                sigma = camera.depth_sigma(d)
                band = np.maximum(settings.band_sigmas * sigma, settings.band_min)
                points = origin + d[:, None] * directions
                arm = (d > 0) & ~edge.ravel()[chosen]
                if mount is not None:
                    arm &= points[:, 2] > mount + band
                if arm_region is not None and arm.any():
                    arm[arm] = arm_region(points[arm], config)
                free = free_depth.ravel()[chosen].astype(float)
                rays.append((config, origin, directions, d, sigma, free, camera.depth_sigma(free), arm))
            done += 1
            if progress is not None:
                progress(done, total)
    surface = np.concatenate([origin + d[arm, None] * directions[arm] for _, origin, directions, d, *_, arm in rays])
    surface_config = np.concatenate([np.full(int(r[-1].sum()), r[0], dtype=np.int32) for r in rays])
    if len(surface) < 100:
        raise InputError(f"{sessions[0].path}: the depth images show almost nothing of the arm ({len(surface)} points); "
                         f"is the arm in view of the cameras, and are the camera poses right?")
    lo = np.percentile(surface, 0.01, axis=0) - settings.workspace_margin
    hi = np.percentile(surface, 99.99, axis=0) + settings.workspace_margin
    mounts = [s.mount_plane_z for s in sessions if s.mount_plane_z is not None]
    if mounts:
        lo[2] = max(lo[2], min(mounts))  # nothing below the surface the arm stands on is the arm

    points, labels, configs = [], [], []
    free_rays = {"config": [], "origin": [], "direction": [], "start": [], "end": []}
    for config, origin, directions, d, sigma, free_depth, free_sigma, arm in rays:
        entry, exit_ = _ray_box(origin, directions, lo, hi)
        hit = d > 0
        band = np.maximum(settings.band_sigmas * sigma, settings.band_min)
        free_band = np.maximum(settings.band_sigmas * free_sigma, settings.band_min)
        # A ray is seen free from the camera to the band, outside the workspace too (a missed ray
        # all the way): a link frame's point may lie outside the workspace at some configurations.
        end = np.where(hit, free_depth - free_band, FAR)
        seen = end > 0
        free_rays["config"].append(np.full(int(seen.sum()), config, dtype=np.int32))
        free_rays["origin"].append(np.broadcast_to(origin, (int(seen.sum()), 3)))
        free_rays["direction"].append(directions[seen])
        free_rays["start"].append(np.zeros(int(seen.sum())))
        free_rays["end"].append(end[seen])
        samples_t = []
        # Band: equal density both sides of d, labelled by side (the arm's hits only).
        t = d[arm, None] + band[arm, None] * rng.uniform(-1.0, 1.0, (int(arm.sum()), settings.band_samples))
        samples_t.append((np.flatnonzero(arm), t, (t > d[arm, None]).astype(np.float32)))
        # Shell behind the band: occupied.
        t = d[arm, None] + band[arm, None] + settings.shell * rng.uniform(0.0, 1.0, (int(arm.sum()), settings.shell_samples))
        samples_t.append((np.flatnonzero(arm), t, np.ones_like(t, dtype=np.float32)))
        # In front of the band (of the nearest neighbour on an edge), inside the workspace: free.
        start, stop = entry[hit], (free_depth - free_band)[hit]
        keep = stop > start
        t = start[keep, None] + (stop - start)[keep, None] * rng.uniform(0.0, 1.0, (int(keep.sum()), settings.free_samples))
        samples_t.append((np.flatnonzero(hit)[keep], t, np.zeros_like(t, dtype=np.float32)))
        # Rays that hit nothing, from cameras whose zeros are free: free across the workspace.
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


def never_seen_free(sessions: list[Session], base_T_links: np.ndarray, candidates: list[np.ndarray],
                    settings: LabelSettings, clear_margin: float = 0.01) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Which candidate points no camera ever saw free, at any configuration, in each link's frame.

    ``base_T_links`` (C, L, 4, 4) poses the links at the sessions' configurations (in the order of
    their poses); ``candidates[l]`` (n, 3) are points in link l's frame. A point is seen free by a
    camera when it projects into the image in front of the measured depth (less the label band; on
    a depth edge, of the nearest neighbour's), or onto a pixel that saw nothing when the camera's
    zeros are free (a pixel with no reading vouches for nothing otherwise). Returns two lists of boolean masks (n,), one per link: never
    seen free, and seen free with ``clear_margin`` m to spare (certainly not part of the link).
    """
    never = [np.ones(len(points), dtype=bool) for points in candidates]
    clear = [np.zeros(len(points), dtype=bool) for points in candidates]
    config = 0
    for session in sessions:
        for pose in session.pose_ids:
            for name, camera in session.cameras.items():
                if not session.has_image(name, pose, "depth"):
                    continue
                depth = session.image(name, pose, "depth")
                height, width = depth.shape
                _, free_depth = edge_pixels(depth, camera.depth_sigma(depth), settings)
                zeros_free = _zeros_free(camera, settings)
                camera_T_base = np.linalg.inv(camera.base_T_camera)
                K = camera.info.K
                for link, points in enumerate(candidates):
                    camera_T_link = camera_T_base @ base_T_links[config, link]
                    local = points @ camera_T_link[:3, :3].T + camera_T_link[:3, 3]
                    z = local[:, 2]
                    front = z > 1e-3
                    u = np.rint(K[0, 0] * local[:, 0] / np.where(front, z, 1) + K[0, 2]).astype(int)
                    v = np.rint(K[1, 1] * local[:, 1] / np.where(front, z, 1) + K[1, 2]).astype(int)
                    inside = front & (u >= 0) & (u < width) & (v >= 0) & (v < height)
                    measured = np.zeros(len(points))
                    measured[inside] = free_depth[v[inside], u[inside]]
                    band = np.maximum(settings.band_sigmas * camera.depth_sigma(measured), settings.band_min)
                    empty = (measured <= 0) if zeros_free else np.zeros(len(points), dtype=bool)
                    seen = measured > 0
                    free = inside & (empty | (seen & (z < measured - band)))
                    never[link] &= ~free
                    clear[link] |= inside & (empty | (seen & (z < measured - band - clear_margin)))
            config += 1
    return never, clear
