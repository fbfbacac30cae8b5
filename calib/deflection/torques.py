"""The torques each joint holds at rest: gravity of the URDF inertias plus a point payload.

Gravity torques are linear in the payload's mass, so ``tau(q, m) = tau_arm(q) + m tau_1kg(q)``: two
Pinocchio models (the arm, the arm with 1 kg at the payload's centre of mass) serve every payload,
instead of a model copy per pose. The sign is Pinocchio's (the torque that holds the arm up).
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin

from rigs.kinematics import ArmModel, configurations

GRAVITY = 9.81


class GravityTorques:
    """``torques(q (N, dof), payload_kg (N,) or scalar) -> (N, dof)`` N m for a chain and a payload
    centre of mass ``payload_com`` (3,) m in the tip frame (tip origin when None)."""

    def __init__(self, chain: ArmModel, payload_com: np.ndarray | None):
        self.chain = chain
        self.payload_com = np.zeros(3) if payload_com is None else np.asarray(payload_com, float)
        arm = chain.model.copy()
        arm.gravity.linear = np.array([0.0, 0.0, -GRAVITY])
        loaded = arm.copy()
        frame = loaded.frames[chain.tip_frame]
        loaded.inertias[frame.parentJoint] = loaded.inertias[frame.parentJoint] + pin.Inertia(
            1.0, frame.placement.act(self.payload_com), np.eye(3) * 1e-6)
        self._models = (arm, loaded)
        self._data = (arm.createData(), loaded.createData())
        self._velocity_index = np.array([arm.joints[j].idx_v for j in chain.joint_ids])

    def __call__(self, q: np.ndarray, payload_kg: np.ndarray | float | None = None) -> np.ndarray:
        q = np.atleast_2d(np.asarray(q, float))
        payload = np.broadcast_to(np.asarray(0.0 if payload_kg is None else payload_kg, float), (len(q),))
        arm, loaded = self._models
        arm_data, loaded_data = self._data
        out = np.empty((len(q), self.chain.dof))
        for n, full in enumerate(configurations(arm, self.chain.joint_ids, q)):
            tau = pin.computeGeneralizedGravity(arm, arm_data, full)[self._velocity_index]
            if payload[n]:
                per_kg = pin.computeGeneralizedGravity(loaded, loaded_data, full)[self._velocity_index] - tau
                tau = tau + payload[n] * per_kg
            out[n] = tau
        return out


def gravity_torques(chain: ArmModel, q: np.ndarray, payload_kg: np.ndarray | float | None,
                    payload_com: np.ndarray | None) -> np.ndarray:
    """Gravity torques (N, dof) N m at joint readings q (N, dof) with payloads (N,) kg at ``payload_com`` (3,) m (tip frame)."""
    return GravityTorques(chain, payload_com)(q, payload_kg)
