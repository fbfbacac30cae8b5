"""Hand-eye calibration that holds the arm: ``HandEyeCalibrator(...).fit(sessions) -> HandEyeCalibration``.

The arm's flange pose per photo is taken as given (the controller's report, or the nominal
kinematics of a joints session); what is fitted is each camera's frame, the board's, and with
``fit_intrinsics`` each camera's fx, fy, cx, cy and distortion k1 k2 p1 p2 k3. The model of a
corner ``p`` (board frame) in photo k of camera c (``calib.sensors.hand_eye_closed_form``):

    pixel = lens(K_c, d_c, X_c @ G_k @ Y @ p)

Steps: board corners in every photo (photos with fewer than ``min_corners`` are named and left
out); PnP per photo (its residual is the corners' noise: each photo's own pose absorbs any flange
error); every OpenCV closed-form solution, the one with the lowest reprojection error kept; then
one robust least-squares fit over every corner, each photo weighted by its covariance or every
corner alike, whichever the cross-validation holds out better. Held-out figures by cross-validation over poses
(the calibrator's folds): the fit and the closed-form start are both redone on each fold's other
poses and judged on its own, so the two figures printed side by side are measured the same way.

The flange poses' own error (tenths of a millimetre, hundredths of a degree) moves each photo's
corners together, so no held-out figure can go below it. Its size is stated (``flange_sigma``)
or estimated from the residuals' structure: the part of each photo's residual that a small move
of that photo's flange explains, beyond what the corner noise puts there.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import yaml
from scipy.optimize import least_squares, nnls

from calib.calibrator import data_hash
from calib.fit.splits import describe_folds, fold_count, fold_rows
from calib.sensors.board import LEGACY_HINT, MIN_CORNERS, BoardDetector, CharucoBoardSpec, parse_board
from calib.sensors.board_corners import session_board
from calib.sensors.hand_eye import board_pose_pnp
from calib.sensors.hand_eye_closed_form import SETUPS, all_methods, closed_form, mean_pose, moving_poses
from capture.camera_info import CameraInfo
from capture.session import Session, load_session
from rigs.errors import InputError, setting
from rigs.files import atomic_write_text
from rigs.kinematics import ArmModel
from rigs.transforms import invert
from rigs.verdicts import Verdict

INTRINSIC_NAMES = ("fx", "fy", "cx", "cy", "k1", "k2", "p1", "p2", "k3")
MOUNTS = {"flange": "eye-to-hand", "world": "eye-in-hand"}
# A reported flange pose worse than this is not what a controller reports: residuals that need
# more flange error to be noise point at the model (or at poses from another robot state).
PLAUSIBLE_FLANGE_M, PLAUSIBLE_FLANGE_RAD = 1e-3, np.radians(0.1)
TOLERANCE_FACTOR = 2.0  # the verdict's tolerance: this times the data's floor (as calibrate's verdict)


def _rodrigues(vector: np.ndarray) -> np.ndarray:
    import cv2  # OpenCV takes 0.3 s to load; only camera work needs it

    return cv2.Rodrigues(np.asarray(vector, float).reshape(3))[0]


def _pose(vector: np.ndarray) -> np.ndarray:
    out = np.eye(4)
    out[:3, :3] = _rodrigues(vector[:3])
    out[:3, 3] = vector[3:6]
    return out


def _vector(pose: np.ndarray) -> np.ndarray:
    import cv2  # OpenCV takes 0.3 s to load; only camera work needs it

    return np.concatenate([cv2.Rodrigues(pose[:3, :3])[0].ravel(), pose[:3, 3]])


@dataclass
class Photo:
    """One photo with the board found: which camera and pose, ``ids`` (n,), ``pixels`` (n, 2) as
    recorded (distorted), ``points`` (n, 3) the corners in the board frame, PnP pose and RMS."""

    camera: str
    pose: str
    key: int  # index into the fit's pose list (sessions concatenated)
    ids: np.ndarray
    pixels: np.ndarray
    points: np.ndarray
    camera_T_board: np.ndarray
    pnp_rms_px: float

    @property
    def count(self) -> int:
        return len(self.ids)


@dataclass
class HandEyeData:
    """What a fit reads: photos, flange poses per pose key (K, 4, 4), pose names, the board, the
    set-up, the recorded intrinsics per camera, and the photos left out with their corner counts."""

    photos: list[Photo]
    base_T_flange: np.ndarray
    pose_names: list[str]
    pose_session: np.ndarray
    board: CharucoBoardSpec
    setup: str
    K: dict[str, np.ndarray]
    distortion: dict[str, np.ndarray]
    left_out: list[dict]
    pixel_sigma: float

    @property
    def cameras(self) -> list[str]:
        return sorted(self.K)


def session_flange_poses(session: Session, tip_link: str | None = None) -> np.ndarray:
    """(N, 4, 4) flange poses of the session's pose rows: as reported, or from the nominal URDF."""
    if session.base_T_flange is not None:
        return session.base_T_flange
    if not session.described:
        raise InputError(f"{session.path}: has neither flange poses nor a robot description to compute them from.")
    chain = ArmModel.from_urdf(session.urdf_path, session.base_link, tip_link or session.tip_link)
    return chain.base_T_tip_batch(session.q)


