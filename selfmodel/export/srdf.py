"""Which link pairs a planner may skip, computed the way MoveIt's setup assistant does, and the SRDF.

The exported URDF is loaded as a planner loads it (:class:`~selfmodel.export.world.CollisionWorld`:
Pinocchio and coal, the convex pieces) and every pair of links with collision geometry gets a reason:

- ``Adjacent``: joined by a joint, directly or through links with no geometry of their own;
- ``Default``: in collision at the default configuration (every joint at 0, or the middle of its
  limits when 0 is outside them);
- ``Always``: in collision in at least ``always_threshold`` of the sampled configurations (MoveIt
  uses 95 %; here 100 % by default, since 95 % hides real contacts);
- ``Never``: in collision in none of ``samples`` configurations drawn uniformly within the limits of
  the chain's joints (joints off the chain stay where they are held);
- none: may collide; keep checking.

A pair is disabled only if the real arm cannot bring it into contact. Where the description (the
model's URDF, its visual meshes) has both links, that is checked: a ``Never`` pair whose description
meshes touch in some sample stays enabled, and so does a ``Default`` or ``Always`` pair that is not
one rigid body (some joint moves between the two) unless the description meshes touch in every
sample too. Such pairs are listed in ``kept``.
"""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rigs import urdf as urdf_io
from rigs.files import atomic_write_text
from rigs.link_meshes import link_meshes
from selfmodel.export.world import CollisionWorld

MOVING = ("revolute", "continuous", "prismatic")


@dataclass
class CollisionMatrix:
    """Per link pair (sorted names): a reason to disable it, or None (keep checking)."""

    samples: int
    always_threshold: float
    reasons: dict[tuple[str, str], str | None]
    contact_fraction: dict[tuple[str, str], float]  # fraction of sampled configurations in contact
    kept: dict[tuple[str, str], str] = field(default_factory=dict)  # would be disabled; why it is not
    default_q: np.ndarray | None = None  # (dof,) the default configuration

    def disabled(self) -> list[tuple[str, str, str]]:
        return [(a, b, reason) for (a, b), reason in sorted(self.reasons.items()) if reason is not None]

    def counts(self) -> dict[str, int]:
        reasons = [reason for reason in self.reasons.values()]
        return {"adjacent": reasons.count("Adjacent"), "default": reasons.count("Default"),
                "always": reasons.count("Always"), "never": reasons.count("Never"),
                "enabled": reasons.count(None), "kept_enabled": len(self.kept)}


class LinkTree:
    """The URDF's links and joints, asked which pairs are adjacent and which move relative to each other."""

    def __init__(self, urdf_path: Path):
        tree = urdf_io.parse_urdf(urdf_path)
        self.joints = urdf_io.joints(tree, urdf_path)
        self.by_child = {joint.child: joint for joint in self.joints.values()}
        self.collision_links = {link.get("name") for link in tree.getroot().findall("link")
                                if any(c.find("geometry") is not None and len(c.find("geometry")) for c in link.findall("collision"))}
        self.root = next(name for name in urdf_io.link_names(tree) if name not in self.by_child)

    def ancestry(self, link: str) -> list:
        path = []
        while link in self.by_child:
            path.append(self.by_child[link])
            link = path[-1].parent
        return path

    def path(self, a: str, b: str) -> list:
        up_a, up_b = self.ancestry(a), self.ancestry(b)
        common = {j.name for j in up_a} & {j.name for j in up_b}
        return [j for j in up_a + up_b if j.name not in common]

    def adjacent(self, a: str, b: str) -> bool:
        """Joined by a joint, through links without collision geometry only (MoveIt's adjacency)."""
        between = {j.parent for j in self.path(a, b)} | {j.child for j in self.path(a, b)}
        return all(link not in self.collision_links for link in between - {a, b})

    def moving_joints_between(self, a: str, b: str, moving: set[str]) -> int:
        return sum(1 for joint in self.path(a, b) if joint.type in MOVING and joint.name in moving)


def joint_limits(urdf_path: Path, joint_names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) (dof,) from the URDF; continuous joints a full turn."""
    infos = urdf_io.joints(urdf_io.parse_urdf(urdf_path), urdf_path)
    lower = np.array([infos[name].lower if infos[name].type != "continuous" else -np.pi for name in joint_names])
    upper = np.array([infos[name].upper if infos[name].type != "continuous" else np.pi for name in joint_names])
    return lower, upper


def default_configuration(lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """MoveIt's default state: 0 where the limits allow it, else the middle of the limits."""
    return np.where((lower <= 0) & (upper >= 0), 0.0, (lower + upper) / 2)


