"""6-DoF probe poses measured by a tracker (a T-Mac, an optical rigid body): the block and the sensor.

A probe mounted on the tip is seen at pose n as

    tracker_T_probe = tracker_T_base @ base_T_tip(q_n) @ tip_T_probe

with ``tracker_T_base`` the session's tracker frame (group ``sensor``, shared with its reflectors)
and ``tip_T_probe`` the probe's mount (group ``probe``, fitted like a reflector offset). Each pose
gives six whitened residuals, one robust unit:

- position: (t_measured - t_predicted) / sigma_pos, in the tracker frame (m / m);
- orientation: log3(R_predicted^T R_measured) / sigma_rot, in the probe frame (rad / rad).

The sigmas are the file's ``sigma_pos``/``sigma_rot`` columns or the session's
``sensors.tracker_poses.sigma_pos_m``/``sigma_rot_rad``; when neither is given they are estimated
from the fit's own residuals (variance components, :func:`estimate_noise`) and the fit is redone.

Starting values need no hand guess: :func:`register_poses` solves
``tracker_T_base @ base_T_tip_k @ tip_T_probe = tracker_T_probe_k`` for both unknown frames
(closed-form hand-eye rotation from relative motions, a linear solve for the translations, then a
few alternation rounds on the full equations).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pinocchio as pin

from calib.model.chain import inverse_adjoint
from calib.model.error_model import ErrorModel, TipEvaluation
from calib.model.poses import PoseSet
from calib.sensors.blocks import evaluate, tips_for
from calib.sensors.figures import pose_figures
from calib.sensors.sensor import Prepared, Sensor, StartValues, tool_name
from capture.session import Session
from rigs.errors import InputError

PROBE = "probe"  # the probe's name in the error model (one probe per tip)
# Without a stated rotation noise, the first fit weights a radian like this many metres (a probe's
# orientation is typically about as good as its position over a 0.1 m lever arm).
DEFAULT_LEVER_M = 0.1
GUESS_SIGMA_POS_M = 1e-4
MIN_RELATIVE_ROTATION = np.radians(5.0)  # pose pairs closer than this say little about the hand-eye rotation
NOISE_ROUNDS = 2  # estimate-and-refit rounds when the poses' noise is not stated (the second changes < 1 %)


def _project_rotation(matrix: np.ndarray) -> np.ndarray:
    """The rotation (3, 3) nearest to ``matrix`` (3, 3) (polar decomposition, no reflection)."""
    u, _, vt = np.linalg.svd(matrix)
    return u @ np.diag([1.0, 1.0, np.sign(np.linalg.det(u @ vt))]) @ vt


def rotation_log(rotations: np.ndarray) -> np.ndarray:
    """(M, 3, 3) rotations -> (M, 3) rotation vectors, rad."""
    return np.array([pin.log3(np.asarray(r, float)) for r in np.reshape(rotations, (-1, 3, 3))]).reshape(-1, 3)


def register_poses(base_T_tip: np.ndarray, tracker_T_probe: np.ndarray, rounds: int = 5,
                   tracker_T_base: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``tracker_T_base`` (4, 4) and ``tip_T_probe`` (4, 4) from tip poses and measured probe poses.

    ``base_T_tip`` (M, 4, 4) nominal tip poses; ``tracker_T_probe`` (M, 4, 4) measured, metres.
    With ``tracker_T_base`` given (e.g. registered from reflectors of the same session), only the
    probe frame is solved. Otherwise the rotation of ``tip_T_probe`` comes from the relative motions
    ``A = tip_i^-1 tip_j``, ``B = probe_i^-1 probe_j``, for which ``A X = X B`` (their rotation axes
    are related by X's rotation: a Kabsch fit), then both translations by linear least squares and a
    few rounds alternating the two rotations on the full equations.
    """
    A = np.asarray(base_T_tip, float)
    B = np.asarray(tracker_T_probe, float)
    count = len(A)
    if count < 3:
        raise InputError(f"tracker poses: {count} poses cannot place the tracker and the probe; at least 3 are needed.")
    R_A, R_B, t_A, t_B = A[:, :3, :3], B[:, :3, :3], A[:, :3, 3], B[:, :3, 3]
    fixed_Y = tracker_T_base is not None
    if fixed_Y:
        R_Y = tracker_T_base[:3, :3]
        R_X = _project_rotation(np.einsum("mji,kj,mkl->il", R_A, R_Y, R_B))
    else:
        alpha, beta = [], []
        for i in range(count):
            for j in range(i + 1, min(count, i + 6)):
                a = pin.log3(R_A[i].T @ R_A[j])
                b = pin.log3(R_B[i].T @ R_B[j])
                if np.linalg.norm(a) > MIN_RELATIVE_ROTATION and np.linalg.norm(a) < np.pi - MIN_RELATIVE_ROTATION:
                    alpha.append(a)
                    beta.append(b)
        if len(alpha) < 2:
            raise InputError("tracker poses: the tip barely rotates between poses, so the probe's mount cannot be "
                             "found; record poses that turn the tool.")
        alpha, beta = np.array(alpha), np.array(beta)
        R_X = _project_rotation(alpha.T @ beta)  # alpha = R_X beta
        R_Y = _project_rotation(np.einsum("mij,kj,mlk->il", R_B, R_X, R_A))  # R_Y R_A R_X = R_B
    for _ in range(rounds):
        if not fixed_Y:
            R_Y = _project_rotation(np.einsum("mij,kj,mlk->il", R_B, R_X, R_A))
        R_X = _project_rotation(np.einsum("mji,kj,mkl->il", R_A, R_Y, R_B))
    # Translations: R_Y (R_A t_X + t_A) + t_Y = t_B, linear in (t_X, t_Y).
    if fixed_Y:
        t_Y = tracker_T_base[:3, 3]
        lhs = (R_Y[None] @ R_A).reshape(-1, 3)
        rhs = (t_B - t_A @ R_Y.T - t_Y).reshape(-1)
        t_X = np.linalg.lstsq(lhs, rhs, rcond=None)[0]
    else:
        lhs = np.concatenate([R_Y[None] @ R_A, np.broadcast_to(np.eye(3), (count, 3, 3))], axis=2).reshape(-1, 6)
        rhs = (t_B - t_A @ R_Y.T).reshape(-1)
        solution = np.linalg.lstsq(lhs, rhs, rcond=None)[0]
        t_X, t_Y = solution[:3], solution[3:]
    tracker_T_base_out, tip_T_probe = np.eye(4), np.eye(4)
    tracker_T_base_out[:3, :3], tracker_T_base_out[:3, 3] = R_Y, t_Y
    tip_T_probe[:3, :3], tip_T_probe[:3, 3] = R_X, t_X
    if not (np.all(np.isfinite(tracker_T_base_out)) and np.all(np.isfinite(tip_T_probe))):
        raise InputError("tracker poses: the registration of tip poses to probe poses failed (degenerate poses).")
    return tracker_T_base_out, tip_T_probe


