"""What changed between two structured self-models of one arm (a model relearned after a crash
against the one before it): which joint's placement moved and by how much, which link's shape
grew or shrank, and where.

- joints: the difference of the placement corrections (translation mm, rotation degrees, the
  rotation of ``exp6(new) exp6(old)^-1``); *moved* when it exceeds the tolerance the corrections
  promise (1 mm, 0.2 degrees) and both fits determine the component that moved;
- links: both models' networks read on the same grid in the link's frame (``selfmodel.model.baked``):
  volume that became occupied (``added_cm3``) and that became free (``removed_cm3``), and the centre
  of the larger of the two (link frame, m). Retraining alone moves voxels at every surface (on the
  xArm6 50-250 cm3 a link after 100 steps on 30 poses), so a link counts as *changed* when its
  change exceeds twice the median link's and ``CHANGED_CM3``: what stands out of that noise.
"""

from __future__ import annotations

import numpy as np

from rigs.errors import InputError, setting
from rigs.transforms import exp6, log6
from selfmodel.model.baked import bake
from selfmodel.model.corrections import TOLERANCE

CHANGED_CM3 = 5.0  # the least change that names a link (a 4 x 4 x 12 cm tool is 192 cm3)


def what_changed(previous, new, pitch: float = 0.005) -> dict:
    """{"joints": [...], "links": [...]} of the module docstring, each list largest first."""
    if previous.kind != "structured" or new.kind != "structured":
        raise InputError("what changed is told for structured models only (a free model has no links or joints).")
    if list(previous.link_names) != list(new.link_names) or list(previous.joint_names) != list(new.joint_names):
        raise InputError("the two models are not of one chain: their links or joints differ.")
    old_deltas = previous.chain.deltas.detach().cpu().numpy().astype(float)
    new_deltas = new.chain.deltas.detach().cpu().numpy().astype(float)
    old_fit, new_fit = previous.corrections, new.corrections
    joints = []
    for j, name in enumerate(new.joint_names):
        step = log6(exp6(new_deltas[j]) @ np.linalg.inv(exp6(old_deltas[j])))
        translation_mm = float(np.linalg.norm(step[:3]) * 1000)
        rotation_deg = float(np.degrees(np.linalg.norm(step[3:])))
        determined = True
        if old_fit is not None and new_fit is not None:
            big = np.abs(new_deltas[j] - old_deltas[j]) > TOLERANCE
            determined = bool(np.any(big & old_fit.determined[j] & new_fit.determined[j])) if big.any() else True
        moved = bool(translation_mm > TOLERANCE[0] * 1000 or rotation_deg > np.degrees(TOLERANCE[3])) and determined
        joints.append({"joint": name, "translation_mm": translation_mm, "rotation_deg": rotation_deg,
                       "delta_change": (new_deltas[j] - old_deltas[j]).tolist(), "moved": moved})
    old_grids, new_grids = bake(previous, pitch).grids, bake(new, pitch).grids
    links = []
    voxel_cm3 = (pitch * 100) ** 3
    for index, link in enumerate(new.link_names):
        old_grid, new_grid = old_grids[index], new_grids[index]
        if old_grid.shape != new_grid.shape or not np.allclose(previous.domains_lo[index], new.domains_lo[index]):
            raise InputError(f"the two models' domains of {link} differ: relearn with {setting('previous')} to compare "
                             f"them.")
        was, now = old_grid > 0, new_grid > 0
        added, removed = now & ~was, was & ~now
        larger = added if added.sum() >= removed.sum() else removed
        lo = new.domains_lo[index]
        centre = (lo + pitch * np.argwhere(larger).mean(axis=0)).tolist() if larger.any() else None
        added_cm3, removed_cm3 = float(added.sum() * voxel_cm3), float(removed.sum() * voxel_cm3)
        links.append({"link": link, "added_cm3": added_cm3, "removed_cm3": removed_cm3, "where_link": centre})
    floor = max(CHANGED_CM3, 2 * float(np.median([row["added_cm3"] + row["removed_cm3"] for row in links])))
    for row in links:
        row["changed"] = bool(row["added_cm3"] + row["removed_cm3"] > floor)
    joints.sort(key=lambda row: -max(row["translation_mm"] / (TOLERANCE[0] * 1000), row["rotation_deg"] / np.degrees(TOLERANCE[3])))
    links.sort(key=lambda row: -(row["added_cm3"] + row["removed_cm3"]))
    return {"joints": joints, "links": links}


def summary(changes: dict) -> list[str]:
    """Lines for the terminal: the verdict first, then what moved."""
    moved = [row for row in changes["joints"] if row["moved"]]
    changed = [row for row in changes["links"] if row["changed"]]
    lines = [f"what changed: {len(moved)} joint placement(s) moved, {len(changed)} link shape(s) changed"
             if moved or changed else "what changed: nothing beyond retraining noise"]
    for row in moved:
        lines.append(f"  {row['joint']}: placement moved {row['translation_mm']:.1f} mm, {row['rotation_deg']:.2f} deg")
    for row in changed:
        where = "" if row["where_link"] is None else " around ({:.0f}, {:.0f}, {:.0f}) mm in the link frame".format(
            *(1000 * np.asarray(row["where_link"])))
        lines.append(f"  {row['link']}: shape +{row['added_cm3']:.0f} cm3 / -{row['removed_cm3']:.0f} cm3{where}")
    return lines
