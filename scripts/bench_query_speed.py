"""One query speed, read two ways in one run: what `selfcal selfmodel eval` prints and what the
self-model benchmarks tabulate, on the same model, one after the other.

Both read selfmodel.evaluation.metrics.query_speed (100k points uniform in the workspace a call, one
configuration a call, after a warm-up call, wall clock); they differ only in the threads each
answerer had, which both now print. The network and the baked grids are then measured here at one
and at two threads, so every figure selfcal states about query speed has its row.

    .venv/bin/python scripts/bench_query_speed.py --model MODEL --session HELDOUT [--poses 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import ROOT, table, write_section  # noqa: E402

from capture.session import load_session  # noqa: E402
from selfmodel.evaluation.metrics import QUERY_SPEED, query_speed  # noqa: E402


def through_eval(model: Path, session: Path, poses: int) -> dict:
    """The figures `selfcal selfmodel eval --json` prints, as a user runs it."""
    command = [str(Path(sys.executable).with_name("selfcal")), "selfmodel", "eval", str(model), str(session),
               "--poses", str(poses), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:  # without --require-pass a verdict never changes the exit status
        raise SystemExit(f"selfmodel eval failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def in_process(model_folder: Path, session: Path) -> list[dict]:
    """The network at 1 and 2 torch threads and the baked grids at 1 and 2 threads, by query_speed."""
    import torch

    from selfmodel.model.baked import load_baked
    from selfmodel.model.models import SelfModel

    model = SelfModel.load(model_folder)
    q = load_session(session).q
    rows = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        rows.append({"answerer": "network", **query_speed(model, q, np.random.default_rng(0))})
    for threads in (1, 2):  # the grids' own threads, and torch's inside each of them, alike
        torch.set_num_threads(threads)
        baked = load_baked(model, model_folder)
        baked.threads = threads
        rows.append({"answerer": "baked grids", **query_speed(baked, q, np.random.default_rng(0), bounds=model.bounds)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--session", type=Path, required=True, help="a held-out session of the model's rig")
    parser.add_argument("--poses", type=int, default=2, help="poses `selfmodel eval` scores (its speed figure reads them)")
    args = parser.parse_args()
    figures = through_eval(args.model, args.session, args.poses)
    rows = [["`selfcal selfmodel eval`", "network", figures["query_threads"], f"{figures['queries_per_s']:.3g}", "",
             f"{figures['query_load']:.1f}"]]
    if "baked_queries_per_s" in figures:
        rows.append(["`selfcal selfmodel eval`", "baked grids", figures["baked_query_threads"],
                     f"{figures['baked_queries_per_s']:.3g}", "", f"{figures['baked_query_load']:.1f}"])
    for row in in_process(args.model, args.session):
        rows.append(["query_speed, this script", row["answerer"], row["threads"], f"{row['queries_per_s']:.3g}",
                     f"{row['queries_per_cpu_s']:.3g}", f"{row['load']:.1f}"])
    body = "\n".join([
        f"One definition, {QUERY_SPEED}. Model `{args.model.name}`, held-out session `{args.session.name}`; "
        f"{os.cpu_count()} cores. A figure is only comparable with another at the same threads and load: "
        f"`selfmodel eval` runs the network at torch's default threads (every core) and the baked grids at "
        f"their own default (two), where the self-model benchmarks pin one torch thread.", "",
        table(["read by", "answerer", "threads", "queries/s (wall)", "queries per CPU s", "load average"], rows)])
    command = "scripts/bench_query_speed.py " + " ".join(sys.argv[1:])
    write_section("query-speed", "Query speed: one definition, read by `selfmodel eval` and the benchmarks", body, command)


if __name__ == "__main__":
    main()
