"""The arm's kinematic chain in the Pinocchio manner: an unchanging model, scratch data per call.

``ArmModel`` wraps a Pinocchio model built from a URDF and the chain from ``base_link`` to
``tip_link``; joint vectors ``q`` are in chain order (radians or metres), shape ``(dof,)`` or
``(N, dof)``. Joints of the URDF outside the chain (a gripper's fingers) stay at neutral.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pinocchio as pin

from rigs import urdf as urdf_io
from rigs.errors import InputError
from rigs.transforms import invert, skew


def configurations(model: pin.Model, joint_ids: list[int], q: np.ndarray, rest: np.ndarray | None = None) -> np.ndarray:
    """Values (N, k) or (k,) of the joints ``joint_ids`` (rad or m) -> Pinocchio configurations (N, nq).

    The one place a joint value becomes Pinocchio's configuration: a revolute or prismatic joint
    takes its value, a continuous joint (cos, sin). Every other joint sits where ``rest`` (nq,) has
    it (default: Pinocchio's neutral).
    """
    q = np.atleast_2d(np.asarray(q, dtype=float))
    base = pin.neutral(model) if rest is None else np.asarray(rest, dtype=float)
    full = np.repeat(base[None], len(q), axis=0)
    for column, joint_id in enumerate(joint_ids):
        joint = model.joints[joint_id]
        if joint.nq == 1:
            full[:, joint.idx_q] = q[:, column]
        else:  # continuous joint: (cos, sin)
            full[:, joint.idx_q], full[:, joint.idx_q + 1] = np.cos(q[:, column]), np.sin(q[:, column])
    return full


def frame_poses(model: pin.Model, frames: list[int], full: np.ndarray, data: pin.Data | None = None) -> np.ndarray:
    """Configurations (N, nq) -> (N, F, 4, 4) poses of the Pinocchio ``frames`` in the model's root
    frame: the one forward kinematics every room's Pinocchio model goes through."""
    data = data or model.createData()
    full = np.atleast_2d(full)
    poses = np.empty((len(full), len(frames), 4, 4))
    for row, configuration in enumerate(full):
        pin.framesForwardKinematics(model, data, configuration)
        for column, frame in enumerate(frames):
            poses[row, column] = data.oMf[frame].homogeneous
    return poses


@dataclass
class ArmModel:
    """The arm's Pinocchio model with its chain from ``base_link`` to ``tip_link`` named: forward
    kinematics, gravity and inverse dynamics with a payload, inverse kinematics."""

    model: pin.Model
    joint_names: list[str]  # movable chain joints, base to tip
    joint_ids: list[int]  # their Pinocchio joint ids
    base_frame: int
    tip_frame: int
    lower: np.ndarray  # (dof,) joint limits
    upper: np.ndarray
    axes: np.ndarray  # (dof, 3) joint axes in the joint frame

    @classmethod
    def from_urdf(cls, path: Path, base_link: str, tip_link: str) -> "ArmModel":
        path = Path(path)
        tree = urdf_io.parse_urdf(path)
        chain = urdf_io.movable(urdf_io.chain(tree, base_link, tip_link, path))
        if not chain:
            raise InputError(f"{path}: no movable joint between {base_link!r} and {tip_link!r}.")
        try:  # the text that was parsed safely, not the file again
            model = pin.buildModelFromXML(urdf_io.xml_text(tree))
        except (RuntimeError, ValueError) as error:
            raise InputError(f"{path}: Pinocchio cannot read this URDF ({error}).") from None
        return cls.from_model(model, [j.name for j in chain], base_link, tip_link,
                              np.array([j.lower for j in chain]), np.array([j.upper for j in chain]),
                              np.array([j.axis for j in chain]))

    @classmethod
    def from_model(cls, model, joint_names, base_link, tip_link, lower, upper, axes) -> "ArmModel":
        ids = [model.getJointId(name) for name in joint_names]
        base_frame = model.getFrameId(base_link)
        tip_frame = model.getFrameId(tip_link)
        return cls(model, list(joint_names), ids, base_frame, tip_frame, lower, upper, axes)

    @property
    def dof(self) -> int:
        return len(self.joint_ids)

    def copy(self) -> "ArmModel":
        return ArmModel(self.model.copy(), list(self.joint_names), list(self.joint_ids), self.base_frame,
                          self.tip_frame, self.lower.copy(), self.upper.copy(), self.axes.copy())

    def full_q(self, q: np.ndarray) -> np.ndarray:
        """Chain joint vector (dof,) -> Pinocchio configuration (nq,)."""
        return configurations(self.model, self.joint_ids, q)[0]

    def base_T_frame(self, q: np.ndarray, frame: int | None = None, data: pin.Data | None = None) -> np.ndarray:
        """Pose (4, 4) of ``frame`` (default: the tip) in the base frame at chain configuration q (dof,)."""
        frames = [self.base_frame, self.tip_frame if frame is None else frame]
        base, pose = frame_poses(self.model, frames, self.full_q(q), data)[0]
        return invert(base) @ pose

    def base_T_frames(self, q: np.ndarray, frames: list[int]) -> np.ndarray:
        """Poses (F, 4, 4) of the Pinocchio ``frames`` in the base frame at chain configuration q (dof,),
        from one forward kinematics."""
        poses = frame_poses(self.model, [self.base_frame, *frames], self.full_q(q))[0]
        return invert(poses[0]) @ poses[1:]

    def base_T_tip_batch(self, qs: np.ndarray) -> np.ndarray:
        """(N, dof) -> (N, 4, 4) tip poses in the base frame."""
        poses = frame_poses(self.model, [self.base_frame, self.tip_frame], configurations(self.model, self.joint_ids, qs))
        return np.stack([invert(base) @ tip for base, tip in poses])

    def base_T_joints(self, q: np.ndarray) -> np.ndarray:
        """Poses (dof, 4, 4) of the chain's joint frames in the base frame at chain configuration q (dof,)."""
        data = self.model.createData()
        base = frame_poses(self.model, [self.base_frame], self.full_q(q), data)[0, 0]  # also places data.oMi
        base_T_root = invert(base)
        return np.stack([base_T_root @ data.oMi[joint_id].homogeneous for joint_id in self.joint_ids])

    def gravity_torques(self, q: np.ndarray, payload_kg: float = 0.0, payload_com: np.ndarray | None = None,
                        gravity: float = 9.81) -> np.ndarray:
        """Joint torques (dof,) in N m that hold the arm and a point payload at rest.

        The payload of ``payload_kg`` sits at ``payload_com`` (3,) m in the tip frame; gravity is
        -z of the model's world frame.
        """
        model = self._loaded(payload_kg, payload_com, gravity)
        tau = pin.computeGeneralizedGravity(model, model.createData(), self.full_q(q))
        return np.array([tau[model.joints[j].idx_v] for j in self.joint_ids])

    def inverse_dynamics(self, q: np.ndarray, velocity: np.ndarray, acceleration: np.ndarray, payload_kg: float = 0.0,
                         payload_com: np.ndarray | None = None, gravity: float = 9.81) -> np.ndarray:
        """Joint torques (dof,) N m that move the arm and a point payload at chain velocity (dof,)
        rad/s and acceleration (dof,) rad/s^2 (Pinocchio's RNEA; at rest, :meth:`gravity_torques`).
        Joints off the chain stay at rest."""
        model = self._loaded(payload_kg, payload_com, gravity)
        index = [model.joints[j].idx_v for j in self.joint_ids]
        v, a = np.zeros(model.nv), np.zeros(model.nv)
        v[index], a[index] = velocity, acceleration
        tau = pin.rnea(model, model.createData(), self.full_q(q), v, a)
        return np.asarray(tau)[index]

    def _loaded(self, payload_kg: float, payload_com: np.ndarray | None, gravity: float) -> pin.Model:
        """A copy of the model with a point payload of ``payload_kg`` at ``payload_com`` (tip frame), gravity -z."""
        model = self.model.copy()
        if payload_kg:
            frame = model.frames[self.tip_frame]
            com = frame.placement.act(np.zeros(3) if payload_com is None else np.asarray(payload_com, dtype=float))
            model.inertias[frame.parentJoint] = model.inertias[frame.parentJoint] + pin.Inertia(
                float(payload_kg), com, np.eye(3) * 1e-6)
        model.gravity.linear = np.array([0.0, 0.0, -gravity])
        return model

    def inverse_kinematics(self, base_T_target: np.ndarray | None = None, q_seed: np.ndarray | None = None,
                           position: np.ndarray | None = None, tip_point: np.ndarray | None = None,
                           tolerance: float = 1e-8, iterations: int = 300, damping: float = 1e-3) -> tuple[np.ndarray, float]:
        """Damped least squares IK: joint angles (dof,) that put the tip where wanted.

        Give either ``base_T_target`` (4, 4), a full pose of the tip frame in the base frame, or
        ``position`` (3,) m for the point ``tip_point`` (3,) m of the tip frame (default its origin).
        Returns (q, residual) with residual the remaining position error in m (plus orientation
        error in rad for a full pose). Joint limits are respected.
        """
        if (base_T_target is None) == (position is None):
            raise ValueError("give exactly one of base_T_target and position")
        model, data = self.model, self.model.createData()
        q = np.clip(np.asarray(q_seed if q_seed is not None else (self.lower + self.upper) / 2, dtype=float),
                    self.lower, self.upper)
        point = np.zeros(3) if tip_point is None else np.asarray(tip_point, dtype=float)
        columns = [model.joints[j].idx_v for j in self.joint_ids]
        for _ in range(iterations):
            full = self.full_q(q)
            pin.framesForwardKinematics(model, data, full)
            base = data.oMf[self.base_frame]
            base_T_tip = base.actInv(data.oMf[self.tip_frame])
            J = pin.computeFrameJacobian(model, data, full, self.tip_frame, pin.LOCAL)[:, columns]
            # Tip-frame twist -> motion of the point and rotation, expressed in the base frame.
            R = base_T_tip.rotation
            J_linear = R @ (J[:3] - skew(point) @ J[3:])
            J_angular = R @ J[3:]
            current = base_T_tip.act(point)
            if position is not None:
                error = np.asarray(position, dtype=float) - current
                jacobian = J_linear
            else:
                target = pin.SE3(base_T_target[:3, :3].copy(), base_T_target[:3, 3].copy())
                error = np.concatenate([target.translation - current,
                                        pin.log3(target.rotation @ R.T)])
                jacobian = np.vstack([J_linear, J_angular])
            residual = float(np.linalg.norm(error))
            if residual < tolerance:
                break
            step = jacobian.T @ np.linalg.solve(jacobian @ jacobian.T + damping ** 2 * np.eye(len(error)), error)
            q = np.clip(q + step, self.lower, self.upper)
        return q, residual

