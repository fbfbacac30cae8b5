"""The hidden true arm of a simulated rig.

The true arm differs from its URDF the way a real one does: every movable joint's placement is
off by a small rigid motion, every joint zero is off, reflectors sit a little away from their
nominal offsets, a bent link moves its child joint and its own geometry, a bolted-on body adds
geometry. Errors use the calibration's own parameterisation, so fitted and true values compare
directly:

    parent_T_joint_true = parent_T_joint_nominal @ exp6(delta) @ Rot(axis, zero_offset)

with ``delta`` = (dx, dy, dz, wx, wy, wz) in metres and radians. A bend of link L by angle a about
axis u (link frame) pivots at the middle of the link: the joints that L carries, and L's own
visual and collision geometry, turn about that pivot.

Only simulation and evaluation code read this; a fit never does.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from rigs import urdf as urdf_io
from rigs.errors import InputError, setting
from rigs.spec import Rig
from rigs.transforms import axis_angle, exp6, make_transform


@dataclass
class TrueArm:
    """Drawn truth of a rig: per-joint errors (chain order), true target offsets, bends."""

    joint_names: list[str]
    placement_deltas: np.ndarray  # (dof, 6)
    zero_offsets: np.ndarray  # (dof,)
    target_offsets: dict[str, np.ndarray]  # name -> (3,) true offset in the tip frame
    stiffness: np.ndarray | None  # (dof,) N m / rad
    bend_transforms: dict[str, np.ndarray]  # joint name -> 4x4 left factor from a bend
    damage: list[dict]
    # Link name -> true mass over the URDF's (inertia tensor scaled alike); empty: the URDF's are true.
    mass_factors: dict[str, float] = field(default_factory=dict)
    torque_offsets: np.ndarray | None = None  # (dof,) N m, the torque sensors' offsets (reported sign)

    def to_json(self) -> dict:
        return {
            "convention": "parent_T_joint_true = bend @ parent_T_joint_nominal @ exp6(delta) @ Rot(axis, zero_offset); "
                          "delta = [dx, dy, dz, wx, wy, wz] in m and rad",
            "joints": {
                name: {"placement_delta": self.placement_deltas[i].tolist(), "zero_offset": float(self.zero_offsets[i])}
                for i, name in enumerate(self.joint_names)
            },
            "targets": {name: xyz.tolist() for name, xyz in self.target_offsets.items()},
            "stiffness_nm_per_rad": None if self.stiffness is None else self.stiffness.tolist(),
            "bend_transforms": {name: t.tolist() for name, t in self.bend_transforms.items()},
            "damage": self.damage,
            "mass_factors": dict(self.mass_factors),
            "torque_offsets_nm": None if self.torque_offsets is None else self.torque_offsets.tolist(),
        }


def fleet_arm(rig: Rig, arm_seed: int) -> Rig:
    """The rig playing arm ``arm_seed`` of a fleet of its type: the truth seed replaced, the rest as is.

    Every hidden error is drawn from the truth seed alone, so one seed is one physical arm whatever
    the pose seed, and a crashed rig (the same truth plus a bend) given the same seed is that very
    arm after its crash.
    """
    if rig.truth is None:
        raise InputError(f"{rig.source}: rig {rig.name!r} has no [truth] section, so it has no arms to choose "
                         f"with {setting('arm_seed')}.")
    if arm_seed < 0:
        raise InputError(f"{setting('arm_seed')} must not be negative, got {arm_seed}.")
    return replace(rig, truth=replace(rig.truth, seed=arm_seed))


def draw_truth(rig: Rig) -> TrueArm:
    """The rig's hidden errors; fixed by the rig's truth seed, so one rig is one physical arm."""
    if rig.truth is None:
        raise InputError(f"{rig.source}: rig {rig.name!r} has no [truth] section, so it cannot be simulated.")
    truth = rig.truth
    tree = urdf_io.parse_urdf(rig.robot.urdf)
    chain = urdf_io.chain(tree, rig.robot.base_link, rig.robot.tip_link, rig.robot.urdf)
    moving = urdf_io.movable(chain)
    rng = np.random.default_rng(truth.seed)
    dof = len(moving)
    deltas = np.concatenate([rng.normal(0, truth.placement_translation, (dof, 3)),
                             rng.normal(0, truth.placement_rotation, (dof, 3))], axis=1)
    zeros = rng.normal(0, truth.zero_offset, dof)
    targets = {t.name: t.xyz + rng.normal(0, truth.target_offset, 3) for t in rig.targets}
    if truth.stiffness is not None and len(truth.stiffness) != dof:
        raise InputError(f"{rig.source}: truth.stiffness_nm_per_rad has {len(truth.stiffness)} values for {dof} joints.")

    all_joints = urdf_io.joints(tree, rig.robot.urdf)
    links = set(urdf_io.link_names(tree))
    bends, damage = {}, []
    for bend in truth.bends:
        if bend.link not in links:
            raise InputError(f"{rig.source}: truth.bend link {bend.link!r} is not a link of {rig.robot.urdf}.")
        children = [j for j in all_joints.values() if j.parent == bend.link]
        pivot = np.mean([j.origin[:3, 3] for j in children], axis=0) / 2 if children else np.zeros(3)
        link_T_bend = _pivot_rotation(pivot, bend.axis, bend.angle)
        for joint in children:
            bends[joint.name] = link_T_bend
        damage.append({"link": bend.link, "joint": children[0].name if children else None,
                       "angle_deg": float(np.degrees(bend.angle)), "axis": bend.axis.tolist(),
                       "pivot": pivot.tolist(), "kind": "bend"})
    for body in truth.added_bodies:
        if body.link not in links:
            raise InputError(f"{rig.source}: truth.added_body link {body.link!r} is not a link of {rig.robot.urdf}.")
        damage.append({"link": body.link, "joint": None, "kind": "added_body", "box": body.box.tolist()})
    factors, offsets = _dynamics_truth(rig, tree, dof)
    return TrueArm([j.name for j in moving], deltas, zeros, targets, truth.stiffness, bends, damage, factors, offsets)


def _dynamics_truth(rig: Rig, tree: ET.ElementTree, dof: int) -> tuple[dict[str, float], np.ndarray | None]:
    """Per link the true mass over the URDF's (each off by ``mass_error``, up or down at random) and
    the torque sensors' offsets; a stream of its own, so the kinematic truth stays as it was."""
    truth = rig.truth
    rng = np.random.default_rng([truth.seed, 0x7042])
    factors = {}
    if truth.mass_error:
        for link in tree.getroot().findall("link"):
            if link.find("inertial") is not None:
                factors[link.get("name")] = float(1.0 + truth.mass_error * rng.choice([-1.0, 1.0]))
    offsets = None
    if truth.torques is not None:
        offsets = rng.normal(0.0, truth.torques.offset_sigma, dof)
    return factors, offsets


