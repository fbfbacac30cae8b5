"""A simulated hand-eye recording made to look like real photos: the folder a robot cell exports.

    FOLDER/camera_info.yaml      the camera's intrinsics as a user would have them (distortion included)
    FOLDER/<pose>.png            8-bit grey photos of a ChArUco board: lens distortion, blur, uneven
                                 light, sensor noise, some boards partly outside the frame
    FOLDER/flange_poses.csv      pose,x,y,z,qx,qy,qz,qw (m): the controller's reported flange pose,
                                 with its own error (``flange_sigma``: m and rad per axis)
    FOLDER/truth.json            the true camera and board frames and flange poses (evaluation only)

Eye-to-hand: the board rides on the flange and one camera stands still. Eye-in-hand: the camera
rides on the flange and the board lies still in front of the robot. Each photo is rendered by
tracing every pixel through the lens (OpenCV's plumb_bob model) onto the board plane, so the
corners sit where the distortion puts them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from capture.camera_info import CameraInfo
from rigs.transforms import invert, look_at, quat_xyzw

WIDTH, HEIGHT = 1024, 768
K_TRUE = np.array([[900.0, 0, 515.0], [0, 900.0, 380.0], [0, 0, 1]])
DISTORTION_TRUE = np.array([-0.12, 0.08, 0.0006, -0.0004, -0.02])


@dataclass
class HandEyeScene:
    """True frames of one simulated cell (metres): ``base_T_camera`` (the fixed camera, eye-to-hand)
    or ``flange_T_camera`` (eye-in-hand), and ``flange_T_board`` or ``base_T_board``."""

    setup: str
    camera: np.ndarray  # base_T_camera (eye-to-hand) or flange_T_camera (eye-in-hand), optical frame
    board: np.ndarray  # flange_T_board (eye-to-hand) or base_T_board (eye-in-hand)


def _rotation(rng: np.random.Generator, degrees: float) -> np.ndarray:
    import cv2

    return cv2.Rodrigues(rng.normal(0.0, np.radians(degrees), 3))[0]


def _board_image(board, pixels_per_m: float):
    import cv2

    width = board.squares[0] * board.square
    height = board.squares[1] * board.square
    size = (int(round(width * pixels_per_m)), int(round(height * pixels_per_m)))
    image = board.opencv_board().generateImage(size, marginSize=0, borderBits=1)
    return cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)[..., 0] if image.ndim == 3 else image


def render(board, camera_T_board: np.ndarray, K: np.ndarray, distortion: np.ndarray, rng: np.random.Generator,
           blur_px: float = 1.0, noise_grey: float = 2.0, texture: np.ndarray | None = None,
           size: tuple[int, int] = (WIDTH, HEIGHT)) -> np.ndarray:
    """One grey photo (height, width) uint8 of ``board`` at ``camera_T_board`` (board frame, m)
    through a lens ``K``, ``distortion`` (plumb_bob), with uneven light, blur and noise; ``size``
    (width, height) px."""
    import cv2

    width, height = size
    pixels_per_m = 4000.0
    texture = _board_image(board, pixels_per_m) if texture is None else texture
    u, v = np.meshgrid(np.arange(width, dtype=np.float64), np.arange(height, dtype=np.float64))
    points = np.stack([u.ravel(), v.ravel()], axis=1).reshape(-1, 1, 2)
    rays = cv2.undistortPoints(points, K, distortion, None, None, None,
                                   (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 20, 1e-9)).reshape(-1, 2)
    rays = np.hstack([rays, np.ones((len(rays), 1))])
    # The board plane in the camera frame: opencv-board frame (origin at the printed top-left,
    # y down the print, z into the board) -> camera.
    camera_T_opencv = camera_T_board @ board.board_T_opencv
    normal, origin = camera_T_opencv[:3, 2], camera_T_opencv[:3, 3]
    depth = (origin @ normal) / (rays @ normal)
    hits = rays * depth[:, None]
    local = (hits - origin) @ camera_T_opencv[:3, :3]
    map_x = (local[:, 0] * pixels_per_m - 0.5).reshape(height, width).astype(np.float32)
    map_y = (local[:, 1] * pixels_per_m - 0.5).reshape(height, width).astype(np.float32)
    map_x[(depth <= 0).reshape(height, width)] = -1e6
    # Anti-aliasing: the board texture is much finer than a pixel; blur it to about a pixel first.
    scale = pixels_per_m * float(np.median(depth[depth > 0])) / K[0, 0]
    smooth = cv2.GaussianBlur(texture, (0, 0), max(0.5, 0.5 * scale)) if scale > 1.5 else texture
    image = cv2.remap(smooth.astype(np.float32), map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT,
                      borderValue=110.0)
    # Uneven light: a gradient across the frame and a soft spot, as from one lamp beside the cell.
    direction = rng.normal(size=2)
    direction /= np.linalg.norm(direction)
    gradient = ((u - width / 2) * direction[0] + (v - height / 2) * direction[1]) / width
    centre = rng.uniform([0, 0], [width, height])
    spot = np.exp(-((u - centre[0]) ** 2 + (v - centre[1]) ** 2) / (2 * (0.3 * width) ** 2))
    light = np.clip(0.75 + 0.45 * gradient + 0.25 * spot, 0.3, 1.2)
    image = image * light + 15.0
    image = cv2.GaussianBlur(image, (0, 0), blur_px)
    image = image + rng.normal(0.0, noise_grey, image.shape)
    return np.clip(np.round(image), 0, 255).astype(np.uint8)


def make_scene(setup: str, rng: np.random.Generator) -> HandEyeScene:
    """The true frames of one cell; the camera looks at the workspace in front of the robot."""
    target = np.array([0.6, 0.0, 0.3])
    if setup == "eye-to-hand":
        eye = np.array([1.3, 0.35, 0.9])
        base_T_camera = look_at(eye, target) @ _camera_from_body()
        flange_T_board = np.eye(4)
        flange_T_board[:3, :3] = _rotation(rng, 4.0)
        flange_T_board[:3, 3] = [0.012, -0.008, 0.045]
        return HandEyeScene(setup, base_T_camera, flange_T_board)
    flange_T_camera = np.eye(4)
    flange_T_camera[:3, :3] = _rotation(rng, 3.0)
    flange_T_camera[:3, 3] = [0.055, 0.01, 0.04]
    base_T_board = np.eye(4)
    base_T_board[:3, :3] = _rotation(rng, 5.0)
    base_T_board[:3, 3] = [0.65, -0.05, 0.02]
    return HandEyeScene(setup, flange_T_camera, base_T_board)


def _camera_from_body() -> np.ndarray:
    """look_at gives a body frame (x forward, z up); photos use the optical frame (z forward, y down)."""
    from capture.importers.tf_static import BODY_T_OPTICAL

    return BODY_T_OPTICAL


def views(scene: HandEyeScene, poses: int, rng: np.random.Generator, partial: float = 0.25) -> list[np.ndarray]:
    """``camera_T_board`` (4, 4) per photo: the board 0.45-0.8 m away, tilted up to 35 degrees, a
    ``partial`` share of the views off-centre so that part of the board leaves the frame."""
    out = []
    for k in range(poses):
        distance = rng.uniform(0.45, 0.8)
        off = 0.35 if rng.uniform() < partial else 0.1
        centre = np.array([rng.uniform(-off, off), rng.uniform(-off, off) * 0.75, 1.0]) * distance
        tilt = rng.normal(0.0, np.radians(20.0), 2)
        tilt = np.clip(tilt, -np.radians(35), np.radians(35))
        import cv2

        # The board faces the camera (its z towards the lens), tilted and spun about its normal.
        facing = np.diag([1.0, -1.0, -1.0])
        spin = cv2.Rodrigues(np.array([0.0, 0.0, rng.uniform(-0.6, 0.6)]))[0]
        tilted = cv2.Rodrigues(np.array([tilt[0], tilt[1], 0.0]))[0]
        pose = np.eye(4)
        pose[:3, :3] = tilted @ facing @ spin
        pose[:3, 3] = centre
        out.append(pose)
    return out


def flange_poses(scene: HandEyeScene, camera_T_board: list[np.ndarray]) -> np.ndarray:
    """(N, 4, 4) true ``base_T_flange`` that put the board (or camera) where each view needs it."""
    out = []
    for view in camera_T_board:
        if scene.setup == "eye-to-hand":
            out.append(scene.camera @ view @ invert(scene.board))
        else:
            out.append(scene.board @ invert(view) @ invert(scene.camera))
    return np.array(out)


def perturb(poses: np.ndarray, sigma_m: float, sigma_rad: float, rng: np.random.Generator) -> np.ndarray:
    """Reported poses: each true pose moved by N(0, sigma) per axis in position and rotation."""
    import cv2

    out = poses.copy()
    for pose in out:
        pose[:3, :3] = pose[:3, :3] @ cv2.Rodrigues(rng.normal(0.0, sigma_rad, 3))[0]
        pose[:3, 3] += rng.normal(0.0, sigma_m, 3)
    return out


def write_recording(folder: Path, board, setup: str, poses: int, seed: int, flange_sigma: tuple[float, float] =
                    (2e-4, np.radians(0.02)), partial: float = 0.25, recorded_distortion: np.ndarray | None = None,
                    scene: HandEyeScene | None = None, scale: float = 1.0) -> dict:
    """Write a simulated recording (module docstring) to ``folder``; returns its truth.

    ``recorded_distortion``: what camera_info.yaml states (default: the true distortion, as a
    camera calibrated beforehand would have it). ``scene``: the cell's true frames (default: drawn
    from ``seed``); pass another recording's to photograph the same camera and board mount again
    (then ``seed`` draws only the views, the noise and the flange errors). ``scale``: the image size
    and focal length times this (0.5: a 512 x 384 camera that sees the same)."""
    import cv2

    rng = np.random.default_rng(seed)
    scene = make_scene(setup, rng) if scene is None else scene
    if scene.setup != setup:
        raise ValueError(f"the scene is {scene.setup}, not {setup}")
    camera_T_board = views(scene, poses, rng, partial)
    true_flange = flange_poses(scene, camera_T_board)
    reported = perturb(true_flange, flange_sigma[0], flange_sigma[1], rng)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    K = K_TRUE.copy()
    K[:2] *= scale
    size = (int(round(WIDTH * scale)), int(round(HEIGHT * scale)))
    info = CameraInfo("camera", size[0], size[1], K.copy(),
                      DISTORTION_TRUE.copy() if recorded_distortion is None else np.asarray(recorded_distortion, float))
    info.save(folder / "camera_info.yaml")
    texture = _board_image(board, 4000.0)
    pose_ids = [f"p{k:04d}" for k in range(poses)]
    for pose, view in zip(pose_ids, camera_T_board):
        image = render(board, view, K, DISTORTION_TRUE, rng, blur_px=rng.uniform(0.6, 1.4), texture=texture, size=size)
        cv2.imwrite(str(folder / f"{pose}.png"), image)
    with open(folder / "flange_poses.csv", "w") as stream:
        stream.write("pose,x,y,z,qx,qy,qz,qw\n")
        for pose, transform in zip(pose_ids, reported):
            values = [*transform[:3, 3], *quat_xyzw(transform[:3, :3])]
            stream.write(pose + "," + ",".join(f"{v:.9f}" for v in values) + "\n")
    truth = {"setup": setup, "camera": scene.camera.tolist(), "board": scene.board.tolist(),
             "camera_is": "base_T_camera" if setup == "eye-to-hand" else "flange_T_camera",
             "board_is": "flange_T_board" if setup == "eye-to-hand" else "base_T_board",
             "K": K.tolist(), "distortion": DISTORTION_TRUE.tolist(),
             "flange_sigma_m": flange_sigma[0], "flange_sigma_rad": flange_sigma[1],
             "base_T_flange_true": true_flange.tolist(), "pose_ids": pose_ids}
    (folder / "truth.json").write_text(json.dumps(truth))
    return truth
