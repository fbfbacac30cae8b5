"""How well exported collision geometry covers the true arm of a simulated session (evaluation only).

The truth is the session's ``truth/robot.urdf`` visual meshes posed at ``truth/joints_reached.csv``;
the export is posed by its own URDF at the commanded angles of ``joints.csv``, as a planner would.
The true meshes are read as solids (:mod:`rigs.solids`): pybullet_data's meshes are not all closed,
and a ray-parity test calls points outside an open mesh inside (it reported a volume ratio of 1.0003
for pieces whose real ratio was 1.6). Figures per geometry kind (convex pieces, spheres), with
cuRobo's definitions (its sphere ``--compute-metrics``) on the whole posed arm:

- ``surface_coverage``: share of true surface samples inside the export (faces hidden inside another
  link, where links join, are not surface and are left out); ``coverage``: share of points inside
  the true body that are inside the export;
- ``surface_gap_mean_mm`` (over the uncovered samples), ``surface_gap_p95_mm`` (over all),
  ``largest_gap_mm``: how far true surface samples lie outside the export;
- ``protrusion_share``: share of the export's outer surface that lies outside the true body, and
  ``protrusion_mean_mm`` / ``protrusion_p95_mm`` / ``protrusion_max_mm``: how far those points lie from it;
  for spheres also ``every_sphere_protrusion_share`` / ``_mean_mm`` / ``_p95_mm``, the same over every
  sphere's whole surface, the parts inside another sphere too (cuRobo's reading: it samples each
  sphere's surface). Those inner parts lie nearer the body, so the outer surface is the stricter one;
- ``volume_ratio``: the export's (union) volume over the true volume (uniform samples in a box around
  both); for spheres also ``summed_volume_ratio``, cuRobo's (summed sphere volumes, overlaps twice).

Reads ``truth/``, so a fit must never call it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pinocchio as pin
import trimesh
from scipy.spatial import ConvexHull, QhullError

from capture.session import load_session
from capture.truth_files import truth_parameters
from rigs import urdf as urdf_io
from rigs.errors import InputError
from rigs.kinematics import configurations, frame_poses
from rigs.link_meshes import link_meshes
from rigs.self_contact import MOVING
from rigs.simulator import board_plate
from rigs.solids import Solid, raycasting_scene, solid_of, surface_distance
from rigs.transforms import invert, transform_points
from selfmodel.evaluation.metrics import true_arm
from selfmodel.export.bodies import ConvexPiece, polytope
from selfmodel.export.spheres import SphereCover
from selfmodel.export.srdf import LinkTree
from selfmodel.export.world import CollisionWorld
from selfmodel.model.chain import ArmLinks, link_poses_numpy
from selfmodel.model.folder import training_session_paths

TRUTH_PITCH = 0.001  # m: grid of the true solids


@dataclass
class PosedExport:
    """Collision geometry in link frames and the URDF that poses the links."""

    urdf_path: Path
    base_link: str
    pieces: dict[str, list[ConvexPiece]]
    spheres: dict[str, SphereCover] = field(default_factory=dict)
    held: dict[str, float] = field(default_factory=dict)


@dataclass
class TruthAtPoses:
    """The true arm at some recorded poses: link meshes (link frame) and their poses in the base frame."""

    pose_ids: list[str]
    link_names: list[str]
    meshes: dict[str, trimesh.Trimesh]
    base_T_links: np.ndarray  # (P, L, 4, 4)
    q_commanded: np.ndarray  # (P, dof) from joints.csv
    joint_names: list[str]
    solids: dict[str, Solid] = field(default_factory=dict)

    def solid(self, link: str) -> Solid:
        if link not in self.solids:
            self.solids[link] = solid_of(self.meshes[link], TRUTH_PITCH)
        return self.solids[link]


def load_truth(session_path: Path, pose_ids: list[str] | None = None) -> TruthAtPoses:
    """The true arm of a simulated session at ``pose_ids`` (default: all recorded poses), with the
    links that have a body (the calibration board counts as part of the tip, as the cameras saw it)."""
    session = load_session(session_path)
    arm = true_arm(session, pose_ids)
    links = [link for link in arm.link_names if link in arm.meshes]
    columns = [arm.link_names.index(link) for link in links]
    return TruthAtPoses(list(arm.pose_ids), links, arm.meshes, arm.base_T_links[:, columns], arm.q_commanded,
                        list(session.joint_names))


def export_link_poses(export: PosedExport, links: list[str], joint_names: list[str], q: np.ndarray) -> np.ndarray:
    """(P, dof) commanded angles -> (P, L, 4, 4) poses of ``links`` of the export, base frame
    (joints off the chain where the export holds them)."""
    model = pin.buildModelFromUrdf(str(export.urdf_path))
    missing = [name for name in joint_names if not model.existJointName(name)]
    if missing:
        raise InputError(f"{export.urdf_path}: joint {missing[0]!r} of the session is not in this URDF.")
    names = list(joint_names) + [name for name in export.held if model.existJointName(name)]
    q = np.atleast_2d(np.asarray(q, dtype=float))
    values = np.hstack([q, np.tile([export.held[name] for name in names[len(joint_names):]], (len(q), 1))])
    full = configurations(model, [model.getJointId(name) for name in names], values)
    frames = [model.getFrameId(link, pin.BODY) for link in [export.base_link] + links]
    poses = frame_poses(model, frames, full)
    return np.einsum("pij,pljk->plik", np.linalg.inv(poses[:, 0]), poses[:, 1:])






class _PosedTruth:
    """The true arm at one pose: inside test and distance to its surface, base frame."""

    def __init__(self, truth: TruthAtPoses, pose: int):
        self.items = [(truth.solid(link), invert(truth.base_T_links[pose, i])) for i, link in enumerate(truth.link_names)]

    def inside(self, points: np.ndarray) -> np.ndarray:
        result = np.zeros(len(points), dtype=bool)
        for solid, link_T_base in self.items:
            result |= solid.contains(transform_points(link_T_base, points))
        return result

    def distance(self, points: np.ndarray) -> np.ndarray:
        return np.min([solid.distance_to_surface(transform_points(link_T_base, points))
                       for solid, link_T_base in self.items], axis=0)


def evaluate_export(export: PosedExport, truth: TruthAtPoses, rng: np.random.Generator,
                    surface_samples: int = 20000, volume_samples: int = 100_000,
                    kinds: tuple[str, ...] = ("pieces", "spheres")) -> dict:
    """The figures of the module docstring, for the export's pieces (and spheres) against the truth;
    ``kinds`` names which of the two to measure (those the export has)."""
    links = sorted(set(export.pieces) | set(export.spheres))
    poses = export_link_poses(export, links, truth.joint_names, truth.q_commanded)
    piece_meshes = {link: trimesh.util.concatenate([piece.mesh() for piece in export.pieces[link]])
                    for link in links if export.pieces.get(link)}
    piece_scenes = {link: raycasting_scene(mesh) for link, mesh in piece_meshes.items()}
    areas = np.array([truth.meshes[link].area for link in truth.link_names])
    counts = np.maximum((surface_samples * areas / areas.sum()).astype(int), 50)
    link_samples = {link: np.asarray(truth.meshes[link].sample(int(n), seed=int(rng.integers(2**31)))) for link, n in
                    zip(truth.link_names, counts)}
    kinds = [kind for kind in kinds if (export.pieces if kind == "pieces" else export.spheres)]
    totals = {kind: {"gaps": [], "interior": [0, 0], "export_volume": 0, "true_volume": 0, "protrusion": [],
                     "outer": 0, "every": [], "every_count": 0} for kind in kinds}
    per_link = {link: {kind: [0, 0, 0.0] for kind in kinds} for link in truth.link_names}
    summed_sphere_volume = float(sum(cover.summed_volume for cover in export.spheres.values()))
    true_volume = float(sum(truth.solid(link).volume for link in truth.link_names))
    for p in range(len(truth.pose_ids)):
        posed = _PosedTruth(truth, p)
        export_poses = poses[p]
        for i, link in enumerate(truth.link_names):
            points = transform_points(truth.base_T_links[p, i], link_samples[link])
            # Faces hidden inside another link (where links join) are not the arm's surface.
            hidden = np.zeros(len(points), dtype=bool)
            for j, (solid, link_T_base) in enumerate(posed.items):
                if j != i:
                    hidden |= solid.contains(transform_points(link_T_base, points))
            points = points[~hidden]
            for kind in kinds:
                gaps = _outside_distance(export, piece_scenes, kind, links, export_poses, points)
                totals[kind]["gaps"].append(gaps)
                per_link[link][kind][0] += int(np.sum(gaps <= 1e-9))
                per_link[link][kind][1] += len(points)
                per_link[link][kind][2] = max(per_link[link][kind][2], float(gaps.max()) if len(gaps) else 0.0)
        corners = [transform_points(truth.base_T_links[p, i], truth.meshes[link].bounds) for i, link in enumerate(truth.link_names)]
        corners += [transform_points(export_poses[k], piece_meshes[link].bounds) for k, link in enumerate(links) if link in piece_meshes]
        corners += [transform_points(export_poses[k], _sphere_bounds(export.spheres[link])) for k, link in enumerate(links)
                    if link in export.spheres and len(export.spheres[link].radii)]
        corners = np.vstack(corners)
        box_lo, box_hi = corners.min(axis=0) - 0.01, corners.max(axis=0) + 0.01
        volume_points = rng.uniform(box_lo, box_hi, (volume_samples, 3))
        inside_true = posed.inside(volume_points)
        for kind in kinds:
            inside_export = _outside_distance(export, piece_scenes, kind, links, export_poses, volume_points,
                                              distances=False) <= 1e-9
            totals[kind]["export_volume"] += int(inside_export.sum())
            totals[kind]["true_volume"] += int(inside_true.sum())
            totals[kind]["interior"][0] += int(np.sum(inside_export & inside_true))
            totals[kind]["interior"][1] += int(inside_true.sum())
            surface, outer = _export_surface(export, kind, links, export_poses, rng)
            if kind != "spheres":  # only spheres are also read over every part's surface (cuRobo's reading)
                surface, outer = surface[outer], outer[outer]
            outside = ~posed.inside(surface)
            distance = np.zeros(len(surface))
            distance[outside] = posed.distance(surface[outside])
            totals[kind]["outer"] += int(outer.sum())
            totals[kind]["protrusion"].append(distance[outer & outside])
            if kind == "spheres":
                totals[kind]["every_count"] += len(surface)
                totals[kind]["every"].append(distance[outside])
    result = {"poses": len(truth.pose_ids), "pose_ids": truth.pose_ids}
    for kind in kinds:
        t = totals[kind]
        gaps = np.concatenate(t["gaps"]) if t["gaps"] else np.zeros(1)
        protrusion = np.concatenate(t["protrusion"]) if t["protrusion"] else np.zeros(0)
        result[kind] = {
            "surface_coverage": float(np.mean(gaps <= 1e-9)),
            "coverage": t["interior"][0] / max(t["interior"][1], 1),
            "surface_samples": int(len(gaps)),
            "surface_gap_mean_mm": 1000.0 * float(gaps[gaps > 1e-9].mean()) if np.any(gaps > 1e-9) else 0.0,
            "surface_gap_p95_mm": 1000.0 * float(np.percentile(gaps, 95)),
            "largest_gap_mm": 1000.0 * float(gaps.max()),
            "protrusion_share": len(protrusion) / max(t["outer"], 1),
            "protrusion_mean_mm": 1000.0 * float(protrusion.mean()) if len(protrusion) else 0.0,
            "protrusion_p95_mm": 1000.0 * float(np.percentile(protrusion, 95)) if len(protrusion) else 0.0,
            "protrusion_max_mm": 1000.0 * float(protrusion.max()) if len(protrusion) else 0.0,
            "volume_ratio": t["export_volume"] / max(t["true_volume"], 1),
        }
    if "spheres" in kinds:
        every = np.concatenate(totals["spheres"]["every"]) if totals["spheres"]["every"] else np.zeros(0)
        result["spheres"].update({
            "every_sphere_protrusion_share": len(every) / max(totals["spheres"]["every_count"], 1),
            "every_sphere_protrusion_mean_mm": 1000.0 * float(every.mean()) if len(every) else 0.0,
            "every_sphere_protrusion_p95_mm": 1000.0 * float(np.percentile(every, 95)) if len(every) else 0.0})
        result["spheres"]["summed_volume_ratio"] = summed_sphere_volume / true_volume
        result["spheres"]["count"] = int(sum(len(cover.radii) for cover in export.spheres.values()))
    result["per_link"] = {link: {kind: {"surface_coverage": v[0] / max(v[1], 1), "largest_gap_mm": 1000.0 * v[2]}
                                 for kind, v in kinds_values.items()}
                          for link, kinds_values in per_link.items()}
    return result


def _sphere_bounds(cover: SphereCover) -> np.ndarray:
    return np.vstack([(cover.centres - cover.radii[:, None]).min(axis=0), (cover.centres + cover.radii[:, None]).max(axis=0)])


def _outside_distance(export: PosedExport, piece_scenes: dict, kind: str, links: list[str], export_poses: np.ndarray,
                      points: np.ndarray, distances: bool = True) -> np.ndarray:
    """(N, 3) base frame -> (N,) m outside the export's union (0 inside; with ``distances=False``,
    1 outside)."""
    outside = np.full(len(points), np.inf)
    for k, link in enumerate(links):
        local = transform_points(invert(export_poses[k]), points)
        if kind == "spheres":
            if link in export.spheres and len(export.spheres[link].radii):
                outside = np.minimum(outside, export.spheres[link].outside_distance(local))
            continue
        pieces = export.pieces.get(link) or []
        if not pieces:
            continue
        inside = np.zeros(len(local), dtype=bool)
        for piece in pieces:
            inside |= piece.contains(local)
        if distances:
            distance = np.zeros(len(local))
            if (~inside).any():
                distance[~inside] = surface_distance(piece_scenes[link], local[~inside])
            outside = np.minimum(outside, distance)
        else:
            outside = np.minimum(outside, np.where(inside, 0.0, 1.0))
    return outside


def _export_surface(export: PosedExport, kind: str, links: list[str], export_poses: np.ndarray,
                    rng: np.random.Generator, count: int = 20000) -> tuple[np.ndarray, np.ndarray]:
    """Samples (M, 3), base frame, of every part's surface, area-weighted, and (M,) bool: on the
    union's outer surface (not strictly inside another part)."""
    parts = []
    if kind == "spheres":
        total_area = float(sum(np.sum(cover.radii ** 2) for cover in export.spheres.values()))
    else:
        meshes = {link: [piece.mesh() for piece in export.pieces.get(link) or []] for link in links}
        total_area = float(sum(mesh.area for items in meshes.values() for mesh in items))
    for k, link in enumerate(links):
        if kind == "spheres" and link in export.spheres:
            cover = export.spheres[link]
            for centre, radius in zip(cover.centres, cover.radii):
                directions = rng.normal(size=(max(int(count * radius ** 2 / total_area), 4), 3))
                directions /= np.linalg.norm(directions, axis=1, keepdims=True)
                parts.append(transform_points(export_poses[k], centre + radius * directions))
        elif kind == "pieces":
            for mesh in meshes[link]:
                samples = np.asarray(mesh.sample(max(int(count * mesh.area / total_area), 4), seed=int(rng.integers(2**31))))
                parts.append(transform_points(export_poses[k], samples))
    points = np.vstack(parts)
    # Keep the outer surface only: a point strictly inside another part of the union is not on it.
    strictly_inside = np.zeros(len(points), dtype=bool)
    for k, link in enumerate(links):
        local = transform_points(invert(export_poses[k]), points)
        if kind == "spheres" and link in export.spheres:
            cover = export.spheres[link]
            gaps = np.linalg.norm(local[:, None] - cover.centres[None], axis=2) - cover.radii[None]
            strictly_inside |= np.any(gaps < -1e-6, axis=1)
        elif kind == "pieces":
            for piece in export.pieces.get(link) or []:
                strictly_inside |= np.all(local @ piece.normals.T < piece.offsets - 1e-6, axis=1)
    return points, ~strictly_inside