def session_setup(sessions: list[Session], setup: str | None) -> str:
    """The set-up a fit uses: ``setup`` when given, else the sessions' board mount."""
    mounts = {((s.manifest.get("sensors") or {}).get("board") or {}).get("mount", "flange") for s in sessions}
    if len(mounts) > 1:
        raise InputError("the sessions disagree on where the board is mounted (flange and world); calibrate them apart.")
    mount = mounts.pop()
    if mount not in MOUNTS:
        raise InputError(f"{sessions[0].path / 'session.json'}: sensors.board.mount {mount!r} is neither 'flange' "
                         f"(eye-to-hand) nor 'world' (eye-in-hand).")
    if setup is not None and setup not in SETUPS:
        raise InputError(f"{setting('setup')} {setup!r} is not one of {', '.join(SETUPS)}.")
    return setup or MOUNTS[mount]


def flange_source(session: Session) -> str:
    """Where a session's flange poses come from: "reported" by the controller, or the nominal "urdf"
    at its joint readings."""
    return "reported" if session.base_T_flange is not None else "urdf"


def load_photos(sessions: list[Session], setup: str | None = None, min_corners: int = MIN_CORNERS,
                tip_link: str | None = None, pixel_sigma: float | None = None,
                progress: Callable[[int, int], None] | None = None,
                intrinsics: dict[str, tuple[np.ndarray, np.ndarray]] | None = None) -> HandEyeData:
    """Find the board in every photo of ``sessions``; InputError when no photo shows enough corners.

    ``intrinsics``: per camera (K (3, 3), plumb_bob distortion (5,)) to place the board with and to
    carry in the result, instead of the sessions' camera_info (a calibration's, when validating it)."""
    if not sessions:
        raise InputError("no sessions to calibrate.")
    boards = {session_board(s) for s in sessions}
    if None in boards:
        bad = next(s for s in sessions if session_board(s) is None)
        raise InputError(f"{bad.path / 'session.json'}: sensors.board is missing; a hand-eye calibration needs the "
                         f"ChArUco board the photos show (import with `selfcal import images --board`).")
    if len(boards) > 1:
        raise InputError("the sessions describe different boards; calibrate them apart.")
    board = boards.pop()
    setup = session_setup(sessions, setup)
    detector = BoardDetector(board)
    photos, left_out, flange, names, owner = [], [], [], [], []
    K, distortion = {}, {}
    total = sum(len(s.cameras) * len(s.pose_ids) for s in sessions)
    done = 0
    for index, session in enumerate(sessions):
        poses = session_flange_poses(session, tip_link)
        offset = len(names)
        names += [pose if len(sessions) == 1 else f"{session.path.name}/{pose}" for pose in session.pose_ids]
        flange.append(poses)
        owner += [index] * len(session.pose_ids)
        for name, camera in sorted(session.cameras.items()):
            if name in K and (not np.allclose(K[name], camera.info.K) or
                              not np.allclose(distortion[name], camera.info.distortion)):
                raise InputError(f"{session.path}: camera {name!r} has other intrinsics than in the first session.")
            K[name], distortion[name] = camera.info.K.copy(), np.resize(np.asarray(camera.info.distortion, float), 5)
            if intrinsics is not None and name in intrinsics:
                K[name], distortion[name] = (np.asarray(value, float).copy() for value in intrinsics[name])
            for row, pose in enumerate(session.pose_ids):
                done += 1
                path = session.image_path(name, pose, "rgb")
                if not path.is_file():
                    continue
                image = session.image(name, pose, "rgb")
                detection = detector.detect(image)
                if progress is not None:
                    progress(done, total)
                where = f"{path}"
                if detection.count < min_corners:
                    left_out.append({"photo": where, "camera": name, "pose": names[offset + row],
                                     "corners": detection.count,
                                     "reason": f"{detection.count} corners found, fewer than the {min_corners} a pose needs"})
                    continue
                solved = board_pose_pnp(board, detection.ids, detection.pixels, K[name], distortion[name])
                if solved is None:
                    left_out.append({"photo": where, "camera": name, "pose": names[offset + row],
                                     "corners": detection.count, "reason": "PnP found no pose of the board"})
                    continue
                photos.append(Photo(name, names[offset + row], offset + row, detection.ids, detection.pixels,
                                    board.corners(detection.ids), solved[0], solved[1]))
    if not photos:
        paths = ", ".join(str(s.path) for s in sessions)
        raise InputError(f"{paths}: the board {board.describe()} was not found (at least {min_corners} corners) in "
                         f"any of the {total} photos; is the board given at import (`selfcal import images --board`) the "
                         f"one in the photos? ({LEGACY_HINT[0].upper() + LEGACY_HINT[1:]}.)")
    if pixel_sigma is None:
        # Each photo's own PnP pose absorbs any flange error: its residual is the corners' noise.
        squares = sum(p.pnp_rms_px ** 2 * p.count for p in photos)
        dof = sum(2 * p.count - 6 for p in photos)
        pixel_sigma = float(np.sqrt(squares / max(dof, 1)))
    return HandEyeData(photos, np.concatenate(flange), names, np.array(owner), board, setup, K, distortion,
                       left_out, float(pixel_sigma))


# -- the model ------------------------------------------------------------------------------------

