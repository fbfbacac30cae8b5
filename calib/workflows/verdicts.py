"""Is this calibration good? The verdicts of calibrate, validate, recalibrate and the ISO 9283 audit.

Each is built by :func:`rigs.verdicts.judge` from figures the command already measured, against a
tolerance the user gives or a default derived from the data (never from truth/):

- calibrate: the cross-validated (or held-out) RMS error, against ``--tolerance-mm``; default
  DEFAULT_NOISE_FACTOR times the 3D RMS error the instrument alone gives at the measured points
  (the tracker's stated per-point sigma, or half its ISO 10360-10 MPEs, as the fit weights them;
  for board images the corner noise found by per-image PnP, in px). A calibration that leaves
  no error the instrument could clearly see passes.
- validate: the RMS error on the session, against the same default for that session; a session
  that is the calibration's own fit data cannot judge it (CANNOT TELL, and says so). A hand-eye
  calibration's validation is judged as its calibration was: the reprojection RMS against twice
  the session's floor (corner noise and the calibration's flange error carried into its photos).
- recalibrate: the cross-validated RMS error after the refit, against ``--tolerance-mm``; default
  RECALIBRATION_FACTOR times the previous calibration's own cross-validated RMS (back to the
  accuracy it had before the event), and never below the instrument's default above.
- audit: the largest AP over P1..P5 of the model the audit judges (calibrated when given, else
  nominal), against ``--ap-tolerance-mm`` (an ISO 9283 acceptance level); default, with a
  calibration, AUDIT_FACTOR times its cross-validated RMS (the audit confirms what the
  calibration promised); without one there is no level to judge against (CANNOT TELL). RP is
  judged when ``--rp-tolerance-mm`` is given. The instrument's uncertainty is the resolution.

A figure above its tolerance is FAIL, unless the tolerance is finer than the instrument resolves:
then CANNOT TELL.
"""

from __future__ import annotations

import numpy as np

from calib.calibrator import data_hash
from calib.sensors.tracker_points import tracker_sqrt_information
from calib.workflows.hand_eye import PLAUSIBLE_FLANGE_M, PLAUSIBLE_FLANGE_RAD, TOLERANCE_FACTOR
from capture.session import Session
from rigs.errors import InputError, setting
from rigs.verdicts import Tolerance, Verdict, cannot_tell, combine, judge, with_note

DEFAULT_NOISE_FACTOR = 2.0
RECALIBRATION_FACTOR = 2.0
AUDIT_FACTOR = 3.0


def tracker_noise_rms_mm(sessions: list[Session]) -> float | None:
    """The 3D RMS error (mm) the tracker alone gives at the sessions' measured points, from the
    stated per-point sigma or the stated MPEs; None when a session states neither."""
    variances = []
    for session in sessions:
        tracker = session.tracker
        if tracker is None or not len(tracker.targets):
            continue
        sensors = session.manifest.get("sensors", {}).get("tracker") or {}
        if tracker.sigma is None and (sensors.get("distance_mpe_m") is None or sensors.get("transverse_mpe_m") is None):
            return None
        information = tracker_sqrt_information(tracker.xyz, sensors.get("distance_mpe_m"),
                                               sensors.get("transverse_mpe_m"), tracker.sigma)
        covariance = np.linalg.inv(np.einsum("mji,mjk->mik", information, information))
        variances.append(np.trace(covariance, axis1=1, axis2=2))
    if not variances:
        return None
    return float(np.sqrt(np.mean(np.concatenate(variances))) * 1e3)


def probe_noise_rms_mm(sessions: list[Session]) -> float | None:
    """The 3D RMS position error (mm) of the stated probe-pose sigmas; None when not stated."""
    values = []
    for session in sessions:
        poses = session.tracker_poses
        if poses is None or not len(poses.pose_index):
            continue
        if poses.sigma_pos is None:
            return None
        values.append(3 * np.asarray(poses.sigma_pos, dtype=float) ** 2)
    return float(np.sqrt(np.mean(np.concatenate(values))) * 1e3) if values else None


