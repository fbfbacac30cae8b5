"""Observation models: what a measurement predicts, as whitened residuals with their Jacobian.

The solver knows nothing about trackers or cameras. It stacks *observation blocks*; each block
holds its measurements and, for a parameter vector ``theta`` of an :class:`ErrorModel`, returns

- ``residuals`` (m,): (measured - predicted) multiplied by the measurement's square-root
  information, so each row is dimensionless with unit variance under the noise model;
- ``jacobian`` (m, P): d residuals / d theta, analytic;
- ``unit_index`` (m,): which measurement unit each row belongs to (a tracker point has 3 rows, a
  board corner would have 2). Robust weights and outlier flags act on whole units;
- ``unit_labels``: one readable label per unit ("p0007/smr2"), used when outliers are listed;
- ``unit_pose`` (units,): the row of the pose table each unit was measured at (hold-out splits by pose).

A camera block (issue 5) implements the same protocol: its residuals are pixel errors divided by
the pixel noise; it adds its own parameters (camera poses, board pose) by extending the model's
layout. ``subset(keep)`` returns a block of only the kept units.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pinocchio as pin

from calib.error_model import ErrorModel
from rigs.errors import InputError


class ObservationBlock(Protocol):
    name: str
    unit_index: np.ndarray
    unit_labels: list[str]
    unit_pose: np.ndarray

    def evaluate(self, model: ErrorModel, theta: np.ndarray, jacobian: bool = True
                 ) -> tuple[np.ndarray, np.ndarray | None]:
        """(residuals (m,), jacobian (m, P) or None)."""

    def subset(self, keep: np.ndarray) -> "ObservationBlock":
        """A block of only the units where ``keep`` (units,) bool is true."""


def skew(v: np.ndarray) -> np.ndarray:
    """(..., 3) -> (..., 3, 3) cross-product matrices."""
    v = np.asarray(v, dtype=float)
    out = np.zeros(v.shape[:-1] + (3, 3))
    out[..., 0, 1], out[..., 0, 2] = -v[..., 2], v[..., 1]
    out[..., 1, 0], out[..., 1, 2] = v[..., 2], -v[..., 0]
    out[..., 2, 0], out[..., 2, 1] = -v[..., 1], v[..., 0]
    return out


def tracker_sqrt_information(xyz: np.ndarray, distance_mpe: tuple[float, float] | None,
                             transverse_mpe: tuple[float, float] | None, sigma: np.ndarray | None = None,
                             typical_fraction: float = 0.5) -> np.ndarray:
    """Square-root information (M, 3, 3) of tracker points ``xyz`` (M, 3) m in the tracker frame.

    A per-point ``sigma`` (M,) m from the file wins (isotropic). Otherwise the ISO 10360-10 MPEs
    ``a + b * distance`` give a radial and a transverse standard deviation; a tracker's typical
    error is about half its MPE (FACTS.md), hence ``typical_fraction``. Without either, unit
    weights (the solver's variance factor then carries the scale).
    """
    count = len(xyz)
    if sigma is not None:
        return np.eye(3)[None] / np.asarray(sigma, dtype=float)[:, None, None]
    if distance_mpe is None or transverse_mpe is None:
        return np.repeat(np.eye(3)[None], count, axis=0)
    distance = np.linalg.norm(xyz, axis=1)
    radial_sigma = typical_fraction * (distance_mpe[0] + distance_mpe[1] * distance)
    transverse_sigma = typical_fraction * (transverse_mpe[0] + transverse_mpe[1] * distance)
    # The tracker sits at its frame's origin, so the radial direction is the point's direction.
    radial = xyz / np.maximum(distance, 1e-9)[:, None]
    radial_part = radial[:, :, None] * radial[:, None, :]
    return (radial_part / radial_sigma[:, None, None]
            + (np.eye(3)[None] - radial_part) / transverse_sigma[:, None, None])


@dataclass
class TrackerObservations:
    """Reflector positions measured by one tracker (one sensor frame of the error model).

    ``q`` (N, dof) joint readings of the poses; ``pose_row`` (M,) index into q per point;
    ``targets`` (M,) reflector names; ``xyz`` (M, 3) m in the tracker frame; ``sqrt_information``
    (M, 3, 3); ``labels`` (M,) "pose/target"; ``sensor`` the model's sensor name.
    """

    sensor: str
    q: np.ndarray
    pose_row: np.ndarray
    targets: list[str]
    xyz: np.ndarray
    sqrt_information: np.ndarray
    labels: list[str]
    name: str = "tracker"

    def __post_init__(self) -> None:
        self.unit_index = np.repeat(np.arange(len(self.xyz)), 3)
        self.unit_labels = list(self.labels)
        self.unit_pose = np.asarray(self.pose_row)

    def subset(self, keep: np.ndarray) -> "TrackerObservations":
        keep = np.asarray(keep, dtype=bool)
        return TrackerObservations(self.sensor, self.q, self.pose_row[keep], [t for t, k in zip(self.targets, keep) if k],
                                   self.xyz[keep], self.sqrt_information[keep],
                                   [l for l, k in zip(self.labels, keep) if k], self.name)

    def predict(self, model: ErrorModel, theta: np.ndarray) -> np.ndarray:
        """Predicted reflector positions (M, 3) m in the tracker frame."""
        return self._predict(model, theta, jacobian=False)[0]

    def evaluate(self, model: ErrorModel, theta: np.ndarray, jacobian: bool = True):
        predicted, jac = self._predict(model, theta, jacobian)
        error = self.xyz - predicted
        residuals = np.einsum("mij,mj->mi", self.sqrt_information, error).reshape(-1)
        if jac is None:
            return residuals, None
        # residual = W (measured - predicted): d residual = -W d predicted
        jac = -np.einsum("mij,mjp->mip", self.sqrt_information, jac).reshape(-1, model.size)
        return residuals, jac

    def _predict(self, model: ErrorModel, theta: np.ndarray, jacobian: bool):
        state = model.state(theta)
        used = np.unique(self.pose_row)
        poses, delta_columns, joint_columns = model.tip_poses_and_columns(state, self.q[used])
        where = np.searchsorted(used, self.pose_row)
        base_T_tip = poses[where]
        unknown = sorted(set(self.targets) - set(state.targets))
        if unknown:
            raise InputError(f"tracker target {unknown[0]!r} is not a reflector of the calibration.")
        offsets = np.array([state.targets[t] for t in self.targets])  # (M, 3) tip frame
        tracker_T_base = state.tracker_T_base[self.sensor]
        points_base = np.einsum("mij,mj->mi", base_T_tip[:, :3, :3], offsets) + base_T_tip[:, :3, 3]
        predicted = points_base @ tracker_T_base[:3, :3].T + tracker_T_base[:3, 3]
        if not jacobian:
            return predicted, None
        count = len(self.xyz)
        jac = np.zeros((count, 3, model.size))
        rotation = tracker_T_base[:3, :3] @ base_T_tip[:, :3, :3]  # (M, 3, 3) tracker_R_tip
        # A LOCAL tip twist (v, w) moves a point p of the tip frame by R (v + w x p) = R [I, -[p]x] (v, w).
        point_of_twist = np.concatenate([rotation, -rotation @ skew(offsets)], axis=2)  # (M, 3, 6)
        jac[:, :, model.delta_slice] = point_of_twist @ delta_columns[where]
        jac[:, :, model.zero_slice] = point_of_twist @ joint_columns[where]
        xi = theta[model.sensor_slices[self.sensor]]
        sensor_twist = np.concatenate([np.broadcast_to(tracker_T_base[:3, :3], (count, 3, 3)),
                                       -tracker_T_base[:3, :3] @ skew(points_base)], axis=2)
        jac[:, :, model.sensor_slices[self.sensor]] = sensor_twist @ np.asarray(pin.Jexp6(pin.Motion(xi)))
        for name, block in model.target_slices.items():
            rows = np.array([t == name for t in self.targets])
            jac[rows, :, block] = rotation[rows]
        return predicted, jac


def stack(blocks: list[ObservationBlock], model: ErrorModel, theta: np.ndarray, jacobian: bool = True):
    """Residuals (m,), Jacobian (m, P) or None, and the global unit index (m,) of several blocks."""
    residuals, jacobians, units = [], [], []
    offset = 0
    for block in blocks:
        r, j = block.evaluate(model, theta, jacobian)
        residuals.append(r)
        jacobians.append(j)
        units.append(block.unit_index + offset)
        offset += len(block.unit_labels)
    return (np.concatenate(residuals), np.vstack(jacobians) if jacobian else None, np.concatenate(units))
