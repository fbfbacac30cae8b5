"""Is the learned body good, and is the arm intact? The verdicts of ``selfmodel eval`` and ``check``.

Both are built by :func:`rigs.verdicts.judge`.

- eval (a simulated session's truth): the Chamfer-L1 distance between the learned and the true
  surface against ``--tolerance-mm``; default the F-score's distance, 1 % of the workspace's
  largest extent (a surface within it counts as right). Half the marching-cubes voxel is the
  resolution: the learned surface is not placed finer than that. The share of the true body the
  model calls free (which a planner would drive into) is judged too, against ``--false-free-max``
  (percent, default DEFAULT_FALSE_FREE_PCT).
- check (a description, no truth; :mod:`selfmodel.inspect.check`): every link's figures (how far a joint
  correction moves what follows it, matter outside and inside the description) against
  ``--threshold-mm``; default THRESHOLD_NOISE_FACTOR times the depth noise about the description
  (the robust spread of every measured point's distance to it, over the whole arm), and at least
  MINIMUM_THRESHOLD_MM. Damage that holds a large share of the points widens that spread (an
  undeclared board on the xArm6's flange, a third of the points: 7.0 mm instead of 3.2), which
  raises the threshold but leaves it far below what such matter reads. A figure counts as damage
  when it exceeds the threshold by more than twice its standard deviation (FAIL); when the
  threshold lies within two standard deviations of it, or a joint figure has none (a model trained
  without a placement fit), the data do not tell (CANNOT TELL); a threshold below the depth noise
  itself cannot be told from it either. On an intact arm the largest figure is about the noise
  (the xArm6: 4-5 mm against 3.2 mm of noise), so three times the noise keeps intact links below
  it while a 3 degree bend (16 mm on the xArm6) is beyond.
"""

from __future__ import annotations

from dataclasses import replace

from rigs.errors import InputError, setting
from rigs.verdicts import FAIL, PASS, Tolerance, Verdict, cannot_tell, combine, judge

DEFAULT_FALSE_FREE_PCT = 1.0
THRESHOLD_NOISE_FACTOR = 3.0
MINIMUM_THRESHOLD_MM = 5.0


def _positive(value: float | None, flag: str) -> None:
    if value is not None and not value > 0:
        raise InputError(f"{flag} must be positive, got {value}.")


def eval_verdict(figures: dict, voxel_mm: float, tolerance_mm: float | None = None,
                 false_free_max_pct: float | None = None) -> Verdict:
    """The verdict of ``selfcal selfmodel eval`` from its ``figures``."""
    _positive(tolerance_mm, setting("tolerance_mm"))
    _positive(false_free_max_pct, setting("false_free_max_pct"))
    if tolerance_mm is not None:
        tolerance = Tolerance(tolerance_mm, "mm", "given with --tolerance-mm")
    else:
        tau = figures["fscore_tau_mm"]
        tolerance = Tolerance(tau, "mm", f"default: the F-score's distance, 1 % of the workspace's largest extent "
                                         f"({figures['workspace_extent_m']:.2f} m)")
    surface = judge("Chamfer-L1 distance between the learned and the true surface", figures["chamfer_l1_mm"],
                    tolerance, voxel_mm / 2, "half the marching-cubes voxel")
    limit = DEFAULT_FALSE_FREE_PCT if false_free_max_pct is None else false_free_max_pct
    free = judge("share of the true body the model calls free", 100 * figures["false_free_rate"],
                 Tolerance(limit, "%", "given with --false-free-max" if false_free_max_pct is not None else
                           f"default: {DEFAULT_FALSE_FREE_PCT:g} % (a planner would drive into it)"))
    return combine([surface, free])


def check_threshold(noise_mm: float, threshold_mm: float | None) -> Tolerance:
    """The damage threshold: given, or derived from the depth noise about the description (mm)."""
    _positive(threshold_mm, setting("threshold_mm"))
    if threshold_mm is not None:
        return Tolerance(threshold_mm, "mm", "given with --threshold-mm")
    value = max(THRESHOLD_NOISE_FACTOR * noise_mm, MINIMUM_THRESHOLD_MM)
    source = (f"default: {THRESHOLD_NOISE_FACTOR:g} x the depth noise about the description ({noise_mm:.1f} mm)"
              if value > MINIMUM_THRESHOLD_MM else
              f"default: {MINIMUM_THRESHOLD_MM:g} mm, above {THRESHOLD_NOISE_FACTOR:g} x the depth noise about the "
              f"description ({noise_mm:.1f} mm)")
    return Tolerance(value, "mm", source)


def _pm(value: float, sd: float | None, digits: int = 1) -> str:
    return f"{value:.{digits}f} mm" if sd is None else f"{value:.{digits}f} +- {sd:.{digits}f} mm"


def _where(point: list[float]) -> str:
    return "(" + ", ".join(f"{1000 * v:.0f}" for v in point) + ") mm"


