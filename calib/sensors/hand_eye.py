"""Starting values for a camera calibration: the board's pose per image (PnP) and a hand-eye /
robot-world solution for each camera's pose in the base frame and the board's pose on the tip.

The board rides on the tip and each camera stands still (eye-to-hand), so for images i, j of one
camera ``camera_T_board_k = camera_T_base @ base_T_tip_k @ tip_T_board``. Relative motions give
``A @ X = X @ B`` with ``A = tip_i_T_tip_j`` (from the kinematics), ``B = board_i_T_board_j`` (from
PnP) and ``X = tip_T_board``: the rotation by Park and Martin's least-squares fit of the rotation
vectors (a Procrustes problem), the translation by linear least squares, all cameras pooled. Each
camera's pose is then the average of ``camera_T_board_k @ inv(tip_T_board) @ inv(base_T_tip_k)``.

OpenCV 5.0's Python build lacks ``cv2.calibrateRobotWorldHandEye`` (FACTS.md); 5.1's has it, and
there :func:`opencv_cross_check` compares against it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pinocchio as pin

from calib.sensors.board import MIN_CORNERS, CharucoBoardSpec
from rigs.errors import InputError
from rigs.transforms import invert

MIN_PAIR_ROTATION = np.radians(5.0)  # relative motions that barely rotate say nothing about X's rotation


def board_pose_pnp(board: CharucoBoardSpec, ids: np.ndarray, pixels: np.ndarray, K: np.ndarray,
                   distortion: np.ndarray | None = None) -> tuple[np.ndarray, float] | None:
    """``camera_T_board`` (4, 4) of one detection and its RMS reprojection error (px), or None.

    ``ids`` (N,) corner ids, ``pixels`` (N, 2). A planar target has two pose solutions close to
    each other in some views; IPPE returns both and the better one is refined iteratively.
    """
    import cv2  # OpenCV takes 0.3 s to load; only camera work needs it

    if len(ids) < MIN_CORNERS:
        return None
    objects = board.corners_opencv(ids).astype(np.float64)
    image = np.asarray(pixels, dtype=np.float64).reshape(-1, 1, 2)
    distortion = np.zeros(5) if distortion is None else np.asarray(distortion, dtype=float)
    ok, rvecs, tvecs, errors = cv2.solvePnPGeneric(objects, image, K, distortion, flags=cv2.SOLVEPNP_IPPE)
    if not ok or not len(rvecs):
        return None
    best = int(np.argmin(np.asarray(errors).ravel()))
    ok, rvec, tvec = cv2.solvePnP(objects, image, K, distortion, rvec=np.array(rvecs[best], dtype=float),
                                  tvec=np.array(tvecs[best], dtype=float), useExtrinsicGuess=True,
                                  flags=cv2.SOLVEPNP_ITERATIVE)
    if not ok:
        return None
    camera_T_opencv = np.eye(4)
    camera_T_opencv[:3, :3] = cv2.Rodrigues(np.asarray(rvec, dtype=float).reshape(3))[0]
    camera_T_opencv[:3, 3] = np.asarray(tvec, dtype=float).reshape(3)
    projected, _ = cv2.projectPoints(objects, rvec, tvec, K, distortion)
    rms = float(np.sqrt(np.mean(np.sum((projected.reshape(-1, 2) - image.reshape(-1, 2)) ** 2, axis=1))))
    return camera_T_opencv @ invert(board.board_T_opencv), rms


def _rotation_log(rotation: np.ndarray) -> np.ndarray:
    return np.asarray(pin.log3(rotation))


def _project_rotation(matrix: np.ndarray) -> np.ndarray:
    u, _, vt = np.linalg.svd(matrix)
    return u @ np.diag([1.0, 1.0, np.sign(np.linalg.det(u @ vt))]) @ vt


@dataclass
class HandEyeSolution:
    """``camera_T_base`` name -> (4, 4); ``tip_T_board`` (4, 4); pairs used; residual spread of the
    per-image camera poses (m and rad), a measure of how well the nominal kinematics and PnP agree."""

    camera_T_base: dict[str, np.ndarray]
    tip_T_board: np.ndarray
    pairs: int
    camera_spread: dict[str, tuple[float, float]]


def hand_eye(base_T_tip: np.ndarray, camera_T_board: np.ndarray, cameras: list[str],
             rng: np.random.Generator, max_pairs_per_camera: int = 2000) -> HandEyeSolution:
    """Solve eye-to-hand for several fixed cameras sharing one board on the tip.

    ``base_T_tip`` (M, 4, 4) tip poses of the M board observations (nominal kinematics),
    ``camera_T_board`` (M, 4, 4) PnP poses, ``cameras`` (M,) which camera saw each.
    """
    names = sorted(set(cameras))
    cameras = np.asarray(cameras)
    alphas, betas, pair_list = [], [], []
    for name in names:
        rows = np.flatnonzero(cameras == name)
        if len(rows) < 3:
            raise InputError(f"camera {name!r}: the board was seen in only {len(rows)} images; "
                             f"its pose needs at least 3 views with the board at different orientations.")
        pairs = [(a, b) for k, a in enumerate(rows) for b in rows[k + 1:]]
        if len(pairs) > max_pairs_per_camera:
            pairs = [pairs[i] for i in rng.choice(len(pairs), max_pairs_per_camera, replace=False)]
        for i, j in pairs:
            A = invert(base_T_tip[i]) @ base_T_tip[j]
            B = invert(camera_T_board[i]) @ camera_T_board[j]
            alpha, beta = _rotation_log(A[:3, :3]), _rotation_log(B[:3, :3])
            if np.linalg.norm(alpha) < MIN_PAIR_ROTATION or np.linalg.norm(alpha) > np.pi - 0.1:
                continue
            alphas.append(alpha)
            betas.append(beta)
            pair_list.append((A, B))
    if len(pair_list) < 2:
        raise InputError("the board was seen at too few different orientations to place the cameras "
                         "(hand-eye needs pairs of views rotated by more than 5 degrees about different axes).")
    # alpha = R_X beta for every pair: R_X = argmin sum |alpha - R beta|^2 (Procrustes).
    M = np.einsum("ni,nj->ij", np.asarray(alphas), np.asarray(betas))
    rotation = _project_rotation(M)
    # (R_A - I) t_X = R_X t_B - t_A
    lhs = np.concatenate([A[:3, :3] - np.eye(3) for A, _ in pair_list])
    rhs = np.concatenate([rotation @ B[:3, 3] - A[:3, 3] for A, B in pair_list])
    translation = np.linalg.lstsq(lhs, rhs, rcond=None)[0]
    tip_T_board = np.eye(4)
    tip_T_board[:3, :3], tip_T_board[:3, 3] = rotation, translation

    camera_T_base, spread = {}, {}
    board_T_tip = invert(tip_T_board)
    for name in names:
        rows = np.flatnonzero(cameras == name)
        estimates = np.array([camera_T_board[k] @ board_T_tip @ invert(base_T_tip[k]) for k in rows])
        pose = np.eye(4)
        pose[:3, :3] = _project_rotation(estimates[:, :3, :3].sum(axis=0))
        pose[:3, 3] = np.median(estimates[:, :3, 3], axis=0)
        camera_T_base[name] = pose
        angles = [np.linalg.norm(_rotation_log(pose[:3, :3].T @ e[:3, :3])) for e in estimates]
        spread[name] = (float(np.sqrt(np.mean(np.sum((estimates[:, :3, 3] - pose[:3, 3]) ** 2, axis=1)))),
                        float(np.sqrt(np.mean(np.square(angles)))))
    return HandEyeSolution(camera_T_base, tip_T_board, len(pair_list), spread)


def opencv_cross_check(base_T_tip: np.ndarray, camera_T_board: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(``camera_T_base``, ``tip_T_board``) from OpenCV's robot-world hand-eye for one camera, or
    None where the build lacks it (OpenCV 5.0's Python wheels).

    OpenCV solves ``cam_T_world = cam_T_gripper @ gripper_T_base @ base_T_world`` for a camera on
    the gripper; with the roles swapped (our board is its "camera", our fixed camera its "world")
    the same equation reads ``board_T_camera = board_T_tip @ tip_T_base @ base_T_camera``.
    Translations go in as (3, 1) columns: 5.1 refuses flat (3,) vectors.
    """
    import cv2  # OpenCV takes 0.3 s to load; only camera work needs it

    if not hasattr(cv2, "calibrateRobotWorldHandEye"):
        return None
    board_T_camera = [invert(t) for t in camera_T_board]
    tip_T_base = [invert(t) for t in base_T_tip]
    R_base2world, t_base2world, R_gripper2cam, t_gripper2cam = cv2.calibrateRobotWorldHandEye(
        [t[:3, :3] for t in board_T_camera], [t[:3, 3:] for t in board_T_camera],
        [t[:3, :3] for t in tip_T_base], [t[:3, 3:] for t in tip_T_base])
    camera_T_base, board_T_tip = np.eye(4), np.eye(4)
    camera_T_base[:3, :3], camera_T_base[:3, 3] = np.asarray(R_base2world), np.asarray(t_base2world).ravel()
    board_T_tip[:3, :3], board_T_tip[:3, 3] = np.asarray(R_gripper2cam), np.asarray(t_gripper2cam).ravel()
    return camera_T_base, invert(board_T_tip)
