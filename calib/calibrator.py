"""One calibrator for every measurement: ``Calibrator(...).fit(sessions) -> Calibration``.

    calibration = Calibrator(deflection="auto").fit([session_a, session_b])
    calibration.save("cal/")

The sessions' files decide what is fitted, never a code path per kind: every sensor a session holds
(``calib.sensors.registry``: tracker points, 6-DoF probe poses, board corners in camera images)
becomes observation blocks; the groups the blocks read (tracker frame per session, reflector
offsets, probe mount, camera poses, board pose) join the arm's own (joint placements, zero
offsets, and joint compliance when asked) in one error model; one robust solver fits them, one
identifiability analysis and one outlier rule apply. Deflection works the same with any sensor:
the compliance group acts on the joint readings every block reads, a learned residual on the tip
every block sees.

Held-out evidence: with ``holdout`` > 0 a random fraction of the poses is kept out of the fit and
the delivered calibration is fitted on the rest; with ``holdout`` = 0 the delivered calibration is
fitted on every (inlier) pose and its held-out error comes from k-fold cross-validation by pose
(``folds``; leave-one-pose-out below 40 poses, else 5). ``deflection="auto"`` compares its four
models on the same evidence and delivers the simplest that is within 2 % of the best.
A fit reads the session's measurement files, session.json and robot.urdf, never ``truth/``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pinocchio as pin

from calib.calibration import Calibration
from calib.deflection import modes
from calib.deflection.learned import corrected, training_set
from calib.deflection.residual_model import ResidualConfig, ResidualEnsemble
from calib.deflection.torques import GravityTorques
from calib.dynamics.identification import ArmDynamics
from calib.dynamics.measured import has_torques
from calib.dynamics.model import IdentifiedDynamics
from calib.fit.physical import arm_reach, physical_problems, tool_disagreement, tool_points
from calib.fit.checks import check_pose_set, spread_poses, structural_identifiability
from calib.fit.identifiability import analyse
from calib.fit.solver import RobustSolver, SolveResult, blas_single_thread, fold_solutions, robust_sigma, unit_norms
from calib.fit.splits import describe_folds, fold_count, fold_rows, holdout_rows
from calib.model.chain import BatchKinematics
from calib.model.envelope import STILL_SPAN, Envelope, joint_list
from calib.model.error_model import ErrorModel
from calib.model.groups import (BoardPose, CameraIntrinsics, CameraPoses, JointCompliance, JointPlacements, JointZeros,
                                ProbeFrames, Reflectors, TrackerFrames)
from calib.model.parameters import FrameGroup
from calib.model.poses import PoseSet
from calib.sensors.blocks import evaluate, keep_units, stack, unit_count, without_labels
from calib.sensors.registry import BY_NAME, SENSORS
from calib.sensors.sensor import Prepared, StartValues, join_errors
from capture.session import Session, check_same_robot, load_session
from rigs.errors import InputError, setting
from rigs.kinematics import ArmModel
from rigs.transforms import invert

NOISE_ROUNDS = 2  # estimate-and-refit rounds for noise the data does not state (the second changes < 1 %)
# A joint whose torque never reaches this fraction of the largest joint torque in the data (a vertical
# first axis, a wrist turning about the payload's axis) cannot show its compliance: it stays 0.
TORQUELESS_FRACTION = 1e-3
MEASURED_TORQUE_SNR = 10.0  # a joint's measured torque must vary by this many noise deviations to show its sag
PER_SESSION_FRAMES = ("tracker", "tool")  # what --per-session may give each session of its own
MIN_LEARNED_POSES = 40  # auto tries a learned residual only where 5-fold evidence is possible
# Gauss-Newton steps that take the nominal arm's frames from their start (a registration, or a robust
# fit that saw the outliers too) to the plain least squares of every inlier pose, before its folds.
NOMINAL_SETTLE_STEPS = 3


def data_hash(sessions: list[Session]) -> str:
    """sha256 over the files a fit reads, session by session (truth/ excluded)."""
    digest = hashlib.sha256()
    for session in sessions:
        paths = [session.path / name for name in ("session.json", "robot.urdf", "joints.csv")]
        if session.manifest["robot"].get("flange_poses"):  # a hand-eye session's reported flange poses
            paths.append(session.path / session.manifest["robot"]["flange_poses"])
        for sensor in SENSORS:
            if sensor.present(session):
                paths += sensor.files(session)
        for path in paths:
            if path.is_file():
                digest.update(path.relative_to(session.path).as_posix().encode())
                digest.update(path.read_bytes())
    return "sha256:" + digest.hexdigest()


def calibrated_chain(chain: ArmModel, model: ErrorModel, deltas: np.ndarray, zeros: np.ndarray) -> ArmModel:
    """The chain with ``nominal @ exp6(delta) @ exp6(S * zero)`` written into every placement."""
    out = chain.copy()
    for i, joint_id in enumerate(out.joint_ids):
        nominal = chain.model.jointPlacements[joint_id]
        out.model.jointPlacements[joint_id] = (nominal * pin.exp6(pin.Motion(np.asarray(deltas[i], float)))
                                               * pin.exp6(pin.Motion(model.serial.subspace[i] * float(zeros[i]))))
    return out


@dataclass
class Problem:
    """What a fit prepares once: the sessions, the nominal chain, their pose sets, the split, the
    sensors' prepared data (per sensor name: one per session holding it)."""

    sessions: list[Session]
    chain: ArmModel
    poses: list[PoseSet]
    fit_rows: list[np.ndarray]
    held_rows: list[np.ndarray]
    prepared: dict[str, list[Prepared]]
    start_chain: ArmModel
    start_targets: dict[str, np.ndarray]
    envelope: Envelope
    torque_model: IdentifiedDynamics | None  # measured torques: the arm dynamics identified from them
    # Start values, the frames-first fit and the pose-set check do not depend on the deflection
    # model: the first geometric fit keeps them for the second.
    start: tuple | None = None

    @property
    def sensor_names(self) -> list[str]:
        return [name for name in BY_NAME if name in self.prepared]

    @property
    def primary(self) -> str:
        return self.sensor_names[0]

    def blocks(self, rows: list[np.ndarray] | None) -> dict[str, list]:
        """Per sensor: blocks of pose rows ``rows`` per session (all rows when None)."""
        out = {}
        for name in self.sensor_names:
            sensor = BY_NAME[name]
            out[name] = [b for item in self.prepared[name]
                         for b in sensor.blocks(item, None if rows is None else rows[item.index])]
        return out


