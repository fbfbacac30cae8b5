"""The kinematic error model, written on the URDF itself.

Parameters (one flat vector ``theta``, SI units, layout in :class:`ErrorModel.names`):

- per movable chain joint j: a 6-DoF right perturbation of its URDF origin,
  ``parent_T_joint = parent_T_joint_nominal @ exp6(delta_j)``, ``delta_j = (dx, dy, dz, wx, wy, wz)``
  in m and rad (Pinocchio's twist order), and a zero offset ``zero_j`` (rad, m for prismatic
  joints) added to the joint reading. For a revolute joint that is exactly
  ``parent_T_joint_nominal @ exp6(delta_j) @ Rot(axis, zero_j)``, the simulated truth's convention;
- per sensor frame s (one per tracker session): ``tracker_T_base = reference_s @ exp6(xi_s)``;
- per reflector k: its offset ``p_k`` (3,) in the tip frame, m (absolute, not a correction).

``kind="offsets"`` frees only zero offsets, sensor frames and reflectors; ``kind="full"`` frees
everything. Fixed parameters stay in the vector (at their value) so every model shares one layout.

The derivatives are analytic: Pinocchio's frame kinematic regressor gives the tip's LOCAL twist
per right perturbation of each joint placement (FACTS.md), chained through exp6's right Jacobian.
Room is left for per-joint extra terms (issue 4, compliance): a term adds ``c_j * tau_j(q)`` to the
joint reading, so its column is the zero offset's column times ``tau_j(q)`` (see ``joint_columns``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pinocchio as pin

from rigs.errors import InputError
from rigs.kinematics import ChainModel
from rigs.transforms import exp6

TWIST_AXES = ("x", "y", "z", "rx", "ry", "rz")


@dataclass
class ParameterInfo:
    """One entry of the parameter vector."""

    name: str  # e.g. "lbr_iiwa_joint_3.delta.z", "lbr_iiwa_joint_3.zero", "tracker.s0.rx", "target.smr1.y"
    group: str  # "delta", "zero", "sensor", "target" (or an extension's own)
    owner: str  # joint name, sensor name or target name
    component: int  # index inside the owner's block
    unit: str  # "m" or "rad"


@dataclass
class KinematicState:
    """A parameter vector turned into things one can evaluate: placements, zero offsets, frames."""

    chain: ChainModel  # Pinocchio model with the perturbed joint placements written in
    deltas: np.ndarray  # (dof, 6) placement perturbations
    zero_offsets: np.ndarray  # (dof,)
    tracker_T_base: dict[str, np.ndarray]  # sensor name -> (4, 4)
    targets: dict[str, np.ndarray]  # name -> (3,) m, tip frame


@dataclass
class ErrorModel:
    """Parameter layout and evaluation for a chain, a set of sensor frames and a set of reflectors.

    ``chain``: nominal :class:`ChainModel`; ``sensors``: names of the tracker frames (one per session
    with tracker data); ``target_names``: reflectors; ``reference_tracker_T_base``: sensor name ->
    (4, 4) the exponential coordinates ``xi`` are taken around (from the initialisation).
    """

    chain: ChainModel
    sensors: list[str]
    target_names: list[str]
    reference_tracker_T_base: dict[str, np.ndarray]
    kind: str = "full"
    names: list[ParameterInfo] = field(init=False)
    # 6-DoF probes (issue 9, calib/observations_pose.py): name -> (4, 4) reference; the fitted probe
    # frame is ``tip_T_probe = reference @ exp6(eta)``, eta (6,) after the reflectors in theta.
    reference_tip_T_probe: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in ("full", "offsets"):
            raise InputError(f"--model must be 'full' or 'offsets', got {self.kind!r}.")
        names = []
        for joint in self.chain.joint_names:
            for c, label in enumerate(TWIST_AXES):
                names.append(ParameterInfo(f"{joint}.delta.{label}", "delta", joint, c, "m" if c < 3 else "rad"))
        for joint in self.chain.joint_names:
            names.append(ParameterInfo(f"{joint}.zero", "zero", joint, 0, "m" if self._prismatic(joint) else "rad"))
        for sensor in self.sensors:
            for c, label in enumerate(TWIST_AXES):
                names.append(ParameterInfo(f"tracker_T_base.{sensor}.{label}", "sensor", sensor, c, "m" if c < 3 else "rad"))
        for target in self.target_names:
            for c, label in enumerate("xyz"):
                names.append(ParameterInfo(f"target.{target}.{label}", "target", target, c, "m"))
        self.names = names
        dof = self.chain.dof
        self.delta_slice = slice(0, 6 * dof)
        self.zero_slice = slice(6 * dof, 7 * dof)
        start = 7 * dof
        self.sensor_slices = {s: slice(start + 6 * i, start + 6 * i + 6) for i, s in enumerate(self.sensors)}
        start += 6 * len(self.sensors)
        self.target_slices = {t: slice(start + 3 * i, start + 3 * i + 3) for i, t in enumerate(self.target_names)}
        start = len(self.names)
        self.probe_slices = {p: slice(start + 6 * i, start + 6 * i + 6) for i, p in enumerate(self.reference_tip_T_probe)}
        for probe in self.reference_tip_T_probe:
            for c, label in enumerate(TWIST_AXES):
                self.names.append(ParameterInfo(f"tip_T_probe.{probe}.{label}", "probe", probe, c, "m" if c < 3 else "rad"))
        self._nominal_placements = [self.chain.model.jointPlacements[j].copy() for j in self.chain.joint_ids]
        self._motion_subspace = np.array([self._subspace(j) for j in self.chain.joint_names])  # (dof, 6)

    # -- layout -----------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.names)

    @property
    def free(self) -> np.ndarray:
        """(P,) bool: parameters this model fits."""
        groups = np.array([p.group for p in self.names])
        if self.kind == "full":
            return np.ones(self.size, dtype=bool)
        return groups != "delta"

    def _prismatic(self, joint: str) -> bool:
        model = self.chain.model
        return model.joints[model.getJointId(joint)].shortname().startswith("JointModelP")

    def _subspace(self, joint: str) -> np.ndarray:
        """Twist (6,) of a unit joint motion in the joint frame."""
        axis = self.chain.axes[self.chain.joint_names.index(joint)]
        return np.concatenate([axis, np.zeros(3)]) if self._prismatic(joint) else np.concatenate([np.zeros(3), axis])

    def initial_vector(self, targets: dict[str, np.ndarray]) -> np.ndarray:
        """theta at the nominal URDF, the reference sensor frames and the given reflector offsets."""
        theta = np.zeros(self.size)
        for name, xyz in targets.items():
            theta[self.target_slices[name]] = xyz
        return theta

    # -- evaluation -------------------------------------------------------------------------------
    def state(self, theta: np.ndarray) -> KinematicState:
        chain = self.chain.copy()
        deltas = theta[self.delta_slice].reshape(-1, 6)
        for joint_id, nominal, delta in zip(chain.joint_ids, self._nominal_placements, deltas):
            chain.model.jointPlacements[joint_id] = nominal * pin.exp6(pin.Motion(delta))
        frames = {s: self.reference_tracker_T_base[s] @ exp6(theta[sl]) for s, sl in self.sensor_slices.items()}
        targets = {t: theta[sl].copy() for t, sl in self.target_slices.items()}
        return KinematicState(chain, deltas.copy(), theta[self.zero_slice].copy(), frames, targets)

    def tip_poses_and_columns(self, state: KinematicState, q: np.ndarray,
                              extra_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Tip poses and their derivatives for joint readings q (N, dof).

        Returns ``base_T_tip`` (N, 4, 4), ``delta_columns`` (N, 6, 6*dof): the tip's LOCAL twist per
        unit of each joint's delta (exp6 right Jacobian included), and ``joint_columns`` (N, 6, dof):
        the tip's LOCAL twist per unit of each joint reading (the zero offset's column; an extra
        per-joint term c_j * g_j(q) has column ``joint_columns[:, :, j] * g_j(q)``).
        ``extra_q`` (N, dof) is added to the joint readings (for per-joint extensions).
        """
        chain = state.chain
        model, data = chain.model, chain.model.createData()
        dof = chain.dof
        q_eff = np.atleast_2d(q) + state.zero_offsets + (0.0 if extra_q is None else extra_q)
        # Placement derivative: nominal * exp6(delta + d) = placement * exp6(Jexp6(delta) d) (right Jacobian).
        right_jacobians = [np.asarray(pin.Jexp6(pin.Motion(model_delta))) for model_delta in state.deltas]
        poses = np.empty((len(q_eff), 4, 4))
        delta_columns = np.empty((len(q_eff), 6, 6 * dof))
        joint_columns = np.empty((len(q_eff), 6, dof))
        blocks = [slice(6 * (j - 1), 6 * j) for j in chain.joint_ids]
        for n, qn in enumerate(q_eff):
            pin.framesForwardKinematics(model, data, chain.full_q(qn))
            base = data.oMf[chain.base_frame]
            poses[n] = base.actInv(data.oMf[chain.tip_frame]).homogeneous
            regressor = pin.computeFrameKinematicRegressor(model, data, chain.tip_frame, pin.LOCAL)
            for i, block in enumerate(blocks):
                columns = regressor[:, block]
                delta_columns[n, :, 6 * i:6 * i + 6] = columns @ right_jacobians[i]
                # placement * J(q) * exp(S dq) = placement * exp(S dq) * J(q): a joint's motion
                # commutes with motion along its own axis, so the reading's column is the block times S.
                joint_columns[n, :, i] = columns @ self._motion_subspace[i]
        return poses, delta_columns, joint_columns
