"""An arm against its siblings: what a fleet knows that no single arm's calibration can say.

Every figure is compared across the arms of one type (same joints, same description) by a robust
z-score, ``z = (value - fleet median) / s`` with ``s = max(1.4826 * MAD, floor)``: the median and
the median absolute deviation ignore the few arms that differ, so a bent arm cannot hide itself by
widening the spread, and the floor keeps figures on which the fleet agrees better than any
instrument measures from calling measurement noise damage. An arm is flagged when a figure's
``|z|`` exceeds ``THRESHOLD``; fewer than ``MIN_ARMS`` arms of a type are not compared.

Calibrations are compared by the geometry of their joint axes (:mod:`rigs.axis_geometry`: angles
and distances between consecutive axes, offsets and zero turns along each), read from the
calibrated robot.urdf that ``selfcal calibrate`` writes, less the description's. Unlike the fit's
own corrections, which trade off between coupled parameters differently from one fit to the next,
these are the same for every fit that predicts alike. Accuracy (held-out RMS) is compared on a log
scale, one-sided: an arm far less accurate than its siblings after calibration.

Self-models are compared by each link's deviation from the description that ``selfcal selfmodel
check`` reports (one-sided: larger than the siblings') and by Chamfer-L1 where it was measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rigs import axis_geometry
from rigs.errors import InputError

THRESHOLD = 8.0
MIN_ARMS = 5
MAD_TO_SIGMA = 1.4826
# Floors of the robust spread, in the reported units: below these, arms differ by less than a
# tracker resolves (angles, lengths), a noise-level relative change (log10 accuracy), or a voxel (mm).
FLOORS = {"deg": 0.005, "mm": 0.02, "log10": float(np.log10(1.25)), "link_mm": 1.0}
REPORTED = {"rad": (float(np.degrees(1.0)), "deg"), "m": (1000.0, "mm")}
METHOD = ("Each figure is compared across the arms of one type (the same joints from the same base to the same tip) "
          "by a robust z-score, z = (value - fleet median) / max(1.4826 MAD, floor): the median and the median "
          "absolute deviation ignore the few arms that differ, so a bent arm cannot hide by widening the spread, and "
          "the floor keeps a fleet that agrees better than an instrument measures from calling noise damage. "
          f"Fewer than {MIN_ARMS} arms of a type are not compared. Calibrations are compared by the geometry of "
          "their joint axes (angles and distances between consecutive axes, offsets and turns along each), which "
          "every equivalent fit shares; held-out accuracy on a log scale, one-sided.")
# What each figure measures, for the sentence: {first} and {second} are the two axes of a pair, {at} the axis a
# figure sits on.
DESCRIBE = {
    "angle": "the angle of {second}'s axis to {first}'s",
    "distance": "the distance between {first}'s and {second}'s axes",
    "offset": "where the common normals meet {at}'s axis",
    "twist": "the turn about {at}'s axis between its neighbours' normals",
}


def robust_spread(values: np.ndarray, floor: float) -> tuple[float, float]:
    """(median, robust standard deviation with the floor) of ``values`` (n,)."""
    median = float(np.median(values))
    return median, max(MAD_TO_SIGMA * float(np.median(np.abs(values - median))), floor)


def distribution(values: dict[str, float], floor: float, unit: str) -> dict:
    """The fleet's distribution of one figure and each arm's robust z-score."""
    array = np.array(list(values.values()), dtype=float)
    median, sigma = robust_spread(array, floor)
    return {"unit": unit, "n": len(array), "median": median, "robust_sigma": sigma, "floor": floor,
            "min": float(array.min()), "p05": float(np.percentile(array, 5)), "p95": float(np.percentile(array, 95)),
            "max": float(array.max()), "values": dict(values),
            "z": {arm: (value - median) / sigma for arm, value in values.items()}}


# -- calibrations -----------------------------------------------------------------------------------

@dataclass
class CalibratedArm:
    """What the comparison reads of one arm: its calibration folder and the commands' JSON."""

    arm: str
    folder: Path  # DIR/<arm>/, exactly as `selfcal calibrate` wrote it
    nominal_urdf: Path  # the description the arm was recorded with (its first session's robot.urdf)
    calibrate: dict  # `selfcal calibrate --json`
    validate: dict | None  # `selfcal validate --json`, when the row named a held-out session


