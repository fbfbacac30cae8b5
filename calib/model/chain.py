"""The base-to-tip chain, vectorised over poses: forward kinematics and calibration columns in numpy.

Pinocchio's algorithms take one configuration at a time; a calibration evaluates the same chain at
hundreds of poses dozens of times, so a Python loop over poses was most of the fit's time. The chain
of a :class:`rigs.kinematics.ArmModel` is, for movable joints i = 1..n with placements ``P_i``
(parent joint frame to joint frame, fixed joints merged in as Pinocchio does) and joint motions
``M_i(q_i)`` (a rotation about, or a shift along, the joint axis):

    base_T_tip(q) = base_T_root @ P_1 M_1(q_1) @ P_2 M_2(q_2) ... @ P_n M_n(q_n) @ F_tip

A right perturbation of placement i, ``P_i -> P_i exp6(d)``, moves the tip by the LOCAL twist
``Ad(B_i^-1) d`` with ``B_i = M_i(q_i) P_{i+1} ... F_tip`` (the rest of the chain after the
placement), and so does a change of joint i's reading along its motion subspace ``S_i`` (a joint's
motion commutes with motion along its own axis): both columns come from one backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pinocchio as pin

from rigs.errors import InputError
from rigs.kinematics import ArmModel, frame_poses
from rigs.transforms import invert, joint_motions, skew


def inverse_adjoint(transforms: np.ndarray) -> np.ndarray:
    """(..., 4, 4) transforms B -> (..., 6, 6) ``Ad(B^-1)`` on twists ordered (linear, angular)."""
    rotation_t = np.swapaxes(transforms[..., :3, :3], -1, -2)
    out = np.zeros(transforms.shape[:-2] + (6, 6))
    out[..., :3, :3] = rotation_t
    out[..., 3:, 3:] = rotation_t
    out[..., :3, 3:] = -rotation_t @ skew(transforms[..., :3, 3])
    return out


@dataclass
class KinematicsPass:
    """One evaluation at N poses: ``base_T_tip`` (N, 4, 4); with columns, ``placement_adjoints``
    (N, dof, 6, 6) = Ad(B_i^-1) (tip LOCAL twist per placement twist of joint i) and ``joint_columns``
    (N, 6, dof) (tip LOCAL twist per unit of joint i's reading); ``joint_origins`` (N, dof, 3) and
    ``joint_axes`` (N, dof, 3) in the base frame (for positional Jacobians)."""

    base_T_tip: np.ndarray
    placement_adjoints: np.ndarray | None = None
    joint_columns: np.ndarray | None = None


class BatchKinematics:
    """Numpy kinematics of an :class:`ArmModel`'s movable chain, for N poses at once (see the module docstring).

    ``placements`` (dof, 4, 4) may be replaced per call (a calibrated chain); joint readings ``q``
    are (N, dof) in chain order, radians (metres for prismatic joints).
    """

    def __init__(self, chain: ArmModel):
        model = chain.model
        ids = list(chain.joint_ids)
        for previous, joint in zip(ids, ids[1:]):
            if model.parents[joint] != previous:
                raise InputError(f"the chain from {model.frames[chain.base_frame].name!r} to "
                                 f"{model.frames[chain.tip_frame].name!r} is not a single path of joints "
                                 f"({model.names[joint]} does not hang from {model.names[previous]}).")
        tip = model.frames[chain.tip_frame]
        if tip.parentJoint != ids[-1]:
            raise InputError(f"tip link {tip.name!r} does not hang from the chain's last joint {model.names[ids[-1]]!r}.")
        data = model.createData()
        base = frame_poses(model, [chain.base_frame], pin.neutral(model), data)[0, 0]  # also places data.oMi
        self.base_T_root = invert(base) @ data.oMi[model.parents[ids[0]]].homogeneous
        self.tip_placement = tip.placement.homogeneous.copy()
        self.placements = np.array([model.jointPlacements[j].homogeneous for j in ids])
        self.prismatic = np.array([model.joints[j].shortname().startswith("JointModelP") for j in ids])
        self.axes = np.asarray(chain.axes, float)
        self.subspace = np.where(self.prismatic[:, None], np.concatenate([self.axes, np.zeros_like(self.axes)], 1),
                                 np.concatenate([np.zeros_like(self.axes), self.axes], 1))  # (dof, 6)
        self.dof = len(ids)

    def motions(self, q: np.ndarray) -> np.ndarray:
        """(N, dof) readings -> (N, dof, 4, 4) joint motions ``M_i(q_i)``."""
        return joint_motions(self.axes, self.prismatic, q)

    def evaluate(self, q: np.ndarray, placements: np.ndarray | None = None, columns: bool = False) -> KinematicsPass:
        """Tip poses at readings ``q`` (N, dof); with ``columns`` also the calibration columns."""
        placements = self.placements if placements is None else placements
        motions = self.motions(q)
        count = motions.shape[0]
        rest = np.broadcast_to(self.tip_placement, (count, 4, 4))
        adjoints = np.empty((count, self.dof, 6, 6)) if columns else None
        for i in range(self.dof - 1, -1, -1):
            after = motions[:, i] @ rest  # B_i
            if columns:
                adjoints[:, i] = inverse_adjoint(after)
            rest = placements[i] @ after
        base_T_tip = self.base_T_root @ rest
        if not columns:
            return KinematicsPass(base_T_tip)
        joint_columns = np.swapaxes((adjoints @ self.subspace[:, :, None])[..., 0], 1, 2)
        return KinematicsPass(base_T_tip, adjoints, joint_columns)

    def base_T_tip(self, q: np.ndarray, placements: np.ndarray | None = None) -> np.ndarray:
        """(N, dof) -> (N, 4, 4) tip poses in the base frame."""
        return self.evaluate(q, placements).base_T_tip

    def tip_velocity_columns(self, q: np.ndarray, placements: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Tip poses (N, 4, 4) and the base-frame velocity of the tip origin per unit joint reading
        (N, 3, dof): ``R_tip @ v_local`` of each joint column."""
        result = self.evaluate(q, placements, columns=True)
        return result.base_T_tip, result.base_T_tip[:, :3, :3] @ result.joint_columns[:, :3, :]
