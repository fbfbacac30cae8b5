"""The camera part of report.html: pixel errors before and after, camera poses, board pose."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from calib.report import _png, _table
from rigs.files import atomic_write_text
from rigs.transforms import matrix_to_rpy


def camera_section(result) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = result.history
    figure, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for axis, kind, title in ((axes[0], "fit", "calibration poses"), (axes[1], "held", "held-out poses")):
        before, after = history.get(f"pixel_{kind}_before"), history.get(f"pixel_{kind}_after")
        if before is None or not len(before):
            axis.set_title(f"{title}: none")
            continue
        bins = np.linspace(0, np.percentile(before, 99), 40)
        axis.hist(np.clip(before, 0, bins[-1]), bins, alpha=0.6, label="nominal URDF, camera and board poses fitted")
        axis.hist(np.clip(after, 0, bins[-1]), bins, alpha=0.8, label="calibrated")
        axis.set_xlabel("board corner reprojection error (px)")
        axis.set_ylabel("corners")
        axis.set_title(title)
        axis.legend()
    picture = _png(figure)
    plt.close(figure)
    summary = result.camera_summary
    rows = []
    for name, pose in result.base_T_camera.items():
        stats = summary.get("cameras", {}).get(name, {})
        std = result.camera_std[name]
        rows.append([name, *(f"{v:.4f}" for v in pose[:3, 3]), *(f"{np.degrees(v):.3f}" for v in matrix_to_rpy(pose[:3, :3])),
                     f"{np.linalg.norm(std[:3]) * 1e3:.3f}", f"{stats.get('fit_rms_px', float('nan')) or float('nan'):.3f}",
                     f"{stats.get('held_rms_px', float('nan')) or float('nan'):.3f}", stats.get("images_without_board", "")])
    cameras = _table(["camera", "x m", "y m", "z m", "roll deg", "pitch deg", "yaw deg", "position std mm",
                      "fit RMS px", "held-out RMS px", "images without board"], rows)
    board = result.tip_T_board
    board_row = _table(["x mm", "y mm", "z mm", "roll deg", "pitch deg", "yaw deg"],
                       [[*(f"{v * 1e3:.3f}" for v in board[:3, 3]), *(f"{np.degrees(v):.4f}" for v in matrix_to_rpy(board[:3, :3]))]])

    def number(value):
        return "n/a" if value is None else f"{value:.3f}"

    return f"""<h1>Cameras</h1>
<p>Board {html.escape(result.board.describe())}; corner noise {result.pixel_sigma:.3f} px per axis
(estimated from per-image PnP fits unless given). Reprojection RMS: fit {number(summary.get('fit_rms_px'))} px
(nominal URDF with fitted camera and board poses {number(summary.get('fit_nominal_rms_px'))} px; hand-eye
initialiser alone {number(summary.get('hand_eye_fit_rms_px'))} px), held-out {number(summary.get('holdout_rms_px'))} px
(nominal {number(summary.get('holdout_nominal_rms_px'))} px).</p>
<img src="{picture}" alt="pixel errors">
<h2>Camera poses in the base frame (optical frame)</h2>{cameras}
<h2>Board on the tip (tip_T_board)</h2>{board_row}
"""


def append_camera_report(result, path: Path) -> None:
    """Insert the camera section into an existing report.html, before its end."""
    path = Path(path)
    page = path.read_text()
    section = camera_section(result)
    page = page.replace("</body>", section + "</body>") if "</body>" in page else page + section
    atomic_write_text(path, page)