def _calibration_document(folder: Path) -> dict:
    from calib.io.document import read_calibration_document

    path, document = read_calibration_document(folder)  # format version and units checked there
    if not isinstance(document, dict) or document.get("format") != "selfcal-calibration":
        raise InputError(f"{path}: is not a selfcal calibration.")
    return document


def _rms(figures: dict | None) -> float | None:
    if not isinstance(figures, dict):
        return None
    unit = figures.get("unit", "mm")
    value = figures.get(f"rms_{unit}", figures.get("rms_mm"))
    return None if value is None or unit != "mm" else float(value)


def accuracy(arm: CalibratedArm) -> dict:
    """Held-out accuracy of one arm, calibrated and nominal (mm): from its validation session when it
    has one, else from the poses ``selfcal calibrate`` held out."""
    if arm.validate is not None and arm.validate.get("rms_mm") is not None:
        return {"source": "validation session", "rms_mm": float(arm.validate["rms_mm"]),
                "nominal_rms_mm": arm.validate.get("nominal_rms_mm"), "n": arm.validate.get("n"),
                "outliers": len(arm.validate.get("outliers") or [])}
    residuals = arm.calibrate.get("residuals") or {}
    held = _rms(residuals.get("holdout"))
    if held is not None:
        method = (residuals.get("validation") or {}).get("method")
        source = "cross-validation" if method == "cross-validation" else "held-out poses"
        return {"source": source, "rms_mm": held, "nominal_rms_mm": _rms(residuals.get("holdout_nominal")),
                "n": (residuals.get("holdout") or {}).get("n"), "outliers": len(arm.calibrate.get("holdout_outliers") or [])}
    return {"source": "fit poses (nothing held out)", "rms_mm": _rms(residuals.get("fit")),
            "nominal_rms_mm": _rms(residuals.get("fit_nominal")), "n": (residuals.get("fit") or {}).get("n"), "outliers": 0}


def arm_figures(arm: CalibratedArm) -> dict:
    """One arm's figures: accuracy, identifiability, outliers, axis geometry (deviations from the
    description, reported units), the fit's own parameters."""
    document = _calibration_document(arm.folder)
    robot = document.get("robot") or {}
    base, tip = robot.get("base_link"), robot.get("tip_link")
    calibrated = axis_geometry.axis_lines(arm.folder / "robot.urdf", base, tip)
    nominal = axis_geometry.axis_lines(arm.nominal_urdf, base, tip)
    geometry = {}
    for invariant in axis_geometry.deviations(calibrated, nominal):
        scale, unit = REPORTED[axis_geometry.UNITS[invariant.kind]]
        geometry[invariant.name] = {"joint": invariant.joint, "kind": invariant.kind, "value": invariant.value * scale,
                                    "unit": unit}
    parameters = {}
    for joint, entry in (document.get("joints") or {}).items():
        for axis, value in zip("xyz", entry.get("delta_xyz") or []):
            parameters[f"{joint}.translation_{axis}"] = {"value": 1000.0 * float(value), "unit": "mm"}
        for axis, value in zip("xyz", entry.get("delta_rpy") or []):
            parameters[f"{joint}.rotation_{axis}"] = {"value": float(np.degrees(value)), "unit": "deg"}
        if entry.get("zero_offset") is not None:
            parameters[f"{joint}.zero"] = {"value": float(np.degrees(entry["zero_offset"])), "unit": "deg"}
    return {"accuracy": accuracy(arm),
            "identifiability": {"identifiable": arm.calibrate.get("identifiable"),
                                "parameters": arm.calibrate.get("parameters"),
                                "condition_number": arm.calibrate.get("condition_number")},
            "outliers": len(arm.calibrate.get("outliers") or []),
            "geometry": geometry, "parameters": parameters,
            "joints": [line.joint for line in calibrated],
            "parent_links": {line.joint: line.parent_link for line in calibrated},
            "type": [base, tip, *[line.joint for line in calibrated]]}


def pair_figures(first: str, second: str) -> list[str]:
    """The figures that change when the axis of ``second`` moves relative to the axis of ``first`` (its
    neighbour towards the base): their angle and distance, and the offsets and turns along both axes,
    where the normal between them meets each."""
    return [f"{second}.angle", f"{second}.distance", f"{first}.offset", f"{first}.twist", f"{second}.offset",
            f"{second}.twist"]


