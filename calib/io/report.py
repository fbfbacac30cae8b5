"""report.html: one self-contained page describing a calibration of any kind.

A verdict first (held-out error against the nominal URDF, and how the held-out figure was
obtained), then per sensor the error tables and histograms, the per-pose errors, identifiability,
the parameters with their uncertainties, reflectors, probe, cameras and board, deflection and the
outliers by name.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from calib.deflection.modes import URDF_NOTE
from calib.io.scene import calibration_scene
from rigs import html_report, scene_html
from rigs.transforms import matrix_to_rpy
from rigs.verdicts import Verdict

SENSOR_TITLES = {"tracker_points": "Tracker points", "tracker_poses": "6-DoF probe poses", "board_corners": "Board corners"}
UNIT = {"tracker_points": ("mm", 1e3, "3D point error"), "tracker_poses": ("mm", 1e3, "probe position error"),
        "board_corners": ("px", 1.0, "board corner reprojection error")}


LOADING = ("<p>Mesh paths in robot.urdf are relative to this folder (or <code>package://NAME/...</code> when "
           "written with <code>--ros-package NAME</code>). pybullet and yourdfpy load it as it is. Pinocchio resolves "
           "mesh paths against <code>package_dirs</code>, not the URDF's folder: pass this folder, or, for "
           "<code>package://</code> paths, the folder that holds the package:</p>"
           "<pre>model = pin.buildModelFromUrdf(FOLDER + \"/robot.urdf\")\n"
           "geometry = pin.buildGeomFromUrdf(model, FOLDER + \"/robot.urdf\", pin.GeometryType.COLLISION, "
           "package_dirs=[FOLDER])</pre>")


def _number(value, digits: int = 4) -> str:
    return "n/a" if value is None or (isinstance(value, float) and not np.isfinite(value)) else f"{value:.{digits}g}"


def verdict(summary: dict) -> str:
    """One sentence: the calibration's expected error on new poses against the nominal URDF's."""
    residuals = summary.get("residuals") or {}
    unit = residuals.get("unit", "mm")
    held = residuals.get("holdout")
    key = f"rms_{unit}"
    validation = residuals.get("validation") or {}
    # The nominal URDF measured as the held-out figure was (calibrations written before it was
    # cross-validated too have only the in-sample one).
    nominal = residuals.get("holdout_nominal") or residuals.get("fit_nominal")
    if held and nominal and held.get(key) is not None:
        ratio = nominal[key] / held[key] if held[key] else float("inf")
        return (f"Expected RMS error on new poses {held[key]:.4g} {unit} ({validation.get('description', 'held-out poses')}), "
                f"{ratio:.1f} times better than the nominal URDF ({nominal[key]:.4g} {unit}).")
    fit, nominal = residuals.get("fit") or {}, residuals.get("fit_nominal")
    return (f"Fit RMS {_number(fit.get(key))} {unit} against {_number((nominal or {}).get(key))} {unit} for the nominal "
            f"URDF; no held-out figure ({validation.get('description', 'no poses were held out')}).")


def _histograms(history: dict) -> list[tuple[str, str]]:
    import matplotlib  # matplotlib takes 0.6 s to load; only reports draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # see above

    out = []
    for sensor, errors in history.items():
        if not isinstance(errors, dict) or sensor not in UNIT:
            continue
        unit, scale, what = UNIT[sensor]
        figure, axes = plt.subplots(1, 2, figsize=(11, 3.6))
        for axis, kind, title in ((axes[0], "fit", "calibration poses"), (axes[1], "held", "held-out poses")):
            before, after = errors.get(f"{kind}_before"), errors.get(f"{kind}_after")
            if before is None or not len(before):
                axis.set_title(f"{title}: none")
                continue
            # Log-spaced bins: before and after differ by one to two orders of magnitude.
            values = np.concatenate([before, after]) * scale
            low, high = max(values[values > 0].min(initial=1e-6), 1e-6), max(values.max(), 2e-6)
            bins = np.logspace(np.log10(low) - 0.05, np.log10(high) + 0.05, 50)
            axis.hist(np.asarray(before) * scale, bins, alpha=0.6, label="nominal URDF")
            axis.hist(np.asarray(after) * scale, bins, alpha=0.8, label="calibrated")
            axis.set_xscale("log")
            axis.set_xlabel(f"{what} ({unit}, log scale)")
            axis.set_ylabel("measurements")
            axis.set_title(title)
            axis.legend()
        out.append((f"{SENSOR_TITLES[sensor]}: error before and after", html_report.figure(figure, "errors")))
        labels = errors.get("fit_pose_labels")
        if labels is not None and len(labels) and len(errors.get("fit_after", [])) == len(labels):
            labels = np.asarray(labels)
            poses, index = np.unique(labels, return_inverse=True)
            counts = np.bincount(index)
            after = np.sqrt(np.bincount(index, np.asarray(errors["fit_after"]) ** 2) / counts) * scale
            before = np.sqrt(np.bincount(index, np.asarray(errors["fit_before"]) ** 2) / counts) * scale
            figure, axis = plt.subplots(figsize=(11, 3.2))
            axis.plot(np.arange(len(poses)), after, ".", markersize=4, label="calibrated")
            axis.plot(np.arange(len(poses)), before, ".", markersize=3, alpha=0.5, label="nominal URDF")
            axis.set_yscale("log")
            # The x axis is the pose, so its ticks read as the session's pose names, not indices.
            ticks = np.unique(np.linspace(0, len(poses) - 1, min(len(poses), 12)).round().astype(int))
            axis.set_xticks(ticks, [str(poses[k]) for k in ticks], rotation=30, fontsize=8)
            axis.set_xlabel("calibration pose")
            axis.set_ylabel(f"RMS {what} over the pose ({unit}, log scale)", fontsize=9)
            axis.legend()
            out.append((f"{SENSOR_TITLES[sensor]}: per-pose errors", html_report.figure(figure, "per-pose errors")))
    return out


def _residual_tables(residuals: dict) -> str:
    parts = []
    validation = residuals.get("validation") or {}
    if validation.get("description"):
        parts.append(html_report.paragraph(f"Held-out figures: {validation['description']}."))
    rows = []
    for sensor, figures in (residuals.get("by_sensor") or {}).items():
        unit = "px" if sensor == "board_corners" else "mm"
        for name in ("fit", "fit_nominal", "holdout", "holdout_nominal"):
            entry = figures.get(name)
            if entry:
                rows.append([SENSOR_TITLES.get(sensor, sensor), name, entry.get("n")]
                            + [entry.get(f"{k}_{unit}") for k in ("mean", "rms", "max", "p95")] + [unit]
                            + ([entry.get("angle_rms_deg")] if "angle_rms_deg" in entry else [""]))
    parts.append(html_report.table(["sensor", "set", "n", "mean", "rms", "max", "p95", "unit", "angle rms deg"], rows))
    folds = validation.get("folds_detail") or []
    if folds:
        parts.append(html_report.table(["fold", "held-out poses", f"held-out RMS {validation.get('unit', 'mm')}"],
                                       [[f["fold"], f["poses"], f["rms"]] for f in folds]))
    return "".join(parts)


def _camera_section(calibration) -> str:
    summary = calibration.camera_summary
    rows = []
    for name, pose in calibration.base_T_camera.items():
        stats = summary.get("cameras", {}).get(name, {})
        std = calibration.camera_std.get(name, np.zeros(6))
        rows.append([name, *(pose[:3, 3].tolist()), *np.degrees(matrix_to_rpy(pose[:3, :3])).tolist(),
                     float(np.linalg.norm(std[:3]) * 1e3), stats.get("fit_rms_px"), stats.get("held_rms_px"),
                     stats.get("images_without_board", "")])
    cameras = html_report.table(["camera", "x m", "y m", "z m", "roll deg", "pitch deg", "yaw deg", "position std mm",
                                 "fit RMS px", "held-out RMS px", "images without board"], rows)
    board = calibration.tip_T_board
    board_row = html_report.table(["x mm", "y mm", "z mm", "roll deg", "pitch deg", "yaw deg"],
                                  [[*(board[:3, 3] * 1e3).tolist(), *np.degrees(matrix_to_rpy(board[:3, :3])).tolist()]])
    text = (f"Board {calibration.board.describe()}; corner noise {_number(calibration.pixel_sigma)} px per axis "
            f"(estimated from per-image PnP fits unless given). Reprojection RMS: fit {_number(summary.get('fit_rms_px'))} px "
            f"(nominal URDF with fitted camera and board poses {_number(summary.get('fit_nominal_rms_px'))} px; hand-eye "
            f"initialiser alone {_number(summary.get('hand_eye_fit_rms_px'))} px), held-out {_number(summary.get('holdout_rms_px'))} px "
            f"(nominal URDF measured the same way {_number(summary.get('holdout_nominal_rms_px'))} px).")
    return (html_report.paragraph(text) + "<h3>Camera poses in the base frame (optical frame)</h3>" + cameras
            + _intrinsics_part(calibration) + "<h3>Board on the tip (tip_T_board)</h3>" + board_row)


def _intrinsics_part(calibration) -> str:
    """Fitted intrinsics: values, what camera_info said, standard deviations and the verdict per value."""
    fitted = {name: entry for name, entry in calibration.intrinsics.items() if entry.get("fitted")}
    if not fitted:
        return html_report.paragraph("Intrinsics: each session's camera_info K as recorded (not fitted).")
    rows, notes = [], []
    for name, entry in fitted.items():
        for axis, value in entry["parameters"].items():
            rows.append([name, axis, value["value"], value["recorded"], value["std_px"], value["image_shift_px"],
                         "yes" if value["determined"] else "POORLY DETERMINED"])
        notes += entry.get("notes", [])
    verdict = ("Every fitted intrinsic value is well determined." if not notes else
               "Some fitted intrinsics are poorly determined by these images: " + " ".join(notes))
    return ("<h3>Fitted intrinsics (px, undistorted pixels)</h3>" + html_report.paragraph(verdict)
            + html_report.table(["camera", "value", "fitted", "camera_info", "std", "moves image points by up to",
                                 "determined"], rows))


def _deflection_section(calibration) -> str:
    info = calibration.deflection or {}
    parts = [html_report.paragraph(URDF_NOTE)]
    if calibration.compliance is not None:
        model = calibration.torque_model
        parts.append(html_report.paragraph(
            f"Compliance multiplies the measured joint torques (sign {model.sign:+d}, sensor offsets taken off; the "
            f"arm's gravity model identified from them, {model.summary.get('rms_nm', float('nan')):.3g} N m RMS, "
            f"predicts them where none are measured)." if model is not None else
            "Compliance multiplies the gravity torques of the URDF's inertials and the payload."))
    table = info.get("heldout_comparison") or {}
    if table:
        evidence = info.get("evidence") or "the held-out poses"
        rows = [[f"{mode}{' (chosen)' if mode == info.get('mode') else ''}",
                 *[(entry or {}).get(k) for k in ("mean", "rms", "max", "p95")], (entry or {}).get("fold_rms_spread"),
                 (entry or {}).get("note", "")]
                for mode, entry in table.items()]
        parts.append(html_report.paragraph(f"Held-out error per model, from {evidence} (requested: {info.get('requested')}):"))
        parts.append(html_report.table(["model", "mean", "rms", "max", "p95", "spread across folds", "note"], rows))
    if calibration.compliance is not None:
        rows = [[n, f"{c * 1e6:.4f} ± {s * 1e6:.4f}", (1.0 / c / 1e3) if c > 0 else float("nan")]
                for n, c, s in zip(calibration.joint_names, calibration.compliance, calibration.compliance_std)]
        parts.append(html_report.table(["joint", "compliance µrad/(N m)", "stiffness kN m/rad"], rows))
    if calibration.residual_model is not None:
        parts.append(html_report.paragraph(
            f"Learned residual: {calibration.residual_model.config.members} networks, corrections clipped to "
            f"{calibration.residual_model.bound_m * 1e3:.4f} mm and shrunk where they disagree or the configuration is "
            f"far from the calibration poses."))
    return "".join(parts)


def write_report(calibration, path: Path, previous=None) -> None:
    """report.html of ``calibration`` into ``path`` (beside its robot.urdf); ``previous``: the
    calibration a recalibration replaced (its 3D view colours the links by how far they moved)."""
    summary = calibration.summary
    residuals = summary.get("residuals") or {}
    ident = summary["identifiability"]
    poorly = {name: entry["poorly_determined"] for name, entry in calibration.intrinsics.items()
              if entry.get("fitted") and entry.get("poorly_determined")}
    warning = ("" if not poorly else html_report.paragraph(
        "Fitted intrinsics poorly determined by these images: " + "; ".join(
            f"camera {name}: {', '.join(axes)}" for name, axes in poorly.items())
        + " (see Cameras; fit them from close-up board images with selfcal calibrate-camera).", "warning"))
    judged = summary.get("verdict")
    opening = "" if not judged else Verdict.from_dict(judged).html()
    sections = [("Verdict", opening + html_report.paragraph(verdict(summary), "" if judged else "ok") + warning
                 + "".join(html_report.paragraph(f"Partial excitation: {sentence}", "warning")
                           for sentence in ident.get("not_excited", []))),
                ("3D view", scene_html.embed(calibration_scene(calibration, Path(path).parent, previous))),
                ("Residuals", _residual_tables(residuals))]
    sections += _histograms(calibration.history)
    directions = "".join(f"<li>{html.escape(d)}</li>" for d in ident["directions"])
    sections.append(("Identifiability", html_report.paragraph(
        f"{ident['rank']} of {ident['parameters']} parameters identifiable, condition number "
        f"{ident['condition_number']:.3g}; a-posteriori variance factor {_number(summary.get('variance_factor'), 3)}.")
        + f"<ul>{directions}</ul>"))
    if calibration.validity is not None:
        envelope = calibration.validity
        sections.append(("Validity envelope (joint readings the fit covered)", html_report.table(
            ["joint", "min deg", "max deg", "moved", "margin deg"],
            [[name, float(np.degrees(lo)), float(np.degrees(hi)), "yes" if moved else "no", float(np.degrees(g))]
             for name, lo, hi, moved, g in zip(envelope.joint_names, envelope.lower, envelope.upper, envelope.moved,
                                               envelope.margin)])
            + html_report.paragraph(f"Payloads {envelope.payload_kg[0]:g} to {envelope.payload_kg[1]:g} kg; predict, "
                                    f"correct and validate warn for poses outside.")))
    rows = []
    for i, name in enumerate(calibration.joint_names):
        d, s = calibration.deltas[i], calibration.delta_std[i]
        rows.append([name] + [f"{d[c] * 1e3:+.4f} ± {s[c] * 1e3:.4f}" for c in range(3)]
                    + [f"{np.degrees(d[c]):+.5f} ± {np.degrees(s[c]):.5f}" for c in range(3, 6)]
                    + [f"{np.degrees(calibration.zero_offsets[i]):+.5f} ± {np.degrees(calibration.zero_std[i]):.5f}"])
    sections.append(("Joint parameters (± one standard deviation)", html_report.table(
        ["joint", "dx mm", "dy mm", "dz mm", "rx deg", "ry deg", "rz deg", "zero deg"], rows)))
    if calibration.targets:
        sections.append(("Reflectors (tip frame)", html_report.table(
            ["reflector", "x mm", "y mm", "z mm"],
            [[n] + [f"{v * 1e3:.4f} ± {s * 1e3:.4f}" for v, s in zip(xyz, calibration.target_std.get(n, np.zeros(3)))]
             for n, xyz in calibration.targets.items()])))
    if calibration.tip_T_probe:
        noise = (residuals.get("tracker_poses") or {}).get("noise") or {}
        weighting = ("stated in the data" if noise.get("source") == "stated" else
                     f"estimated from the residuals: {noise.get('sigma_pos_m', float('nan')) * 1e3:.4f} mm, "
                     f"{np.degrees(noise.get('sigma_rot_rad', float('nan'))):.5f} deg per axis")
        mounts = [[p, *(t[:3, 3] * 1e3).tolist(), *np.degrees(matrix_to_rpy(t[:3, :3])).tolist()]
                  for p, t in calibration.tip_T_probe.items()]
        sections.append(("6-DoF probe", html_report.paragraph(f"Position and orientation weighted by their noise ({weighting}).")
                         + html_report.table(["probe", "x mm", "y mm", "z mm", "roll deg", "pitch deg", "yaw deg"], mounts)))
    if calibration.base_T_camera and calibration.tip_T_board is not None:
        sections.append(("Cameras", _camera_section(calibration)))
    if calibration.deflection is not None or calibration.compliance is not None:
        mode = (calibration.deflection or {}).get("mode", "none")
        sections.append((f"Deflection: {mode}", _deflection_section(calibration)))
    outliers, held = summary.get("outliers", []), summary.get("holdout_outliers", [])
    held_items = "".join(
        f"<li>held out {html.escape(o['point'])}: {o['residual_sigma']} sigma, "
        f"{o.get('error_mm', o.get('error_px'))} {'mm' if 'error_mm' in o else 'px'}</li>" for o in held)
    sections.append((f"Outliers ({len(outliers)} in the fit, {len(held)} in held-out poses)",
                     "<p>Decided on the fit (of every pose, unless --holdout kept some out); each is left out of "
                     "the fit and of every cross-validated figure. Outliers in held-out poses are named and kept in "
                     "the held-out figures, which are what unseen data looks like.</p><ul>"
                     + "".join(f"<li>{html.escape(o['point'])}: {o['residual_sigma']} sigma</li>" for o in outliers)
                     + held_items + "</ul>"))
    sections.append(("Loading robot.urdf", LOADING))
    subtitle = f"sessions: {', '.join(summary.get('sessions', []))}; input data {summary.get('data_hash')}"
    html_report.write_page(Path(path), f"Kinematic calibration ({summary.get('model')} model)", sections, subtitle)
