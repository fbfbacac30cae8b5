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


def file_digests(folder: Path, names, label: str) -> dict[str, str]:
    """``label/name`` -> SHA-256 of each file ``folder/name`` (a missing file reads as ``missing``):
    what a cached row measured, named by its role rather than its workdir, so the same files
    give the same key wherever they lie."""
    import hashlib

    digests = {}
    for name in sorted(set(names)):
        path = Path(folder) / name
        digests[f"{label}/{name}"] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    return digests


def cached_row(path: Path, compute, inputs: dict | None = None, quiet: bool = False) -> dict:
    """The JSON row at ``path``, computed and written when it is missing or was measured on other
    inputs. ``inputs``: what the row depends on (name -> content hash, or a stated value); it is
    stored with the row and compared on every read, so a changed file recomputes only the rows that
    read it. A row written without inputs where inputs are now given counts as changed."""
    import json

    if path.is_file():
        stored = json.loads(path.read_text())
        if inputs is None or stored.get("inputs") == inputs:
            if not quiet:
                print(f"reusing {path}", flush=True)
            return stored
        before = stored.get("inputs") or {}
        changed = sorted(key for key in set(before) | set(inputs) if before.get(key) != inputs.get(key))
        print(f"recomputing {path}: its inputs changed ({', '.join(changed[:4])}"
              f"{', ...' if len(changed) > 4 else ''})", flush=True)
    elif not quiet:
        print(f"computing {path.name} ...", flush=True)
    start = time.perf_counter()
    result = compute()
    result["seconds"] = time.perf_counter() - start
    if inputs is not None:
        result["inputs"] = inputs
    from selfcal.ui import to_jsonable

    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".part")
    temporary.write_text(json.dumps(to_jsonable(result)))
    temporary.replace(path)  # a run stopped while writing leaves no half row behind
    return result