def explain(z: dict[str, float], joints: list[str], threshold: float = THRESHOLD) -> list[tuple[str, str, list[str]]]:
    """Which consecutive axes moved: (first, second, flagged figures) for each, strongest first.

    Every figure beyond the threshold is charged to a pair of consecutive axes that contains it; among
    those, the pair whose figures together sit farthest from the fleet (sum of z squared, flagged or
    not) is taken first, its flagged figures are explained, and so on until none is left. A turn
    along one axis that is flagged alone is charged to the pair that starts at that axis (its zero).
    """
    remaining = {name for name, value in z.items() if abs(value) > threshold}
    found = []
    pairs = list(zip(joints, joints[1:]))
    while remaining:
        candidates = [(first, second) for first, second in pairs if remaining & set(pair_figures(first, second))]
        if not candidates:
            break
        first, second = max(candidates, key=lambda pair: sum(z.get(f, 0.0) ** 2 for f in pair_figures(*pair)))
        hits = sorted((f for f in pair_figures(first, second) if f in remaining), key=lambda f: -abs(z[f]))
        if len(hits) == 1 and hits[0] == f"{second}.twist" and second != joints[-1]:
            # A turn about one axis alone is that joint's zero: both pairs along the axis hold it, and
            # noise must not decide which one names it, so it goes to the pair that starts there.
            first, second = second, joints[joints.index(second) + 1]
        found.append((first, second, hits))
        remaining -= set(hits)
    return found


def _geometry_sentence(arm: str, first: str, second: str, hits: list[dict],
                       parent: dict[str, str]) -> tuple[str, str, list[str]]:
    """(sentence, the joint it names, the links it suspects) for one moved pair of axes.

    A placement names the link that carries the moved axis. A zero names both links along the
    joint: either one bent about an axis parallel to the joint's turns the rest of the arm about
    that axis just as a slipped zero does, and the axes cannot tell them apart."""
    def described(hit: dict, main: bool) -> str:
        unit = "degrees" if hit["unit"] == "deg" else "mm"
        what = DESCRIBE[hit["kind"]].format(first=first, second=second, at=hit["joint"])
        if main:
            return (f"{abs(hit['deviation']):.2f} {unit} from the fleet median ({what}; robust z {hit['z']:+.0f}, "
                    f"threshold {THRESHOLD:g}")
        return f"; {what}: {abs(hit['deviation']):.2f} {unit} off, z {hit['z']:+.0f}"

    zero_only = [h["figure"] for h in hits] == [f"{first}.twist"]
    named = first if zero_only else second
    text = (f"{arm}: joint {named} {'zero' if zero_only else 'placement'} {described(hits[0], True)}"
            + "".join(described(other, False) for other in hits[1:]) + ")")
    carrier = parent.get(second, "the link between them")
    if zero_only:
        links = [parent[first], carrier] if first in parent else [carrier]
        text += f": re-mastered or a slipped encoder, or {' or '.join(links)} bent about that axis?"
    else:
        links = [carrier]
        text += f": a bent {carrier}?"
    return text, named, links


