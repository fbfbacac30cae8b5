"""Collision geometry for planners from a learned self-model.

For every link of the model: its learned body in the link's frame (marching cubes of the
per-link occupancy; for the free model, of what stays occupied in the link's frame across many
configurations), carved where the training sessions' cameras saw through it
(:mod:`selfmodel.export.carving`), then

- convex pieces (coacd, at most M a link, at most 64 vertices each, conservative hulls),
- a margin for each link: by default the smallest inflation that puts the link's own 0.5 level set,
  sampled afresh around it (at training configurations for the free model), inside its pieces,
- sphere covers holding the inflated body, one budget for the arm's links (:mod:`selfmodel.export.spheres`),
- the calibration board a session declares on the tip taken out of the tip's body, then kept as the
  plate it is (one box, one layer of spheres) or dropped (:mod:`selfmodel.export.board`),
- at every recorded configuration, links apart: overlapping bodies are refused, overlapping pieces
  cut and spheres shrunk (:mod:`selfmodel.export.separation`),

written as ``robot.urdf`` (the model's URDF, learned joint placements, every ``<collision>``
replaced by the pieces, ``<visual>`` untouched), ``robot.srdf`` (MoveIt's rules, :mod:`selfmodel.export.srdf`),
``curobo_spheres.yml`` and ``curobo_robot.yml`` (:mod:`selfmodel.export.curobo`) and
``export_report.json``; before the folder is kept, the URDF and SRDF as written are loaded the way a
planner loads them and every recorded configuration must be free.
"""

from __future__ import annotations

import math
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import trimesh
from scipy import ndimage

from capture.session import load_session
from rigs import urdf as urdf_io
from rigs.errors import InputError, setting
from rigs.files import atomic_write_json, atomic_write_text, check_new_output, output_folder
from selfmodel.export.board import BOARD, DROP, KEEP, PlateBox, board_cells, sphere_layer
from selfmodel.export.bodies import (ConvexPiece, EmptyBody, LinkBody, conservative_hull, convex_pieces, link_body,
                                     piece_needs, pieces_outside_distance)
from selfmodel.export.carving import Carving, carve
from selfmodel.export.curobo import dump, robot_document, spheres_document
from selfmodel.export.page import write_export_page
from selfmodel.export.margin import (check_margin, climb_outward, level_set_samples, measured_surface_inside,
                                     own_level_set)
from selfmodel.export.separation import (Separation, pair_kinds, separate_pieces, separate_spheres, settle_bodies,
                                         without_cells)
from selfmodel.export.settings import BodySettings, MarginSettings, PieceSettings, SphereSettings
from selfmodel.export.sources import (board_report, free_model_description, free_model_sessions, less_parent,
                                      link_sources)
from selfmodel.export.sphere_fit import Contact
from selfmodel.export.sphere_groups import fit_groups, limit_spheres, sphere_target
from selfmodel.export.spheres import SphereCover
from selfmodel.export.srdf import CollisionMatrix, LinkTree, collision_matrix, write_srdf
from selfmodel.export.world import CollisionWorld
from selfmodel.labels.description import board_mesh, board_mount
from selfmodel.model.chain import ArmLinks, link_poses_numpy
from selfmodel.model.folder import training_session_paths
from selfmodel.model.models import FreeSelfModel, SelfModel, StructuredSelfModel

Progress = Callable[[int, int], None]


@dataclass
class LinkCollision:
    link: str
    body: LinkBody
    pieces: list[ConvexPiece]  # margin applied
    spheres: SphereCover  # margin applied
    margin_needed: float  # m, what this link's level-set samples needed outside its pieces
    surface_samples: int
    piece_needs: list[float] = field(default_factory=list)  # m, of those the samples nearest each piece needed
    piece_margins: list[float] = field(default_factory=list)  # m, what each piece grew by
    sphere_groups: list[str] = field(default_factory=list)  # (k,) "arm" or the group (the tip's board) of each sphere
    board_box: PlateBox | None = None  # the kept board's plate, grown by the margin: a box of its own in the URDF

    @property
    def all_pieces(self) -> list[ConvexPiece]:
        """What a planner loads for this link: the learned pieces and the kept board's box."""
        return self.pieces + ([self.board_box.piece()] if self.board_box is not None else [])


def empty_body(link: str, voxel: float, origin: np.ndarray, shape: tuple[int, int, int] = (2, 2, 2)) -> LinkBody:
    """A link with no learned body of its own (its matter held by a rigidly joined neighbour, or all
    of it a board taken out): no pieces, no spheres; an empty grid of ``shape`` cells at ``origin``."""
    return LinkBody(link, trimesh.Trimesh(), np.zeros((0, 3)), voxel, False, 0.0, 0.0, np.zeros(shape, dtype=bool),
                    np.asarray(origin, dtype=float))


def with_box(body: LinkBody, box: PlateBox) -> LinkBody:
    """``body`` with the cells of its grid whose centres lie in ``box`` (link frame) added: the tip's
    own learned body and a kept board's plate, as the neighbours' spheres must stay clear of them."""
    index = np.indices(body.solid.shape).reshape(3, -1).T
    solid = body.solid | box.contains(body.origin + body.voxel * index).reshape(body.solid.shape)
    return LinkBody(body.link, body.mesh, body.origin + body.voxel * np.argwhere(solid), body.voxel,
                    body.touches_bounds, body.dropped_fraction, body.inscribed_radius, solid, body.origin)


@dataclass
class Recorded:
    """The configurations the arm really stood at (the model's training poses)."""

    pose_ids: list[str]
    q: np.ndarray  # (C, dof)


