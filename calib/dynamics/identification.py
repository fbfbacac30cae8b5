"""Fitting the maker's dynamic model to your own arm from its joint torques.

    dynamics = ArmDynamics(flip_sign=False).fit([session_a, session_b])   # -> IdentifiedDynamics

Torques are linear in the inertial parameters (:mod:`calib.dynamics.regressor`), so the fit is
weighted linear least squares: the regressor of every pose, a torque offset per joint (sensors have
them), and, when the sessions have velocities, a viscous and a Coulomb friction coefficient per
joint. Payloads the sessions state (``payload_kg`` at ``payload_com``) are taken as known point
masses and removed first. At rest only masses and first moments act, so rotational inertias stay at
the URDF's values and are not fitted; of the rest only the combinations the poses excite are
determined: the identifiability analysis of the kinematic fit (pivoted QR of the column-scaled,
noise-whitened regressor, then the SVD of its triangle) picks them, names the parameters it calls
dependent, and the fit moves only along those combinations, so what the data cannot see keeps the
URDF's value. The base parameters reported are the QR's independent parameters with the dependent
ones folded in (``beta = theta_I + K theta_D``), with standard deviations. Each joint's noise is
estimated from the residuals and the fit reweighted (twice). The fit reads the sessions' joints.csv,
session.json and robot.urdf, never ``truth/``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from calib.dynamics.measured import FLIP_FLAG, check_sign, has_torques, read_torques
from calib.dynamics.model import IdentifiedDynamics, design
from calib.dynamics.regressor import PARAMETERS, STATIC, WORDS, TorqueRegressor
from calib.fit.identifiability import analyse
from calib.model.parameters import ParameterInfo
from capture.session import Session, check_same_robot, load_session
from rigs.errors import InputError, setting
from rigs.kinematics import ArmModel

ROUNDS = 2  # noise estimate and refit rounds (the second changes the weights by well under 1 %)
MIN_ROWS_PER_PARAMETER = 2


def parameter_infos(regressor: TorqueRegressor, friction: bool) -> list[ParameterInfo]:
    """Every entry of theta: the bodies' ten parameters, then offsets and friction per joint."""
    infos = [ParameterInfo(f"{body}.{p}", "inertial", body, k, "kg" if p == "m" else ("kg m" if p.startswith("m") else "kg m^2"))
             for body in regressor.body_names for k, p in enumerate(PARAMETERS)]
    joints = regressor.chain.joint_names
    infos += [ParameterInfo(f"offset.{j}", "offset", j, 0, "N m") for j in joints]
    if friction:
        infos += [ParameterInfo(f"viscous.{j}", "viscous", j, 0, "N m s/rad") for j in joints]
        infos += [ParameterInfo(f"coulomb.{j}", "coulomb", j, 0, "N m") for j in joints]
    return infos


def describe(info: ParameterInfo) -> str:
    if info.group == "inertial":
        return f"{WORDS[PARAMETERS[info.component]]} of the body {info.owner} moves"
    return {"offset": "the torque offset of", "viscous": "the viscous friction of",
            "coulomb": "the Coulomb friction of"}[info.group] + f" {info.owner}"


def torque_hash(sessions: list[Session]) -> str:
    digest = hashlib.sha256()
    for session in sessions:
        for name in ("session.json", "robot.urdf", "joints.csv"):
            path = session.path / name
            digest.update(name.encode())
            digest.update(path.read_bytes())
    return "sha256:" + digest.hexdigest()


