"""Kinematic calibration from images of a board on the tool, alone or fused with a laser tracker.

    result = CameraCalibrator(model="full", holdout=0.2).fit([session])
    result.calibration            # calib.calibrator.Calibration: chain, deltas, zero offsets, ...
    result.camera_T_base          # {camera: (4, 4)}
    result.tip_T_board            # (4, 4)
    result.save("cal/")           # robot.urdf, calibration.yaml (+ cameras, board), report.html

Every session's board corners become a :class:`~calib.camera_observations.CameraObservations`
block and its tracker points (if any) a tracker block; one :class:`~calib.solver.RobustSolver`
fits them together over one :class:`~calib.camera_observations.CameraErrorModel`, each
measurement weighted by its own noise model (tracker: ISO MPE in metres; camera: pixel noise
estimated from per-image PnP fits unless given). Starting values come from PnP per image and a
numpy hand-eye solution with the nominal kinematics; a tracker's from the point registration.
A fit reads the images, joints.csv, tracker.csv, session.json and robot.urdf only, never truth/.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from calib.calibrator import (Calibration, ErrorStats, KinematicCalibrator, _same_robot, data_hash, holdout_rows,
                              tracker_blocks)
from calib.camera_board import CharucoBoardSpec
from calib.camera_handeye import HandEyeSolution, board_pose_pnp, hand_eye, opencv_cross_check
from calib.camera_observations import (CameraDetections, CameraErrorModel, CameraObservations, detect_session,
                                       estimate_pixel_sigma, has_board_images)
from calib.initialise import initial_frame_and_targets
from calib.observations import stack
from calib.solver import RobustSolver
from capture.session import Session, load_session
from rigs.errors import InputError
from rigs.kinematics import ChainModel
from rigs.transforms import invert, quat_xyzw

MIN_RESIDUALS_PER_PARAMETER = 2


@dataclass
class CameraInitialisation:
    """PnP poses per image and the hand-eye solution of one session (camera keys as in the model)."""

    camera_T_board: dict[int, np.ndarray]  # image index -> (4, 4)
    hand_eye: HandEyeSolution
    pixel_sigma: float  # per-axis px, from the PnP residuals
    opencv_tip_T_board: np.ndarray | None = None


def initialise_cameras(detections: CameraDetections, q: np.ndarray, chain: ChainModel, rows: np.ndarray,
                       rng: np.random.Generator) -> CameraInitialisation:
    """PnP for every image of the fit poses ``rows``, then hand-eye with the nominal kinematics."""
    image_rows = detections.image_rows()
    poses, tips, cameras = {}, [], []
    nominal = chain.base_T_tip_batch(q)
    for index, (camera, _) in enumerate(detections.images):
        if image_rows[index] not in rows:
            continue
        mine = detections.image == index
        solved = board_pose_pnp(detections.board, detections.corner_id[mine], detections.pixels[mine],
                                detections.K[camera])
        if solved is None:
            continue
        poses[index] = solved[0]
        tips.append(nominal[image_rows[index]])
        cameras.append(camera)
    if not poses:
        raise InputError("no image of the calibration poses shows enough board corners for a pose (PnP).")
    board_poses = np.array(list(poses.values()))
    solution = hand_eye(np.array(tips), board_poses, cameras, rng)
    cross = None
    first = cameras[0]
    mine = np.array([c == first for c in cameras])
    checked = opencv_cross_check(np.array(tips)[mine], board_poses[mine])
    if checked is not None:
        cross = checked[1]
    return CameraInitialisation(poses, solution, estimate_pixel_sigma(detections, poses), cross)


@dataclass
class CameraCalibration:
    """A fitted calibration with cameras: the kinematic :class:`Calibration` plus each camera's pose
    in the base frame (``base_T_camera``, optical frame) and the board's pose on the tip."""

    calibration: Calibration
    base_T_camera: dict[str, np.ndarray]
    camera_std: dict[str, np.ndarray]  # (6,) twist standard deviations, m and rad
    tip_T_board: np.ndarray
    board_std: np.ndarray
    board: CharucoBoardSpec
    pixel_sigma: float
    intrinsics: dict[str, dict]  # camera -> {"K": 3x3 list, "width", "height"} the fit used
    camera_summary: dict = field(default_factory=dict)
    history: dict = field(default_factory=dict, repr=False)

    def base_T_tip(self, q: np.ndarray) -> np.ndarray:
        return self.calibration.base_T_tip(q)

    def save(self, folder: Path, report: bool = True) -> None:
        from calib.camera_report import append_camera_report
        from calib.export import write_urdf

        folder = Path(folder)
        write_urdf(self.calibration, folder)
        write_camera_calibration_yaml(self, folder / "calibration.yaml")
        if report:
            from calib.report import write_report

            write_report(self.calibration, folder / "report.html")
            append_camera_report(self, folder / "report.html")