@dataclass
class Bodies:
    """The first stage of the fit: learned bodies (link frames, m) with what they came from, the
    chain's pair kinds, and each link's poses (C, 4, 4) at the recorded configurations."""

    sources: list
    bodies: dict[str, LinkBody]
    occupancies: dict
    spec: object
    recorded: Recorded | None
    kinds: dict[tuple[str, str], str]
    separation: Separation
    poses: dict[str, np.ndarray] | None
    seconds: dict[str, float]
    rng: np.random.Generator
    carving: Carving | None = None
    board_held: dict[str, float] = field(default_factory=dict)  # link -> cm3 of the board's cells it held, taken out


@dataclass
class CollisionExport:
    """The fitted export: per-link geometry in link frames (m), the margin, timings (s)."""

    links: dict[str, LinkCollision]
    margin: float  # m, the largest any link grew by
    margin_mode: str  # "auto" (each link its own need) or "given" (the same for all)
    seconds: dict[str, float] = field(default_factory=dict)
    joint_origins: dict[str, np.ndarray] = field(default_factory=dict)  # learned joint placements written
    joint_names: list[str] = field(default_factory=list)
    base_link: str = ""
    tip_link: str = ""
    held: dict[str, float] = field(default_factory=dict)
    recorded: Recorded | None = None
    separation: Separation | None = None
    carving: Carving | None = None
    margins: dict[str, float] = field(default_factory=dict)  # m, link -> the margin its geometry grew by
    board: dict | None = None  # the declared board's mount and blur, as selfmodel.export.sources.board_report says
    sphere_starts: dict | None = None  # the greedy starts the sphere fit refined, the one kept and its polish

    @property
    def pieces(self) -> dict[str, list[ConvexPiece]]:
        """link -> what a planner loads as its geometry: the learned pieces and a kept board's box."""
        return {name: link.all_pieces for name, link in self.links.items()}

    def save(self, out: Path, model_urdf: Path, srdf_samples: int = 10_000, force: bool = False,
             evaluate: Callable[[Path, "CollisionExport"], dict] | None = None, progress: Progress | None = None,
             seed: int = 0, description: Path | None = None, ros_package: str | None = None) -> dict:
        """Write the export folder ``out`` atomically (robot.urdf with the collision geometry written
        into ``model_urdf``'s links, robot.srdf from ``srdf_samples`` configurations, cuRobo's files);
        returns the report (also ``out/export_report.json``). ``description``: the URDF whose visual
        meshes stand for the real arm when the SRDF's disabled pairs are checked (default:
        ``model_urdf``). ``evaluate(exported_urdf, export)`` may add report keys (``truth``,
        ``measured_surface``). InputError, and no folder, when the written model is in collision at a
        recorded configuration. ``ros_package``: NAME or NAME/FOLDER, robot.urdf's mesh paths written
        as ``package://`` URIs of that ROS package once every check has read the file."""
        out = Path(out)
        with output_folder(out, force) as folder:
            start = time.perf_counter()
            urdf_path = write_collision_urdf(model_urdf, self, folder)
            matrix = collision_matrix(urdf_path, self.joint_names, self.base_link, srdf_samples,
                                      np.random.default_rng(seed), self.held,
                                      description=Path(description or model_urdf), progress=progress)
            write_srdf(folder / "robot.srdf", robot_name(urdf_path), matrix, self.base_link, self.tip_link,
                       LinkTree(urdf_path).root, self.joint_names,
                       note="checked against the description's meshes at the same samples")
            recorded = recorded_collisions(self, urdf_path, folder / "robot.srdf")
            for kind in ("pieces", "spheres"):
                if recorded[kind]["poses"]:
                    pair, poses = max(recorded[kind]["pairs"].items(), key=lambda item: len(item[1]))
                    depth = recorded[kind]["depth_mm"].get(pair)
                    raise InputError(f"{out}: the exported {kind} are in collision at {recorded[kind]['poses']} of "
                                     f"{recorded['configurations']} recorded poses ({pair} at {', '.join(poses[:5])}"
                                     f"{', ...' if len(poses) > 5 else ''}"
                                     f"{f', by up to {depth:.1f} mm' if depth is not None else ''}), where the arm "
                                     f"really stood; not written: give a smaller {setting('margin')} (mm), or train "
                                     f"longer (or on more poses of these links) so the bodies part cleanly.")
            atomic_write_text(folder / "curobo_spheres.yml", dump(spheres_document(self.spheres)))
            retract = self.recorded.q[0] if self.recorded is not None else matrix.default_q
            atomic_write_text(folder / "curobo_robot.yml", dump(robot_document(
                out, "robot.urdf", self.base_link, self.tip_link, self.spheres, matrix.disabled(),
                self.joint_names, self.held, retract)))
            self.seconds["write_and_srdf"] = time.perf_counter() - start
            report = export_report(self, matrix, recorded)
            # The export's own time: the fit (its parts are listed too) and writing; evaluation apart.
            self.seconds["export_total"] = float(self.seconds.get("fit", sum(
                self.seconds.get(part, 0.0) for part in ("bodies", "pieces", "spheres", "margin", "separation")))
                + self.seconds["write_and_srdf"])
            report["truth"] = None
            start = time.perf_counter()
            report.update((evaluate(urdf_path, self) or {}) if evaluate is not None else {})
            self.seconds["evaluation"] = time.perf_counter() - start
            # The page reads the written files as a planner would, before mesh paths become package URIs.
            write_export_page(folder, report)
            if ros_package is not None:
                # Last: the checks above load the file the way a planner beside it does (relative paths).
                urdf_io.use_package_uris(urdf_path, ros_package)
            report["ros_package"] = ros_package
            report["seconds"] = self.seconds
            atomic_write_json(folder / "export_report.json", report)
        return report

    @property
    def spheres(self) -> dict[str, SphereCover]:
        return {name: link.spheres for name, link in self.links.items()}


