"""Bad input, hostile files and a read-only --out for every command: how each one ends.

    .venv/bin/python scripts/bench_reliability.py [--verbose] [--baseline /path/to/other/checkout]

Runs the table of tests/bad_inputs.py (the one the test suite runs) and counts the outcomes: clean
(exit 2, one line naming the file, row or key, nothing left behind), tracebacks, accepted (exit 0),
half-written (anything left behind, or an input removed), and files read from outside their folder
(Python's audit hook watches a "secret" folder that hostile inputs point at). Writes the counts to
BENCHMARKS.md. With ``--baseline DIR`` the same table also runs against another checkout's code (the
commit before this work, say) in a child process, and both rows are written.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import benchlib  # noqa: F401  (puts the checkout on sys.path)
from benchlib import ROOT, table, write_section

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(ROOT / "tests"))
if "--checkout" in sys.argv:  # the code under test comes from another checkout; the table stays this one's
    sys.path.insert(0, sys.argv[sys.argv.index("--checkout") + 1])

from bad_inputs import CASES, build_fixtures, run_case  # noqa: E402

VERDICTS = ["clean", "traceback", "accepted", "half-written", "outside-read", "unclear"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true", help="Print every case's message.")
    parser.add_argument("--baseline", type=Path, help="Also run the table against this checkout's code.")
    parser.add_argument("--checkout", type=Path, help=argparse.SUPPRESS)  # the child of --baseline
    arguments = parser.parse_args()
    baseline = None
    if arguments.baseline is not None:
        import json
        import subprocess

        child = subprocess.run([sys.executable, __file__, "--checkout", str(arguments.baseline.resolve())],
                               capture_output=True, text=True, timeout=3600)
        baseline = json.loads(child.stdout.strip().splitlines()[-1])
        print(f"baseline {arguments.baseline}: {baseline['counts']}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-reliability-"))
    try:
        start = time.perf_counter()
        fixtures = build_fixtures(work / "fixtures")
        built = time.perf_counter() - start
        outcomes = []
        for case in CASES:
            outcome = run_case(case, fixtures, work / "cases")
            outcomes.append(outcome)
            if arguments.verbose or outcome.verdict != "clean":
                print(f"{outcome.verdict:<13} {case.name}: {outcome.message[:300]}"
                      + (f" [left: {outcome.left[:3]}]" if outcome.left else "")
                      + (f" [read: {outcome.secret_reads[:2]}]" if outcome.secret_reads else ""), flush=True)
        seconds = time.perf_counter() - start
    finally:
        shutil.rmtree(work, ignore_errors=True)
    counts = collections.Counter(o.verdict for o in outcomes)
    if arguments.checkout is not None:
        import json
        import subprocess

        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=arguments.checkout, capture_output=True,
                                text=True).stdout.strip()
        print(json.dumps({"commit": commit, "counts": {v: counts[v] for v in VERDICTS},
                          "secret_reads": sum(bool(o.secret_reads) for o in outcomes)}))
        return
    secret_reads = sum(bool(o.secret_reads) for o in outcomes)
    by_command = collections.defaultdict(collections.Counter)
    for outcome in outcomes:
        by_command[outcome.case.split(":")[0]][outcome.verdict] += 1
    rows = [[command, sum(c.values()), *(c[v] for v in VERDICTS)] for command, c in sorted(by_command.items())]
    rows.append(["all commands", len(outcomes), *(counts[v] for v in VERDICTS)])
    not_clean = [o for o in outcomes if o.verdict != "clean"]
    body = (f"{len(outcomes)} kinds of bad input across {len(by_command)} commands: **{counts['clean']} clean**, "
            f"{counts['traceback']} tracebacks, {counts['accepted']} accepted, {counts['half-written']} half-written, "
            f"{counts['outside-read']} outside-read, {counts['unclear']} unclear (another exit status or more than one "
            f"line). In {secret_reads} kinds a file outside every input's folder was opened (counted whatever the "
            f"verdict: an accepted hostile URDF usually also copies what it points at). Target: every kind clean, "
            f"no outside file opened.\n\n"
            + table(["command", "kinds", *VERDICTS], rows)
            + f"\n\nFixtures built in {built:.0f} s, the whole table in {seconds:.0f} s (in-process, on a machine "
              f"shared with other jobs). The kinds are the rows of `tests/bad_inputs.py`; "
              f"`tests/test_bad_input.py` runs the same table in the test suite.\n")
    if baseline is not None:
        body += (f"\nThe same table against the code before this work (commit {baseline['commit']}), in the same run: "
                 + ", ".join(f"{baseline['counts'][v]} {v}" for v in VERDICTS)
                 + f"; a file outside every input's folder opened in {baseline['secret_reads']} kinds.\n")
    if not_clean:
        body += "\nNot clean:\n\n" + "\n".join(f"- {o.verdict}: {o.case}: {o.message[:200]}" for o in not_clean) + "\n"
    command = ".venv/bin/python scripts/bench_reliability.py" + (" --baseline CHECKOUT" if baseline is not None else "")
    write_section("reliability", "Bad input, hostile files and interruptions", body, command)


if __name__ == "__main__":
    main()
