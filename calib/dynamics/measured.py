"""Measured joint torques as a session records them, and the check of their sign.

A session's ``effort_<joint>`` columns (joints.csv, N m; N for a prismatic joint) are what the
drives report. Inside selfcal torques carry Pinocchio's sign: the torque the drive applies, which at
rest is the one that holds the arm up. Many drives report the opposite; some scale differently from
the URDF's inertials by tens of percent. So before measured torques are used their correlation with
the URDF's own torques at the same poses is checked (per-joint means removed: sensors have
offsets): a negative correlation means the drive's convention is the opposite one, and the user
says so with ``--flip-torque-sign`` (the readings are then multiplied by -1), never silently.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from capture.session import Session
from rigs.errors import InputError, setting

FLIP_FLAG = "--flip-torque-sign"
# A joint whose modelled torque varies by less than this fraction of the largest variation says
# nothing about the sign (a vertical first axis at rest holds no gravity torque).
QUIET_FRACTION = 0.01


@dataclass
class TorqueReadings:
    """One session's torque recording in SI and Pinocchio's sign: ``torques`` (N, dof) N m,
    ``velocity`` and ``acceleration`` (N, dof) rad/s, rad/s^2 or None (the poses are at rest)."""

    session: Session
    torques: np.ndarray
    velocity: np.ndarray | None
    acceleration: np.ndarray | None

    @property
    def moving(self) -> bool:
        return self.velocity is not None


def has_torques(session: Session) -> bool:
    """Whether joints.csv has an ``effort_<joint>`` column for every chain joint."""
    return all(f"effort_{name}" in session.extra for name in session.joint_names)


def read_torques(session: Session, sign: int = 1) -> TorqueReadings:
    """The session's measured torques times ``sign`` (+1: as recorded; -1: flipped), with its
    velocities and accelerations when joints.csv has them. InputError naming what is missing."""
    efforts = session.joint_efforts
    joints = session.path / "joints.csv"
    if efforts is None:
        raise InputError(f"{joints}: has no measured joint torques (effort_<joint> columns, N m).")
    missing = [name for j, name in enumerate(session.joint_names) if np.isnan(efforts[:, j]).all()]
    if missing:
        raise InputError(f"{joints}: column 'effort_{missing[0]}' is missing; measured torques need one column per "
                         f"chain joint.")
    velocity, acceleration = session.joint_velocities, session.joint_accelerations
    for values, prefix in ((velocity, "velocity_"), (acceleration, "acceleration_")):
        if values is not None and np.isnan(values).any():
            name = session.joint_names[int(np.flatnonzero(np.isnan(values).all(axis=0))[0])]
            raise InputError(f"{joints}: column '{prefix}{name}' is missing; velocities and accelerations need one "
                             f"column per chain joint.")
    if (velocity is None) != (acceleration is None):
        have, lack = ("velocity", "acceleration") if velocity is not None else ("acceleration", "velocity")
        raise InputError(f"{joints}: has {have}_<joint> columns but no {lack}_<joint> columns; the moving terms of "
                         f"the torques need both (rad/s and rad/s^2).")
    return TorqueReadings(session, float(sign) * efforts, velocity, acceleration)


def correlation(measured: np.ndarray, modelled: np.ndarray) -> float | None:
    """Pooled correlation of measured and modelled torques (N, dof), each joint's mean removed, over
    the joints whose modelled torque varies; None when the model's torques do not vary (no inertials)."""
    spread = modelled.std(axis=0)
    if not len(modelled) or spread.max(initial=0.0) <= 1e-9:
        return None
    joints = spread > QUIET_FRACTION * spread.max()
    a = (measured - measured.mean(axis=0))[:, joints].ravel()
    b = (modelled - modelled.mean(axis=0))[:, joints].ravel()
    denominator = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b / denominator) if denominator > 0 else None


def check_sign(measured: np.ndarray, modelled: np.ndarray, where: str, flipped: bool, model_words: str) -> float | None:
    """The correlation of :func:`correlation`; InputError with a sentence when it is negative.

    ``where``: the session (for the message); ``flipped``: whether the readings were already
    multiplied by -1; ``model_words``: what the modelled torques come from (for the message)."""
    r = correlation(measured, modelled)
    if r is not None and r < 0:
        if flipped:
            raise InputError(f"{where}: the measured joint torques, flipped by {setting('flip_torque_sign')}, correlate "
                             f"negatively (r = {r:.2f}) with {model_words}: the drive already reports Pinocchio's sign; "
                             f"leave out {setting('flip_torque_sign')}.")
        raise InputError(f"{where}: the measured joint torques correlate negatively (r = {r:.2f}) with {model_words}: "
                         f"the drive reports the opposite sign of the torque that holds the arm up; pass "
                         f"{setting('flip_torque_sign')} to use them.")
    return r
