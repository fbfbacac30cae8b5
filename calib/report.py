"""report.html: one self-contained page (plots embedded as base64 PNG) describing a calibration."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import numpy as np

from rigs.files import atomic_write_text


def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _deflection_section(calibration) -> str:
    from calib.deflection import deflection_html  # issue 4

    return deflection_html(calibration)


def write_report(calibration, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from calib.pose_fit import probe_html  # issue 9: 6-DoF probe poses

    history = calibration.history
    summary = calibration.summary
    images = []
    figure, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for axis, kind, title in ((axes[0], "fit", "calibration poses"), (axes[1], "held", "held-out poses")):
        before, after = history.get(f"{kind}_before"), history.get(f"{kind}_after")
        if before is None or not len(before):
            axis.set_title(f"{title}: none")
            continue
        # Log-spaced bins: before and after differ by one to two orders of magnitude.
        values = np.concatenate([before, after]) * 1000.0
        low, high = max(values[values > 0].min(), 1e-6), values.max()
        bins = np.logspace(np.log10(low) - 0.05, np.log10(high) + 0.05, 50)
        axis.hist(before * 1000.0, bins, alpha=0.6, label="nominal URDF")
        axis.hist(after * 1000.0, bins, alpha=0.8, label="calibrated")
        axis.set_xscale("log")
        axis.set_xlabel("3D point error (mm, log scale)")
        axis.set_ylabel("points")
        axis.set_title(title)
        axis.legend()
    images.append(("Error before and after", _png(figure)))
    plt.close(figure)
    if len(history.get("fit_pose_errors", [])):
        # One dot per pose: the RMS over its reflectors, before and after.
        labels = np.asarray(history["fit_pose_labels"])
        poses, index = np.unique(labels, return_inverse=True)
        counts = np.bincount(index)
        after = np.sqrt(np.bincount(index, history["fit_pose_errors"] ** 2) / counts) * 1000.0
        figure, axis = plt.subplots(figsize=(11, 3.2))
        axis.plot(np.arange(len(poses)), after, ".", markersize=4, label="calibrated")
        if len(history.get("fit_before", [])) == len(labels):
            before = np.sqrt(np.bincount(index, history["fit_before"] ** 2) / counts) * 1000.0
            axis.plot(np.arange(len(poses)), before, ".", markersize=3, alpha=0.5, label="nominal URDF")
        axis.set_yscale("log")
        axis.set_xlabel(f"calibration pose ({poses[0]} ... {poses[-1]})")
        axis.set_ylabel("RMS over reflectors (mm)")
        axis.set_title("Per-pose errors")
        axis.legend()
        images.append(("Per-pose errors", _png(figure)))
        plt.close(figure)

    rows = []
    for i, name in enumerate(calibration.joint_names):
        d, s = calibration.deltas[i], calibration.delta_std[i]
        rows.append([name] + [f"{d[c] * 1e3:+.4f} ± {s[c] * 1e3:.4f}" for c in range(3)]
                    + [f"{np.degrees(d[c]):+.5f} ± {np.degrees(s[c]):.5f}" for c in range(3, 6)]
                    + [f"{np.degrees(calibration.zero_offsets[i]):+.5f} ± {np.degrees(calibration.zero_std[i]):.5f}"])
    parameters = _table(["joint", "dx mm", "dy mm", "dz mm", "rx deg", "ry deg", "rz deg", "zero deg"], rows)
    targets = _table(["reflector", "x mm", "y mm", "z mm"],
                     [[n] + [f"{v * 1e3:.4f} ± {s * 1e3:.4f}" for v, s in zip(xyz, calibration.target_std.get(n, np.zeros(3)))]
                      for n, xyz in calibration.targets.items()])
    residuals = summary.get("residuals") or {}
    stat_rows = [[k] + [f"{v[c]:.4f}" if isinstance(v.get(c), float) else v[c] for c in ("n", "mean_mm", "rms_mm", "max_mm", "p95_mm")]
                 for k, v in residuals.items() if isinstance(v, dict) and "rms_mm" in v]
    ident = summary["identifiability"]
    outliers = summary.get("outliers", [])
    held_outliers = summary.get("holdout_outliers", [])
    page = f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>selfcal calibration</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:right}}</style></head><body>
<h1>Kinematic calibration ({html.escape(str(summary.get('model')))} model)</h1>
<p>Sessions: {html.escape(', '.join(summary.get('sessions', [])))}<br>Input data: {html.escape(str(summary.get('data_hash')))}</p>
<h2>Residuals</h2>{_table(['set', 'n', 'mean mm', 'rms mm', 'max mm', 'p95 mm'], stat_rows)}
{''.join(f'<h2>{html.escape(t)}</h2><img src="{src}" alt="{html.escape(t)}">' for t, src in images)}
<h2>Identifiability</h2><p>{ident['rank']} of {ident['parameters']} parameters identifiable,
condition number {ident['condition_number']:.3g}; a-posteriori variance factor {summary.get('variance_factor', float('nan')):.3g}.</p>
<ul>{''.join(f'<li>{html.escape(d)}</li>' for d in ident['directions'])}</ul>
<h2>Joint parameters (± one standard deviation)</h2>{parameters}
<h2>Reflectors (tip frame)</h2>{targets}
{_deflection_section(calibration)}
{probe_html(calibration)}
<h2>Outliers ({len(outliers)} in the fit, {len(held_outliers)} in held-out poses)</h2><ul>{''.join(f"<li>{html.escape(o['point'])}: {o['residual_sigma']} sigma</li>" for o in outliers)}{''.join(f"<li>held out {html.escape(o['point'])}: {o['residual_sigma']} sigma, {o['error_mm']:.3f} mm</li>" for o in held_outliers)}</ul>
</body></html>"""
    atomic_write_text(Path(path), page)
