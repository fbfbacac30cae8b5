"""Self-contained HTML reports: one file, plots embedded as PNG, tables, no external assets.

Every room that reports (calibration, audit, self-model, the demo index) builds its page here, so
all reports look alike and open anywhere.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

from rigs.files import atomic_write_text

STYLE = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2em auto; max-width: 1100px;
       color: #222; line-height: 1.45; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { font-size: 1.25em; margin-top: 1.6em;
     border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
.warning { background: #fff4e0; border-left: 4px solid #f0a000; padding: 0.5em 0.8em; }
.ok { background: #eef8ee; border-left: 4px solid #3a3; padding: 0.5em 0.8em; }
.fail { background: #fdecec; border-left: 4px solid #c33; padding: 0.5em 0.8em; }
.verdict { font-size: 1.1em; }
.muted { color: #777; font-size: 0.9em; } img { max-width: 100%; }
"""


def figure(fig, alt: str = "plot") -> str:
    """A matplotlib figure as an inline <img> (PNG, base64); the figure is closed."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def image_file(path: Path, alt: str = "image") -> str:
    """A PNG file as an inline <img>."""
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def table(header: list[str], rows: list[list], digits: int = 4) -> str:
    def cell(value) -> str:
        if isinstance(value, float):
            return f"{value:.{digits}g}"
        return html.escape("" if value is None else str(value))

    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def paragraph(text: str, kind: str = "") -> str:
    css = f' class="{kind}"' if kind else ""
    return f"<p{css}>{html.escape(text)}</p>"


def page(title: str, sections: list[tuple[str, str]], subtitle: str = "") -> str:
    """A whole page: ``sections`` are (heading, inner HTML) pairs."""
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"]
    if subtitle:
        parts.append(f"<p class='muted'>{html.escape(subtitle)}</p>")
    for heading, inner in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>{inner}")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_page(path: Path, title: str, sections: list[tuple[str, str]], subtitle: str = "") -> None:
    atomic_write_text(Path(path), page(title, sections, subtitle))