@dataclass
class Layout:
    """Where each group sits in the parameter vector: X per camera (6), Y (6), intrinsics per
    camera (9: fx fy cx cy k1 k2 p1 p2 k3) when fitted."""

    cameras: list[str]
    fit_intrinsics: bool

    @property
    def size(self) -> int:
        return 6 * len(self.cameras) + 6 + (9 * len(self.cameras) if self.fit_intrinsics else 0)

    def x(self, camera: str) -> slice:
        i = self.cameras.index(camera)
        return slice(6 * i, 6 * i + 6)

    @property
    def y(self) -> slice:
        start = 6 * len(self.cameras)
        return slice(start, start + 6)

    def intrinsics(self, camera: str) -> slice:
        start = 6 * len(self.cameras) + 6 + 9 * self.cameras.index(camera)
        return slice(start, start + 9)


@dataclass
class State:
    """One solution: X per camera, Y, K and distortion per camera (4, 4 / 3, 3 / 5,)."""

    X: dict[str, np.ndarray]
    Y: np.ndarray
    K: dict[str, np.ndarray]
    distortion: dict[str, np.ndarray]

    def vector(self, layout: Layout) -> np.ndarray:
        theta = np.zeros(layout.size)
        for name in layout.cameras:
            theta[layout.x(name)] = _vector(self.X[name])
            if layout.fit_intrinsics:
                K = self.K[name]
                theta[layout.intrinsics(name)] = [K[0, 0], K[1, 1], K[0, 2], K[1, 2], *self.distortion[name]]
        theta[layout.y] = _vector(self.Y)
        return theta

    @classmethod
    def from_vector(cls, theta: np.ndarray, layout: Layout, base: "State") -> "State":
        X = {name: _pose(theta[layout.x(name)]) for name in layout.cameras}
        K, distortion = dict(base.K), dict(base.distortion)
        if layout.fit_intrinsics:
            for name in layout.cameras:
                fx, fy, cx, cy, *d = theta[layout.intrinsics(name)]
                K[name] = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1.0]])
                distortion[name] = np.array(d)
        return cls(X, _pose(theta[layout.y]), K, distortion)


def project_photo(state: State, photo: Photo, G: np.ndarray) -> np.ndarray:
    """(n, 2) predicted pixels of ``photo``'s corners with the moving pose ``G`` (4, 4)."""
    import cv2  # OpenCV takes 0.3 s to load; only camera work needs it

    camera_T_board = state.X[photo.camera] @ G @ state.Y
    points = photo.points @ camera_T_board[:3, :3].T + camera_T_board[:3, 3]
    if np.any(points[:, 2] <= 1e-6):
        return np.full((len(points), 2), 1e6)
    projected, _ = cv2.projectPoints(points, np.zeros(3), np.zeros(3), state.K[photo.camera],
                                     state.distortion[photo.camera])
    return projected.reshape(-1, 2)


class PhotoStack:
    """``photos`` grouped by camera with their corners stacked, so that one evaluation projects each
    camera's corners in one OpenCV call: a call per photo cost the hand-eye fit, whose finite differences
    evaluate it thousands of times, about a third of its time. The same pixels as :func:`project_photo`."""

    def __init__(self, photos: list[Photo]):
        self.photos = photos
        self.groups = []  # (camera, photo indices, per-corner photo row, stacked points (N, 3), pixels (N, 2))
        for camera in sorted({p.camera for p in photos}):
            members = [i for i, p in enumerate(photos) if p.camera == camera]
            rows = np.concatenate([np.full(photos[i].count, k) for k, i in enumerate(members)])
            cuts = np.cumsum([photos[i].count for i in members])[:-1]
            self.groups.append((camera, members, rows, cuts, np.concatenate([photos[i].points for i in members]),
                                np.concatenate([photos[i].pixels for i in members])))
        self.keys = {camera: [photos[i].key for i in members] for camera, members, *_ in self.groups}

    def errors(self, state: State, G: np.ndarray) -> list[np.ndarray]:
        """Per photo (n, 2) predicted - measured pixels; a photo with a corner behind its camera gets 1e6."""
        import cv2  # OpenCV takes 0.3 s to load; only camera work needs it

        out: list[np.ndarray] = [np.empty((0, 2))] * len(self.photos)
        for camera, members, rows, cuts, points, pixels in self.groups:
            poses = state.X[camera] @ G[self.keys[camera]] @ state.Y  # (m, 4, 4)
            in_camera = np.einsum("nij,nj->ni", poses[rows, :3, :3], points) + poses[rows, :3, 3]
            projected, _ = cv2.projectPoints(in_camera, np.zeros(3), np.zeros(3), state.K[camera],
                                             state.distortion[camera])
            error = projected.reshape(-1, 2) - pixels
            behind = set(rows[in_camera[:, 2] <= 1e-6].tolist())
            for k, (i, piece) in enumerate(zip(members, np.split(error, cuts))):
                out[i] = np.full_like(piece, 1e6) - self.photos[i].pixels if k in behind else piece
        return out


def residuals(state: State, photos: list[Photo], G: np.ndarray) -> list[np.ndarray]:
    """Per photo (n, 2) predicted - measured pixels."""
    return PhotoStack(photos).errors(state, G)


