"""Recalibration after a crash: refit from a previous calibration and say what changed.

The new fit starts from the previous calibration's values and moves only along the parameter
combinations the new data identifies, so an unchanged arm keeps its parameters and a bent link
shows up as the smallest change that explains the data. Each parameter's change is compared with
the combined uncertainty of both fits; joints are ranked by their most significant change and
described in words ("lbr_iiwa_joint_4's placement rotated 2.01 +- 0.002 degrees about x: a bent
lbr_iiwa_link_3").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calib.calibration import Calibration
from calib.calibrator import Calibrator
from calib.deflection.modes import geometry_of
from calib.sensors.blocks import stack
from calib.sensors.figures import ErrorStats
from calib.sensors.tracker_poses import pose_errors, register_poses
from calib.workflows.validate import nominal_errors
from capture.session import Session, load_session
from rigs import urdf as urdf_io
from rigs.errors import InputError

AXES = ("x", "y", "z")
SIGNIFICANT = 5.0  # a change beyond this many combined standard deviations is reported
# Changes too small to matter whatever their significance (tracker-level), so noise in a very
# precise fit is not called damage.
FLOOR = {"translation": 20e-6, "rotation": np.radians(0.002), "zero": np.radians(0.002)}


@dataclass
class Change:
    joint: str
    parameter: str  # "translation_x".."rotation_z", "zero"
    before: float  # m or rad
    after: float
    sigma: float  # combined standard deviation of the change
    significance: float  # |after - before| / sigma
    inseparable_from: tuple[str, ...] = ()  # parameters the data cannot tell this change apart from

    def as_dict(self) -> dict:
        scale, unit = (1e3, "mm") if self.parameter.startswith("translation") else (180 / np.pi, "deg")
        return {"joint": self.joint, "parameter": self.parameter, "unit": unit,
                "before": self.before * scale, "after": self.after * scale,
                "change": (self.after - self.before) * scale, "sigma": self.sigma * scale,
                "significance": self.significance, "inseparable_from": list(self.inseparable_from)}


def arm_change(previous: Calibration, new: Calibration) -> tuple[np.ndarray, np.ndarray, dict[str, list[str]]]:
    """The smallest change of the arm's own parameters that the new data asks for.

    What the data cannot tell apart (a rotation of joint 1 about its axis and of the tracker about
    the base's z, a translation along a joint axis and the next joint's placement) can be traded
    between parameters without changing any prediction. Among all such equivalent solutions, take
    the one whose deltas and zero offsets move least from the previous calibration (in the fit's
    column-scaled units), so a tracker that was set up again is not called damage.
    Returns (deltas (dof, 6), zero offsets (dof,), partners: parameter name -> names it cannot be
    told apart from).
    """
    model, result = new.error_model, new.solve
    theta = result.theta
    _, jacobian, _ = stack(result.blocks, model, theta)
    free = np.flatnonzero(model.free)
    columns = jacobian[:, free]
    norms = np.linalg.norm(columns, axis=0)
    norms = np.where(norms > 0, norms, 1.0)
    _, singular, vt = np.linalg.svd(columns / norms, full_matrices=True)
    rank = int((singular > singular[0] * 1e-9).sum())
    null = vt[rank:].T  # (n_free, n_null) in scaled coordinates
    previous_theta = theta.copy()
    previous_theta[model.delta_slice] = np.asarray(previous.deltas, float).ravel()
    previous_theta[model.zero_slice] = np.asarray(previous.zero_offsets, float)
    difference = (theta - previous_theta)[free] * norms
    groups = np.array([model.names[i].group for i in free])
    arm = np.isin(groups, ("delta", "zero"))
    partners: dict[str, list[str]] = {}
    if null.shape[1]:
        w = np.linalg.lstsq(null[arm], -difference[arm], rcond=None)[0]
        difference = difference + null @ w
        # Two changed parameters the data cannot tell apart: e_i - c e_j lies in the null space.
        moved = [i for i in np.flatnonzero(arm) if abs(difference[i]) > 1e-9]
        names = [model.names[i].name for i in free]
        for a_index in moved:
            for b_index in moved:
                if a_index == b_index:
                    continue
                pair = np.zeros((len(free), 2))
                pair[a_index, 0], pair[b_index, 1] = 1.0, 1.0
                inside = null.T @ pair  # the pair's span seen from the null space
                if np.linalg.svd(inside, compute_uv=False)[0] > 0.99:
                    partners.setdefault(names[a_index], []).append(names[b_index])
    change = np.zeros_like(theta)
    change[free] = difference / norms
    deltas = np.asarray(previous.deltas, float) + change[model.delta_slice].reshape(-1, 6)
    zeros = np.asarray(previous.zero_offsets, float) + change[model.zero_slice]
    return deltas, zeros, partners


def previous_vector(previous: Calibration, new: Calibration) -> np.ndarray:
    """The previous calibration in the new fit's layout: its arm and reflectors, the new frames' references."""
    model = new.error_model
    theta = new.solve.theta.copy()
    theta[model.delta_slice] = np.asarray(previous.deltas, float).ravel()
    theta[model.zero_slice] = np.asarray(previous.zero_offsets, float)
    for sl in model.sensor_slices.values():
        theta[sl] = 0.0  # the references were registered with the previous model
    for name, sl in model.target_slices.items():
        if name in previous.targets:
            theta[sl] = previous.targets[name]
    return theta


def single_joint_explanations(previous: Calibration, new: Calibration, iterations: int = 4) -> list[dict]:
    """For each joint: how well a change of that joint alone explains the new data.

    Starting from the previous calibration, refit only one joint's placement and zero offset
    (plus the tracker frames, reflectors and any other non-arm parameters) by Gauss-Newton.
    Returns, best first, {joint, cost_ratio (that explanation's cost over the full refit's),
    rotation_deg, translation_mm (the size of the joint's placement change), zero_deg}: a bent
    link shows as one joint whose change alone explains everything.
    """
    model, blocks = new.error_model, new.solve.blocks
    start = previous_vector(previous, new)
    groups = np.array([p.group for p in model.names])
    owners = np.array([p.owner for p in model.names])
    nuisance = model.free & ~np.isin(groups, ("delta", "zero"))
    full_cost = float(np.sum(stack(blocks, model, new.solve.theta, jacobian=False)[0] ** 2))
    result = []
    for joint in model.chain.joint_names:
        free = np.flatnonzero(nuisance | (model.free & (owners == joint) & np.isin(groups, ("delta", "zero"))))
        theta = start.copy()
        for _ in range(iterations):
            residuals, jacobian, _ = stack(blocks, model, theta)
            columns = jacobian[:, free]
            norms = np.linalg.norm(columns, axis=0)
            norms = np.where(norms > 0, norms, 1.0)
            step = np.linalg.lstsq(columns / norms, -residuals, rcond=1e-10)[0] / norms
            theta[free] += step
        cost = float(np.sum(stack(blocks, model, theta, jacobian=False)[0] ** 2))
        j = model.chain.joint_names.index(joint)
        change = (theta - start)[model.delta_slice].reshape(-1, 6)[j]
        result.append({"joint": joint, "cost_ratio": cost / max(full_cost, 1e-300),
                       "rotation_deg": float(np.degrees(np.linalg.norm(change[3:]))),
                       "translation_mm": float(np.linalg.norm(change[:3]) * 1e3),
                       "zero_deg": float(np.degrees((theta - start)[model.zero_slice][j]))})
    return sorted(result, key=lambda item: item["cost_ratio"])


def compare(previous: Calibration, new: Calibration) -> list[Change]:
    """Every parameter that changed beyond SIGNIFICANT combined sigmas (and beyond FLOOR).

    Ordered by joint, the joint whose change alone best explains the new data first (see
    :func:`single_joint_explanations`), then by significance inside a joint."""
    changes = []
    deltas, zeros, partners = arm_change(previous, new)
    for j, joint in enumerate(new.joint_names):
        for c in range(6):
            kind = "translation" if c < 3 else "rotation"
            before, after = float(previous.deltas[j, c]), float(deltas[j, c])
            sigma = float(np.hypot(previous.delta_std[j, c], new.delta_std[j, c]))
            changes.append(_change(joint, f"{kind}_{AXES[c % 3]}", kind, before, after, sigma))
        sigma = float(np.hypot(previous.zero_std[j], new.zero_std[j]))
        changes.append(_change(joint, "zero", "zero", float(previous.zero_offsets[j]), float(zeros[j]), sigma))
    significant = [c for c in changes if c is not None]
    order = {item["joint"]: rank for rank, item in enumerate(single_joint_explanations(previous, new))}
    for change in significant:
        key = f"{change.joint}.zero" if change.parameter == "zero" else \
            f"{change.joint}.delta.{change.parameter[-1] if change.parameter.startswith('translation') else 'r' + change.parameter[-1]}"
        change.inseparable_from = tuple(partners.get(key, ()))
    # The joint whose change alone best explains the new data first; inside a joint, by significance.
    return sorted(significant, key=lambda c: (order[c.joint], -c.significance))


def _change(joint, parameter, kind, before, after, sigma) -> Change | None:
    difference = abs(after - before)
    if difference < FLOOR[kind]:
        return None
    significance = difference / max(sigma, 1e-12)
    if significance < SIGNIFICANT:
        return None
    return Change(joint, parameter, before, after, sigma, significance)


def describe(changes: list[Change], parent_links: dict[str, str]) -> list[str]:
    """One sentence per changed joint, most significant joint first."""
    sentences, seen = [], []
    for change in changes:
        if change.joint in seen:
            continue
        seen.append(change.joint)
        own = [c for c in changes if c.joint == change.joint]
        rotations = [c for c in own if c.parameter.startswith("rotation")]
        translations = [c for c in own if c.parameter.startswith("translation")]
        zero = [c for c in own if c.parameter == "zero"]
        parts = []
        if rotations:
            r = max(rotations, key=lambda c: abs(c.after - c.before))
            parts.append(f"rotated {np.degrees(r.after - r.before):+.3f} +- {np.degrees(r.sigma):.2g} degrees about "
                         f"{r.parameter[-1]}")
        if translations:
            t = max(translations, key=lambda c: abs(c.after - c.before))
            parts.append(f"moved {(t.after - t.before) * 1e3:+.3f} +- {t.sigma * 1e3:.2g} mm along {t.parameter[-1]}")
        sentence = f"{change.joint}'s placement " + " and ".join(parts) if parts else ""
        if rotations or translations:
            sentence += f": a bent {parent_links.get(change.joint, 'parent link')}"
            mates = sorted({m.split(".")[0] for c in rotations + translations for m in c.inseparable_from} - {change.joint})
            if mates and not rotations:
                sentence += f" (or the same change seen at {', '.join(mates)}: the data cannot tell them apart)"
        if zero and not (rotations or translations):  # beside a placement change, a zero shift is the same rotation
            z = zero[0]
            zero_text = (f"{change.joint}'s zero shifted {np.degrees(z.after - z.before):+.3f} +- {np.degrees(z.sigma):.2g} "
                         f"degrees: a slipped encoder or new mastering")
            sentence = f"{sentence}; {zero_text}" if sentence else zero_text
        sentences.append(sentence)
    return sentences


def explain(explanations: list[dict], parent_links: dict[str, str], changed: bool) -> list[str]:
    """A sentence on whether one joint's change alone explains the new data."""
    if not changed or len(explanations) < 2:
        return []
    best, runner_up = explanations[0], explanations[1]
    if best["cost_ratio"] > 3.0:
        return [f"no single joint explains the change alone (best: {best['joint']}, {best['cost_ratio']:.1f}x the "
                f"full refit's cost): several things changed."]
    return [f"{best['joint']} alone explains the new data ({best['cost_ratio']:.2f}x the full refit's cost; the next "
            f"best, {runner_up['joint']}, {runner_up['cost_ratio']:.0f}x): its placement changed by "
            f"{best['rotation_deg']:.2f} degrees and {best['translation_mm']:.2f} mm, consistent with a bent "
            f"{parent_links.get(best['joint'], 'parent link')}."]


def registered_errors(previous: Calibration, session: Session) -> np.ndarray | None:
    """Errors (M,) m of the previous calibration on new data once its sensors are registered again
    (reflector points: tracker frame and reflectors; probe poses: tracker frame and mount); None for
    data of neither kind."""
    if session.tracker is not None and len(session.tracker.targets):
        return nominal_errors(session, chain=previous.chain, targets=previous.targets)
    if session.tracker_poses is not None and len(session.tracker_poses.pose_index):
        tips = previous.base_T_tip(session.q, session.payload_kg)[session.tracker_poses.pose_index]
        frame, probe = register_poses(tips, session.tracker_poses.tracker_T_probe, rounds=20)
        return pose_errors(frame @ tips @ probe, session.tracker_poses.tracker_T_probe)[0]
    return None


def recalibrate(sessions: list[Session | Path], previous_dir: Path, holdout: float = 0.0, seed: int = 0,
                model: str = "full", folds: int | None = None) -> tuple[Calibration, dict]:
    """Fit ``sessions`` starting from the calibration in ``previous_dir``; returns (new, comparison).

    Any sensors work (tracker points, probe poses, board images); a previous calibration with
    compliance is refitted with compliance (its learned residual, if any, is not: a few dozen poses
    after a crash cannot retrain it)."""
    previous = Calibration.load(Path(previous_dir))
    sessions = [s if isinstance(s, Session) else load_session(Path(s)) for s in sessions]
    first = sessions[0]
    if list(previous.joint_names) != list(first.joint_names) or previous.summary.get("base_link") not in (None, first.base_link):
        raise InputError(f"{previous_dir}: is a calibration of another robot (joints {list(previous.joint_names)}); "
                         f"{first.path} records {list(first.joint_names)}.")
    deflection = geometry_of((previous.deflection or {}).get("mode", "none"))
    new = Calibrator(model=model, deflection=deflection, holdout=holdout, folds=folds, seed=seed).fit(
        sessions, previous=previous)
    changes = compare(previous, new)
    explanations = single_joint_explanations(previous, new)
    tree = urdf_io.parse_urdf(first.urdf_path)
    parents = {j.name: j.parent for j in urdf_io.joints(tree, first.urdf_path).values()}
    before = [e for e in (registered_errors(previous, s) for s in sessions) if e is not None]
    residuals = new.summary.get("residuals", {})
    comparison = {
        "previous": str(previous_dir),
        "changed": [c.as_dict() for c in changes],
        "summary": describe(changes, parents) + explain(explanations, parents, bool(changes)),
        "single_joint_explanations": explanations,
        "accuracy": {
            "before_rms_mm": ErrorStats.of(np.concatenate(before)).rms_mm if before else None,
            "before_note": "previous calibration on the new data, its sensor frames registered again",
            "after_fit_rms_mm": (residuals.get("fit") or {}).get("rms_mm"),
            "after_holdout_rms_mm": (residuals.get("holdout") or {}).get("rms_mm"),
            "after_holdout_method": (residuals.get("validation") or {}).get("description"),
        },
        "significance_threshold_sigma": SIGNIFICANT,
    }
    return new, comparison