def instrument_floor(sessions: list[Session], unit: str, pixel_sigma: float | None = None) -> tuple[float | None, str]:
    """(the error the instrument alone gives, in ``unit``, or None; what it is, in words)."""
    if unit == "px":
        if pixel_sigma is None:
            return None, ""
        return float(np.sqrt(2.0) * pixel_sigma), "the board corners' noise found by per-image PnP"
    points = tracker_noise_rms_mm(sessions)
    if points is not None:
        return points, "the tracker's stated uncertainty at these points"
    probe = probe_noise_rms_mm(sessions)
    if probe is not None:
        return probe, "the probe poses' stated uncertainty"
    return None, ""


def _tolerance(given_mm: float | None, unit: str, floor: float | None, floor_what: str, factor: float,
               flag: str = "--tolerance-mm", name: str = "tolerance_mm") -> Tolerance | None:
    """``name``: the setting ``given_mm`` came from, for an error; ``flag``: the same on the command
    line, for the tolerance's provenance (a verdict's record, read next to the command that made it)."""
    if given_mm is not None:
        if not given_mm > 0:
            raise InputError(f"{setting(name)} must be positive, got {given_mm}.")
        if unit != "mm":
            raise InputError(f"{setting(name)}: this calibration is judged in {unit} (board images measure pixels, "
                             f"not mm); leave {setting(name)} out to judge it against the corner noise.")
        return Tolerance(given_mm, "mm", f"given with {flag}")
    if floor is None:
        return None
    return Tolerance(factor * floor, unit, f"default: {factor:g} x {floor_what} ({floor:.3g} {unit})")


def calibration_verdict(summary: dict, sessions: list[Session], tolerance_mm: float | None = None,
                        pixel_sigma: float | None = None) -> Verdict:
    """The verdict of ``selfcal calibrate`` from the calibration's summary and its sessions."""
    residuals = summary.get("residuals") or {}
    unit = residuals.get("unit", "mm")
    floor, floor_what = instrument_floor(sessions, unit, pixel_sigma)
    tolerance = _tolerance(tolerance_mm, unit, floor, floor_what, DEFAULT_NOISE_FACTOR)
    if tolerance is None:
        return cannot_tell("the sessions state no instrument uncertainty to derive a tolerance from; "
                           "give --tolerance-mm" if unit == "mm" else
                           "no estimate of the board corners' noise to derive a tolerance from")
    validation = residuals.get("validation") or {}
    held = (residuals.get("holdout") or {}).get(f"rms_{unit}")
    what = ("cross-validated RMS error on poses left out of each fold"
            if validation.get("method") == "cross-validation" else "RMS error on held-out poses")
    return judge(what, held, tolerance, floor, floor_what or "what the instrument resolves",
                 missing="no pose was kept out of the fit, so nothing measures the error on new poses "
                         "(the fit's own error does not)")


def own_fit_data(calibration, session: Session) -> bool:
    """Whether ``session`` is (one of) the data the calibration was fitted on."""
    summary = calibration.summary
    fitted = {str(path) for path in summary.get("sessions", [])}
    if str(session.path) in fitted or str(session.path.resolve()) in fitted:
        return True
    return summary.get("data_hash") is not None and data_hash([session]) == summary.get("data_hash")


def validation_verdict(calibration, session: Session, result: dict, tolerance_mm: float | None = None) -> Verdict:
    """The verdict of ``selfcal validate`` from its figures ``result`` on ``session``."""
    if "rms_mm" in result or "tracker_poses" in result:
        unit, measured = "mm", result.get("rms_mm")
    else:
        camera = result.get("camera", result)
        unit, measured = "px", camera.get("reprojection_rms_px")
    floor, floor_what = instrument_floor([session], unit, calibration.pixel_sigma)
    tolerance = _tolerance(tolerance_mm, unit, floor, floor_what, DEFAULT_NOISE_FACTOR)
    if tolerance is None:
        return cannot_tell(f"{session.path} states no instrument uncertainty to derive a tolerance from; "
                           f"give --tolerance-mm", None, measured)
    if own_fit_data(calibration, session):
        return cannot_tell(f"{session.path} holds the poses the calibration was fitted on: their RMS error "
                           f"({measured:.3g} {unit}) is the fit's own, not what new poses will see; validate on "
                           f"a session the fit did not use", tolerance, measured)
    return judge("RMS error on this session", measured, tolerance, floor, floor_what or "what the instrument resolves")


