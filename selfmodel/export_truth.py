"""How well exported collision geometry covers the true arm of a simulated session (evaluation only).

The truth is the session's ``truth/robot.urdf`` visual meshes posed at ``truth/joints_reached.csv``;
the export is posed by its own URDF at the commanded angles of ``joints.csv``, as a planner would.
Figures, per geometry kind (convex pieces, spheres):

- ``coverage``: fraction of true surface samples inside the export (faces hidden inside another
  link, where links join, are not surface and are left out);
- ``largest_gap_mm``: the farthest any true surface sample lies outside the export;
- ``protrusion_mm`` / ``protrusion_max_mm``: mean and largest distance of the export's outer
  surface from the true body (how much free space the cover takes away);
- ``volume_ratio``: volume of the export over the true body's volume (uniform samples in a box
  around both).

Reads ``truth/``, so a fit must never call it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import trimesh
from scipy.spatial import ConvexHull, QhullError

from rigs import urdf as urdf_io
from rigs.errors import InputError
from rigs.transforms import invert, transform_points
from selfmodel.collision import ConvexPiece, polytope
from selfmodel.spheres import SphereCover


@dataclass
class PosedExport:
    """Collision geometry in link frames and the URDF that poses the links."""

    urdf_path: Path
    base_link: str
    pieces: dict[str, list[ConvexPiece]]
    spheres: dict[str, SphereCover] = field(default_factory=dict)


@dataclass
class TruthAtPoses:
    """The true arm at some recorded poses: link meshes (link frame) and their poses in the base frame."""

    pose_ids: list[str]
    link_names: list[str]
    meshes: dict[str, trimesh.Trimesh]
    base_T_links: np.ndarray  # (P, L, 4, 4)
    q_commanded: np.ndarray  # (P, dof) from joints.csv
    joint_names: list[str]


def _o3d():
    import open3d as o3d  # before coacd in any process (see selfmodel.collision.import_coacd)

    return o3d


def load_truth(session_path: Path, pose_ids: list[str] | None = None) -> TruthAtPoses:
    """The true arm of a simulated session at ``pose_ids`` (default: all recorded poses), with the
    links that have a body (the calibration board counts as part of the tip, as the cameras saw it)."""
    from capture.session import load_session
    from selfmodel.metrics import true_arm

    session = load_session(session_path)
    arm = true_arm(session, pose_ids)
    links = [link for link in arm.link_names if link in arm.meshes]
    columns = [arm.link_names.index(link) for link in links]
    return TruthAtPoses(list(arm.pose_ids), links, arm.meshes, arm.base_T_links[:, columns], arm.q_commanded,
                        list(session.joint_names))


def export_link_poses(export: PosedExport, links: list[str], joint_names: list[str], q: np.ndarray) -> np.ndarray:
    """(P, dof) commanded angles -> (P, L, 4, 4) poses of ``links`` of the export, base frame."""
    import pinocchio as pin

    from selfmodel.srdf import full_configurations, link_poses

    model = pin.buildModelFromUrdf(str(export.urdf_path))
    try:
        full = full_configurations(model, joint_names, q)
    except KeyError as error:
        raise InputError(f"{export.urdf_path}: joint {error.args[0]!r} of the session is not in this URDF.") from None
    poses = link_poses(model, [export.base_link] + links, full)
    return np.einsum("pij,pljk->plik", np.linalg.inv(poses[:, 0]), poses[:, 1:])


class _Scenes:
    """open3d raycasting scenes of meshes, one per key, queried in the mesh's own frame."""

    def __init__(self, meshes: dict[str, trimesh.Trimesh]):
        o3d = _o3d()
        self.scenes = {}
        for key, mesh in meshes.items():
            scene = o3d.t.geometry.RaycastingScene()
            scene.add_triangles(o3d.core.Tensor(np.asarray(mesh.vertices, dtype=np.float32)),
                                o3d.core.Tensor(np.asarray(mesh.faces, dtype=np.uint32)))
            self.scenes[key] = scene

    def occupancy(self, key: str, points: np.ndarray) -> np.ndarray:
        o3d = _o3d()
        # Several rays vote: robust on meshes that are not quite watertight (FACTS.md).
        return self.scenes[key].compute_occupancy(o3d.core.Tensor(points.astype(np.float32)), nsamples=3).numpy() > 0.5

    def distance(self, key: str, points: np.ndarray) -> np.ndarray:
        o3d = _o3d()
        return self.scenes[key].compute_distance(o3d.core.Tensor(points.astype(np.float32))).numpy().astype(float)


