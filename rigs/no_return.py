"""What a depth pixel with no reading (0) means: a hole on the arm, or nothing in range behind it.

A depth camera reads 0 for two different things. A *hole* is a pixel whose ray did meet a
surface that the camera could not measure (a grazing angle, a dark or shiny patch, a stereo
shadow): the space behind it is unknown. A *no-return* pixel saw nothing within the camera's
range (a large hall, a black backdrop, a driver's clipping distance, depth masked down to the
arm): its whole ray, up to the camera's far range, is free.

One image cannot say which a single pixel is, but the shape of the zeros can. Holes on the arm
are small and surrounded by the arm's readings; nothing-in-range is where the arm is not, and
reaches the image border (the arm never fills the frame's edge all round) or covers a large
region. So the zeros are split into 4-connected regions and each region is

- ``border``: it touches the image border;
- ``large``: it does not, but covers more than ``min_region`` of the image's pixels (between
  the arm's links, under an elbow);
- ``hole``: the rest.

A camera's ``no_depth`` says what its zeros mean (the session records it, the import and the
trainer take it per camera):

- ``unknown``: every zero vouches for nothing;
- ``free``: every zero is free space up to the camera's far range (an ideal camera in empty
  space, or the user's word that the recording has no holes);
- ``auto``: border and large regions are free up to the far range, holes unknown. A zero pixel
  within ``RIM_PX`` pixels of a reading may be a grazing hole on the arm's silhouette: it
  vouches free space only in front of the nearest of those readings, never through the rim.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NO_DEPTH_MODES = ("auto", "free", "unknown")
DEFAULT_NO_DEPTH = "auto"
AUTO_MIN_REGION = 0.01  # share of the image's pixels above which a zero region off the border is nothing in range
# Pixels: a zero this close to a reading may be a grazing hole on the silhouette. Such holes are
# 1-2 px wide at a real camera's resolution; the rim takes the wider, because free rays that graze
# the silhouette pull the learned surface a few tenths of a millimetre under the true one (0.63 %
# of the body read free at 1 px, 0.47 % at 2, on scripts/bench_no_depth.py's no-background bag).
# Each pixel more leaves 0.5-1 % of the fin arm's domains unseen at 160 x 120.
RIM_PX = 2
MOSTLY_EMPTY = 0.5  # share of an image with no reading above which the import warns


@dataclass
class NoReturn:
    """The zeros of one depth image (H, W), split as the module docstring says."""

    border: np.ndarray  # bool: zero regions touching the image border
    large: np.ndarray  # bool: zero regions off the border larger than the stated size
    hole: np.ndarray  # bool: the other zeros

    def shares(self) -> dict[str, float]:
        """Share of the image's pixels in each kind, and in all zeros."""
        size = float(self.border.size)
        border, large, hole = self.border.sum() / size, self.large.sum() / size, self.hole.sum() / size
        return {"no_reading": float(border + large + hole), "border": float(border), "large": float(large),
                "hole": float(hole)}

    def free(self, mode: str) -> np.ndarray:
        """(H, W) zeros that ``mode`` (NO_DEPTH_MODES) counts as nothing in range."""
        if mode == "free":
            return self.border | self.large | self.hole
        if mode == "auto":
            return self.border | self.large
        return np.zeros_like(self.border)


def no_return_regions(depth: np.ndarray, min_region: float = AUTO_MIN_REGION) -> NoReturn:
    """Split the zeros of ``depth`` (H, W) (any unit, 0 = no reading) into border, large and hole."""
    from scipy import ndimage

    empty = ~(np.asarray(depth) > 0)  # NaN reads as no reading too
    labels, count = ndimage.label(empty)  # 4-connected: a diagonal touch does not join a hole to the background
    if count == 0:
        none = np.zeros(empty.shape, dtype=bool)
        return NoReturn(none, none.copy(), none.copy())
    edge = np.unique(np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]]))
    on_border = np.zeros(count + 1, dtype=bool)
    on_border[edge] = True
    on_border[0] = False
    sizes = np.bincount(labels.ravel(), minlength=count + 1)
    big = sizes > min_region * empty.size
    big[0] = False
    border = on_border[labels]
    large = (big & ~on_border)[labels]
    return NoReturn(border, large, empty & ~border & ~large)


def no_return_reach(depth: np.ndarray, free: np.ndarray, far: float, rim_px: int | None,
                    margin: np.ndarray | float = 0.0) -> np.ndarray:
    """(H, W) m: how far along its ray each ``free`` zero pixel of ``depth`` (H, W) m vouches free
    space: ``far``, or with ``rim_px``, in front of the nearest reading within that many pixels
    (less ``margin`` m, a scalar or (H, W) per pixel) where there is one. 0 elsewhere."""
    reach = np.where(free, float(far), 0.0)
    if rim_px:
        from scipy import ndimage

        nearest = ndimage.minimum_filter(np.where(depth > 0, depth, np.inf), size=2 * rim_px + 1, mode="nearest")
        rim = free & np.isfinite(nearest)
        capped = np.minimum(float(far), np.where(rim, nearest, 0.0) - margin)
        reach = np.where(rim, np.maximum(capped, 0.0), reach)
    return reach


def check_mode(mode: str, where: str) -> str:
    """``mode`` if it is one of NO_DEPTH_MODES, else InputError naming ``where``."""
    from rigs.errors import InputError

    if mode not in NO_DEPTH_MODES:
        raise InputError(f"{where}: must be one of {', '.join(NO_DEPTH_MODES)}, got {mode!r}.")
    return mode