def _frame(transform: np.ndarray) -> dict:
    return {"xyz": [float(v) for v in transform[:3, 3]], "quat_xyzw": [float(v) for v in quat_xyzw(transform[:3, :3])]}


def camera_calibration_document(result: CameraCalibration) -> dict:
    """calibration.yaml: the tracker calibration's document plus ``cameras`` and ``board``."""
    from calib.export import calibration_document

    calibration = result.calibration
    if calibration.tracker_T_base:
        document = calibration_document(calibration)
    else:  # camera-only: the document has no tracker frame to report
        placeholder = dataclasses.replace(calibration, tracker_T_base={"none": np.eye(4)})
        document = calibration_document(placeholder)
        document["tracker_T_base"] = None
        document["tracker_T_base_by_session"] = {}
        document["tracker_T_base_std"] = {}
    document["cameras"] = {
        name: {"base_T_camera": _frame(pose), "twist_std": [float(v) for v in result.camera_std[name]],
               "frame": "optical (x right, y down, z forward)", **result.intrinsics.get(name, {})}
        for name, pose in result.base_T_camera.items()}
    document["board"] = {"kind": "charuco", "spec": result.board.describe(), "squares": list(result.board.squares),
                         "square_m": result.board.square, "marker_m": result.board.marker,
                         "dictionary": result.board.dictionary, "tip_T_board": _frame(result.tip_T_board),
                         "twist_std": [float(v) for v in result.board_std],
                         "frame": "origin at the chessboard's centre, z out of the printed face"}
    document["camera_residuals"] = result.camera_summary
    return document


def write_camera_calibration_yaml(result: CameraCalibration, path: Path) -> None:
    import yaml

    from rigs.files import atomic_write_text

    atomic_write_text(Path(path), yaml.safe_dump(camera_calibration_document(result), sort_keys=False, width=120))


def camera_blocks(session: Session, detections: CameraDetections, sigma_px: float, rows: np.ndarray | None = None,
                  camera_keys: dict[str, str] | None = None) -> CameraObservations:
    """The board corners of ``session`` (pose rows ``rows`` only, when given) as an observation block.

    ``camera_keys`` maps the session's camera names to the model's camera keys (default: the same
    names; sessions fitted together share a camera's pose when they share its name).
    """
    return CameraObservations.from_detections(detections, session.q, sigma_px, camera_keys, rows, session.pose_ids)


def _pixel_errors(block: CameraObservations, model: CameraErrorModel, theta: np.ndarray) -> np.ndarray:
    """Reprojection error (M,) px per corner."""
    return np.linalg.norm(block.predict(model, theta) - block.pixels, axis=1)


