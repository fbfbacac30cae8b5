"""Collision geometry for planners from a learned self-model.

For every link of the model: its learned body in the link's frame (marching cubes of the
per-link occupancy; for the free model, of what stays occupied in the link's frame across many
configurations), then

- convex pieces (coacd, at most M a link, at most 64 vertices each, conservative hulls),
- a sphere cover (at most N a link, containing the whole meshed surface),
- a margin: by default the smallest inflation that puts the model's own 0.5 level set, sampled
  afresh around every link (at training configurations for the free model), inside both,

written as ``robot.urdf`` (the model's URDF, learned joint placements, every ``<collision>``
replaced by the pieces, ``<visual>`` untouched), ``curobo_spheres.yml``, ``robot.srdf`` and
``export_report.json``.
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

from rigs import urdf as urdf_io
from rigs.errors import InputError
from rigs.files import atomic_write_json, atomic_write_text, output_folder
from rigs.transforms import transform_points
from selfmodel.collision import (ConvexPiece, LinkBody, conservative_hull, convex_pieces, link_body,
                                 pieces_outside_distance)
from selfmodel.spheres import SphereCover, fit_sphere_cover
from selfmodel.srdf import CollisionMatrix, collision_matrix, write_srdf

Progress = Callable[[int, int], None]


@dataclass
class LinkSource:
    """Where a link's body comes from: a box in the link frame (m) and occupancy functions on it.

    ``occupancy`` maps (N, 3) link-frame points to (N,) values whose ``level`` set is the body;
    ``level_sets`` are occupancy functions whose 0.5 level set is the model's own surface near
    this link, sampled for the automatic margin (empty: the body's own level set).
    """

    link: str
    lo: np.ndarray
    hi: np.ndarray
    occupancy: Callable[[np.ndarray], np.ndarray]
    level: float
    level_sets: list[Callable[[np.ndarray], np.ndarray]]
    # Free model only: the parent link and parent_T_link (K, 4, 4) at the configurations used;
    # what the parent's body holds in every one of them is the parent's, not this link's.
    parent: str | None = None
    parent_T_link: np.ndarray | None = None
    # Climb to corner tips for the margin; off for the free model, whose cut between a link and
    # its parent leaves ragged edges a climb would take for the link's surface.
    climb: bool = True


@dataclass
class LinkCollision:
    link: str
    body: LinkBody
    pieces: list[ConvexPiece]  # margin applied
    spheres: SphereCover  # margin applied
    margin_needed: dict[str, float]  # m, what this link's level-set samples needed (pieces, spheres)
    surface_samples: int


@dataclass
class CollisionExport:
    """The fitted export: per-link geometry in link frames (m), the margin, timings (s)."""

    links: dict[str, LinkCollision]
    margin: float
    margin_mode: str  # "auto" or "given"
    seconds: dict[str, float] = field(default_factory=dict)
    joint_origins: dict[str, np.ndarray] = field(default_factory=dict)  # learned joint placements written

    @property
    def pieces(self) -> dict[str, list[ConvexPiece]]:
        return {name: link.pieces for name, link in self.links.items()}

    @property
    def spheres(self) -> dict[str, SphereCover]:
        return {name: link.spheres for name, link in self.links.items()}


def level_set_samples(occupancy: Callable[[np.ndarray], np.ndarray], mesh: trimesh.Trimesh, count: int,
                      reach: float, rng: np.random.Generator, steps: int = 17) -> np.ndarray:
    """Points (M, 3) on the 0.5 level set of ``occupancy`` near ``mesh`` (same frame, m).

    From ``count`` points on the mesh and up to ``count`` of its vertices, search along the normal within +-``reach`` for the outermost
    crossing from >= 0.5 to < 0.5 and interpolate it linearly; points with no crossing are dropped.
    A finer look than the grid the mesh came from: it finds corners and thin parts the grid cut.
    """
    points, faces = trimesh.sample.sample_surface(mesh, count, seed=int(rng.integers(2**31)))
    # Vertices too, along their (averaged) normals: at an edge or corner the grid cut off, a
    # vertex normal points at the cut-off tip, where face samples rarely look.
    vertices = rng.choice(len(mesh.vertices), size=min(count, len(mesh.vertices)), replace=False)
    points = np.vstack([points, mesh.vertices[vertices]])
    normals = np.vstack([mesh.face_normals[faces], mesh.vertex_normals[vertices]])
    offsets = np.linspace(-reach, reach, steps)
    probes = points[:, None, :] + offsets[None, :, None] * normals[:, None, :]
    values = np.asarray(occupancy(probes.reshape(-1, 3)), dtype=float).reshape(len(points), steps)
    crossing = (values[:, :-1] >= 0.5) & (values[:, 1:] < 0.5)
    has = crossing.any(axis=1)
    last = steps - 2 - np.argmax(crossing[:, ::-1], axis=1)  # outermost crossing
    rows = np.flatnonzero(has)
    k = last[rows]
    v0, v1 = values[rows, k], values[rows, k + 1]
    fraction = np.clip((v0 - 0.5) / np.maximum(v0 - v1, 1e-12), 0.0, 1.0)
    t = offsets[k] + fraction * (offsets[k + 1] - offsets[k])
    return points[rows] + t[:, None] * normals[rows]


def climb_outward(occupancy: Callable[[np.ndarray], np.ndarray], starts: np.ndarray,
                  outside: Callable[[np.ndarray], np.ndarray], radius: float, rng: np.random.Generator,
                  rounds: int = 10, probes: int = 48) -> np.ndarray:
    """Occupied points (K, 3) pushed as far ``outside`` the export as the body reaches.

    A local random search from each start: probes within ``radius`` that are still occupied
    (>= 0.5) and lie farther outside replace the start; the radius shrinks each round. It finds
    the tips of corners and edges between the level-set samples, which set the margin.
    """
    best = np.asarray(starts, dtype=float).copy()
    best_outside = outside(best)
    for _ in range(rounds):
        directions = rng.normal(size=(len(best), probes, 3))
        directions *= (radius * rng.uniform(0, 1, (len(best), probes, 1)) ** (1 / 3)
                       / np.linalg.norm(directions, axis=2, keepdims=True))
        candidates = (best[:, None, :] + directions).reshape(-1, 3)
        occupied = np.asarray(occupancy(candidates), dtype=float) >= 0.5
        scores = np.where(occupied, outside(candidates), -np.inf).reshape(len(best), probes)
        pick = np.argmax(scores, axis=1)
        better = scores[np.arange(len(best)), pick] > best_outside
        best[better] = candidates.reshape(len(best), probes, 3)[better, pick[better]]
        best_outside[better] = scores[np.arange(len(best)), pick][better]
        radius *= 0.7
    return best


class CollisionExporter:
    """Configure, then ``fit(model)`` -> :class:`CollisionExport`; ``write`` puts it on disk.

    ``margin``: metres, or None for the automatic margin. ``voxel``: grid spacing of the bodies (m).
    ``free_configurations``: how many configurations define a free model's link bodies, and
    ``free_consistency`` the mean occupancy across them that counts as the link's body.
    """

    def __init__(self, max_spheres: int = 20, max_pieces: int = 8, margin: float | None = None,
                 voxel: float = 0.003, max_piece_vertices: int = 64, srdf_samples: int = 10_000,
                 margin_samples: int = 20_000, margin_climbs: int = 300, free_configurations: int = 24, free_consistency: float = 0.8,
                 seed: int = 0):
        self.max_spheres = max_spheres
        self.max_pieces = max_pieces
        self.margin = margin
        self.voxel = voxel
        self.max_piece_vertices = max_piece_vertices
        self.srdf_samples = srdf_samples
        self.margin_samples = margin_samples
        self.margin_climbs = margin_climbs
        self.free_configurations = free_configurations
        self.free_consistency = free_consistency
        self.seed = seed

    def check(self) -> None:
        if self.max_spheres < 1:
            raise InputError(f"--spheres {self.max_spheres}: need at least one sphere a link.")
        if self.max_pieces < 1:
            raise InputError(f"--pieces {self.max_pieces}: need at least one convex piece a link.")
        if self.max_piece_vertices < 8:
            raise InputError(f"max piece vertices {self.max_piece_vertices}: need at least 8.")
        if self.margin is not None and not (math.isfinite(self.margin) and self.margin >= 0):
            raise InputError(f"--margin {self.margin * 1000:g} mm: the margin must be a finite number >= 0.")
        if not self.voxel > 0:
            raise InputError(f"voxel {self.voxel}: must be > 0.")

    def fit(self, model, where: str = "model", progress: Progress | None = None) -> CollisionExport:
        self.check()
        rng = np.random.default_rng(self.seed)
        sources = link_sources(model, self, rng, where)
        seconds: dict[str, float] = {"bodies": 0.0, "pieces": 0.0, "spheres": 0.0, "margin": 0.0}
        bodies: dict[str, LinkBody] = {}
        occupancies = {}
        for source in sources:
            start = time.perf_counter()
            occupancy = source.occupancy
            if source.parent is not None and source.parent in bodies:
                occupancy = _less_parent(source, bodies[source.parent], self.free_consistency)
            bodies[source.link] = link_body(source.link, occupancy, source.lo, source.hi, self.voxel, source.level,
                                            where=where)
            occupancies[source.link] = occupancy
            seconds["bodies"] += time.perf_counter() - start
        # A given margin is checked before minutes of decomposition, a measured one after.
        if self.margin is not None:
            _check_margin(float(self.margin), bodies, "--margin", where)
        links: dict[str, LinkCollision] = {}
        for done, source in enumerate(sources):
            body, occupancy = bodies[source.link], occupancies[source.link]
            start = time.perf_counter()
            try:
                pieces = convex_pieces(body.mesh, self.max_pieces, self.max_piece_vertices, seed=self.seed)
            except InputError as error:
                raise InputError(f"{where}: link {source.link!r}: {error}") from None
            seconds["pieces"] += time.perf_counter() - start
            start = time.perf_counter()
            spheres = fit_sphere_cover(body.mesh.triangles, self.max_spheres, rng, body.inside)
            seconds["spheres"] += time.perf_counter() - start
            start = time.perf_counter()
            # The body's own occupancy, shifted so that its level set sits at 0.5, and nothing outside
            # the bounds the body was cut from (a body cut off by them ends there).
            own = _own_level_set(occupancy, source, body)
            level_sets = source.level_sets or [own]
            samples = np.vstack([
                level_set_samples(level_set, body.mesh, max(self.margin_samples // len(level_sets), 200),
                                  2.0 * self.voxel, rng)
                for level_set in level_sets])
            need = {}
            for kind, outside in (("pieces", lambda x: pieces_outside_distance(pieces, x)),
                                  ("spheres", spheres.outside_distance)):
                if not len(samples):
                    need[kind] = 0.0
                    continue
                distance = outside(samples)
                need[kind] = float(distance.max())
                if source.climb:
                    worst = samples[np.argsort(distance)[-min(self.margin_climbs, len(samples)):]]
                    climbed = climb_outward(own, worst, outside, self.voxel, rng)
                    need[kind] = max(need[kind], float(outside(climbed).max()))
            seconds["margin"] += time.perf_counter() - start
            links[source.link] = LinkCollision(source.link, body, pieces, spheres, need, len(samples))
            if progress is not None:
                progress(done + 1, len(sources))
        if self.margin is None:
            needed = max(max(link.margin_needed.values()) for link in links.values())
            margin, mode = math.ceil(needed * 1e4) / 1e4, "auto"  # round up to 0.1 mm
            _check_margin(margin, bodies, "the measured margin", where)
        else:
            margin, mode = float(self.margin), "given"
        start = time.perf_counter()
        for link in links.values():
            link.pieces = [_inflate(piece, margin, self.max_piece_vertices, rng) for piece in link.pieces]
            link.spheres = link.spheres.inflated(margin)
        seconds["pieces"] += time.perf_counter() - start
        origins = model.corrected_joint_origins() if hasattr(model, "corrected_joint_origins") else {}
        return CollisionExport(links, margin, mode, seconds, origins)


def _own_level_set(occupancy: Callable[[np.ndarray], np.ndarray], source: LinkSource,
                   body: LinkBody) -> Callable[[np.ndarray], np.ndarray]:
    """Near the kept body only: blobs the body dropped as detached are not this link's surface."""

    def own(points: np.ndarray) -> np.ndarray:
        points = np.asarray(points, dtype=float)
        inside = np.all((points >= source.lo) & (points <= source.hi), axis=1) & body.contains(points, grow_cells=3)
        values = np.zeros(len(points))
        if inside.any():
            values[inside] = np.asarray(occupancy(points[inside]), dtype=float) - source.level + 0.5
        return values

    return own


def _check_margin(margin: float, bodies: dict[str, LinkBody], what: str, where: str) -> None:
    """A margin as thick as the thickest link's half-thickness would more than double every link."""
    thickest = max(bodies.values(), key=lambda body: body.inscribed_radius)
    if margin >= thickest.inscribed_radius:
        raise InputError(f"{where}: {what} of {margin * 1000:.1f} mm would swallow the arm: it is at least the "
                         f"half-thickness of its thickest link ({thickest.link}, {thickest.inscribed_radius * 1000:.1f} mm).")


def _less_parent(source: LinkSource, parent: LinkBody, consistency: float) -> Callable[[np.ndarray], np.ndarray]:
    """A free model's link occupancy without what its parent's body explains: a point that sits in
    the parent's body at (nearly) every configuration is the parent's. Without this, the part of
    a parent that turns about the joint axis would count twice (it looks still from both)."""

    def occupancy(points: np.ndarray) -> np.ndarray:
        explained = np.mean([parent.contains(transform_points(pose, points)) for pose in source.parent_T_link], axis=0)
        return np.where(explained >= consistency, 0.0, source.occupancy(points))

    return occupancy


def _inflate(piece: ConvexPiece, margin: float, max_vertices: int, rng: np.random.Generator) -> ConvexPiece:
    """Planes moved out by ``margin``; when a vertex where many planes met splits and the count
    passes the limit, a conservative hull of the inflated piece brings it back."""
    if margin <= 0:
        return piece
    inflated = piece.inflated(margin)
    if len(inflated.vertices) > max_vertices:
        inflated = conservative_hull(inflated.vertices, max_vertices, rng)
    return inflated


# -- what a model offers ----------------------------------------------------------------------------

def link_sources(model, exporter: CollisionExporter, rng: np.random.Generator, where: str) -> list[LinkSource]:
    """Per-link bodies from a structured model (``link_occupancy``) or a free one (``occupancy``)."""
    if hasattr(model, "link_occupancy") and hasattr(model, "link_bounds"):
        sources = []
        for link in model.link_names:
            lo, hi = (np.asarray(v, dtype=float) for v in model.link_bounds(link))
            occupancy = (lambda name: lambda points: model.link_occupancy(name, points))(link)
            sources.append(LinkSource(link, lo, hi, occupancy, 0.5, [occupancy]))
        return sources
    if hasattr(model, "occupancy"):
        return free_link_sources(model, exporter, rng, where)
    raise InputError(f"{where}: not a self-model (it answers neither link_occupancy nor occupancy).")


def free_link_sources(model, exporter: CollisionExporter, rng: np.random.Generator, where: str) -> list[LinkSource]:
    """A free model knows no links: a link's body is what stays occupied in that link's frame
    (URDF kinematics) across many configurations; elsewhere the other links come and go."""
    from selfmodel.chain import ChainSpec, link_poses_numpy
    from selfmodel.link_meshes import link_meshes

    urdf_path = getattr(model, "urdf_path", None)
    base_link, tip_link = getattr(model, "base_link", None), getattr(model, "tip_link", None)
    if urdf_path is None or not base_link or not tip_link:
        raise InputError(f"{where}: a free model needs a URDF with base and tip links to cut its body into links.")
    spec = ChainSpec.from_urdf(Path(urdf_path), base_link, tip_link)
    if list(spec.joint_names) != list(model.joint_names):
        raise InputError(f"{urdf_path}: its joints ({', '.join(spec.joint_names)}) do not match the model's "
                         f"({', '.join(model.joint_names)}).")
    qs = training_configurations(model, spec, exporter.free_configurations, rng)
    poses = link_poses_numpy(spec, qs)  # (K, L, 4, 4) base frame
    meshes = link_meshes(Path(urdf_path), spec.link_names)
    sources = []
    for index, link in enumerate(spec.link_names):
        if link not in meshes:
            continue  # a link the description gives no body: nothing to cut out for it
        lo, hi = meshes[link].bounds
        pad = 0.25 * (hi - lo) + 0.02  # room for a learned body larger than the description
        lo, hi = lo - pad, hi + pad

        def at(k: int, link_index: int = index):
            return lambda points: model.occupancy(transform_points(poses[k, link_index], points), qs[k])

        def consistency(points: np.ndarray, link_index: int = index) -> np.ndarray:
            return np.mean([at(k, link_index)(points) for k in range(len(qs))], axis=0)

        parent = spec.link_names[spec.joints[index - 1].parent_index] if index > 0 else None
        parent_T_link = None
        if parent is not None:
            parent_T_link = np.linalg.inv(poses[:, spec.link_names.index(parent)]) @ poses[:, index]
        # The margin looks at the consistent body's own level set: a single configuration's level
        # set near this link also holds the neighbouring links, which are not this link's to cover.
        sources.append(LinkSource(link, lo, hi, consistency, exporter.free_consistency,
                                  [], parent, parent_T_link, climb=False))
    return sources


def training_configurations(model, spec, count: int, rng: np.random.Generator) -> np.ndarray:
    """(count, dof) configurations: the model's training ones when it keeps them, else uniform in
    the URDF's joint limits."""
    known = getattr(model, "training_q", None)
    if known is not None and len(known):
        known = np.asarray(known, dtype=float)
        return known[rng.choice(len(known), size=min(count, len(known)), replace=False)]
    from rigs.urdf import joints as urdf_joints

    tree = urdf_io.parse_urdf(Path(model.urdf_path))
    infos = urdf_joints(tree)
    lower = np.array([infos[name].lower for name in spec.joint_names])
    upper = np.array([infos[name].upper for name in spec.joint_names])
    return rng.uniform(lower, upper, (count, len(lower)))


# -- writing ----------------------------------------------------------------------------------------

def write_collision_urdf(model_urdf: Path, export: CollisionExport, folder: Path) -> Path:
    """``folder/robot.urdf``: the model's URDF, learned joint origins written in, every
    ``<collision>`` replaced by the export's pieces (``meshes/collision/<link>_<k>.stl``), visual
    meshes copied so the folder loads on its own."""
    model_urdf = Path(model_urdf)
    tree = urdf_io.parse_urdf(model_urdf)
    links = {element.get("name"): element for element in tree.getroot().findall("link")}
    missing = [name for name in export.links if name not in links]
    if missing:
        raise InputError(f"{model_urdf}: link {missing[0]!r} of the model is not in this URDF.")
    for name, origin in export.joint_origins.items():
        urdf_io.set_joint_origin(tree, name, origin)
    for element in links.values():
        for collision in element.findall("collision"):
            element.remove(collision)
    urdf_io.copy_self_contained(tree, model_urdf.parent, folder, confine=True)
    (folder / "meshes" / "collision").mkdir(parents=True, exist_ok=True)
    for name, link in export.links.items():
        for k, piece in enumerate(link.pieces):
            relative = f"meshes/collision/{name}_{k}.stl"
            piece.mesh().export(folder / relative)
            collision = ET.SubElement(links[name], "collision", {"name": f"{name}_piece_{k}"})
            ET.SubElement(collision, "origin", {"xyz": "0 0 0", "rpy": "0 0 0"})
            geometry = ET.SubElement(collision, "geometry")
            ET.SubElement(geometry, "mesh", {"filename": relative})
    path = folder / "robot.urdf"
    urdf_io.write_urdf(tree, path)
    return path


def curobo_spheres_yaml(export: CollisionExport) -> str:
    """cuRobo's ``collision_spheres`` (link frames, metres); the margin is already in the radii."""
    lines = [f"# selfcal selfmodel export: sphere covers of the learned body, link frames, metres;",
             f"# radii include the export margin of {export.margin * 1000:.1f} mm.",
             "collision_spheres:"]
    for name, link in export.links.items():
        lines.append(f"  {name}:")
        for centre, radius in zip(link.spheres.centres, link.spheres.radii):
            lines.append(f'    - "center": [{centre[0]:.6f}, {centre[1]:.6f}, {centre[2]:.6f}]')
            lines.append(f'      "radius": {radius:.6f}')
    return "\n".join(lines) + "\n"


def robot_name(urdf_path: Path) -> str:
    return urdf_io.parse_urdf(urdf_path).getroot().get("name", "robot")


def export_report(export: CollisionExport, matrix: CollisionMatrix) -> dict:
    links = {}
    for name, link in export.links.items():
        links[name] = {
            "spheres": len(link.spheres.radii),
            "pieces": len(link.pieces),
            "vertices_per_piece": [len(piece.vertices) for piece in link.pieces],
            "body_volume_m3": link.body.volume,
            "pieces_volume_m3": float(sum(piece.volume for piece in link.pieces)),
            "spheres_summed_volume_m3": link.spheres.summed_volume,
            "margin_needed_mm": {kind: 1000.0 * value for kind, value in link.margin_needed.items()},
            "surface_samples": link.surface_samples,
            "touches_bounds": link.body.touches_bounds,
            "dropped_blob_fraction": link.body.dropped_fraction,
        }
    disabled = matrix.disabled()
    return {
        "margin_mm": export.margin * 1000.0,
        "margin_mode": export.margin_mode,
        "links": links,
        "srdf": {"samples": matrix.samples,
                 **{reason.lower(): sum(1 for _, _, r in disabled if r == reason) for reason in ("Adjacent", "Never", "Always")},
                 "checked_pairs": len(matrix.reasons)},
        "learned_joint_origins": sorted(export.joint_origins),
        "seconds": export.seconds,
    }


def write_export(fitted: CollisionExport, model_urdf: Path, out: Path, srdf_samples: int = 10_000, force: bool = False,
                 evaluate: Callable[[Path, CollisionExport], dict] | None = None,
                 progress: Progress | None = None, seed: int = 0) -> dict:
    """Write the export folder atomically; returns the report (also ``out/export_report.json``).

    ``evaluate(exported_urdf, fitted)`` may add report keys (``truth``, ``measured_surface``).
    """
    with output_folder(out, force) as folder:
        start = time.perf_counter()
        urdf_path = write_collision_urdf(model_urdf, fitted, folder)
        atomic_write_text(folder / "curobo_spheres.yml", curobo_spheres_yaml(fitted))
        matrix = collision_matrix(urdf_path, fitted.spheres, srdf_samples, np.random.default_rng(seed), progress)
        write_srdf(folder / "robot.srdf", robot_name(urdf_path), matrix)
        fitted.seconds["write_and_srdf"] = time.perf_counter() - start
        report = export_report(fitted, matrix)
        report["truth"] = None
        report.update((evaluate(urdf_path, fitted) or {}) if evaluate is not None else {})
        fitted.seconds["total"] = float(sum(v for k, v in fitted.seconds.items() if k != "total"))
        report["seconds"] = fitted.seconds
        atomic_write_json(folder / "export_report.json", report)
    return report


# -- the whole job, from a model folder -------------------------------------------------------------

def load_model_folder(folder: Path):
    """The self-model saved in ``folder`` (by ``selfcal selfmodel train``)."""
    from selfmodel.models import load_model

    return load_model(Path(folder))


def training_session_paths(folder: Path) -> list[Path]:
    """The sessions the model in ``folder`` was trained on, as its config.json records them."""
    from selfmodel.model_io import read_config

    paths = (read_config(Path(folder)).get("training") or {}).get("sessions") or []
    return [Path(path) if Path(path).is_absolute() else (Path(folder) / path).resolve() for path in paths]


def prepare_free_model(model, folder: Path, urdf: Path | None) -> None:
    """A free model knows no chain: give it the URDF that cuts its body into links, the base and tip
    of its training session, and its training configurations (from the sessions' joints.csv)."""
    from capture.session import load_session

    if urdf is None:
        raise InputError(f"{folder}: a free model has no links of its own; name the description to cut its body "
                         f"into links with --urdf.")
    sessions = [load_session(path) for path in training_session_paths(folder) if (Path(path) / "session.json").is_file()]
    if not sessions:
        raise InputError(f"{folder}: the sessions this free model was trained on are gone, so its base and tip links "
                         f"and its training configurations are unknown.")
    model.urdf_path = Path(urdf)
    model.base_link, model.tip_link = sessions[0].base_link, sessions[0].tip_link
    model.training_q = np.vstack([session.q for session in sessions])


def measured_surface_inside(model, export: CollisionExport) -> dict | None:
    """How much of the structured model's measured training surface (depth points, noisy) the
    export holds: fraction inside, and the 99th percentile of the distance outside (mm)."""
    from selfmodel.model_io import surface_samples

    if getattr(model, "folder", None) is None or getattr(model, "kind", "") != "structured":
        return None
    points, _, _ = surface_samples(model)
    result = {}
    for kind in ("pieces", "spheres"):
        inside = total = 0
        outside_all = []
        for link, collision in export.links.items():
            local = points.get(link)
            if local is None or not len(local):
                continue
            local = np.asarray(local, dtype=float)
            outside = (pieces_outside_distance(collision.pieces, local) if kind == "pieces"
                       else collision.spheres.outside_distance(local))
            inside += int(np.sum(outside <= 0))
            total += len(local)
            outside_all.append(outside)
        if total:
            result[kind] = {"fraction_inside": inside / total,
                            "outside_p99_mm": 1000.0 * float(np.percentile(np.concatenate(outside_all), 99)),
                            "samples": total}
    return result or None


def truth_at_random_configurations(session_path: Path, count: int, rng: np.random.Generator):
    """A simulated session's true arm at ``count`` configurations drawn uniformly in the joint
    limits: held out by construction (joint sag under gravity is not modelled here)."""
    from capture.session import load_session
    from selfmodel.chain import ChainSpec, link_poses_numpy
    from selfmodel.export_truth import TruthAtPoses
    from selfmodel.metrics import true_arm

    session = load_session(session_path)
    arm = true_arm(session, session.pose_ids[:1])
    truth_urdf = session.path / "truth" / "robot.urdf"
    spec = ChainSpec.from_urdf(truth_urdf, session.base_link, session.tip_link)
    infos = urdf_io.joints(urdf_io.parse_urdf(truth_urdf), truth_urdf)
    lower = np.array([infos[name].lower for name in spec.joint_names])
    upper = np.array([infos[name].upper for name in spec.joint_names])
    q = rng.uniform(lower, upper, (count, len(lower)))
    poses = link_poses_numpy(spec, q)
    links = [link for link in spec.link_names if link in arm.meshes]
    columns = [spec.link_names.index(link) for link in links]
    return TruthAtPoses([f"random{k:03d}" for k in range(count)], links, arm.meshes, poses[:, columns], q,
                        list(session.joint_names))


def export_model(model_folder: Path, out: Path, exporter: CollisionExporter, force: bool = False,
                 evaluate_truth: bool = True, heldout: Path | None = None, truth_poses: int = 10,
                 progress: Progress | None = None, model=None, urdf: Path | None = None) -> dict:
    """Load a model folder, export its collision geometry to ``out``; the report as a dict.

    With ``evaluate_truth``, the export is measured against a simulated truth: the ``heldout``
    session's poses when given, else the first training session's true arm at ``truth_poses``
    random configurations. ``urdf``: the description that cuts a free model's body into links.
    """
    from rigs.files import check_new_output
    from selfmodel.export_truth import PosedExport, evaluate_export, load_truth

    check_new_output(out, force)
    model_folder = Path(model_folder)
    model = model if model is not None else load_model_folder(model_folder)
    if getattr(model, "kind", "") == "free":
        prepare_free_model(model, model_folder, urdf)
    urdf_path = getattr(model, "urdf_path", None)
    if urdf_path is None:
        raise InputError(f"{model_folder}: the model names no URDF, so its links cannot be placed.")
    start = time.perf_counter()
    fitted = exporter.fit(model, where=str(model_folder), progress=progress)
    fitted.seconds["fit"] = time.perf_counter() - start

    def evaluate(exported_urdf: Path, export: CollisionExport) -> dict | None:
        rng = np.random.default_rng(exporter.seed + 1)
        if heldout is not None:
            truth, source = load_truth(heldout), f"held-out session {heldout}"
        else:
            simulated = [path for path in training_session_paths(model_folder) if (path / "truth").is_dir()]
            if not simulated:
                return None
            truth = truth_at_random_configurations(simulated[0], truth_poses, rng)
            source = f"true arm of {simulated[0]} at {truth_poses} random configurations (not trained on)"
        base_link = getattr(model, "base_link", None) or truth.link_names[0]
        figures = evaluate_export(PosedExport(exported_urdf, base_link, export.pieces, export.spheres), truth, rng)
        figures["poses_source"] = source
        return figures

    def evaluate_all(exported_urdf: Path, export: CollisionExport) -> dict:
        return {"truth": evaluate(exported_urdf, export) if evaluate_truth else None,
                "measured_surface": measured_surface_inside(model, export)}

    return write_export(fitted, Path(urdf_path), out, exporter.srdf_samples, force, evaluate_all, seed=exporter.seed)
