"""An unknown payload's mass and centre of mass from joint torques, given the arm's identified dynamics.

    payload = PayloadIdentifier().fit(session, dynamics)   # -> IdentifiedPayload
    payload.mass_kg, payload.com                            # kg; (3,) m in the tip frame
    payload.save("p/")                                      # payload.yaml, report.html
    IdentifiedPayload.load("p/")                            # the same payload back

What the arm's model does not explain is the payload's: ``tau - tau_arm(q) = P(q) phi`` with ``P``
the regressor of a body fixed to the tip frame (:meth:`TorqueRegressor.payload`) and ``phi`` its
parameters. At rest only ``m`` and the first moment ``m c`` act (4 unknowns); moving poses add its
rotational inertia to the fit (not reported: a data sheet gives mass and centre of mass). The fit is
weighted least squares with each joint's noise from the dynamics fit; standard deviations come
from the covariance scaled by the a-posteriori variance factor plus what the arm model's own
covariance contributes through the fit, the centre of mass's by first-order propagation through
``c = (m c) / m``. A payload the session states (``payload_kg``) is not used,
only reported beside the identified one. Refused, in one sentence: poses that do not determine the
four numbers, and a mass below zero by more than three standard deviations (the torques' sign or
the dynamics model is wrong). A mass within three standard deviations of zero is "no payload"
(both limits are the identifier's settings).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from calib.dynamics.files import payload_document, write_payload
from calib.dynamics.measured import read_torques
from calib.dynamics.model import IdentifiedDynamics
from calib.dynamics.model import design as design_columns
from capture.session import Session
from rigs.errors import InputError, setting

STATIC = 4
CONDITION_LIMIT = 1e8  # of the whitened payload design: beyond it the poses do not separate m and m c
NO_PAYLOAD_SIGMAS = 3.0


@dataclass
class IdentifiedPayload:
    """``mass_kg``, ``mass_std_kg``; ``com`` (3,) m in the tip frame and ``com_std`` (3,) (None for no
    payload); per joint the torque RMS without and with the payload; the session, the tip link."""

    mass_kg: float
    mass_std_kg: float
    com: np.ndarray | None
    com_std: np.ndarray | None
    per_joint: dict
    session: str
    tip_link: str
    poses: int
    stated_kg: list[float] = field(default_factory=list)
    no_payload_sigmas: float = NO_PAYLOAD_SIGMAS  # the identifier's setting: within it of zero is no payload

    def verdict(self) -> str:
        before = np.sqrt(np.mean([e["before_rms_nm"] ** 2 for e in self.per_joint.values()]))
        after = np.sqrt(np.mean([e["after_rms_nm"] ** 2 for e in self.per_joint.values()]))
        if self.com is None:
            return (f"No payload: the torques' excess over the arm's model is {self.mass_kg:.3g} +/- "
                    f"{self.mass_std_kg:.2g} kg, within {self.no_payload_sigmas:g} standard deviations of zero.")
        com = ", ".join(f"{v * 1e3:.1f}" for v in self.com)
        std = ", ".join(f"{v * 1e3:.1f}" for v in self.com_std)
        return (f"Payload {self.mass_kg:.4g} +/- {self.mass_std_kg:.2g} kg at ({com}) +/- ({std}) mm in "
                f"{self.tip_link}'s frame; with it the arm's model explains the joint torques to {after:.3g} N m RMS "
                f"({before:.3g} N m without it).")

    def document(self) -> dict:
        return {"verdict": self.verdict(), "mass_kg": float(self.mass_kg), "mass_std_kg": float(self.mass_std_kg),
                "com": None if self.com is None else [float(v) for v in self.com],
                "com_std": None if self.com_std is None else [float(v) for v in self.com_std],
                "frame": self.tip_link, "session": self.session, "poses": self.poses,
                "stated_payload_kg": self.stated_kg, "per_joint": self.per_joint,
                "no_payload_sigmas": self.no_payload_sigmas}

    def save(self, folder: Path, report: bool = True) -> None:
        """payload.yaml and report.html into an existing folder."""
        write_payload(self, Path(folder), report)

    @classmethod
    def load(cls, path: Path) -> "IdentifiedPayload":
        """The payload :meth:`save` wrote (a payload folder, or its payload.yaml); InputError naming the
        file and key of anything missing or of the wrong type."""
        _, _, top = payload_document(Path(path))
        mass = top.get("mass_kg", "number")  # a "no payload" result may lie a little below zero
        com = top.get("com", "vector", length=3, nullable=True)
        com_std = top.get("com_std", "vector", length=3, nullable=True)
        if (com is None) != (com_std is None):
            raise InputError(f"{top.where('com_std')} should be given exactly when 'com' is.")
        joints = top.get("per_joint", "table")
        rows = {name: joints.get(name, "table") for name in joints.data}
        per_joint = {name: {key: row.get(key, "number") for key in ("before_rms_nm", "after_rms_nm")}
                     for name, row in rows.items()}
        stated = top.get("stated_payload_kg", "vector", [])
        return cls(mass, top.get("mass_std_kg", "number"), com, com_std, per_joint, top.get("session", "str"),
                   top.get("frame", "str"), top.get("poses", "int"), [float(v) for v in stated],
                   top.get("no_payload_sigmas", "number", NO_PAYLOAD_SIGMAS))


class PayloadIdentifier:
    """Identify a payload from a session's torques with an arm's :class:`IdentifiedDynamics`.

    ``no_payload_sigmas``: a mass within this many standard deviations of zero is no payload, and one
    below zero by more is refused. ``condition_limit``: the whitened payload design's largest ratio
    of singular values; beyond it the poses do not separate the mass from its first moment.
    """

    def __init__(self, no_payload_sigmas: float = NO_PAYLOAD_SIGMAS, condition_limit: float = CONDITION_LIMIT):
        if not (np.isfinite(no_payload_sigmas) and no_payload_sigmas > 0):
            raise InputError(f"{setting('no_payload_sigmas')} should be a positive number, got {no_payload_sigmas}.")
        if not (np.isfinite(condition_limit) and condition_limit > 1):
            raise InputError(f"{setting('condition_limit')} should be a number above 1, got {condition_limit}.")
        self.no_payload_sigmas = no_payload_sigmas
        self.condition_limit = condition_limit

    def fit(self, session: Session, dynamics: IdentifiedDynamics) -> IdentifiedPayload:
        """The payload ``session``'s joint torques show beyond what ``dynamics`` (the arm's identified
        model, fitted without it) explains."""
        if session.joint_names != dynamics.joint_names:
            raise InputError(f"{session.path}: records joints {session.joint_names}, the dynamics model "
                             f"{dynamics.joint_names}.")
        reading = read_torques(session, dynamics.sign)
        if reading.moving and not dynamics.friction:
            raise InputError(f"{session.path / 'joints.csv'}: has velocities, but the dynamics model was fitted at "
                             f"rest (no friction terms); fit it from moving sessions too.")
        arm = dynamics.predict(session.q, reading.velocity, reading.acceleration)
        excess = reading.torques - arm  # (N, dof)
        columns = dynamics.regressor.payload(session.q, reading.velocity, reading.acceleration)
        if not reading.moving:
            columns = columns[:, :, :STATIC]
        weights = 1.0 / dynamics.noise
        design = (columns * weights[None, :, None]).reshape(-1, columns.shape[2])
        target = (excess * weights).reshape(-1)
        singular = np.linalg.svd(design, compute_uv=False)
        if singular[-1] <= singular[0] / self.condition_limit:
            raise InputError(f"{session.path}: its {len(session.q)} poses do not determine the payload's mass and "
                             f"centre of mass (the tip barely changes orientation); record poses that turn the "
                             f"wrist in several directions.")
        phi, *_ = np.linalg.lstsq(design, target, rcond=None)
        residual = target - design @ phi
        dof_left = max(len(target) - len(phi), 1)
        covariance = float(residual @ residual / dof_left) * np.linalg.inv(design.T @ design)
        # The arm's model is itself uncertain, and its error moves straight into the payload's
        # first moment (the payload sits on the tip body): that part of the covariance is added.
        arm_columns, _ = design_columns(dynamics.regressor, session.q, reading.velocity, reading.acceleration,
                                        dynamics.friction)
        through = np.linalg.pinv(design) @ (arm_columns * weights[None, :, None]).reshape(-1, arm_columns.shape[2])
        covariance = covariance + through @ dynamics.covariance @ through.T
        mass, mass_std = float(phi[0]), float(np.sqrt(covariance[0, 0]))
        if mass < -self.no_payload_sigmas * mass_std:
            raise InputError(f"{session.path}: the torques explain a payload of {mass:.3g} +/- {mass_std:.2g} kg, "
                             f"below zero: the torques' sign or the dynamics model is wrong for this session.")
        explained = np.einsum("ndk,k->nd", columns, phi)
        per_joint = {name: {"before_rms_nm": float(np.sqrt(np.mean(excess[:, j] ** 2))),
                            "after_rms_nm": float(np.sqrt(np.mean((excess[:, j] - explained[:, j]) ** 2)))}
                     for j, name in enumerate(dynamics.joint_names)}
        com = com_std = None
        if mass > self.no_payload_sigmas * mass_std:
            com = phi[1:4] / mass
            jacobian = np.zeros((3, len(phi)))  # d(c)/d(phi) with c = phi[1:4] / phi[0]
            jacobian[:, 0] = -phi[1:4] / mass ** 2
            jacobian[:, 1:4] = np.eye(3) / mass
            com_std = np.sqrt(np.clip(np.diag(jacobian @ covariance @ jacobian.T), 0.0, None))
        chain = dynamics.chain
        return IdentifiedPayload(mass, mass_std, com, com_std, per_joint, str(session.path),
                                 chain.model.frames[chain.tip_frame].name, len(session.q),
                                 sorted({float(v) for v in session.payload_kg}), self.no_payload_sigmas)