def rms_px(errors: list[np.ndarray]) -> float | None:
    """RMS over corners of the 2D pixel error (as calibrate quotes it)."""
    if not errors:
        return None
    stacked = np.concatenate(errors)
    return float(np.sqrt(np.mean(np.sum(stacked ** 2, axis=1))))


def refine(start: State, photos: list[Photo], G: np.ndarray, fit_intrinsics: bool, pixel_sigma: float,
           robust: bool = True, whitening: dict[int, np.ndarray] | None = None):
    """Least squares from ``start`` over every corner of ``photos``: (State, scipy result, layout).

    ``whitening``: per photo (by ``id``) a (2n, 2n) matrix W with ``W @ r`` of unit covariance
    (:func:`photo_whitening`); None weighs every corner by the pixel noise alone."""
    layout = Layout(sorted({p.camera for p in photos}), fit_intrinsics)
    stack = PhotoStack(photos)

    def function(theta: np.ndarray) -> np.ndarray:
        state = State.from_vector(theta, layout, start)
        errors = stack.errors(state, G)
        if whitening is None:
            return np.concatenate([r.ravel() for r in errors]) / pixel_sigma
        return np.concatenate([whitening[id(p)] @ r.ravel() for p, r in zip(photos, errors)])

    theta0 = start.vector(layout)
    result = least_squares(function, theta0, method="trf", x_scale="jac", loss="soft_l1" if robust else "linear",
                           f_scale=3.0, max_nfev=200 * layout.size)
    return State.from_vector(result.x, layout, start), result, layout


def closed_form_starts(data: HandEyeData, photos: list[Photo], G: np.ndarray) -> dict[str, State]:
    """Every OpenCV method's answer (X per camera, shared Y) on ``photos``; methods without one are absent."""
    cameras = sorted({p.camera for p in photos})
    by_camera = {c: [p for p in photos if p.camera == c] for c in cameras}
    lead = max(cameras, key=lambda c: len(by_camera[c]))
    out = {}
    for method in all_methods():
        own = by_camera[lead]
        if len(own) < 3:
            break
        solved = closed_form(method, data.setup, data.base_T_flange[[p.key for p in own]],
                             np.array([p.camera_T_board for p in own]))
        if solved is None:
            continue
        X = {lead: solved[0]}
        for camera in cameras:
            if camera != lead:
                X[camera] = mean_pose([p.camera_T_board @ invert(G[p.key] @ solved[1]) for p in by_camera[camera]])
        out[method] = State(X, solved[1], dict(data.K), dict(data.distortion))
    return out


def best_start(data: HandEyeData, photos: list[Photo], G: np.ndarray) -> tuple[str, State, dict[str, float]]:
    """The closed-form answer with the lowest reprojection RMS on ``photos``, and every method's RMS."""
    starts = closed_form_starts(data, photos, G)
    if not starts:
        raise InputError("no OpenCV hand-eye method found a solution: the photos need at least 3 poses rotated "
                         "about different axes.")
    scores = {method: rms_px(residuals(state, photos, G)) for method, state in starts.items()}
    method = min(scores, key=lambda m: scores[m])
    return method, starts[method], scores


# -- flange error -------------------------------------------------------------------------------

def flange_jacobians(state: State, photos: list[Photo], base_T_flange: np.ndarray, setup: str) -> list[np.ndarray]:
    """Per photo (2n, 6): how its corners move per metre of flange translation (base axes, first 3)
    and per radian of flange rotation (flange axes, last 3), by central differences."""
    out = []
    step_m, step_rad = 1e-5, 1e-5
    for photo in photos:
        F = base_T_flange[photo.key]
        columns = []
        for axis in range(6):
            moved = []
            for sign in (1.0, -1.0):
                P = F.copy()
                if axis < 3:
                    P[axis, 3] += sign * step_m
                else:
                    vector = np.zeros(3)
                    vector[axis - 3] = sign * step_rad
                    P[:3, :3] = P[:3, :3] @ _rodrigues(vector)
                moved.append(project_photo(state, photo, moving_poses(setup, P[None])[0]).ravel())
            columns.append((moved[0] - moved[1]) / (2 * (step_m if axis < 3 else step_rad)))
        out.append(np.array(columns).T)
    return out


