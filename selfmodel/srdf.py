"""Which link pairs a planner may skip: MoveIt's ``<disable_collisions>`` from sampled motion.

Adjacent links (parent and child of a joint) always touch and are disabled as ``Adjacent``.
Every other pair is tested over many random configurations within the joint limits with the
exported sphere covers; a pair whose spheres never touch is disabled as ``Never``. Spheres
contain the exported body, so "never touch" is a safe verdict (a near miss counts as a touch).
Pairs whose spheres touch in every sample are counted but stay enabled: conservative spheres
touching says nothing about whether the bodies always do, unlike MoveIt's ``Always`` on meshes.
"""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pinocchio as pin

from rigs import urdf as urdf_io
from rigs.files import atomic_write_text
from selfmodel.spheres import SphereCover


@dataclass
class CollisionMatrix:
    """Per link pair (sorted names): ``Adjacent``, ``Never`` or None (may collide: keep checking)."""

    samples: int
    reasons: dict[tuple[str, str], str | None]
    contact_fraction: dict[tuple[str, str], float]  # fraction of sampled configurations in contact

    def disabled(self) -> list[tuple[str, str, str]]:
        return [(a, b, reason) for (a, b), reason in sorted(self.reasons.items()) if reason is not None]


def random_configurations(model: pin.Model, count: int, rng: np.random.Generator) -> np.ndarray:
    """(count, nq) configurations uniform within the joint limits (continuous joints: a full turn)."""
    qs = np.tile(pin.neutral(model), (count, 1))
    for joint in model.joints[1:]:
        if joint.nq == 1:
            lower, upper = model.lowerPositionLimit[joint.idx_q], model.upperPositionLimit[joint.idx_q]
            if not (np.isfinite(lower) and np.isfinite(upper)) or upper <= lower:
                lower, upper = -np.pi, np.pi
            qs[:, joint.idx_q] = rng.uniform(lower, upper, count)
        elif joint.nq == 2:  # continuous: (cos, sin)
            angle = rng.uniform(-np.pi, np.pi, count)
            qs[:, joint.idx_q], qs[:, joint.idx_q + 1] = np.cos(angle), np.sin(angle)
    return qs


def link_poses(model: pin.Model, links: list[str], qs: np.ndarray) -> np.ndarray:
    """(N, nq) configurations -> (N, L, 4, 4) poses of each link frame in the model's root frame."""
    data = model.createData()
    frames = [model.getFrameId(link, pin.BODY) for link in links]
    poses = np.empty((len(qs), len(links), 4, 4))
    for row, q in enumerate(qs):
        pin.framesForwardKinematics(model, data, q)
        for column, frame in enumerate(frames):
            poses[row, column] = data.oMf[frame].homogeneous
    return poses


def adjacent_pairs(urdf_path: Path) -> set[tuple[str, str]]:
    """Parent and child of every joint, as sorted name pairs."""
    tree = urdf_io.parse_urdf(urdf_path)
    return {tuple(sorted((joint.parent, joint.child))) for joint in urdf_io.joints(tree, urdf_path).values()}


def collision_matrix(urdf_path: Path, covers: dict[str, SphereCover], samples: int, rng: np.random.Generator,
                     progress=None) -> CollisionMatrix:
    """Sample ``samples`` configurations of the URDF's joints and test every pair of sphere covers."""
    model = pin.buildModelFromUrdf(str(urdf_path))
    links = sorted(covers)
    adjacent = adjacent_pairs(urdf_path)
    qs = random_configurations(model, samples, rng)
    poses = link_poses(model, links, qs)
    centres = {link: np.einsum("nij,kj->nki", poses[:, i, :3, :3], covers[link].centres) + poses[:, i, None, :3, 3]
               for i, link in enumerate(links)}
    reasons, fractions = {}, {}
    pairs = list(itertools.combinations(links, 2))
    for done, (a, b) in enumerate(pairs):
        key = tuple(sorted((a, b)))
        if key in adjacent:
            reasons[key], fractions[key] = "Adjacent", 1.0
            continue
        touching = np.zeros(samples, dtype=bool)
        for start in range(0, samples, 2000):
            gaps = np.linalg.norm(centres[a][start:start + 2000, :, None, :] - centres[b][start:start + 2000, None, :, :], axis=3)
            reach = covers[a].radii[:, None] + covers[b].radii[None, :]
            touching[start:start + 2000] = np.any(gaps <= reach, axis=(1, 2))
        fractions[key] = float(touching.mean())
        reasons[key] = "Never" if not touching.any() else None
        if progress is not None:
            progress(done + 1, len(pairs))
    return CollisionMatrix(samples, reasons, fractions)


def write_srdf(path: Path, robot_name: str, matrix: CollisionMatrix) -> None:
    """A MoveIt SRDF holding the ``<disable_collisions>`` entries (no groups: those are the user's)."""
    root = ET.Element("robot", {"name": robot_name})
    root.append(ET.Comment(f" disable_collisions from {matrix.samples} sampled configurations of the exported "
                           "sphere covers (selfcal selfmodel export) "))
    for a, b, reason in matrix.disabled():
        ET.SubElement(root, "disable_collisions", {"link1": a, "link2": b, "reason": reason})
    tree = ET.ElementTree(root)
    ET.indent(tree, space="  ")
    atomic_write_text(Path(path), '<?xml version="1.0"?>\n' + ET.tostring(root, encoding="unicode") + "\n")


def full_configurations(model: pin.Model, joint_names: list[str], q: np.ndarray) -> np.ndarray:
    """Chain joint values (N, dof) in ``joint_names`` order -> Pinocchio configurations (N, nq);
    joints not named stay at neutral."""
    q = np.atleast_2d(np.asarray(q, dtype=float))
    full = np.tile(pin.neutral(model), (len(q), 1))
    for column, name in enumerate(joint_names):
        if not model.existJointName(name):
            raise KeyError(name)
        joint = model.joints[model.getJointId(name)]
        if joint.nq == 1:
            full[:, joint.idx_q] = q[:, column]
        else:
            full[:, joint.idx_q], full[:, joint.idx_q + 1] = np.cos(q[:, column]), np.sin(q[:, column])
    return full