def _to_frames(points: np.ndarray, base_T_links: np.ndarray) -> list[np.ndarray]:
    return [transform_points(invert(pose), points) for pose in base_T_links]


def evaluate_export(export: PosedExport, truth: TruthAtPoses, rng: np.random.Generator,
                    surface_samples: int = 20000, volume_samples: int = 100_000) -> dict:
    """Coverage, gap, protrusion and volume ratio of the export's pieces (and spheres) against the truth."""
    links = sorted(set(export.pieces) | set(export.spheres))
    poses = export_link_poses(export, links, truth.joint_names, truth.q_commanded)
    true_scenes = _Scenes(truth.meshes)
    piece_meshes = {link: trimesh.util.concatenate([piece.mesh() for piece in export.pieces[link]])
                    for link in links if export.pieces.get(link)}
    piece_scenes = _Scenes(piece_meshes)
    areas = np.array([truth.meshes[link].area for link in truth.link_names])
    counts = np.maximum((surface_samples * areas / areas.sum()).astype(int), 50)
    link_samples = {link: np.asarray(truth.meshes[link].sample(int(n), seed=int(rng.integers(2**31)))) for link, n in
                    zip(truth.link_names, counts)}
    kinds = ["pieces"] + (["spheres"] if export.spheres else [])
    totals = {kind: {"covered": 0, "samples": 0, "gap": 0.0, "protrusion": [], "export_volume": 0, "true_volume": 0}
              for kind in kinds}
    per_link = {link: {kind: [0, 0, 0.0] for kind in kinds} for link in truth.link_names}
    for p in range(len(truth.pose_ids)):
        true_poses, export_poses = truth.base_T_links[p], poses[p]
        # True surface samples at this pose, less the faces hidden inside another link.
        for i, link in enumerate(truth.link_names):
            points = transform_points(true_poses[i], link_samples[link])
            hidden = np.zeros(len(points), dtype=bool)
            for j, other in enumerate(truth.link_names):
                if j != i:
                    hidden |= true_scenes.occupancy(other, transform_points(invert(true_poses[j]), points))
            points = points[~hidden]
            for kind in kinds:
                outside = _outside_distance(export, piece_scenes, kind, links, export_poses, points)
                covered = outside <= 1e-9
                totals[kind]["covered"] += int(covered.sum())
                totals[kind]["samples"] += len(points)
                gap = float(outside.max()) if len(points) else 0.0
                totals[kind]["gap"] = max(totals[kind]["gap"], gap)
                per_link[link][kind][0] += int(covered.sum())
                per_link[link][kind][1] += len(points)
                per_link[link][kind][2] = max(per_link[link][kind][2], gap)
        # Volume: uniform samples in a box around the true arm and the export.
        corners = [transform_points(true_poses[i], truth.meshes[link].bounds) for i, link in enumerate(truth.link_names)]
        corners += [transform_points(export_poses[k], m.bounds) for k, link in enumerate(links)
                    for m in ([piece_meshes[link]] if link in piece_meshes else [])]
        corners += [transform_points(export_poses[k], _sphere_bounds(export.spheres[link])) for k, link in enumerate(links)
                    if link in export.spheres]
        corners = np.vstack(corners)
        box_lo, box_hi = corners.min(axis=0) - 0.01, corners.max(axis=0) + 0.01
        volume_points = rng.uniform(box_lo, box_hi, (volume_samples, 3))
        inside_true = _true_occupancy(true_scenes, truth, true_poses, volume_points)
        for kind in kinds:
            inside_export = _outside_distance(export, piece_scenes, kind, links, export_poses, volume_points,
                                              distances=False) <= 1e-9
            totals[kind]["export_volume"] += int(inside_export.sum())
            totals[kind]["true_volume"] += int(inside_true.sum())
            # Protrusion: the export's outer surface, measured from the true body.
            surface = _export_surface(export, kind, links, export_poses, rng)
            inside = _true_occupancy(true_scenes, truth, true_poses, surface)
            distance = np.full(len(surface), np.inf)
            for i, link in enumerate(truth.link_names):
                distance = np.minimum(distance, true_scenes.distance(link, transform_points(invert(true_poses[i]), surface)))
            totals[kind]["protrusion"].append(np.where(inside, 0.0, distance))
    result = {"poses": len(truth.pose_ids), "pose_ids": truth.pose_ids}
    for kind in kinds:
        t = totals[kind]
        protrusion = np.concatenate(t["protrusion"]) if t["protrusion"] else np.zeros(1)
        result[kind] = {
            "coverage": t["covered"] / max(t["samples"], 1),
            "surface_samples": t["samples"],
            "largest_gap_mm": 1000.0 * t["gap"],
            "protrusion_mm": 1000.0 * float(protrusion.mean()),
            "protrusion_max_mm": 1000.0 * float(protrusion.max()),
            "volume_ratio": t["export_volume"] / max(t["true_volume"], 1),
        }
    result["per_link"] = {link: {kind: {"coverage": v[0] / max(v[1], 1), "largest_gap_mm": 1000.0 * v[2]}
                                 for kind, v in kinds_values.items()}
                          for link, kinds_values in per_link.items()}
    return result