def estimate_flange_sigma(errors: list[np.ndarray], jacobians: list[np.ndarray], fit_jacobian: np.ndarray,
                          pixel_sigma: float) -> tuple[float, float]:
    """(metres, radians) per axis of flange error that the residuals' per-photo structure shows.

    Per photo, the residual's projection onto the six directions a flange move takes its corners
    holds corner noise and flange error; the fit's shared frames take a part of both out. With
    ``M = I - H`` (H the fit's hat matrix, from ``fit_jacobian``, rows as the residuals) and the
    photo's projector ``P``, its expected square is ``sigma_px^2 |P M|^2 + sigma_t^2 |P M J_t|^2 +
    sigma_r^2 |P M J_r|^2``: non-negative least squares over photos for the two flange variances.
    """
    A = np.asarray(fit_jacobian, float)
    sizes = [J.shape[0] for J in jacobians]
    starts = np.concatenate([[0], np.cumsum(sizes)])
    total = starts[-1]
    J_t, J_r = np.zeros((total, 3 * len(jacobians))), np.zeros((total, 3 * len(jacobians)))
    for k, J in enumerate(jacobians):
        J_t[starts[k]:starts[k + 1], 3 * k:3 * k + 3] = J[:, :3]
        J_r[starts[k]:starts[k + 1], 3 * k:3 * k + 3] = J[:, 3:]
    pseudo = np.linalg.pinv(A)

    def without_fit(B: np.ndarray) -> np.ndarray:
        return B - A @ (pseudo @ B)

    M_t, M_r = without_fit(J_t), without_fit(J_r)
    rows, targets = [], []
    for k, (error, J) in enumerate(zip(errors, jacobians)):
        q, _ = np.linalg.qr(J)
        block = slice(starts[k], starts[k + 1])
        M_rows = -A[block] @ pseudo
        M_rows[:, block] += np.eye(sizes[k])
        structured = float(np.sum((q.T @ error.ravel()) ** 2))
        noise = float(np.sum((q.T @ M_rows) ** 2))
        rows.append([np.sum((q.T @ M_t[block]) ** 2), np.sum((q.T @ M_r[block]) ** 2)])
        targets.append(structured - pixel_sigma ** 2 * noise)
    solution, _ = nnls(np.array(rows), np.array(targets))
    return float(np.sqrt(solution[0])), float(np.sqrt(solution[1]))


def photo_whitening(photos: list[Photo], jacobians: list[np.ndarray], pixel_sigma: float, sigma_m: float,
                    sigma_rad: float) -> dict[int, np.ndarray]:
    """Per photo (by ``id``): W (2n, 2n) with ``W^T W`` the inverse of its corners' covariance,
    ``sigma_px^2 I + J diag(sigma_t^2, sigma_r^2) J^T``: a flange error moves all of a photo's
    corners together, so the photo counts as the pose it is, not as n independent corners."""
    out = {}
    for photo, J in zip(photos, jacobians):
        D = np.diag([sigma_m ** 2] * 3 + [sigma_rad ** 2] * 3)
        covariance = pixel_sigma ** 2 * np.eye(J.shape[0]) + J @ D @ J.T
        out[id(photo)] = np.linalg.cholesky(np.linalg.inv(covariance)).T
    return out


def floor_px(jacobians: list[np.ndarray], pixel_sigma: float, sigma_m: float, sigma_rad: float) -> float:
    """The 2D RMS per corner that corner noise and flange error alone give a perfect model (px)."""
    total, count = 0.0, 0
    for J in jacobians:
        corners = J.shape[0] // 2
        total += 2 * pixel_sigma ** 2 * corners + sigma_m ** 2 * np.sum(J[:, :3] ** 2) + sigma_rad ** 2 * np.sum(J[:, 3:] ** 2)
        count += corners
    return float(np.sqrt(total / count))


# -- the calibrator -----------------------------------------------------------------------------