class CameraCalibrator:
    """Kinematic calibration from board images (and tracker points, where a session has them).

    ``model``: "full" or "offsets" (as :class:`KinematicCalibrator`); ``holdout``: fraction of poses
    kept out and reported; ``seed``: the hold-out draw; ``outlier_threshold``: flag corners or
    points beyond this many robust sigma; ``pixel_sigma``: per-axis corner noise in px (None:
    estimated from per-image PnP residuals); ``tip_link``: override the sessions' tip link.
    """

    def __init__(self, model: str = "full", holdout: float = 0.2, seed: int = 0, outlier_threshold: float = 5.0,
                 pixel_sigma: float | None = None, tip_link: str | None = None,
                 progress: Callable[[str], None] | None = None):
        self.model = model
        self.holdout = holdout
        self.seed = seed
        self.outlier_threshold = outlier_threshold
        self.pixel_sigma = pixel_sigma
        self.tip_link = tip_link
        self.progress = progress or (lambda message: None)

    def fit(self, sessions: list[Session | Path]) -> CameraCalibration:
        if self.model not in ("full", "offsets"):
            raise InputError(f"--model must be 'full' or 'offsets', got {self.model!r}.")
        if not 0.0 <= self.holdout < 1.0:
            raise InputError(f"--holdout must be in [0, 1), got {self.holdout}.")
        if self.pixel_sigma is not None and not self.pixel_sigma > 0:
            raise InputError(f"--pixel-sigma must be positive, got {self.pixel_sigma}.")
        if not sessions:
            raise InputError("give at least one session to calibrate from.")
        sessions = [s if isinstance(s, Session) else load_session(Path(s)) for s in sessions]
        _same_robot(sessions)
        first = sessions[0]
        chain = ChainModel.from_urdf(first.urdf_path, first.base_link, self.tip_link or first.tip_link)
        camera_sessions = [i for i, s in enumerate(sessions) if has_board_images(s)]
        if not camera_sessions:
            raise InputError("no session records camera images of a board on the tip; use the tracker calibration.")
        tracker_sessions = [i for i, s in enumerate(sessions) if s.tracker is not None and len(s.tracker.targets)]
        fit_rows, held_rows = holdout_rows([len(s.pose_ids) for s in sessions], self.holdout, self.seed)
        rng = np.random.default_rng(self.seed)

        # Cameras: detect, PnP, hand-eye (nominal kinematics), pixel noise.
        self.progress("detecting the board")
        detections, inits, keys = {}, {}, {}
        for i in camera_sessions:
            detections[i] = detect_session(sessions[i])
            inits[i] = initialise_cameras(detections[i], sessions[i].q, chain, fit_rows[i], rng)
            # A camera name is one physical camera standing still: sessions share its pose.
            keys[i] = {name: name for name in inits[i].hand_eye.camera_T_base}
        sigma_px = self.pixel_sigma or float(np.sqrt(np.mean([inits[i].pixel_sigma ** 2 for i in camera_sessions])))
        # One board on the tip for all sessions: start from the first session's hand-eye.
        tip_T_board0 = inits[camera_sessions[0]].hand_eye.tip_T_board
        reference_cameras = {}
        for i in camera_sessions:
            for name, pose in inits[i].hand_eye.camera_T_base.items():
                reference_cameras.setdefault(keys[i][name], pose)

        # Trackers: the tracker fit's own starting values.
        sensors = [f"s{i}" for i in tracker_sessions]
        tracker_fit = {i: tracker_blocks(sessions[i], f"s{i}", fit_rows[i]) for i in tracker_sessions}
        references, offsets = {}, {}
        for i, block in tracker_fit.items():
            frame, block_offsets = initial_frame_and_targets(chain.base_T_tip_batch(sessions[i].q)[block.pose_row],
                                                             block.targets, block.xyz, sessions[i].nominal_targets)
            references[f"s{i}"] = frame
            for target, xyz in block_offsets.items():
                offsets.setdefault(target, xyz)
        targets = sorted(set().union(*[set(b.targets) for b in tracker_fit.values()])) if tracker_fit else []

        blocks = [camera_blocks(sessions[i], detections[i], sigma_px, fit_rows[i], keys[i]) for i in camera_sessions]
        blocks += list(tracker_fit.values())

        # Gauge: what no measurement can see (where the base is behind the cameras, where the tip
        # frame is along the last axis behind the board) stays as the nominal URDF says. So first
        # the frames alone are fitted to the nominal arm, then everything starts from there; the
        # solver moves only along identifiable combinations, so unseen directions keep that split.
        self.progress("fitting camera and board poses to the nominal arm")
        frames = CameraErrorModel(chain, sensors, targets, references, self.model, cameras=sorted(reference_cameras),
                                  reference_camera_T_base=reference_cameras, reference_tip_T_board=tip_T_board0,
                                  frames_only=True)
        hand_eye_errors = np.concatenate([_pixel_errors(b, frames, frames.initial_vector(offsets)) for b in blocks
                                          if isinstance(b, CameraObservations)])
        theta_frames = RobustSolver(self.outlier_threshold).solve(blocks, frames, frames.initial_vector(offsets)).theta
        references = {s: frames.state(theta_frames).tracker_T_base[s] for s in sensors}
        offsets = {t: theta_frames[sl].copy() for t, sl in frames.target_slices.items()}
        model = CameraErrorModel(chain, sensors, targets, references, self.model, cameras=sorted(reference_cameras),
                                 reference_camera_T_base={k: frames.camera_T_base(theta_frames, k) for k in reference_cameras},
                                 reference_tip_T_board=frames.tip_T_board(theta_frames))
        theta0 = model.initial_vector(offsets)
        self._check_data(model, theta0, blocks)

        self.progress("fitting")
        result = RobustSolver(self.outlier_threshold, progress=self.progress).solve(blocks, model, theta0)
        calibration = KinematicCalibrator(model=self.model)._calibration(model, result, sessions, first)
        calibration.summary["data_hash"] = _hash_with_images(sessions)
        std = result.standard_deviations
        base_T_camera = {key: invert(model.camera_T_base(result.theta, key)) for key in model.cameras}
        camera_std = {key: std[model.camera_slices[key]] for key in model.cameras}
        board_std = std[model.board_slice]
        first_camera = camera_sessions[0]
        intrinsics = {keys[i][name]: {"K": sessions[i].cameras[name].info.K.tolist(),
                                      "width": sessions[i].cameras[name].info.width,
                                      "height": sessions[i].cameras[name].info.height}
                      for i in camera_sessions for name in keys[i]}
        outcome = CameraCalibration(calibration, base_T_camera, camera_std, model.tip_T_board(result.theta), board_std,
                                    detections[first_camera].board, sigma_px, intrinsics)
        self._statistics(outcome, model, result, theta0, sessions, detections, keys, tracker_sessions,
                         fit_rows, held_rows, inits)
        outcome.camera_summary["hand_eye_fit_rms_px"] = float(np.sqrt(np.mean(hand_eye_errors ** 2)))
        return outcome

    def _check_data(self, model: CameraErrorModel, theta0: np.ndarray, blocks) -> None:
        residuals, jac, _ = stack(blocks, model, theta0)
        columns = jac[:, model.free]
        norms = np.linalg.norm(columns, axis=0)
        singular = np.linalg.svd(columns / np.where(norms > 0, norms, 1.0), compute_uv=False)
        rank = int(np.sum(singular > 1e-9 * singular[0]))  # as calib.identifiability, without naming directions
        if len(residuals) < MIN_RESIDUALS_PER_PARAMETER * rank:
            raise InputError(f"too few measurements: {len(residuals)} residuals for {rank} identifiable parameters; "
                             f"record at least {math.ceil(MIN_RESIDUALS_PER_PARAMETER * rank / max(len(residuals), 1))} "
                             f"times as many poses with the board in view.")

    def _statistics(self, outcome: CameraCalibration, model, result, theta0, sessions, detections, keys,
                    tracker_sessions, fit_rows, held_rows, inits) -> None:
        outlier_labels = {o.label for o in result.outliers}
        history = {"pixel_fit_before": [], "pixel_fit_after": [], "pixel_held_before": [], "pixel_held_after": []}
        per_camera = {}
        for i, found in detections.items():
            for kind, rows in (("fit", fit_rows[i]), ("held", held_rows[i])):
                if not len(rows):
                    continue
                block = camera_blocks(sessions[i], found, outcome.pixel_sigma, rows, keys[i])
                block = block.subset(np.array([l not in outlier_labels for l in block.labels], bool))
                before = _pixel_errors(block, model, theta0)
                after = _pixel_errors(block, model, result.theta)
                history[f"pixel_{kind}_before"].append(before)
                history[f"pixel_{kind}_after"].append(after)
                for name in keys[i]:
                    rows_c = block.camera == name
                    entry = per_camera.setdefault(keys[i][name], {})
                    entry[f"{kind}_rms_px"] = float(np.sqrt(np.mean(after[rows_c] ** 2))) if rows_c.any() else None
                    entry[f"{kind}_corners"] = int(rows_c.sum())
            for name, key in keys[i].items():
                per_camera.setdefault(key, {})["images_without_board"] = sum(1 for c, _ in found.without_board if c == name)
                per_camera[key]["hand_eye_spread_m_rad"] = list(inits[i].hand_eye.camera_spread[name])
        history = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in history.items()}

        def rms(values):
            return float(np.sqrt(np.mean(values ** 2))) if len(values) else None

        summary = {"pixel_sigma": outcome.pixel_sigma,
                   "fit_rms_px": rms(history["pixel_fit_after"]), "fit_nominal_rms_px": rms(history["pixel_fit_before"]),
                   "holdout_rms_px": rms(history["pixel_held_after"]),
                   "holdout_nominal_rms_px": rms(history["pixel_held_before"]),
                   "corners": {"fit": int(len(history["pixel_fit_after"])), "holdout": int(len(history["pixel_held_after"]))},
                   "cameras": per_camera,
                   "initialisation": "PnP per image + numpy hand-eye (nominal kinematics), then camera and board "
                                     "poses fitted to the nominal arm ('nominal' figures)",
                   "opencv_hand_eye_cross_check": None}
        cross = [inits[i].opencv_tip_T_board for i in inits if inits[i].opencv_tip_T_board is not None]
        if cross:
            summary["opencv_hand_eye_cross_check"] = {
                "tip_T_board_translation_difference_m": float(np.linalg.norm(
                    cross[0][:3, 3] - inits[min(inits)].hand_eye.tip_T_board[:3, 3]))}
        # Tracker residuals (3D, mm) where a session has them, in the tracker fit's own terms.
        tracker_stats = {}
        for kind, row_sets in (("fit", fit_rows), ("holdout", held_rows)):
            errors, nominal = [], []
            for i in tracker_sessions:
                if not len(row_sets[i]):
                    continue
                block = tracker_blocks(sessions[i], f"s{i}", row_sets[i])
                block = block.subset(np.array([l not in outlier_labels for l in block.labels], bool))
                errors.append(np.linalg.norm(block.predict(model, result.theta) - block.xyz, axis=1))
                nominal.append(np.linalg.norm(block.predict(model, theta0) - block.xyz, axis=1))
            if errors:
                tracker_stats[kind] = ErrorStats.of(np.concatenate(errors)).as_dict()
                tracker_stats[f"{kind}_nominal"] = ErrorStats.of(np.concatenate(nominal)).as_dict()
        residuals = dict(tracker_stats)
        residuals.setdefault("holdout", None)
        residuals["holdout_fraction"] = self.holdout
        residuals["poses"] = {"fit": int(sum(len(r) for r in fit_rows)), "holdout": int(sum(len(r) for r in held_rows))}
        residuals["camera"] = summary
        outcome.calibration.summary["residuals"] = residuals
        outcome.camera_summary = summary
        outcome.history = history


def _hash_with_images(sessions: list[Session]) -> str:
    """The tracker fit's data hash extended with every RGB image the camera fit read."""
    digest = hashlib.sha256(data_hash(sessions).encode())
    for session in sessions:
        for path in sorted((session.path / "cameras").glob("*/*_rgb.png")) if (session.path / "cameras").is_dir() else []:
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return "sha256:" + digest.hexdigest()


def calibrator_for(sessions: list[Session], **options):
    """The estimator a set of sessions needs: :class:`CameraCalibrator` when any records board
    images (it fuses tracker points too), else the tracker-only :class:`KinematicCalibrator`."""
    if any(has_board_images(s) for s in sessions):
        return CameraCalibrator(**options)
    options.pop("pixel_sigma", None)
    return KinematicCalibrator(**options)