def recorded_configurations(model: SelfModel) -> Recorded | None:
    """The model's training configurations with their pose ids, when it knows them."""
    q, ids = model.training_q, model.training_pose_ids
    if q is None or not len(q):
        return None
    q = np.asarray(q, dtype=float)
    if ids is None or len(ids) != len(q):
        ids = [f"configuration {k}" for k in range(len(q))]
    return Recorded(list(ids), q)


def chain_of(model: SelfModel):
    """The model's chain (links, joints, held joints), from the model or its URDF."""
    if model.spec is not None:
        return model.spec
    return ArmLinks.from_urdf(Path(model.urdf_path), model.base_link, model.tip_link, model.held_joints)


@dataclass
class CollisionExporter:
    """Configure, then ``fit(model, progress=None)`` -> :class:`CollisionExport`; its ``save`` puts it
    on disk.

    The settings come in groups by the stage that reads them (:mod:`selfmodel.export.settings`), each
    checked when it is made: ``body`` (:class:`BodySettings`: grid spacing, a free model's bodies,
    overlap, carving, the declared board kept or dropped), ``pieces`` (:class:`PieceSettings`), ``spheres`` (:class:`SphereSettings`: the
    arm's and the board's budgets, the fit's iterations) and ``margin`` (:class:`MarginSettings`:
    given or automatic). ``srdf_samples``: random configurations tested for the SRDF's disabled
    pairs. ``seed``: of the sphere fit, the margin search and the SRDF sampling.
    """

    body: BodySettings = field(default_factory=BodySettings)
    pieces: PieceSettings = field(default_factory=PieceSettings)
    spheres: SphereSettings = field(default_factory=SphereSettings)
    margin: MarginSettings = field(default_factory=MarginSettings)
    srdf_samples: int = 10_000
    seed: int = 0

    def __post_init__(self):
        for name, kind in (("body", BodySettings), ("pieces", PieceSettings), ("spheres", SphereSettings),
                           ("margin", MarginSettings)):
            if not isinstance(getattr(self, name), kind):
                raise TypeError(f"{name} must be a {kind.__name__}, got {type(getattr(self, name)).__name__}.")
        if self.srdf_samples < 1:
            raise InputError(f"{setting('srdf_samples')} {self.srdf_samples}: need at least one configuration.")

    def bodies(self, model, where: str = "model") -> "Bodies":
        """The learned per-link bodies (link frames), settled apart where the arm really stood."""
        rng = np.random.default_rng(self.seed)
        sources = link_sources(model, rng, where, self.body.free_configurations, self.body.free_consistency)
        if self.spheres.max_spheres < len(sources):
            raise InputError(f"{setting('max_spheres')} {self.spheres.max_spheres}: the model has {len(sources)} links with a "
                             f"body; the sphere budget must give each at least one.")
        seconds: dict[str, float] = {"bodies": 0.0, "pieces": 0.0, "spheres": 0.0, "margin": 0.0, "separation": 0.0}
        bodies: dict[str, LinkBody] = {}
        occupancies = {}
        spec = chain_of(model)
        group_of = {spec.link_names[index]: [spec.link_names[other] for other in group]
                    for group in spec.rigid_groups() for index in group}
        parent_of = {spec.link_names[k + 1]: spec.link_names[joint.parent_index] for k, joint in enumerate(spec.joints)}
        held_by: dict[str, str] = {}  # a link with no learned body of its own -> the rigidly joined link that holds it
        for source in sources:
            start = time.perf_counter()
            occupancy = source.occupancy
            if source.parent is not None and source.parent in bodies:
                occupancy = less_parent(source, bodies[source.parent], self.body.free_consistency)
            occupancies[source.link] = occupancy
            try:
                bodies[source.link] = link_body(source.link, occupancy, source.lo, source.hi, self.body.voxel,
                                                source.level, where=where)
            except EmptyBody:
                # Links joined with no moving joint between them (a hand and its held fingers) look the
                # same to every camera at every pose, so which network learns their matter is not
                # determined: one may hold it all. A link left with nothing (or a sliver) is held by
                # that neighbour and has no geometry of its own; any other empty link is refused.
                holders = sorted((other for other in group_of.get(source.link, []) if other in bodies),
                                 key=lambda other: other != parent_of.get(source.link))  # its parent first
                holder = holders[0] if holders else None
                if holder is None:
                    raise
                held_by[source.link] = holder
            seconds["bodies"] += time.perf_counter() - start
        # A given margin is checked before minutes of decomposition, a measured one after.
        if self.margin.value is not None:
            check_margin(float(self.margin.value), bodies, setting("margin"), where)
        recorded = recorded_configurations(model)
        kinds = pair_kinds(spec, list(bodies))
        separation = Separation(kinds)
        poses = None if recorded is None else self._recorded_poses(model, spec, recorded, list(bodies))
        # Where the cameras saw through, the arm was not: carved before the bodies are settled
        # apart, so what two links contest is their measured matter, not their bulk.
        start = time.perf_counter()
        # Carving stays with the structured kind: a free model's link bodies are cut from one
        # union by the URDF's frames, and what the depth images would do to those is unmeasured.
        carved, carving = carve(bodies, poses, model.folder if model.kind == "structured" else None,
                                None if recorded is None else recorded.q, self.body.carve_poses, self.body.carve_sigmas)
        for source in sources:
            if source.link in bodies and len(carved[source.link]):
                self._remove_cells(source, bodies, occupancies, carved[source.link], where)
        seconds["carving"] = time.perf_counter() - start
        if recorded is not None:
            separation.configurations = len(recorded.q)
            start = time.perf_counter()
            lost = settle_bodies(bodies, poses, kinds, recorded.pose_ids, self.body.overlap_tolerance, where, separation)
            for source in sources:
                if source.link in bodies and len(lost[source.link]):
                    self._remove_cells(source, bodies, occupancies, lost[source.link], where)
            seconds["separation"] += time.perf_counter() - start
        for source in sources:
            if source.link in held_by:
                bodies[source.link] = empty_body(source.link, bodies[held_by[source.link]].voxel, source.lo)
        bodies = {source.link: bodies[source.link] for source in sources}  # the chain's order
        separation.held_by = held_by
        return Bodies(sources, bodies, occupancies, spec, recorded, kinds, separation, poses, seconds, rng, carving)

    def _remove_cells(self, source, bodies: dict[str, LinkBody], occupancies: dict, cells: np.ndarray,
                      where: str) -> None:
        """The link's body rebuilt without ``cells`` (grid indices); the level sets the margin samples
        lose them too and are kept to within one cell of the new body, else the margin would grow
        back what was taken away (and what the removal cut off, dropped as a detached blob)."""
        body = bodies[source.link]
        occupancies[source.link] = without_cells(occupancies[source.link], body, cells)
        bodies[source.link] = link_body(source.link, occupancies[source.link], source.lo, source.hi, self.body.voxel,
                                        source.level, where=where)
        source.level_sets = [near_body(without_cells(level_set, body, cells), bodies[source.link])
                             for level_set in source.level_sets]

    def fit(self, model: SelfModel, progress: Progress | None = None, *, where: str = "model") -> CollisionExport:
        """The model's collision geometry. ``progress(done, total)`` after each link's pieces;
        ``where`` names the model in refusals (its folder)."""
        staged = self.bodies(model, where)
        sources, bodies, occupancies, rng = staged.sources, staged.bodies, staged.occupancies, staged.rng
        spec, recorded, kinds, separation = staged.spec, staged.recorded, staged.kinds, staged.separation
        poses, seconds = staged.poses, staged.seconds
        board, with_board = self._take_out_board(model, staged, where)
        links: dict[str, LinkCollision] = {}
        for done, source in enumerate(sources):
            body, occupancy = bodies[source.link], occupancies[source.link]
            pieces, need, samples, piece_needs = [], 0.0, 0, []  # a tip that was all board has no body of its own
            if body.solid.any():
                start = time.perf_counter()
                try:
                    pieces = convex_pieces(body.mesh, self.pieces.max_pieces, self.pieces.max_vertices, seed=self.seed)
                except InputError as error:
                    raise InputError(f"{where}: link {source.link!r}: {error.marked}") from None
                seconds["pieces"] += time.perf_counter() - start
                start = time.perf_counter()
                need, samples, piece_needs = self._margin_needed(source, body, occupancy, pieces, rng)
                seconds["margin"] += time.perf_counter() - start
            links[source.link] = LinkCollision(source.link, body, pieces, SphereCover(np.zeros((0, 3)), np.zeros(0)),
                                               need, samples, piece_needs)
            if progress is not None:
                progress(done + 1, len(sources))
        if self.margin.value is None:
            # Each link grows by what its own level set needs outside its pieces (at least the floor),
            # rounded up to 0.1 mm, not by the largest any link needs: a link that needs 1.4 mm then does
            # not stand out by the 3.4 mm the xArm6's base needs where a planner checks it against its
            # neighbours.
            # What the largest gave beyond that was slack for placement error; with placements
            # calibrated (0.5-0.6 mm) or fitted (the Panda's, 1.1 mm) the own need leaves at most
            # 0.04 % of the true surface out, by 2.1 mm at the most, and no collision of 10^5 missed.
            # A free model's links all take the largest (LinkSource.own_surface): on the free
            # stand-in of the tests, the base grown by its own need held 71 % of its true surface.
            floor = self.margin.floor
            needs = {name: max(_rounded(link.margin_needed), floor) for name, link in links.items()}
            margin, mode = max(needs.values()), "auto"
            own = {source.link: source.own_surface for source in sources}
            margins = {name: needs[name] if own[name] else margin for name in links}
            check_margin(margin, bodies, "the measured margin", where)
            # Within a link, each piece grows by what the samples nearest it need, at least the floor:
            # one corner of the xArm6's base foot needed 4.5 mm, and the base's eight pieces all grown
            # by it held 1.46 times the true base's volume. Every sample stays inside the piece it is
            # nearest, so the link's level set is held as before.
            for name, link in links.items():
                link.piece_margins = ([max(_rounded(need), floor) for need in link.piece_needs] if own[name]
                                      else [margins[name]] * len(link.pieces))
        else:
            margin, mode = float(self.margin.value), "given"
            margins = dict.fromkeys(links, margin)
            for link in links.values():
                link.piece_margins = [margin] * len(link.pieces)
        box_margin = None if board is None else self._box_margin(model, margins[model.tip_link])
        start = time.perf_counter()
        for name, link in links.items():
            link.pieces = [inflate_piece(piece, grow, self.pieces.max_vertices)
                           for piece, grow in zip(link.pieces, link.piece_margins)]
        seconds["pieces"] += time.perf_counter() - start
        start = time.perf_counter()
        targets = [sphere_target(link, body, margins[link], rng) for link, body in bodies.items() if body.solid.any()]
        if poses is not None:
            # The bodies the arm's spheres are kept clear of at the recorded poses: a kept board's box
            # is there (the plate as declared, grown as the tip is, not its blurred learned cells: kept
            # clear of those, link4's spheres left 1.7 % of what they are fitted to uncovered on the
            # 6000-step xArm6 model), a dropped one is not.
            clear_of = dict(bodies)
            if board is not None and self.body.board == KEEP:
                clear_of[model.tip_link] = with_box(bodies[model.tip_link], board.grown(box_margin))
            limit_spheres(targets, clear_of, poses, kinds)
        contacts = [] if poses is None else [Contact(a, b, np.linalg.inv(poses[a]) @ poses[b])
                                             for (a, b), kind in kinds.items() if kind == "checked"]
        covers, sphere_fit = fit_groups(targets, self.spheres.max_spheres, contacts=contacts,
                                        iterations=self.spheres.iterations, seed=self.seed,
                                        polish=self.spheres.polish)
        separation.spheres_uncovered = {link: round(share, 4) for link, share in sphere_fit["uncovered"].items() if share}
        for name, cover in covers.items():
            links[name].spheres, links[name].sphere_groups = cover, ["arm"] * len(cover.radii)
        if board is not None and self.body.board == KEEP:
            # The plate grows by the box margin (_box_margin), not by the largest any link needed: a
            # neighbour's pieces are cut back from the box where they meet it at a recorded pose (the
            # box is never cut), so every millimetre it grows is taken from them there.
            tip = links[model.tip_link]
            tip.board_box = board.grown(box_margin)
            layer = sphere_layer(board, box_margin, self.spheres.board_spheres)
            tip.spheres = SphereCover(np.vstack([tip.spheres.centres, layer.centres]),
                                      np.concatenate([tip.spheres.radii, layer.radii]))
            tip.sphere_groups = list(tip.sphere_groups) + [BOARD] * len(layer.radii)
        seconds["spheres"] += time.perf_counter() - start
        if poses is not None:
            start = time.perf_counter()
            # A kept board's box is the plate the arm really carried: the neighbours' pieces are cut
            # back from it where they meet it at a recorded pose, the box itself never.
            cut = separate_pieces({name: link.pieces for name, link in links.items()}, bodies, poses, kinds,
                                  recorded.pose_ids, self.pieces.max_pieces, self.pieces.max_vertices, self.body.voxel,
                                  where, separation, fixed={name: [link.board_box.piece()] for name, link in links.items()
                                                            if link.board_box is not None})
            # A kept board's layer gives way first, down to the plate's half-thickness with the margin.
            boxes = [link.board_box for link in links.values() if link.board_box is not None]
            shrunk = separate_spheres({name: link.spheres for name, link in links.items()}, poses, kinds, separation,
                                      first={name: np.asarray(link.sphere_groups) == BOARD for name, link in links.items()},
                                      floor=min(box.extents.min() / 2 for box in boxes) if boxes else 0.0)
            for name, link in links.items():
                link.pieces, link.spheres = cut[name], shrunk[name]
            seconds["separation"] += time.perf_counter() - start
        origins = model.corrected_joint_origins() if isinstance(model, StructuredSelfModel) else {}
        report = self._board_report(model, board, with_board, bodies, links, box_margin, staged.board_held)
        return CollisionExport(links, margin, mode, seconds, origins, list(spec.joint_names),
                               model.base_link, model.tip_link, dict(spec.held), recorded, separation, staged.carving,
                               margins, report, {key: sphere_fit[key] for key in ("bulge_mm", "starts", "polish")})

    def _take_out_board(self, model, staged: "Bodies", where: str) -> tuple[PlateBox | None, LinkBody | None]:
        """The declared board's plate (tip frame) and the tip's body as it was with the board, after
        the board's learned cells (the plate's box grown by two cells: depth learns a plate thicker and
        wider than it is) left the tip's body and the level sets its margin is measured on; (None,
        None) when no board is declared. Before the pieces and spheres are made, so neither holds the
        blurred plate: a kept board is written as the plate it is, a dropped one not at all."""
        plate = board_mesh(model.board) if model.kind == "structured" else None
        tip = model.tip_link
        if plate is None or tip not in staged.bodies:
            return None, None
        board, body = PlateBox.of(plate), staged.bodies[tip]
        staged.board_held = self._take_board_from_others(staged, tip, board, where)
        cells = board_cells(body, board, 2 * self.body.voxel)
        if not len(cells):
            return board, body
        source = next(source for source in staged.sources if source.link == tip)
        try:
            self._remove_cells(source, staged.bodies, staged.occupancies, cells, where)
        except InputError:
            # Nothing, or a sliver thinner than two cells, is left: the tip's learned body was all
            # board (a flange that turns about the last joint looks still from the link before it,
            # whose body may hold it). The tip then has no body of its own, and the report says so.
            staged.bodies[tip] = empty_body(tip, body.voxel, body.origin, body.solid.shape)
        return board, body

    def _box_margin(self, model, tip_margin: float) -> float:
        """m a kept board's box (and its layer of spheres) grows by. The plate is as declared, not
        learned: at a mount a board calibration fitted, what it needs is the placement error, the
        floor every piece grows by; at the nominal mount it grows as the tip does. A given margin
        is every part's."""
        if self.margin.value is not None:
            return float(self.margin.value)
        return self.margin.floor if board_mount(model.board)[1] else tip_margin

    def _take_board_from_others(self, staged: "Bodies", tip: str, board: PlateBox, where: str) -> dict[str, float]:
        """The board's learned cells out of the other links' bodies; link -> cm3 taken. A cell that
        lies in the plate's box (grown by two cells, as the tip's are taken) at half the recorded
        poses or more moves with the board, and no link stands where the board is. A plate that
        turns about the last joint sweeps the same disk in the frame of the link before it at every
        pose, so that link's network explains the plate's middle as well as the tip's does: on the
        6000-step xArm6 model link5 held 143 cm3 of the board's back that depth readings only ever
        met, and its spheres stood out 57 mm at the 95th percentile where the other links' stood out
        16-30 mm. Without recorded poses nothing is known to move with the board, and nothing is taken."""
        poses = staged.poses
        if poses is None or tip not in poses:
            return {}
        grown = board.grown(2 * self.body.voxel)
        tip_T_base = np.linalg.inv(poses[tip])  # (C, 4, 4)
        taken = {}
        for source in staged.sources:
            link = source.link
            body = staged.bodies.get(link)
            if link == tip or link not in poses or body is None or not body.solid.any():
                continue
            cells = np.argwhere(body.solid)
            centres = body.origin + body.voxel * cells
            tip_T_link = tip_T_base @ poses[link]
            inside = np.zeros(len(cells), dtype=int)
            for transform in tip_T_link:
                inside += grown.contains(centres @ transform[:3, :3].T + transform[:3, 3])
            board_cells_here = cells[2 * inside >= len(tip_T_link)]
            if not len(board_cells_here):
                continue
            try:
                self._remove_cells(source, staged.bodies, staged.occupancies, board_cells_here, where)
            except EmptyBody:
                raise InputError(f"{where}: link {link!r}: all its learned body lies in the declared board's plate at "
                                 f"half the recorded poses or more, so the model learned the board there, not the "
                                 f"link; train longer, or on poses that turn the board about the last joint.") from None
            taken[link] = round(float(len(board_cells_here)) * body.voxel ** 3 * 1e6, 2)
        return taken

    def _board_report(self, model, board: PlateBox | None, with_board: LinkBody | None, bodies: dict[str, LinkBody],
                      links: dict[str, LinkCollision], margin: float, held: dict[str, float]) -> dict | None:
        """What became of the declared board (its plate grown by ``margin`` m, the box's), for
        export_report.json; None without a board: then ``board`` keep or drop changed nothing.
        ``held``: link -> cm3 of the board's cells another link's body held (taken out)."""
        if board is None:
            return None
        tip = model.tip_link
        all_board = not bodies[tip].solid.any()
        report = {**board_report(model.board), "treatment": self.body.board,
                  "plate_mm": [round(1000.0 * float(x), 2) for x in np.sort(board.extents)[::-1]],
                  "tip_body_volume_with_board_cm3": round(1e6 * with_board.volume, 2),
                  "tip_body_volume_cm3": round(1e6 * bodies[tip].volume, 2), "tip_all_board": all_board,
                  "held_by_other_links_cm3": held}
        if self.body.board == DROP:
            alone = (f"; the tip's learned body was all board, so {tip} has no geometry of its own (its flange is held "
                     f"only where the link before it holds it)" if all_board else "")
            return {**report, "note": f"the board is left out: a planner will not see it; export with --board keep "
                                      f"while the arm still carries it{alone}"}
        link = links[tip]
        on_board = np.asarray(link.sphere_groups) == BOARD
        layer = SphereCover(link.spheres.centres[on_board], link.spheres.radii[on_board])
        ratio = layer.union_volume() / board.volume
        thinnest = board.thickness + 2 * margin
        return {**report, "box_mm": [round(1000.0 * float(x), 2) for x in np.sort(link.board_box.extents)[::-1]],
                "box_margin_mm": round(1000.0 * margin, 2),
                "spheres": len(layer.radii), "sphere_radius_mm": round(1000.0 * float(layer.radii.max()), 2),
                # Shrunk apart from a neighbour's spheres where the arm stood: there the layer no longer
                # holds the whole grown plate, as the arm's spheres next to a neighbour do not.
                "spheres_shrunk_at_recorded_poses": int(np.sum(layer.radii < layer.radii.max() - 1e-7)),
                "spheres_union_volume_ratio": round(ratio, 2), "thinnest_layer_mm": round(1000.0 * thinnest, 2),
                "note": f"spheres cannot be thinner than the plate and its margin ({1000 * thinnest:.1f} mm): "
                        f"{len(layer.radii)} spheres hold the {1000 * board.thickness:.1f} mm plate at {ratio:.1f} "
                        f"times its volume (more --board-spheres, thinner); --board drop leaves the board out for an "
                        f"arm that no longer carries it"}

    def _margin_needed(self, source, body: LinkBody, occupancy, pieces: list[ConvexPiece],
                       rng: np.random.Generator) -> tuple[float, int, list[float]]:
        """m the model's own level set reaches outside the pieces, how many samples said so, and per
        piece (m) the farthest outside of the samples nearest it (the plane shift that holds them)."""
        # The body's own occupancy, shifted so that its level set sits at 0.5, and nothing outside
        # the bounds the body was cut from (a body cut off by them ends there).
        own = own_level_set(occupancy, source, body)
        level_sets = source.level_sets or [own]
        samples = np.vstack([
            level_set_samples(level_set, body.mesh, max(self.margin.samples // len(level_sets), 200),
                              2.0 * self.body.voxel, rng)
            for level_set in level_sets])
        if not len(samples):
            return 0.0, 0, [0.0] * len(pieces)

        def outside(x):
            return pieces_outside_distance(pieces, x)

        distance = outside(samples)
        held = samples
        if source.climb:
            worst = samples[np.argsort(distance)[-min(self.margin.climbs, len(samples)):]]
            held = np.vstack([samples, climb_outward(own, worst, outside, self.body.voxel, rng)])
        needs = piece_needs(pieces, held)
        return max(needs), len(samples), needs

    @staticmethod
    def _recorded_poses(model, spec, recorded: Recorded, links: list[str]) -> dict[str, np.ndarray]:
        """link -> (C, 4, 4) poses in the base frame at the recorded configurations, by the kinematics
        the export writes (the learned ones of a structured model's chain, the URDF's otherwise)."""
        if isinstance(model, StructuredSelfModel):
            poses = model.base_T_links(recorded.q)
            names = list(model.link_names)
        else:
            poses = link_poses_numpy(spec, recorded.q)
            names = list(spec.link_names)
        return {link: poses[:, names.index(link)] for link in links}


def near_body(level_set: Callable[[np.ndarray], np.ndarray], body: LinkBody) -> Callable[[np.ndarray], np.ndarray]:
    """``level_set`` (link frame) where the point's grid cell is within one cell of ``body``, 0 elsewhere."""
    grown = ndimage.binary_dilation(np.pad(body.solid, 1), iterations=1)  # as LinkBody.contains(grow_cells=1)

    def restricted(points: np.ndarray) -> np.ndarray:
        points = np.asarray(points, dtype=float)
        values = np.asarray(level_set(points), dtype=float).copy()
        index = np.round((points - body.origin) / body.voxel).astype(int) + 1
        valid = np.all((index >= 0) & (index < grown.shape), axis=1)
        near = np.zeros(len(points), dtype=bool)
        near[valid] = grown[tuple(index[valid].T)]
        values[~near] = 0.0
        return values

    return restricted


def _rounded(need: float) -> float:
    """m, rounded up to 0.1 mm: what a piece or a link grows by."""
    return math.ceil(need * 1e4) / 1e4


def inflate_piece(piece: ConvexPiece, margin: float, max_vertices: int) -> ConvexPiece:
    """Planes moved out by ``margin``; when a vertex where many planes met splits and the count
    passes the limit, a conservative hull of the inflated piece brings it back."""
    if margin <= 0:
        return piece
    inflated = piece.inflated(margin)
    if len(inflated.vertices) > max_vertices:
        inflated = conservative_hull(inflated.vertices, max_vertices)
    return inflated


# -- writing ----------------------------------------------------------------------------------------

def write_collision_urdf(model_urdf: Path, export: CollisionExport, folder: Path) -> Path:
    """``folder/robot.urdf``: the model's URDF, learned joint origins written in, every
    ``<collision>`` of an exported link replaced by its pieces (``meshes/collision/<link>_<k>.stl``),
    visual meshes copied so the folder loads on its own."""
    model_urdf = Path(model_urdf)
    tree = urdf_io.parse_urdf(model_urdf)
    links = {element.get("name"): element for element in tree.getroot().findall("link")}
    missing = [name for name in export.links if name not in links]
    if missing:
        raise InputError(f"{model_urdf}: link {missing[0]!r} of the model is not in this URDF.")
    for name, origin in export.joint_origins.items():
        urdf_io.set_joint_origin(tree, name, origin)
    # Links without a learned body (outside the model's chain) keep the description's geometry:
    # dropping it would leave them with none.
    for name in export.links:
        for collision in links[name].findall("collision"):
            links[name].remove(collision)
    urdf_io.copy_self_contained(tree, model_urdf.parent, folder)
    (folder / "meshes" / "collision").mkdir(parents=True, exist_ok=True)
    for name, link in export.links.items():
        for k, piece in enumerate(link.pieces):
            relative = f"meshes/collision/{name}_{k}.stl"
            piece.mesh().export(folder / relative)
            collision = ET.SubElement(links[name], "collision", {"name": f"{name}_piece_{k}"})
            ET.SubElement(collision, "origin", {"xyz": "0 0 0", "rpy": "0 0 0"})
            geometry = ET.SubElement(collision, "geometry")
            ET.SubElement(geometry, "mesh", {"filename": relative})
        if link.board_box is not None:
            # The plate as a planner's own primitive: exact, and cheaper to check than a mesh.
            box = link.board_box
            collision = ET.SubElement(links[name], "collision", {"name": f"{name}_board"})
            rpy = trimesh.transformations.euler_from_matrix(box.tip_T_box, "sxyz")
            ET.SubElement(collision, "origin", {"xyz": " ".join(f"{x:.9g}" for x in box.tip_T_box[:3, 3]),
                                                "rpy": " ".join(f"{x:.9g}" for x in rpy)})
            geometry = ET.SubElement(collision, "geometry")
            ET.SubElement(geometry, "box", {"size": " ".join(f"{x:.9g}" for x in box.extents)})
    path = folder / "robot.urdf"
    urdf_io.write_urdf(tree, path)
    return path


def robot_name(urdf_path: Path) -> str:
    return urdf_io.parse_urdf(urdf_path).getroot().get("name", "robot")


def recorded_collisions(fitted: CollisionExport, urdf_path: Path, srdf_path: Path) -> dict:
    """The written URDF and SRDF loaded as a planner loads them (Pinocchio and coal), and the exported
    spheres as cuRobo checks them (pairs not ignored), at every recorded configuration: per kind, the
    poses in collision, each pair's poses and (``depth_mm``) how deep it overlaps at the deepest."""
    result = {"configurations": 0, "pieces": {"poses": 0, "pairs": {}, "depth_mm": {}},
              "spheres": {"poses": 0, "pairs": {}, "depth_mm": {}}}
    if fitted.recorded is None:
        return result
    world = CollisionWorld(urdf_path, fitted.joint_names, fitted.base_link, srdf=srdf_path, held=fitted.held)
    disabled = {(a, b) for a, b, _ in _disabled(srdf_path)}
    result["configurations"] = len(fitted.recorded.q)
    for pose, q in zip(fitted.recorded.pose_ids, fitted.recorded.q):
        pairs = world.colliding_pairs(q)
        if pairs:
            result["pieces"]["poses"] += 1
            depths = world.overlap_depths(q)
            for pair in pairs:
                key = "/".join(pair)
                result["pieces"]["pairs"].setdefault(key, []).append(pose)
                result["pieces"]["depth_mm"][key] = max(result["pieces"]["depth_mm"].get(key, 0.0),
                                                        1000.0 * depths.get(pair, 0.0))
    names = sorted(fitted.spheres)
    for pose, q in zip(fitted.recorded.pose_ids, fitted.recorded.q):
        found = []
        centres = {}
        for link in names:
            pose_link = world.link_pose(link, q)
            centres[link] = fitted.spheres[link].centres @ pose_link[:3, :3].T + pose_link[:3, 3]
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if (a, b) in disabled or (b, a) in disabled:
                    continue
                if not len(fitted.spheres[a].radii) or not len(fitted.spheres[b].radii):
                    continue  # a link with no geometry of its own (held by a neighbour, or all board)
                reach = fitted.spheres[a].radii[:, None] + fitted.spheres[b].radii[None]
                overlap = float(np.max(reach - np.linalg.norm(centres[a][:, None] - centres[b][None], axis=2)))
                if overlap > 0:
                    found.append(f"{a}/{b}")
                    depth = result["spheres"]["depth_mm"]
                    depth[f"{a}/{b}"] = max(depth.get(f"{a}/{b}", 0.0), 1000.0 * overlap)
        if found:
            result["spheres"]["poses"] += 1
            for pair in found:
                result["spheres"]["pairs"].setdefault(pair, []).append(pose)
    return result


def _disabled(srdf_path: Path) -> list[tuple[str, str, str]]:
    root = urdf_io.parse_xml(srdf_path).getroot()
    return [(e.get("link1"), e.get("link2"), e.get("reason")) for e in root.findall("disable_collisions")]


def export_report(export: CollisionExport, matrix: CollisionMatrix, recorded: dict) -> dict:
    links = {}
    for name, link in export.links.items():
        links[name] = {
            "spheres": len(link.spheres.radii),
            "spheres_board": int(sum(group == BOARD for group in link.sphere_groups)),
            "pieces": len(link.pieces),
            "vertices_per_piece": [len(piece.vertices) for piece in link.pieces],
            "body_volume_m3": link.body.volume,
            "pieces_volume_m3": float(sum(piece.volume for piece in link.pieces)),
            "board_box_volume_m3": link.board_box.volume if link.board_box is not None else 0.0,
            "spheres_summed_volume_m3": link.spheres.summed_volume,
            "margin_needed_mm": 1000.0 * link.margin_needed,
            "margin_mm": 1000.0 * export.margins.get(name, export.margin),
            "piece_margins_mm": [round(1000.0 * grow, 1) for grow in link.piece_margins],
            "surface_samples": link.surface_samples,
            "touches_bounds": link.body.touches_bounds,
            "dropped_blob_fraction": link.body.dropped_fraction,
        }
    return {
        "margin_mm": export.margin * 1000.0,
        "margin_mode": export.margin_mode,
        "links": links,
        "spheres_total": int(sum(len(link.spheres.radii) for link in export.links.values())),
        # The arm's budget is for the arm's links; a kept board's layer is listed under the tip in the
        # cuRobo files with the rest, and counted apart.
        "spheres_arm": int(sum(sum(group != BOARD for group in link.sphere_groups) if link.sphere_groups
                               else len(link.spheres.radii) for link in export.links.values())),
        "spheres_board": int(sum(sum(group == BOARD for group in link.sphere_groups) for link in export.links.values())),
        "srdf": {"samples": matrix.samples, "always_threshold": matrix.always_threshold, **matrix.counts(),
                 "checked_pairs": len(matrix.reasons),
                 "kept_enabled_why": {"/".join(pair): why for pair, why in sorted(matrix.kept.items())},
                 "disabled": [list(item) for item in matrix.disabled()]},
        "separation": export.separation.report() if export.separation is not None else None,
        "carving": export.carving.report() if export.carving is not None else None,
        "board": export.board,
        "sphere_starts": export.sphere_starts,
        "recorded_poses_in_collision": recorded,
        "learned_joint_origins": sorted(export.joint_origins),
        "held_joints": export.held,
        "seconds": export.seconds,
    }


# -- the whole job, from a model folder -------------------------------------------------------------

def name_recorded_poses(model: SelfModel, model_folder: Path) -> None:
    """A structured model keeps its training configurations; its sessions, when still there, name them."""
    ids = []
    for path in training_session_paths(model_folder):
        if not (path / "session.json").is_file():
            return
        ids += [f"{path.name}/{pose}" for pose in load_session(path).pose_ids]
    model.training_pose_ids = ids


def export_model(model_folder: Path, out: Path, exporter: CollisionExporter, force: bool = False,
                 truth: Callable[[object, Path, Path, "CollisionExport"], dict | None] | None = None,
                 progress: Progress | None = None, model=None, urdf: Path | None = None,
                 ros_package: str | None = None) -> dict:
    """Load a model folder, export its collision geometry to ``out``; the report as a dict.

    ``truth``: how the written export is measured against a simulated truth, called as
    ``truth(model, model_folder, exported_urdf, export)`` (``selfmodel.evaluation.export_truth.truth_figures``
    builds one); None leaves the report's ``truth`` empty. The export itself never reads a truth.
    ``urdf``: the description that cuts a free model's body into links. ``ros_package``: see
    :meth:`CollisionExport.save`.
    """
    check_new_output(out, force)
    model_folder = Path(model_folder)
    model = model if model is not None else SelfModel.load(model_folder)
    if isinstance(model, FreeSelfModel):
        model.attach_description(free_model_description(model_folder, urdf), free_model_sessions(model_folder))
    else:
        name_recorded_poses(model, model_folder)
    urdf_path = model.urdf_path
    if urdf_path is None:
        raise InputError(f"{model_folder}: the model names no URDF, so its links cannot be placed.")
    start = time.perf_counter()
    fitted = exporter.fit(model, where=str(model_folder), progress=progress)
    fitted.seconds["fit"] = time.perf_counter() - start

    def evaluate_all(exported_urdf: Path, export: CollisionExport) -> dict:
        return {"truth": truth(model, model_folder, exported_urdf, export) if truth is not None else None,
                "measured_surface": measured_surface_inside(model, export)}

    return fitted.save(out, Path(urdf_path), exporter.srdf_samples, force, evaluate_all, seed=exporter.seed,
                       ros_package=ros_package)