class HandEyeCalibrator:
    """Camera and board frames (and optionally intrinsics) with the arm held at its flange poses.

    ``setup``: eye-to-hand or eye-in-hand (None: the sessions' ``sensors.board.mount``).
    ``fit_intrinsics``: also fit fx, fy, cx, cy, k1, k2, p1, p2, k3 of every camera.
    ``flange_sigma``: (m, rad) per axis of the flange poses' own error, or None to estimate it.
    ``folds``/``seed``: cross-validation by pose, as the calibrator's (same folds for the same data).
    ``min_corners``: photos with fewer corners are named and left out.
    """

    def __init__(self, setup: str | None = None, fit_intrinsics: bool = False, flange_sigma: tuple[float, float] | None = None,
                 folds: int | None = None, seed: int = 0, pixel_sigma: float | None = None,
                 min_corners: int = MIN_CORNERS, tip_link: str | None = None):
        if setup is not None and setup not in SETUPS:
            raise InputError(f"{setting('setup')} {setup!r} is not one of {', '.join(SETUPS)}.")
        if flange_sigma is not None and not (flange_sigma[0] >= 0 and flange_sigma[1] >= 0):
            raise InputError(f"{setting('flange_sigma')} must be non-negative, got {flange_sigma}.")
        if folds is not None and int(folds) < 2:
            raise InputError(f"{setting('folds')} must be at least 2, got {folds}.")
        if pixel_sigma is not None and not pixel_sigma > 0:
            raise InputError(f"{setting('pixel_sigma')} must be positive, got {pixel_sigma}.")
        self.setup = setup
        self.fit_intrinsics = fit_intrinsics
        self.flange_sigma = flange_sigma
        self.folds = folds
        self.seed = seed
        self.pixel_sigma = pixel_sigma
        self.min_corners = min_corners
        self.tip_link = tip_link
        self._progress: Callable[[str], None] = lambda message: None  # set by each fit

    def fit(self, sessions: list[Session | Path], progress: Callable[[str], None] | None = None) -> "HandEyeCalibration":
        """Fit from sessions of photos at flange poses; ``progress``: told each stage's name as it starts."""
        self._progress = progress or (lambda message: None)
        sessions = [s if isinstance(s, Session) else load_session(Path(s)) for s in sessions]
        self._progress("finding the board")
        data = load_photos(sessions, self.setup, self.min_corners, self.tip_link, self.pixel_sigma)
        calibration = self.fit_data(data, [str(s.path) for s in sessions])
        calibration.summary["image_sizes"] = {name: [camera.info.width, camera.info.height]
                                              for s in sessions for name, camera in s.cameras.items()}
        calibration.summary["data_hash"] = data_hash(sessions)  # validate knows its own fit data by it
        # What a validation session must hold to be predicted the same way (all sessions agree: model_choice).
        source = flange_source(sessions[0])
        calibration.summary["flange_poses"] = {"source": source} if source == "reported" else {
            "source": source, "joint_names": list(sessions[0].joint_names),
            "tip_link": self.tip_link or sessions[0].tip_link}
        return calibration

    def fit_data(self, data: HandEyeData, sources: list[str] | None = None) -> "HandEyeCalibration":
        photos = data.photos
        G = moving_poses(data.setup, data.base_T_flange)
        poses_seen = sorted({p.key for p in photos})
        if len(poses_seen) < 3:
            raise InputError(f"the board was found in photos of only {len(poses_seen)} poses; hand-eye needs at least 3 "
                             f"poses rotated about different axes.")
        self._progress("closed-form starts")
        method, start, scores = best_start(data, photos, G)
        self._progress("least squares")
        state, result, layout = refine(start, photos, G, self.fit_intrinsics, data.pixel_sigma)
        jacobians = flange_jacobians(state, photos, data.base_T_flange, data.setup)
        if self.flange_sigma is not None:
            sigma_m, sigma_rad = self.flange_sigma
            source = "stated (--flange-sigma)"
        else:
            sigma_m, sigma_rad = estimate_flange_sigma(residuals(state, photos, G), jacobians, result.jac,
                                                       data.pixel_sigma)
            source = "estimated from the per-photo residual structure"
        floor = floor_px(jacobians, data.pixel_sigma, sigma_m, sigma_rad)
        # Weighted by each photo's covariance, flange error included, the fit trusts a pose as much
        # as the pose is worth rather than each of its corners as an independent measurement. But a
        # flange turn and the camera's mount turn shift a photo's corners alike, and with few poses
        # the weighting can leave the mount loose (a real 7-photo eye-in-hand recording: 0.84 px
        # per corner, 3.5 px weighted). So the held-out figures of both, on the same folds, choose.
        plain = (state, result, layout)
        weighted = self._weighted(state, photos, G, data, (sigma_m, sigma_rad))
        self._progress("cross-validation")
        cross = self._cross_validate(data, G, (sigma_m, sigma_rad))
        weighting = _choose_weighting(cross, (sigma_m, sigma_rad))
        state, result, layout = weighted if weighting["chosen"] == "per photo" else plain
        errors = residuals(state, photos, G)
        std = _standard_deviations(result, layout)
        intrinsics = _intrinsics_report(state, layout, result, std, data) if self.fit_intrinsics else {}
        summary = {
            "model": "hand-eye", "setup": data.setup, "sessions": sources or [],
            "board": data.board.describe(), "pixel_sigma": data.pixel_sigma,
            "closed_form": {"methods_rms_px": scores, "best": method},
            "fit": {"rms_px": rms_px(errors), "corners": int(sum(p.count for p in photos)), "photos": len(photos),
                    "parameters": layout.size, "solver": result.message, "closed_form_rms_px": scores[method]},
            "holdout": cross[weighting["chosen"]], "holdout_nominal": cross["nominal"],
            "validation": {**cross["validation"], "fold_rms": cross["fold_rms"][weighting["chosen"]]},
            "weighting": weighting,
            "flange_sigma": {"m": sigma_m, "rad": sigma_rad, "mm": 1e3 * sigma_m, "deg": float(np.degrees(sigma_rad)),
                             "source": source},
            "floor_px": floor,
            "photos": [{"camera": p.camera, "pose": p.pose, "corners": p.count, "rms_px": rms_px([e]),
                        "pnp_rms_px": p.pnp_rms_px, "holdout_rms_px": cross["per_photo"][weighting["chosen"]].get(i)}
                       for i, (p, e) in enumerate(zip(photos, errors))],
            "left_out": data.left_out,
            "intrinsics": intrinsics,
            "std": {"X": {name: std[layout.x(name)].tolist() for name in layout.cameras}, "Y": std[layout.y].tolist()},
        }
        return HandEyeCalibration(data.setup, state.X, state.Y, state.K, state.distortion, data.board, summary)

    def _weighted(self, start: State, photos: list[Photo], G: np.ndarray, data: HandEyeData,
                  flange_sigma: tuple[float, float]):
        """The least-squares fit weighted by each photo's covariance (corner noise and flange error)."""
        if not any(flange_sigma):
            return refine(start, photos, G, self.fit_intrinsics, data.pixel_sigma)
        jacobians = flange_jacobians(start, photos, data.base_T_flange, data.setup)
        whitening = photo_whitening(photos, jacobians, data.pixel_sigma, *flange_sigma)
        return refine(start, photos, G, self.fit_intrinsics, data.pixel_sigma, whitening=whitening)

    def _cross_validate(self, data: HandEyeData, G: np.ndarray, flange_sigma: tuple[float, float]) -> dict:
        """The fit and the closed-form start, each redone without each fold's poses and judged on them."""
        photos = data.photos
        keys = sorted({p.key for p in photos})
        folds = fold_rows([len(keys)], fold_count(len(keys), self.folds), self.seed)
        held = {"per photo": [], "per corner": []}
        per_photo = {"per photo": {}, "per corner": {}}
        fold_rms = {"per photo": [], "per corner": []}
        held_nominal = []
        for rows in folds:
            held_keys = {keys[r] for r in rows[0]}
            train = [p for p in photos if p.key not in held_keys]
            test = [i for i, p in enumerate(photos) if p.key in held_keys]
            if not test or len({p.key for p in train}) < 3 or {photos[i].camera for i in test} - {p.camera for p in train}:
                continue
            try:
                _, start, _ = best_start(data, train, G)
            except InputError:
                continue
            plain, _, _ = refine(start, train, G, self.fit_intrinsics, data.pixel_sigma)
            weighted, _, _ = self._weighted(plain, train, G, data, flange_sigma)
            nominal = residuals(start, [photos[i] for i in test], G)
            held_nominal += nominal
            for name, state in (("per photo", weighted), ("per corner", plain)):
                errors = residuals(state, [photos[i] for i in test], G)
                held[name] += errors
                fold_rms[name].append(rms_px(errors))
                for i, error in zip(test, errors):
                    per_photo[name][i] = rms_px([error])
        validation = {"method": "cross-validation", "folds": len(fold_rms["per photo"]),
                      "description": f"{describe_folds(len(folds), len(keys))}: the closed-form start and the "
                                     f"least-squares fit are both redone on each fold's other poses and judged on "
                                     f"its own; the delivered calibration is fitted on every pose"}
        figures = {name: {"rms_px": rms_px(errors), "corners": int(sum(len(e) for e in errors))} if errors else None
                   for name, errors in held.items()}
        return {**figures,
                "nominal": {"rms_px": rms_px(held_nominal), "what": "best OpenCV closed-form solution"} if held_nominal else None,
                "validation": validation, "per_photo": per_photo, "fold_rms": fold_rms}


