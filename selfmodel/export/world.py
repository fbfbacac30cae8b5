"""A robot and box obstacles as a planner sees them: the URDF's collision geometry, less the pairs
an SRDF disables, checked with coal (FCL's successor) through Pinocchio.

This is how the export is judged, in the terms of the tools that load it: Pinocchio reads the URDF
(``buildGeomFromUrdf``) and the SRDF (``removeCollisionPairs``) as they are written. Meshes may be
read as their convex hulls (``convex=True``: exact for the export's convex pieces, and what pybullet
and mplib's ``use_convex`` do) or as triangle soups (``convex=False``, FCL's default for a mesh:
surfaces that cross collide, a body wholly inside another does not).

A world that stands for the true shapes (the simulated truth, a description's meshes checked for
real contact) reads its mesh files with trimesh instead (``read_meshes="trimesh"``), as the rest
of selfcal does: Pinocchio's mesh loader (assimp) reads pybullet_data's Panda link4 and link5 OBJ
files with triangles whose corners belong to different parts (on link5 3,135 edges over 50 mm,
the longest 335 mm, where trimesh reads 373 and 100 mm), and those slivers touched boxes that
the arm's surface stays 8 mm clear of.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pinocchio as pin
import trimesh

from rigs.errors import InputError
from rigs.kinematics import configurations, frame_poses
from rigs.transforms import invert


@dataclass(frozen=True)
class Box:
    """A box obstacle: full side lengths (3,) m, pose (4, 4) in the robot's base link frame."""

    name: str
    size: np.ndarray
    base_T_box: np.ndarray

    def contains(self, points_base: np.ndarray) -> np.ndarray:
        """(N, 3) base frame -> (N,) bool inside the box."""
        local = (np.asarray(points_base) - self.base_T_box[:3, 3]) @ self.base_T_box[:3, :3]
        return np.all(np.abs(local) <= self.size / 2, axis=1)


def mesh_geometry(mesh: trimesh.Trimesh):
    """A coal triangle-soup geometry of a trimesh."""
    import coal  # coal loads only where a planner's view of the URDF is built

    bvh = coal.BVHModelOBBRSS()
    bvh.beginModel(len(mesh.faces), len(mesh.vertices))
    bvh.addVertices(np.asarray(mesh.vertices, dtype=float))
    bvh.addTriangles(np.asarray(mesh.faces, dtype=np.int64))
    bvh.endModel()
    return bvh


def fresh_starts(geometry_data) -> None:
    """Every pair's GJK starts afresh at each query. Pinocchio asks coal to start a pair from where
    its last query ended: seeded that way, on the crashed xArm6's export a link 8.6 mm deep in a box
    was reported free after 405 other configurations of the same scene and found at once in a new
    world, so a configuration's answer depended on the ones checked before it."""
    with warnings.catch_warnings():
        # coal 3 calls the flag deprecated; pinocchio 4 still sets it, and it still decides
        warnings.simplefilter("ignore", DeprecationWarning)
        for request in [*geometry_data.collisionRequests, *geometry_data.distanceRequests]:
            request.enable_cached_gjk_guess = False