@dataclass
class GeometryFit:
    """One geometric fit (rigid or compliant): its model, start, solution, and the blocks of the
    fit poses (all units, before outliers) and of the held-out poses, per sensor."""

    model: ErrorModel
    theta0: np.ndarray
    result: SolveResult
    fit_blocks: dict[str, list]
    held_blocks: dict[str, list]
    condition_ratio: float | None
    noise: dict[str, dict] = field(default_factory=dict)
    hand_eye_rms_px: float | None = None

    @property
    def theta(self) -> np.ndarray:
        return self.result.theta

    @property
    def outlier_labels(self) -> set[str]:
        return {o.label for o in self.result.outliers}

    def inliers(self, blocks: dict[str, list]) -> dict[str, list]:
        return {name: without_labels(items, self.outlier_labels) for name, items in blocks.items()}


@dataclass
class Evidence:
    """Held-out errors of one candidate model: per sensor the pooled errors (tuple of arrays), and
    the primary sensor's RMS per fold."""

    errors: dict[str, tuple]
    fold_rms: list[float]
    fold_poses: list[int]


class Calibrator:
    """Kinematic calibration from any mix of tracker points, 6-DoF probe poses and board images.

    ``model``: "full" (6-DoF placement errors and zero offsets of every chain joint) or "offsets"
    (zero offsets only); both fit the sensors' frames. ``deflection``: none, compliance, learned,
    both or auto. ``holdout``: fraction of poses kept out of the fit (0: fit every pose and
    cross-validate); ``folds``: cross-validation folds (None: leave-one-pose-out below 40 poses,
    else 5); ``seed``: the hold-out draw and the folds. ``outlier_threshold``: units beyond this
    many robust standard deviations are flagged. ``tip_link`` overrides the sessions' tip link;
    ``pixel_sigma`` the board corners' noise (px; default from per-image PnP). ``fit_intrinsics``:
    fit every camera's fx, fy, cx, cy in the same fit (default: camera_info's K as recorded); the
    result says which of them the data leave poorly determined. ``residual``: the
    learned ensemble's settings. ``require_full``: refuse
    poses that do not determine every combination the arm allows (joints that did not move, a
    condition number far above well spread poses'); by default such data are fitted along what
    they determine, the rest keeps its nominal value and the summary says so in sentences.
    ``per_session``: frames each session gets its own: "tracker" (its placement; every session's
    tracker is placed on its own in any case, since a tracker set up again always moves) and "tool"
    (its reflectors or probe: a marker remounted between sessions); the arm is fitted once. Without
    "tool", sessions whose tools disagree beyond their scatter are refused with a sentence.
    ``torques``: what the joints hold, for compliance: "measured" (the sessions' ``effort_<joint>``
    columns, their sign checked against the URDF's gravity torques, ``flip_torque_sign`` for drives
    with the opposite convention; an arm dynamics model identified from them predicts torques where
    none are measured), "model" (the URDF's inertials and the payload) or "auto" (measured when
    every session has them).
    """

    def __init__(self, model: str = "full", deflection: str = "auto", holdout: float = 0.0, folds: int | None = None,
                 seed: int = 0, outlier_threshold: float = 5.0, tip_link: str | None = None,
                 pixel_sigma: float | None = None, residual: ResidualConfig | None = None, jacobian: str = "analytic",
                 require_full: bool = False, torques: str = "auto", flip_torque_sign: bool = False,
                 fit_intrinsics: bool = False, per_session: tuple[str, ...] = ()):
        self.model = model
        self.require_full = require_full
        self.torques = torques
        self.flip_torque_sign = flip_torque_sign
        self.deflection = deflection
        self.holdout = holdout
        self.folds = folds
        self.seed = seed
        self.outlier_threshold = outlier_threshold
        self.tip_link = tip_link
        self.pixel_sigma = pixel_sigma
        self.residual = residual
        self.jacobian = jacobian
        # Run-time hooks: set by each fit, not settings.
        self._progress: Callable[[str], None] = lambda message: None
        self._previous: Calibration | None = None
        self.fit_intrinsics = fit_intrinsics
        self.per_session = tuple(per_session)
        self._check_options()  # a bad setting is refused here, before any session is read

    # -- the fit ------------------------------------------------------------------------------------
    def fit(self, sessions: list[Session | Path], progress: Callable[[str], None] | None = None,
            previous: Calibration | None = None) -> Calibration:
        """Fit from sessions (folders or loaded :class:`Session`) of one robot. ``progress``: told
        each stage's name as it starts. ``previous``: recalibration, start from this calibration's
        arm and reflectors and move only along what the new data identifies."""
        self._progress = progress or (lambda message: None)
        self._previous = previous
        problem = self._problem(sessions)
        auto = self.deflection == "auto"
        wanted = modes.MODES if auto else (self.deflection,)
        wanted, notes = self._check_torques(problem, wanted)
        geometries = {}
        for geometry in dict.fromkeys(modes.geometry_of(m) for m in wanted):
            self._progress(f"{'compliance' if geometry == 'compliance' else 'rigid'} fit")
            try:
                geometries[geometry] = self._geometry(problem, compliance=geometry == "compliance")
            except InputError as error:
                # auto never turns a converging rigid fit into a failure: a compliance fit the data
                # cannot carry is left out with the reason.
                if not auto or geometry != "compliance" or "none" not in geometries:
                    raise
                dropped = tuple(m for m in wanted if modes.geometry_of(m) == "compliance")
                notes.update({m: f"not tried: the compliance fit failed ({error})" for m in dropped})
                wanted = tuple(m for m in wanted if m not in dropped)
        if auto and self.holdout == 0 and self._inlier_poses(geometries["none"]) < MIN_LEARNED_POSES:
            for mode in ("learned", "both"):  # too few poses to learn a residual honestly
                notes[mode] = f"not tried: a learned residual needs at least {MIN_LEARNED_POSES} poses"
            wanted = tuple(m for m in wanted if not modes.uses_residual(m))
        fits = {mode: self._calibration(problem, geometries[modes.geometry_of(mode)]) for mode in wanted}
        # A fixed hold-out judges the delivered ensembles themselves, and so does the screening
        # below; folds train their own.
        self._learn(problem, geometries, fits, [mode for mode in wanted if modes.uses_residual(mode)
                                                and (self.holdout > 0 or auto or mode == self.deflection)])
        judged = wanted
        if auto and self.holdout == 0:
            judged, screened = self._screen(fits, wanted)
            notes.update(screened)
        evidence = self._evidence(problem, geometries, fits, judged)
        primary = BY_NAME[problem.primary]
        rms = {mode: _rms(evidence[mode].errors.get(problem.primary)) for mode in judged}
        rms = {mode: value for mode, value in rms.items() if value is not None}
        chosen = modes.choose(rms) if auto and rms else wanted[0]
        if modes.uses_residual(chosen) and fits[chosen].residual_model is None:
            self._learn(problem, geometries, fits, [chosen])
        self.candidates_ = fits  # every model fitted for the choice (benchmarks compare them)
        calibration = fits[chosen]
        self._held_out_figures(problem, geometries[modes.geometry_of(chosen)], calibration, evidence[chosen])
        table = {}
        for mode in modes.MODES:
            if mode in rms:
                spread = evidence[mode].fold_rms
                table[mode] = dict(primary.figures_from(evidence[mode].errors[problem.primary]),
                                   fold_rms_spread=float(np.std(spread)) if len(spread) > 1 else None)
            elif mode in notes:
                table[mode] = {"note": notes[mode]}
        calibration.deflection = {"mode": chosen, "requested": self.deflection, "heldout_comparison": table,
                                  "auto_tolerance": modes.AUTO_TOLERANCE if auto else None,
                                  "evidence": calibration.summary["residuals"]["validation"]["description"],
                                  "unit": primary.unit}
        return calibration

    @staticmethod
    def _screen(fits: dict[str, Calibration], wanted: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, str]]:
        """The candidates worth cross-validating, and a note for the others.

        A learned residual that does not improve its base model by the choice's tolerance even on
        the poses it was trained on cannot earn its place on poses it has not seen (a model's
        error on its own training data is the optimistic one), so it is not cross-validated; its
        in-sample figures say why."""
        judged, notes = [], {}
        limit = modes.AUTO_TOLERANCE / (1.0 + modes.AUTO_TOLERANCE)
        for mode in wanted:
            if modes.uses_residual(mode):
                unit = fits[mode].summary["residuals"]["unit"]
                learned = fits[mode].summary["residuals"]["fit"][f"rms_{unit}"]
                base = fits[modes.geometry_of(mode)].summary["residuals"]["fit"][f"rms_{unit}"]
                gain = 1.0 - learned / base
                if gain < limit:
                    notes[mode] = (f"not cross-validated: on its own training poses it improves "
                                   f"{modes.geometry_of(mode)} by {100 * gain:.2f} % ({base:.4g} -> {learned:.4g} "
                                   f"{unit}), less than the {100 * modes.AUTO_TOLERANCE:g} % it would need")
                    continue
            judged.append(mode)
        return tuple(judged), notes

    def _check_options(self) -> None:
        if self.model not in ("full", "offsets"):
            raise InputError(f"{setting('model')} must be 'full' or 'offsets', got {self.model!r}.")
        modes.check_mode(self.deflection)
        if self.torques not in ("auto", "measured", "model"):
            raise InputError(f"{setting('torques')} must be 'auto', 'measured' or 'model', got {self.torques!r}.")
        if not 0.0 <= self.holdout < 1.0:
            raise InputError(f"{setting('holdout')} must be in [0, 1), got {self.holdout}.")
        if self.folds is not None and int(self.folds) < 2:
            raise InputError(f"{setting('folds')} must be at least 2, got {self.folds}.")
        unknown = [name for name in self.per_session if name not in PER_SESSION_FRAMES]
        if unknown:
            raise InputError(f"{setting('per_session')} takes {' and '.join(PER_SESSION_FRAMES)}, got {unknown[0]!r}.")
        if self.pixel_sigma is not None and not self.pixel_sigma > 0:
            raise InputError(f"{setting('pixel_sigma')} must be positive, got {self.pixel_sigma}.")

    def _problem(self, sessions) -> Problem:
        if not sessions:
            raise InputError("give at least one session to calibrate from.")
        sessions = [s if isinstance(s, Session) else load_session(Path(s)) for s in sessions]
        check_same_robot(sessions)
        if self.per_session and len(sessions) < 2:
            raise InputError(f"{setting('per_session')} {','.join(self.per_session)} gives each session its own frames, "
                             f"and {sessions[0].path} is the only session; calibrate it without "
                             f"{setting('per_session')}.")
        if self.fit_intrinsics and not any(BY_NAME["board_corners"].present(s) for s in sessions):
            names = ", ".join(str(s.path) for s in sessions)
            raise InputError(f"{setting('fit_intrinsics')} fits the cameras' focal lengths and principal points to "
                             f"images of the board on the flange, but {names} {'has' if len(sessions) == 1 else 'have'} "
                             f"no camera images of a board (cameras/ and sensors.board in session.json); calibrate "
                             f"without it.")
        first = sessions[0]
        tip_link = self.tip_link or first.tip_link
        chain = ArmModel.from_urdf(first.urdf_path, first.base_link, tip_link)
        if chain.joint_names != first.joint_names:
            raise InputError(f"tip_link {tip_link!r}: its chain from {first.base_link!r} moves joints {chain.joint_names}, "
                             f"but {first.path} records {first.joint_names}; the sensors sit on the recorded tip "
                             f"{first.tip_link!r}, so calibrate to that link.")
        previous = self._previous
        if previous is not None and list(previous.joint_names) != list(chain.joint_names):
            raise InputError(f"the previous calibration is of another robot (joints {list(previous.joint_names)}), "
                             f"{first.path} records {list(chain.joint_names)}.")
        start_chain = previous.chain if previous is not None else chain
        fit_rows, held_rows = holdout_rows([len(s.pose_ids) for s in sessions], self.holdout, self.seed)
        torque_model = self._torque_model(sessions, chain)
        poses = []
        for i, session in enumerate(sessions):
            if torque_model is not None:
                torques = torque_model.held_torques(session)
            else:
                torques = GravityTorques(chain, session.payload_com)(session.q, session.payload_kg)
            poses.append(PoseSet(session.q, session.pose_ids, session.payload_kg, f"s{i}", torques=torques))
        prepared: dict[str, list[Prepared]] = {}
        for i, session in enumerate(sessions):
            present = [sensor for sensor in SENSORS if sensor.present(session)]
            if not present:
                raise InputError(f"{session.path}: has no tracker points (tracker.csv), tracker poses "
                                 f"(tracker_poses.csv) or board images; nothing to calibrate against.")
            for sensor in present:
                if sensor.name == "board_corners":
                    self._progress("detecting the board")
                item = sensor.prepare(session, i, poses[i], fit_rows[i], start_chain, self)
                if "tool" in self.per_session and sensor.name in ("tracker_points", "tracker_poses"):
                    item.tool = f"s{i}"
                prepared.setdefault(sensor.name, []).append(item)
        if "board_corners" in prepared:
            items = prepared["board_corners"]
            BY_NAME["board_corners"].finish(items, [fit_rows[p.index] for p in items],
                                            [BatchKinematics(start_chain).base_T_tip(p.session.q) for p in items],
                                            self.pixel_sigma, np.random.default_rng(self.seed))
        start_targets = dict(previous.targets) if previous is not None else {}
        envelope = Envelope.of(np.concatenate([s.q[rows] for s, rows in zip(sessions, fit_rows)]),
                               np.concatenate([s.payload_kg[rows] for s, rows in zip(sessions, fit_rows)]),
                               chain.joint_names, BatchKinematics(chain).prismatic)
        if self.require_full and envelope.still:
            raise InputError(f"{setting('require_full')}: {joint_list(envelope.still)} did not move (readings span "
                             f"under {np.degrees(STILL_SPAN):g} deg) in {', '.join(str(s.path) for s in sessions)}; "
                             f"record poses that move every joint, or leave out {setting('require_full')} to fit what "
                             f"these poses determine.")
        return Problem(sessions, chain, poses, fit_rows, held_rows, prepared, start_chain, start_targets, envelope,
                       torque_model)

    def _torque_model(self, sessions: list[Session], chain: ArmModel) -> IdentifiedDynamics | None:
        """The arm dynamics identified from the sessions' measured torques, or None to use the URDF's."""
        measured = all(has_torques(s) for s in sessions)
        if self.torques == "measured" and not measured:
            lacking = next(s for s in sessions if not has_torques(s))
            raise InputError(f"{lacking.path / 'joints.csv'}: {setting('torques')} measured needs an effort_<joint> "
                             f"column (N m) for every chain joint.")
        wants_compliance = self.deflection == "auto" or modes.geometry_of(self.deflection) == "compliance"
        if self.torques == "model" or not measured or not wants_compliance:
            return None
        self._progress("identifying the arm's gravity torques from the measured ones")
        return ArmDynamics(flip_sign=self.flip_torque_sign, friction="none",
                           tip_link=self.tip_link).fit(sessions)

    def _check_torques(self, problem: Problem, wanted: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, str]]:
        """Compliance needs torques: a URDF without inertials and no measured torques gives none,
        so compliance is refused when asked for and not tried by auto (with a note)."""
        if problem.torque_model is not None or not any(modes.geometry_of(m) == "compliance" for m in wanted):
            return wanted, {}
        q = np.concatenate([s.q for s in problem.sessions])
        arm = GravityTorques(problem.chain, problem.sessions[0].payload_com)(q, 0.0)
        if np.abs(arm).max(initial=0.0) > 1e-6:
            return wanted, {}
        urdf = problem.sessions[0].urdf_path
        if self.deflection != "auto":
            raise InputError(f"{urdf}: has no link inertials, so the arm's gravity torques are zero and joint "
                             f"compliance cannot be fitted; record the joint torques (effort_<joint> columns in "
                             f"joints.csv) or choose {setting('deflection')} none or learned.")
        note = "not tried: the URDF has no link inertials and the sessions no measured torques"
        kept = tuple(m for m in wanted if modes.geometry_of(m) != "compliance")
        return kept, {m: note for m in wanted if m not in kept}

    def _groups(self, problem: Problem, start: StartValues, compliance: bool) -> list:
        chain, previous = problem.chain, self._previous
        # A joint that did not move: its zero offset and placement are a constant transform the
        # reflectors (or the next moving joint's placement) absorb, so they keep their start values.
        still = ~problem.envelope.moved
        groups = [JointPlacements(chain.joint_names, None if previous is None else np.asarray(previous.deltas).ravel(),
                                  fixed=still),
                  JointZeros(chain.joint_names, ErrorModel.for_sensors(chain).serial.prismatic,
                             None if previous is None else previous.zero_offsets, fixed=still)]
        if start.tracker_T_base:
            groups.append(TrackerFrames(start.tracker_T_base))
        if start.targets:
            groups.append(Reflectors({name: start.targets[name] for name in sorted(start.targets)}))
        if start.tip_T_probe:
            groups.append(ProbeFrames(start.tip_T_probe))
        if start.camera_T_base:
            groups.append(CameraPoses({name: start.camera_T_base[name] for name in sorted(start.camera_T_base)}))
        if start.intrinsics:
            groups.append(CameraIntrinsics({name: start.intrinsics[name] for name in sorted(start.intrinsics)}))
        if start.tip_T_board is not None:
            groups.append(BoardPose(start.tip_T_board))
        if compliance:
            groups.append(JointCompliance(chain.joint_names, fixed=self._torqueless(problem)))
        return groups

    @staticmethod
    def _torqueless(problem: Problem) -> np.ndarray:
        """(dof,) bool: joints that hold no torque to speak of at the fit poses (with measured torques,
        also those whose torque varies by less than ``MEASURED_TORQUE_SNR`` times the sensor's noise:
        their sag would be fitted to noise)."""
        torques = np.concatenate([poses.torques[rows] for poses, rows in zip(problem.poses, problem.fit_rows)])
        largest = np.abs(torques).max(axis=0) if len(torques) else np.zeros(problem.chain.dof)
        quiet = largest <= TORQUELESS_FRACTION * max(largest.max(), 1e-300)
        if problem.torque_model is not None and len(torques):
            quiet |= torques.std(axis=0) < MEASURED_TORQUE_SNR * problem.torque_model.noise
        return quiet

    def _check_tools(self, problem: Problem, fit_blocks: dict[str, list]) -> None:
        """Sessions sharing one tool must agree on it: each session's tracker tool placed in closed
        form from its own data; InputError naming the sessions, the point and the distance when two
        disagree beyond their scatter."""
        if "tool" in self.per_session or len(problem.sessions) < 2:
            return
        serial = BatchKinematics(problem.start_chain)
        tools = []
        for i, session in enumerate(problem.sessions):
            own = StartValues()
            tips = serial.base_T_tip(session.q)
            errors = []
            for name in ("tracker_points", "tracker_poses"):
                for item in problem.prepared.get(name, []):
                    mine = [b for b in fit_blocks[name] if b.poses is problem.poses[i]]
                    if item.index != i or not mine:
                        continue
                    BY_NAME[name].initialise(item, mine, tips, own, {})
                    for block in mine:
                        frame = own.tracker_T_base[block.sensor]
                        if name == "tracker_points":
                            offsets = np.array([own.targets[t] for t in block.targets]).reshape(-1, 3)
                            rows = tips[block.pose_row]
                            points = np.einsum("mij,mj->mi", rows[:, :3, :3], offsets) + rows[:, :3, 3]
                            errors.append(np.linalg.norm(points @ frame[:3, :3].T + frame[:3, 3] - block.xyz, axis=1))
                        else:
                            predicted = frame @ tips[block.pose_row] @ own.tip_T_probe[block.probe]
                            errors.append(np.linalg.norm(predicted[:, :3, 3] - block.tracker_T_probe[:, :3, 3], axis=1))
            if errors:
                scatter = float(np.sqrt(np.mean(np.concatenate(errors) ** 2)))
                tools.append((str(session.path), tool_points(own.targets, own.tip_T_probe), scatter))
        sentence = tool_disagreement(tools)
        if sentence is not None:
            raise InputError(sentence[0].upper() + sentence[1:])

    def _start_values(self, problem: Problem, fit_blocks: dict[str, list]) -> StartValues:
        self._check_tools(problem, fit_blocks)
        start = StartValues()
        serial = BatchKinematics(problem.start_chain)
        for i, session in enumerate(problem.sessions):
            tips = serial.base_T_tip(session.q)
            for name in problem.sensor_names:
                for item in problem.prepared[name]:
                    if item.index == i:
                        mine = [b for b in fit_blocks[name] if b.poses is problem.poses[i]]
                        BY_NAME[name].initialise(item, mine, tips, start, problem.start_targets)
        for name, xyz in problem.start_targets.items():
            if name in start.targets:  # a recalibration starts from the previous reflectors
                start.targets[name] = np.asarray(xyz, float)
        return start

    def _geometry(self, problem: Problem, compliance: bool) -> GeometryFit:
        fit_blocks = problem.blocks(problem.fit_rows)
        flat = [b for name in problem.sensor_names for b in fit_blocks[name]]
        if problem.start is None:
            problem.start = self._start(problem, fit_blocks)
        start, hand_eye_rms, condition_ratio, seen, _ = problem.start
        model = ErrorModel(problem.chain, self._groups(problem, start, compliance), self.model)
        theta0 = model.initial_vector()
        solver = RobustSolver(self.outlier_threshold, jacobian=self.jacobian, progress=self._progress)
        result = solver.solve(flat, model, theta0, None if compliance else seen)
        self._check_physical(problem, model, result)
        noise = {}
        for name in problem.sensor_names:
            for _ in range(NOISE_ROUNDS):
                estimated = BY_NAME[name].reweight(problem.prepared[name], result.blocks, model, result.theta,
                                                   result.identifiability.rank)
                if estimated is None:
                    break
                noise[name] = estimated
                fit_blocks = problem.blocks(problem.fit_rows)
                flat = [b for n in problem.sensor_names for b in fit_blocks[n]]
                result = solver.solve(flat, model, theta0)
                self._check_physical(problem, model, result)
        return GeometryFit(model, theta0, result, fit_blocks, problem.blocks(problem.held_rows), condition_ratio,
                           noise, hand_eye_rms)

    @staticmethod
    def _check_physical(problem: Problem, model: ErrorModel, result: SolveResult) -> None:
        """Refuse a fit whose values the arm cannot have (a reflector metres from the flange): the
        poses let them drift along what they cannot separate; nothing is written."""
        problems = physical_problems(model, result.theta, arm_reach(problem.chain))
        if not problems:
            return
        unseen = result.identifiability.descriptions[:2]
        raise InputError(f"the fit is physically impossible, so no calibration is written: {'; '.join(problems)}"
                         + (f" (the poses do not separate: {' '.join(unseen)})" if unseen else "")
                         + "; record poses that turn the flange about more joints, or check the tool's stated offsets.")

    def _start(self, problem: Problem, fit_blocks: dict[str, list]) -> tuple:
        """(start values, hand-eye RMS px or None, condition ratio, identifiability at the start, the
        sentence for a degenerate pose set or None)."""
        start = self._start_values(problem, fit_blocks)
        flat = [b for name in problem.sensor_names for b in fit_blocks[name]]
        hand_eye_rms = None
        if any(BY_NAME[name].frames_first for name in problem.sensor_names):
            # Gauge: what no measurement can see (where the base is behind the cameras, where the tip
            # frame is along the last axis behind the board) stays as the starting arm says. So the
            # frames alone are fitted to the starting arm first, then everything starts from there;
            # the solver moves only along identifiable combinations, so unseen directions keep that split.
            self._progress("fitting the sensor frames to the starting arm")
            frames = ErrorModel(problem.chain, self._groups(problem, start, False), self.model, frames_only=True)
            theta = frames.initial_vector()
            corners = fit_blocks.get("board_corners", [])
            if corners:
                errors = np.concatenate([b.errors(frames, theta) for b in corners])
                hand_eye_rms = float(np.sqrt(np.mean(errors ** 2)))
            solved = RobustSolver(self.outlier_threshold).solve(flat, frames, theta).theta
            start = self._restart(frames, solved)
        rigid = ErrorModel(problem.chain, self._groups(problem, start, False), self.model)
        with blas_single_thread():
            condition_ratio, seen, degenerate = self._check_data(problem, rigid, rigid.initial_vector(), fit_blocks)
        return start, hand_eye_rms, condition_ratio, seen, degenerate

    @staticmethod
    def _restart(frames: ErrorModel, theta: np.ndarray) -> StartValues:
        """Start values from a frames-only fit: every frame at its fitted pose, reflectors at their
        offsets, fitted intrinsics at their values."""
        start = StartValues()
        for key, group in frames.groups.items():
            if isinstance(group, FrameGroup):
                values = {owner: group.transform(theta, owner) for owner in group.owners}
                if key == "sensor":
                    start.tracker_T_base = values
                elif key == "probe":
                    start.tip_T_probe = values
                elif key == "camera":
                    start.camera_T_base = values
                elif key == "board":
                    start.tip_T_board = values["board"]
            elif key == "target":
                start.targets = {owner: group.offset(theta, owner) for owner in group.owners}
            elif key == "intrinsics":
                start.intrinsics = {owner: group.K(theta, owner) for owner in group.owners}
        return start

    def _check_data(self, problem: Problem, model: ErrorModel, theta0: np.ndarray, fit_blocks: dict[str, list]):
        flat = [b for name in problem.sensor_names for b in fit_blocks[name]]
        structural = None
        if all(BY_NAME[name].can_probe_structure for name in problem.sensor_names):
            points = [b for b in fit_blocks.get("tracker_points", []) if len(b.targets)]
            reference = {"point_scale": float(np.median([np.median(b.sqrt_information[:, 0, 0]) for b in points]))
                         if points else 1.0}
            spread = spread_poses(model)
            probes = [b for name in problem.sensor_names
                      for b in BY_NAME[name].structural_blocks(fit_blocks[name], spread, reference)]
            structural = structural_identifiability(model, theta0, probes)
        poses = len({(id(b.poses), int(r)) for b in flat for r in b.unit_pose})
        rows = sum(len(b.unit_index) for b in flat)
        return check_pose_set(model, theta0, flat, structural, poses, rows / max(poses, 1), self.holdout,
                              np.concatenate([s.q for s in problem.sessions]), self.require_full)

    # -- the result -----------------------------------------------------------------------------------
    def _calibration(self, problem: Problem, fit: GeometryFit) -> Calibration:
        model, result = fit.model, fit.result
        theta, std = result.theta, result.standard_deviations
        # The tool's stated values carry what the rule leaves open too; predictions do not need it.
        value_std = result.value_standard_deviations
        deltas = theta[model.delta_slice].reshape(-1, 6).copy()
        zeros = theta[model.zero_slice].copy()
        first = problem.sessions[0]
        chain = calibrated_chain(problem.chain, model, deltas, zeros)
        frames = model.group("sensor")
        reflectors = model.group("target")
        identifiability = result.identifiability.summary()
        identifiability["condition_ratio_to_spread_poses"] = fit.condition_ratio
        degenerate = problem.start[4] if problem.start is not None else None
        identifiability["not_excited"] = problem.envelope.sentences() + ([degenerate] if degenerate else [])
        identifiability["full"] = not identifiability["not_excited"]
        if model.has("compliance"):
            group = model.group("compliance")
            identifiability["directions"] = list(identifiability["directions"]) + [
                f"the compliance of {joint} is held at 0: the joint holds no torque to speak of at these poses (or, measured, none above its sensor noise)."
                for joint, fixed in zip(group.owners, group.fixed) if fixed]
        summary = {"model": self.model, "sensors": problem.sensor_names, "sessions": [str(s.path) for s in problem.sessions],
                   "data_hash": data_hash(problem.sessions), "base_link": first.base_link,
                   "tip_link": chain.model.frames[chain.tip_frame].name, "identifiability": identifiability,
                   "variance_factor": result.variance_factor, "solve_seconds": result.seconds,
                   "evaluations": result.evaluations,
                   "outliers": [{"point": o.label, "residual_sigma": round(o.residual_sigma, 2)} for o in result.outliers],
                   "sensor_std": {s: std[frames.owner_slice(s)].tolist() for s in frames.owners} if frames else {},
                   "probe_std": {p: value_std[sl].tolist() for p, sl in model.probe_slices.items()}}
        if "tracker_poses" in problem.prepared:
            summary["pose_noise"] = fit.noise.get("tracker_poses", {"source": "stated"})
        calibration = Calibration(
            chain=chain, joint_names=list(chain.joint_names),
            tracker_T_base={s: model.tracker_T_base(theta, s) for s in (frames.owners if frames else [])},
            targets={t: reflectors.offset(theta, t).copy() for t in (reflectors.owners if reflectors else [])},
            deltas=deltas, delta_std=std[model.delta_slice].reshape(-1, 6), zero_offsets=zeros,
            zero_std=std[model.zero_slice], target_std={t: value_std[sl] for t, sl in model.target_slices.items()},
            summary=summary, source_urdf=first.urdf_path, solve=result, error_model=model,
            tip_T_probe={p: model.tip_T_probe(theta, p) for p in model.probe_slices},
            payload_com=first.payload_com, validity=problem.envelope,
            torque_model=problem.torque_model if model.has("compliance") else None)
        if model.has("camera"):
            calibration.base_T_camera = {k: invert(model.camera_T_base(theta, k)) for k in model.cameras}
            calibration.camera_std = {k: std[sl] for k, sl in model.camera_slices.items()}
        if model.has("board"):
            items = problem.prepared["board_corners"]
            calibration.tip_T_board = model.tip_T_board(theta)
            calibration.board_std = std[model.board_slice]
            calibration.board = items[0].data.detections.board
            calibration.pixel_sigma = items[0].data.sigma_px
            calibration.intrinsics = BY_NAME["board_corners"].intrinsics(items, model, theta, std, identifiability)
        if model.has("compliance"):
            calibration.compliance = theta[model.compliance_slice].copy()
            calibration.compliance_std = std[model.compliance_slice].copy()
        self._fit_figures(problem, fit, calibration)
        return calibration

    def _learn(self, problem: Problem, geometries: dict[str, GeometryFit], fits: dict[str, Calibration],
               learned: list[str]) -> None:
        """Train the residual ensembles of ``learned`` modes on their geometry's inlier fit poses, in
        one batched run, and put them (and the fit figures they change) into their calibrations."""
        if not learned:
            return
        self._progress(f"residual ensembles ({', '.join(learned)})")
        datasets = []
        for mode in learned:
            fit = geometries[modes.geometry_of(mode)]
            datasets.append(training_set(fit.result.blocks, fit.model, fit.theta, fits[mode].featurizer()))
        for mode, residual in zip(learned, ResidualEnsemble(self._residual_config()).fit_many(datasets)):
            fits[mode].residual_model = residual
            self._fit_figures(problem, geometries[modes.geometry_of(mode)], fits[mode])

    def _residual_config(self) -> ResidualConfig:
        return self.residual or ResidualConfig(seed=self.seed)

    @staticmethod
    def _inlier_poses(fit: GeometryFit) -> int:
        return len({(id(b.poses), int(r)) for items in fit.inliers(fit.fit_blocks).values() for b in items
                    for r in b.unit_pose})

    def _fit_figures(self, problem: Problem, fit: GeometryFit, calibration: Calibration) -> None:
        """Fit and nominal figures per sensor; the primary sensor's lead the summary."""
        model, theta, theta0 = fit.model, fit.theta, fit.theta0
        blocks = fit.inliers(fit.fit_blocks)
        by_sensor, history = {}, {}
        for name in problem.sensor_names:
            sensor = BY_NAME[name]
            items = [b.on(calibration_poses(b.poses, calibration)) for b in blocks[name]]
            after, before = sensor.errors(items, model, theta), sensor.errors(blocks[name], model, theta0)
            by_sensor[name] = {"fit": sensor.figures_from(after), "fit_nominal": sensor.figures_from(before)}
            labels = [label.rsplit("/", 1 if name != "board_corners" else 2)[0] for b in blocks[name] for label in b.unit_labels]
            history[name] = {"fit_after": after[0], "fit_before": before[0], "fit_pose_labels": labels}
        primary = problem.primary
        residuals = {"unit": BY_NAME[primary].unit, **by_sensor[primary], "holdout": None,
                     "holdout_fraction": self.holdout,
                     "poses": {"fit": int(sum(len(r) for r in problem.fit_rows)),
                               "holdout": int(sum(len(r) for r in problem.held_rows))},
                     "by_sensor": by_sensor}
        calibration.summary["residuals"] = residuals
        calibration.history = history

    def _held_out_figures(self, problem: Problem, fit: GeometryFit, calibration: Calibration, evidence: Evidence) -> None:
        """The held-out figures of the delivered model, and how they were obtained."""
        residuals = calibration.summary["residuals"]
        total = int(sum(len(r) for r in problem.fit_rows) + sum(len(r) for r in problem.held_rows))
        # The nominal figure beside the held-out one is measured the same way: on the fixed hold-out
        # with frames fitted on the fit poses, or on each fold with frames fitted on the other folds.
        nominal_evidence = self._nominal_cross_validation(problem, fit) if self.holdout == 0 else None
        held_blocks = fit.inliers(fit.held_blocks)
        for name in problem.sensor_names:
            sensor = BY_NAME[name]
            entry = residuals["by_sensor"][name]
            errors = evidence.errors.get(name)
            if errors is None or not len(errors[0]):
                entry["holdout"] = None
                continue
            entry["holdout"] = sensor.figures_from(errors)
            nominal = (sensor.errors(held_blocks[name], fit.model, fit.theta0) if nominal_evidence is None
                       else nominal_evidence.errors.get(name))
            entry["holdout_nominal"] = sensor.figures_from(nominal)
            calibration.history[name].update(held_after=errors[0], held_before=nominal[0])
        calibration.summary["holdout_outliers"] = self._held_out_outliers(problem, fit, calibration) if self.holdout > 0 else []
        primary = residuals["by_sensor"][problem.primary]
        residuals["holdout"] = primary.get("holdout")
        if primary.get("holdout_nominal") is not None:
            residuals["holdout_nominal"] = primary["holdout_nominal"]
        unit = BY_NAME[problem.primary].unit
        if self.holdout > 0:
            held = residuals["poses"]["holdout"]
            validation = {"method": "holdout", "fraction": self.holdout, "poses": held,
                          "description": f"a fixed hold-out of {held} of {total} poses ({self.holdout:.0%}), left out of "
                                         f"the delivered calibration, which was fitted on the other "
                                         f"{residuals['poses']['fit']}: --holdout reduces the data the calibration uses"}
        else:
            folds = len(evidence.fold_rms)
            validation = {"method": "cross-validation", "folds": folds, "poses_per_fold": evidence.fold_poses,
                          "fold_rms": evidence.fold_rms, "unit": unit,
                          "rms_spread": float(np.std(evidence.fold_rms)) if folds > 1 else None,
                          "rms_min": min(evidence.fold_rms) if folds else None,
                          "rms_max": max(evidence.fold_rms) if folds else None,
                          "nominal_fold_rms": nominal_evidence.fold_rms,
                          "description": f"{describe_folds(folds, total)}: each fold refitted on the other poses "
                                         f"and predicted on its own, and the nominal URDF's figure beside it "
                                         f"measured on the same folds (its sensor frames fitted on the other "
                                         f"poses); the delivered calibration is fitted on every inlier pose",
                          "folds_detail": [{"fold": k, "poses": p, "rms": r} for k, (p, r) in
                                           enumerate(zip(evidence.fold_poses, evidence.fold_rms))]
                          if folds <= 20 else []}
        residuals["validation"] = validation
        if "tracker_poses" in residuals["by_sensor"]:
            residuals["tracker_poses"] = dict(residuals["by_sensor"]["tracker_poses"],
                                              noise=calibration.summary.get("pose_noise", {"source": "stated"}))
        if "board_corners" in residuals["by_sensor"]:
            self._camera_summary(problem, fit, calibration, evidence, nominal_evidence)

    def _held_out_outliers(self, problem: Problem, fit: GeometryFit, calibration: Calibration) -> list[dict]:
        """Held-out units beyond the outlier threshold, scored by the fit's own robust scale: named,
        and kept in the held-out figures (they are what unseen data looks like)."""
        residuals, _, units = stack(fit.result.blocks, fit.model, fit.theta, jacobian=False)
        scale = robust_sigma(*unit_norms(residuals, units, unit_count(fit.result.blocks)))
        out = []
        for name, items in fit.held_blocks.items():
            sensor = BY_NAME[name]
            for block in items:
                block = block.on(calibration_poses(block.poses, calibration))
                whitened, _ = evaluate(block, fit.model, fit.theta, False)
                squared, _ = unit_norms(whitened, block.unit_index, len(block.unit_labels))
                score = np.sqrt(squared) / scale
                errors = sensor.errors([block], fit.model, fit.theta)[0] * (1e3 if sensor.unit == "mm" else 1.0)
                out += [{"point": block.unit_labels[i], "residual_sigma": round(float(score[i]), 2),
                         f"error_{sensor.unit}": round(float(errors[i]), 4)}
                        for i in np.flatnonzero(score > self.outlier_threshold)]
        return sorted(out, key=lambda o: -o["residual_sigma"])

    def _camera_summary(self, problem: Problem, fit: GeometryFit, calibration: Calibration, evidence: Evidence,
                        nominal_evidence: Evidence | None) -> None:
        blocks = fit.inliers(fit.fit_blocks)["board_corners"]
        held = fit.inliers(fit.held_blocks)["board_corners"] if self.holdout > 0 else []
        summary, _ = BY_NAME["board_corners"].summary(problem.prepared["board_corners"], blocks, held, fit.model,
                                                       fit.theta, fit.theta0, fit.hand_eye_rms_px)
        errors = evidence.errors.get("board_corners")
        if self.holdout == 0 and errors is not None and len(errors[0]):
            summary["holdout_rms_px"] = float(np.sqrt(np.mean(errors[0] ** 2)))
            summary["corners"]["holdout"] = int(len(errors[0]))
            nominal = (nominal_evidence.errors if nominal_evidence is not None else {}).get("board_corners")
            summary["holdout_nominal_rms_px"] = _rms(nominal)
        calibration.summary["residuals"]["camera"] = summary

    # -- held-out evidence ---------------------------------------------------------------------------
    def _evidence(self, problem: Problem, geometries: dict[str, GeometryFit], fits: dict[str, Calibration],
                  wanted: tuple[str, ...]) -> dict[str, Evidence]:
        if self.holdout > 0:
            out = {}
            for mode in wanted:
                fit = geometries[modes.geometry_of(mode)]
                held = fit.inliers(fit.held_blocks)
                errors = {name: BY_NAME[name].errors([b.on(calibration_poses(b.poses, fits[mode])) for b in items],
                                                     fit.model, fit.theta)
                          for name, items in held.items()}
                primary = errors[problem.primary][0]
                out[mode] = Evidence(errors, [_quoted_rms(problem, errors[problem.primary])] if len(primary) else [],
                                     [int(sum(len(r) for r in problem.held_rows))])
            return out
        return self._cross_validation(problem, geometries, fits, wanted)

    def _folds(self, problem: Problem) -> tuple[list[list[np.ndarray]], list]:
        """The cross-validation folds (pose rows per session) and, per fold, the units it leaves out."""
        counts = [len(s.pose_ids) for s in problem.sessions]
        folds = fold_rows(counts, fold_count(sum(counts), self.folds), self.seed)
        return folds, [_leaves(problem, rows) for rows in folds]

    def _nominal_cross_validation(self, problem: Problem, fit: GeometryFit) -> Evidence:
        """The nominal arm (the URDF, or the previous calibration) judged on the folds the delivered
        model is judged on: its sensor frames (tracker, reflectors, probe, cameras, board) fitted on
        each fold's other poses, its error on the fold's own. Frames fitted on every pose and judged on
        the same poses would flatter it by what they absorb of each pose's error, and a
        cross-validated figure beside an in-sample one does not compare."""
        folds, leaves = self._folds(problem)
        frames = ErrorModel(problem.chain, self._groups(problem, problem.start[0], False), self.model, frames_only=True)
        inliers = fit.inliers(fit.fit_blocks)
        flat = [b for name in problem.sensor_names for b in inliers[name]]
        theta = frames.initial_vector()
        with blas_single_thread():
            _, jac, _ = stack(flat, frames, theta)
        basis = analyse(jac, frames.free, frames.names, frames.describe, words=False).basis
        leave_none = [lambda block: np.zeros(len(block.unit_labels), bool)]
        for _ in range(NOMINAL_SETTLE_STEPS):
            theta = fold_solutions(flat, frames, theta, basis, leave_none)[0]
        thetas = fold_solutions(flat, frames, theta, basis, leaves)
        parts = {name: [] for name in inliers}
        fold_rms, fold_poses = [], []
        for rows, leaving, solution in zip(folds, leaves, thetas):
            for name, items in inliers.items():
                test = keep_units(items, leaving)
                parts[name].append(BY_NAME[name].errors(test, frames, solution) if test else None)
            rms = _quoted_rms(problem, parts[problem.primary][-1])
            if rms is not None:
                fold_rms.append(rms)
                fold_poses.append(int(sum(len(r) for r in rows)))
        return Evidence({name: join_errors(p) for name, p in parts.items()}, fold_rms, fold_poses)

    def _cross_validation(self, problem: Problem, geometries: dict[str, GeometryFit], fits: dict[str, Calibration],
                          wanted: tuple[str, ...]) -> dict[str, Evidence]:
        """Every candidate refitted without each fold and judged on it (the same folds for all)."""
        folds, leaves = self._folds(problem)
        self._progress(f"cross-validation: {len(folds)} folds")
        thetas = {geometry: fold_solutions(fit.result.blocks, fit.model, fit.theta, fit.result.identifiability.basis, leaves)
                  for geometry, fit in geometries.items()}
        # The learned candidates' ensembles, one per fold and mode, trained in one batched run.
        datasets, keys = [], []
        for mode in (m for m in wanted if modes.uses_residual(m)):
            geometry = modes.geometry_of(mode)
            fit = geometries[geometry]
            for k, leaving in enumerate(leaves):
                train = keep_units(fit.result.blocks, lambda b, leaving=leaving: ~leaving(b))
                datasets.append(training_set(train, fit.model, thetas[geometry][k], fits[mode].featurizer()))
                keys.append((mode, k))
        residuals = {}
        if datasets:
            self._progress(f"residual ensembles for {len(datasets)} folds")
            residuals = dict(zip(keys, ResidualEnsemble(self._residual_config()).fit_many(datasets)))
        out = {}
        for mode in wanted:
            geometry = modes.geometry_of(mode)
            fit = geometries[geometry]
            inliers = fit.inliers(fit.fit_blocks)
            parts = {name: [] for name in inliers}
            fold_rms, fold_poses = [], []
            for k, (rows, leaving) in enumerate(zip(folds, leaves)):
                for name, items in inliers.items():
                    test = keep_units(items, leaving)
                    if (mode, k) in residuals:
                        test = [b.on(corrected(b.poses, residuals[(mode, k)], fits[mode].featurizer())) for b in test]
                    parts[name].append(BY_NAME[name].errors(test, fit.model, thetas[geometry][k]) if test else None)
                rms = _quoted_rms(problem, parts[problem.primary][-1])
                if rms is not None:
                    fold_rms.append(rms)
                    fold_poses.append(int(sum(len(r) for r in rows)))
            out[mode] = Evidence({name: join_errors(p) for name, p in parts.items()}, fold_rms, fold_poses)
        return out


def _leaves(problem: Problem, rows: list[np.ndarray]):
    """``block -> (units,) bool``: the units a fold holding out pose rows ``rows`` (per session) leaves out."""
    held = {id(poses): r for poses, r in zip(problem.poses, rows)}
    return lambda block: np.isin(block.unit_pose, held.get(id(block.poses), np.zeros(0, int)))


def _quoted_rms(problem: Problem, errors: tuple | None) -> float | None:
    """The primary sensor's RMS in the unit its figures are quoted in (mm, px)."""
    if not errors or not len(errors[0]):
        return None
    sensor = BY_NAME[problem.primary]
    return float(sensor.figures_from(errors)[f"rms_{sensor.unit}"])


def _rms(errors: tuple | None) -> float | None:
    if not errors or not len(errors[0]):
        return None
    return float(np.sqrt(np.mean(errors[0] ** 2)))


def calibration_poses(poses: PoseSet, calibration: Calibration) -> PoseSet:
    """``poses`` with the calibration's learned tip shift applied (unchanged without one)."""
    if calibration.residual_model is None:
        return poses
    return corrected(poses, calibration.residual_model, calibration.featurizer())