def _choose_weighting(cross: dict, flange_sigma: tuple[float, float]) -> dict:
    """Which least squares the calibration keeps: each photo weighted by its covariance (corner
    noise and flange error), or each corner alike; the lower held-out RMS on the same folds, the
    photo's weighting where the two tie or cannot be told (too few poses to cross-validate)."""
    figures = {name: (cross[name] or {}).get("rms_px") for name in ("per photo", "per corner")}
    if not any(flange_sigma):
        return {"chosen": "per photo", "holdout_rms_px": figures,
                "reason": "no flange error, so the two weightings are the same fit"}
    if figures["per photo"] is None or figures["per corner"] is None or figures["per photo"] <= figures["per corner"]:
        return {"chosen": "per photo", "holdout_rms_px": figures,
                "reason": "each photo weighted by its covariance, flange error included"
                          + ("" if figures["per corner"] is None else
                             f": held out {figures['per photo']:.3f} px against {figures['per corner']:.3f} px "
                             f"with every corner alike")}
    return {"chosen": "per corner", "holdout_rms_px": figures,
            "reason": f"every corner alike: held out {figures['per corner']:.3f} px against {figures['per photo']:.3f} px "
                      f"with each photo weighted by its covariance (these poses leave the camera's mount loose "
                      f"under that weighting)"}


def _standard_deviations(result, layout: Layout) -> np.ndarray:
    J = result.jac
    dof = max(len(result.fun) - layout.size, 1)
    scale = float(np.sum(result.fun ** 2) / dof)
    try:
        covariance = np.linalg.pinv(J.T @ J) * scale
    except np.linalg.LinAlgError:
        return np.full(layout.size, np.nan)
    return np.sqrt(np.maximum(np.diag(covariance), 0.0))


def _intrinsics_report(state: State, layout: Layout, result, std: np.ndarray, data: HandEyeData) -> dict:
    """Per camera and intrinsic: value, standard deviation, recorded value, and whether the data
    determine it (one standard deviation moves no corner by more than the corners' noise)."""
    out = {}
    for name in layout.cameras:
        block = layout.intrinsics(name)
        values = State(state.X, state.Y, state.K, state.distortion).vector(layout)[block]
        K, d = data.K[name], data.distortion[name]
        recorded = [K[0, 0], K[1, 1], K[0, 2], K[1, 2], *d]
        entry = {}
        for j, axis in enumerate(INTRINSIC_NAMES):
            column = result.jac[:, block.start + j] * data.pixel_sigma  # px per unit of the parameter
            moves = float(np.abs(column).max() * std[block.start + j]) if np.isfinite(std[block.start + j]) else np.inf
            entry[axis] = {"value": float(values[j]), "std": float(std[block.start + j]), "recorded": float(recorded[j]),
                           "moves_px": moves, "determined": bool(moves <= data.pixel_sigma)}
        out[name] = {"parameters": entry,
                     "not_determined": [axis for axis in INTRINSIC_NAMES if not entry[axis]["determined"]]}
    return out


