"""Statistics of a sensor's errors, in the units people quote (mm, degrees, pixels)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.special

from capture.session import Session


@dataclass
class ErrorStats:
    """Statistics of 3D point errors, in millimetres."""

    n: int
    mean_mm: float
    rms_mm: float
    max_mm: float
    p95_mm: float

    @classmethod
    def of(cls, errors_m: np.ndarray) -> "ErrorStats":
        e = np.asarray(errors_m, float) * 1000.0
        if e.size == 0:
            return cls(0, float("nan"), float("nan"), float("nan"), float("nan"))
        return cls(int(e.size), float(e.mean()), float(np.sqrt(np.mean(e ** 2))), float(e.max()), float(np.percentile(e, 95)))

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def pose_figures(position_m: np.ndarray, angle_rad: np.ndarray) -> dict:
    """Position statistics (mm) and angle statistics (deg) of probe pose errors."""
    out = ErrorStats.of(position_m).as_dict()
    degrees = np.degrees(np.asarray(angle_rad, float))
    empty = not degrees.size
    out.update(angle_mean_deg=float("nan") if empty else float(degrees.mean()),
               angle_rms_deg=float("nan") if empty else float(np.sqrt(np.mean(degrees ** 2))),
               angle_max_deg=float("nan") if empty else float(degrees.max()),
               angle_p95_deg=float("nan") if empty else float(np.percentile(degrees, 95)))
    return out


def pixel_figures(errors_px: np.ndarray) -> dict:
    """Reprojection error statistics (px) of board corners."""
    e = np.asarray(errors_px, float)
    if not e.size:
        return {"n": 0, "mean_px": float("nan"), "rms_px": float("nan"), "max_px": float("nan"), "p95_px": float("nan")}
    return {"n": int(e.size), "mean_px": float(e.mean()), "rms_px": float(np.sqrt(np.mean(e ** 2))),
            "max_px": float(e.max()), "p95_px": float(np.percentile(e, 95))}


def rms(values: np.ndarray) -> float | None:
    values = np.asarray(values, float)
    return float(np.sqrt(np.mean(values ** 2))) if values.size else None


def named_outliers(session: Session, errors: np.ndarray, threshold: float) -> list[dict]:
    """The tracker rows whose error (M,) m exceeds ``threshold`` robust standard deviations, worst first.

    The scale is the solver's: the median squared 3D error over the chi-square median of 3 degrees
    of freedom, so a point scores about 1.5 at the typical error and 5 is far in the tail.
    """
    tracker = session.tracker
    chi_square_median = 2.0 * float(scipy.special.gammaincinv(1.5, 0.5))  # 3 degrees of freedom
    scale = max(float(np.sqrt(np.median(errors ** 2) / chi_square_median)), 1e-12)
    score = errors / scale
    rows = tracker.rows or [f"row {i + 2}" for i in range(len(errors))]
    flagged = sorted(np.flatnonzero(score > threshold), key=lambda i: -score[i])
    return [{"row": f"tracker.csv {rows[i]}", "pose": session.pose_ids[tracker.pose_index[i]], "target": tracker.targets[i],
             "error_mm": float(errors[i] * 1000), "residual_sigma": round(float(score[i]), 1)} for i in flagged]