class ArmDynamics:
    """Identify an arm's dynamics from sessions with measured joint torques.

    ``flip_sign``: the drives report the opposite sign of Pinocchio's (see
    :mod:`calib.dynamics.measured`); ``friction``: "auto" (viscous and Coulomb terms when a session
    has velocities) or "none"; ``tip_link`` overrides the sessions' tip link (a payload's frame).
    """

    def __init__(self, flip_sign: bool = False, friction: str = "auto", tip_link: str | None = None):
        if friction not in ("auto", "none"):
            raise InputError(f"{setting('friction')} must be 'auto' or 'none', got {friction!r}.")
        self.flip_sign = flip_sign
        self.friction = friction
        self.tip_link = tip_link

    def fit(self, sessions: list[Session | Path]) -> IdentifiedDynamics:
        """Identify from sessions (folders or loaded :class:`Session`) of one robot with measured
        joint torques."""
        if not sessions:
            raise InputError("give at least one session with measured joint torques.")
        sessions = [s if isinstance(s, Session) else load_session(Path(s)) for s in sessions]
        check_same_robot(sessions, "fit")
        first = sessions[0]
        chain = ArmModel.from_urdf(first.urdf_path, first.base_link, self.tip_link or first.tip_link)
        if chain.joint_names != first.joint_names:
            raise InputError(f"tip_link {self.tip_link!r}: its chain moves {chain.joint_names}, but {first.path} "
                             f"records {first.joint_names}.")
        sign = -1 if self.flip_sign else 1
        readings = [read_torques(s, sign) for s in sessions]
        friction = self.friction == "auto" and any(r.moving for r in readings)
        regressor = TorqueRegressor(chain)
        infos = parameter_infos(regressor, friction)
        prior = np.concatenate([regressor.prior(), np.zeros(len(infos) - regressor.size)])
        free = np.ones(len(infos), bool)
        moving = any(r.moving for r in readings)
        if not moving:  # at rest the rotational inertias have no column
            for k in range(regressor.size):
                free[k] = k % 10 < STATIC
        columns, targets, urdf, measured, labels = [], [], [], [], []
        correlations = {}
        for reading in readings:
            session = reading.session
            x, payload_columns = design(regressor, session.q, reading.velocity, reading.acceleration, friction)
            unit = TorqueRegressor.point_mass(1.0, session.payload_com)
            payload = session.payload_kg[:, None] * (payload_columns @ unit)
            modelled = x[:, :, :regressor.size] @ prior[:regressor.size] + payload
            correlations[str(session.path)] = check_sign(reading.torques, modelled, str(session.path / "joints.csv"),
                                                         self.flip_sign, "the URDF's torques at the same poses")
            columns.append(x)
            targets.append(reading.torques - payload)
            urdf.append(modelled)
            measured.append(reading.torques)
            labels += [f"{session.path.name}:{pose}" for pose in session.pose_ids]
        x = np.concatenate(columns)  # (N, dof, P)
        target = np.concatenate(targets)  # (N, dof)
        count, dof = target.shape
        noise = np.ones(dof)
        for _ in range(ROUNDS + 1):
            theta, identifiability, reduced, weighted_residual = _solve(x, target, prior, free, noise, infos)
            residual = target - x @ theta
            correction = np.sqrt(count * dof / max(count * dof - identifiability.rank, 1))
            noise = np.maximum(np.sqrt(np.mean(residual ** 2, axis=0)) * correction, 1e-9)
        rows = count * dof
        if rows < MIN_ROWS_PER_PARAMETER * identifiability.rank:
            raise InputError(f"too few poses: {count} poses give {rows} torque readings for {identifiability.rank} "
                             f"identifiable parameters; at least "
                             f"{int(np.ceil(MIN_ROWS_PER_PARAMETER * identifiability.rank / dof))} poses are needed.")
        variance_factor = float(weighted_residual @ weighted_residual / max(rows - identifiability.rank, 1))
        combination_covariance = variance_factor * np.linalg.pinv(reduced.T @ reduced)
        covariance = identifiability.basis @ combination_covariance @ identifiability.basis.T
        summary = _summary(infos, theta, covariance, free, identifiability, x, target, noise, np.concatenate(urdf),
                           np.concatenate(measured), sessions, correlations, moving, friction, sign, labels)
        return IdentifiedDynamics(chain, [i.name for i in infos], theta, covariance, free, friction, noise, sign, summary,
                                  first.urdf_path)


