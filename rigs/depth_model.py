"""How a simulated depth camera turns the true distance into a reading.

Two models, chosen per camera in the rig file (``[cameras.depth] model = ...``):

``gaussian`` (the default): an ideal range finder, ``z_measured = z (1 + depth_noise N(0, 1))``;
a pixel that sees nothing reads 0, and only then. What it reads as 0 is therefore free space.

``stereo``: an active stereo camera like a RealSense D4xx. It measures the disparity
``D = f b / z`` (f the focal length in px from K, b the baseline in m) with a subpixel error of
``subpixel_px`` (one standard deviation), so the depth error grows with the square of the distance:

    sigma_z = z^2 s / (f b)          (about 1.6 mm at 1 m and 6.5 mm at 2 m for b = 50 mm,
                                      s = 0.08 px, f = 600 px)

On top of the noise it has the faults real depth images have, each a pixel that reads 0 (no
reading) or a wrong depth:

- holes at grazing angles: the probability of a hole rises from 0 at ``grazing_deg - 10`` to 1 at
  ``grazing_deg`` (the angle between the surface normal and the line of sight);
- holes on dark surfaces (albedo, from the rendered colour, below ``dark_level``; black
  anodising and shiny metal look alike to the projector): a hole with probability up to
  ``dark_hole_probability``, in blobs of a few pixels as real ones come;
- stereo shadows: background beside a foreground edge that the second imager (at +x, ``b`` away)
  cannot see reads 0;
- flying pixels: along a depth step (a second difference of more than ``edge_jump_m`` along a row
  or column), a fraction ``flying_fraction`` of the pixels reads a depth between the foreground
  and the background;
- readings outside ``[min_range_m, max_range_m]`` (default: the camera's near and far) read 0;
- depths are quantised to ``quantum_m`` (1 mm, the unit of a 16UC1 depth image).

A pixel that reads 0 under this model is unknown (a hole, a shadow, out of range), never free:
``no_depth`` says which a camera's zeros mean, and the session manifest records it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rigs.errors import InputError

MODELS = ("gaussian", "stereo")


@dataclass(frozen=True)
class DepthModel:
    """A camera's depth measurement model (module docstring); lengths in metres, angles in degrees."""

    kind: str = "gaussian"
    relative_noise: float = 0.005  # gaussian: relative standard deviation
    baseline_m: float = 0.05  # stereo: D435 50 mm, D415 55 mm
    subpixel_px: float = 0.08
    grazing_deg: float = 80.0
    dark_level: float = 0.12  # albedo (0 black .. 1 white)
    dark_hole_probability: float = 0.8
    flying_fraction: float = 0.5
    edge_jump_m: float = 0.03
    quantum_m: float = 0.001
    min_range_m: float | None = None  # None: the camera's near plane
    max_range_m: float | None = None  # None: the camera's far plane

    @property
    def no_depth(self) -> str:
        """What a 0 reading means: ``free`` (nothing in range) or ``unknown`` (also holes)."""
        return "free" if self.kind == "gaussian" else "unknown"

    def sigma_at_1m(self, focal_px: float) -> float | None:
        """Stereo: sigma_z / z^2 (1/m); None for the gaussian model (its sigma grows with z, not z^2)."""
        if self.kind != "stereo":
            return None
        return self.subpixel_px / (focal_px * self.baseline_m)

    def describe(self, focal_px: float) -> dict:
        """The parameters as the session manifest records them."""
        if self.kind == "gaussian":
            return {"kind": "gaussian", "relative_noise": self.relative_noise}
        return {"kind": "stereo", "baseline_m": self.baseline_m, "subpixel_px": self.subpixel_px, "focal_px": focal_px,
                "sigma_at_1m_m": self.sigma_at_1m(focal_px), "grazing_deg": self.grazing_deg,
                "dark_level": self.dark_level, "dark_hole_probability": self.dark_hole_probability,
                "flying_fraction": self.flying_fraction, "edge_jump_m": self.edge_jump_m, "quantum_m": self.quantum_m}

    # -- measuring ----------------------------------------------------------------------------
    def measure(self, depth: np.ndarray, rgb: np.ndarray, K: np.ndarray, near: float, far: float,
                rng: np.random.Generator) -> np.ndarray:
        """True depth (H, W) m along the optical axis (0 where nothing was hit) -> reading (H, W) float32."""
        hit = depth > 0
        if self.kind == "gaussian":
            return np.where(hit, depth * (1.0 + self.relative_noise * rng.standard_normal(depth.shape)),
                            0.0).astype(np.float32)
        return self._stereo(depth.astype(np.float64), rgb, K, near, far, rng).astype(np.float32)

    def _stereo(self, depth: np.ndarray, rgb: np.ndarray, K: np.ndarray, near: float, far: float,
                rng: np.random.Generator) -> np.ndarray:
        from scipy import ndimage

        height, width = depth.shape
        hit = depth > 0
        focal = float(K[0, 0])
        low, high = neighbourhood_range(depth)
        edge = discontinuities(depth, self.edge_jump_m)

        # Noise in disparity, where the matcher makes it.
        disparity = np.where(hit, focal * self.baseline_m / np.where(hit, depth, 1.0), 0.0)
        noisy = disparity + self.subpixel_px * rng.standard_normal(depth.shape)
        measured = np.where(hit & (noisy > 0), focal * self.baseline_m / np.where(noisy > 0, noisy, 1.0), 0.0)

        # Flying pixels: a mix of foreground and background along depth edges.
        flying = edge & (rng.random(depth.shape) < self.flying_fraction)
        mix = rng.random(depth.shape)
        measured = np.where(flying, low + mix * (high - low), measured)

        holes = ~hit
        # Grazing angles, from the true surface's normals (edges excluded: no surface there).
        cosine = incidence_cosine(depth, K)
        angle = np.degrees(np.arccos(np.clip(cosine, 0.0, 1.0)))
        grazing = hit & ~edge & (rng.random(depth.shape) < np.clip((angle - (self.grazing_deg - 10.0)) / 10.0, 0, 1))
        # Dark surfaces, in blobs: a smoothed random field ranked to uniform, below the probability.
        albedo = rgb.astype(np.float64).mean(axis=2) / 255.0
        chance = self.dark_hole_probability * np.clip(1.0 - albedo / self.dark_level, 0.0, 1.0)
        field = ndimage.gaussian_filter(rng.random(depth.shape), 1.5)
        uniform = np.empty(field.size)
        uniform[np.argsort(field, axis=None)] = (np.arange(field.size) + 0.5) / field.size
        dark = hit & (uniform.reshape(depth.shape) < chance)
        shadow = stereo_shadow(disparity)
        holes |= grazing | dark | shadow
        low_range = self.min_range_m if self.min_range_m is not None else near
        high_range = self.max_range_m if self.max_range_m is not None else far
        holes |= (measured < low_range) | (measured > high_range)
        measured = np.where(holes, 0.0, measured)
        return np.round(measured / self.quantum_m) * self.quantum_m


