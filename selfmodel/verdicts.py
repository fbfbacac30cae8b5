"""Is the learned body good, and is the arm intact? The verdicts of ``selfmodel eval`` and ``check``.

Both are built by :func:`rigs.verdicts.judge`.

- eval (a simulated session's truth): the Chamfer-L1 distance between the learned and the true
  surface against ``--tolerance-mm``; default the F-score's distance, 1 % of the workspace's
  largest extent (a surface within it counts as right). Half the marching-cubes voxel is the
  resolution: the learned surface is not placed finer than that. The share of the true body the
  model calls free (which a planner would drive into) is judged too, against ``--false-free-max``
  (percent, default DEFAULT_FALSE_FREE_PCT).
- check (a description, no truth): the link that differs most from the URDF against
  ``--threshold-mm``; default INTACT_FACTOR times the median link's deviation, and at least
  MINIMUM_THRESHOLD_VOXELS voxels of the check's meshes. A crash bends one link or two; the others
  are intact, so the median link shows how far an intact link of THIS model already strays from
  its description (learning error, unseen faces), and a link several times beyond that is damage.
  A threshold below that spread cannot be told from learning error (CANNOT TELL).
"""

from __future__ import annotations

import numpy as np

from rigs.errors import InputError
from rigs.verdicts import PASS, Tolerance, Verdict, combine, judge

DEFAULT_FALSE_FREE_PCT = 1.0
INTACT_FACTOR = 2.0
MINIMUM_THRESHOLD_VOXELS = 2.0
CHECK_VOXEL_MM = 4.0  # the voxel selfmodel.check meshes the learned links with


def _positive(value: float | None, flag: str) -> None:
    if value is not None and not value > 0:
        raise InputError(f"{flag} must be positive, got {value}.")


def eval_verdict(figures: dict, voxel_mm: float, tolerance_mm: float | None = None,
                 false_free_max_pct: float | None = None) -> Verdict:
    """The verdict of ``selfcal selfmodel eval`` from its ``figures``."""
    _positive(tolerance_mm, "--tolerance-mm")
    _positive(false_free_max_pct, "--false-free-max")
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


def check_threshold(deviations_mm: list[float], threshold_mm: float | None) -> tuple[Tolerance, float]:
    """(the damage threshold, the spread an intact link of this model shows, mm)."""
    _positive(threshold_mm, "--threshold-mm")
    spread = float(np.median(deviations_mm)) if deviations_mm else 0.0
    if threshold_mm is not None:
        return Tolerance(threshold_mm, "mm", "given with --threshold-mm"), spread
    floor = MINIMUM_THRESHOLD_VOXELS * CHECK_VOXEL_MM
    value = max(INTACT_FACTOR * spread, floor)
    source = (f"default: {INTACT_FACTOR:g} x the median link's deviation ({spread:.1f} mm), the spread an intact "
              f"link of this model shows" if value > floor else
              f"default: {MINIMUM_THRESHOLD_VOXELS:g} voxels of the check's meshes ({floor:g} mm), above "
              f"{INTACT_FACTOR:g} x the median link's deviation ({spread:.1f} mm)")
    return Tolerance(value, "mm", source), spread


def check_verdict(rows: list, threshold_mm: float | None = None) -> Verdict:
    """The verdict of ``selfcal selfmodel check`` from its rows (``LinkDeviation``, largest first)."""
    if not rows:
        raise InputError("the check compared no links (the description has no meshes on the model's chain).")
    tolerance, spread = check_threshold([row.deviation_mm for row in rows], threshold_mm)
    worst = max(rows, key=lambda row: row.deviation_mm)
    where = ", ".join(f"{1000 * v:.0f}" for v in worst.where_link)
    what = {"shape": f"{worst.link}'s own shape differs from the description:",
            "added matter": f"{worst.link} carries matter the description lacks (a tool, a cable?), reaching"
            }.get(worst.kind, f"{worst.link}'s {worst.kind} moves what follows it by")
    verdict = judge(what, worst.deviation_mm, tolerance, spread, "the spread an intact link of this model shows")
    if verdict.result == PASS:
        return Verdict(PASS, f"no link differs beyond the threshold of {tolerance.text()} (largest: {worst.link}, "
                             f"{worst.deviation_mm:.1f} mm, {worst.kind})", tolerance, worst.deviation_mm)
    if worst.deviation_mm > tolerance.value:
        verdict = Verdict(verdict.result, f"{verdict.reason}; largest at ({where}) mm in the link frame",
                          tolerance, worst.deviation_mm)
    return verdict
