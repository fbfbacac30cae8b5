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
import yaml

from rigs import urdf as urdf_io
from rigs.errors import InputError
from rigs.files import atomic_write_json, atomic_write_text, output_folder
from selfmodel.collision import (ConvexPiece, LinkBody, conservative_hull, convex_pieces, link_body,
                                 pieces_outside_distance)
from selfmodel.export_margin import (check_margin, climb_outward, level_set_samples, measured_surface_inside,
                                     own_level_set)
from selfmodel.export_sources import less_parent, link_sources, prepare_free_model, training_session_paths
from selfmodel.spheres import SphereCover, fit_sphere_cover
from selfmodel.srdf import CollisionMatrix, collision_matrix, write_srdf

Progress = Callable[[int, int], None]


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


class CollisionExporter:
    """Configure, then ``fit(model)`` -> :class:`CollisionExport`; ``write`` puts it on disk.

    ``margin``: metres, or None for the automatic margin. ``voxel``: grid spacing of the bodies (m).
    ``free_configurations``: how many configurations define a free model's link bodies, and
    ``free_consistency`` the mean occupancy across them that counts as the link's body.
    """

    def __init__(self, max_spheres: int = 20, max_pieces: int = 8, margin: float | None = None,
                 voxel: float = 0.003, max_piece_vertices: int = 64, srdf_samples: int = 10_000,
                 margin_samples: int = 20_000, margin_climbs: int = 300, free_configurations: int = 12,
                 free_consistency: float = 0.8, seed: int = 0):
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
        sources = link_sources(model, rng, where, self.free_configurations, self.free_consistency)
        seconds: dict[str, float] = {"bodies": 0.0, "pieces": 0.0, "spheres": 0.0, "margin": 0.0}
        bodies: dict[str, LinkBody] = {}
        occupancies = {}
        for source in sources:
            start = time.perf_counter()
            occupancy = source.occupancy
            if source.parent is not None and source.parent in bodies:
                occupancy = less_parent(source, bodies[source.parent], self.free_consistency)
            bodies[source.link] = link_body(source.link, occupancy, source.lo, source.hi, self.voxel, source.level,
                                            where=where)
            occupancies[source.link] = occupancy
            seconds["bodies"] += time.perf_counter() - start
        # A given margin is checked before minutes of decomposition, a measured one after.
        if self.margin is not None:
            check_margin(float(self.margin), bodies, "--margin", where)
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
            own = own_level_set(occupancy, source, body)
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
            check_margin(margin, bodies, "the measured margin", where)
        else:
            margin, mode = float(self.margin), "given"
        start = time.perf_counter()
        for link in links.values():
            link.pieces = [_inflate(piece, margin, self.max_piece_vertices, rng) for piece in link.pieces]
            link.spheres = link.spheres.inflated(margin)
        seconds["pieces"] += time.perf_counter() - start
        origins = model.corrected_joint_origins() if hasattr(model, "corrected_joint_origins") else {}
        return CollisionExport(links, margin, mode, seconds, origins)


def _inflate(piece: ConvexPiece, margin: float, max_vertices: int, rng: np.random.Generator) -> ConvexPiece:
    """Planes moved out by ``margin``; when a vertex where many planes met splits and the count
    passes the limit, a conservative hull of the inflated piece brings it back."""
    if margin <= 0:
        return piece
    inflated = piece.inflated(margin)
    if len(inflated.vertices) > max_vertices:
        inflated = conservative_hull(inflated.vertices, max_vertices, rng)
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
    path = folder / "robot.urdf"
    urdf_io.write_urdf(tree, path)
    return path


def curobo_spheres_yaml(export: CollisionExport) -> str:
    """cuRobo's ``collision_spheres`` (link frames, metres); the margin is already in the radii."""
    spheres = {name: [{"center": [round(float(v), 6) for v in centre], "radius": round(float(radius), 6)}
                      for centre, radius in zip(link.spheres.centres, link.spheres.radii)]
               for name, link in export.links.items()}
    header = ("# selfcal selfmodel export: sphere covers of the learned body, link frames, metres;\n"
              f"# radii include the export margin of {export.margin * 1000:.1f} mm.\n")
    return header + yaml.safe_dump({"collision_spheres": spheres}, sort_keys=False, default_flow_style=None)


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
                 **{reason.lower(): sum(1 for _, _, r in disabled if r == reason) for reason in ("Adjacent", "Never")},
                 "touching_in_every_sample": sum(1 for key, reason in matrix.reasons.items()
                                                 if reason is None and matrix.contact_fraction[key] == 1.0),
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
        # The export's own time: the fit (its parts are listed too) and writing; evaluation apart.
        fitted.seconds["export_total"] = float(fitted.seconds.get("fit", sum(
            fitted.seconds.get(part, 0.0) for part in ("bodies", "pieces", "spheres", "margin")))
            + fitted.seconds["write_and_srdf"])
        report["truth"] = None
        start = time.perf_counter()
        report.update((evaluate(urdf_path, fitted) or {}) if evaluate is not None else {})
        fitted.seconds["evaluation"] = time.perf_counter() - start
        report["seconds"] = fitted.seconds
        atomic_write_json(folder / "export_report.json", report)
    return report


# -- the whole job, from a model folder -------------------------------------------------------------

def load_model_folder(folder: Path):
    """The self-model saved in ``folder`` (by ``selfcal selfmodel train``)."""
    from selfmodel.model_io import load_model  # torch takes 2 s to load; only a model folder needs it

    return load_model(Path(folder))


def export_model(model_folder: Path, out: Path, exporter: CollisionExporter, force: bool = False,
                 evaluate_truth: bool = True, heldout: Path | None = None, truth_poses: int = 10,
                 progress: Progress | None = None, model=None, urdf: Path | None = None) -> dict:
    """Load a model folder, export its collision geometry to ``out``; the report as a dict.

    With ``evaluate_truth``, the export is measured against a simulated truth: the ``heldout``
    session's poses when given, else the first training session's true arm at ``truth_poses``
    random configurations. ``urdf``: the description that cuts a free model's body into links.
    """
    from rigs.files import check_new_output
    from selfmodel.export_truth import PosedExport, evaluate_export, load_truth, truth_at_random_configurations

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
