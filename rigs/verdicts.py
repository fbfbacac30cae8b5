"""Verdicts: PASS, FAIL or CANNOT TELL, with the one reason that decided it and the tolerance used.

Every command that judges a result (calibrate, validate, audit report, recalibrate, selfmodel eval
and check) builds its verdict here, the same way:

- a measured figure is compared with a tolerance; at or below it is PASS;
- above it is FAIL, unless the tolerance is finer than what the data can resolve (the
  instrument's own uncertainty, the spread an intact arm shows): then CANNOT TELL, because a
  figure that size is what the measurement alone would give;
- a figure the data do not give (no held-out poses, no truth) is CANNOT TELL, never a PASS.

A tolerance records where it came from ("--tolerance-mm" or the documented default and the data
it was derived from), so a reader can see what was promised. Several checks combine into one
verdict: the first FAIL decides, else the first CANNOT TELL, else every check passed.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

PASS = "PASS"
FAIL = "FAIL"
CANNOT_TELL = "CANNOT TELL"
RESULTS = (PASS, FAIL, CANNOT_TELL)


@dataclass(frozen=True)
class Tolerance:
    """The largest acceptable value of a figure: ``value`` in ``unit``, ``source`` says who set it
    (a flag, or the default and the data it came from)."""

    value: float
    unit: str
    source: str

    def as_dict(self) -> dict:
        return {"value": float(self.value), "unit": self.unit, "source": self.source}

    def text(self) -> str:
        return f"{_format(self.value)} {self.unit}"


@dataclass(frozen=True)
class Verdict:
    result: str  # one of RESULTS
    reason: str  # one sentence: what decided it
    tolerance: Tolerance | None = None
    measured: float | None = None
    checks: list["Verdict"] = field(default_factory=list)  # the checks a combined verdict came from

    def __post_init__(self):
        if self.result not in RESULTS:
            raise ValueError(f"verdict result {self.result!r} is not one of {RESULTS}")

    @property
    def passed(self) -> bool:
        return self.result == PASS

    def as_dict(self) -> dict:
        """What ``--json`` prints under ``"verdict"``."""
        out = {"result": self.result, "reason": self.reason,
               "tolerance": None if self.tolerance is None else self.tolerance.as_dict(),
               "measured": None if self.measured is None else float(self.measured)}
        if self.checks:
            out["checks"] = [check.as_dict() for check in self.checks]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "Verdict":
        """The verdict ``as_dict`` wrote (the checks it came from are not kept)."""
        tolerance = data.get("tolerance")
        return cls(data["result"], data["reason"], None if tolerance is None else
                   Tolerance(tolerance["value"], tolerance["unit"], tolerance["source"]), data.get("measured"))

    def line(self) -> str:
        """The first line of a command's text output."""
        return f"{self.result}: {self.reason}"

    def html(self) -> str:
        """The block that opens a report page."""
        css = {PASS: "ok", FAIL: "fail", CANNOT_TELL: "warning"}[self.result]
        tolerance = "" if self.tolerance is None else (
            f"<br><span class='muted'>tolerance {html.escape(self.tolerance.text())} "
            f"({html.escape(self.tolerance.source)})</span>")
        return (f"<p class='{css} verdict'><strong>{html.escape(self.result)}</strong>: "
                f"{html.escape(self.reason)}{tolerance}</p>")


def _format(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"


def judge(what: str, measured: float | None, tolerance: Tolerance, resolution: float | None = None,
          resolution_what: str = "what the data resolve", missing: str = "") -> Verdict:
    """The verdict of one figure: ``what`` (words, e.g. "held-out RMS error") was ``measured`` in
    the tolerance's unit; ``resolution`` is the smallest value the data can tell apart from zero
    (None when unknown), described by ``resolution_what``; ``missing`` says why there is no figure."""
    unit = tolerance.unit
    if measured is None:
        return Verdict(CANNOT_TELL, missing or f"no {what} could be measured", tolerance)
    shown = f"{what} {_format(measured)} {unit}"
    if measured <= tolerance.value:
        return Verdict(PASS, f"{shown} is within the tolerance of {tolerance.text()}", tolerance, measured)
    if resolution is not None and tolerance.value < resolution:
        return Verdict(CANNOT_TELL, f"{shown} is above the tolerance of {tolerance.text()}, but the tolerance is "
                                    f"finer than {resolution_what} ({_format(resolution)} {unit})", tolerance, measured)
    return Verdict(FAIL, f"{shown} exceeds the tolerance of {tolerance.text()}", tolerance, measured)


def cannot_tell(reason: str, tolerance: Tolerance | None = None, measured: float | None = None) -> Verdict:
    return Verdict(CANNOT_TELL, reason, tolerance, measured)


def combine(checks: list[Verdict]) -> Verdict:
    """One verdict from several: the first FAIL, else the first CANNOT TELL, else PASS (all reasons)."""
    if not checks:
        return cannot_tell("nothing was checked")
    if len(checks) == 1:
        return checks[0]
    for result in (FAIL, CANNOT_TELL):
        for check in checks:
            if check.result == result:
                return Verdict(result, check.reason, check.tolerance, check.measured, list(checks))
    first = checks[0]
    return Verdict(PASS, "; ".join(check.reason for check in checks), first.tolerance, first.measured, list(checks))


def with_note(verdict: Verdict, note: str) -> Verdict:
    """The same verdict with a sentence appended to its reason (what the figure was measured on)."""
    return Verdict(verdict.result, f"{verdict.reason} ({note})", verdict.tolerance, verdict.measured, verdict.checks)


# Exit statuses of --require-pass: 0 PASS; 2 stays a user's mistake; 1 FAIL; 3 CANNOT TELL.
EXIT_STATUS = {PASS: 0, FAIL: 1, CANNOT_TELL: 3}
