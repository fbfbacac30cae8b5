"""Space on a link that no camera has seen: where a self-model's body is matter only because it is unknown.

A link's body (the learned body, or its description voxelised before any capture) is a grid of
cells in the link frame. A cell is *seen* at a recorded pose when some camera saw through it or its
reading met it (:func:`selfmodel.labels.seen_through.pose_counts`, the tolerance the export's carving
uses: ``SIGMAS`` depth-noise sigmas plus half a cell's diagonal), and *known* when it was seen at
``POSES`` poses or more, the count the carving asks before it removes a cell. A known cell is either
carved (seen free) or the arm's surface (met); an unknown cell stays matter for a planner.

Only the body's outer layer (cells with a face-neighbour outside the body) is measured: a cell
deeper than that lies behind the link's own surface from every side, and no pose shows it, so
counting it would say nothing about the capture. The unseen volume of a link is its outer layer's
unknown cells times a cell's volume, in cm3 (a slab the cameras never saw past counts its faces; a
link seen all round counts nothing).

The training sessions' depth images give the counts of a trained model;
:mod:`selfmodel.learn.view_planning` adds the counts that planned poses are expected to bring.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from scipy import ndimage

from selfmodel.labels.seen_through import View, pose_counts

POSES = 3  # recorded poses that must have seen a cell (through it, for carving) before it counts
# The tolerance in depth noise sigmas (plus half a cell's diagonal). Tighter buys little: on the
# xArm6 rig half of it carves 2 % more of the learned excess and takes 1.3 times the cells at the
# true surface (scripts/export_excess.py --sigmas); what stays is space no camera saw through.
SIGMAS = 1.0
PITCH = 0.005  # m: side of the cells a model's learned body is measured on


def cell_tolerance(voxel: float, sigmas: float = SIGMAS) -> Callable[[object, np.ndarray], np.ndarray]:
    """``tolerance(camera, z (n,) m) -> (n,) m``: ``sigmas`` times the camera's depth noise at ``z``
    plus half the diagonal of a ``voxel`` m cell (its centre stands for all of it)."""
    def tolerance(camera, z: np.ndarray) -> np.ndarray:
        return sigmas * camera.depth_sigma(z) + 0.5 * np.sqrt(3.0) * voxel

    return tolerance


def outer_layer(solid: np.ndarray) -> np.ndarray:
    """(nx, ny, nz) bool body -> the same shape, True on its cells with a face-neighbour outside it
    (the grid's edge counts as outside)."""
    padded = np.pad(solid, 1)
    inner = ndimage.binary_erosion(padded, structure=ndimage.generate_binary_structure(3, 1))[1:-1, 1:-1, 1:-1]
    return solid & ~inner


def learned_cells(model, pitch: float = PITCH) -> dict[str, np.ndarray]:
    """Link -> (n, 3) centres (link frame, m) of the outer layer of a structured ``model``'s learned
    body: cells of a ``pitch`` m grid over the link's domain whose own network says occupied
    (probability above one half)."""
    cells = {}
    for link in model.link_names:
        lo, hi = model.link_bounds(link)
        axes = [np.arange(a + pitch / 2, b, pitch) for a, b in zip(lo, hi)]
        grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1)
        solid = (model.link_occupancy(link, grid.reshape(-1, 3)) > 0.5).reshape(grid.shape[:3])
        cells[link] = grid[outer_layer(solid)]
    return cells


def described_cells(meshes: dict, pitch: float = PITCH) -> dict[str, np.ndarray]:
    """Link -> (n, 3) centres (link frame, m) of the outer layer of each link's description
    (trimesh, link frame: ``selfmodel.labels.description.described_meshes``) filled on a ``pitch``
    m grid: the body before any capture."""
    cells = {}
    for link, mesh in meshes.items():
        grid = mesh.voxelized(pitch).fill()
        solid = np.asarray(grid.matrix, dtype=bool)
        index = np.argwhere(outer_layer(solid))
        cells[link] = index * pitch + grid.transform[:3, 3]
    return cells


def recorded_seen(cells: dict[str, np.ndarray], link_names: list[str], base_T_links: np.ndarray, sessions: list,
                  voxel: float, sigmas: float = SIGMAS, progress=None) -> dict[str, np.ndarray]:
    """Link -> (n,) at how many of the ``sessions``' recorded poses some camera saw each cell of
    ``cells[link]`` (n, 3 link frame, m; ``voxel`` m cells). ``base_T_links``: (C, L, 4, 4) the links
    (``link_names`` order) at the sessions' C poses in order."""
    views, config = [], 0
    for session in sessions:
        for row in range(len(session.pose_ids)):
            views.append(View(session, row, {link: base_T_links[config, i] for i, link in enumerate(link_names)
                                             if link in cells}))
            config += 1
    return pose_counts(cells, views, cell_tolerance(voxel, sigmas), per_pose=True, progress=progress)[2]


def unseen_cm3(counts: dict[str, np.ndarray], voxel: float, min_poses: int = POSES) -> dict[str, float]:
    """Link -> cm3 of its cells seen at fewer than ``min_poses`` poses (``counts[link]`` (n,) poses,
    ``voxel`` m cells)."""
    return {link: round(float(np.sum(np.asarray(seen) < min_poses)) * voxel ** 3 * 1e6, 1)
            for link, seen in counts.items()}
