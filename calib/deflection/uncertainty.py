"""Predicted points with their uncertainty: the fit's covariance carried to base-frame points.

``predict_points`` gives, for points fixed to the tip (its origin, the reflectors), their base-frame
positions under the full model (placements, zero offsets, joint sag, learned tip shift) and a
covariance that propagates the fit's parameter covariance (joint placements, zero offsets,
compliances, reflector offsets; a tracker frame does not enter a base-frame point) and adds the
learned residual's ensemble spread.
"""

from __future__ import annotations

import numpy as np

from rigs.transforms import skew
from calib.model.parameters import TWIST_AXES


def predict_points(calibration, q: np.ndarray, payload_kg: np.ndarray | float | None,
                   tip_points: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Base-frame positions (N, 3) m and their covariance (N, 3, 3) m^2 of points fixed to the tip.

    ``tip_points``: name -> (3,) m in the tip frame. Without the full covariance (an older
    calibration folder) the parameters' standard deviations are used as if independent.
    """
    q = np.atleast_2d(np.asarray(q, float))
    dof = calibration.chain.dof
    payload = np.broadcast_to(np.asarray(0.0 if payload_kg is None else payload_kg, float), (len(q),))
    torques = calibration.gravity_torques(q, payload)
    compliance = calibration.compliance if calibration.compliance is not None else np.zeros(dof)
    # The calibrated chain has the placements and zero offsets written in: its columns at the sagged
    # joints are the columns of the fitted parameters there (exp6's right Jacobian is 1 at 0).
    chain_pass = calibration.serial.evaluate(q - compliance * torques, columns=True)
    poses = chain_pass.base_T_tip
    delta_columns = np.swapaxes(chain_pass.placement_adjoints, 1, 2).reshape(len(q), 6, 6 * dof)
    joint_columns = chain_pass.joint_columns
    shift, spread = np.zeros((len(q), 3)), np.zeros((len(q), 3))
    if calibration.residual_model is not None:
        shift, spread, _ = calibration.residual_model.predict(calibration.featurizer()(q, payload))
    names, covariance = parameter_covariance(calibration)
    index = {name: i for i, name in enumerate(names)}
    joints = calibration.joint_names
    columns = {f"{j}.delta.{axis}": (0, 6 * i + c) for i, j in enumerate(joints) for c, axis in enumerate(TWIST_AXES)}
    columns.update({f"{j}.zero": (1, i) for i, j in enumerate(joints)})
    columns.update({f"{j}.compliance": (2, i) for i, j in enumerate(joints)})
    out = {}
    for label, point in tip_points.items():
        point = np.asarray(point, float)
        rotation = poses[:, :3, :3]
        position = np.einsum("nij,j->ni", rotation, point) + poses[:, :3, 3] + shift
        point_of_twist = np.concatenate([rotation, -rotation @ skew(point)], axis=2)  # (N, 3, 6)
        sources = (point_of_twist @ delta_columns, point_of_twist @ joint_columns,
                   -(point_of_twist @ joint_columns) * torques[:, None, :])
        jac = np.zeros((len(q), 3, len(names)))
        for name, (kind, column) in columns.items():
            if name in index:
                jac[:, :, index[name]] = sources[kind][:, :, column]
        for c, axis in enumerate("xyz"):
            name = f"target.{label}.{axis}"
            if name in index:
                jac[:, :, index[name]] = rotation[:, :, c]
        cov = np.einsum("nip,pq,njq->nij", jac, covariance, jac) + spread[:, :, None] ** 2 * np.eye(3)[None]
        out[label] = (position, cov)
    return out


def parameter_covariance(calibration) -> tuple[list[str], np.ndarray]:
    """(names, covariance) of the fit's parameters: from the fit in memory, else uncertainty.npz,
    else the reported standard deviations as if independent."""
    if calibration.solve is not None and calibration.error_model is not None:
        return [p.name for p in calibration.error_model.names], calibration.solve.covariance
    if "parameter_covariance" in calibration.summary:
        return calibration.summary["parameter_names"], calibration.summary["parameter_covariance"]
    names, variances = [], []
    for i, joint in enumerate(calibration.joint_names):
        for c, axis in enumerate(TWIST_AXES):
            names.append(f"{joint}.delta.{axis}")
            variances.append(calibration.delta_std[i, c] ** 2)
        names.append(f"{joint}.zero")
        variances.append(calibration.zero_std[i] ** 2)
        if calibration.compliance_std is not None:
            names.append(f"{joint}.compliance")
            variances.append(calibration.compliance_std[i] ** 2)
    for target, std in calibration.target_std.items():
        for c, axis in enumerate("xyz"):
            names.append(f"target.{target}.{axis}")
            variances.append(float(std[c]) ** 2)
    return names, np.diag(variances)
