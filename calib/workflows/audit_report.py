"""The HTML page of an ISO 9283 audit: tables per model, bars of AP and RP, the cycles' scatter."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rigs import html_report
from rigs.verdicts import Verdict

LOG_RATIO = 20.0  # bars this many times apart share a log axis, or the small ones vanish


def write_audit_html(result: dict, path: Path) -> None:
    import matplotlib  # matplotlib takes 0.6 s to load; only reports draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # see above

    sections = []
    if result.get("verdict"):
        sections.append(("Verdict", Verdict.from_dict(result["verdict"]).html()))
    models = list(result["models"])
    summary = []
    for name in models:
        model = result["models"][name]
        for entry in model["poses"]:
            row = [name, entry["pose"], entry["n"], entry["AP_mm"], entry["RP_mm"], entry.get("RP_instrument_mm")]
            if model["orientation"]:
                row += [max(abs(a) for a in entry["APa_deg"]), max(entry["RPa_deg"])]
            else:
                row += ["", ""]
            summary.append(row)
    sections.append(("Pose accuracy and repeatability (ISO 9283)", html_report.table(
        ["commanded by", "pose", "cycles", "AP (mm)", "RP (mm)", "RP of the tracker alone (mm)", "max |APa| (deg)",
         "max RPa (deg)"], summary)
        + html_report.table(["commanded by", "AD P2-P4 (mm)", "RD P2-P4 (mm)"],
                            [[n, result["models"][n]["AD_mm"], result["models"][n]["RD_mm"]] for n in models])))
    if result["warnings"]:
        sections.append(("Warnings", "".join(html_report.paragraph(w, "warning") for w in result["warnings"])))

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    width = 0.8 / len(models)
    for k, name in enumerate(models):
        poses = result["models"][name]["poses"]
        x = np.arange(len(poses)) + k * width
        axes[0].bar(x, [p["AP_mm"] for p in poses], width, label=name)
        axes[1].bar(x, [p["RP_mm"] for p in poses], width, label=name)
    instrument = [p.get("RP_instrument_mm") for p in result["models"][models[-1]]["poses"]]
    if all(value is not None for value in instrument):
        axes[1].plot(np.arange(len(instrument)) + width * (len(models) - 1) / 2, instrument, "k_", markersize=28,
                     markeredgewidth=2, label="the tracker alone")
    for axis, key, title in zip(axes, ("AP_mm", "RP_mm"), ("AP: pose accuracy", "RP: pose repeatability")):
        axis.set_xticks(np.arange(5) + width * (len(models) - 1) / 2, [p["pose"] for p in result["models"][models[0]]["poses"]])
        values = [p[key] for name in models for p in result["models"][name]["poses"] if p[key] > 0]
        if values and max(values) > LOG_RATIO * min(values):
            axis.set_yscale("log")
            title += " (log scale)"
        axis.set_title(title)
        axis.set_xlabel("ISO 9283 pose")
        axis.set_ylabel(f"{key[:2]} (mm)")
        axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, fontsize=9, frameon=False)
    sections.append(("Accuracy and repeatability per pose", html_report.figure(fig, "AP and RP per pose")))

    attained = np.array(result["models"][models[-1]]["attained_m"])
    fig, axis = plt.subplots(figsize=(5, 4))
    labels = result.get("iso_pose_of_row", [])
    if labels:
        for pose in ("P1", "P2", "P3", "P4", "P5"):
            rows = [i for i, label in enumerate(labels) if label == pose]
            cloud = attained[rows] - attained[rows].mean(axis=0)
            axis.scatter(cloud[:, 0] * 1e3, cloud[:, 1] * 1e3, s=10, label=pose)
        axis.set_xlabel("x about the mean (mm)")
        axis.set_ylabel("y about the mean (mm)")
        axis.set_title("Attained positions of the cycles")
        axis.legend()
        axis.set_aspect("equal", adjustable="datalim")
        sections.append(("Scatter of the cycles", html_report.figure(fig, "cycle scatter")))
    else:
        plt.close(fig)
    html_report.write_page(path, "ISO 9283 pose characteristics", sections,
                           f"session {result['session']}; {result['cycles']} cycles; measuring point "
                           f"{result.get('measuring_point', {}).get('description', 'the tool point')}; tracker "
                           f"uncertainty {result['tracker_uncertainty_mm']:.3f} mm")
