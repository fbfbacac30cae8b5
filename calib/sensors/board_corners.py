"""Board corners seen by fixed cameras: the detections, the observation block and the sensor.

A corner ``p`` (board frame) seen by camera c at pose n projects to

    u = pinhole(K_c, camera_T_base_c @ base_T_tip(q_n) @ tip_T_board @ p)

with ``camera_T_base_c`` (group ``camera``, one physical camera that stands still, shared by every
session that names it) and ``tip_T_board`` (group ``board``). Measured pixels are undistorted once
(``cv2.undistortPoints`` with the session's camera_info), so the model is a pure pinhole. ``K_c``
is the session's camera_info K as recorded, unless the model holds the camera in its
``intrinsics`` group (``fit_intrinsics``): then its fx, fy, cx, cy are parameters of the same fit.
Residuals are (measured - predicted) / pixel sigma, two rows and one robust unit per corner.

Start values: PnP per image and a numpy hand-eye solution with the starting arm
(``calib.sensors.hand_eye``); the pixel noise from the per-image PnP residuals unless given.
Cameras see the arm, not its base: the camera and board frames are fitted to the starting arm
first (``frames_first``), so what no measurement can see keeps the URDF's split.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from rigs.transforms import skew
from calib.model.error_model import ErrorModel, TipEvaluation
from calib.model.groups import INTRINSIC_AXES, intrinsic_vector
from calib.model.poses import PoseSet
from calib.sensors.blocks import evaluate, tips_for
from calib.sensors.board import MIN_CORNERS, BoardDetector, CharucoBoardSpec, board_from_manifest
from calib.sensors.figures import pixel_figures, rms
from calib.sensors.hand_eye import HandEyeSolution, board_pose_pnp, hand_eye, opencv_cross_check
from calib.sensors.sensor import Prepared, Sensor, StartValues
from capture.session import Session
from rigs.errors import InputError


@dataclass
class CameraDetections:
    """Board corners found in a session's images (all poses), undistorted to pinhole pixels.

    Per corner m: ``pose_row`` (M,) row of ``Session.q``; ``camera`` (M,) camera name; ``image``
    (M,) index of its image in ``images``; ``corner_id`` (M,); ``pixels`` (M, 2) undistorted.
    ``images``: (camera, pose id) per image with a usable detection; ``without_board``: images
    where too few corners were found; ``K``: camera name -> (3, 3) of the undistorted pixels.
    """

    board: CharucoBoardSpec
    pose_row: np.ndarray
    camera: np.ndarray
    image: np.ndarray
    corner_id: np.ndarray
    pixels: np.ndarray
    images: list[tuple[str, str]]
    without_board: list[tuple[str, str]]
    K: dict[str, np.ndarray]

    def image_rows(self) -> np.ndarray:
        """(images,) pose row of each image."""
        rows = np.zeros(len(self.images), dtype=int)
        rows[self.image] = self.pose_row
        return rows


def session_board(session: Session) -> CharucoBoardSpec | None:
    return board_from_manifest(session.manifest, str(session.path / "session.json"))


def has_board_images(session: Session) -> bool:
    """Whether the session records cameras and a board on the tip (a camera calibration's input)."""
    return bool(session.cameras) and session_board(session) is not None


def detect_session(session: Session, board: CharucoBoardSpec | None = None, min_corners: int = MIN_CORNERS,
                   progress=None) -> CameraDetections:
    """Find the board in every RGB image of ``session``; InputError when it is nowhere."""
    import cv2  # OpenCV takes 0.3 s to load; only camera work needs it

    board = board or session_board(session)
    if board is None:
        raise InputError(f"{session.path / 'session.json'}: sensors.board is missing; the camera calibration "
                         f"needs the ChArUco board on the tip described there.")
    if not session.cameras:
        raise InputError(f"{session.path}: records no cameras.")
    detector = BoardDetector(board)
    rows, cameras, images, ids, pixels, used, missing = [], [], [], [], [], [], []
    K = {}
    total, done = len(session.cameras) * len(session.pose_ids), 0
    for name, camera in sorted(session.cameras.items()):
        K[name] = camera.info.K.copy()
        size = None
        for row, pose in enumerate(session.pose_ids):
            done += 1
            path = session.image_path(name, pose, "rgb")
            if not path.is_file():
                missing.append((name, pose))
                continue
            image = session.image(name, pose, "rgb")
            if size is None:
                size = image.shape[:2]
                if (image.shape[1], image.shape[0]) != (camera.info.width, camera.info.height):
                    raise InputError(f"{path}: image is {image.shape[1]}x{image.shape[0]} but camera {name!r}'s "
                                     f"camera_info says {camera.info.width}x{camera.info.height}.")
            elif image.shape[:2] != size:
                raise InputError(f"{path}: image is {image.shape[1]}x{image.shape[0]}, other images of camera "
                                 f"{name!r} are {size[1]}x{size[0]}.")
            detection = detector.detect(image)
            if progress is not None:
                progress(done, total)
            if detection.count < min_corners:
                missing.append((name, pose))
                continue
            points = detection.pixels
            if np.any(camera.info.distortion):
                points = cv2.undistortPoints(points.reshape(-1, 1, 2), camera.info.K, camera.info.distortion,
                                             P=camera.info.K).reshape(-1, 2)
            index = len(used)
            used.append((name, pose))
            rows.append(np.full(detection.count, row))
            cameras += [name] * detection.count
            images.append(np.full(detection.count, index))
            ids.append(detection.ids)
            pixels.append(points)
    if not used:
        raise InputError(f"{session.path}: the board {board.describe()} was not found in any of its "
                         f"{total} images.")
    return CameraDetections(board, np.concatenate(rows), np.array(cameras), np.concatenate(images),
                            np.concatenate(ids), np.concatenate(pixels), used, missing, K)


def project(K: np.ndarray, camera_T_board: np.ndarray, points_board: np.ndarray) -> np.ndarray:
    """Pinhole projection of points (N, 3) in the board frame -> (N, 2) pixels."""
    points = points_board @ camera_T_board[:3, :3].T + camera_T_board[:3, 3]
    return (points[:, :2] / points[:, 2:]) * np.array([K[0, 0], K[1, 1]]) + K[:2, 2]


def estimate_pixel_sigma(detections: CameraDetections, camera_T_board: dict[int, np.ndarray]) -> float:
    """Per-axis pixel noise (px) from per-image PnP fits: no kinematics involved, 6 dof per image removed."""
    squared, count, dof = 0.0, 0, 0
    for index, pose in camera_T_board.items():
        rows = detections.image == index
        name = detections.camera[rows][0]
        predicted = project(detections.K[name], pose, detections.board.corners(detections.corner_id[rows]))
        squared += float(np.sum((predicted - detections.pixels[rows]) ** 2))
        count += 2 * int(rows.sum())
        dof += 6
    return float(np.sqrt(squared / max(count - dof, 1)))


@dataclass(eq=False)
class CornerObservations:
    """One session's board corners, an observation block.

    ``poses``: the session's pose set; ``camera_keys``: session camera name -> model camera key;
    per corner: ``pose_row``, ``camera``, ``corner_id``, ``pixels`` (M, 2) undistorted and labels
    "pose/camera/corner"; ``sigma_px`` per-axis pixel noise; ``K`` per camera name (3, 3).
    """

    poses: PoseSet
    board: CharucoBoardSpec
    K: dict[str, np.ndarray]
    camera_keys: dict[str, str]
    pose_row: np.ndarray
    camera: np.ndarray
    corner_id: np.ndarray
    pixels: np.ndarray
    labels: list[str]
    sigma_px: float
    name: str = "camera"
    groups: tuple[str, ...] = field(default=("camera", "board", "intrinsics"), init=False)  # intrinsics when fitted

    def __post_init__(self) -> None:
        self.pose_row = np.asarray(self.pose_row, int)
        self.unit_index = np.repeat(np.arange(len(self.pixels)), 2)
        self.unit_labels = list(self.labels)
        self.unit_pose = self.pose_row
        self.points_board = self.board.corners(self.corner_id) if len(self.corner_id) else np.zeros((0, 3))

    @property
    def q(self) -> np.ndarray:
        return self.poses.q

    @classmethod
    def from_detections(cls, detections: CameraDetections, poses: PoseSet, sigma_px: float,
                        camera_keys: dict[str, str] | None = None, rows: np.ndarray | None = None) -> "CornerObservations":
        keep = np.ones(len(detections.pose_row), bool) if rows is None else np.isin(detections.pose_row, rows)
        keys = camera_keys or {name: name for name in detections.K}
        labels = [f"{poses.label(r)}/{c}/{i}" for r, c, i in zip(detections.pose_row[keep], detections.camera[keep],
                                                                 detections.corner_id[keep])]
        return cls(poses, detections.board, detections.K, keys, detections.pose_row[keep], detections.camera[keep],
                   detections.corner_id[keep], detections.pixels[keep], labels, sigma_px)

    def subset(self, keep: np.ndarray) -> "CornerObservations":
        keep = np.asarray(keep, dtype=bool)
        return CornerObservations(self.poses, self.board, self.K, self.camera_keys, self.pose_row[keep], self.camera[keep],
                                  self.corner_id[keep], self.pixels[keep],
                                  [l for l, k in zip(self.labels, keep) if k], self.sigma_px, self.name)

    def on(self, poses: PoseSet) -> "CornerObservations":
        return replace(self, poses=poses)

    def _geometry(self, model: ErrorModel, theta: np.ndarray, tip: TipEvaluation):
        if model.group("board") is None or model.group("camera") is None:
            raise InputError("board corners need camera poses and a board pose in the calibration.")
        count = len(self.pixels)
        where = tip.where(self.pose_row)
        base_T_tip = tip.base_T_tip[where]
        tip_T_board = model.tip_T_board(theta)
        points_tip = self.points_board @ tip_T_board[:3, :3].T + tip_T_board[:3, 3]  # (M, 3)
        points_base = np.einsum("mij,mj->mi", base_T_tip[:, :3, :3], points_tip) + base_T_tip[:, :3, 3]
        camera_R_base = np.empty((count, 3, 3))
        points_camera = np.empty((count, 3))
        focal = np.empty((count, 2))
        centre = np.empty((count, 2))
        for name, key in self.camera_keys.items():
            rows = self.camera == name
            if not rows.any():
                continue
            camera_T_base = model.camera_T_base(theta, key)
            camera_R_base[rows] = camera_T_base[:3, :3]
            points_camera[rows] = points_base[rows] @ camera_T_base[:3, :3].T + camera_T_base[:3, 3]
            K = self.camera_matrix(model, theta, name)
            focal[rows] = K[0, 0], K[1, 1]
            centre[rows] = K[:2, 2]
        depth = points_camera[:, 2]
        if np.any(depth <= 1e-6):
            raise InputError("a board corner ends up behind its camera: the camera calibration diverged "
                             "(check that the session's camera names, images and joint angles belong together).")
        predicted = points_camera[:, :2] / depth[:, None] * focal + centre
        return where, base_T_tip, tip_T_board, points_tip, points_base, camera_R_base, depth, focal, centre, predicted

    def camera_matrix(self, model: ErrorModel, theta: np.ndarray, name: str) -> np.ndarray:
        """(3, 3) camera ``name``'s K: the model's fitted intrinsics when it holds them, else as recorded."""
        intrinsics = model.group("intrinsics")
        key = self.camera_keys[name]
        if intrinsics is not None and key in intrinsics.owners:
            return intrinsics.K(theta, key)
        return self.K[name]

    def predict(self, model: ErrorModel, theta: np.ndarray) -> np.ndarray:
        """Predicted pixels (M, 2)."""
        tip = tips_for([self], model, theta, False)[id(self.poses)]
        return self._geometry(model, theta, tip)[-1]

    def errors(self, model: ErrorModel, theta: np.ndarray) -> np.ndarray:
        """Reprojection error (M,) px per corner."""
        return np.linalg.norm(self.predict(model, theta) - self.pixels, axis=1)

    def evaluate(self, model: ErrorModel, theta: np.ndarray, jacobian: bool = True):
        return evaluate(self, model, theta, jacobian)

    def _projection(self, depth, focal, centre, predicted) -> np.ndarray:
        """d pixel / d point in the camera frame (M, 2, 3)."""
        projection = np.zeros((len(depth), 2, 3))
        projection[:, 0, 0] = focal[:, 0] / depth
        projection[:, 1, 1] = focal[:, 1] / depth
        projection[:, :, 2] = -(predicted - centre) / depth[:, None]
        return projection

    def evaluate_at(self, model: ErrorModel, theta: np.ndarray, tip: TipEvaluation, jacobian: bool):
        (where, base_T_tip, tip_T_board, points_tip, points_base, camera_R_base, depth, focal, centre,
         predicted) = self._geometry(model, theta, tip)
        residuals = ((self.pixels - predicted) / self.sigma_px).reshape(-1)
        if not jacobian:
            return residuals, None
        count = len(self.pixels)
        projection = self._projection(depth, focal, centre, predicted)
        jac = np.zeros((count, 2, model.size))
        camera_R_tip = camera_R_base @ base_T_tip[:, :3, :3]
        # A LOCAL tip twist (v, w) moves a tip point p by R (v + w x p) = R [I, -[p]x] (v, w).
        tip_twist = projection @ np.concatenate([camera_R_tip, -camera_R_tip @ skew(points_tip)], axis=2)  # (M, 2, 6)
        tip.chain_into(jac, tip_twist, where)
        cameras = model.group("camera")
        for name, key in self.camera_keys.items():
            rows = self.camera == name
            if not rows.any():
                continue
            R = camera_R_base[rows]
            camera_twist = np.concatenate([R, -R @ skew(points_base[rows])], axis=2)
            jac[rows, :, cameras.owner_slice(key)] = projection[rows] @ camera_twist @ cameras.right_jacobian(theta, key)
        intrinsics = model.group("intrinsics")
        if intrinsics is not None:
            # u = fx x/z + cx, v = fy y/z + cy: the normalised coordinates are the focal lengths' columns.
            normalised = (predicted - centre) / focal
            for name, key in self.camera_keys.items():
                rows = np.flatnonzero(self.camera == name)
                if not len(rows) or key not in intrinsics.owners:
                    continue
                first = intrinsics.owner_slice(key).start
                jac[rows, 0, first] = normalised[rows, 0]
                jac[rows, 1, first + 1] = normalised[rows, 1]
                jac[rows, 0, first + 2] = 1.0
                jac[rows, 1, first + 3] = 1.0
        board = model.group("board")
        camera_R_board = camera_R_tip @ tip_T_board[:3, :3]
        board_twist = np.concatenate([camera_R_board, -camera_R_board @ skew(self.points_board)], axis=2)
        jac[:, :, board.slice] = projection @ board_twist @ board.right_jacobian(theta, "board")
        return residuals, (-jac / self.sigma_px).reshape(-1, model.size)

    def tip_translation_rows(self, model: ErrorModel, theta: np.ndarray):
        """Pixel residuals (2M,), their derivative (2M, 3) per base-frame tip shift (m), pose rows (2M,):
        pixels over the pixel sigma."""
        tip = tips_for([self], model, theta, False)[id(self.poses)]
        (_, _, _, _, _, camera_R_base, depth, focal, centre, predicted) = self._geometry(model, theta, tip)
        derivative = self._projection(depth, focal, centre, predicted) @ camera_R_base
        return ((self.pixels - predicted).reshape(-1) / self.sigma_px, derivative.reshape(-1, 3) / self.sigma_px,
                np.repeat(self.pose_row, 2))


# -- start values --------------------------------------------------------------------------------
@dataclass
class CameraStart:
    """PnP poses per image and the hand-eye solution of one session (camera keys as in the model)."""

    camera_T_board: dict[int, np.ndarray]  # image index -> (4, 4)
    hand_eye: HandEyeSolution
    pixel_sigma: float  # per-axis px, from the PnP residuals
    # OpenCV's robot-world hand-eye for one camera, where the build has it: (camera, views, tip_T_board (4, 4))
    opencv_tip_T_board: tuple[str, int, np.ndarray] | None = None


def initialise_cameras(detections: CameraDetections, base_T_tip: np.ndarray, rows: np.ndarray,
                       rng: np.random.Generator) -> CameraStart:
    """PnP for every image of the fit poses ``rows``, then hand-eye with the tip poses ``base_T_tip`` (N, 4, 4)."""
    image_rows = detections.image_rows()
    poses, tips, cameras = {}, [], []
    for index, (camera, _) in enumerate(detections.images):
        if image_rows[index] not in rows:
            continue
        mine = detections.image == index
        solved = board_pose_pnp(detections.board, detections.corner_id[mine], detections.pixels[mine],
                                detections.K[camera])
        if solved is None:
            continue
        poses[index] = solved[0]
        tips.append(base_T_tip[image_rows[index]])
        cameras.append(camera)
    if not poses:
        raise InputError("no image of the calibration poses shows enough board corners for a pose (PnP).")
    board_poses = np.array(list(poses.values()))
    solution = hand_eye(np.array(tips), board_poses, cameras, rng)
    # OpenCV solves one camera at a time: the one with the most views, the best conditioned (on the
    # xArm6's 300 poses its answer for the first camera detected sat 39 mm off the true board, for
    # the one with the most views 2.1 mm).
    cross = None
    most = max(sorted(set(cameras)), key=cameras.count)
    mine = np.array([c == most for c in cameras])
    checked = opencv_cross_check(np.array(tips)[mine], board_poses[mine])
    if checked is not None:
        cross = (most, int(mine.sum()), checked[1])
    return CameraStart(poses, solution, estimate_pixel_sigma(detections, poses), cross)


@dataclass
class CameraData:
    """What the corner sensor keeps per session: detections, camera keys, start, pixel sigma, and
    whether the cameras' intrinsics are fitted (else taken from camera_info as recorded)."""

    detections: CameraDetections
    keys: dict[str, str]
    start: CameraStart | None = None
    sigma_px: float | None = None
    fit_intrinsics: bool = False


class BoardCornerSensor(Sensor):
    name = "board_corners"
    words = "board corners"
    frames_first = True
    can_probe_structure = False

    def present(self, session: Session) -> bool:
        return has_board_images(session)

    def files(self, session: Session) -> list[Path]:
        folder = session.path / "cameras"
        return sorted(folder.glob("*/*_rgb.png")) if folder.is_dir() else []

    def prepare(self, session, index, poses, fit_rows, start_chain, options) -> Prepared:
        detections = detect_session(session)
        # A camera name is one physical camera standing still: sessions share its pose.
        keys = {name: name for name in sorted(set(detections.camera.tolist()))}
        return Prepared(session, index, poses, CameraData(detections, keys, fit_intrinsics=options.fit_intrinsics))

    def finish(self, prepared: list[Prepared], fit_rows: list[np.ndarray], base_T_tip: list[np.ndarray],
               pixel_sigma: float | None, rng: np.random.Generator) -> None:
        """PnP and hand-eye per session (fit poses only), then one pixel sigma for all sessions."""
        for item, rows, tips in zip(prepared, fit_rows, base_T_tip):
            item.data.start = initialise_cameras(item.data.detections, tips, rows, rng)
            item.data.keys = {name: name for name in item.data.start.hand_eye.camera_T_base}
        sigma = pixel_sigma or float(np.sqrt(np.mean([item.data.start.pixel_sigma ** 2 for item in prepared])))
        for item in prepared:
            item.data.sigma_px = sigma

    def blocks(self, prepared: Prepared, rows: np.ndarray | None) -> list:
        data = prepared.data
        return [CornerObservations.from_detections(data.detections, prepared.poses, data.sigma_px, data.keys, rows)]

    def initialise(self, prepared, blocks, base_T_tip, start: StartValues, start_targets) -> None:
        solution = prepared.data.start.hand_eye
        # One board on the tip for all sessions: the first session's hand-eye.
        if start.tip_T_board is None:
            start.tip_T_board = solution.tip_T_board
        for name, pose in solution.camera_T_base.items():
            start.camera_T_base.setdefault(prepared.data.keys[name], pose)
            if prepared.data.fit_intrinsics:  # the first session's camera_info K of a shared camera
                start.intrinsics.setdefault(prepared.data.keys[name], prepared.data.detections.K[name].copy())

    unit = "px"

    def errors(self, blocks: list, model: ErrorModel, theta: np.ndarray) -> tuple[np.ndarray, ...]:
        errors = [b.errors(model, theta) for b in blocks]
        return (np.concatenate(errors) if errors else np.zeros(0),)

    def figures_from(self, errors: tuple[np.ndarray, ...]) -> dict:
        return pixel_figures(errors[0] if errors else np.zeros(0))

    def summary(self, prepared: list[Prepared], fit: list, held: list, model: ErrorModel, theta: np.ndarray,
                theta0: np.ndarray, hand_eye_rms_px: float | None) -> dict:
        """The camera figures calibration.yaml and the report quote (px), per camera too."""
        errors = {}
        per_camera: dict[str, dict] = {}
        for kind, blocks in (("fit", fit), ("held", held)):
            after = [b.errors(model, theta) for b in blocks]
            before = [b.errors(model, theta0) for b in blocks]
            errors[f"pixel_{kind}_after"] = np.concatenate(after) if after else np.zeros(0)
            errors[f"pixel_{kind}_before"] = np.concatenate(before) if before else np.zeros(0)
            for block, values in zip(blocks, after):
                for name, key in block.camera_keys.items():
                    rows = block.camera == name
                    entry = per_camera.setdefault(key, {})
                    entry[f"{kind}_rms_px"] = rms(values[rows]) if rows.any() else None
                    entry[f"{kind}_corners"] = int(rows.sum())
        for item in prepared:
            for name, key in item.data.keys.items():
                entry = per_camera.setdefault(key, {})
                entry["images_without_board"] = sum(1 for c, _ in item.data.detections.without_board if c == name)
                entry["hand_eye_spread_m_rad"] = list(item.data.start.hand_eye.camera_spread[name])
        summary = {"pixel_sigma": prepared[0].data.sigma_px,
                   "fit_rms_px": rms(errors["pixel_fit_after"]), "fit_nominal_rms_px": rms(errors["pixel_fit_before"]),
                   "holdout_rms_px": rms(errors["pixel_held_after"]),
                   "holdout_nominal_rms_px": rms(errors["pixel_held_before"]),
                   "corners": {"fit": int(len(errors["pixel_fit_after"])), "holdout": int(len(errors["pixel_held_after"]))},
                   "cameras": per_camera,
                   "initialisation": "PnP per image + numpy hand-eye (starting kinematics), then camera and board "
                                     "poses fitted to the starting arm ('nominal' figures)",
                   "opencv_hand_eye_cross_check": None, "hand_eye_fit_rms_px": hand_eye_rms_px}
        cross = [item.data.start.opencv_tip_T_board for item in prepared if item.data.start.opencv_tip_T_board is not None]
        if cross:
            camera, views, tip_T_board = cross[0]
            summary["opencv_hand_eye_cross_check"] = {
                "camera": camera, "views": views,
                "tip_T_board_translation_difference_m": float(np.linalg.norm(
                    tip_T_board[:3, 3] - prepared[0].data.start.hand_eye.tip_T_board[:3, 3]))}
        return summary, errors

    def intrinsics(self, prepared: list[Prepared], model: ErrorModel, theta: np.ndarray, std: np.ndarray,
                   identifiability: dict) -> dict[str, dict]:
        """camera key -> {"K", "width", "height", "fitted"} the fit used or found; for fitted
        intrinsics also what was recorded, their standard deviations (px) and which of them the
        data leave poorly determined (:func:`intrinsics_determination`)."""
        out = {}
        group = model.group("intrinsics")
        for item in prepared:
            for name, key in item.data.keys.items():
                if key in out:
                    continue  # a camera several sessions share: the first session's camera_info
                info = item.session.cameras[name].info
                entry = {"K": info.K.tolist(), "width": info.width, "height": info.height, "fitted": False}
                if group is not None and key in group.owners:
                    entry.update(intrinsics_determination(model, key, group.K(theta, key), info.K, std, info.width,
                                                          info.height, item.data.sigma_px, identifiability))
                    entry["distortion"] = [float(v) for v in info.distortion]
                out[key] = entry
        return out


def intrinsics_determination(model: ErrorModel, key: str, K: np.ndarray, recorded: np.ndarray, std: np.ndarray,
                             width: int, height: int, sigma_px: float, identifiability: dict) -> dict:
    """How well the fit pinned camera ``key``'s fx, fy, cx, cy down.

    A value is poorly determined when its standard deviation moves some image point by more than
    the corner noise ``sigma_px``: a focal length's error scales the image about the principal
    point, so it moves the farthest edge pixel by ``std_f / f`` times that distance; a principal
    point's error moves every pixel by ``std_c``. A value the identifiability analysis cannot
    separate from other parameters is not determined at all (its sentence says from what). The
    fit still moves a poorly determined value (the data say what they can); the report and
    calibration.yaml say it.
    """
    group = model.group("intrinsics")
    values = intrinsic_vector(K)
    sigmas = std[group.owner_slice(key)]
    reach = [max(values[2], width - values[2]), max(values[3], height - values[3])]  # px from the principal point
    moved = [sigmas[0] * reach[0] / values[0], sigmas[1] * reach[1] / values[1], sigmas[2], sigmas[3]]
    directions = identifiability.get("directions", [])
    notes, poorly, loose, entries = [], [], [], {}
    for component, axis in enumerate(INTRINSIC_AXES):
        info = next(i for i in group.infos() if i.owner == key and i.component == component)
        inseparable = [d for d in directions if group.describe(info) in d]
        determined = not inseparable and moved[component] <= sigma_px
        entries[axis] = {"value": float(values[component]), "recorded": float(intrinsic_vector(recorded)[component]),
                         "std_px": None if inseparable else float(sigmas[component]),
                         "image_shift_px": None if inseparable else float(moved[component]),
                         "determined": bool(determined)}
        if not determined:
            poorly.append(axis)
        if inseparable:
            notes.extend(inseparable)
        elif not determined:
            loose.append(axis)
    if loose:
        notes.append(f"camera {key}: {', '.join(loose)} {'is' if len(loose) == 1 else 'are'} poorly determined: "
                     f"standard deviation {', '.join(f'{sigmas[INTRINSIC_AXES.index(a)]:.3g}' for a in loose)} px, "
                     f"moving image points by up to {', '.join(f'{moved[INTRINSIC_AXES.index(a)]:.3g}' for a in loose)} "
                     f"px, more than the {sigma_px:.3g} px corner noise; fit the intrinsics from close-up board images "
                     f"with `selfcal calibrate-camera` for better values.")
    return {"K": K.tolist(), "fitted": True, "recorded_K": np.asarray(recorded, float).tolist(), "parameters": entries,
            "poorly_determined": poorly, "notes": notes}