def pose_errors(predicted: np.ndarray, measured: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Position error (M,) m and rotation angle error (M,) rad between two stacks of poses (M, 4, 4)."""
    position = np.linalg.norm(measured[:, :3, 3] - predicted[:, :3, 3], axis=1)
    relative = np.einsum("mji,mjk->mik", predicted[:, :3, :3], measured[:, :3, :3])
    angle = np.linalg.norm(rotation_log(relative), axis=1)  # arccos of the trace loses digits near 0
    return position, angle


@dataclass(eq=False)
class PoseObservations:
    """Probe poses measured by one tracker (one ``sensor`` frame of the error model).

    ``poses``: the session's pose set; per measured pose: ``pose_row`` (M,), ``tracker_T_probe``
    (M, 4, 4) m, ``sigma_pos`` (M,) m and ``sigma_rot`` (M,) rad per axis, ``labels`` (M,)
    "pose/probe"; ``stated``: whether the sigmas come from the data (else a guess or an estimate).
    """

    sensor: str
    poses: PoseSet
    pose_row: np.ndarray
    tracker_T_probe: np.ndarray
    sigma_pos: np.ndarray
    sigma_rot: np.ndarray
    labels: list[str]
    stated: bool = True
    probe: str = PROBE
    name: str = "tracker_poses"
    groups: tuple[str, ...] = field(default=("sensor", "probe"), init=False)

    def __post_init__(self) -> None:
        self.pose_row = np.asarray(self.pose_row, int)
        self.unit_index = np.repeat(np.arange(len(self.pose_row)), 6)
        self.unit_labels = list(self.labels)
        self.unit_pose = self.pose_row

    @property
    def q(self) -> np.ndarray:
        return self.poses.q

    def subset(self, keep: np.ndarray) -> "PoseObservations":
        keep = np.asarray(keep, dtype=bool)
        return replace(self, pose_row=self.pose_row[keep], tracker_T_probe=self.tracker_T_probe[keep],
                       sigma_pos=self.sigma_pos[keep], sigma_rot=self.sigma_rot[keep],
                       labels=[l for l, k in zip(self.labels, keep) if k])

    def on(self, poses: PoseSet) -> "PoseObservations":
        return replace(self, poses=poses)

    def with_noise(self, sigma_pos: float, sigma_rot: float) -> "PoseObservations":
        """The same poses weighted by one estimated position (m) and rotation (rad) sigma."""
        count = len(self.pose_row)
        return replace(self, sigma_pos=np.full(count, sigma_pos), sigma_rot=np.full(count, sigma_rot))

    def _geometry(self, model: ErrorModel, theta: np.ndarray, tip: TipEvaluation):
        if model.group("probe") is None or self.probe not in model.group("probe").owners:
            raise InputError(f"tracker poses: probe {self.probe!r} is not part of the calibration's error model.")
        where = tip.where(self.pose_row)
        base_T_tip = tip.base_T_tip[where]
        tip_T_probe = model.tip_T_probe(theta, self.probe)
        base_T_probe = base_T_tip @ tip_T_probe
        return where, tip_T_probe, base_T_probe, model.tracker_T_base(theta, self.sensor) @ base_T_probe

    def predict(self, model: ErrorModel, theta: np.ndarray) -> np.ndarray:
        """Predicted ``tracker_T_probe`` (M, 4, 4)."""
        tip = tips_for([self], model, theta, False)[id(self.poses)]
        return self._geometry(model, theta, tip)[-1]

    def errors(self, model: ErrorModel, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Position (M,) m and angle (M,) rad errors of the model at ``theta``."""
        return pose_errors(self.predict(model, theta), self.tracker_T_probe)

    def raw_residuals(self, model: ErrorModel, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Unweighted position (M, 3) m (tracker frame) and rotation (M, 3) rad (probe frame) residuals."""
        predicted = self.predict(model, theta)
        position = self.tracker_T_probe[:, :3, 3] - predicted[:, :3, 3]
        rotation = rotation_log(np.einsum("mji,mjk->mik", predicted[:, :3, :3], self.tracker_T_probe[:, :3, :3]))
        return position, rotation

    def evaluate(self, model: ErrorModel, theta: np.ndarray, jacobian: bool = True):
        return evaluate(self, model, theta, jacobian)

    def evaluate_at(self, model: ErrorModel, theta: np.ndarray, tip: TipEvaluation, jacobian: bool):
        where, tip_T_probe, base_T_probe, predicted = self._geometry(model, theta, tip)
        count = len(self.pose_row)
        position = (self.tracker_T_probe[:, :3, 3] - predicted[:, :3, 3]) / self.sigma_pos[:, None]
        relative = np.einsum("mji,mjk->mik", predicted[:, :3, :3], self.tracker_T_probe[:, :3, :3])
        rotation = rotation_log(relative).reshape(count, 3)
        residuals = np.concatenate([position, rotation / self.sigma_rot[:, None]], axis=1).reshape(-1)
        if not jacobian:
            return residuals, None
        twist = np.zeros((count, 6, model.size))  # probe LOCAL twist per parameter
        tip.chain_into(twist, np.broadcast_to(inverse_adjoint(tip_T_probe), (count, 6, 6)), where)  # tip twist -> probe twist
        frames = model.group("sensor")
        # tracker_T_base exp(s) base_T_probe = tracker_T_probe exp(Ad(probe_T_base) s)
        twist[:, :, frames.owner_slice(self.sensor)] = inverse_adjoint(base_T_probe) @ frames.right_jacobian(theta, self.sensor)
        probes = model.group("probe")
        twist[:, :, probes.owner_slice(self.probe)] = probes.right_jacobian(theta, self.probe)
        # d residual / d probe twist (v, w), LOCAL: position moves by R_P v; R_P -> R_P exp(w) turns
        # E = R_P^T R_M into exp(-w) E, whose log moves by -Jlog3(E) E^T w.
        to_residual = np.zeros((count, 6, 6))
        to_residual[:, :3, :3] = -predicted[:, :3, :3] / self.sigma_pos[:, None, None]
        for m in range(count):
            to_residual[m, 3:, 3:] = -np.asarray(pin.Jlog3(relative[m])) @ relative[m].T / self.sigma_rot[m]
        return residuals, (to_residual @ twist).reshape(-1, model.size)

    def tip_translation_rows(self, model: ErrorModel, theta: np.ndarray):
        """Position residuals (3M,), their derivative (3M, 3) per base-frame tip shift (m), pose rows (3M,):
        metres over the typical position sigma."""
        position, _ = self.raw_residuals(model, theta)
        weight = 1.0 / float(np.median(self.sigma_pos))
        frame = model.tracker_T_base(theta, self.sensor)
        derivative = np.broadcast_to(frame[:3, :3] * weight, (len(self.pose_row), 3, 3)).reshape(-1, 3)
        return position.reshape(-1) * weight, derivative, np.repeat(self.pose_row, 3)


def stated_noise(session: Session) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Per-pose (M,) position (m) and rotation (rad) sigmas the data states: the file's columns, else
    the session's ``sensors.tracker_poses.sigma_pos_m``/``sigma_rot_rad``; None where neither does."""
    poses = session.tracker_poses
    declared = session.manifest.get("sensors", {}).get("tracker_poses") or {}
    count = len(poses.pose_index)
    out = []
    for column, key, where in ((poses.sigma_pos, "sigma_pos_m", "sigma_pos"), (poses.sigma_rot, "sigma_rot_rad", "sigma_rot")):
        value = column if column is not None else (None if declared.get(key) is None else np.full(count, float(declared[key])))
        if value is not None and not np.all(np.asarray(value) > 0):
            row = int(np.flatnonzero(~(np.asarray(value) > 0))[0]) + 2
            raise InputError(f"{session.path / 'tracker_poses.csv'}: row {row}: {where} must be positive.")
        out.append(value)
    return out[0], out[1]


def pose_blocks(session: Session, poses: PoseSet, rows: np.ndarray | None = None,
                noise: tuple[float, float] | None = None, tool: str | None = None) -> PoseObservations:
    """The probe poses of ``session`` at pose rows ``rows`` (all when None), on ``poses``.

    ``noise`` (sigma_pos m, sigma_rot rad) replaces weights the data does not state (an estimate).
    """
    tracker_poses = session.tracker_poses
    if tracker_poses is None or not len(tracker_poses.pose_index):
        raise InputError(f"{session.path}: has no 6-DoF tracker poses (tracker_poses.csv).")
    keep = np.ones(len(tracker_poses.pose_index), bool) if rows is None else np.isin(tracker_poses.pose_index, rows)
    sigma_pos, sigma_rot = stated_noise(session)
    stated = sigma_pos is not None and sigma_rot is not None
    count = len(tracker_poses.pose_index)
    guess_pos, guess_rot = noise if noise is not None else (GUESS_SIGMA_POS_M, GUESS_SIGMA_POS_M / DEFAULT_LEVER_M)
    if sigma_pos is None:
        sigma_pos = np.full(count, guess_pos)
    if sigma_rot is None:
        sigma_rot = np.full(count, guess_rot)
    labels = [f"{poses.label(p)}/{PROBE}" for p in tracker_poses.pose_index]
    return PoseObservations(poses.sensor, poses, tracker_poses.pose_index[keep], tracker_poses.tracker_T_probe[keep],
                            np.asarray(sigma_pos, float)[keep], np.asarray(sigma_rot, float)[keep],
                            [l for l, k in zip(labels, keep) if k], stated=stated or noise is not None,
                            probe=tool_name(PROBE, tool))


def estimate_noise(blocks: list, model: ErrorModel, theta: np.ndarray, jacobian_rank: int) -> tuple[float, float]:
    """Position (m) and rotation (rad) sigma of the pose blocks from a fit's residuals.

    Variance components: each group's sum of squared raw residuals over its share of the redundancy
    (rows minus the parameters it determines, shared in proportion to the rows). Good to a few per
    cent with tens of poses, which is all the weighting needs.
    """
    position, rotation = [], []
    for block in blocks:
        if isinstance(block, PoseObservations):
            p, r = block.raw_residuals(model, theta)
            position.append(p.reshape(-1))
            rotation.append(r.reshape(-1))
    position, rotation = np.concatenate(position), np.concatenate(rotation)
    total_rows = sum(len(b.unit_index) for b in blocks)
    share = jacobian_rank / max(total_rows, 1)
    sigma_pos = np.sqrt(position @ position / max(len(position) * (1 - share), 1))
    sigma_rot = np.sqrt(rotation @ rotation / max(len(rotation) * (1 - share), 1))
    return max(float(sigma_pos), 1e-9), max(float(sigma_rot), 1e-9)


class TrackerPoseSensor(Sensor):
    name = "tracker_poses"
    words = "tracker poses"

    def present(self, session: Session) -> bool:
        return session.tracker_poses is not None and len(session.tracker_poses.pose_index) > 0

    def files(self, session: Session) -> list[Path]:
        return [session.path / "tracker_poses.csv"]

    def blocks(self, prepared: Prepared, rows: np.ndarray | None) -> list:
        return [pose_blocks(prepared.session, prepared.poses, rows, prepared.data, prepared.tool)]

    def initialise(self, prepared, blocks, base_T_tip, start: StartValues, start_targets) -> None:
        block = blocks[0]
        if not len(block.pose_row):
            raise InputError(f"{prepared.session.path}: no tracker poses left for the fit after the hold-out.")
        # With reflectors in the session the tracker is placed by them; the probe's mount follows.
        frame, tip_T_probe = register_poses(base_T_tip[block.pose_row], block.tracker_T_probe,
                                            tracker_T_base=start.tracker_T_base.get(block.sensor))
        start.tracker_T_base.setdefault(block.sensor, frame)
        start.tip_T_probe.setdefault(block.probe, tip_T_probe)

    def structural_blocks(self, blocks: list, poses: PoseSet, reference: dict) -> list:
        sigma_pos = float(np.median(np.concatenate([b.sigma_pos for b in blocks])))
        sigma_rot = float(np.median(np.concatenate([b.sigma_rot for b in blocks])))
        count = len(poses)
        return [PoseObservations(sensor, poses, np.arange(count), np.repeat(np.eye(4)[None], count, 0),
                                 np.full(count, sigma_pos), np.full(count, sigma_rot), [""] * count, probe=probe)
                for sensor, probe in sorted({(b.sensor, b.probe) for b in blocks})]

    def errors(self, blocks: list, model: ErrorModel, theta: np.ndarray) -> tuple[np.ndarray, ...]:
        errors = [b.errors(model, theta) for b in blocks]
        return (np.concatenate([p for p, _ in errors]) if errors else np.zeros(0),
                np.concatenate([a for _, a in errors]) if errors else np.zeros(0))

    def figures_from(self, errors: tuple[np.ndarray, ...]) -> dict:
        figures = pose_figures(*(errors if errors else (np.zeros(0), np.zeros(0))))
        figures.pop("angle_p95_deg")  # the fit's tables quote mean, RMS and max
        return figures

    def reweight(self, prepared: list[Prepared], fitted_blocks: list, model: ErrorModel, theta: np.ndarray,
                 rank: int) -> dict | None:
        unstated = [item for item in prepared if not all(stated is not None for stated in stated_noise(item.session))]
        if not unstated:
            return None
        noise = estimate_noise(fitted_blocks, model, theta, rank)
        for item in unstated:
            item.data = noise
        return {"source": "estimated", "sigma_pos_m": noise[0], "sigma_rot_rad": noise[1]}
