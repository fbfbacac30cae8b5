"""Photos of a ChArUco board with the robot's reported flange pose per photo: a hand-eye session
without joint angles or a URDF (docs/importing.md).

    FOLDER/cameras/<name>/camera_info.yaml, <pose>_rgb.png|jpg     (one folder per camera), or
    FOLDER/camera_info.yaml, <pose>.png|jpg                          (one camera, named "camera")

with ``--flange-poses`` a file or folder :mod:`capture.importers.flange_poses` reads. Every photo
needs a flange pose (its ``<pose>`` is the pose id); a pose without a photo is left out and
counted. The photos are kept as recorded (distorted, with camera_info's distortion beside them):
the hand-eye fit projects through the lens model, and can refine it.

The session: ``flange_poses.csv`` (metres, unit quaternions), a ``joints.csv`` of pose ids with
no joint columns, ``robot.urdf`` null and ``robot.flange_poses`` naming the CSV; the board's
mount (``sensors.board.mount``: ``flange`` for a board on the flange seen by fixed cameras,
eye-to-hand; ``world`` for a board standing still seen by cameras on the flange, eye-in-hand).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from capture.camera_info import CameraInfo
from capture.importers.flange_poses import read_flange_poses, write_flange_csv
from capture.session import FORMAT, FORMAT_VERSION, SessionWriter, load_session
from rigs.errors import InputError, setting
from rigs.files import atomic_write_json, output_folder
from rigs.version import VERSION

POSE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
PHOTO_SUFFIXES = (".png", ".jpg", ".jpeg")
SETUPS = {"eye-to-hand": "flange", "eye-in-hand": "world"}  # --setup -> sensors.board.mount
FLANGE_SESSION_TIP = "flange"


def _photos(folder: Path, nested: bool) -> dict[str, Path]:
    """pose id -> photo path in one camera's folder."""
    photos: dict[str, Path] = {}
    for path in sorted(folder.iterdir()):
        suffix = path.suffix.lower()
        if suffix not in PHOTO_SUFFIXES:
            continue
        stem = path.stem
        if nested:
            if not stem.endswith(("_rgb", "_color", "_colour")):
                continue
            stem = stem.rsplit("_", 1)[0]
        if not path.is_file() or path.is_symlink() and not path.resolve().is_relative_to(folder.resolve()):
            raise InputError(f"{path}: not a file inside {folder}.")
        if not POSE_ID.match(stem):
            raise InputError(f"{path}: the photo's name gives pose id {stem!r}; it must be letters, digits, '_', '-' "
                             f"or '.' (not first).")
        if stem in photos:
            raise InputError(f"{path}: pose {stem!r} has two photos ({photos[stem].name} too).")
        photos[stem] = path
    return photos


def _read_photo(path: Path) -> np.ndarray:
    import cv2

    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise InputError(f"{path}: not a readable image.")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)


MIN_BOARD_CORNERS = 6  # fewer corners than this fix no pose of the board (as the calibration's rule)


def flange_manifest(board: dict | None, setup: str, source: dict) -> dict:
    """The session.json of a hand-eye session (module docstring) before its cameras are filled in;
    InputError when the board or the setup is missing or unknown."""
    if board is None:
        raise InputError(f"{setting('board')} is required: a hand-eye session needs the board the photos show "
                         f"({setting('board')} charuco:SQUARES_X:SQUARES_Y:SQUARE_M:MARKER_M:DICTIONARY).")
    if setup not in SETUPS:
        raise InputError(f"{setting('setup')} {setup!r} is not one of {', '.join(SETUPS)}.")
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "units": {"length": "m", "angle": "rad", "mass": "kg"},
        "robot": {"urdf": None, "base_link": "base", "tip_link": FLANGE_SESSION_TIP, "joint_names": [],
                  "payload_com": [0.0, 0.0, 0.0], "flange_poses": "flange_poses.csv"},
        "sensors": {"tracker": None, "cameras": {}, "board": {**board, "mount": SETUPS[setup]}},
        "scene": {"mount_plane_z": None},
        "source": {"kind": "import", **source, "setup": setup, "selfcal_version": VERSION},
    }