def _solve(x: np.ndarray, target: np.ndarray, prior: np.ndarray, free: np.ndarray, noise: np.ndarray, infos):
    """theta along the identifiable combinations, the analysis, the reduced whitened design and residual."""
    dof = target.shape[1]
    weights = np.tile(1.0 / noise, len(target))
    design_matrix = x.reshape(-1, x.shape[2]) * weights[:, None]
    right = (target - x @ prior).reshape(-1) * weights
    identifiability = analyse(design_matrix, free, infos, describe)
    reduced = design_matrix @ identifiability.basis
    z = np.linalg.lstsq(reduced, right, rcond=None)[0]
    theta = prior + identifiability.basis @ z
    return theta, identifiability, reduced, right - reduced @ z


def _summary(infos, theta, covariance, free, identifiability, x, target, noise, urdf, measured, sessions, correlations,
             moving, friction, sign, labels) -> dict:
    names = [i.name for i in infos]
    std = np.sqrt(np.clip(np.diag(covariance), 0.0, None))
    dependent = set(identifiability.dependent)
    independent = [k for k in np.flatnonzero(free) if names[k] not in dependent]
    dependents = [names.index(n) for n in identifiability.dependent]
    weights = np.tile(1.0 / noise, len(target))
    flat = x.reshape(-1, x.shape[2]) * weights[:, None]
    a_i, a_d = flat[:, independent], flat[:, dependents]
    folded = np.linalg.lstsq(a_i, a_d, rcond=None)[0] if dependents else np.zeros((len(independent), 0))
    transform = np.zeros((len(independent), len(names)))
    transform[np.arange(len(independent)), independent] = 1.0
    if dependents:
        transform[:, dependents] = folded
    beta = transform @ theta
    beta_std = np.sqrt(np.clip(np.diag(transform @ covariance @ transform.T), 0.0, None))
    base = []
    for row, k in enumerate(independent):
        terms = [(float(folded[row, d]), names[dependents[d]]) for d in np.argsort(-np.abs(folded[row]))
                 if abs(folded[row, d]) > 1e-6][:4] if dependents else []
        expression = names[k] + "".join(f" {'+' if c > 0 else '-'} {abs(c):.4g} {n}" for c, n in terms)
        base.append({"name": names[k], "expression": expression, "value": float(beta[row]),
                     "std": float(beta_std[row]), "unit": infos[k].unit})
    residual = target - x @ theta
    joints = [i.owner for i in infos if i.group == "offset"]
    per_joint = {j: {"rms_nm": float(np.sqrt(np.mean(residual[:, n] ** 2))), "noise_nm": float(noise[n]),
                     "urdf_rms_nm": float(np.sqrt(np.mean((measured[:, n] - urdf[:, n]) ** 2))),
                     "torque_range_nm": [float(measured[:, n].min()), float(measured[:, n].max())]}
                 for n, j in enumerate(joints)}
    fixed_words = ("at rest only masses and first moments act on the joints: the rotational inertias keep the URDF's "
                   "values") if not moving else None
    return {
        "sessions": [str(s.path) for s in sessions], "data_hash": torque_hash(sessions),
        "poses": int(len(target)), "moving": moving, "friction": friction,
        "sign": {"used": sign, "flag": FLIP_FLAG if sign < 0 else None,
                 "convention": "Pinocchio's: the torque the drive applies (at rest, the one that holds the arm up)",
                 "correlation_with_urdf": correlations},
        "identifiability": dict(identifiability.summary(), fixed=fixed_words),
        "base_parameters": base,
        "parameters": {n: {"value": float(theta[k]), "std": float(std[k]), "fitted": bool(free[k] and k in
                                                                                     set(independent) | set(dependents))}
                       for k, n in enumerate(names)},
        "per_joint": per_joint,
        "rms_nm": float(np.sqrt(np.mean(residual ** 2))),
        "urdf_rms_nm": float(np.sqrt(np.mean((measured - urdf) ** 2))),
        "worst_poses": [{"pose": labels[i], "rms_nm": float(np.sqrt(np.mean(residual[i] ** 2)))}
                        for i in np.argsort(-np.sqrt(np.mean((residual / noise) ** 2, axis=1)))[:5]],
        "payloads_removed": sorted({float(p) for s in sessions for p in s.payload_kg}),
    }


def usable(sessions: list[Session]) -> bool:
    """Whether every session records measured torques for every chain joint."""
    return bool(sessions) and all(has_torques(s) for s in sessions)
