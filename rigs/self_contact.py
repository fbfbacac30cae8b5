"""Whether an arm can really stand in a configuration: its links' true meshes must not pass through
each other.

Pairs of links are told apart by how many moving joints lie between them in the URDF's tree (held
joints, such as gripper fingers the recording does not move, and fixed ones do not move):

- none: the pair is one rigid body; whatever contact it has, it always has (closed fingers);
- one: the pair turns about that joint; the depth the two nest at every angle of the joint's range
  (a shaft in its housing: the least, over the range, of the deepest point) is their real contact,
  anything deeper (a link folded into its neighbour at a joint limit) is not;
- two or more: the meshes must keep ``clearance`` apart.

Meshes are the links' visual geometry (what cameras see), plus extra bodies a caller adds (a board
bolted to the tip). Each mesh becomes a solid (:mod:`rigs.solids`), since robot meshes are often open.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import trimesh

from rigs import urdf as urdf_io
from rigs.solids import Solid, solid_of

MOVING = ("revolute", "continuous", "prismatic")


@dataclass
class Contact:
    """Why a configuration is impossible: two links, how (``clearance`` or ``penetration``), how far (m)."""

    link_a: str
    link_b: str
    kind: str
    distance: float  # m: clearance left (may be negative) or penetration depth


def _motion(joint: urdf_io.JointInfo, value: float) -> np.ndarray:
    motion = np.eye(4)
    if joint.type == "prismatic":
        motion[:3, 3] = value * joint.axis
    elif joint.type in ("revolute", "continuous"):
        x, y, z = joint.axis
        k = np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
        motion[:3, :3] = np.eye(3) + np.sin(value) * k + (1 - np.cos(value)) * (k @ k)
    return motion


class SelfContact:
    """The self-contact rules of one arm (see the module docstring).

    ``moving``: the joints a configuration sets (the chain's); ``held``: other movable joints and the
    positions they stay at; ``extra``: link -> extra mesh in that link's frame. Poses given to
    :meth:`contacts` are ``link -> (4, 4)`` in any one common frame.
    """

    def __init__(self, urdf: Path, moving: list[str], held: dict[str, float] | None = None,
                 extra: dict[str, trimesh.Trimesh] | None = None, clearance: float = 0.005,
                 nest_tolerance: float = 0.002, pitch: float = 0.0015, samples: int = 3000, angles: int = 73,
                 seed: int = 0):
        from rigs.link_meshes import link_meshes

        urdf = Path(urdf)
        tree = urdf_io.parse_urdf(urdf)
        self.joints = urdf_io.joints(tree, urdf)
        self.moving = set(moving)
        self.held = dict(held or {})
        self.clearance, self.nest_tolerance = clearance, nest_tolerance
        meshes = link_meshes(urdf, fold_fixed=False)
        for link, mesh in (extra or {}).items():
            meshes[link] = trimesh.util.concatenate([meshes[link], mesh]) if link in meshes else mesh
        self.links = sorted(meshes)
        rng = np.random.default_rng(seed)
        self.solids: dict[str, Solid] = {link: solid_of(meshes[link], pitch, pad=clearance + 2 * pitch) for link in self.links}
        self.samples = {link: np.vstack([np.asarray(meshes[link].sample(samples, seed=int(rng.integers(2**31)))),
                                         np.asarray(meshes[link].vertices)[rng.choice(len(meshes[link].vertices),
                                                                                       min(samples, len(meshes[link].vertices)), replace=False)]])
                        for link in self.links}
        self.spheres = {link: (meshes[link].bounding_sphere.primitive.center, meshes[link].bounding_sphere.primitive.radius)
                        for link in self.links}
        self._by_child = {joint.child: joint for joint in self.joints.values()}
        self.pairs: dict[tuple[str, str], str] = {}  # (a, b) -> "rigid" | "one joint" | "apart"
        self.nested: dict[tuple[str, str], float] = {}  # (a, b) -> m that b always reaches inside a
        for a, b in itertools.combinations(self.links, 2):
            path = self._path(a, b)
            turning = [joint for joint in path if joint.type in MOVING and joint.name in self.moving]
            if not turning:
                self.pairs[(a, b)] = "rigid"
            elif len(turning) == 1:
                self.pairs[(a, b)] = "one joint"
                self.nested[(a, b)] = self._always_nested(a, b, turning[0], angles)
                self.nested[(b, a)] = self._always_nested(b, a, turning[0], angles)
            else:
                self.pairs[(a, b)] = "apart"

    # -- the tree -----------------------------------------------------------------------------
    def _ancestry(self, link: str) -> list[urdf_io.JointInfo]:
        path = []
        while link in self._by_child:
            joint = self._by_child[link]
            path.append(joint)
            link = joint.parent
        return path

    def _path(self, a: str, b: str) -> list[urdf_io.JointInfo]:
        up_a, up_b = self._ancestry(a), self._ancestry(b)
        common = {joint.name for joint in up_a} & {joint.name for joint in up_b}
        return [joint for joint in up_a + up_b if joint.name not in common]

    def _root_T(self, link: str, values: dict[str, float]) -> np.ndarray:
        pose = np.eye(4)
        for joint in self._ancestry(link)[::-1]:
            pose = pose @ joint.origin @ _motion(joint, values.get(joint.name, self.held.get(joint.name, 0.0)))
        return pose

    def _always_nested(self, a: str, b: str, joint: urdf_io.JointInfo, angles: int) -> float:
        """m: the least, over positions of ``joint`` across its range, of how deep b reaches into a."""
        lower, upper = (joint.lower, joint.upper) if joint.type != "continuous" else (-np.pi, np.pi)
        least = np.inf
        for value in np.linspace(lower, upper, angles):
            a_T_b = np.linalg.inv(self._root_T(a, {joint.name: value})) @ self._root_T(b, {joint.name: value})
            least = min(least, self._depth(a, self.samples[b] @ a_T_b[:3, :3].T + a_T_b[:3, 3]))
            if least == 0.0:
                break
        return least

    # -- the check ----------------------------------------------------------------------------
    def contacts(self, poses: dict[str, np.ndarray], first_only: bool = True) -> list[Contact]:
        """What makes the configuration with these link poses impossible (empty: possible)."""
        found = []
        for (a, b), kind in self.pairs.items():
            if kind == "rigid":
                continue
            (ca, ra), (cb, rb) = self.spheres[a], self.spheres[b]
            gap = np.linalg.norm(poses[a][:3, :3] @ ca + poses[a][:3, 3] - poses[b][:3, :3] @ cb - poses[b][:3, 3]) - ra - rb
            if gap > self.clearance:
                continue
            for one, other in ((a, b), (b, a)):
                contact = self._check(one, other, np.linalg.inv(poses[one]) @ poses[other], kind)
                if contact is not None:
                    found.append(contact)
                    if first_only:
                        return found
                    break
        return found

    def _depth(self, a: str, points: np.ndarray) -> float:
        """m: how deep the deepest of ``points`` (a's frame) lies inside a (0: none inside)."""
        return max(0.0, -float(self.solids[a].signed_distance(points).min())) if len(points) else 0.0

    def _check(self, a: str, b: str, a_T_b: np.ndarray, kind: str) -> Contact | None:
        points = self.samples[b] @ a_T_b[:3, :3].T + a_T_b[:3, 3]
        if kind == "one joint":
            depth = self._depth(a, points)
            if depth > self.nested[(a, b)] + self.nest_tolerance:
                return Contact(a, b, "penetration", depth)
            return None
        solid = self.solids[a]
        lo, hi = solid.origin, solid.origin + solid.pitch * (np.array(solid.inside_cells.shape) - 1)
        near = points[np.all((points >= lo) & (points <= hi), axis=1)]
        if not len(near):
            return None
        distance = solid.signed_distance(near)
        if distance.min() < 0:
            return Contact(a, b, "penetration", float(-distance.min()))
        if distance.min() < self.clearance:
            return Contact(a, b, "clearance", float(distance.min()))
        return None
