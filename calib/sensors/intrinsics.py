"""Camera intrinsics from images of a ChArUco board (OpenCV 5), as ROS ``camera_info``.

``IntrinsicsCalibration(board).fit(paths)`` detects the board in every image, skips (and lists)
the images where it is not found, and runs ``cv2.calibrateCamera`` on the rest: pinhole K and
plumb_bob distortion (k1, k2, p1, p2; k3 fixed at 0 unless asked, as ROS's calibrator does for
ordinary lenses). The result holds the RMS and each image's own reprojection RMS in pixels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from capture.camera_info import CameraInfo
from calib.sensors.board import MIN_CORNERS, BoardDetector, CharucoBoardSpec, read_image
from rigs.errors import InputError, setting
from rigs.transforms import axis_angle

MIN_VIEWS = 4  # fewer views leave focal length and principal point poorly separated
MISMATCH_RMS_PX = 3.0  # a board that fits worse than this is not the board in the images


@dataclass
class ImageResult:
    path: str
    corners: int
    rms_px: float  # this image's reprojection RMS, pixels


@dataclass
class IntrinsicsResult:
    """What ``fit`` learned: ``info`` (K, distortion, size), RMS over all corners, per-image RMS."""

    info: CameraInfo
    rms_px: float
    images: list[ImageResult]
    skipped: list[str]  # images where the board was not found (or too few corners)
    board: str
    camera_T_board: list[np.ndarray] = field(default_factory=list)  # (4, 4) per used image, OpenCV board frame

    def summary(self) -> dict:
        K = self.info.K
        return {"camera": self.info.name, "width": self.info.width, "height": self.info.height,
                "fx": K[0, 0], "fy": K[1, 1], "cx": K[0, 2], "cy": K[1, 2],
                "distortion": self.info.distortion.tolist(), "rms_px": self.rms_px, "board": self.board,
                "views_used": len(self.images), "images": [vars(i) for i in self.images], "skipped": self.skipped}


class IntrinsicsCalibration:
    """Configure with the board (and options); ``fit(paths)`` returns an :class:`IntrinsicsResult`."""

    def __init__(self, board: CharucoBoardSpec, name: str = "camera", fix_k3: bool = True,
                 min_views: int = MIN_VIEWS, min_corners: int = MIN_CORNERS):
        if min_views < 1:
            raise InputError(f"{setting('min_views')} must be at least 1, got {min_views}.")
        if min_corners < 4:
            raise InputError(f"{setting('min_corners')} must be at least 4 (a view's pose needs four points), "
                             f"got {min_corners}.")
        self.board, self.name, self.fix_k3 = board, name, fix_k3
        self.min_views, self.min_corners = min_views, min_corners

    def fit(self, paths: list[Path], progress: Callable[[int, int], None] | None = None) -> IntrinsicsResult:
        import cv2  # OpenCV takes 0.3 s to load; only camera work needs it

        paths = [Path(p) for p in paths]
        if not paths:
            raise InputError("no images given.")
        detector = BoardDetector(self.board)
        aruco = cv2.aruco.ArucoDetector(self.board.opencv_board().getDictionary())
        size, used, skipped, object_points, image_points = None, [], [], [], []
        markers_seen, foreign_markers = 0, 0
        board_markers = len(self.board.opencv_board().getIds())
        for number, path in enumerate(paths):
            image = read_image(path)
            shape = (image.shape[1], image.shape[0])
            if size is None:
                size, first = shape, path
            elif shape != size:
                raise InputError(f"{path}: image is {shape[0]}x{shape[1]} but {first} is {size[0]}x{size[1]}; "
                                 f"calibrate one camera (one image size) at a time.")
            detection = detector.detect(image)
            markers_seen += detection.markers
            foreign_markers += _foreign_markers(aruco, image, board_markers)
            if detection.count < self.min_corners:
                skipped.append(str(path))
            else:
                used.append((path, detection))
                object_points.append(self.board.corners_opencv(detection.ids).astype(np.float32))
                image_points.append(detection.pixels.astype(np.float32))
            if progress is not None:
                progress(number + 1, len(paths))
        if not used:
            if markers_seen or foreign_markers:
                raise InputError(f"ArUco markers were found but no board corners in any of {len(paths)} images: "
                                 f"the board spec {self.board.describe()} does not match the printed board.")
            raise InputError(f"the board {self.board.describe()} was not found in any of {len(paths)} images.")
        if foreign_markers > markers_seen:
            raise InputError(f"the images show markers with ids beyond the {board_markers} of board "
                             f"{self.board.describe()}: the board spec does not match the printed board.")
        if len(used) < self.min_views:
            raise InputError(f"the board was found in only {len(used)} of {len(paths)} images; "
                             f"intrinsics need at least {self.min_views} views.")
        flags = cv2.CALIB_FIX_K3 if self.fix_k3 else 0
        rms, K, distortion, rvecs, tvecs = cv2.calibrateCamera(object_points, image_points, size, None, None,
                                                                flags=flags)
        images, poses = [], []
        for (path, detection), obj, img, rvec, tvec in zip(used, object_points, image_points, rvecs, tvecs):
            projected, _ = cv2.projectPoints(obj, rvec, tvec, K, distortion)
            error = projected.reshape(-1, 2) - img
            images.append(ImageResult(str(path), detection.count, float(np.sqrt(np.mean(np.sum(error ** 2, axis=1))))))
            pose = np.eye(4)
            pose[:3, :3] = cv2.Rodrigues(np.asarray(rvec, dtype=float).reshape(3))[0]
            pose[:3, 3] = np.asarray(tvec, dtype=float).reshape(3)
            poses.append(pose)
        if rms > MISMATCH_RMS_PX:
            raise InputError(f"the board fits the images with {rms:.1f} px RMS (expected well under "
                             f"{MISMATCH_RMS_PX:g}): the board spec {self.board.describe()} does not match the printed board.")
        distortion = np.asarray(distortion, dtype=float).ravel()[:5]
        info = CameraInfo(self.name, size[0], size[1], np.asarray(K, dtype=float), np.pad(distortion, (0, 5 - len(distortion))))
        return IntrinsicsResult(info, float(rms), images, skipped, self.board.describe(), poses)



def _foreign_markers(aruco, image: np.ndarray, board_markers: int) -> int:
    """Markers of the dictionary whose ids the board does not have (a sign of a wrong spec)."""
    _, ids, _ = aruco.detectMarkers(image)
    if ids is None:
        return 0
    return int(np.sum(np.asarray(ids).ravel() >= board_markers))


def board_view_poses(K: np.ndarray, size: tuple[int, int], board: CharucoBoardSpec, count: int,
                     rng: np.random.Generator, fill: float = 0.6) -> list[np.ndarray]:
    """``count`` board poses ``camera_T_board`` (4, 4) for an intrinsics calibration: the board fills
    about ``fill`` of the image width, tilted 20 to 45 degrees (tilt is what pins the focal length), its centre spread over the image.

    This is the set of views a person should aim for when waving a board at a camera; the
    benchmark and the tests render them (``rigs.simulator.render_board_views``).
    """
    width_m = board.squares[0] * board.square
    distance = K[0, 0] * width_m / (fill * size[0])
    poses = []
    for _ in range(count):
        depth = distance * rng.uniform(0.85, 1.25)
        # Centre anywhere the whole board stays in view, roughly.
        u = rng.uniform(0.3, 0.7) * size[0]
        v = rng.uniform(0.3, 0.7) * size[1]
        centre = depth * np.linalg.solve(K, np.array([u, v, 1.0]))
        tilt_axis = np.array([*rng.normal(size=2), 0.0])
        rotation = axis_angle(tilt_axis, np.radians(rng.uniform(20, 45))) @ axis_angle([0, 0, 1], rng.uniform(-0.3, 0.3))
        # Board z points out of the printed face, so it must point back at the camera (-z).
        pose = np.eye(4)
        pose[:3, :3] = rotation @ np.diag([1.0, -1.0, -1.0])
        pose[:3, 3] = centre
        poses.append(pose)
    return poses