def write_flange_session(out: Path, manifest: dict, pose_ids: list[str], base_T_flange: np.ndarray,
                         cameras: dict[str, tuple[CameraInfo, dict]],
                         photos: Iterable[tuple[str, str, str, np.ndarray]], total: int, force: bool = False,
                         progress: Callable[[int, int], None] | None = None,
                         count_corners: Callable[[np.ndarray], int] | None = None, board_name: str = "") -> dict[str, int]:
    """Write a hand-eye session at ``out``, all or nothing; returns the board corners found per photo.

    ``manifest``: from :func:`flange_manifest`; ``pose_ids`` (N,) in order with ``base_T_flange``
    (N, 4, 4) m; ``cameras[name]`` = (its intrinsics as recorded, distortion included; its manifest
    entry's ``recorded``, ``frames`` and ``frame_id``); ``photos`` yields (camera, pose, where the
    photo came from, (H, W, 3) uint8 RGB as recorded), ``total`` of them. ``count_corners``: RGB image
    -> board corners found (the calibration's detector), so that a board no photo shows is refused
    and nothing is left behind.
    """
    corners: dict[str, int] = {}
    first = None
    with output_folder(out, force) as target:
        writer = SessionWriter.create(target, manifest, [], with_payload=False)
        write_flange_csv(target / "flange_poses.csv", pose_ids, base_T_flange)
        for name, (info, _) in cameras.items():
            info.save(target / "cameras" / name / "camera_info.yaml")
        for done, (name, pose, where, image) in enumerate(photos, start=1):
            info = cameras[name][0]
            if (image.shape[1], image.shape[0]) != (info.width, info.height):
                raise InputError(f"{where}: the photo is {image.shape[1]}x{image.shape[0]} but its camera_info says "
                                 f"{info.width}x{info.height}.")
            if count_corners is not None:
                corners[where] = int(count_corners(image))
            first = first or where
            writer.add_images(pose, name, image, None, None, 0.001)
            if progress is not None:
                progress(done, total)
        if corners and max(corners.values()) < MIN_BOARD_CORNERS:
            raise InputError(f"{first}: the board {board_name} ({setting('board')}) shows {corners[first]} corners here "
                             f"and at most {max(corners.values())} in any of the {len(corners)} photos, fewer than the "
                             f"{MIN_BOARD_CORNERS} a pose needs; is {setting('board')} (squares, dictionary) the board "
                             f"in the photos? (A board OpenCV drew before 4.6 with an even number of rows has the older "
                             f"pattern: add :legacy.)")
        manifest["sensors"]["cameras"] = {
            name: {"info": f"cameras/{name}/camera_info.yaml", "base_T_camera": None,
                   "pose_source": "unknown: found by `selfcal calibrate --model hand-eye`",
                   "frame_id": entry.get("frame_id"), "depth_scale": 0.001, "depth_noise": None,
                   "depth_sigma_at_1m": None, "no_depth": "unknown", "undistorted_at_import": False,
                   "recorded": entry["recorded"], "frames": entry["frames"]}
            for name, (_, entry) in cameras.items()}
        atomic_write_json(target / "session.json", manifest)
        for pose in pose_ids:
            writer.add_pose(pose, np.zeros(0))
        load_session(target)  # what we wrote must read back
    return corners


def import_flange_photos(folder: Path, flange_file: Path, board: dict, out: Path, length_unit: str = "m",
                         setup: str = "eye-to-hand", force: bool = False,
                         progress: Callable[[int, int], None] | None = None,
                         count_corners: Callable[[np.ndarray], int] | None = None, board_name: str = "") -> dict:
    """Photos + flange poses (module docstring) -> a hand-eye session at ``out``; returns a summary.

    ``board``: the manifest's ``sensors.board`` entry (``--board``), required: the photos are of it.
    ``count_corners``: RGB image -> board corners found (the calibration's detector), so that a
    board no photo shows is refused with nothing written.
    """
    import time as clock

    started = clock.perf_counter()
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: image folder not found.")
    manifest = flange_manifest(board, setup, {"importer": "images", "folder": str(folder),
                                              "flange_poses": str(flange_file), "flange_length_unit": length_unit})
    flange = read_flange_poses(flange_file, length_unit)
    index = flange.index()
    root = folder / "cameras"
    if root.is_dir():
        camera_folders = [(p.name, p, True) for p in sorted(root.iterdir()) if p.is_dir()]
        if not camera_folders:
            raise InputError(f"{root}: no camera folders.")
    else:
        camera_folders = [("camera", folder, False)]
    cameras, plan = {}, []
    for name, camera_folder, nested in camera_folders:
        if not POSE_ID.match(name):
            raise InputError(f"{camera_folder}: a camera name must be letters, digits, '_', '-' or '.'.")
        info_path = camera_folder / "camera_info.yaml"
        if not info_path.is_file():
            raise InputError(f"{info_path}: file not found; the photos need their camera's intrinsics (make them "
                             f"with `selfcal calibrate-camera`).")
        info = CameraInfo.load(info_path)
        if not (info.K[0, 0] > 0 and info.K[1, 1] > 0):
            raise InputError(f"{info_path}: camera_matrix has no focal length; the camera is not calibrated.")
        photos = _photos(camera_folder, nested)
        if not photos:
            raise InputError(f"{camera_folder}: no photos (" + ("<pose>_rgb.png or .jpg" if nested else
                                                                 "<pose>.png or .jpg") + ").")
        without = [pose for pose in photos if pose not in index]
        if without:
            raise InputError(f"{flange_file}: no flange pose for photo {photos[without[0]]} (pose {without[0]!r}); "
                             f"the file gives {len(flange.pose_ids)} poses for {len(photos)} photos of camera "
                             f"{name!r}, and every photo needs the pose the arm stood at.")
        cameras[name] = (CameraInfo(name, info.width, info.height, info.K, info.distortion),
                         {"recorded": {"folder": str(camera_folder)},
                          "frames": {"frames": len(photos), "kept": len(photos), "dropped": {}}})
        plan += [(name, pose, path) for pose, path in photos.items()]
    used = sorted({pose for _, pose, _ in plan}, key=lambda pose: index[pose])
    base_T_flange = flange.base_T_flange[[index[pose] for pose in used]]
    photos = ((name, pose, str(path), _read_photo(path)) for name, pose, path in plan)
    corners = write_flange_session(out, manifest, used, base_T_flange, cameras, photos, len(plan), force, progress,
                                   count_corners, board_name)
    return {"session": str(out), "poses": len(used), "photos": len(plan), "setup": setup, "corners": corners,
            "flange_poses": {"file": str(flange_file), "given": len(flange.pose_ids),
                             "without_photo": len(flange.pose_ids) - len(used), "length_unit": length_unit},
            "cameras": {name: {"photos": sum(1 for c, _, _ in plan if c == name),
                               "distortion": cameras[name][0].distortion.tolist()} for name in cameras},
            "seconds": clock.perf_counter() - started}