def description_pieces(urdf_path: Path, links: list[str]) -> dict[str, list[ConvexPiece]]:
    """A URDF's own ``<collision>`` geometry as convex pieces per link (link frame): each mesh is
    split into its connected parts (a V-HACD file holds several) and each part taken as its hull,
    as pybullet and FCL do. Used as the baseline an export is compared with."""
    urdf_path = Path(urdf_path)
    tree = urdf_io.parse_urdf(urdf_path)
    result: dict[str, list[ConvexPiece]] = {}
    for element in tree.getroot().findall("link"):
        name = element.get("name")
        if name not in links:
            continue
        for collision in element.findall("collision"):
            geometry = collision.find("geometry")
            if geometry is None or len(geometry) == 0:
                continue
            shape = geometry[0]
            if shape.tag == "mesh":
                path = urdf_io.resolve_mesh(shape.get("filename", ""), urdf_path.parent)
                mesh = trimesh.load(str(path), force="mesh")
                if shape.get("scale"):
                    mesh.apply_scale([float(v) for v in shape.get("scale").split()])
                # An OBJ keeps a corner apart for each normal and texture coordinate it has; split
                # unmerged, pybullet_data's Panda hulls fell into single triangles, hulls of nothing.
                mesh.merge_vertices(merge_tex=True, merge_norm=True)
                parts = mesh.split(only_watertight=False)
            elif shape.tag == "box":
                parts = [trimesh.creation.box([float(v) for v in shape.get("size").split()])]
            elif shape.tag == "cylinder":
                # A circumscribed 64-gon: the polytope contains the round cylinder it stands for.
                radius = float(shape.get("radius")) / np.cos(np.pi / 64)
                parts = [trimesh.creation.cylinder(radius, float(shape.get("length")), sections=64)]
            elif shape.tag == "sphere":
                sphere = trimesh.creation.icosphere(subdivisions=2, radius=1.0)
                # Scaled so every face lies outside the unit sphere: the polytope contains the ball.
                inner = float(np.min(np.abs(np.einsum("ij,ij->i", sphere.face_normals, sphere.triangles_center))))
                parts = [sphere.apply_scale(float(shape.get("radius")) / inner)]
            else:
                continue
            origin = urdf_io.element_origin(collision)
            for part in parts:
                vertices = transform_points(origin, np.asarray(part.vertices))
                if len(vertices) < 4:
                    continue
                try:
                    hull = ConvexHull(vertices)
                    result.setdefault(name, []).append(polytope(hull.equations[:, :3], -hull.equations[:, 3]))
                except (QhullError, ValueError):  # a flat part (no volume) cannot hold anything: skip it
                    continue
    return result


