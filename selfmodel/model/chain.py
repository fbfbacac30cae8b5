"""The arm's chain as the self-model sees it: link frames from joint angles, differentiable in torch.

Every joint from ``base_link`` to ``tip_link`` (fixed ones included) is kept with its URDF origin
(4x4, parent link frame), axis and type. Each movable joint also carries a learnable placement
correction ``delta`` (6,) = (dx, dy, dz, wx, wy, wz) in metres and radians, applied the way the
calibration room applies it:

    parent_T_child = origin @ exp6(delta) @ motion(axis, q)

so a bent link shows up as a correction of the joint it carries, and a corrected description can
be written back as a URDF. With every delta at zero this is the URDF's own forward kinematics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from rigs import urdf as urdf_io
from rigs.errors import InputError, setting
from rigs.transforms import exp6, joint_motions


@dataclass(frozen=True)
class LinkJoint:
    name: str
    type: str  # revolute, continuous, prismatic or fixed
    parent_index: int  # index into ArmLinks.link_names
    origin: np.ndarray  # (4, 4) parent link frame
    axis: np.ndarray  # (3,)


@dataclass(frozen=True)
class ArmLinks:
    """Links (base first) and the joints that place them; ``joints[k]`` places ``link_names[k + 1]``.

    The chain from base to tip comes first; then every link hanging off it by other joints (gripper
    fingers, tools with joints), placed by a fixed transform: a joint outside the chain that moves
    is held where ``held`` (joint name -> rad or m) says, since the recorded joint angles do not
    move it. A link with no geometry of its own on a fixed joint (a flange frame such as the Panda's
    link8) is folded into the link that carries it, so it gets no body of its own.
    """

    link_names: list[str]
    joints: list[LinkJoint]
    joint_names: list[str]  # movable joints, base to tip: the order of q
    held: dict[str, float] = field(default_factory=dict)  # off-chain movable joints and their positions

    @classmethod
    def from_urdf(cls, path: Path, base_link: str, tip_link: str, held: dict[str, float] | None = None) -> "ArmLinks":
        tree = urdf_io.parse_urdf(path)
        chain = urdf_io.chain(tree, base_link, tip_link, path)
        held = dict(held or {})
        everything = urdf_io.joints(tree, path)
        with_geometry = urdf_io.links_with_geometry(tree)
        children: dict[str, list[urdf_io.JointInfo]] = {}
        for joint in everything.values():
            children.setdefault(joint.parent, []).append(joint)

        def foldable(joint: urdf_io.JointInfo) -> bool:
            return (joint.type == "fixed" and joint.child not in with_geometry and joint.child not in (base_link, tip_link)
                    and all(child.type == "fixed" for child in children.get(joint.child, [])))

        links, joints = [base_link], []
        carried = {base_link: (base_link, np.eye(4))}  # link -> (the kept link that carries it, carrier_T_link)

        def add(joint: urdf_io.JointInfo, kind: str, origin: np.ndarray) -> None:
            carrier, carrier_T_parent = carried[joint.parent]
            if foldable(joint):
                carried[joint.child] = (carrier, carrier_T_parent @ origin)
                return
            joints.append(LinkJoint(joint.name, kind, links.index(carrier), carrier_T_parent @ origin, joint.axis))
            links.append(joint.child)
            carried[joint.child] = (joint.child, np.eye(4))

        for joint in chain:
            kind = joint.type if joint.type in ("revolute", "continuous", "prismatic") else "fixed"
            add(joint, kind, joint.origin)
        movable = [j.name for j in joints if j.type != "fixed"]
        if not movable:
            raise InputError(f"{path}: no movable joint between {base_link!r} and {tip_link!r}.")
        on_chain = {joint.name for joint in chain}
        queue = [joint.child for joint in chain] + [base_link]
        while queue:
            parent = queue.pop(0)
            for joint in children.get(parent, []):
                if joint.name in on_chain:
                    continue
                origin = joint.origin
                if joint.type in ("revolute", "continuous", "prismatic"):
                    if joint.name not in held:
                        raise InputError(f"{path}: joint {joint.name!r} moves link {joint.child!r}, which hangs off the "
                                         f"chain from {base_link!r} to {tip_link!r}, and its position is not known: record "
                                         f"it in the session (robot.held_joints) or state it ({setting('hold')} {joint.name}=VALUE).")
                    origin = origin @ joint_motion(joint.type, joint.axis, held[joint.name])
                add(joint, "fixed", origin)
                queue.append(joint.child)
        unknown = sorted(set(held) - {name for name, joint in everything.items()
                                      if joint.name not in on_chain and joint.type != "fixed"})
        if unknown:
            raise InputError(f"{path}: held joint {unknown[0]!r} is not a movable joint off the chain from "
                             f"{base_link!r} to {tip_link!r}.")
        return cls(links, joints, movable, held)

    @property
    def dof(self) -> int:
        return len(self.joint_names)

    def rigid_groups(self) -> list[list[int]]:
        """Link indices (two or more a group, base first) joined by fixed joints, the description's
        and the held ones: they move as one body, so no recording can tell which of them holds a
        piece of matter (the Panda's link7, hand and closed fingers)."""
        root = list(range(len(self.link_names)))

        def find(index: int) -> int:
            while root[index] != index:
                index = root[index]
            return index

        for child, joint in enumerate(self.joints, start=1):
            if joint.type == "fixed":
                root[find(child)] = find(joint.parent_index)
        groups: dict[int, list[int]] = {}
        for index in range(len(self.link_names)):
            groups.setdefault(find(index), []).append(index)
        return [members for members in groups.values() if len(members) > 1]


def joint_motion(kind: str, axis: np.ndarray, value: float) -> np.ndarray:
    """(4, 4) motion of a revolute/continuous (rad) or prismatic (m) joint about/along ``axis``."""
    motion = np.eye(4)
    if kind == "prismatic":
        motion[:3, 3] = value * np.asarray(axis, dtype=float)
    else:
        x, y, z = np.asarray(axis, dtype=float)
        k = np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
        motion[:3, :3] = np.eye(3) + np.sin(value) * k + (1 - np.cos(value)) * (k @ k)
    return motion


def check_joint_names(spec: ArmLinks, expected: list[str], where: str) -> None:
    """The chain's movable joints must be the session's, in the same order."""
    if list(spec.joint_names) != list(expected):
        raise InputError(f"{where}: its joints from base to tip ({', '.join(spec.joint_names)}) do not match "
                         f"the session's ({', '.join(expected)}).")


def _hat(twist: torch.Tensor) -> torch.Tensor:
    """(J, 6) twists (v, w) -> (J, 4, 4) se(3) matrices."""
    v, w = twist[:, :3], twist[:, 3:]
    zero = torch.zeros_like(w[:, 0])
    rows = [
        torch.stack([zero, -w[:, 2], w[:, 1], v[:, 0]], dim=1),
        torch.stack([w[:, 2], zero, -w[:, 0], v[:, 1]], dim=1),
        torch.stack([-w[:, 1], w[:, 0], zero, v[:, 2]], dim=1),
        torch.stack([zero, zero, zero, zero], dim=1),
    ]
    return torch.stack(rows, dim=1)


def _rotation_about(axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """(3,) unit axis, (N,) angles -> (N, 4, 4) rotations (Rodrigues)."""
    x, y, z = axis.tolist()
    k = torch.tensor([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]], dtype=angle.dtype, device=angle.device)
    s, c = torch.sin(angle)[:, None, None], torch.cos(angle)[:, None, None]
    rotation = torch.eye(3, dtype=angle.dtype, device=angle.device) + s * k + (1 - c) * (k @ k)
    out = torch.eye(4, dtype=angle.dtype, device=angle.device).repeat(angle.shape[0], 1, 1)
    out[:, :3, :3] = rotation
    return out


class TorchArmLinks(torch.nn.Module):
    """Forward kinematics of :class:`ArmLinks` with learnable joint placement corrections."""

    def __init__(self, spec: ArmLinks):
        super().__init__()
        self.spec = spec
        self.register_buffer("origins", torch.tensor(np.stack([j.origin for j in spec.joints]), dtype=torch.float32))
        movable = [k for k, j in enumerate(spec.joints) if j.type != "fixed"]
        self.movable = movable
        self.deltas = torch.nn.Parameter(torch.zeros(len(movable), 6))

    def base_T_links(self, q: torch.Tensor) -> torch.Tensor:
        """q (N, dof) -> (N, L, 4, 4) poses of every link in the base frame (float32)."""
        device = self.origins.device
        q = torch.as_tensor(q, dtype=torch.float32).to(device)
        count = q.shape[0]
        corrections = torch.linalg.matrix_exp(_hat(self.deltas))
        poses = [torch.eye(4, device=device).expand(count, 4, 4)]
        movable_index = 0
        for k, joint in enumerate(self.spec.joints):
            placement = self.origins[k]
            if joint.type == "fixed":
                pose = poses[joint.parent_index] @ placement
            else:
                placement = placement @ corrections[movable_index]
                value = q[:, movable_index]
                if joint.type == "prismatic":
                    motion = torch.eye(4, device=device).repeat(count, 1, 1)
                    motion[:, :3, 3] = value[:, None] * torch.tensor(joint.axis, dtype=torch.float32, device=device)
                else:
                    motion = _rotation_about(torch.tensor(joint.axis, dtype=torch.float32), value)
                pose = poses[joint.parent_index] @ placement @ motion
                movable_index += 1
            poses.append(pose)
        return torch.stack(poses, dim=1)

    def corrected_origins(self) -> dict[str, np.ndarray]:
        """Joint name -> corrected origin (4, 4) in the parent link frame, for every movable joint."""
        with torch.no_grad():
            corrections = torch.linalg.matrix_exp(_hat(self.deltas)).double().cpu().numpy()
        return {self.spec.joints[k].name: self.spec.joints[k].origin @ corrections[i] for i, k in enumerate(self.movable)}


def link_poses_numpy(spec: ArmLinks, q: np.ndarray, deltas: np.ndarray | None = None) -> np.ndarray:
    """Forward kinematics: q (N, dof) -> (N, L, 4, 4) float64; the URDF's own without ``deltas``
    (dof, 6), else with those placement corrections (the convention of the module docstring)."""
    q = np.atleast_2d(np.asarray(q, dtype=float))
    movable = [joint for joint in spec.joints if joint.type != "fixed"]
    motions = joint_motions(np.array([joint.axis for joint in movable]).reshape(-1, 3),
                            np.array([joint.type == "prismatic" for joint in movable], bool), q)
    poses = [np.broadcast_to(np.eye(4), (len(q), 4, 4))]
    movable_index = 0
    for joint in spec.joints:
        origin = joint.origin
        if joint.type != "fixed" and deltas is not None:
            origin = origin @ exp6(deltas[movable_index])
        pose = poses[joint.parent_index] @ origin
        if joint.type != "fixed":
            pose = pose @ motions[:, movable_index]
            movable_index += 1
        poses.append(pose)
    return np.stack(poses, axis=1)
