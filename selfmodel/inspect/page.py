"""The page of ``selfcal selfmodel check --report``: the verdict, the learned body beside the
description in an offline 3D view with the links coloured by what the check found, a row per link."""

from __future__ import annotations

from pathlib import Path

from rigs import html_report, scene_html
from selfmodel.inspect.scene import selfmodel_scene


def write_check_page(path: Path, model, result, verdict, threshold_mm: float, description: Path) -> None:
    """``path`` (an HTML file) for the DamageCheck ``result`` of ``model`` against ``description``,
    judged ``verdict`` with the threshold ``threshold_mm`` (mm)."""
    scene = selfmodel_scene(model, Path(model.folder), result, threshold_mm, description)
    rows = [[row.link, row.deviation_mm, row.deviation_sd_mm, row.kind, row.joint or "", row.joint_mm, row.bend_deg,
             row.added_mm, row.missing_mm, (result.unseen_cm3 or {}).get(row.link)] for row in result.rows]
    sections = [("Verdict", verdict.html()),
                ("3D view", scene_html.embed(scene)),
                ("Per link (mm, degrees)", html_report.table(
                    ["link", "largest", "sd", "what", "joint", "joint moves what follows", "bend deg", "added matter",
                     "missing matter", "unseen cm3"], rows, 3)),
                ("Depth", html_report.paragraph(f"Depth noise about the description {result.noise_mm:.1f} mm over "
                                                f"{result.points} measured points."))]
    html_report.write_page(Path(path), "Self-model check", sections, f"{model.folder} against {description}")
