"""Where the arm stood still in a joint-state stream, and which camera frames were taken then.

A camera image is only worth keeping when the arm did not move while it was exposed and while the
joint reading was taken: a 1 mrad motion of the shoulder moves the tool by a millimetre at 1 m.
At time t the arm counts as still when no joint moved more than ``still`` (rad, m for prismatic
joints) over the joint samples within ``t +- window`` seconds, and those samples reach both sides of
t with the nearest one within ``tolerance`` seconds. Consecutive still samples (no gap longer than
``tolerance``, every one within ``still`` of the first) form a stand; a stand is a pose, its joint
values the mean of its samples.

A frame is assigned to the stand of the nearest still sample within ``window``; a frame that is
not, is dropped for a stated reason (see :data:`REASONS`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rigs.errors import InputError, setting

DEFAULT_STILL = 1e-4  # rad: encoder noise is ~1e-6 rad; a slow creep of 1e-4 rad is 0.1 mm at 1 m
DEFAULT_WINDOW = 0.1  # s either side of a stamp: exposure, readout and clock offsets are shorter
NO_JOINTS = "no joint state around the stamp"
MOVING = "the arm was moving"
REASONS = (NO_JOINTS, MOVING)


@dataclass
class Stands:
    """Stands of a joint stream: ``q`` (S, dof) mean joint values, ``start``, ``end``, ``middle`` (S,) s."""

    q: np.ndarray
    start: np.ndarray
    end: np.ndarray
    middle: np.ndarray
    samples: np.ndarray  # (S,) number of joint samples averaged


def _range_table(values: np.ndarray) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Sparse tables of running max and min over windows of 2^k samples (k = 0, 1, ...)."""
    highs, lows = [values], [values]
    width = 1
    while 2 * width <= len(values):
        highs.append(np.maximum(highs[-1][:-width], highs[-1][width:]))
        lows.append(np.minimum(lows[-1][:-width], lows[-1][width:]))
        width *= 2
    return highs, lows


def joint_motion(times: np.ndarray, q: np.ndarray, at: np.ndarray, window: float,
                 tolerance: float) -> tuple[np.ndarray, np.ndarray]:
    """Largest joint range (n,) over the samples within ``at +- window``, and whether the samples cover
    both sides of each time with the nearest within ``tolerance`` (n,) bool. ``times`` sorted (N,)."""
    at = np.asarray(at, dtype=float)
    lo = np.searchsorted(times, at - window, side="left")
    hi = np.searchsorted(times, at + window, side="right")  # window is samples [lo, hi)
    right = np.clip(np.searchsorted(times, at), 0, len(times) - 1)
    left = np.clip(right - 1, 0, len(times) - 1)
    gap = np.minimum(np.abs(times[left] - at), np.abs(times[right] - at))
    covered = (hi - lo >= 2) & (gap <= tolerance)
    covered &= (times[np.clip(lo, 0, len(times) - 1)] <= at) & (times[np.clip(hi - 1, 0, len(times) - 1)] >= at)
    highs, lows = _range_table(q)
    length = np.maximum(hi - lo, 1)
    level = np.floor(np.log2(length)).astype(int)
    motion = np.zeros(len(at))
    for k in np.unique(level):
        rows = np.flatnonzero((level == k) & covered)
        if not len(rows):
            continue
        a, b = lo[rows], hi[rows] - (1 << k)
        high = np.maximum(highs[k][a], highs[k][b])
        low = np.minimum(lows[k][a], lows[k][b])
        motion[rows] = (high - low).max(axis=1)
    return motion, covered


def find_stands(times: np.ndarray, q: np.ndarray, still: float, window: float,
                tolerance: float) -> tuple[Stands, np.ndarray]:
    """Stands of a joint stream sorted by time (module docstring); and (N,) stand of each sample, -1 moving."""
    if still <= 0:
        raise InputError(f"{setting('still')} must be positive, got {still:g} rad.")
    if window <= 0:
        raise InputError(f"{setting('still_window')} must be positive, got {window:g} s.")
    if tolerance <= 0:
        raise InputError(f"{setting('tolerance')} must be positive, got {tolerance:g} s.")
    motion, covered = joint_motion(times, q, times, window, tolerance)
    calm = covered & (motion <= still)
    stand_of = np.full(len(times), -1)
    starts: list[int] = []
    for i in np.flatnonzero(calm):
        if starts and stand_of[i - 1] == len(starts) - 1 and times[i] - times[i - 1] <= tolerance \
                and np.abs(q[i] - q[starts[-1]]).max() <= still:
            stand_of[i] = len(starts) - 1
            continue
        starts.append(int(i))
        stand_of[i] = len(starts) - 1
    count = len(starts)
    q_mean = np.zeros((count, q.shape[1]))
    start, end, samples = np.zeros(count), np.zeros(count), np.zeros(count, dtype=int)
    for s in range(count):
        rows = np.flatnonzero(stand_of == s)
        q_mean[s] = q[rows].mean(axis=0)
        start[s], end[s], samples[s] = times[rows[0]], times[rows[-1]], len(rows)
    return Stands(q_mean, start, end, (start + end) / 2, samples), stand_of


def assign_frames(frame_times: np.ndarray, times: np.ndarray, q: np.ndarray, stand_of: np.ndarray, still: float,
                  window: float, tolerance: float) -> tuple[np.ndarray, list[str | None]]:
    """(F,) stand of each frame (-1 dropped) and the reason of each drop (None when kept)."""
    motion, covered = joint_motion(times, q, frame_times, window, tolerance)
    calm_rows = np.flatnonzero(stand_of >= 0)
    calm_times = times[calm_rows]
    stand = np.full(len(frame_times), -1)
    reasons: list[str | None] = []
    for i, t in enumerate(frame_times):
        if not covered[i]:
            reasons.append(NO_JOINTS)
            continue
        if motion[i] > still or not len(calm_rows):
            reasons.append(MOVING)
            continue
        k = int(np.clip(np.searchsorted(calm_times, t), 0, len(calm_times) - 1))
        best = min((j for j in (k - 1, k) if 0 <= j < len(calm_times)), key=lambda j: abs(calm_times[j] - t))
        if abs(calm_times[best] - t) > window:
            reasons.append(MOVING)
            continue
        stand[i] = stand_of[calm_rows[best]]
        reasons.append(None)
    return stand, reasons
