"""Shared by the benchmark scripts: timing, machine description, and BENCHMARKS.md sections.

Each script owns named sections of BENCHMARKS.md (between ``<!-- bench:NAME -->`` markers) and
rewrites only those, so scripts can run in any order.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "BENCHMARKS.md"
sys.path.insert(0, str(ROOT))


def machine() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = "?"
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, commit {commit}"


@contextmanager
def timer(results: dict, key: str):
    start = time.perf_counter()
    yield
    results[key] = time.perf_counter() - start


def table(header: list[str], rows: list[list]) -> str:
    def cell(value):
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_section(name: str, title: str, body: str, command: str) -> None:
    """Replace (or append) section ``name`` of BENCHMARKS.md and print it."""
    text = BENCHMARKS.read_text() if BENCHMARKS.is_file() else "# Benchmarks\n\nFigures measured by the scripts under `scripts/`; each section names the command that wrote it.\n"
    section = (f"<!-- bench:{name} -->\n## {title}\n\nMeasured {time.strftime('%Y-%m-%d')} on {machine()} with "
               f"`{command}`.\n\n{body.strip()}\n<!-- /bench:{name} -->")
    pattern = re.compile(rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section + "\n"
    BENCHMARKS.write_text(text)
    print(section)