def recalibration_verdict(previous_summary: dict, comparison: dict, sessions: list[Session],
                          tolerance_mm: float | None = None) -> Verdict:
    """The verdict of ``selfcal recalibrate``: is the arm back to its accuracy, and what changed."""
    accuracy = comparison["accuracy"]
    floor, floor_what = instrument_floor(sessions, "mm")
    if tolerance_mm is not None:
        tolerance = _tolerance(tolerance_mm, "mm", floor, floor_what, 1.0)
    else:
        before = ((previous_summary.get("residuals") or {}).get("holdout") or {}).get("rms_mm")
        candidates = []
        if before is not None:
            candidates.append(Tolerance(RECALIBRATION_FACTOR * before, "mm",
                                        f"default: {RECALIBRATION_FACTOR:g} x the previous calibration's "
                                        f"cross-validated RMS error ({before:.3g} mm)"))
        if floor is not None:
            candidates.append(Tolerance(DEFAULT_NOISE_FACTOR * floor, "mm",
                                        f"default: {DEFAULT_NOISE_FACTOR:g} x {floor_what} ({floor:.3g} mm)"))
        if not candidates:
            return cannot_tell("neither the previous calibration's accuracy nor the instrument's uncertainty is "
                               "known; give --tolerance-mm")
        tolerance = max(candidates, key=lambda t: t.value)
    verdict = judge("cross-validated RMS error after the refit", accuracy.get("after_holdout_rms_mm"), tolerance,
                    floor, floor_what or "what the instrument resolves",
                    missing="no pose was kept out of the refit, so nothing measures its error on new poses")
    changed = comparison.get("summary") or []
    return with_note(verdict, f"what changed: {changed[0]}" if changed else
                     "nothing changed beyond the combined uncertainty of the two calibrations")


def audit_verdict(result: dict, calibration_summary: dict | None, ap_tolerance_mm: float | None = None,
                  rp_tolerance_mm: float | None = None) -> Verdict:
    """The verdict of ``selfcal audit report`` from its figures ``result``."""
    name = "calibrated" if "calibrated" in result["models"] else "nominal"
    poses = result["models"][name]["poses"]
    floor = result.get("tracker_uncertainty_mm")
    floor_what = "the tracker's uncertainty at the audit's points"
    worst = max(poses, key=lambda entry: entry["AP_mm"])
    if ap_tolerance_mm is not None:
        ap_tolerance = _tolerance(ap_tolerance_mm, "mm", None, "", 1.0, "--ap-tolerance-mm", "ap_tolerance_mm")
    else:
        held = (((calibration_summary or {}).get("residuals") or {}).get("holdout") or {}).get("rms_mm")
        ap_tolerance = None if held is None else Tolerance(
            AUDIT_FACTOR * held, "mm", f"default: {AUDIT_FACTOR:g} x the calibration's cross-validated RMS error "
                                       f"({held:.3g} mm)")
    checks = []
    if ap_tolerance is None:
        checks.append(cannot_tell(f"no acceptance level for AP: give --ap-tolerance-mm (the arm's specified "
                                  f"accuracy) or --calibration (largest AP {worst['AP_mm']:.3g} mm at {worst['pose']}, "
                                  f"commanded by the {name} model)", None, worst["AP_mm"]))
    else:
        checks.append(judge(f"largest AP ({worst['pose']}, commanded by the {name} model)", worst["AP_mm"],
                            ap_tolerance, floor, floor_what))
    if rp_tolerance_mm is not None:
        worst_rp = max(poses, key=lambda entry: entry["RP_mm"])
        checks.append(judge(f"largest RP ({worst_rp['pose']})", worst_rp["RP_mm"],
                            _tolerance(rp_tolerance_mm, "mm", None, "", 1.0, "--rp-tolerance-mm", "rp_tolerance_mm"), floor, floor_what))
    return combine(checks)


