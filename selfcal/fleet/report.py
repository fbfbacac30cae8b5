"""DIR/index.html: the fleet on one page, verdict first, then each arm, then the fleet's distributions."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from rigs import html_report


def _verdict(document: dict) -> str:
    summary = document["summary"]
    kind = "calibrated" if document["job"] == "calibrate" else "trained"
    text = (f"{summary['arms']} arms: {summary['ok']} {kind}, {summary['failed']} failed, {summary['flagged']} flagged "
            f"against their siblings")
    if summary.get("reused"):
        text += f" ({summary['reused']} results reused from an earlier run, their inputs verified unchanged)"
    return text + "."


def _link(arm: str, record: dict, page: str) -> str:
    if record["status"] == "ok" and (Path(arm) / page).as_posix():
        return f'<a href="{html.escape(arm)}/{page}">{html.escape(arm)}</a>'
    return html.escape(arm)


def _rows_table(header: list[str], rows: list[list[str]]) -> str:
    """A table whose cells are already HTML (links)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _number(value, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1e-3 or abs(value) >= 1e4 else f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return html.escape(str(value))


def _z_plot(distributions: dict, threshold: float, title: str):
    """Robust z of every arm for every figure: one row per figure, flagged arms in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(distributions)
    figure, axis = plt.subplots(figsize=(10, 0.28 * len(names) + 1.4))
    for row, name in enumerate(names):
        z = np.array(list(distributions[name]["z"].values()), dtype=float)
        shown = np.clip(z, -3 * threshold, 3 * threshold)
        far = np.abs(z) > threshold
        axis.scatter(shown[~far], np.full((~far).sum(), row), s=9, color="#4a7ab0", alpha=0.6)
        axis.scatter(shown[far], np.full(far.sum(), row), s=22, color="#d03030")
    for x in (-threshold, threshold):
        axis.axvline(x, color="#d03030", lw=0.8, ls="--")
    axis.set_yticks(range(len(names)))
    axis.set_yticklabels(names, fontsize=7)
    axis.invert_yaxis()
    axis.set_xlabel(f"robust z against the fleet (clipped at +-{3 * threshold:g}; dashed: the flag threshold)")
    axis.set_title(title)
    return figure


def _accuracy_plot(arms: list[str], calibrated: list[float], nominal: list[float]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(10, 3.2))
    x = np.arange(len(arms))
    axis.scatter(x, nominal, s=10, label="nominal URDF", color="#b0b0b0")
    axis.scatter(x, calibrated, s=10, label="calibrated", color="#3a7a3a")
    axis.set_yscale("log")
    axis.set_ylabel("held-out RMS (mm, log)")
    axis.set_xticks(x if len(arms) <= 40 else x[:: max(1, len(arms) // 40)])
    axis.set_xticklabels(arms if len(arms) <= 40 else arms[:: max(1, len(arms) // 40)], rotation=90, fontsize=7)
    axis.legend()
    return figure


def _distribution_table(distributions: dict) -> str:
    rows = [[name, spread["unit"], spread["n"], spread["median"], spread["robust_sigma"], spread["min"], spread["p05"],
             spread["p95"], spread["max"]] for name, spread in distributions.items()]
    return html_report.table(["figure", "unit", "arms", "median", "robust sigma", "min", "5 %", "95 %", "max"], rows, 3)


def _failures(document: dict) -> str:
    failed = [(arm, record) for arm, record in document["arms"].items() if record["status"] != "ok"]
    if not failed:
        return html_report.paragraph("Every arm finished.", "ok")
    return "<ul>" + "".join(f"<li><b>{html.escape(arm)}</b> (line {record.get('line')}): "
                            f"{html.escape(record.get('message') or '')}</li>" for arm, record in failed) + "</ul>"


def _flags(document: dict) -> str:
    flags = [flag for record in document["arms"].values() for flag in record.get("flags", [])]
    comparison = document.get("comparison") or {}
    if not flags:
        note = "No arm sits far from its siblings." if any(t.get("compared") for t in comparison.get("types", [])) else \
            f"Fewer than {comparison.get('min_arms', 5)} arms of a type finished, so the arms were not compared."
        return html_report.paragraph(note, "ok")
    return "<div class='warning'><ul>" + "".join(f"<li>{html.escape(flag)}</li>" for flag in flags) + "</ul></div>"


def _method(document: dict) -> str:
    comparison = document.get("comparison") or {}
    floors = comparison.get("floors", {})
    return html_report.paragraph(
        f"{comparison.get('method', '')} Threshold |z| > {comparison.get('threshold')}; floors of the robust spread: "
        f"{floors.get('deg')} degrees, {floors.get('mm')} mm, a factor {10 ** floors.get('log10', 0):.2f} in accuracy"
        + (f", {floors.get('link_mm')} mm in a link's deviation" if document["job"] == "selfmodel" else "") + ".",
        "muted")


def write_calibration_report(document: dict, out: Path) -> None:
    comparison = document.get("comparison") or {}
    arms = document["arms"]
    rows, plot_arms, plot_cal, plot_nom = [], [], [], []
    for arm, record in arms.items():
        figures = record.get("figures") or {}
        accuracy = figures.get("accuracy") or {}
        ident = figures.get("identifiability") or {}
        status = "ok" if record["status"] == "ok" else "<b>failed</b>"
        rows.append([_link(arm, record, "report.html"), status + (" (reused)" if record.get("reused") else ""),
                     _number(accuracy.get("rms_mm"), 4), _number(accuracy.get("nominal_rms_mm"), 3),
                     html.escape(accuracy.get("source", "")),
                     f"{ident.get('identifiable', 'n/a')} / {ident.get('parameters', 'n/a')}",
                     _number(ident.get("condition_number"), 3), _number(figures.get("outliers")),
                     str(len(record.get("flags", []))), _number(record.get("seconds"), 3)])
        if accuracy.get("rms_mm") and accuracy.get("nominal_rms_mm"):
            plot_arms.append(arm)
            plot_cal.append(accuracy["rms_mm"])
            plot_nom.append(accuracy["nominal_rms_mm"])
    sections = [("Verdict", html_report.paragraph(_verdict(document), "ok" if document["summary"]["failed"] == 0 and
                                                   document["summary"]["flagged"] == 0 else "warning")),
                ("Arms far from their siblings", _flags(document) + _method(document)),
                ("Arms that failed", _failures(document)),
                ("Every arm", _rows_table(["arm", "status", "held-out RMS (mm)", "nominal (mm)", "held out from",
                                           "identifiable", "condition", "outliers", "flags", "seconds"], rows))]
    if plot_arms:
        sections.append(("Accuracy, nominal and calibrated", html_report.figure(
            _accuracy_plot(plot_arms, plot_cal, plot_nom), "held-out RMS per arm")))
    if comparison.get("geometry"):
        sections.append(("The joint axes across the fleet", html_report.figure(
            _z_plot(comparison["geometry"], comparison["threshold"], "axis geometry: each arm against the fleet"),
            "robust z per figure") + html_report.paragraph(
            "Each figure is the calibrated arm's value less the description's: the angle and distance between "
            "consecutive joint axes, and along each inner axis where its neighbours' normals meet it and its zero "
            "turn. These do not depend on how a fit splits coupled parameters.", "muted")
            + _distribution_table(comparison["geometry"])))
    if comparison.get("parameters"):
        sections.append(("The fit's own parameters across the fleet", html_report.paragraph(
            "As calibration.yaml writes them. Where the data cannot separate two parameters (a joint's translation "
            "along its axis and the next joint's, the first joint and the tracker) the fit's split is its own choice, "
            "so these spread more than the arms do and are not used for flags.", "muted")
            + _distribution_table(comparison["parameters"])))
    ray = document.get("ray") or {}
    subtitle = (f"selfcal fleet {document['job']} of {document['fleet_table']}; "
                + (f"ran on {ray.get('described')}, {ray.get('cpus_per_arm')} CPUs per arm; " if ray else "")
                + f"{document.get('seconds', 0):.0f} s; selfcal {document['selfcal_version']}")
    html_report.write_page(Path(out) / "index.html", "Fleet calibration", sections, subtitle)


def write_selfmodel_report(document: dict, out: Path) -> None:
    comparison = document.get("comparison") or {}
    rows = []
    for arm, record in document["arms"].items():
        figures = record.get("figures") or {}
        status = "ok" if record["status"] == "ok" else "<b>failed</b>"
        rows.append([html.escape(arm), status + (" (reused)" if record.get("reused") else ""),
                     _number(figures.get("steps")), _number(figures.get("train_seconds"), 3),
                     _number(figures.get("chamfer_l1_mm"), 3), _number(figures.get("chamfer_pct_workspace"), 3),
                     _number(figures.get("fscore"), 3), _number(figures.get("false_free_rate"), 3),
                     html.escape(figures.get("largest_deviation", "n/a")), html.escape(figures.get("damage", "n/a")),
                     str(len(record.get("flags", [])))])
    sections = [("Verdict", html_report.paragraph(_verdict(document), "ok" if document["summary"]["failed"] == 0 and
                                                   document["summary"]["flagged"] == 0 else "warning")),
                ("Arms far from their siblings", _flags(document) + _method(document)),
                ("Arms that failed", _failures(document)),
                ("Every arm", _rows_table(["arm", "status", "steps", "train s", "Chamfer-L1 (mm)", "% of workspace",
                                           "F-score", "false-free", "largest deviation from the URDF",
                                           "damage against siblings", "flags"], rows))]
    if comparison.get("links"):
        sections.append(("Each link's deviation across the fleet", html_report.figure(
            _z_plot(comparison["links"], comparison["threshold"], "link deviation: each arm against the fleet"),
            "robust z per link") + _distribution_table(comparison["links"])))
    ray = document.get("ray") or {}
    subtitle = (f"selfcal fleet selfmodel of {document['fleet_table']}; "
                + (f"ran on {ray.get('described')}, {ray.get('cpus_per_arm')} CPUs per arm; " if ray else "")
                + f"{document.get('seconds', 0):.0f} s; selfcal {document['selfcal_version']}")
    html_report.write_page(Path(out) / "index.html", "Fleet self-models", sections, subtitle)