def _sphere_bounds(cover: SphereCover) -> np.ndarray:
    return np.vstack([(cover.centres - cover.radii[:, None]).min(axis=0), (cover.centres + cover.radii[:, None]).max(axis=0)])


def _true_occupancy(scenes: _Scenes, truth: TruthAtPoses, true_poses: np.ndarray, points: np.ndarray) -> np.ndarray:
    inside = np.zeros(len(points), dtype=bool)
    for i, link in enumerate(truth.link_names):
        inside |= scenes.occupancy(link, transform_points(invert(true_poses[i]), points))
    return inside


def _outside_distance(export: PosedExport, piece_scenes: _Scenes, kind: str, links: list[str], export_poses: np.ndarray,
                      points: np.ndarray, distances: bool = True) -> np.ndarray:
    """(N, 3) base frame -> (N,) m outside the export's union (0 inside; with ``distances=False``,
    1 outside)."""
    outside = np.full(len(points), np.inf)
    local_points = _to_frames(points, export_poses)
    for k, link in enumerate(links):
        local = local_points[k]
        if kind == "spheres":
            if link in export.spheres:
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
                distance[~inside] = piece_scenes.distance(link, local[~inside])
            outside = np.minimum(outside, distance)
        else:
            outside = np.minimum(outside, np.where(inside, 0.0, 1.0))
    return outside


def _export_surface(export: PosedExport, kind: str, links: list[str], export_poses: np.ndarray,
                    rng: np.random.Generator, count: int = 20000) -> np.ndarray:
    """Samples (M, 3), base frame, of the export's outer surface (not inside another part)."""
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
    local_points = _to_frames(points, export_poses)
    for k, link in enumerate(links):
        local = local_points[k]
        if kind == "spheres" and link in export.spheres:
            cover = export.spheres[link]
            gaps = np.linalg.norm(local[:, None] - cover.centres[None], axis=2) - cover.radii[None]
            strictly_inside |= np.any(gaps < -1e-6, axis=1)
        elif kind == "pieces":
            for piece in export.pieces.get(link) or []:
                strictly_inside |= np.all(local @ piece.normals.T < piece.offsets - 1e-6, axis=1)
    return points[~strictly_inside]


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
