"""What a collision export is configured by: the settings of
:class:`selfmodel.export.exporter.CollisionExporter`, grouped by the stage that reads them.

Each group is checked when it is made, so a bad setting is refused before any work (a model's
worth of marching cubes and decomposition), and is kept as given. A refusal names the setting by
its field (``max_spheres``), which the command line turns into the flag that sets it (``--spheres``).
Lengths in metres.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rigs.errors import InputError, setting
from selfmodel.export.board import KEEP, TREATMENTS
from selfmodel.export.carving import POSES as CARVE_POSES, SIGMAS as CARVE_SIGMAS

# The spheres of the layer that holds the declared calibration board with --board keep: with a 2 mm
# margin 256 hold the xArm6's 280 x 210 mm board at 5.8 times its volume (12 mm spheres), 64 at 11
# times (22 mm), as much as the fitted board group did; 512 at 4.4 times, but a planner checks every one.
BOARD_SPHERES = 256


def _finite(value) -> bool:
    try:
        return math.isfinite(value)
    except TypeError:
        return False


@dataclass(frozen=True)
class BodySettings:
    """Each link's learned body (marching cubes of its occupancy, link frame), carved and settled
    apart from its neighbours where the arm really stood.

    ``voxel``: grid spacing of the bodies (m). ``free_configurations``: how many configurations
    define a free model's link bodies, and ``free_consistency`` the mean occupancy across them that
    counts as the link's body. ``overlap_tolerance``: how deep (m) inside both of two links' bodies
    space they both claim at a recorded configuration may lie before the model is refused
    (shallower overlap is settled: :mod:`selfmodel.export.separation`). ``carve_poses``: a body cell
    goes where the training sessions' cameras saw through it at this many recorded poses (0: no
    carving), the reading beyond it by ``carve_sigmas`` depth noise sigmas
    (:mod:`selfmodel.export.carving`). ``board``: what becomes of the calibration board the session
    declares on the tip (:mod:`selfmodel.export.board`); either way its learned cells leave the tip's
    body. ``keep`` (the default: the arm as it was measured, and removing matter that was there is the
    user's own statement) writes the plate as it is, a box and a layer of spheres; ``drop`` leaves it
    out, for an arm the board was taken off after calibration. No board declared: nothing changes.
    """

    voxel: float = 0.003
    free_configurations: int = 12
    free_consistency: float = 0.8
    overlap_tolerance: float = 0.015
    carve_poses: int = CARVE_POSES
    carve_sigmas: float = CARVE_SIGMAS
    board: str = KEEP

    def __post_init__(self):
        if not (_finite(self.voxel) and self.voxel > 0):
            raise InputError(f"{setting('voxel')} {self.voxel * 1000:g} mm: the grid spacing must be > 0.")
        if self.free_configurations < 1:
            raise InputError(f"{setting('free_configurations')} {self.free_configurations}: need at least one "
                             f"configuration.")
        if not (_finite(self.free_consistency) and 0 < self.free_consistency <= 1):
            raise InputError(f"{setting('free_consistency')} {self.free_consistency}: a mean occupancy, in (0, 1].")
        if not (_finite(self.overlap_tolerance) and self.overlap_tolerance >= 0):
            raise InputError(f"{setting('overlap_tolerance')} {self.overlap_tolerance * 1000:g} mm: must be a finite "
                             f"depth >= 0.")
        if self.carve_poses < 0:
            raise InputError(f"{setting('carve_poses')} {self.carve_poses}: must be >= 0 (0: no carving).")
        if not (_finite(self.carve_sigmas) and self.carve_sigmas >= 0):
            raise InputError(f"{setting('carve_sigmas')} {self.carve_sigmas}: must be a finite number of sigmas >= 0.")
        if self.board not in TREATMENTS:
            raise InputError(f"{setting('board')} {self.board!r}: keep (the board stays in the export, as it was "
                             f"measured) or drop (the arm without it).")


@dataclass(frozen=True)
class PieceSettings:
    """The convex pieces of each link (coacd, conservative hulls; :mod:`selfmodel.export.bodies`):
    at most ``max_pieces`` a link, at most ``max_vertices`` vertices each."""

    max_pieces: int = 8
    max_vertices: int = 64

    def __post_init__(self):
        if self.max_pieces < 1:
            raise InputError(f"{setting('max_pieces')} {self.max_pieces}: need at least one convex piece a link.")
        if self.max_vertices < 8:
            raise InputError(f"{setting('max_vertices')} {self.max_vertices}: a piece needs at least 8 vertices.")


@dataclass(frozen=True)
class SphereSettings:
    """The sphere covers for cuRobo (:mod:`selfmodel.export.spheres`): ``max_spheres`` shared by the
    arm's links (at least one a link), ``board_spheres`` at most for the layer that holds the
    calibration board the session declares on the tip, when it is kept (listed under the tip; the
    more, the thinner the layer: :func:`selfmodel.export.board.sphere_layer`), ``iterations`` steps of the joint sphere fit
    (:mod:`selfmodel.export.sphere_fit`; 0: the greedy cover as it is; None: as many as
    :func:`selfmodel.export.sphere_groups.fit_groups` takes, more where neighbours bound the spheres),
    and ``polish`` steps the start the fit keeps is refined again alone (0: not at all; None: as many
    as ``fit_groups`` takes: ``POLISH`` where neighbours bound the spheres and the fit refines, else 0)."""

    max_spheres: int = 64
    board_spheres: int = BOARD_SPHERES
    iterations: int | None = None
    polish: int | None = None

    def __post_init__(self):
        if self.max_spheres < 1:
            raise InputError(f"{setting('max_spheres')} {self.max_spheres}: need at least one sphere a link.")
        if self.board_spheres < 1:
            raise InputError(f"{setting('board_spheres')} {self.board_spheres}: a kept board needs at least one "
                             f"sphere.")
        if self.iterations is not None and self.iterations < 0:
            raise InputError(f"{setting('iterations')} {self.iterations}: must be >= 0 (0: the greedy cover).")
        if self.polish is not None and self.polish < 0:
            raise InputError(f"{setting('polish')} {self.polish}: must be >= 0 (0: the kept start as refined).")


@dataclass(frozen=True)
class MarginSettings:
    """How far each link's pieces and spheres grow. ``value``: metres for every link, or None for the
    automatic margin: for each link the smallest inflation that puts its own 0.5 level set, sampled
    afresh around it (``samples`` points, the ``climbs`` worst climbed outward), inside its pieces
    (:mod:`selfmodel.export.margin`), each piece by what the samples nearest it need and at least
    ``floor`` m. A kept board's box at a fitted mount grows by ``floor`` too."""

    value: float | None = None
    samples: int = 20_000
    climbs: int = 300
    # About the placement error of a calibrated or fitted model (0.5-1.1 mm on the test rigs): the
    # learned surface lies inside the true one by that much in places, where its own level set alone
    # left up to 2.8 mm of the xArm6 base's true surface outside its pieces (1 mm: 2.2 mm, 0.08 %). Half
    # of it is not enough: at 0.5 mm the 6000-step xArm6 export held 97.6 % of the true surface, not
    # 99.8 % (its pieces 1.145 times the true volume, not 1.169; false alarms 1.03 %, not 1.29 %).
    floor: float = 0.001

    def __post_init__(self):
        if self.value is not None and not (_finite(self.value) and self.value >= 0):
            raise InputError(f"{setting('margin')} {self.value * 1000:g} mm: the margin must be a finite number >= 0.")
        if self.samples < 1:
            raise InputError(f"margin {setting('samples')} {self.samples}: need at least one sample.")
        if self.climbs < 0:
            raise InputError(f"margin {setting('climbs')} {self.climbs}: must be >= 0.")
        if not (_finite(self.floor) and self.floor >= 0):
            raise InputError(f"margin {setting('floor')} {self.floor * 1000:g} mm: must be a finite number >= 0.")