def hand_eye_verdict(summary: dict) -> Verdict:
    """The verdict of a hand-eye calibration: its cross-validated RMS against twice the data's floor.

    The floor is what a perfect model would still show: the corners' noise (per-photo PnP) and the
    flange poses' own error (stated, or estimated from the residuals' structure) carried into the
    photos. A fit at that floor passes. Where the flange error had to be estimated and comes out
    larger than a controller's report carries, the residuals may be a model error as well as
    flange error, and the data cannot tell which: CANNOT TELL, with the reason.
    """
    flange = summary.get("flange_sigma") or {}
    verdict = _judge_hand_eye("cross-validated RMS reprojection error on poses left out of each fold",
                              (summary.get("holdout") or {}).get("rms_px"), summary.get("floor_px"),
                              summary.get("pixel_sigma"), flange, flange.get("source", "").startswith("estimated"),
                              "too few poses to leave any out, so nothing measures the error on new poses")
    poses = len({photo["pose"] for photo in summary.get("photos") or []})
    if verdict.result == "FAIL" and 0 < poses < MIN_JUDGED_POSES:
        # A fold refitted from four poses or fewer is not the fit from all of them: on a real
        # five-photo recording the folds held out at 5.3-7.8 px while the five-photo fit predicted
        # two new photos at 1.3-1.5 px.
        return cannot_tell(f"{verdict.reason}, but with {poses} poses each fold refits from {poses - 1}, too few to "
                           f"stand for the fit from all {poses}; validate on new photos (`selfcal validate`) or "
                           f"record at least {MIN_JUDGED_POSES} poses", verdict.tolerance, verdict.measured)
    return verdict


# Below this many poses a hand-eye fit's cross-validation cannot fail it, only leave it untold.
MIN_JUDGED_POSES = 6


def hand_eye_validation_verdict(calibration, session: Session, result: dict, tolerance_mm: float | None = None) -> Verdict:
    """The verdict of ``selfcal validate`` of a hand-eye calibration on another session's photos.

    Judged as the calibration was: the RMS reprojection error against twice the floor of this
    session's photos, the corners' noise (its own per-photo PnP) and the flange poses' error carried
    into them. The flange error is the calibration's (the same controller reports both sessions'
    poses) or stated with ``--flange-sigma``; it is never estimated from this session's residuals,
    which would count the calibration's own error as flange error. An estimate the calibration had
    to make beyond what a controller reports leaves the verdict CANNOT TELL, as it left calibrate's.
    """
    _tolerance(tolerance_mm, "px", None, "", TOLERANCE_FACTOR)  # refuses mm: photos are judged in px
    flange = result["flange_sigma"]
    measured = result.get("reprojection_rms_px")
    if own_fit_data(calibration, session):
        floor = result.get("floor_px")
        return cannot_tell(f"{session.path} holds the photos the calibration was fitted on: their RMS error "
                           f"({measured:.3g} px) is the fit's own, not what new photos will see; validate on a "
                           f"session the fit did not use",
                           None if floor is None else Tolerance(TOLERANCE_FACTOR * floor, "px", "the data's floor"),
                           measured)
    return _judge_hand_eye("RMS reprojection error on this session's photos, predicted through its flange poses",
                           measured, result.get("floor_px"), result.get("pixel_sigma"), flange, flange["estimated"],
                           "no photo of the session showed the board")


def _judge_hand_eye(what: str, measured: float | None, floor: float | None, pixel_sigma: float | None, flange: dict,
                    estimated: bool, missing: str) -> Verdict:
    """``measured`` (px) against TOLERANCE_FACTOR times the ``floor`` (px) that the corners' noise
    ``pixel_sigma`` and the flange error ``flange`` (m, rad, mm, deg, source) give; CANNOT TELL where
    the flange error was ``estimated`` beyond what a controller reports."""
    if floor is None:
        return cannot_tell("no estimate of the corners' noise to derive a tolerance from")
    floor_what = (f"the data's floor: the corners' noise ({pixel_sigma:.3g} px a coordinate, per-photo PnP) "
                  f"and the flange poses' own error ({flange['mm']:.3g} mm, {flange['deg']:.3g} deg a axis, "
                  f"{flange['source']})")
    tolerance = Tolerance(TOLERANCE_FACTOR * floor, "px", f"default: {TOLERANCE_FACTOR:g} x {floor_what} = {floor:.3g} px")
    if estimated and (flange["m"] > PLAUSIBLE_FLANGE_M or flange["rad"] > PLAUSIBLE_FLANGE_RAD):
        return cannot_tell(f"the residuals would need flange poses in error by {flange['mm']:.3g} mm and "
                           f"{flange['deg']:.3g} deg a axis to be noise, more than a controller reports "
                           f"({1e3 * PLAUSIBLE_FLANGE_M:g} mm, {np.degrees(PLAUSIBLE_FLANGE_RAD):g} deg); either the "
                           f"poses are that poor or the model misses something; state --flange-sigma to judge",
                           tolerance, measured)
    return judge(what, measured, tolerance, floor, "the data's floor", missing=missing)
