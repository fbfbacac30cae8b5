"""OpenCV's closed-form hand-eye solutions, every method, for both set-ups.

A photo k of camera c shows the board at ``camera_T_board_k = X_c @ G_k @ Y`` with the flange pose
``F_k = base_T_flange_k``:

- eye-to-hand (board on the flange, camera standing still): ``X = camera_T_base``,
  ``G_k = F_k``, ``Y = flange_T_board``;
- eye-in-hand (camera on the flange, board standing still): ``X = camera_T_flange``,
  ``G_k = inv(F_k)``, ``Y = base_T_board``.

``cv2.calibrateHandEye`` (Tsai, Park, Horaud, Andreff, Daniilidis) solves for the camera's frame
on the moving body; fed the inverse flange poses it solves the fixed camera instead.
``cv2.calibrateRobotWorldHandEye`` (Shah, Li) gives both frames at once. Each answer gives X and
Y; the other one of a camera that shares Y is the average over its photos.
"""

from __future__ import annotations

import numpy as np

from rigs.transforms import invert

HAND_EYE_METHODS = ("tsai", "park", "horaud", "andreff", "daniilidis")
ROBOT_WORLD_METHODS = ("shah", "li")
SETUPS = ("eye-to-hand", "eye-in-hand")


def moving_poses(setup: str, base_T_flange: np.ndarray) -> np.ndarray:
    """(N, 4, 4) ``G_k``: the flange poses (eye-to-hand) or their inverses (eye-in-hand)."""
    if setup == "eye-to-hand":
        return np.asarray(base_T_flange, float)
    return np.array([invert(pose) for pose in base_T_flange])


def mean_pose(poses: list[np.ndarray] | np.ndarray) -> np.ndarray:
    """The rotation nearest the sum of rotations, the mean of translations."""
    poses = np.asarray(poses, float)
    u, _, vt = np.linalg.svd(poses[:, :3, :3].sum(axis=0))
    out = np.eye(4)
    out[:3, :3] = u @ np.diag([1.0, 1.0, np.sign(np.linalg.det(u @ vt))]) @ vt
    out[:3, 3] = poses[:, :3, 3].mean(axis=0)
    return out


def closed_form(method: str, setup: str, base_T_flange: np.ndarray,
                camera_T_board: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(X, Y) of one camera's photos by one OpenCV method, or None where it gives no finite answer.

    ``base_T_flange`` (N, 4, 4) reported flange poses, ``camera_T_board`` (N, 4, 4) per-photo PnP.
    """
    import cv2  # OpenCV takes 0.3 s to load; only camera work needs it

    G = moving_poses(setup, base_T_flange)
    try:
        if method in HAND_EYE_METHODS:
            # calibrateHandEye solves gripper_T_camera from base_T_gripper; the moving body is the
            # flange (eye-in-hand) or, seen from the board's side, the base (eye-to-hand: pass
            # flange_T_base and it returns base_T_camera).
            moving = np.array([invert(g) for g in G])  # base_T_flange (in hand) or flange_T_base (to hand)
            flag = getattr(cv2, f"CALIB_HAND_EYE_{method.upper()}")
            rotation, translation = cv2.calibrateHandEye([m[:3, :3] for m in moving], [m[:3, 3:] for m in moving],
                                                         [t[:3, :3] for t in camera_T_board],
                                                         [t[:3, 3:] for t in camera_T_board], method=flag)
            body_T_camera = np.eye(4)
            body_T_camera[:3, :3], body_T_camera[:3, 3] = rotation, np.asarray(translation).ravel()
            X = invert(body_T_camera)
        elif method in ROBOT_WORLD_METHODS:
            if not hasattr(cv2, "calibrateRobotWorldHandEye"):
                return None
            flag = getattr(cv2, f"CALIB_ROBOT_WORLD_HAND_EYE_{method.upper()}")
            if setup == "eye-in-hand":
                # world = board, gripper = flange: camera_T_board = camera_T_flange @ flange_T_base @ base_T_board
                flange_T_base = [invert(p) for p in base_T_flange]
                R_bw, t_bw, R_gc, t_gc = cv2.calibrateRobotWorldHandEye(
                    [t[:3, :3] for t in camera_T_board], [t[:3, 3:] for t in camera_T_board],
                    [t[:3, :3] for t in flange_T_base], [t[:3, 3:] for t in flange_T_base], method=flag)
            else:
                # Roles swapped: the board is OpenCV's camera, the fixed camera its world:
                # board_T_camera = board_T_flange @ flange_T_base @ base_T_camera.
                board_T_camera = [invert(t) for t in camera_T_board]
                flange_T_base = [invert(p) for p in base_T_flange]
                R_bw, t_bw, R_gc, t_gc = cv2.calibrateRobotWorldHandEye(
                    [t[:3, :3] for t in board_T_camera], [t[:3, 3:] for t in board_T_camera],
                    [t[:3, :3] for t in flange_T_base], [t[:3, 3:] for t in flange_T_base], method=flag)
            first, second = np.eye(4), np.eye(4)
            first[:3, :3], first[:3, 3] = R_bw, np.asarray(t_bw).ravel()
            second[:3, :3], second[:3, 3] = R_gc, np.asarray(t_gc).ravel()
            if setup == "eye-in-hand":
                X = second  # camera_T_flange
            else:
                X = first  # camera_T_base
        else:
            raise ValueError(f"unknown hand-eye method {method!r}")
    except cv2.error:
        return None
    if not np.all(np.isfinite(X)):
        return None
    Y = mean_pose([invert(X @ g) @ t for g, t in zip(G, camera_T_board)])
    return X, Y


def all_methods() -> tuple[str, ...]:
    import cv2  # OpenCV takes 0.3 s to load; only camera work needs it

    return HAND_EYE_METHODS + (ROBOT_WORLD_METHODS if hasattr(cv2, "calibrateRobotWorldHandEye") else ())
