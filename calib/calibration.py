"""A fitted calibration: one result type for every kind of data, with prediction and files.

    calibration = Calibrator().fit([session])          # calib.calibrator
    calibration.predict(q, "smr1", payload_kg=2.5)     # (N, 3) m, tracker frame
    calibration.save("cal/")                           # robot.urdf, calibration.yaml, report.html, ...
    Calibration.load("cal/")                           # the same predictions, whatever it was fitted from

Learned values are plain attributes (SI units, chain order). ``chain`` is the calibrated
:class:`~rigs.kinematics.ArmModel` (placement errors and zero offsets written in, evaluated at the
joint readings); deflection (joints sag by ``compliance * tau``, a learned tip shift) is applied on
top of it by :meth:`base_T_tip` and :meth:`tip_shift`, never written into robot.urdf.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from calib.deflection.learned import Featurizer
from calib.deflection.residual_model import ResidualModel
from calib.deflection.torques import GravityTorques
from calib.io.document import read_calibration, write_calibration_files
from calib.io.report import write_report
from calib.io.urdf_export import write_urdf
from calib.model.chain import BatchKinematics
from calib.dynamics.measured import has_torques
from calib.dynamics.model import IdentifiedDynamics
from calib.model.envelope import Envelope
from calib.model.error_model import ErrorModel
from calib.model.groups import (BoardPose, CameraIntrinsics, CameraPoses, JointCompliance, JointPlacements, JointZeros,
                                ProbeFrames, Reflectors, TrackerFrames)
from calib.model.poses import PoseSet
from calib.sensors.board import CharucoBoardSpec
from capture.session import Session
from rigs.errors import InputError
from rigs.kinematics import ArmModel
from rigs.transforms import invert, transform_points


@dataclass
class Calibration:
    """A fitted (or loaded) calibration.

    ``tracker_T_base``: tracker frame per session ("s0", "s1", ...; empty for a camera-only fit);
    ``targets``: reflector offsets (3,) m in the tip frame; ``deltas`` (dof, 6), ``zero_offsets``
    (dof,) and their standard deviations; ``tip_T_probe``: 6-DoF probe mounts; ``base_T_camera``:
    camera poses (optical frame) in the base frame, ``tip_T_board`` and ``board``: the board on the
    tool, ``intrinsics``: per camera the K (and image size) the fit used, or found with
    ``fit_intrinsics`` (``fitted``: true, then also the recorded K, standard deviations and what is
    poorly determined; :meth:`camera_matrices`); ``compliance`` (dof,)
    rad/(N m) or None; ``residual_model``: a learned tip correction or None; ``payload_com`` (3,) m
    in the tip frame; ``validity``: the joint ranges the fit covered (None for a calibration written
    before envelopes were recorded); ``summary``: identifiability, residual figures, outliers, hashes (what
    calibration.yaml holds); ``deflection``: the mode and its held-out comparison.
    """

    chain: ArmModel
    joint_names: list[str]
    tracker_T_base: dict[str, np.ndarray]
    targets: dict[str, np.ndarray]
    deltas: np.ndarray
    delta_std: np.ndarray
    zero_offsets: np.ndarray
    zero_std: np.ndarray
    target_std: dict[str, np.ndarray]
    summary: dict
    source_urdf: Path | None = None  # the nominal URDF the deltas apply to (for export)
    solve: object | None = field(default=None, repr=False)  # calib.fit.solver.SolveResult of the fit
    error_model: ErrorModel | None = field(default=None, repr=False)
    history: dict = field(default_factory=dict, repr=False)  # per-unit errors for the report
    tip_T_probe: dict[str, np.ndarray] = field(default_factory=dict)
    base_T_camera: dict[str, np.ndarray] = field(default_factory=dict)
    camera_std: dict[str, np.ndarray] = field(default_factory=dict)
    tip_T_board: np.ndarray | None = None
    board_std: np.ndarray | None = None
    board: CharucoBoardSpec | None = None
    pixel_sigma: float | None = None
    intrinsics: dict[str, dict] = field(default_factory=dict)
    compliance: np.ndarray | None = None  # (dof,) rad/(N m)
    compliance_std: np.ndarray | None = None
    residual_model: ResidualModel | None = field(default=None, repr=False)
    payload_com: np.ndarray | None = None  # (3,) m, tip frame: where a payload's mass sits
    deflection: dict | None = None  # mode, held-out comparison (what calibration.yaml holds)
    validity: Envelope | None = None  # the joint ranges and payloads the fit poses covered
    # Compliance from measured torques: the arm dynamics identified from them (None: the URDF's inertials).
    torque_model: IdentifiedDynamics | None = field(default=None, repr=False)
    _serial: BatchKinematics | None = field(default=None, init=False, repr=False, compare=False)
    _torques: GravityTorques | None = field(default=None, init=False, repr=False, compare=False)
    _featurizer: Featurizer | None = field(default=None, init=False, repr=False, compare=False)

    # -- what the calibration predicts --------------------------------------------------------------
    @property
    def serial(self) -> BatchKinematics:
        if self._serial is None:
            self._serial = BatchKinematics(self.chain)
        return self._serial

    def gravity_torques(self, q: np.ndarray, payload_kg: np.ndarray | float | None = None) -> np.ndarray:
        """(N, dof) N m the joints hold at readings q (N, dof) with payloads (N,) kg at ``payload_com``:
        from the arm dynamics identified from measured torques when the fit had them, else from the
        URDF's inertials."""
        if self.torque_model is not None:
            q = np.atleast_2d(np.asarray(q, float))
            payload = np.broadcast_to(np.asarray(0.0 if payload_kg is None else payload_kg, float), (len(q),))
            return self.torque_model.predict(q, payload_kg=payload, payload_com=self.payload_com, offsets=False)
        if self._torques is None:
            self._torques = GravityTorques(self.chain, self.payload_com)
        return self._torques(q, payload_kg)

    def sagged(self, q: np.ndarray, payload_kg: np.ndarray | float | None = None) -> np.ndarray:
        """(N, dof) the joint angles the arm reaches at readings q (the readings when rigid)."""
        q = np.atleast_2d(np.asarray(q, float))
        if self.compliance is None:
            return q
        return q - self.compliance * self.gravity_torques(q, payload_kg)

    def base_T_tip(self, q: np.ndarray, payload_kg: np.ndarray | float | None = None) -> np.ndarray:
        """(N, dof) joint readings -> (N, 4, 4) tip poses in the base frame, with the joints' sag
        under ``payload_kg`` (N,) or scalar kg when the calibration holds compliances."""
        return self.serial.base_T_tip(self.sagged(q, payload_kg))

    def tip_shift(self, q: np.ndarray, payload_kg: np.ndarray | float | None = None) -> np.ndarray:
        """(N, 3) m base-frame correction of the learned residual model (zeros without one)."""
        q = np.atleast_2d(q)
        if self.residual_model is None:
            return np.zeros((len(q), 3))
        payload = np.broadcast_to(np.asarray(0.0 if payload_kg is None else payload_kg, float), (len(q),))
        return self.residual_model.predict(self.featurizer()(q, payload))[0]

    def featurizer(self) -> Featurizer:
        """The learned residual's features under this calibration's chain (kept: it caches per pose set)."""
        if self._featurizer is None:
            self._featurizer = Featurizer(self.chain, self.payload_com)
        return self._featurizer

    def envelope_warning(self, q: np.ndarray, what: str, payload_kg: np.ndarray | None = None) -> str | None:
        """One sentence when poses q (N, dof) of ``what`` (a file, a session) lie outside the
        calibration's validity envelope (or carry more payload than it saw); None otherwise."""
        return None if self.validity is None else self.validity.warning(q, what, payload_kg)

    def _sensor(self, sensor: str | None) -> str:
        if not self.tracker_T_base:
            raise InputError("the calibration has no tracker frame (it was fitted from camera images only).")
        sensor = sensor or next(iter(self.tracker_T_base))
        if sensor not in self.tracker_T_base:
            raise InputError(f"sensor {sensor!r} is not in the calibration (has {', '.join(self.tracker_T_base)}).")
        return sensor

    def predict(self, q: np.ndarray, target: str | None = None, sensor: str | None = None,
                payload_kg: np.ndarray | float | None = None):
        """Reflector positions in the tracker frame, m: (N, 3) for ``target``, else {name: (N, 3)}.

        ``payload_kg`` (N,) or scalar: the payload at each pose (0 when None), for deflection."""
        frame = self.tracker_T_base[self._sensor(sensor)]
        poses = self.base_T_tip(q, payload_kg)
        shift = self.tip_shift(q, payload_kg)
        names = [target] if target is not None else list(self.targets)
        out = {}
        for name in names:
            if name not in self.targets:
                raise InputError(f"target {name!r} is not a reflector of the calibration (has {', '.join(self.targets)}).")
            base_points = np.einsum("nij,j->ni", poses[:, :3, :3], self.targets[name]) + poses[:, :3, 3] + shift
            out[name] = transform_points(frame, base_points)
        return out[target] if target is not None else out

    def predict_probe(self, q: np.ndarray, probe: str | None = None, sensor: str | None = None,
                      payload_kg: np.ndarray | float | None = None) -> np.ndarray:
        """Poses (N, 4, 4) of a 6-DoF probe in the tracker frame, m."""
        if not self.tip_T_probe:
            raise InputError("the calibration has no 6-DoF probe (it was fitted without tracker poses).")
        probe = probe or next(iter(self.tip_T_probe))
        if probe not in self.tip_T_probe:
            raise InputError(f"probe {probe!r} is not in the calibration (has {', '.join(self.tip_T_probe)}).")
        poses = self.base_T_tip(q, payload_kg) @ self.tip_T_probe[probe]
        poses[:, :3, 3] += self.tip_shift(q, payload_kg)
        return self.tracker_T_base[self._sensor(sensor)] @ poses

    def prediction_model(self) -> tuple[ErrorModel, np.ndarray]:
        """An error model of this calibration at its values, on the calibrated chain, and its theta:
        observation blocks of any session evaluate with it (validation, cross-checks)."""
        chain = self.chain
        groups = [JointPlacements(chain.joint_names), JointZeros(chain.joint_names, self.serial.prismatic)]
        if self.tracker_T_base:
            groups.append(TrackerFrames(self.tracker_T_base))
        if self.targets:
            groups.append(Reflectors(self.targets))
        if self.tip_T_probe:
            groups.append(ProbeFrames(self.tip_T_probe))
        if self.base_T_camera:
            groups.append(CameraPoses({name: invert(pose) for name, pose in self.base_T_camera.items()}))
        fitted = self.camera_matrices()
        if fitted:
            groups.append(CameraIntrinsics(fitted))
        if self.tip_T_board is not None:
            groups.append(BoardPose(self.tip_T_board))
        if self.compliance is not None:
            groups.append(JointCompliance(chain.joint_names, self.compliance))
        model = ErrorModel(chain, groups)
        return model, model.initial_vector()

    def poses_for(self, session: Session, sensor: str = "s0") -> PoseSet:
        """A session's poses with what this calibration applies at them: the torques the joints hold
        (with compliance: the session's measured ones when it has them and the calibration was fitted
        from measured torques) and the learned tip shift (with a residual model)."""
        poses = PoseSet(session.q, session.pose_ids, session.payload_kg, sensor)
        if self.compliance is not None:
            if self.torque_model is not None and has_torques(session):  # measured: what the joints really held
                poses = poses.with_torques(self.torque_model.held_torques(session))
            else:
                poses = poses.with_torques(self.gravity_torques(session.q, session.payload_kg))
        if self.residual_model is not None:
            poses = poses.with_tip_shift(self.tip_shift(session.q, session.payload_kg))
        return poses

    def camera_matrices(self) -> dict[str, np.ndarray]:
        """Camera name -> (3, 3) K of the cameras whose intrinsics this calibration fitted (the others
        keep each session's camera_info as recorded)."""
        return {name: np.asarray(entry["K"], float) for name, entry in sorted(self.intrinsics.items())
                if entry.get("fitted")}

    @property
    def camera_summary(self) -> dict:
        """The camera figures (px) of the fit, when cameras were part of it."""
        return (self.summary.get("residuals") or {}).get("camera") or {}

    # -- files --------------------------------------------------------------------------------------
    def save(self, folder: Path, report: bool = True, previous: "Calibration | None" = None) -> None:
        """Write robot.urdf (+ meshes), calibration.yaml, uncertainty.npz, residual/ and report.html
        into an existing folder; ``previous``: the calibration this one replaces (a recalibration's
        report shows how far each link moved)."""
        folder = Path(folder)
        write_urdf(self, folder)
        write_calibration_files(self, folder)
        if report:
            write_report(self, folder / "report.html", previous)

    @classmethod
    def load(cls, folder: Path) -> "Calibration":
        """The calibration in a folder written by :meth:`save` (any kind of data)."""
        return cls(**read_calibration(Path(folder)))
