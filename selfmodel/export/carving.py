"""Learned matter where the arm was not: the export's bodies carved by what the cameras saw through.

The self-model's bodies stand out of the real surface (a network's smooth level set, a depth shell
learned thick): on the xArm6 the pieces stood ~24 mm out of the true surface at the 95th percentile,
and a planner refuses ends where the real arm is centimetres clear. The training sessions' depth
images say where the arm was NOT: a ray that reads beyond a point went through it. A grid cell of a
link's body is removed when, at ``poses`` or more recorded poses, some camera saw through it
(:func:`selfmodel.labels.seen_through.through_counts`: the 3x3-pixel minimum reading beyond the cell by
more than the tolerance), or it lay below the mount plane the session states (the arm never reaches
through the surface it stands on). Space no camera saw stays occupied: for a planner, unknown is
matter.

The tolerance is ``SIGMAS`` times the camera's depth noise at the cell's depth plus half a cell's
diagonal (the cell's centre stands for all of it). The minimum of nine readings already lies about
1.5 sigma in front of a surface, so noise alone almost never carves true matter; the pose count
guards against what noise does not explain (a camera bumped for one pose, a reading of something
passing).

The report also states, per link, the carved body's unseen volume (:mod:`selfmodel.labels.unseen`:
its outer layer that no camera saw through or met at ``POSES`` poses), what ``selfcal plan --views``
plans the next capture around.

Nothing here reads truth/. When the training sessions are gone from where the model's config.json
names them (or their cameras have no poses of their own), nothing is carved and the report says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from selfmodel.export.bodies import LinkBody
from selfmodel.labels.seen_through import View, pose_counts, training_sessions
# POSES: recorded poses that must have seen through a cell before it is removed; SIGMAS: the
# tolerance in depth noise sigmas. The unseen measure counts with the same two.
from selfmodel.labels.unseen import POSES, SIGMAS, cell_tolerance, outer_layer


@dataclass
class Carving:
    """What the carving did, for the export report. ``status``: ``carved``, ``off`` or why not."""

    status: str
    poses: int = 0  # recorded poses whose depth images were read
    min_poses: int = POSES
    sigmas: float = SIGMAS
    cells_removed: dict[str, int] = field(default_factory=dict)
    below_mount: dict[str, int] = field(default_factory=dict)  # of those, cells below the mount plane
    volume_removed_cm3: dict[str, float] = field(default_factory=dict)
    # Link -> cm3 of the carved body's outer layer no camera saw at >= min_poses poses
    # (selfmodel.labels.unseen): matter only because unknown.
    unseen_cm3: dict[str, float] = field(default_factory=dict)
    warning: str | None = None

    def report(self) -> dict:
        return {"status": self.status, "poses": self.poses, "min_poses": self.min_poses, "sigmas": self.sigmas,
                "cells_removed": self.cells_removed, "below_mount": self.below_mount,
                "volume_removed_cm3": self.volume_removed_cm3, "unseen_cm3": self.unseen_cm3,
                "warning": self.warning}


def cell_centres(body: LinkBody) -> tuple[np.ndarray, np.ndarray]:
    """(n, 3) grid indices of the body's cells and (n, 3) their centres, link frame, m."""
    cells = np.argwhere(body.solid)
    return cells, body.origin + body.voxel * cells


def seen_through_cells(bodies: dict[str, LinkBody], poses: dict[str, np.ndarray], sessions: list,
                       sigmas: float = SIGMAS, progress=None
                       ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Per link, for every cell of its body (in :func:`cell_centres` order): at how many recorded
    poses some camera saw through it, at how many it lay below the mount plane by more than half
    a cell's diagonal, and at how many some camera saw it at all (through it or met it).
    ``poses``: link -> (C, 4, 4) base frame, C = the sessions' poses in order."""
    centres = {link: cell_centres(body)[1] for link, body in bodies.items()}
    half = {link: 0.5 * np.sqrt(3.0) * body.voxel for link, body in bodies.items()}
    views, below = [], {link: np.zeros(len(points), dtype=int) for link, points in centres.items()}
    config = 0
    for session in sessions:
        mount = session.mount_plane_z
        for row in range(len(session.pose_ids)):
            at = {link: poses[link][config] for link in bodies}
            views.append(View(session, row, at))
            if mount is not None:
                for link, points in centres.items():
                    height = points @ at[link][2, :3] + at[link][2, 3] - mount
                    below[link] += height < -half[link]
            config += 1
    voxel = max(body.voxel for body in bodies.values())
    through, _, seen = pose_counts(centres, views, cell_tolerance(voxel, sigmas), per_pose=True, progress=progress)
    return through, below, seen


def carve(bodies: dict[str, LinkBody], poses: dict[str, np.ndarray] | None, model_folder, recorded_q: np.ndarray | None,
          min_poses: int = POSES, sigmas: float = SIGMAS, progress=None) -> tuple[dict[str, np.ndarray], Carving]:
    """Link -> (n, 3) grid indices of the cells its body loses (module docstring), and the report.
    ``poses``: link -> (C, 4, 4) base frame at ``recorded_q`` (C, dof), which must be the training
    sessions' poses in order."""
    empty = {link: np.zeros((0, 3), dtype=int) for link in bodies}
    if min_poses <= 0:
        return empty, Carving("off", min_poses=min_poses, sigmas=sigmas)
    if poses is None or recorded_q is None:
        why = "the model does not know its recorded configurations"
        return empty, Carving("not carved", min_poses=min_poses, sigmas=sigmas,
                              warning=f"bodies not carved by the depth images: {why}; they keep all the learned bulk")
    sessions, why = training_sessions(model_folder)
    if sessions is not None:
        session_q = np.vstack([session.q for session in sessions])
        if session_q.shape != np.shape(recorded_q) or not np.allclose(session_q, recorded_q, atol=1e-6):
            sessions, why = None, (f"the training sessions' {len(session_q)} poses are not the model's "
                                   f"{len(recorded_q)} recorded configurations")
    if sessions is None:
        return empty, Carving("not carved", min_poses=min_poses, sigmas=sigmas,
                              warning=f"bodies not carved by the depth images: {why}; they keep all the learned bulk")
    through, below, seen = seen_through_cells(bodies, poses, sessions, sigmas, progress)
    lost, result = {}, Carving("carved", len(recorded_q), min_poses, sigmas)
    for link, body in bodies.items():
        cells, _ = cell_centres(body)
        gone = (through[link] >= min_poses) | (below[link] >= min_poses)
        lost[link] = cells[gone]
        left = body.solid.copy()
        left[tuple(cells[gone].T)] = False
        unknown = outer_layer(left)[tuple(cells.T)] & ~gone & (seen[link] < min_poses)
        result.unseen_cm3[link] = round(float(unknown.sum()) * body.voxel ** 3 * 1e6, 1)
        if gone.any():
            result.cells_removed[link] = int(gone.sum())
            result.below_mount[link] = int(((below[link] >= min_poses) & gone).sum())
            result.volume_removed_cm3[link] = round(float(gone.sum()) * body.voxel ** 3 * 1e6, 2)
    return lost, result
