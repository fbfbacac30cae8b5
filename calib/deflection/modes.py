"""Deflection modes and the automatic choice between them.

``none``: the rigid kinematic fit. ``compliance``: the fit with one compliance per joint.
``learned``: the rigid fit plus a residual ensemble trained on what it leaves. ``both``: compliance
plus the ensemble. ``auto`` measures all four on the same held-out evidence (the fixed hold-out,
or the cross-validation folds) and keeps the simplest whose held-out RMS is within
``AUTO_TOLERANCE`` of the best: a more complex model must earn its place.
"""

from __future__ import annotations

from rigs.errors import InputError, setting

MODES = ("none", "compliance", "learned", "both")
CHOICES = MODES + ("auto",)
AUTO_TOLERANCE = 0.02  # relative held-out RMS within which the simpler model wins
URDF_NOTE = ("robot.urdf holds the rigid geometry only; the deflection (joint compliance, learned residual) "
             "depends on payload and configuration and is applied by `selfcal predict` / `selfcal correct` "
             "and Calibration.predict.")


def check_mode(mode: str) -> str:
    if mode not in CHOICES:
        raise InputError(f"{setting('deflection')} must be one of {', '.join(CHOICES)}, got {mode!r}.")
    return mode


def uses_compliance(mode: str) -> bool:
    return mode in ("compliance", "both")


def uses_residual(mode: str) -> bool:
    return mode in ("learned", "both")


def geometry_of(mode: str) -> str:
    """The geometric fit a mode builds on: 'none' (rigid) or 'compliance'."""
    return "compliance" if uses_compliance(mode) else "none"


def choose(rms: dict[str, float], tolerance: float = AUTO_TOLERANCE) -> str:
    """The simplest mode (in MODES order) whose held-out RMS is within ``tolerance`` of the best."""
    best = min(rms.values())
    return next(mode for mode in MODES if mode in rms and rms[mode] <= (1.0 + tolerance) * best)
