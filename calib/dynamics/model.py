"""An identified dynamic model of an arm: what its joint torque sensors read at a pose.

    dynamics = ArmDynamics().fit([session])                 # calib.dynamics.identification
    dynamics.predict(q)                                     # (N, dof) N m at rest
    dynamics.predict(q, v, a, payload_kg=2.5, payload_com=c)
    dynamics.save("dyn/"); IdentifiedDynamics.load("dyn/")

``theta`` is laid out as the regressor's body parameters (10 a body, :mod:`calib.dynamics.regressor`),
then one torque offset a joint, then (when the fit saw moving poses) a viscous and a Coulomb
friction coefficient a joint. Parameters the data do not determine keep the URDF's values (offsets
and friction: 0); ``covariance`` covers the identifiable part. Predictions are in Pinocchio's sign,
offsets included: what a sensor with the fit's sign convention reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from calib.dynamics.files import read_dynamics, write_dynamics
from calib.dynamics.measured import read_torques
from calib.dynamics.regressor import TorqueRegressor
from rigs.kinematics import ArmModel


def design(regressor: TorqueRegressor, q: np.ndarray, velocity: np.ndarray | None, acceleration: np.ndarray | None,
           friction: bool) -> tuple[np.ndarray, np.ndarray]:
    """(N, dof, P) the columns of theta at poses q (N, dof) and (N, dof, 10) the payload's."""
    q = np.atleast_2d(np.asarray(q, float))
    count, dof = len(q), regressor.dof
    bodies = regressor.bodies(q, velocity, acceleration)
    parts = [bodies, np.broadcast_to(np.eye(dof), (count, dof, dof))]
    if friction:
        v = np.zeros((count, dof)) if velocity is None else np.asarray(velocity, float)
        parts += [v[:, :, None] * np.eye(dof), np.sign(v)[:, :, None] * np.eye(dof)]
    return np.concatenate(parts, axis=2), regressor.payload(q, velocity, acceleration, columns=bodies)


@dataclass
class IdentifiedDynamics:
    """An arm's identified dynamics (see the module docstring).

    ``chain``: the description the regressor was built from; ``names`` (P,); ``theta`` (P,);
    ``covariance`` (P, P); ``free`` (P,) bool: the parameters the fit could move; ``friction``:
    whether theta holds friction terms; ``noise`` (dof,) N m: each joint's reading noise as the fit
    estimated it; ``sign``: +1 when the readings were used as recorded, -1 when flipped;
    ``summary``: identifiability, base parameters, per-joint figures, sessions (what dynamics.yaml holds).
    """

    chain: ArmModel
    names: list[str]
    theta: np.ndarray
    covariance: np.ndarray
    free: np.ndarray
    friction: bool
    noise: np.ndarray
    sign: int
    summary: dict = field(default_factory=dict)
    source_urdf: Path | None = None  # the description the regressor was built from (written beside the model)
    _regressor: TorqueRegressor | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def joint_names(self) -> list[str]:
        return list(self.chain.joint_names)

    @property
    def regressor(self) -> TorqueRegressor:
        if self._regressor is None:
            self._regressor = TorqueRegressor(self.chain)
        return self._regressor

    @property
    def dof(self) -> int:
        return self.chain.dof

    @property
    def offsets(self) -> np.ndarray:
        start = self.regressor.size
        return self.theta[start:start + self.dof].copy()

    @property
    def standard_deviations(self) -> np.ndarray:
        return np.sqrt(np.clip(np.diag(self.covariance), 0.0, None))

    def predict(self, q: np.ndarray, velocity: np.ndarray | None = None, acceleration: np.ndarray | None = None,
                payload_kg: np.ndarray | float | None = None, payload_com: np.ndarray | None = None,
                offsets: bool = True) -> np.ndarray:
        """(N, dof) N m the sensors read at readings q (N, dof), velocities and accelerations (N, dof)
        (None: at rest) with a point payload of ``payload_kg`` (N,) or scalar kg at ``payload_com``
        (3,) m in the tip frame. ``offsets=False`` leaves the sensor offsets out (the torque itself)."""
        q = np.atleast_2d(np.asarray(q, float))
        columns, payload_columns = design(self.regressor, q, velocity, acceleration, self.friction)
        theta = self.theta if offsets else self._without_offsets()
        tau = columns @ theta
        if payload_kg is not None:
            masses = np.broadcast_to(np.asarray(payload_kg, float), (len(q),))
            if masses.any():
                unit = TorqueRegressor.point_mass(1.0, np.zeros(3) if payload_com is None else payload_com)
                tau = tau + masses[:, None] * (payload_columns @ unit)
        return tau

    def held_torques(self, session) -> np.ndarray:
        """(N, dof) N m the joints of ``session`` held, from its measured torques: read with this
        model's sign, its sensor offsets taken off (InputError when the session has none)."""
        from_sensors = read_torques(session, self.sign).torques
        return from_sensors - self.offsets

    def _without_offsets(self) -> np.ndarray:
        theta = self.theta.copy()
        start = self.regressor.size
        theta[start:start + self.dof] = 0.0
        return theta

    def save(self, folder: Path, report: bool = True) -> None:
        """dynamics.yaml, dynamics.npz (names, theta, covariance), robot.urdf and report.html into an existing folder."""
        write_dynamics(self, Path(folder), report)

    @classmethod
    def load(cls, folder: Path) -> "IdentifiedDynamics":
        return cls(**read_dynamics(Path(folder)))
