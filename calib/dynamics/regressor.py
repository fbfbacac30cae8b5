"""Joint torques are linear in the arm's inertial parameters: the regressor that says how.

    regressor = TorqueRegressor(chain)
    Y = regressor.bodies(q, v, a)          # (N, dof, 10 B): tau = Y @ theta (B bodies, Pinocchio order)
    P = regressor.payload(q, v, a)         # (N, dof, 4 or 10): a payload's parameters in the tip frame

``theta`` holds per body (each Pinocchio joint's body, fixed links merged in) the ten dynamic
parameters in Pinocchio's order ``m, m c_x, m c_y, m c_z, I_xx, I_xy, I_yy, I_xz, I_yz, I_zz``
(first moments and inertia about the joint frame's origin, in that frame). Rows are the chain's
joints; joints off the chain (fingers) stay at rest at neutral, their bodies carried like any
other. At rest only gravity acts: only masses and first moments have columns that are not zero.
A payload is a body fixed to the tip frame: its columns are the tip body's, moved into the tip
frame, so its mass and centre of mass come out in the frame a data sheet gives them in.
Gravity is -9.81 m/s^2 along the base's z, the sign Pinocchio's (the torque the drive applies).
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin

from rigs.kinematics import ArmModel

GRAVITY = 9.81
PARAMETERS = ("m", "mx", "my", "mz", "Ixx", "Ixy", "Iyy", "Ixz", "Iyz", "Izz")
WORDS = {"m": "the mass", "mx": "the first moment along x", "my": "the first moment along y",
         "mz": "the first moment along z", "Ixx": "the inertia Ixx", "Ixy": "the inertia Ixy",
         "Iyy": "the inertia Iyy", "Ixz": "the inertia Ixz", "Iyz": "the inertia Iyz", "Izz": "the inertia Izz"}
STATIC = 4  # at rest a body's torques depend on m and m c only


class TorqueRegressor:
    """Regressor of a chain's joint torques (see the module docstring)."""

    def __init__(self, chain: ArmModel):
        self.chain = chain
        model = chain.model.copy()
        model.gravity.linear = np.array([0.0, 0.0, -GRAVITY])
        self.model, self.data = model, model.createData()
        self.velocity_index = np.array([model.joints[j].idx_v for j in chain.joint_ids])
        self.body_names = [model.names[i] for i in range(1, model.njoints)]
        self.dof = chain.dof
        frame = model.frames[chain.tip_frame]
        self._tip_joint = frame.parentJoint
        # tip frame -> tip joint frame, as a linear map of the ten parameters (exact: the map is linear)
        placement = frame.placement

        def moved(phi):
            return placement.act(pin.Inertia.FromDynamicParameters(phi)).toDynamicParameters()

        reference = pin.Inertia(1.0, np.zeros(3), np.eye(3)).toDynamicParameters()
        self._tip_map = np.column_stack([moved(reference + e) - moved(reference) for e in np.eye(10)])

    @property
    def size(self) -> int:
        return 10 * len(self.body_names)

    def names(self) -> list[str]:
        """Parameter names ``<joint>.<parameter>`` in theta's order."""
        return [f"{body}.{p}" for body in self.body_names for p in PARAMETERS]

    def prior(self) -> np.ndarray:
        """(10 B,) the URDF's inertial parameters (zeros for a link without an inertial)."""
        return np.concatenate([self.model.inertias[i].toDynamicParameters() for i in range(1, self.model.njoints)])

    def _full(self, values: np.ndarray | None) -> np.ndarray:
        out = np.zeros(self.model.nv)
        if values is not None:
            out[self.velocity_index] = values
        return out

    def bodies(self, q: np.ndarray, velocity: np.ndarray | None = None, acceleration: np.ndarray | None = None
               ) -> np.ndarray:
        """(N, dof, 10 B) regressor at chain readings q (N, dof), velocities and accelerations (N, dof) or None (rest)."""
        q = np.atleast_2d(np.asarray(q, float))
        out = np.empty((len(q), self.dof, self.size))
        for n, row in enumerate(q):
            v = self._full(None if velocity is None else velocity[n])
            a = self._full(None if acceleration is None else acceleration[n])
            full = self.chain.full_q(row)
            out[n] = pin.computeJointTorqueRegressor(self.model, self.data, full, v, a)[self.velocity_index]
        return out

    def payload(self, q: np.ndarray, velocity: np.ndarray | None = None, acceleration: np.ndarray | None = None,
                columns: np.ndarray | None = None) -> np.ndarray:
        """(N, dof, 10) a payload's regressor in the tip frame (``[:, :, :4]`` at rest: m, m c in the
        tip frame). ``columns``: the body regressor at the same poses, when at hand."""
        if columns is None:
            columns = self.bodies(q, velocity, acceleration)
        start = 10 * (self._tip_joint - 1)
        return columns[:, :, start:start + 10] @ self._tip_map

    @staticmethod
    def point_mass(mass: float, centre: np.ndarray) -> np.ndarray:
        """(10,) the parameters of a point mass ``mass`` kg at ``centre`` (3,) m."""
        return pin.Inertia(float(mass), np.asarray(centre, float), np.zeros((3, 3))).toDynamicParameters()