def describe(row) -> str:
    """What a row's deciding figure says, in words (``selfmodel.inspect.check.LinkDeviation``)."""
    if row.kind == "added matter":
        return (f"{row.link} carries matter the description lacks (a tool, a cable?): measured surface "
                f"{_pm(row.added_mm, row.added_sd_mm)} outside it around {_where(row.added_where_link)} in the link frame")
    if row.kind == "missing matter" and row.missing_seen_through:
        return (f"{row.link} lacks matter the description has: the cameras saw through its described surface around "
                f"{_where(row.missing_where_link)} in the link frame, {_pm(row.missing_mm, row.missing_sd_mm)} from the "
                f"nearest surface they measured")
    if row.kind == "missing matter":
        return (f"{row.link} lacks matter the description has: the cameras saw {_pm(row.missing_mm, row.missing_sd_mm)} "
                f"inside the described body around {_where(row.missing_where_link)} in the link frame")
    bend = (f"{row.bend_deg:.2f} deg" if row.bend_sd_deg is None else f"{row.bend_deg:.2f} +- {row.bend_sd_deg:.2f} deg")
    return (f"{row.link} is bent or its joint {row.joint} sits off: the joint is turned {bend} and shifted "
            f"{_pm(row.shift_mm, row.shift_sd_mm)} from the description, which moves what follows it by "
            f"{_pm(row.joint_mm, row.joint_sd_mm)}; at {row.joint}, {_where(row.joint_where_link)} in {row.link}'s frame")


def check_verdict(result, threshold_mm: float | None = None) -> Verdict:
    """The verdict of ``selfcal selfmodel check`` from its :class:`~selfmodel.inspect.check.DamageCheck`."""
    rows = result.rows
    if not rows:
        raise InputError("the check compared no links (the description has no meshes on the model's chain).")
    tolerance = check_threshold(result.noise_mm, threshold_mm)
    limit = tolerance.value
    if limit < result.noise_mm:
        worst = max(rows, key=lambda row: row.deviation_mm)
        return cannot_tell(f"the threshold of {tolerance.text()} is finer than the depth noise about the description "
                           f"({result.noise_mm:.1f} mm): a figure that size is what the measurement alone gives "
                           f"(largest: {describe(worst)})", tolerance, worst.deviation_mm)
    beyond, unsure = [], []
    for row in rows:
        for value, sd, kind in ((row.joint_mm, row.joint_sd_mm, f"joint {row.joint}"),
                                (row.added_mm, row.added_sd_mm, "added matter"),
                                (row.missing_mm, row.missing_sd_mm, "missing matter")):
            if kind == "joint ":  # the link carries no movable joint
                continue
            if sd is None:
                if value > limit:
                    unsure.append((value, row, kind, sd))
            elif value - 2 * sd > limit:
                beyond.append((value - 2 * sd, row, kind))
            elif value + 2 * sd > limit:
                unsure.append((value, row, kind, sd))
    if beyond:
        beyond.sort(key=lambda item: -item[0])
        _, row, kind = beyond[0]
        shown = _kind_view(row, kind)
        others = sorted({f"{other.link} ({what})" for _, other, what in beyond[1:] if other is not row or what != kind})
        also = f"; also beyond it: {', '.join(others)}" if others else ""
        return Verdict(FAIL, f"{describe(shown)}: beyond the threshold of {tolerance.text()}{also}", tolerance,
                       shown.deviation_mm)
    if unsure:
        value, row, kind, sd = max(unsure, key=lambda item: item[0])
        shown = _kind_view(row, kind)
        why = ("the model carries no placement fit to say how well its joints are known (retrain it)" if sd is None else
               "the threshold lies within two standard deviations of it")
        return cannot_tell(f"{describe(shown)}: {why} ({tolerance.text()}), so the data do not tell", tolerance, value)
    worst = max(rows, key=lambda row: row.deviation_mm)
    sd = "" if worst.deviation_sd_mm is None else f" +- {worst.deviation_sd_mm:.1f}"
    return Verdict(PASS, f"no link differs beyond the threshold of {tolerance.text()} (largest: {worst.link}, "
                         f"{worst.deviation_mm:.1f}{sd} mm, {worst.kind})", tolerance, worst.deviation_mm)


def _kind_view(row, kind: str):
    """The row with ``kind`` as its deciding figure (a link can be beyond on more than one)."""
    value, sd = {"added matter": (row.added_mm, row.added_sd_mm),
                 "missing matter": (row.missing_mm, row.missing_sd_mm)}.get(kind, (row.joint_mm, row.joint_sd_mm))
    where = {"added matter": row.added_where_link, "missing matter": row.missing_where_link}.get(kind, row.joint_where_link)
    return replace(row, kind=kind, deviation_mm=value, deviation_sd_mm=sd, where_link=list(where))
