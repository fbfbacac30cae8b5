"""``calibrate --model auto|hand-eye|full|offsets``: which model a calibration fits, and why.

A session of reported flange poses (no joints, no URDF) can only be fitted with the arm held
(hand-eye). Sessions with joints and board photos are fitted three ways - hand-eye (the nominal
arm held), offsets (joint zero offsets) and full (every placement error) - and judged on the same
cross-validation folds by pose; the simplest model within ``AUTO_TOLERANCE`` of the lowest
held-out error is delivered, as ``--deflection auto`` chooses its model. Sessions without board
photos have no hand-eye model; auto fits full there, as before (the kinematic models are not
compared on tracker data, which the tracker's own verdict judges).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from calib.sensors.board_corners import has_board_images
from capture.session import Session
from rigs.errors import InputError, setting

SIMPLEST_FIRST = ("hand-eye", "offsets", "full")
AUTO_TOLERANCE = 0.02  # a simpler model is kept when its held-out error is within 2 % of the best


@dataclass
class ModelChoice:
    """The model to deliver (``model``), what was requested, why (a sentence), and the held-out
    RMS (px) per candidate that the choice compared."""

    model: str
    requested: str
    reason: str
    heldout_px: dict[str, float | None] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"model": self.model, "requested": self.requested, "reason": self.reason,
                "heldout_rms_px": dict(self.heldout_px), "tolerance": AUTO_TOLERANCE}


def flange_pose_sessions(sessions: list[Session]) -> bool:
    """Whether the sessions carry reported flange poses instead of joints (all or none may)."""
    flags = {s.base_T_flange is not None and not s.joint_names for s in sessions}
    if len(flags) > 1:
        raise InputError("some sessions hold flange poses and others joint angles; calibrate them apart.")
    return flags.pop()


def requested_model(sessions: list[Session], model: str) -> ModelChoice | None:
    """The choice when no comparison is needed (None when auto must compare the candidates)."""
    if flange_pose_sessions(sessions):
        if model in ("full", "offsets"):
            return ModelChoice("hand-eye", model, f"--model {model} fits the arm's joints, and these sessions record "
                               f"the controller's flange poses with no joints or URDF: the arm is held at those poses "
                               f"and the camera and board frames are fitted (hand-eye)")
        return ModelChoice("hand-eye", model, "the sessions record the controller's flange poses with no joints or URDF, "
                           "so only the camera and board frames can be fitted (hand-eye)")
    if model == "hand-eye":
        if not all(has_board_images(s) for s in sessions):
            raise InputError(f"{setting('model')} hand-eye needs board photos (sessions with cameras and "
                             f"sensors.board).")
        return ModelChoice("hand-eye", model, "requested with --model hand-eye")
    if model in ("full", "offsets"):
        return ModelChoice(model, model, f"requested with --model {model}")
    if not all(has_board_images(s) for s in sessions):
        return ModelChoice("full", model, "auto: the sessions have no board photos, so there is no hand-eye model to "
                           "compare; full fits placement errors and zero offsets")
    return None


def choose(heldout_px: dict[str, float | None], requested: str = "auto") -> ModelChoice:
    """The simplest candidate within AUTO_TOLERANCE of the lowest cross-validated RMS."""
    known = {m: v for m, v in heldout_px.items() if v is not None}
    if not known:
        raise InputError(f"no candidate model could be cross-validated (too few poses); choose one with "
                         f"{setting('model')}.")
    best = min(known.values())
    model = next(m for m in SIMPLEST_FIRST if m in known and known[m] <= best * (1 + AUTO_TOLERANCE))
    figures = ", ".join(f"{m} {known[m]:.3f} px" for m in SIMPLEST_FIRST if m in known)
    simpler = [m for m in SIMPLEST_FIRST[:SIMPLEST_FIRST.index(model)] if m in known]
    why = (f"auto: {model} has the lowest cross-validated RMS reprojection error" if known[model] == best else
           f"auto: {model} is within {100 * AUTO_TOLERANCE:g} % of the lowest cross-validated RMS and simpler")
    if simpler:
        why += f" (the simpler {', '.join(simpler)} {'is' if len(simpler) == 1 else 'are'} worse by more than that)"
    return ModelChoice(model, requested, f"{why}: {figures}", dict(heldout_px))
