"""The HTML page of an ISO 9283 audit: tables per model, bars of AP and RP, the cycles' scatter."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rigs import html_report


def write_audit_html(result: dict, path: Path) -> None:
    import matplotlib  # matplotlib takes 0.6 s to load; only reports draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # see above

    sections = []
    models = list(result["models"])
    summary = []
    for name in models:
        model = result["models"][name]
        for entry in model["poses"]:
            row = [name, entry["pose"], entry["n"], entry["AP_mm"], entry["RP_mm"]]
            if model["orientation"]:
                row += [max(abs(a) for a in entry["APa_deg"]), max(entry["RPa_deg"])]
            else:
                row += ["", ""]
            summary.append(row)
    sections.append(("Pose accuracy and repeatability (ISO 9283)", html_report.table(
        ["commanded by", "pose", "cycles", "AP (mm)", "RP (mm)", "max |APa| (deg)", "max RPa (deg)"], summary)
        + html_report.table(["commanded by", "AD P2-P4 (mm)", "RD P2-P4 (mm)"],
                            [[n, result["models"][n]["AD_mm"], result["models"][n]["RD_mm"]] for n in models])))
    if result["warnings"]:
        sections.append(("Warnings", "".join(html_report.paragraph(w, "warning") for w in result["warnings"])))

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    width = 0.8 / len(models)
    for k, name in enumerate(models):
        poses = result["models"][name]["poses"]
        x = np.arange(len(poses)) + k * width
        axes[0].bar(x, [p["AP_mm"] for p in poses], width, label=name)
        axes[1].bar(x, [p["RP_mm"] for p in poses], width, label=name)
    for axis, title in zip(axes, ("AP: pose accuracy (mm)", "RP: pose repeatability (mm)")):
        axis.set_xticks(np.arange(5) + width * (len(models) - 1) / 2, [p["pose"] for p in result["models"][models[0]]["poses"]])
        axis.set_title(title)
        axis.legend()
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
                           f"session {result['session']}; {result['cycles']} cycles; tracker uncertainty "
                           f"{result['tracker_uncertainty_mm']:.3f} mm")