class CollisionWorld:
    """Configure with the URDF (and SRDF), then ask ``collides(q)`` / ``colliding_pairs(q)``.

    ``joint_names``: the joints a configuration ``q`` (dof,) sets, in order; ``held``: other joints
    and their positions (rad or m); every other joint sits at Pinocchio's neutral. ``obstacles``:
    boxes in the base link frame. ``extra``: link -> trimesh (link frame) added to that link (a board
    bolted to the tip). ``geometry``: ``"collision"`` or ``"visual"`` elements of the URDF.
    ``pairs``: keep only these link pairs (sorted names) of the robot's own; obstacles are checked
    against every robot geometry. ``read_meshes``: ``"pinocchio"`` (the files as Pinocchio reads
    them: how a consumer sees an export) or ``"trimesh"`` (the shapes themselves, for truth).
    """

    def __init__(self, urdf: Path, joint_names: list[str], base_link: str, srdf: Path | None = None,
                 held: dict[str, float] | None = None, obstacles: list[Box] = (), convex: bool = True,
                 geometry: str = "collision", extra: dict[str, trimesh.Trimesh] | None = None,
                 pairs: set[tuple[str, str]] | None = None, read_meshes: str = "pinocchio"):
        import coal  # coal loads only where a planner's view of the URDF is built

        if read_meshes not in ("pinocchio", "trimesh"):
            raise ValueError(f"read_meshes {read_meshes!r}: 'pinocchio' or 'trimesh'.")
        urdf = Path(urdf)
        self.urdf, self.srdf = urdf, srdf
        self.model = pin.buildModelFromUrdf(str(urdf))
        kind = pin.GeometryType.COLLISION if geometry == "collision" else pin.GeometryType.VISUAL
        self.geometry = pin.buildGeomFromUrdf(self.model, str(urdf), kind, package_dirs=[str(urdf.parent)])
        if read_meshes == "trimesh":
            for item in self.geometry.geometryObjects:
                if isinstance(item.geometry, coal.BVHModelBase) and item.meshPath:
                    mesh = trimesh.load(item.meshPath, force="mesh")
                    mesh.apply_scale(np.asarray(item.meshScale, dtype=float))
                    item.geometry = mesh_geometry(mesh)
        for link, mesh in (extra or {}).items():
            frame = self.model.getFrameId(link)
            placement = self.model.frames[frame].placement
            self.geometry.addGeometryObject(pin.GeometryObject(f"{link}_extra", self.model.frames[frame].parentJoint,
                                                               frame, placement, mesh_geometry(mesh)))
        if convex:
            for item in self.geometry.geometryObjects:
                if isinstance(item.geometry, coal.BVHModelBase):
                    item.geometry.buildConvexRepresentation(False)
                    item.geometry = item.geometry.convex
        self.robot_geometries = self.geometry.ngeoms
        self.geometry.addAllCollisionPairs()
        if srdf is not None:
            pin.removeCollisionPairs(self.model, self.geometry, str(srdf))
        self.link_of = [self.model.frames[item.parentFrame].name for item in self.geometry.geometryObjects]
        if pairs is not None:
            for k in range(len(self.geometry.collisionPairs) - 1, -1, -1):
                pair = self.geometry.collisionPairs[k]
                if tuple(sorted((self.link_of[pair.first], self.link_of[pair.second]))) not in pairs:
                    self.geometry.removeCollisionPair(pair)
        if not self.model.existFrame(base_link):
            raise InputError(f"{urdf}: base link {base_link!r} is not a link of this URDF.")
        self.root_T_base = frame_poses(self.model, [self.model.getFrameId(base_link)], pin.neutral(self.model))[0, 0]
        self.obstacles = list(obstacles)
        for box in self.obstacles:
            placement = pin.SE3(self.root_T_base @ box.base_T_box)
            index = self.geometry.addGeometryObject(pin.GeometryObject(f"obstacle:{box.name}", 0, 0, placement,
                                                                       coal.Box(*np.asarray(box.size, dtype=float))))
            self.link_of.append(f"obstacle:{box.name}")
            for other in range(self.robot_geometries):
                self.geometry.addCollisionPair(pin.CollisionPair(other, index))
        self.data = self.model.createData()
        self.geometry_data = pin.GeometryData(self.geometry)
        fresh_starts(self.geometry_data)
        self.joint_names = list(joint_names)
        for name in self.joint_names:
            if not self.model.existJointName(name):
                raise InputError(f"{urdf}: joint {name!r} is not in this URDF.")
        self._joint_ids = [self.model.getJointId(name) for name in self.joint_names]
        held = {name: value for name, value in (held or {}).items() if self.model.existJointName(name)}
        self._rest = configurations(self.model, [self.model.getJointId(name) for name in held], list(held.values()))[0]

    def full(self, q: np.ndarray) -> np.ndarray:
        """(dof,) joint values in ``joint_names`` order -> Pinocchio configuration (nq,)."""
        return configurations(self.model, self._joint_ids, q, self._rest)[0]

    def collides(self, q: np.ndarray) -> bool:
        return bool(pin.computeCollisions(self.model, self.data, self.geometry, self.geometry_data, self.full(q), True))

    def colliding_pairs(self, q: np.ndarray) -> set[tuple[str, str]]:
        """Link pairs (sorted; an obstacle is ``obstacle:<name>``) whose geometry overlaps at ``q``."""
        pin.computeCollisions(self.model, self.data, self.geometry, self.geometry_data, self.full(q), False)
        found = set()
        for pair, result in zip(self.geometry.collisionPairs, self.geometry_data.collisionResults):
            if result.isCollision():
                found.add(tuple(sorted((self.link_of[pair.first], self.link_of[pair.second]))))
        return found

    def overlap_depths(self, q: np.ndarray) -> dict[tuple[str, str], float]:
        """Link pairs (sorted) whose geometry overlaps at ``q`` -> how deep, m (coal's penetration of
        the deepest pair of their shapes)."""
        pin.computeDistances(self.model, self.data, self.geometry, self.geometry_data, self.full(q))
        found: dict[tuple[str, str], float] = {}
        for pair, result in zip(self.geometry.collisionPairs, self.geometry_data.distanceResults):
            if result.min_distance < 0:
                key = tuple(sorted((self.link_of[pair.first], self.link_of[pair.second])))
                found[key] = max(found.get(key, 0.0), -float(result.min_distance))
        return found

    def link_pose(self, link: str, q: np.ndarray) -> np.ndarray:
        """(4, 4) pose of ``link`` in the base link frame at ``q``."""
        return self.link_poses([link], q)[0]

    def link_poses(self, links: list[str], q: np.ndarray) -> np.ndarray:
        """(L, 4, 4) poses of ``links`` in the base link frame at ``q``, from one forward kinematics."""
        poses = frame_poses(self.model, [self.model.getFrameId(link) for link in links], self.full(q), self.data)[0]
        return invert(self.root_T_base) @ poses

    @property
    def checked_pairs(self) -> set[tuple[str, str]]:
        return {tuple(sorted((self.link_of[p.first], self.link_of[p.second]))) for p in self.geometry.collisionPairs}
