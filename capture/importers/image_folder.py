"""Camera recordings that are not bags: a folder of images with a joints CSV (docs/importing.md).

    DIR/
      joints.csv                      pose, one column per joint (as for `import tracker`), optional time
      cameras/<name>/camera_info.yaml ROS camera_info YAML (what camera_calibration writes)
      cameras/<name>/<pose>_depth.png 16-bit PNG, metres = value * --depth-scale (default 0.001: mm); 0 = no reading
      cameras/<name>/<pose>_rgb.png   colour, 8-bit (.png or .jpg); optional
      cameras/<name>/pose.yaml        optional: the camera's pose in the base frame
                                      (frame: optical | body, xyz: [m], quat_xyzw: [...])

Every pose of an image file must be a pose of joints.csv; a pose may lack some cameras' images.
Each image was taken at its pose with the arm standing still: the folder says nothing about
motion, so nothing is dropped for it. The same checks as for bags: camera_info's size against
every image, the depth scale against the range a depth camera measures, one size per camera.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from capture.camera_info import CameraInfo
from capture.importers.assemble import Robot, check_robot
from capture.importers.camera_import import CameraOptions, ImportedCamera, import_summary, write_camera_session
from capture.importers.joint_logs import read_joint_log
from capture.importers.rosbag_cameras import DEPTH_RANGE_M
from rigs.errors import InputError, setting
from rigs.transforms import quat_xyzw_to_matrix

POSE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
DEPTH_SUFFIX = "_depth.png"
COLOUR_SUFFIXES = ("_rgb.png", "_rgb.jpg", "_rgb.jpeg", "_color.png", "_color.jpg", "_colour.png")


def _read_pose_yaml(path: Path) -> np.ndarray:
    from capture.importers.tf_static import BODY_T_OPTICAL
    from rigs.documents import as_table
    from rigs.files import read_yaml

    # frame (optical or body), xyz: [x, y, z] (m) and quat_xyzw: [x, y, z, w]
    top = as_table(read_yaml(path, "camera pose file"), path, "camera pose file")
    frame = top.get("frame", "str", "optical")
    xyz = top.get("xyz", "vector", length=3)
    quaternion = top.get("quat_xyzw", "vector", length=4)
    if frame not in ("optical", "body"):
        raise InputError(f"{path}: frame should be optical or body, got {frame!r}.")
    if not np.all(np.isfinite(xyz)) or abs(np.linalg.norm(quaternion) - 1.0) > 1e-3:
        raise InputError(f"{path}: quat_xyzw has length {np.linalg.norm(quaternion):.4g}, not a rotation.")
    pose = np.eye(4)
    pose[:3, :3] = quat_xyzw_to_matrix(quaternion)
    pose[:3, 3] = xyz
    return pose if frame == "optical" else pose @ BODY_T_OPTICAL


def _read_image(path: Path, depth: bool) -> np.ndarray:
    import cv2

    image = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if image is None:
        raise InputError(f"{path}: not a readable image.")
    if depth:
        if image.dtype != np.uint16 or image.ndim != 2:
            raise InputError(f"{path}: a depth image must be a 16-bit single-channel PNG, this one is "
                             f"{image.dtype} with {1 if image.ndim == 2 else image.shape[2]} channels.")
        return image
    if image.ndim == 2:
        return np.repeat(image[..., None], 3, axis=2).astype(np.uint8)
    if image.dtype != np.uint8:
        raise InputError(f"{path}: a colour image must be 8-bit, this one is {image.dtype}.")
    code = cv2.COLOR_BGRA2RGB if image.shape[2] == 4 else cv2.COLOR_BGR2RGB
    return cv2.cvtColor(image, code)


def _check_scale(values: np.ndarray, units_m: float, path: Path) -> None:
    valid = values[values > 0]
    if valid.size < 0.01 * values.size:
        return
    median = float(np.median(valid)) * units_m
    low, high = DEPTH_RANGE_M
    if not low <= median <= high:
        guess = 10.0 ** round(np.log10(1.5 * units_m / median))
        raise InputError(f"{path}: the median depth is {median:.4g} m at {setting('depth_scale')} {units_m:g} m per "
                         f"unit, outside the {low:g}-{high:g} m a depth camera measures; pass {setting('depth_scale')} "
                         f"{guess:g} if the values are in another unit.")


def _camera_files(folder: Path, pose_ids: set[str]) -> dict[str, dict[str, Path]]:
    """pose -> {"depth": path, "rgb": path} of one camera folder; InputError for a pose joints.csv lacks."""
    files: dict[str, dict[str, Path]] = {}
    for path in sorted(folder.iterdir()):
        name = path.name
        kind, pose = None, None
        if name.endswith(DEPTH_SUFFIX):
            kind, pose = "depth", name[: -len(DEPTH_SUFFIX)]
        else:
            suffix = next((s for s in COLOUR_SUFFIXES if name.lower().endswith(s)), None)
            if suffix is not None:
                kind, pose = "rgb", name[: -len(suffix)]
        if kind is None:
            continue  # camera_info.yaml, pose.yaml, notes: not images
        if not path.is_file() or path.is_symlink() and not path.resolve().is_relative_to(folder.resolve()):
            raise InputError(f"{path}: not a file inside {folder}.")
        if pose not in pose_ids:
            raise InputError(f"{path}: pose {pose!r} has no row in joints.csv.")
        if kind in files.get(pose, {}):
            raise InputError(f"{path}: pose {pose!r} has two {kind} images ({files[pose][kind].name} too).")
        files.setdefault(pose, {})[kind] = path
    return files


def import_image_folder(robot: Robot, folder: Path, options: CameraOptions, out: Path, angle_unit: str = "deg",
                        length_unit: str = "mm", force: bool = False,
                        progress: Callable[[int, int], None] | None = None) -> dict:
    """An image folder (module docstring) -> a camera session at ``out``; returns a summary."""
    import time as clock

    started = clock.perf_counter()
    options.check()
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: image folder not found.")
    chain = check_robot(robot)
    log = read_joint_log(folder / "joints.csv", chain, length_unit, angle_unit)
    for pose, line in zip(log.pose_ids, log.lines):
        if not POSE_ID.match(pose):
            raise InputError(f"{folder / 'joints.csv'}: line {line}: pose id {pose!r} names image files, so it must be "
                             f"letters, digits, '_', '-' or '.' (not first).")
    root = folder / "cameras"
    if not root.is_dir():
        raise InputError(f"{root}: folder not found (one sub-folder per camera holds its images).")
    units = options.units_m
    cameras, plan = [], []
    for camera_folder in sorted(p for p in root.iterdir() if p.is_dir()):
        name = camera_folder.name
        if not POSE_ID.match(name):
            raise InputError(f"{camera_folder}: a camera name must be letters, digits, '_', '-' or '.'.")
        info_path = camera_folder / "camera_info.yaml"
        raw_info = CameraInfo.load(info_path)
        if not (raw_info.K[0, 0] > 0 and raw_info.K[1, 1] > 0):
            raise InputError(f"{info_path}: camera_matrix has no focal length; the camera is not calibrated.")
        files = _camera_files(camera_folder, set(log.pose_ids))
        if not files:
            raise InputError(f"{camera_folder}: no <pose>_depth.png or <pose>_rgb.png images.")
        checked_scale = False
        for pose in log.pose_ids:
            for kind, path in files.get(pose, {}).items():
                image = _read_image(path, kind == "depth")
                if (image.shape[1], image.shape[0]) != (raw_info.width, raw_info.height):
                    raise InputError(f"{path}: the image is {image.shape[1]}x{image.shape[0]} but {info_path} says "
                                     f"{raw_info.width}x{raw_info.height}.")
                if kind == "depth" and not checked_scale:
                    _check_scale(image, units, path)
                    checked_scale = True
        pose_path = camera_folder / "pose.yaml"
        base_T_camera = _read_pose_yaml(pose_path) if pose_path.is_file() and options.camera_poses != "none" else None
        if base_T_camera is None and options.camera_poses == "tf":
            raise InputError(f"{pose_path}: missing, so camera {name!r} has no pose ({setting('camera_poses')} tf).")
        has_depth = any("depth" in entry for entry in files.values())
        info = CameraInfo(name, raw_info.width, raw_info.height, raw_info.K, np.zeros(5))
        kept = sum(1 for entry in files.values() if entry)
        camera = ImportedCamera(name, info, raw_info, base_T_camera,
                                "pose.yaml" if base_T_camera is not None else "no pose.yaml", None, has_depth,
                                any("rgb" in entry for entry in files.values()),
                                options.depth_sigma_at_1m if has_depth else None,
                                ("stated (--depth-noise)" if options.depth_sigma_at_1m is not None else
                                 "unknown (one image a pose); the self-model assumes its default") if has_depth else None,
                                origin={"folder": str(camera_folder)},
                                counts={"frames": sum(len(e) for e in files.values()), "kept": kept, "dropped": {}})
        cameras.append(camera)
        plan += [(name, pose, kind, path) for pose in log.pose_ids for kind, path in files.get(pose, {}).items()]
    if not cameras:
        raise InputError(f"{root}: no camera folders.")
    options.check_cameras([camera.name for camera in cameras], str(root))

    def images() -> Iterator[tuple[str, str, str, np.ndarray]]:
        for name, pose, kind, path in plan:
            image = _read_image(path, kind == "depth")
            yield name, pose, kind, image.astype(np.float32) * np.float32(units) if kind == "depth" else image

    columns = {}
    if log.times is not None:
        columns["time"] = [repr(float(t)) for t in log.times]
    for joint, values in log.efforts.items():
        columns[f"effort_{joint}"] = [repr(float(v)) for v in values]
    source = {"kind": "import", "importer": "images", "folder": str(folder), "angle_unit": angle_unit,
              "depth_scale_m": units}
    write_camera_session(out, robot, chain, log.pose_ids, log.q, columns, log.payload_kg, cameras, images(), options,
                         source, force, None, progress, len(plan))
    return import_summary(out, cameras, clock.perf_counter() - started)
