"""The calibration board a session declares on the tip (``sensors.board``), in the collision export.

The board is a plate about 3.5 mm thick. Learned from depth it comes out blurred and thick, and a
cover of spheres fitted to that holds it at 9-12 times its volume. The export therefore takes the
board's learned cells out of the tip's body (the plate's box grown by the blur) and either leaves the
board out (``drop``: the arm as it is without it) or writes the plate as what it is (``keep``): one
box in the URDF, the plate's exact size grown by the tip's margin, and for cuRobo a single layer of
spheres in the plate's plane.

Shapes: tip-link frame, metres.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from selfmodel.export.bodies import ConvexPiece, LinkBody, polytope
from selfmodel.export.spheres import SphereCover

KEEP, DROP = "keep", "drop"
BOARD = "board"  # the group name of a kept board's spheres, listed under the tip after the arm's own
TREATMENTS = (KEEP, DROP)


@dataclass(frozen=True)
class PlateBox:
    """A box in the tip's frame: ``extents`` (3,) full side lengths, ``tip_T_box`` (4, 4) its centre and axes."""

    extents: np.ndarray
    tip_T_box: np.ndarray

    @classmethod
    def of(cls, plate) -> "PlateBox":
        """The declared plate (a trimesh box, :func:`selfmodel.labels.description.board_mesh`) as a box."""
        box = plate.bounding_box_oriented
        return cls(np.asarray(box.primitive.extents, dtype=float), np.asarray(box.primitive.transform, dtype=float))

    def grown(self, by: float) -> "PlateBox":
        return PlateBox(self.extents + 2.0 * by, self.tip_T_box)

    @property
    def thickness(self) -> float:
        return float(self.extents.min())

    @property
    def volume(self) -> float:
        return float(np.prod(self.extents))

    def local(self, points: np.ndarray) -> np.ndarray:
        """(N, 3) tip-frame points in the box's frame (its centre at the origin)."""
        box_T_tip = np.linalg.inv(self.tip_T_box)
        return np.asarray(points, dtype=float) @ box_T_tip[:3, :3].T + box_T_tip[:3, 3]

    def contains(self, points: np.ndarray, tolerance: float = 1e-9) -> np.ndarray:
        """(N, 3) -> (N,) bool: inside or on the box."""
        return np.all(np.abs(self.local(points)) <= 0.5 * self.extents + tolerance, axis=1)

    def piece(self) -> ConvexPiece:
        """The box as a convex piece (6 planes), for what measures pieces."""
        axes = self.tip_T_box[:3, :3].T
        normals = np.vstack([axes, -axes])
        centre = self.tip_T_box[:3, 3]
        offsets = np.concatenate([axes @ centre + 0.5 * self.extents, -(axes @ centre) + 0.5 * self.extents])
        return polytope(normals, offsets)


def board_cells(body: LinkBody, plate: PlateBox, grow: float) -> np.ndarray:
    """(k, 3) grid indices of ``body``'s cells inside the plate's box grown by ``grow`` m: the learned
    board (depth learns a plate thicker and wider than it is)."""
    cells = np.argwhere(body.solid)
    inside = plate.grown(grow).contains(body.origin + body.voxel * cells)
    return cells[inside]


def sphere_layer(plate: PlateBox, margin: float, budget: int) -> SphereCover:
    """One layer of equal spheres in the plate's mid-plane that holds the plate grown by ``margin``.

    The grown plate's face is tiled by a grid of at most ``budget`` cells, as near square as the
    count allows, one sphere at each cell's centre. A sphere must reach its cell's corners on both
    faces, so its radius is ``sqrt(h^2 + d^2)`` with ``h`` the plate's half-thickness plus the margin
    and ``d`` the cell's half-diagonal: every point of the grown plate is inside a sphere. More
    spheres make ``d`` smaller; no count makes the layer thinner than ``2 h`` (the box of the URDF)."""
    thin = int(np.argmin(plate.extents))
    a, b = (axis for axis in range(3) if axis != thin)
    width, length = plate.extents[a] + 2 * margin, plate.extents[b] + 2 * margin
    half_thickness = 0.5 * plate.extents[thin] + margin
    # The grid with the smallest cell diagonal among those of at most ``budget`` cells.
    _, across, along = min(((width / n) ** 2 + (length / (budget // n)) ** 2, n, budget // n)
                           for n in range(1, budget + 1))
    u = (np.arange(across) + 0.5) * width / across - 0.5 * width
    v = (np.arange(along) + 0.5) * length / along - 0.5 * length
    local = np.zeros((across * along, 3))
    local[:, a], local[:, b] = np.repeat(u, along), np.tile(v, across)
    radius = float(np.sqrt(half_thickness ** 2 + 0.25 * ((width / across) ** 2 + (length / along) ** 2)))
    centres = local @ plate.tip_T_box[:3, :3].T + plate.tip_T_box[:3, 3]
    return SphereCover(centres, np.full(len(centres), radius))
