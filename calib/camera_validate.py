"""Checking a camera calibration against a session: reprojection RMS, and for a simulated session
the 3D tip error against the truth (reporting only; truth/ is read here, never by a fit).

Cameras see the arm, not its base frame: the arm's first joint placement and the camera poses
trade off exactly (the identifiability analysis says so), so the fitted base frame sits where the
nominal URDF puts it. The tip error is therefore quoted after one rigid registration of the
predicted tip positions onto the true ones (``tip_rms_mm``; 6 parameters over all poses), and,
for completeness, in the base frame as fitted (``tip_rms_mm_base_frame``). Where the tip frame
sits along the last joint's axis behind the board is not observable either (the fit keeps the
nominal URDF's choice), so the board centre's error (``board_centre_rms_mm``) is reported too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from calib.camera_board import CharucoBoardSpec, make_board
from calib.camera_observations import detect_session, project
from calib.initialise import register_points
from capture.session import Session, read_csv_rows
from rigs.errors import InputError
from rigs.kinematics import ChainModel
from rigs.transforms import invert, make_transform, quat_xyzw_to_matrix


@dataclass
class CameraModel:
    """What a camera calibration predicts with: the calibrated chain, camera poses, board pose."""

    chain: ChainModel
    base_T_camera: dict[str, np.ndarray]
    tip_T_board: np.ndarray
    board: CharucoBoardSpec

    def base_T_tip(self, q: np.ndarray) -> np.ndarray:
        return self.chain.base_T_tip_batch(np.atleast_2d(q))

    @classmethod
    def from_result(cls, result) -> "CameraModel":
        return cls(result.calibration.chain, dict(result.base_T_camera), result.tip_T_board, result.board)

    @classmethod
    def load(cls, folder: Path) -> "CameraModel":
        """From a calibration folder (robot.urdf with the errors written in, calibration.yaml)."""
        from calib.export import read_calibration_document

        folder = Path(folder)
        path, document = read_calibration_document(folder)
        if not isinstance(document, dict) or not document.get("cameras") or not document.get("board"):
            raise InputError(f"{path}: has no cameras and board; it is not a camera calibration.")
        robot = document.get("robot") or {}
        try:
            chain = ChainModel.from_urdf(folder / robot.get("urdf", "robot.urdf"), robot["base_link"], robot["tip_link"])
            cameras = {name: _frame(entry["base_T_camera"]) for name, entry in document["cameras"].items()}
            board_entry = document["board"]
            board = make_board(tuple(int(v) for v in board_entry["squares"]), float(board_entry["square_m"]),
                               float(board_entry["marker_m"]), str(board_entry["dictionary"]), f"{path}: board")
            tip_T_board = _frame(board_entry["tip_T_board"])
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"{path}: camera or board entry is incomplete ({type(error).__name__}: {error}).") from None
        return cls(chain, cameras, tip_T_board, board)


def _frame(entry: dict) -> np.ndarray:
    transform = make_transform(entry["xyz"])
    transform[:3, :3] = quat_xyzw_to_matrix(entry["quat_xyzw"])
    return transform


def reprojection_errors(model: CameraModel, session: Session) -> tuple[np.ndarray, dict[str, float], int]:
    """Per-corner reprojection error (M,) px of ``session``'s images, RMS per camera, images used."""
    if session.joint_names != model.chain.joint_names:
        raise InputError(f"{session.path}: its joints {session.joint_names} are not the calibration's "
                         f"{model.chain.joint_names}.")
    unknown = sorted(set(session.cameras) - set(model.base_T_camera))
    if unknown:
        raise InputError(f"{session.path}: camera {unknown[0]!r} is not in the calibration "
                         f"(has {', '.join(sorted(model.base_T_camera))}).")
    detections = detect_session(session, model.board)
    base_T_tip = model.base_T_tip(session.q)
    errors = np.zeros(len(detections.pixels))
    for index, (camera, _) in enumerate(detections.images):
        rows = detections.image == index
        pose_row = detections.pose_row[rows][0]
        camera_T_board = invert(model.base_T_camera[camera]) @ base_T_tip[pose_row] @ model.tip_T_board
        predicted = project(detections.K[camera], camera_T_board, model.board.corners(detections.corner_id[rows]))
        errors[rows] = np.linalg.norm(predicted - detections.pixels[rows], axis=1)
    per_camera = {str(name): float(np.sqrt(np.mean(errors[detections.camera == name] ** 2)))
                  for name in sorted(set(detections.camera))}
    return errors, per_camera, len(detections.images)


