"""report.html of an identified dynamic model and of an identified payload: a verdict first, then
per joint how well the model explains the measured torques."""

from __future__ import annotations

from pathlib import Path

from rigs import html_report


def dynamics_verdict(summary: dict) -> str:
    rms, urdf = summary.get("rms_nm"), summary.get("urdf_rms_nm")
    ident = summary.get("identifiability") or {}
    return (f"The identified model explains the measured joint torques to {rms:.3g} N m RMS, against {urdf:.3g} N m "
            f"for the URDF's inertials; {ident.get('rank')} combinations of {ident.get('parameters')} parameters "
            f"identified from {summary.get('poses')} poses.")


def write_dynamics_report(dynamics, path: Path) -> None:
    summary = dynamics.summary
    joints = summary.get("per_joint", {})
    rows = [[name, entry.get("rms_nm"), entry.get("urdf_rms_nm"), entry.get("noise_nm"),
             " to ".join(f"{v:.3g}" for v in entry.get("torque_range_nm", []))] for name, entry in joints.items()]
    base = [[b["name"], b["expression"], b["value"], b["std"], b["unit"]] for b in summary.get("base_parameters", [])]
    ident = summary.get("identifiability") or {}
    sections = [
        ("Verdict", html_report.paragraph(dynamics_verdict(summary), "ok")),
        ("Per joint", html_report.table(["joint", "residual RMS N m", "URDF RMS N m", "noise N m", "torque range N m"],
                                        rows)),
        ("Sign", html_report.paragraph(f"Readings used with sign {summary.get('sign', {}).get('used')}: "
                                       f"{summary.get('sign', {}).get('convention')}.")),
        ("Identifiability", "".join(html_report.paragraph(text) for text in
                                    ([ident.get("fixed")] if ident.get("fixed") else []) + list(ident.get("directions", []))[:40])),
        ("Base parameters", html_report.table(["parameter", "combination", "value", "std", "unit"], base)),
    ]
    html_report.write_page(path, "Identified arm dynamics", sections, ", ".join(summary.get("sessions", [])))


def write_payload_report(payload, path: Path) -> None:
    document = payload.document()
    rows = [[name, entry["before_rms_nm"], entry["after_rms_nm"]] for name, entry in document["per_joint"].items()]
    sections = [("Verdict", html_report.paragraph(payload.verdict(), "ok")),
                ("Per joint", html_report.table(["joint", "RMS without the payload N m", "RMS with it N m"], rows))]
    html_report.write_page(path, "Identified payload", sections, str(document.get("session")))