def truth_at_random_configurations(session_path: Path, count: int, rng: np.random.Generator):
    """A simulated session's true arm at ``count`` configurations drawn uniformly in the joint
    limits: held out by construction (joint sag under gravity is not modelled here)."""
    session = load_session(session_path)
    arm = true_arm(session, session.pose_ids[:1])
    truth_urdf = session.path / "truth" / "robot.urdf"
    spec = ArmLinks.from_urdf(truth_urdf, session.base_link, session.tip_link, session.held_joints)
    infos = urdf_io.joints(urdf_io.parse_urdf(truth_urdf), truth_urdf)
    lower = np.array([infos[name].lower for name in spec.joint_names])
    upper = np.array([infos[name].upper for name in spec.joint_names])
    q = rng.uniform(lower, upper, (count, len(lower)))
    poses = link_poses_numpy(spec, q)
    links = [link for link in spec.link_names if link in arm.meshes]
    columns = [spec.link_names.index(link) for link in links]
    return TruthAtPoses([f"random{k:03d}" for k in range(count)], links, arm.meshes, poses[:, columns], q,
                        list(session.joint_names))


class TrueWorld:
    """The true arm of a simulated session among box obstacles, asked as a planner's world is
    (``collides(q)`` at commanded joint values): its meshes (and the board on the tip) touch an
    obstacle, or two of its links joined by more than one moving joint touch (the pairs a real arm
    can bring into contact; rigid and one-joint pairs are the arm's own build). Meshes are triangle
    soups for coal, so a box wholly inside a link (or a link inside a box) is caught by testing points
    of one inside the other's solid. Evaluation only: reads ``truth/``."""

    def __init__(self, session_path: Path, obstacles=(), samples: int = 1500, seed: int = 0):
        session = load_session(session_path)
        urdf = session.path / "truth" / "robot.urdf"
        extra = {}
        board = (session.manifest.get("sensors") or {}).get("board")
        parameters = truth_parameters(session.path)
        tip_T_board = parameters.get("tip_T_board", "matrix", None, shape=(4, 4))
        if board and tip_T_board is not None:
            extra[session.tip_link] = board_plate(tuple(board["squares"]), float(board["square_m"])).apply_transform(
                tip_T_board)

        meshes = link_meshes(urdf, fold_fixed=False)
        for link, mesh in extra.items():
            meshes[link] = trimesh.util.concatenate([meshes[link], mesh]) if link in meshes else mesh
        tree = LinkTree(urdf)
        moving = set(session.joint_names)
        names = sorted(meshes)
        self.self_pairs = {tuple(sorted((a, b))) for i, a in enumerate(names) for b in names[i + 1:]
                           if sum(1 for joint in tree.path(a, b) if joint.type in MOVING and joint.name in moving) >= 2}
        self.world = CollisionWorld(urdf, session.joint_names, session.base_link, held=session.held_joints,
                                    obstacles=list(obstacles), convex=False, geometry="visual", extra=extra,
                                    pairs=self.self_pairs, read_meshes="trimesh")
        self.obstacles = list(obstacles)
        rng = np.random.default_rng(seed)
        self.links = names
        self.samples = {link: np.asarray(meshes[link].sample(samples, seed=int(rng.integers(2**31)))) for link in names}
        # Plain arrays: trimesh's tracked arrays cost more than the arithmetic in a loop run millions of times.
        self.balls = {link: (np.array(meshes[link].bounding_sphere.primitive.center, dtype=float),
                             float(meshes[link].bounding_sphere.primitive.radius)) for link in names}
        self.solids = {link: solid_of(meshes[link], 0.002) for link in names}
        self.joint_names = list(session.joint_names)

    def collides(self, q: np.ndarray) -> bool:
        if self.world.collides(q):
            return True
        return self._contained(q)

    def _contained(self, q: np.ndarray) -> bool:
        if not self.obstacles:
            return False
        for link, pose in zip(self.links, self.world.link_poses(self.links, q)):
            centre, radius = self.balls[link]
            centre = pose[:3, :3] @ centre + pose[:3, 3]
            for box in self.obstacles:
                local = box.base_T_box[:3, :3].T @ (centre - box.base_T_box[:3, 3])
                if np.any(np.abs(local) - box.size / 2 > radius):
                    continue
                if box.contains(self.samples[link] @ pose[:3, :3].T + pose[:3, 3]).any():
                    return True
                inside_link = np.linalg.inv(pose) @ box.base_T_box
                if self.solids[link].signed_distance(inside_link[None, :3, 3]).min() < 0:
                    return True
        return False


def truth_figures(heldout: Path | None = None, poses: int = 10, seed: int = 0):
    """How ``selfcal selfmodel export`` measures an export against a simulated truth: a callable
    ``(model, model_folder, exported_urdf, export) -> dict | None`` for
    :func:`selfmodel.export.exporter.export_model`. The truth is the ``heldout`` session's poses when
    given, else the first training session's true arm at ``poses`` random configurations (not trained
    on); None when no training session is simulated. ``seed``: the exporter's (the random
    configurations use ``seed + 1``)."""
    def figures(model, model_folder: Path, exported_urdf: Path, export) -> dict | None:
        rng = np.random.default_rng(seed + 1)
        if heldout is not None:
            truth, source = load_truth(heldout), f"held-out session {heldout}"
        else:
            simulated = [path for path in training_session_paths(model_folder) if (path / "truth").is_dir()]
            if not simulated:
                return None
            truth = truth_at_random_configurations(simulated[0], poses, rng)
            source = f"true arm of {simulated[0]} at {poses} random configurations (not trained on)"
        base_link = model.base_link or truth.link_names[0]
        result = evaluate_export(PosedExport(exported_urdf, base_link, export.pieces, export.spheres), truth, rng)
        result["poses_source"] = source
        return result

    return figures
