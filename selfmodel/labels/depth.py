"""Labelled points from depth images alone: what each camera saw free and what it saw occupied.

Every depth pixel is a ray from the camera centre. A pixel (u, v) with depth z back-projects to
``z * K^-1 [u, v, 1]`` in the camera's optical frame (OpenCV convention, integer pixel = pixel
centre; see docs/session-format.md) and to the base frame with the camera's ``base_T_camera``.
Along a ray that hit the arm at measured depth d (noise sigma from the camera's noise law):

- a band ``d +- side`` gets samples at EQUAL density on both sides, labelled by the side they fall
  on (occupied behind d, free in front), so the learned boundary sits at the median of the noise
  instead of a sigma in front of the surface. ``side`` (1.5 sigma) is narrower than the free
  clearance ``band`` (2.5 sigma): a reading says where a surface is, not how thick the body behind
  it is, and on the xArm6 seen from 1.5 m (sigma about 7 mm) a band as wide as the clearance made
  the 3.5 mm board on the flange and the unseen underside of the base centimetres thick;
- optionally (``shell_samples`` > 0; none by default) a thin shell behind the clearance is occupied,
  unless another camera of the same pose saw that spot free. The shell is an assumption (matter goes
  on behind a surface) that thin parts, grazing rays and unseen undersides break: with a 12 mm shell,
  learned surface 1-3 cm behind such readings made up 2.0 of the xArm6 model's 3.1 mm mean distance
  to the true surface. The insides of
  bodies come from the never-seen-free prior instead (selfmodel.learn.trainer);
- the segment from where the ray enters the workspace to ``d - band`` is free;
- what lies further behind is unknown and gets no label.

Real depth images are not that clean, and the labels say only what a pixel can vouch for:

- a pixel with no reading (0) is a hole (a stereo shadow, a dark or shiny surface, a grazing
  angle: unknown behind it) or nothing in range (free up to the camera's far range). Each camera's
  ``no_depth`` (the session's, or the trainer's per camera) says which (rigs.no_return): ``unknown``
  every zero vouches for nothing; ``free`` every zero is free up to the far range (the simulator's
  ideal cameras in empty space); ``auto`` zero regions that reach the image border or are larger
  than a stated share of the image are free up to the far range, small holes unknown, and a zero
  within a few pixels of a reading is free only in front of that reading (it may be a grazing hole
  on the silhouette: no free ray through the rim). Space that no camera ever saw free becomes
  matter (selfmodel.learn.trainer), so treating an empty background as unknown grows shells;
- a pixel on a depth edge whose depth lies between a nearer and a farther neighbour, each more
  than ``edge_jump`` (or ``edge_sigmas`` sigma) away, may be a flying pixel mixing foreground and
  background: it labels nothing occupied, and its ray is free only up to the nearest depth among
  its neighbours (less the band). The foreground's and the background's own pixels along the
  edge are kept. Where the background gives no reading, a pixel with a nearer neighbour a jump
  away and a neighbour with no reading is such a pixel too: it reads behind the silhouette, blended
  with a background the image does not hold;
- a hit that cannot be the arm is background (a table, a wall): free up to it, nothing occupied.
  It cannot be the arm when it lies below the session's mount plane (the surface the base stands
  on, plus the band) or, given an ``arm_region``, outside every link's domain at that pose.

Segmentation images are never read here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import ndimage

from capture.session import Session
from rigs.depth_model import neighbourhood_range
from rigs.errors import InputError, setting
from rigs.no_return import NO_DEPTH_MODES, RIM_PX, no_return_reach, no_return_regions

FAR = 100.0  # m: the far range of a simulated session's ideal cameras that did not state theirs
TABLE_SIGMAS = 4.0  # a reading this many (vertical) noise sigmas above the mount plane is still the table


@dataclass
class LabelSettings:
    hit_rays_per_image: int = 1500  # rays that hit the arm
    miss_rays_per_image: int = 400  # rays that read nothing, from cameras whose zeros are free
    background_rays_per_image: int = 500  # rays that hit something else (or a depth edge): free space only
    band_samples: int = 4  # per hit ray, uniform in d +- band
    shell_samples: int = 0  # per hit ray, behind the clearance (0: none; the never-seen-free prior fills bodies)
    free_samples: int = 2  # per hit ray, in front of the band
    miss_samples: int = 2  # per ray that hit nothing
    band_sigmas: float = 2.5  # free space ends this many noise sigmas in front of a reading ...
    band_min: float = 0.004  # ... but at least this many metres
    side_sigmas: float = 1.5  # half-width of the band labelled by side, in noise sigmas (at least band_min)
    shell: float = 0.012  # m of occupied shell behind the clearance (shell_samples per hit ray)
    workspace_margin: float = 0.03  # m added around the measured surface's bounds
    # What a 0 pixel means (rigs.no_return): None as each camera says; "auto", "free" or "unknown"
    # for all cameras; or {camera: mode} (key "*": every camera not named; else as they say).
    no_depth: str | dict | None = None
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


@dataclass
class ArmRegion:
    """Where the arm's matter can be at each configuration: per link a box ``lo``, ``hi`` (L, 3) in
    its own frame, posed by ``base_T_links`` (C, L, 4, 4) (the description's kinematics)."""

    base_T_links: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    def __post_init__(self) -> None:
        self.links_T_base = np.linalg.inv(self.base_T_links)

    def contains(self, points: np.ndarray, config: int) -> np.ndarray:
        """(n,) whether base-frame points (n, 3) lie in some link's box at ``config``."""
        poses = self.links_T_base[config]
        local = np.einsum("lij,nj->lni", poses[:, :3, :3], points) + poses[:, None, :3, 3]
        return np.any(np.all((local >= self.lo[:, None]) & (local <= self.hi[:, None]), axis=2), axis=0)

    def pixel_mask(self, K: np.ndarray, camera_T_base: np.ndarray, width: int, height: int, config: int) -> np.ndarray:
        """(H, W) pixels whose ray may meet a link's box: the union of each box's projected bounding rectangle."""
        mask = np.zeros((height, width), dtype=bool)
        corners = np.array([[x, y, z] for x in (0, 1) for y in (0, 1) for z in (0, 1)], dtype=float)
        for link in range(len(self.lo)):
            local = self.lo[link] + corners * (self.hi[link] - self.lo[link])
            camera_T_link = camera_T_base @ self.base_T_links[config, link]
            points = local @ camera_T_link[:3, :3].T + camera_T_link[:3, 3]
            if np.any(points[:, 2] <= 1e-3):
                return np.ones((height, width), dtype=bool)  # the box reaches behind the camera
            uv = (points[:, :2] / points[:, 2:]) * np.diag(K)[:2] + K[:2, 2]
            u0, v0 = np.floor(uv.min(axis=0)).astype(int)
            u1, v1 = np.ceil(uv.max(axis=0)).astype(int)
            mask[max(v0, 0):max(min(v1 + 1, height), 0), max(u0, 0):max(min(u1 + 1, width), 0)] = True
        return mask


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
            what = f"camera {names} has no pose" if len(unknown) == 1 else f"cameras {names} have no pose"
            raise InputError(f"{session.path}/session.json: {what} (base_T_camera is null); find "
                             f"the camera poses from the board on the flange with `selfcal calibrate {session.path} "
                             f"--out CAL` and train with `--cameras CAL`, or import the recording with /tf_static "
                             f"(bags) or pose.yaml (image folders).")
        depths = [name for name in session.cameras
                  if any(session.has_image(name, pose, "depth") for pose in session.pose_ids)]
        if not depths:
            raise InputError(f"{session.path}/cameras: no depth images (<pose>_depth.png); the self-model learns from "
                             f"depth images.")


@dataclass
class Reading:
    """What one depth image vouches for, per pixel (H, W): ``edge`` (a possible flying pixel),
    ``table`` (a reading of the mount plane), ``zero_free`` (a pixel with no reading that means
    nothing in range), and ``free_end``: the depth (m along the optical axis) up to which the
    pixel's ray is free (band subtracted; 0 where nothing is known)."""

    edge: np.ndarray
    table: np.ndarray
    free_end: np.ndarray
    zero_free: np.ndarray | None = None


def no_depth_mode(name: str, camera, settings: LabelSettings) -> str:
    """What camera ``name``'s zeros mean: the settings' word for it (or for all), else the camera's."""
    wanted = settings.no_depth
    if isinstance(wanted, dict):
        wanted = wanted.get(name, wanted.get("*"))  # "*": every camera not named
    return wanted or camera.no_depth or "unknown"


def far_range(session: Session, name: str, cache: dict | None = None) -> float:
    """How far (m along the optical axis) a zero of camera ``name`` that means nothing in range
    vouches free space: the session's ``far_range_m``; for a simulated session that states none,
    FAR (its ideal cameras saw empty space); else the largest reading in the session's images of
    that camera (nothing nearer than the farthest reading it ever gave can have been out of range)."""
    camera = session.cameras[name]
    if camera.far_range_m is not None:
        return float(camera.far_range_m)
    if (session.manifest.get("source") or {}).get("kind") == "simulated":
        return FAR
    key = (str(session.path), name)
    if cache is not None and key in cache:
        return cache[key]
    largest = 0.0
    for pose in session.pose_ids:
        if session.has_image(name, pose, "depth"):
            largest = max(largest, float(np.max(session.image(name, pose, "depth"), initial=0.0)))
    if cache is not None:
        cache[key] = largest
    return largest


def read_depth(depth: np.ndarray, camera, settings: LabelSettings, mount: float | None,
               arm: Callable[[np.ndarray], np.ndarray] | None = None, mode: str | None = None,
               far: float = FAR) -> Reading:
    """The module docstring's rules for one image (H, W) m of ``camera`` (a SessionCamera).

    ``arm``: base-frame points (n, 3) -> (n,) whether the arm can be there at this pose. A reading
    near the mount plane there is the arm's own (the base stands on the plane: the lowest
    centimetres of its sides read as high as the plane's noise band), not the plane's.
    ``mode``: what the image's zeros mean (rigs.no_return; None: the camera's ``no_depth``), and
    ``far`` (m) how far a zero that means nothing in range vouches free space."""
    mode = mode or getattr(camera, "no_depth", None) or "unknown"
    valid = depth > 0
    sigma = camera.depth_sigma(depth)
    low, high = neighbourhood_range(depth)
    threshold = np.maximum(settings.edge_jump, settings.edge_sigmas * sigma)
    # Between a nearer and a farther neighbour, both a jump away: the foreground's and the
    # background's own pixels along an edge stay, the mixed ones between them go. Where the
    # background reads nothing, a neighbour with no reading stands for the farther one: a pixel a
    # jump behind its nearer neighbour beside an empty one is blended with a background the image
    # does not hold (on a hole in a real background it costs one pixel of labels, nothing else).
    beside_empty = ndimage.maximum_filter(~valid, size=3, mode="nearest")
    edge = valid & (depth - low > threshold) & ((high - depth > threshold) | beside_empty)
    if settings.edge_pixels == "keep":
        edge = np.zeros_like(valid)
    reach = np.where(edge, low, depth)
    free_end = np.where(valid, reach - np.maximum(settings.band_sigmas * camera.depth_sigma(reach), settings.band_min),
                        0.0)
    zero_free = np.zeros_like(valid)
    if mode != "unknown" and not valid.all():
        zero_free = no_return_regions(depth).free(mode)
        # On the rim, free only in front of the nearest reading less its band (as a flying pixel's ray).
        nearest = ndimage.minimum_filter(np.where(valid, depth, np.inf), size=2 * RIM_PX + 1, mode="nearest")
        nearest = np.where(np.isfinite(nearest), nearest, 0.0)
        margin = np.maximum(settings.band_sigmas * camera.depth_sigma(nearest), settings.band_min)
        ends = no_return_reach(depth, zero_free, far, RIM_PX if mode == "auto" else None, margin)
        zero_free &= ends > 0
        free_end = np.where(zero_free, ends, free_end)
    table = np.zeros_like(valid)
    if mount is not None:
        # A reading of the surface the arm stands on is the plane itself: free down to the plane.
        height, width = depth.shape
        v, u = np.mgrid[0:height, 0:width]
        rays = pixel_rays(camera.info.K, u.ravel(), v.ravel()) @ camera.base_T_camera[:3, :3].T
        down = rays[:, 2].reshape(height, width)
        origin_z = camera.base_T_camera[2, 3]
        hit_z = origin_z + depth * down
        band = np.maximum(TABLE_SIGMAS * sigma * np.abs(down), settings.band_min)
        table = valid & ~edge & (hit_z < mount + band) & (down < 0)
        if arm is not None and table.any():
            index = np.flatnonzero(table)
            points = camera.base_T_camera[:3, 3] + depth.ravel()[index, None] * rays[index]
            table.ravel()[index[arm(points)]] = False
        with np.errstate(divide="ignore", invalid="ignore"):
            plane = (mount - origin_z) / down
        free_end = np.where(table, plane, free_end)
    return Reading(edge, table, np.maximum(free_end, 0.0), zero_free)


def check_no_depth(settings: LabelSettings, sessions: list[Session]) -> None:
    """The settings' no-depth word is a mode, and names only cameras the sessions have."""
    wanted = settings.no_depth
    if wanted is None:
        return
    modes = wanted.values() if isinstance(wanted, dict) else [wanted]
    for mode in modes:
        if mode not in NO_DEPTH_MODES:
            raise InputError(f"{setting('no_depth')} must be one of {', '.join(NO_DEPTH_MODES)}, got {mode!r}.")
    if isinstance(wanted, dict):
        names = {name for session in sessions for name in session.cameras}
        unknown = sorted(set(wanted) - names - {"*"})
        if unknown:
            raise InputError(f"{setting('no_depth')} {unknown[0]}=...: the sessions have no camera {unknown[0]!r} "
                             f"(they have {', '.join(sorted(names))}).")


def no_depth_summary(sessions: list[Session], settings: LabelSettings) -> dict[str, dict]:
    """Per camera: what its zeros meant in training (``mode``), who said so, and the far range (m)
    up to which a zero that means nothing in range was free."""
    out: dict[str, dict] = {}
    cache: dict = {}
    for session in sessions:
        for name, camera in session.cameras.items():
            if name in out:
                continue
            mode = no_depth_mode(name, camera, settings)
            wanted = settings.no_depth
            stated = wanted.get(name, wanted.get("*")) if isinstance(wanted, dict) else wanted
            out[name] = {"mode": mode, "source": "--no-depth" if stated else "session",
                         "far_range_m": None if mode == "unknown" else round(far_range(session, name, cache), 4)}
    return out


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


def pixel_of(local: np.ndarray, K: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Points (N, 3) in a camera's frame (m) -> the pixel each falls on (u, v: (N,) int, rounded) and
    whether it is in front of the camera and inside the image ((N,) bool; u and v mean nothing elsewhere)."""
    z = local[:, 2]
    front = z > 1e-3
    u = np.rint(K[0, 0] * local[:, 0] / np.where(front, z, 1) + K[0, 2]).astype(int)
    v = np.rint(K[1, 1] * local[:, 1] / np.where(front, z, 1) + K[1, 2]).astype(int)
    return u, v, front & (u >= 0) & (u < width) & (v >= 0) & (v < height)


def depth_training_data(sessions: list[Session], settings: LabelSettings, rng: np.random.Generator,
                        progress=None, arm_region: ArmRegion | None = None) -> TrainingData:
    """Labelled points from every pose and camera of ``sessions`` (see the module docstring).

    ``arm_region``: where the arm can be at each configuration (the index into the result's ``q``);
    None: any reading above the mount plane.
    """
    check_depth_sessions(sessions)
    check_no_depth(settings, sessions)
    far_cache: dict = {}
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
            # An imported recording may lack a camera's frame at a pose.
            images = {name: session.image(name, pose, "depth") for name in session.cameras
                      if session.has_image(name, pose, "depth")}
            arm = None if arm_region is None else (lambda points, config=config: arm_region.contains(points, config))
            readings = {name: read_depth(depth, session.cameras[name], settings, mount, arm,
                                         no_depth_mode(name, session.cameras[name], settings),
                                         far_range(session, name, far_cache))
                        for name, depth in images.items()}
            for name, camera in session.cameras.items():
                if name not in images:
                    continue
                depth = images[name]
                height, width = depth.shape
                reading = readings[name]
                origin = camera.base_T_camera[:3, 3].copy()
                rotation = camera.base_T_camera[:3, :3]
                flat = depth.ravel()
                valid = flat > 0
                # Which readings are the arm: not an edge, not the table, inside the region.
                candidate = valid & ~reading.edge.ravel() & ~reading.table.ravel()
                if arm_region is not None:
                    candidate &= arm_region.pixel_mask(camera.info.K, np.linalg.inv(camera.base_T_camera), width,
                                                       height, config).ravel()
                index = np.flatnonzero(candidate)
                if arm_region is not None and len(index):
                    points = origin + flat[index, None] * (pixel_rays(camera.info.K, index % width, index // width)
                                                           @ rotation.T)
                    index = index[arm_region.contains(points, config)]
                is_arm = np.zeros(flat.size, dtype=bool)
                is_arm[index] = True
                arm_pixels = np.flatnonzero(is_arm)
                other_pixels = np.flatnonzero(valid & ~is_arm)
                miss = np.flatnonzero(reading.zero_free.ravel())
                picks = [rng.choice(pool, min(count, pool.size), replace=False) if pool.size else pool
                         for pool, count in ((arm_pixels, settings.hit_rays_per_image),
                                             (other_pixels, settings.background_rays_per_image),
                                             (miss, settings.miss_rays_per_image))]
                chosen = np.concatenate(picks)
                u, v = chosen % width, chosen // width
                directions = pixel_rays(camera.info.K, u, v) @ rotation.T
                d = flat[chosen].astype(float)
                sigma = camera.depth_sigma(d)
                arm = is_arm[chosen]
                band = np.maximum(settings.band_sigmas * sigma, settings.band_min)
                shell_end = _shell_ends(origin, directions, d, band, settings.shell, arm, name, session, readings)
                rays.append((config, origin, directions, d, sigma, reading.free_end.ravel()[chosen].astype(float),
                             shell_end, arm))
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
    for config, origin, directions, d, sigma, free_end, shell_end, arm in rays:
        entry, exit_ = _ray_box(origin, directions, lo, hi)
        hit = d > 0
        band = np.maximum(settings.band_sigmas * sigma, settings.band_min)
        # A ray is seen free from the camera to the band, outside the workspace too (a missed ray
        # up to the far range, or to the rim's reading): a link frame's point may lie outside the
        # workspace at some configurations.
        end = free_end
        seen = end > 0
        free_rays["config"].append(np.full(int(seen.sum()), config, dtype=np.int32))
        free_rays["origin"].append(np.broadcast_to(origin, (int(seen.sum()), 3)))
        free_rays["direction"].append(directions[seen])
        free_rays["start"].append(np.zeros(int(seen.sum())))
        free_rays["end"].append(end[seen])
        samples_t = []
        # Band: equal density both sides of d, labelled by side (the arm's hits only). Narrower than
        # the clearance: what lies behind a reading is matter only on the assumption that the body
        # goes on, which a board, a thin edge or a grazing ray breaks; and between side and clearance
        # nothing is labelled, so the band's two halves stay equal and the boundary unbiased.
        side = np.minimum(np.maximum(settings.side_sigmas * sigma, settings.band_min), band)
        t = d[arm, None] + side[arm, None] * rng.uniform(-1.0, 1.0, (int(arm.sum()), settings.band_samples))
        samples_t.append((np.flatnonzero(arm), t, (t > d[arm, None]).astype(np.float32)))
        # Shell behind the band: occupied, as far as no other camera saw it free.
        t = d[arm, None] + band[arm, None] + settings.shell * rng.uniform(0.0, 1.0, (int(arm.sum()), settings.shell_samples))
        kept = t <= shell_end[arm, None]
        rows = np.repeat(np.flatnonzero(arm)[:, None], t.shape[1], axis=1)
        samples_t.append((rows[kept], t[kept][:, None], np.ones((int(kept.sum()), 1), dtype=np.float32)))
        # In front of the band (of the nearest neighbour on an edge), inside the workspace: free.
        start, stop = entry[hit], free_end[hit]
        keep = stop > start
        t = start[keep, None] + (stop - start)[keep, None] * rng.uniform(0.0, 1.0, (int(keep.sum()), settings.free_samples))
        samples_t.append((np.flatnonzero(hit)[keep], t, np.zeros_like(t, dtype=np.float32)))
        # Background (the table, a wall, an edge's far side): free right up to where its freedom
        # ends, at the band's density, so that the space just above a table is as well known as
        # the space just in front of the arm.
        other = hit & ~arm & (free_end > 0)
        t = free_end[other, None] - band[other, None] * rng.uniform(0.0, 1.0, (int(other.sum()), settings.band_samples // 2))
        samples_t.append((np.flatnonzero(other), t, np.zeros_like(t, dtype=np.float32)))
        # Rays that read nothing where that means nothing in range: free across the workspace, up
        # to the far range (on the rim: up to the nearest reading).
        stop = np.minimum(exit_, free_end)
        miss = ~hit & (stop > entry)
        t = entry[miss, None] + (stop - entry)[miss, None] * rng.uniform(0.0, 1.0, (int(miss.sum()), settings.miss_samples))
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


def _shell_ends(origin: np.ndarray, directions: np.ndarray, d: np.ndarray, band: np.ndarray, shell: float,
                arm: np.ndarray, name: str, session: Session, readings: dict, probes: int = 4) -> np.ndarray:
    """(n,) for each ray of camera ``name``: how far along it (m) its occupied shell may reach:
    d + band + shell, unless another camera of the same pose saw a point of the shell free (nearer
    than where its own reading vouches free space): then up to the last probe before that point."""
    ends = d + band + shell
    hit = np.flatnonzero(arm)
    if not len(hit) or len(readings) < 2:
        return ends
    fractions = np.linspace(0.0, 1.0, probes)
    seen_free = np.zeros((len(hit), probes), dtype=bool)
    for other, reading in readings.items():
        if other == name:
            continue
        camera = session.cameras[other]
        free_end = reading.free_end
        height, width = free_end.shape
        camera_T_base = np.linalg.inv(camera.base_T_camera)
        K = camera.info.K
        for k, fraction in enumerate(fractions):
            t = d[hit] + band[hit] + fraction * shell
            local = (origin + t[:, None] * directions[hit]) @ camera_T_base[:3, :3].T + camera_T_base[:3, 3]
            z = local[:, 2]
            u, v, inside = pixel_of(local, K, width, height)
            vouched = np.zeros(len(z))
            vouched[inside] = free_end[v[inside], u[inside]]
            seen_free[:, k] |= inside & (z < vouched)
    first = np.where(seen_free.any(axis=1), np.argmax(seen_free, axis=1), probes)
    limit = np.where(first == 0, d[hit] + band[hit] - 1e-9,
                     d[hit] + band[hit] + fractions[np.maximum(first - 1, 0)] * shell)
    ends[hit] = np.where(first == probes, ends[hit], limit)
    return ends


def never_seen_free(sessions: list[Session], base_T_links: np.ndarray, candidates: list[np.ndarray],
                    settings: LabelSettings, clear_margin: float = 0.01,
                    arm_region: ArmRegion | None = None) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Which candidate points no camera ever saw free, at any configuration, in each link's frame.

    ``base_T_links`` (C, L, 4, 4) poses the links at the sessions' configurations (in the order of
    their poses); ``candidates[l]`` (n, 3) are points in link l's frame. A point is seen free by a
    camera when it projects into the image in front of the measured depth (less the label band; on
    a depth edge, of the nearest neighbour's), or in front of the far range on a pixel whose zero
    means nothing in range (the camera's no-depth mode, rigs.no_return; a hole vouches for
    nothing); and below the session's
    mount plane. Returns two lists of boolean masks (n,), one per link: never
    seen free, and seen free with ``clear_margin`` m to spare (certainly not part of the link).
    """
    never = [np.ones(len(points), dtype=bool) for points in candidates]
    clear = [np.zeros(len(points), dtype=bool) for points in candidates]
    far_cache: dict = {}
    config = 0
    for session in sessions:
        mount = session.mount_plane_z
        for pose in session.pose_ids:
            if mount is not None:
                # The arm never reaches through the surface it stands on: what a link carries below
                # it at some pose is not the link's matter.
                for link, points in enumerate(candidates):
                    height_above = points @ base_T_links[config, link, 2, :3] + base_T_links[config, link, 2, 3] - mount
                    never[link] &= height_above >= 0
                    clear[link] |= height_above < -clear_margin
            for name, camera in session.cameras.items():
                if not session.has_image(name, pose, "depth"):
                    continue
                depth = session.image(name, pose, "depth")
                height, width = depth.shape
                arm = None if arm_region is None else (lambda points, config=config: arm_region.contains(points, config))
                reading = read_depth(depth, camera, settings, mount, arm, no_depth_mode(name, camera, settings),
                                     far_range(session, name, far_cache))
                free_end = reading.free_end
                camera_T_base = np.linalg.inv(camera.base_T_camera)
                K = camera.info.K
                for link, points in enumerate(candidates):
                    camera_T_link = camera_T_base @ base_T_links[config, link]
                    local = points @ camera_T_link[:3, :3].T + camera_T_link[:3, 3]
                    z = local[:, 2]
                    u, v, inside = pixel_of(local, K, width, height)
                    # A zero that means nothing in range vouches up to the far range (free_end holds it).
                    reach = np.zeros(len(points))
                    reach[inside] = free_end[v[inside], u[inside]]
                    free = inside & (z < reach)
                    clearly = inside & (z < reach - clear_margin)
                    if mount is not None:
                        # A pixel that sees the table sees its whole cone free down to the plane
                        # (a pixel's own ray is only one line of that cone).
                        table = np.zeros(len(points), dtype=bool)
                        table[inside] = reading.table[v[inside], u[inside]]
                        pose_link = base_T_links[config, link]
                        height_above = points @ pose_link[2, :3] + pose_link[2, 3] - mount
                        free |= table & (height_above > 0)
                        clearly |= table & (height_above > clear_margin)
                    never[link] &= ~free
                    clear[link] |= clearly
            config += 1
    return never, clear
