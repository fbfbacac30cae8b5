"""Reflector points measured by a laser tracker: the observation block and the sensor.

A reflector k on the tip, seen at pose n, is predicted at

    p = tracker_T_base @ base_T_tip(q_n) @ offset_k          (m, tracker frame)

Residuals are ``W (measured - p)`` with ``W`` the point's square-root information (the tracker's
radial and transverse noise, or a per-point sigma), three rows and one robust unit per point.
Reads the arm, the session's tracker frame (``sensor``) and the reflector offsets (``target``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from rigs.transforms import skew
from calib.model.error_model import ErrorModel, TipEvaluation
from calib.model.poses import PoseSet
from calib.sensors.blocks import evaluate, tips_for
from calib.sensors.figures import ErrorStats
from calib.sensors.registration import initial_frame_and_targets
from calib.sensors.sensor import Prepared, Sensor, StartValues, tool_name
from capture.session import Session
from rigs.errors import InputError

STRUCTURAL_DISTANCE_M = 3.0  # fake points a few metres away: only the Jacobian's structure matters there


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


@dataclass(eq=False)
class PointObservations:
    """Reflector positions measured by one tracker (one ``sensor`` frame of the error model).

    ``poses``: the session's pose set; per point: ``pose_row`` (M,) row of ``poses``, ``targets``
    (M,) reflector names, ``xyz`` (M, 3) m in the tracker frame, ``sqrt_information`` (M, 3, 3),
    ``labels`` (M,) "pose/target".
    """

    sensor: str
    poses: PoseSet
    pose_row: np.ndarray
    targets: list[str]
    xyz: np.ndarray
    sqrt_information: np.ndarray
    labels: list[str]
    name: str = "tracker"
    groups: tuple[str, ...] = field(default=("sensor", "target"), init=False)

    def __post_init__(self) -> None:
        self.pose_row = np.asarray(self.pose_row, int)
        self.xyz = np.asarray(self.xyz, float).reshape(-1, 3)
        self.unit_index = np.repeat(np.arange(len(self.xyz)), 3)
        self.unit_labels = list(self.labels)
        self.unit_pose = self.pose_row
        self._names = sorted(set(self.targets))
        self._target_index = np.array([self._names.index(t) for t in self.targets], int)

    @property
    def q(self) -> np.ndarray:
        return self.poses.q

    def subset(self, keep: np.ndarray) -> "PointObservations":
        keep = np.asarray(keep, dtype=bool)
        return PointObservations(self.sensor, self.poses, self.pose_row[keep], [t for t, k in zip(self.targets, keep) if k],
                                 self.xyz[keep], self.sqrt_information[keep],
                                 [l for l, k in zip(self.labels, keep) if k], self.name)

    def on(self, poses: PoseSet) -> "PointObservations":
        return replace(self, poses=poses)

    # -- prediction -------------------------------------------------------------------------------
    def _offsets(self, model: ErrorModel, theta: np.ndarray) -> np.ndarray:
        reflectors = model.group("target")
        known = set(reflectors.owners) if reflectors is not None else set()
        unknown = [t for t in self._names if t not in known]
        if unknown:
            raise InputError(f"tracker target {unknown[0]!r} is not a reflector of the calibration.")
        return np.array([reflectors.offset(theta, n) for n in self._names]).reshape(-1, 3)[self._target_index]

    def _geometry(self, model: ErrorModel, theta: np.ndarray, tip: TipEvaluation):
        where = tip.where(self.pose_row)
        base_T_tip = tip.base_T_tip[where]
        offsets = self._offsets(model, theta)
        frame = model.tracker_T_base(theta, self.sensor)
        points_base = np.einsum("mij,mj->mi", base_T_tip[:, :3, :3], offsets) + base_T_tip[:, :3, 3]
        predicted = points_base @ frame[:3, :3].T + frame[:3, 3]
        return where, base_T_tip, offsets, frame, points_base, predicted

    def predict(self, model: ErrorModel, theta: np.ndarray) -> np.ndarray:
        """Predicted reflector positions (M, 3) m in the tracker frame."""
        tip = tips_for([self], model, theta, False)[id(self.poses)]
        return self._geometry(model, theta, tip)[-1]

    def errors(self, model: ErrorModel, theta: np.ndarray) -> np.ndarray:
        """3D error (M,) m of each point."""
        return np.linalg.norm(self.predict(model, theta) - self.xyz, axis=1)

    def evaluate(self, model: ErrorModel, theta: np.ndarray, jacobian: bool = True):
        return evaluate(self, model, theta, jacobian)

    def evaluate_at(self, model: ErrorModel, theta: np.ndarray, tip: TipEvaluation, jacobian: bool):
        where, base_T_tip, offsets, frame, points_base, predicted = self._geometry(model, theta, tip)
        residuals = np.einsum("mij,mj->mi", self.sqrt_information, self.xyz - predicted).reshape(-1)
        if not jacobian:
            return residuals, None
        count = len(self.xyz)
        jac = np.zeros((count, 3, model.size))
        # Whitened factors first: W (M, 3, 3) times each small derivative, not times the whole Jacobian.
        whitened_rotation = self.sqrt_information @ (frame[:3, :3] @ base_T_tip[:, :3, :3])  # W tracker_R_tip
        # A LOCAL tip twist (v, w) moves a point p of the tip frame by R (v + w x p) = R [I, -[p]x] (v, w).
        tip.chain_into(jac, np.concatenate([whitened_rotation, -whitened_rotation @ skew(offsets)], axis=2), where)
        frames = model.group("sensor")
        whitened_frame = self.sqrt_information @ frame[:3, :3]
        sensor_twist = np.concatenate([whitened_frame, -whitened_frame @ skew(points_base)], axis=2)
        jac[:, :, frames.owner_slice(self.sensor)] = sensor_twist @ frames.right_jacobian(theta, self.sensor)
        reflectors = model.group("target")
        for k, name in enumerate(self._names):
            rows = self._target_index == k
            jac[rows, :, reflectors.owner_slice(name)] = whitened_rotation[rows]
        # residual = W (measured - predicted): d residual = -W d predicted
        return residuals, -jac.reshape(-1, model.size)

    def tip_translation_rows(self, model: ErrorModel, theta: np.ndarray):
        """Residuals (3M,), their derivative (3M, 3) per base-frame tip shift (m), pose row (3M,): metres
        over the points' typical sigma."""
        frame = model.tracker_T_base(theta, self.sensor)
        weight = float(np.median(np.linalg.norm(self.sqrt_information, axis=(1, 2)) / np.sqrt(3.0)))
        error = (self.xyz - self.predict(model, theta)).reshape(-1) * weight
        derivative = np.broadcast_to(frame[:3, :3] * weight, (len(self.xyz), 3, 3)).reshape(-1, 3)
        return error, derivative, np.repeat(self.pose_row, 3)