def neighbourhood_range(depth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Smallest and largest valid (> 0) depth in each pixel's 3x3 neighbourhood (H, W); 0 where none."""
    from scipy import ndimage

    valid = depth > 0
    low = ndimage.minimum_filter(np.where(valid, depth, np.inf), size=3, mode="nearest")
    high = ndimage.maximum_filter(np.where(valid, depth, -np.inf), size=3, mode="nearest")
    return np.where(np.isfinite(low), low, 0.0), np.where(np.isfinite(high), high, 0.0)


def discontinuities(depth: np.ndarray, jump: float) -> np.ndarray:
    """Pixels (H, W) next to a depth step larger than ``jump`` m: where the second difference along
    a row or a column exceeds it (a slope, however steep, has none; a step has one on each side)."""
    valid = depth > 0
    second = np.zeros(depth.shape)
    for axis in (0, 1):
        d = np.moveaxis(depth, axis, 0)
        ok = np.moveaxis(valid, axis, 0)
        values = np.zeros(d.shape)
        values[1:-1] = np.where(ok[2:] & ok[1:-1] & ok[:-2], np.abs(d[2:] - 2 * d[1:-1] + d[:-2]), 0.0)
        second = np.maximum(second, np.moveaxis(values, 0, axis))
    return valid & (second > jump)


def incidence_cosine(depth: np.ndarray, K: np.ndarray) -> np.ndarray:
    """|cos| of the angle between the surface normal (from neighbouring pixels) and the line of sight (H, W)."""
    height, width = depth.shape
    v, u = np.mgrid[0:height, 0:width].astype(np.float64)
    points = np.stack([(u - K[0, 2]) / K[0, 0] * depth, (v - K[1, 2]) / K[1, 1] * depth, depth], axis=-1)
    du = np.zeros_like(points)
    dv = np.zeros_like(points)
    du[:, 1:-1] = points[:, 2:] - points[:, :-2]
    dv[1:-1] = points[2:] - points[:-2]
    normal = np.cross(du, dv)
    norm = np.linalg.norm(normal, axis=-1) * np.linalg.norm(points, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cosine = np.abs(np.sum(normal * points, axis=-1)) / norm
    return np.where(norm > 0, cosine, 1.0)


def stereo_shadow(disparity: np.ndarray, margin_px: float = 1.0) -> np.ndarray:
    """Pixels (H, W) the second imager (at +x) cannot see: a closer pixel to the right lands left of them.

    A pixel at column x with disparity D appears at x - D in the second image; it is hidden when a
    pixel right of it has x' - D' more than ``margin_px`` smaller (then D' > D: it is closer).
    """
    width = disparity.shape[1]
    shifted = np.arange(width)[None, :] - disparity
    # Suffix minimum over the columns to the right of each pixel.
    right = np.minimum.accumulate(shifted[:, ::-1], axis=1)[:, ::-1]
    beyond = np.concatenate([right[:, 1:], np.full((disparity.shape[0], 1), np.inf)], axis=1)
    return (disparity > 0) & (beyond < shifted - margin_px)


def parse_depth_model(table, relative_noise: float):
    """``[cameras.depth]`` of a rig file (a ``rigs.spec._Table`` or None) -> DepthModel."""
    if table is None:
        return DepthModel("gaussian", relative_noise)
    kind = table.get("model", "str", "gaussian")
    if kind not in MODELS:
        raise InputError(f"{table.where('model')} should be one of {', '.join(MODELS)}, got {kind!r}.")
    if kind == "gaussian":
        table.done()
        return DepthModel("gaussian", relative_noise)
    values = dict(
        baseline_m=table.positive("baseline_mm", 50.0) * 1e-3,
        subpixel_px=table.positive("subpixel_px", 0.08),
        grazing_deg=table.positive("grazing_deg", 80.0),
        dark_level=table.positive("dark_level", 0.12),
        dark_hole_probability=table.get("dark_hole_probability", "number", 0.8),
        flying_fraction=table.get("flying_fraction", "number", 0.5),
        edge_jump_m=table.positive("edge_jump_mm", 30.0) * 1e-3,
        quantum_m=table.positive("quantum_mm", 1.0) * 1e-3,
        min_range_m=table.get("min_range_m", "number", None),
        max_range_m=table.get("max_range_m", "number", None))
    for key in ("dark_hole_probability", "flying_fraction"):
        if not 0.0 <= values[key] <= 1.0:
            raise InputError(f"{table.where(key)} should be a probability in [0, 1], got {values[key]}.")
    if values["grazing_deg"] > 90.0:
        raise InputError(f"{table.where('grazing_deg')} should be at most 90, got {values['grazing_deg']}.")
    table.done()
    return DepthModel("stereo", relative_noise, **values)