def _pivot_rotation(pivot: np.ndarray, axis: np.ndarray, angle: float) -> np.ndarray:
    rotation = make_transform()
    rotation[:3, :3] = axis_angle(axis, angle)
    to_pivot, back = make_transform(pivot), make_transform(-pivot)
    return to_pivot @ rotation @ back


def true_urdf_tree(rig: Rig, arm: TrueArm) -> ET.ElementTree:
    """The rig's URDF with the true errors, bends and added bodies written in."""
    tree = urdf_io.parse_urdf(rig.robot.urdf)
    joints = urdf_io.joints(tree, rig.robot.urdf)
    for i, name in enumerate(arm.joint_names):
        joint = joints[name]
        origin = joint.origin @ exp6(arm.placement_deltas[i])
        origin[:3, :3] = origin[:3, :3] @ axis_angle(joint.axis, arm.zero_offsets[i])
        urdf_io.set_joint_origin(tree, name, origin)
    joints = urdf_io.joints(tree, rig.robot.urdf)
    for name, link_T_bend in arm.bend_transforms.items():
        urdf_io.set_joint_origin(tree, name, link_T_bend @ joints[name].origin)
    bent_links = {joints[name].parent: t for name, t in arm.bend_transforms.items()}
    for link in tree.getroot().findall("link"):
        if link.get("name") in bent_links:
            for element in link.findall("visual") + link.findall("collision"):
                urdf_io.set_element_origin(element, bent_links[link.get("name")] @ urdf_io.element_origin(element))
    for link in tree.getroot().findall("link"):
        if link.get("name") in arm.mass_factors:
            _scale_inertial(link.find("inertial"), arm.mass_factors[link.get("name")])
    for body in rig.truth.added_bodies:
        link = next(l for l in tree.getroot().findall("link") if l.get("name") == body.link)
        for kind in ("visual", "collision"):
            element = ET.SubElement(link, kind, {"name": f"added_body_{kind}"})
            urdf_io.set_element_origin(element, body.link_T_body)
            geometry = ET.SubElement(element, "geometry")
            ET.SubElement(geometry, "box", {"size": " ".join(repr(float(v)) for v in body.box)})
    return tree


