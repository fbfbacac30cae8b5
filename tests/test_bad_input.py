"""Every command, handed bad input, ends the way a user can act on: exit status 2, one line that
names the file, row or key, no traceback, nothing left behind and no file read from outside the
input's own folder. The table of kinds is tests/bad_inputs.py (scripts/bench_reliability.py counts
the same table for BENCHMARKS.md)."""

from __future__ import annotations

import pytest

from bad_inputs import CASES, build_fixtures, run_case


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory):
    return build_fixtures(tmp_path_factory.mktemp("bad-input-fixtures"))


def test_the_table_covers_every_command_with_over_a_hundred_kinds():
    from selfcal.cli import app
    from typer.main import get_command

    group = get_command(app)
    commands = set()
    for name, command in group.commands.items():
        sub = getattr(command, "commands", None)
        commands |= {f"{name} {s}" for s in sub} if sub else {name}
    covered = {case.command for case in CASES}
    assert len(CASES) >= 100
    assert commands - covered == set(), f"commands without a bad-input case: {sorted(commands - covered)}"
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bad_input_ends_in_one_sentence_and_leaves_nothing(case, fixtures, tmp_path):
    outcome = run_case(case, fixtures, tmp_path)
    assert outcome.verdict == "clean", outcome