def true_tip_positions(session: Session) -> np.ndarray | None:
    """(N, 3) m true tip positions of a simulated session (truth/ robot.urdf at the reached joints)."""
    poses = true_tip_poses(session)
    return None if poses is None else poses[:, :3, 3]


def true_board_centres(session: Session) -> np.ndarray | None:
    """(N, 3) m true board centres of a simulated session (truth/ tip poses and tip_T_board)."""
    poses = true_tip_poses(session)
    parameters = session.path / "truth" / "parameters.json"
    if poses is None or not parameters.is_file():
        return None
    tip_T_board = json.loads(parameters.read_text()).get("tip_T_board")
    if tip_T_board is None:
        return None
    return (poses @ np.asarray(tip_T_board, dtype=float))[:, :3, 3]


def true_tip_poses(session: Session) -> np.ndarray | None:
    """(N, 4, 4) true tip poses of a simulated session, or None."""
    urdf = session.path / "truth" / "robot.urdf"
    reached = session.path / "truth" / "joints_reached.csv"
    if not urdf.is_file() or not reached.is_file():
        return None
    header, rows = read_csv_rows(reached)
    lookup = {row[0]: np.array([float(row[header.index(n)]) for n in session.joint_names]) for row in rows}
    if any(p not in lookup for p in session.pose_ids):
        return None
    chain = ChainModel.from_urdf(urdf, session.base_link, session.tip_link)
    return chain.base_T_tip_batch(np.array([lookup[p] for p in session.pose_ids]))


def tip_errors(predicted: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(aligned, unaligned) tip errors (N,) m; aligned after the best rigid registration."""
    aligned = register_points(predicted, truth)
    moved = predicted @ aligned[:3, :3].T + aligned[:3, 3]
    return np.linalg.norm(moved - truth, axis=1), np.linalg.norm(predicted - truth, axis=1)


def _rms_mm(errors: np.ndarray) -> float:
    return float(np.sqrt(np.mean(errors ** 2)) * 1000.0)


def validate_camera(model: CameraModel, session: Session) -> dict:
    """Reprojection RMS (px) of the session's images; tip RMS vs truth (mm) when simulated."""
    errors, per_camera, images = reprojection_errors(model, session)
    result = {"images": images, "corners": int(len(errors)), "reprojection_rms_px": float(np.sqrt(np.mean(errors ** 2))),
              "reprojection_p95_px": float(np.percentile(errors, 95)), "reprojection_rms_px_by_camera": per_camera,
              "tip_rms_mm": None, "tip_max_mm": None, "tip_rms_mm_base_frame": None, "nominal_tip_rms_mm": None,
              "board_centre_rms_mm": None}
    truth = true_tip_positions(session)
    if truth is not None:
        predicted = model.base_T_tip(session.q)[:, :3, 3]
        aligned, unaligned = tip_errors(predicted, truth)
        nominal_chain = ChainModel.from_urdf(session.urdf_path, session.base_link, model.chain.model.frames[model.chain.tip_frame].name)
        nominal, _ = tip_errors(nominal_chain.base_T_tip_batch(session.q)[:, :3, 3], truth)
        result.update({"tip_rms_mm": _rms_mm(aligned), "tip_max_mm": float(aligned.max() * 1000.0),
                       "tip_rms_mm_base_frame": _rms_mm(unaligned), "nominal_tip_rms_mm": _rms_mm(nominal)})
        centres = true_board_centres(session)
        if centres is not None:
            # The board centre is what the cameras see: free of the tip frame's unseen position along
            # the last axis (which the fit leaves where the nominal URDF puts it).
            board, _ = tip_errors((model.base_T_tip(session.q) @ model.tip_T_board)[:, :3, 3], centres)
            result["board_centre_rms_mm"] = _rms_mm(board)
    return result


def is_camera_calibration(folder: Path) -> bool:
    """Whether a calibration folder holds camera poses and a board (written by the camera fit)."""
    path = Path(folder) / "calibration.yaml"
    if not path.is_file():
        return False
    try:
        document = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError):  # read_calibration names what is wrong
        return False
    return isinstance(document, dict) and bool(document.get("cameras")) and bool(document.get("board"))
