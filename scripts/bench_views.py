"""The view planner (``selfcal plan --views``) on a trained self-model, written to BENCHMARKS.md section ``views``.

Per link, the unseen volume (:mod:`selfmodel.labels.unseen`: the learned body's outer layer that no
camera saw at >= 3 poses, 5 mm cells) at the model's training poses, after the planned poses as
the planner expects it, and, with ``--capture``, after the planned poses captured in simulation,
measured from their depth images the same way as before (not the planner's expectation). With
``--random`` the same number of random valid poses is captured and measured too, for comparison.

    nice -n 5 .venv/bin/python scripts/bench_views.py --model /tmp/v/bench/xarm-model --rig xarm6-cameras \\
        --poses 60 --workdir /tmp/views-bench --capture --random
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import table, write_section  # noqa: E402

from capture.poses import Plan  # noqa: E402
from capture.session import load_session  # noqa: E402
from capture.simulate import capture_simulated  # noqa: E402
from rigs import load_rig  # noqa: E402
from selfmodel.labels.seen_through import training_sessions  # noqa: E402
from selfmodel.labels.unseen import PITCH, POSES, learned_cells, recorded_seen, unseen_cm3  # noqa: E402
from selfmodel.learn.view_planning import plan_views, views_verdict  # noqa: E402
from selfmodel.model.models import SelfModel  # noqa: E402


def measured(model, cells: dict, before: dict, session: Path) -> dict[str, float]:
    """Link -> unseen cm3 with the captured ``session``'s poses counted beside the training poses."""
    captured = load_session(session)
    added = recorded_seen(cells, model.link_names, model.base_T_links(captured.q), [captured], PITCH)
    return unseen_cm3({link: before[link] + added[link] for link in cells}, PITCH)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--rig", default="xarm6-cameras")
    parser.add_argument("--poses", type=int, default=60)
    parser.add_argument("--candidates", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/views-bench"))
    parser.add_argument("--capture", action="store_true", help="Capture the plan in simulation and measure it.")
    parser.add_argument("--random", action="store_true", help="With --capture: also capture as many random poses.")
    args = parser.parse_args()
    if args.poses < 1 or args.candidates < args.poses:
        parser.error("--poses must be at least 1 and --candidates at least --poses")
    args.workdir.mkdir(parents=True, exist_ok=True)

    model = SelfModel.load(args.model)
    rig = load_rig(args.rig)
    start = time.perf_counter()
    plan = plan_views(model, args.poses, rig, args.candidates, args.seed)
    planner_s = time.perf_counter() - start
    verdict = views_verdict(plan)
    print(verdict.line(), flush=True)

    columns = {"before": plan.before_cm3, "after, expected": plan.after_cm3, "no candidate shows": plan.beyond_cm3}
    if args.capture:
        sessions, why = training_sessions(model.folder)
        if sessions is None:
            raise SystemExit(f"{args.model}: {why}")
        cells = learned_cells(model, PITCH)
        before = recorded_seen(cells, model.link_names, model.base_T_links(np.vstack([s.q for s in sessions])),
                               sessions, PITCH)
        planned = args.workdir / f"planned-{args.poses}-seed{args.seed}"
        if planned.exists() and not np.allclose(load_session(planned).q, plan.q, atol=1e-9):
            raise SystemExit(f"{planned} holds another plan's capture; remove it or choose another --workdir")
        if not planned.exists():
            print(f"capturing {planned} ...", flush=True)
            capture_simulated(rig, len(plan.q), args.seed, planned,
                              plan=Plan([f"v{k:04d}" for k in range(len(plan.q))], plan.q, {}))
        columns["after, captured"] = measured(model, cells, before, planned)
        if args.random:
            random = args.workdir / f"random-{args.poses}-seed{args.seed}"
            if not random.exists():
                print(f"capturing {random} ...", flush=True)
                capture_simulated(rig, args.poses, args.seed + 1000, random)
            columns[f"after {args.poses} random poses, captured"] = measured(model, cells, before, random)

    links = list(plan.before_cm3)
    rows = [[link, *(f"{column[link]:.1f}" for column in columns.values())] for link in links]
    rows.append(["all links", *(f"{sum(column.values()):.1f}" for column in columns.values())])
    body = (f"{args.rig}: the model {args.model}, seen before in {plan.recorded_from}; {len(plan.q)} planned poses chosen among {plan.candidates} valid candidates "
            f"({plan.aimed} aimed at the hidden space), cameras {', '.join(plan.cameras)}. Unseen: the learned body's "
            f"outer layer ({PITCH * 1000:.0f} mm cells) no camera saw through or met at >= {POSES} poses, cm3. "
            f"No candidate shows: what all candidates together would leave unseen (where links meet, the base on "
            f"its mount). Planner time {planner_s:.0f} s ("
            + ", ".join(f"{stage} {value:.0f} s" for stage, value in plan.stage_seconds.items())
            + f"; the machine was shared). Verdict: {verdict.line()}."
            + "".join(f" All links {name}: {sum(column.values()):.1f} cm3 of {sum(plan.before_cm3.values()):.1f}."
                      for name, column in columns.items() if name.startswith("after"))
            + "\n\n"
            + table(["link", *columns], rows))
    command = (f"scripts/bench_views.py --model {args.model} --rig {args.rig} --poses {args.poses} "
               f"--candidates {args.candidates} --seed {args.seed} --workdir {args.workdir}"
               + (" --capture" if args.capture else "") + (" --random" if args.random else ""))
    write_section("views", "Views the self-model still needs: unseen volume per link, planned and captured", body,
                  command)


if __name__ == "__main__":
    main()
