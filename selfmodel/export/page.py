"""report.html of a collision export: the exported geometry in 3D (offline) and a row per link.

Written into the export folder beside export_report.json, from the folder's own files (what a
planner reads), so the page shows what was written, not what was meant to be.
"""

from __future__ import annotations

from pathlib import Path

from rigs import html_report, scene_html
from selfmodel.export.scene import export_scene


def write_export_page(folder: Path, report: dict) -> None:
    """``folder``/report.html for the export whose ``export_report.json`` content is ``report``."""
    folder = Path(folder)
    links = report.get("links") or {}
    unseen = (report.get("carving") or {}).get("unseen_cm3") or {}
    rows = [[link, row.get("pieces"), row.get("spheres"), row.get("margin_mm"), row.get("margin_needed_mm"),
             unseen.get(link)] for link, row in links.items()]
    sections = [("3D view", scene_html.embed(export_scene(folder))),
                ("Per link", html_report.table(["link", "convex pieces", "spheres", "margin mm", "margin needed mm",
                                                "unseen cm3"],
                                               rows, 3)),
                ("Files", html_report.paragraph("robot.urdf (convex pieces as collision geometry), robot.srdf "
                                                "(disabled pairs), curobo_spheres.yml and curobo_robot.yml (cuRobo), "
                                                "export_report.json (every figure of this page and more)."))]
    html_report.write_page(folder / "report.html", "Collision export", sections,
                           f"margin {report.get('margin_mm')} mm ({report.get('margin_mode')})")