def collision_matrix(urdf_path: Path, joint_names: list[str], base_link: str, samples: int, rng: np.random.Generator,
                     held: dict[str, float] | None = None, description: Path | None = None,
                     always_threshold: float = 1.0, progress=None) -> CollisionMatrix:
    """The reasons of the module docstring for every pair of links with collision geometry in
    ``urdf_path``, from ``samples`` configurations of ``joint_names``; ``description``: a URDF whose
    visual meshes stand for the real arm (same link and joint names)."""
    tree = LinkTree(urdf_path)
    world = CollisionWorld(urdf_path, joint_names, base_link, held=held, convex=True)
    links = sorted(tree.collision_links)
    pairs = [tuple(sorted(pair)) for pair in itertools.combinations(links, 2)]
    lower, upper = joint_limits(urdf_path, joint_names)
    default = default_configuration(lower, upper)
    qs = rng.uniform(lower, upper, (samples, len(joint_names)))
    counts = dict.fromkeys(pairs, 0)
    for done, q in enumerate(qs):
        for pair in world.colliding_pairs(q):
            if pair in counts:
                counts[pair] += 1
        if progress is not None and (done + 1) % 100 == 0:
            progress(done + 1, samples)
    at_default = world.colliding_pairs(default)
    reasons, fractions = {}, {}
    moving = set(joint_names)
    for pair in pairs:
        fractions[pair] = counts[pair] / samples
        if tree.adjacent(*pair):
            reasons[pair] = "Adjacent"
        elif pair in at_default:
            reasons[pair] = "Default"
        elif fractions[pair] >= always_threshold:
            reasons[pair] = "Always"
        elif counts[pair] == 0:
            reasons[pair] = "Never"
        else:
            reasons[pair] = None
    matrix = CollisionMatrix(samples, always_threshold, reasons, fractions, {}, default)
    if description is not None:
        _check_against_description(matrix, tree, description, joint_names, base_link, held, qs, moving)
    return matrix


def _check_against_description(matrix: CollisionMatrix, tree: LinkTree, description: Path, joint_names: list[str],
                               base_link: str, held: dict[str, float] | None, qs: np.ndarray, moving: set[str]) -> None:
    """Re-enable the pairs the description's meshes show the real arm can bring into contact."""
    described = set(link_meshes(Path(description), fold_fixed=False))
    candidates = {pair: reason for pair, reason in matrix.reasons.items()
                  if reason in ("Never", "Default", "Always") and set(pair) <= described}
    if not candidates:
        return
    world = CollisionWorld(description, joint_names, base_link, held=held, convex=False, geometry="visual",
                           pairs=set(candidates), read_meshes="trimesh")
    touching = dict.fromkeys(candidates, 0)
    for q in qs:
        for pair in world.colliding_pairs(q):
            if pair in touching:
                touching[pair] += 1
    for pair, reason in candidates.items():
        rigid = tree.moving_joints_between(*pair, moving) == 0
        if reason == "Never" and touching[pair]:
            matrix.kept[pair] = (f"Never for the export, but the description's meshes touch in {touching[pair]} of "
                                 f"{len(qs)} samples")
            matrix.reasons[pair] = None
        elif reason in ("Default", "Always") and not rigid and touching[pair] < len(qs):
            matrix.kept[pair] = (f"{reason} for the export, but a joint moves between the two and the description's "
                                 f"meshes are apart in {len(qs) - touching[pair]} of {len(qs)} samples")
            matrix.reasons[pair] = None


def write_srdf(path: Path, robot_name: str, matrix: CollisionMatrix, base_link: str, tip_link: str, root_link: str,
               joint_names: list[str], note: str = "") -> None:
    """A MoveIt SRDF: the chain as group ``arm``, a fixed virtual joint from the world to the URDF's
    root link, the default configuration as group state ``default``, and the disabled pairs."""
    root = ET.Element("robot", {"name": robot_name})
    root.append(ET.Comment(f" selfcal selfmodel export: disabled pairs from {matrix.samples} sampled configurations "
                           f"of the exported collision geometry (Always at {100 * matrix.always_threshold:g} % of them); "
                           f"{note} "))
    group = ET.SubElement(root, "group", {"name": "arm"})
    ET.SubElement(group, "chain", {"base_link": base_link, "tip_link": tip_link})
    if matrix.default_q is not None:
        state = ET.SubElement(root, "group_state", {"name": "default", "group": "arm"})
        for name, value in zip(joint_names, matrix.default_q):
            ET.SubElement(state, "joint", {"name": name, "value": repr(float(value))})
    ET.SubElement(root, "virtual_joint", {"name": "virtual_joint", "type": "fixed",
                                          "parent_frame": "world" if root_link != "world" else "world_frame",
                                          "child_link": root_link})
    for a, b, reason in matrix.disabled():
        ET.SubElement(root, "disable_collisions", {"link1": a, "link2": b, "reason": reason})
    tree = ET.ElementTree(root)
    ET.indent(tree, space="  ")
    atomic_write_text(Path(path), '<?xml version="1.0"?>\n' + ET.tostring(root, encoding="unicode") + "\n")
