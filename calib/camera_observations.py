"""The camera observation model: board corners seen by fixed cameras, as pixel residuals.

A corner ``p`` (board frame) seen by camera c at pose k projects to

    u = pinhole(K_c, camera_T_base_c @ base_T_tip(q_k; theta) @ tip_T_board @ p)

with ``camera_T_base_c = reference_c @ exp6(xi_c)`` and ``tip_T_board = reference @ exp6(eta)``.
Measured pixels are undistorted once (``cv2.undistortPoints`` with the session's camera_info), so
the model is a pure pinhole. Residuals are (measured - predicted) / pixel sigma, two rows per
corner, one robust unit per corner; the Jacobian is analytic (the tip's LOCAL twist columns of
:meth:`ErrorModel.tip_poses_and_columns` chained through the projection).

:class:`CameraErrorModel` extends the tracker error model's parameter vector with a 6-DoF pose
per camera and one board pose, so one solver (``calib.solver.RobustSolver``) and one
identifiability analysis treat tracker points and board corners alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pinocchio as pin

from calib.camera_board import MIN_CORNERS, BoardDetector, CharucoBoardSpec, board_from_manifest
from calib.error_model import TWIST_AXES, ErrorModel, ParameterInfo
from calib.observations import skew
from capture.session import Session
from rigs.errors import InputError
from rigs.transforms import exp6


@dataclass
class CameraErrorModel(ErrorModel):
    """:class:`ErrorModel` plus ``camera_T_base`` per camera and ``tip_T_board``.

    ``cameras``: camera keys (camera names; one physical camera that stands still, shared by all
    sessions that name it); ``reference_camera_T_base``: key -> (4, 4); ``reference_tip_T_board`` (4, 4).
    The camera and board parameters are free under both ``kind`` values (they are sensor frames,
    like the tracker's pose).
    """

    cameras: list[str] = field(default_factory=list)
    reference_camera_T_base: dict[str, np.ndarray] = field(default_factory=dict)
    reference_tip_T_board: np.ndarray | None = None
    frames_only: bool = False  # free only the sensor frames (cameras, board, trackers, reflectors)

    @property
    def free(self) -> np.ndarray:
        if not self.frames_only:
            return super().free
        return np.array([p.group not in ("delta", "zero") for p in self.names])

    def __post_init__(self) -> None:
        super().__post_init__()
        start = len(self.names)
        self.camera_slices = {}
        for i, camera in enumerate(self.cameras):
            self.camera_slices[camera] = slice(start + 6 * i, start + 6 * i + 6)
            for c, label in enumerate(TWIST_AXES):
                self.names.append(ParameterInfo(f"camera_T_base.{camera}.{label}", "camera", camera, c,
                                                "m" if c < 3 else "rad"))
        start = len(self.names)
        self.board_slice = slice(start, start + 6) if self.reference_tip_T_board is not None else None
        if self.board_slice is not None:
            for c, label in enumerate(TWIST_AXES):
                self.names.append(ParameterInfo(f"tip_T_board.{label}", "board", "board", c, "m" if c < 3 else "rad"))

    def camera_T_base(self, theta: np.ndarray, camera: str) -> np.ndarray:
        return self.reference_camera_T_base[camera] @ exp6(theta[self.camera_slices[camera]])

    def tip_T_board(self, theta: np.ndarray) -> np.ndarray:
        return self.reference_tip_T_board @ exp6(theta[self.board_slice])


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
    import cv2

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


def project(K: np.ndarray, camera_T_board: np.ndarray, points_board: np.ndarray) -> np.ndarray:
    """Pinhole projection of points (N, 3) in the board frame -> (N, 2) pixels."""
    points = points_board @ camera_T_board[:3, :3].T + camera_T_board[:3, 3]
    return (points[:, :2] / points[:, 2:]) * np.array([K[0, 0], K[1, 1]]) + K[:2, 2]


@dataclass
class CameraObservations:
    """One session's board corners, an observation block of ``calib.solver.RobustSolver``.

    ``q`` (N, dof) the session's joint readings; ``camera_keys``: session camera name -> model
    camera key; per corner: ``pose_row``, ``camera``, ``corner_id``, ``pixels`` (M, 2) and labels
    "pose/camera/corner"; ``sigma_px`` per-axis pixel noise; ``board``.
    """

    q: np.ndarray
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

    def __post_init__(self) -> None:
        self.unit_index = np.repeat(np.arange(len(self.pixels)), 2)
        self.unit_labels = list(self.labels)
        self.unit_pose = np.asarray(self.pose_row)
        self.points_board = self.board.corners(self.corner_id)

    @classmethod
    def from_detections(cls, detections: CameraDetections, q: np.ndarray, sigma_px: float,
                        camera_keys: dict[str, str] | None = None, rows: np.ndarray | None = None,
                        pose_ids: list[str] | None = None) -> "CameraObservations":
        keep = np.ones(len(detections.pose_row), bool) if rows is None else np.isin(detections.pose_row, rows)
        keys = camera_keys or {name: name for name in detections.K}
        ids = pose_ids or [f"row{r}" for r in range(len(q))]
        labels = [f"{ids[r]}/{c}/{i}" for r, c, i in zip(detections.pose_row[keep], detections.camera[keep],
                                                           detections.corner_id[keep])]
        return cls(q, detections.board, detections.K, keys, detections.pose_row[keep], detections.camera[keep],
                   detections.corner_id[keep], detections.pixels[keep], labels, sigma_px)

    def subset(self, keep: np.ndarray) -> "CameraObservations":
        keep = np.asarray(keep, dtype=bool)
        return CameraObservations(self.q, self.board, self.K, self.camera_keys, self.pose_row[keep], self.camera[keep],
                                  self.corner_id[keep], self.pixels[keep],
                                  [l for l, k in zip(self.labels, keep) if k], self.sigma_px, self.name)

    def predict(self, model: CameraErrorModel, theta: np.ndarray) -> np.ndarray:
        """Predicted pixels (M, 2)."""
        return self._predict(model, theta, jacobian=False)[0]

    def evaluate(self, model: CameraErrorModel, theta: np.ndarray, jacobian: bool = True):
        predicted, jac = self._predict(model, theta, jacobian)
        residuals = ((self.pixels - predicted) / self.sigma_px).reshape(-1)
        if jac is None:
            return residuals, None
        return residuals, (-jac / self.sigma_px).reshape(-1, model.size)

    def _predict(self, model: CameraErrorModel, theta: np.ndarray, jacobian: bool):
        if not isinstance(model, CameraErrorModel) or model.board_slice is None:
            raise InputError("board corners need a CameraErrorModel with a board pose.")
        state = model.state(theta)
        count = len(self.pixels)
        used = np.unique(self.pose_row)
        if jacobian:
            poses, delta_columns, joint_columns = model.tip_poses_and_columns(state, self.q[used])
        else:
            poses = state.chain.base_T_tip_batch(self.q[used] + state.zero_offsets)
        where = np.searchsorted(used, self.pose_row)
        base_T_tip = poses[where]  # (M, 4, 4)
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
            focal[rows] = self.K[name][0, 0], self.K[name][1, 1]
            centre[rows] = self.K[name][:2, 2]
        depth = points_camera[:, 2]
        if np.any(depth <= 1e-6):
            raise InputError("a board corner ends up behind its camera: the camera calibration diverged "
                             "(check that the session's camera names, images and joint angles belong together).")
        predicted = points_camera[:, :2] / depth[:, None] * focal + centre
        if not jacobian:
            return predicted, None
        # d pixel / d point in the camera frame (M, 2, 3)
        projection = np.zeros((count, 2, 3))
        projection[:, 0, 0] = focal[:, 0] / depth
        projection[:, 1, 1] = focal[:, 1] / depth
        projection[:, :, 2] = -predicted_offsets(predicted, centre) / depth[:, None]
        jac = np.zeros((count, 2, model.size))
        camera_R_tip = camera_R_base @ base_T_tip[:, :3, :3]
        # A LOCAL tip twist (v, w) moves a tip point p by R (v + w x p) = R [I, -[p]x] (v, w).
        tip_twist = projection @ np.concatenate([camera_R_tip, -camera_R_tip @ skew(points_tip)], axis=2)  # (M, 2, 6)
        jac[:, :, model.delta_slice] = tip_twist @ delta_columns[where]
        jac[:, :, model.zero_slice] = tip_twist @ joint_columns[where]
        for name, key in self.camera_keys.items():
            rows = self.camera == name
            if not rows.any():
                continue
            xi = theta[model.camera_slices[key]]
            R = camera_R_base[rows]
            camera_twist = np.concatenate([R, -R @ skew(points_base[rows])], axis=2)
            jac[rows, :, model.camera_slices[key]] = (projection[rows] @ camera_twist
                                                      @ np.asarray(pin.Jexp6(pin.Motion(xi))))
        camera_R_board = camera_R_tip @ tip_T_board[:3, :3]
        board_twist = np.concatenate([camera_R_board, -camera_R_board @ skew(self.points_board)], axis=2)
        jac[:, :, model.board_slice] = (projection @ board_twist
                                        @ np.asarray(pin.Jexp6(pin.Motion(theta[model.board_slice]))))
        return predicted, jac


def predicted_offsets(predicted: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """(M, 2) f * x / z per axis: the pixel offset from the principal point (d u / d z = -that / z)."""
    return predicted - centre