@dataclass
class HandEyeCalibration:
    """The result: ``X`` per camera (camera_T_base eye-to-hand, camera_T_flange eye-in-hand), ``Y``
    (flange_T_board or base_T_board), K and distortion per camera, the board, and the summary."""

    setup: str
    X: dict[str, np.ndarray]
    Y: np.ndarray
    K: dict[str, np.ndarray]
    distortion: dict[str, np.ndarray]
    board: CharucoBoardSpec
    summary: dict = field(default_factory=dict)

    def camera_pose(self, name: str) -> np.ndarray:
        """(4, 4) base_T_camera (eye-to-hand) or flange_T_camera (eye-in-hand)."""
        return invert(self.X[name])

    def board_pose(self) -> np.ndarray:
        """(4, 4) flange_T_board (eye-to-hand) or base_T_board (eye-in-hand)."""
        return self.Y

    def predict(self, base_T_flange: np.ndarray, camera: str, points_board: np.ndarray) -> np.ndarray:
        """(n, 2) pixels of board points (n, 3) seen by ``camera`` with the flange at ``base_T_flange``."""
        state = State(self.X, self.Y, self.K, self.distortion)
        photo = Photo(camera, "", 0, np.zeros(len(points_board), int), np.zeros((len(points_board), 2)),
                      np.asarray(points_board, float), np.eye(4), 0.0)
        return project_photo(state, photo, moving_poses(self.setup, np.asarray(base_T_flange)[None])[0])

    def document(self) -> dict:
        camera_key = "base_T_camera" if self.setup == "eye-to-hand" else "flange_T_camera"
        board_key = "flange_T_board" if self.setup == "eye-to-hand" else "base_T_board"
        return {"model": "hand-eye", "setup": self.setup, "units": {"length": "m"},
                "cameras": {name: {camera_key: self.camera_pose(name).tolist(), "K": self.K[name].tolist(),
                                   "distortion_plumb_bob": self.distortion[name].tolist()} for name in self.X},
                board_key: self.Y.tolist(), "board": self.board.describe()}

    def save(self, folder: Path) -> None:
        """calibration.yaml (frames and intrinsics), summary.json, cameras/<name>/camera_info.yaml, report.html."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(folder / "calibration.yaml", yaml.safe_dump(self.document(), sort_keys=False))
        atomic_write_text(folder / "summary.json", json.dumps(_plain(self.summary), indent=1))
        sizes = self.summary.get("image_sizes", {})
        for name in self.X:
            width, height = sizes.get(name, (0, 0))
            CameraInfo(name, width, height, self.K[name], self.distortion[name]).save(
                folder / "cameras" / name / "camera_info.yaml")
        atomic_write_text(folder / "report.html", _report_html(self))

    @staticmethod
    def is_one(folder: Path) -> bool:
        """Whether ``folder`` holds a hand-eye calibration (its calibration.yaml says ``model: hand-eye``)."""
        path = Path(folder) / "calibration.yaml"
        try:
            document = yaml.safe_load(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return False  # not readable here: the loader that reads it says why
        return isinstance(document, dict) and document.get("model") == "hand-eye"

    @classmethod
    def load(cls, folder: Path) -> "HandEyeCalibration":
        folder = Path(folder)
        path = folder / "calibration.yaml"
        try:
            document = yaml.safe_load(path.read_text())
            setup = document["setup"]
            camera_key = "base_T_camera" if setup == "eye-to-hand" else "flange_T_camera"
            board_key = "flange_T_board" if setup == "eye-to-hand" else "base_T_board"
            cameras = document["cameras"]
            X = {n: invert(np.asarray(c[camera_key], float)) for n, c in cameras.items()}
            K = {n: np.asarray(c["K"], float) for n, c in cameras.items()}
            distortion = {n: np.asarray(c["distortion_plumb_bob"], float) for n, c in cameras.items()}
            Y = np.asarray(document[board_key], float)
            board = parse_board(document["board"])
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as error:
            raise InputError(f"{path}: not a hand-eye calibration ({type(error).__name__}: {error}).") from None
        summary_path = folder / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        return cls(setup, X, Y, K, distortion, board, summary)


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        return value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def _report_html(calibration: HandEyeCalibration) -> str:
    summary = calibration.summary
    verdict = summary.get("verdict")
    head = Verdict.from_dict(verdict).html() if verdict else ""
    rows = "".join(f"<tr><td>{html.escape(p['camera'])}</td><td>{html.escape(p['pose'])}</td><td>{p['corners']}</td>"
                   f"<td>{p['rms_px']:.3f}</td><td>{'' if p['holdout_rms_px'] is None else format(p['holdout_rms_px'], '.3f')}</td></tr>"
                   for p in summary.get("photos", []))
    left = "".join(f"<li>{html.escape(item['photo'])}: {html.escape(item['reason'])}</li>" for item in summary.get("left_out", []))
    return (f"<!doctype html><meta charset='utf-8'><title>hand-eye calibration</title>"
            f"<style>.ok{{color:#060}}.fail{{color:#a00}}.warning{{color:#a60}}td{{padding:0 8px}}</style>"
            f"<h1>Hand-eye calibration ({html.escape(calibration.setup)})</h1>{head}"
            f"<pre>{html.escape(yaml_text(calibration.document()))}</pre>"
            f"<h2>Photos</h2><table><tr><th>camera</th><th>pose</th><th>corners</th><th>fit RMS px</th>"
            f"<th>held-out RMS px</th></tr>{rows}</table>"
            + (f"<h2>Left out</h2><ul>{left}</ul>" if left else ""))


def yaml_text(document: dict) -> str:
    return yaml.safe_dump(document, sort_keys=False)
