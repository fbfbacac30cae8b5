"""Joint compliance: each joint sags by its compliance times the gravity torque it holds.

Model: the joint angle the arm really reaches is ``q_eff = q - c * tau(q, payload)`` with ``tau``
(N, dof) N m the gravity torques of the URDF inertias plus a point payload at the tool
(:meth:`rigs.kinematics.ChainModel.gravity_torques`), ``c`` (dof,) rad / (N m) the compliances
(``c = 1 / k`` for a joint of stiffness ``k``). The ``c_j`` are ordinary parameters of the error
model (group ``"compliance"``), fitted with the geometry by the same solver, with covariance and
identifiability analysis (a joint whose axis is vertical holds no gravity torque: its compliance
has no effect on any measurement and is reported as such).

The derivative of a point with respect to ``c_j`` is its derivative with respect to joint j's zero
offset times ``-tau_j`` (error_model.py's hook), so no new kinematics are needed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from calib.calibrator import KinematicCalibrator, tracker_blocks
from calib.error_model import ErrorModel, ParameterInfo
from calib.observations import TrackerObservations
from capture.session import Session
from rigs.kinematics import ChainModel

COMPLIANCE_UNIT = "rad/(N m)"


def gravity_torques(chain: ChainModel, q: np.ndarray, payload_kg: np.ndarray | float | None,
                    payload_com: np.ndarray | None) -> np.ndarray:
    """Gravity torques (N, dof) N m at joint readings q (N, dof) with payloads (N,) kg at ``payload_com`` (3,) m (tip frame)."""
    q = np.atleast_2d(np.asarray(q, dtype=float))
    payload = np.broadcast_to(np.asarray(0.0 if payload_kg is None else payload_kg, dtype=float), (len(q),))
    return np.array([chain.gravity_torques(qn, float(kg), payload_com) for qn, kg in zip(q, payload)]).reshape(len(q), -1)


@dataclass
class CompliantErrorModel(ErrorModel):
    """:class:`ErrorModel` plus one compliance ``c_j`` rad/(N m) per chain joint, appended to the layout."""

    def __post_init__(self) -> None:
        super().__post_init__()
        start = len(self.names)
        for joint in self.chain.joint_names:
            self.names.append(ParameterInfo(f"{joint}.compliance", "compliance", joint, 0, COMPLIANCE_UNIT))
        self.compliance_slice = slice(start, start + self.chain.dof)


@dataclass
class CompliantTrackerObservations(TrackerObservations):
    """Tracker points whose poses carry gravity torques ``torques`` (N, dof) N m, aligned with ``q``."""

    torques: np.ndarray | None = None

    def subset(self, keep: np.ndarray) -> "CompliantTrackerObservations":
        plain = super().subset(keep)
        return CompliantTrackerObservations(plain.sensor, plain.q, plain.pose_row, plain.targets, plain.xyz,
                                            plain.sqrt_information, plain.labels, plain.name, self.torques)

    def _predict(self, model: ErrorModel, theta: np.ndarray, jacobian: bool):
        if not isinstance(model, CompliantErrorModel):
            return super()._predict(model, theta, jacobian)
        compliance = theta[model.compliance_slice]
        # The joints really sit at q - c tau: evaluate the rigid model there.
        sagged = replace(self, q=self.q - compliance * self.torques)
        predicted, jac = TrackerObservations._predict(sagged, model, theta, jacobian)
        if jac is not None:
            tau = self.torques[self.pose_row]  # (M, dof)
            jac[:, :, model.compliance_slice] = -jac[:, :, model.zero_slice] * tau[:, None, :]
        return predicted, jac


def compliant_blocks(session: Session, sensor: str, poses: np.ndarray | None, chain: ChainModel) -> CompliantTrackerObservations:
    """:func:`calib.calibrator.tracker_blocks` with the poses' gravity torques (session payloads) attached."""
    plain = tracker_blocks(session, sensor, poses)
    torques = gravity_torques(chain, session.q, session.payload_kg, session.payload_com)
    return CompliantTrackerObservations(plain.sensor, plain.q, plain.pose_row, plain.targets, plain.xyz,
                                        plain.sqrt_information, plain.labels, plain.name, torques)


class CompliantCalibrator(KinematicCalibrator):
    """:class:`KinematicCalibrator` whose error model also fits one compliance per joint.

    The fitted compliances (dof,) rad/(N m) and their standard deviations land in
    ``calibration.compliance`` and ``calibration.compliance_std``; the rest is as for the rigid fit.
    """

    def _extend_model(self, model: ErrorModel, theta0: np.ndarray, blocks: list, sessions: list[Session]):
        extended = CompliantErrorModel(model.chain, model.sensors, model.target_names, model.reference_tracker_T_base,
                                       model.kind)
        theta = np.zeros(extended.size)
        theta[:model.size] = theta0
        self._torque_chain = model.chain
        wrapped = []
        for block, session in zip(blocks, sessions):
            torques = gravity_torques(model.chain, session.q, session.payload_kg, session.payload_com)
            wrapped.append(CompliantTrackerObservations(block.sensor, block.q, block.pose_row, block.targets, block.xyz,
                                                        block.sqrt_information, block.labels, block.name, torques))
        return extended, theta, wrapped

    def _blocks(self, session: Session, sensor: str, rows: np.ndarray):
        return compliant_blocks(session, sensor, rows, self._torque_chain)

    def _calibration(self, model, result, sessions, first):
        calibration = super()._calibration(model, result, sessions, first)
        std = result.standard_deviations
        calibration.compliance = result.theta[model.compliance_slice].copy()
        calibration.compliance_std = std[model.compliance_slice].copy()
        return calibration