def point_labels(session: Session, sensor: str) -> list[str]:
    tracker = session.tracker
    return [f"{session.pose_ids[p]}/{t}" if sensor == "s0" else f"{sensor}:{session.pose_ids[p]}/{t}"
            for p, t in zip(tracker.pose_index, tracker.targets)]


def tracker_blocks(session: Session, poses: PoseSet, rows: np.ndarray | None = None,
                   tool: str | None = None) -> PointObservations:
    """The tracker points of ``session`` at pose rows ``rows`` (all when None), on ``poses``; with
    ``tool``, its reflectors are the session's own (``m0@s1``)."""
    tracker = session.tracker
    if tracker is None or not len(tracker.targets):
        raise InputError(f"{session.path}: has no tracker points (tracker.csv); nothing to calibrate against.")
    keep = np.ones(len(tracker.targets), bool) if rows is None else np.isin(tracker.pose_index, rows)
    sensors = session.manifest.get("sensors", {}).get("tracker") or {}
    information = tracker_sqrt_information(tracker.xyz, sensors.get("distance_mpe_m"), sensors.get("transverse_mpe_m"),
                                           tracker.sigma)
    labels = point_labels(session, poses.sensor)
    return PointObservations(poses.sensor, poses, tracker.pose_index[keep],
                             [tool_name(t, tool) for t, k in zip(tracker.targets, keep) if k],
                             tracker.xyz[keep], information[keep], [l for l, k in zip(labels, keep) if k])


class TrackerPointSensor(Sensor):
    name = "tracker_points"
    words = "tracker points"

    def present(self, session: Session) -> bool:
        return session.tracker is not None and len(session.tracker.targets) > 0

    def files(self, session: Session) -> list[Path]:
        return [session.path / "tracker.csv"]

    def blocks(self, prepared: Prepared, rows: np.ndarray | None) -> list:
        return [tracker_blocks(prepared.session, prepared.poses, rows, prepared.tool)]

    def initialise(self, prepared, blocks, base_T_tip, start: StartValues, start_targets) -> None:
        block = blocks[0]
        if not len(block.targets):
            raise InputError(f"{prepared.session.path}: no tracker points left for the fit after the hold-out.")
        nominal = {tool_name(name, prepared.tool): xyz for name, xyz in prepared.session.nominal_targets.items()}
        frame, offsets = initial_frame_and_targets(base_T_tip[block.pose_row], block.targets, block.xyz,
                                                   dict(nominal, **start_targets))
        start.tracker_T_base.setdefault(block.sensor, frame)
        for target, xyz in offsets.items():
            start.targets.setdefault(target, xyz)

    def structural_blocks(self, blocks: list, poses: PoseSet, reference: dict) -> list:
        targets = sorted({t for b in blocks for t in b.targets})
        # The fake data carries the real data's weights: the condition number depends on them.
        scale = reference["point_scale"]
        out = []
        for sensor in sorted({b.sensor for b in blocks}):
            count = len(poses)
            rows = np.repeat(np.arange(count), len(targets))
            fake = np.zeros((len(rows), 3))
            fake[:, 2] = STRUCTURAL_DISTANCE_M
            out.append(PointObservations(sensor, poses, rows, targets * count, fake,
                                         np.repeat(scale * np.eye(3)[None], len(rows), 0), [""] * len(rows)))
        return out

    def errors(self, blocks: list, model: ErrorModel, theta: np.ndarray) -> tuple[np.ndarray, ...]:
        errors = [b.errors(model, theta) for b in blocks]
        return (np.concatenate(errors) if errors else np.zeros(0),)

    def figures_from(self, errors: tuple[np.ndarray, ...]) -> dict:
        return ErrorStats.of(errors[0] if errors else np.zeros(0)).as_dict()