def compare_calibrations(figures: dict[str, dict]) -> dict:
    """Distributions and flags of a fleet's calibrated arms, from each arm's :func:`arm_figures`.

    Returns {"arms": {arm: {figures..., "flags": [sentences], "flag_details": [...]}},
    "types": [{"joints": [...], "arms": [...], "compared": bool}], "geometry": {figure: distribution},
    "parameters": {...}, "accuracy": distribution, "threshold": ..., "method": ...}.
    """
    result = {"threshold": THRESHOLD, "min_arms": MIN_ARMS, "floors": FLOORS, "method": METHOD,
              "arms": {}, "types": [], "geometry": {}, "parameters": {}, "accuracy": None}
    for name, figure in figures.items():
        result["arms"][name] = dict(figure, flags=[], flag_details=[])
    groups: dict[tuple, list[str]] = {}
    for name, figure in figures.items():
        groups.setdefault(tuple(figure["type"]), []).append(name)
    for key, names in groups.items():
        compared = len(names) >= MIN_ARMS
        result["types"].append({"base_link": key[0], "tip_link": key[1], "joints": list(key[2:]), "arms": names,
                                "compared": compared})
        if not compared:
            continue
        first = figures[names[0]]
        parent = first["parent_links"]
        order = {joint: i for i, joint in enumerate(first["joints"])}
        for figure_name in sorted(first["geometry"], key=lambda f: (order[first["geometry"][f]["joint"]],
                                                                   axis_geometry.KINDS.index(first["geometry"][f]["kind"]))):
            unit = first["geometry"][figure_name]["unit"]
            values = {name: figures[name]["geometry"][figure_name]["value"] for name in names}
            spread = distribution(values, FLOORS[unit], unit)
            spread.update(joint=first["geometry"][figure_name]["joint"], kind=first["geometry"][figure_name]["kind"])
            result["geometry"][figure_name] = spread
        for parameter in first["parameters"]:
            unit = first["parameters"][parameter]["unit"]
            values = {name: figures[name]["parameters"][parameter]["value"] for name in names
                      if parameter in figures[name]["parameters"]}
            if len(values) == len(names):
                result["parameters"][parameter] = distribution(values, FLOORS[unit], unit)
        for name in names:
            z = {figure_name: spread["z"][name] for figure_name, spread in result["geometry"].items()}
            for first_joint, second_joint, flagged in explain(z, first["joints"]):
                hits = [{"figure": f, "joint": result["geometry"][f]["joint"], "kind": result["geometry"][f]["kind"],
                         "unit": result["geometry"][f]["unit"], "z": z[f], "value": result["geometry"][f]["values"][name],
                         "median": result["geometry"][f]["median"],
                         "deviation": result["geometry"][f]["values"][name] - result["geometry"][f]["median"]}
                        for f in flagged]
                sentence, named, links = _geometry_sentence(name, first_joint, second_joint, hits, parent)
                result["arms"][name]["flags"].append(sentence)
                result["arms"][name]["flag_details"].append({"kind": "geometry", "joint": named, "link": links[0],
                                                             "links": links,
                                                             "axes": [first_joint, second_joint], "z": hits[0]["z"],
                                                             "figures": hits})
        held = {name: figures[name]["accuracy"]["rms_mm"] for name in names
                if figures[name]["accuracy"]["rms_mm"] and figures[name]["accuracy"]["rms_mm"] > 0}
        if len(held) >= MIN_ARMS:
            logs = distribution({name: float(np.log10(value)) for name, value in held.items()}, FLOORS["log10"], "log10")
            result["accuracy"] = {"median_rms_mm": 10 ** logs["median"], "robust_sigma_log10": logs["robust_sigma"],
                                  "values_mm": held, "z": logs["z"]}
            for name, z in logs["z"].items():
                if z > THRESHOLD:
                    result["arms"][name]["flags"].append(
                        f"{name}: held-out RMS {held[name]:.3f} mm against the fleet median {10 ** logs['median']:.3f} mm "
                        f"(robust z {z:+.0f} on a log scale, threshold {THRESHOLD:g}): a loose reflector or tool, a worn "
                        f"joint, or a disturbed session?")
                    result["arms"][name]["flag_details"].append(
                        {"kind": "accuracy", "figure": "heldout_rms_mm", "value": held[name],
                         "median": 10 ** logs["median"], "z": z})
    return result


def add_calibration_comparison(document: dict, out: Path, table_folder: Path) -> None:
    """Fold :func:`compare_calibrations` of the arms that succeeded into a fleet document."""
    arms = []
    for name, record in document["arms"].items():
        if record["status"] != "ok":
            continue
        outputs = record.get("outputs") or {}
        arms.append(CalibratedArm(name, Path(out) / name, Path(table_folder) / record["sessions"][0] / "robot.urdf",
                                  outputs.get("calibrate") or {}, outputs.get("validate")))
    figures = {}
    for arm in arms:
        try:
            figures[arm.arm] = arm_figures(arm)
        except InputError as error:  # a folder edited since it was written; the arm stays ok, but uncompared
            document["arms"][arm.arm]["comparison_problem"] = str(error)
    comparison = compare_calibrations(figures)
    for name, figures in comparison.pop("arms").items():
        record = document["arms"][name]
        record["figures"] = {key: figures[key] for key in ("accuracy", "identifiability", "outliers", "geometry")}
        record["flags"], record["flag_details"] = figures["flags"], figures["flag_details"]
        record["flagged"] = bool(figures["flags"])
    document["comparison"] = comparison