def _scale_inertial(inertial: ET.Element, factor: float) -> None:
    """A link's mass and inertia tensor times ``factor`` (its centre of mass stays)."""
    mass = inertial.find("mass")
    if mass is not None:
        mass.set("value", repr(float(mass.get("value", "0")) * factor))
    inertia = inertial.find("inertia")
    if inertia is not None:
        for key in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz"):
            if inertia.get(key) is not None:
                inertia.set(key, repr(float(inertia.get(key)) * factor))


def nominal_arm(rig: Rig) -> TrueArm:
    """An arm exactly as described: no errors, rigid, nominal reflectors (for planning, not simulation)."""
    tree = urdf_io.parse_urdf(rig.robot.urdf)
    moving = urdf_io.movable(urdf_io.chain(tree, rig.robot.base_link, rig.robot.tip_link, rig.robot.urdf))
    dof = len(moving)
    return TrueArm([j.name for j in moving], np.zeros((dof, 6)), np.zeros(dof),
                   {t.name: t.xyz.copy() for t in rig.targets}, None, {}, [])


def session_setup(rig: Rig, arm: TrueArm, seed: int) -> tuple[Rig, TrueArm]:
    """The rig and arm as one recording finds them: the marker adapter mounted anew and the tracker
    set up anew (both drawn from the truth seed and the recording's seed, so every session of a
    rig has its own mount and tracker placement, and a resumed one the same).

    The adapter ``tip_T_adapter`` is a rigid offset of length within ``truth.adapter_offset`` in a
    direction away from the flange (tip z >= 0.3 of its length) at a random orientation; the
    reflectors and the probe ride on it. The tracker's placement moves by ``truth.tracker_nudge``.
    Without either, the rig and arm come back unchanged.
    """
    truth = rig.truth
    if truth is None or (truth.adapter_offset is None and not any(truth.tracker_nudge)):
        return rig, arm
    rng = np.random.default_rng([truth.seed, seed, 0xADA7])
    tracker = rig.tracker
    if truth.adapter_offset is not None:
        while True:
            direction = rng.normal(size=3)
            direction /= np.linalg.norm(direction)
            if direction[2] >= 0.3:
                break
        length = rng.uniform(*truth.adapter_offset)
        axis = rng.normal(size=3)
        tip_T_adapter = np.eye(4)
        tip_T_adapter[:3, :3] = axis_angle(axis, rng.uniform(0.0, np.pi))
        tip_T_adapter[:3, 3] = length * direction
        targets = {name: tip_T_adapter[:3, :3] @ xyz + tip_T_adapter[:3, 3] for name, xyz in arm.target_offsets.items()}
        arm = replace(arm, target_offsets=targets)
        if tracker is not None and tracker.tip_T_probe is not None:
            tracker = replace(tracker, tip_T_probe=tip_T_adapter @ tracker.tip_T_probe)
    if tracker is not None and any(truth.tracker_nudge):
        nudge = exp6(np.concatenate([rng.normal(0.0, truth.tracker_nudge[0], 3),
                                     rng.normal(0.0, truth.tracker_nudge[1], 3)]))
        tracker = replace(tracker, base_T_tracker=tracker.base_T_tracker @ nudge)
    return replace(rig, tracker=tracker), arm
