"""Camera recordings into a session: a ROS 2 bag's image topics, or a folder of images.

Both end in the same session layout as a simulated camera session (docs/session-format.md):
``cameras/<name>/camera_info.yaml``, ``<pose>_depth.png`` (16-bit, 1 mm per unit, 0 = no
reading), ``<pose>_rgb.png``, with each camera's pose in the base frame from ``/tf_static`` (or a
``pose.yaml``) or ``null`` for a board calibration to find.

A depth pixel of 0 is no reading: a hole on the arm or nothing in range behind it
(rigs.no_return). The import counts, per camera, the share of pixels with no reading, split into
no-return regions connected to the image border (or larger than the stated size) and holes, warns
when most of an image reads nothing, and records what the zeros mean (``no_depth``: ``auto`` unless
``--no-depth`` says otherwise) and the camera's far range (``far_range_m``: stated with
``--far-range``, else the largest reading the camera gave: nothing nearer can have been out of range).

Distorted images (a camera_info with non-zero plumb_bob or rational_polynomial coefficients) are
undistorted once, here, onto the same K: depth with the nearest pixel (a depth is never blended
across an edge), colour bilinearly; the session's camera_info then has no distortion.

Depth noise: a bag holds several frames of each stand; frame-to-frame differences of a still
scene are noise, so each camera's ``depth_sigma_at_1m`` (sigma_z = that * z^2, the stereo law) is
measured from them (:func:`estimate_depth_noise`) unless the user states it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np

from capture.camera_info import CameraInfo
from capture.importers.assemble import Robot, check_robot
from capture.importers.joint_logs import ArmJoints
from capture.importers.ros_images import MILLIMETRE
from capture.importers.stills import DEFAULT_STILL, DEFAULT_WINDOW, REASONS, assign_frames, find_stands
from capture.session import FORMAT, FORMAT_VERSION, SessionWriter, load_session, pose_id
from rigs import urdf as urdf_io
from rigs.errors import InputError, setting
from rigs.files import atomic_write_json, output_folder
from rigs.no_return import DEFAULT_NO_DEPTH, MOSTLY_EMPTY, check_mode, no_return_regions
from rigs.version import VERSION

SESSION_DEPTH_SCALE = MILLIMETRE  # m per unit of the session's depth PNGs: what real cameras resolve
POSE_SOURCES = ("auto", "tf", "none")
NO_COLOUR = "no colour frame with the depth frame's stamp"
NO_DEPTH = "no depth frame with the colour frame's stamp"
SURPLUS = "another frame of the same stand was kept"
NOISE_STANDS = 8  # stands per camera whose frames measure the depth noise
NOISE_MIN_FRAMES = 3
EDGE_JUMP = 0.03  # m: a pixel whose neighbours differ more sits on a depth edge


@dataclass
class CameraOptions:
    """How camera recordings are read (defaults in docs/importing.md)."""

    depth_scale: float | None = None  # m per unit of 16-bit depth; None: millimetres
    still: float = DEFAULT_STILL  # rad (m for prismatic joints)
    still_window: float = DEFAULT_WINDOW  # s either side of a frame's stamp
    tolerance: float = 0.05  # s: largest gap to the nearest joint state
    pair_tolerance: float = 0.01  # s: colour and depth frames of one camera with stamps this close pair
    camera_poses: str = "auto"  # auto: /tf_static where it links them, else null; tf: required; none
    frame_convention: str = "auto"  # auto (by name), optical, body
    mount_plane_z: float | None = 0.0  # m, base frame: the surface the base stands on; None: none
    depth_sigma_at_1m: float | None = None  # stated noise; None: measured where the recording allows
    board: dict | None = None  # the manifest's sensors.board (a ChArUco board on the tip), or None
    cameras: list[str] | None = None  # --camera NAME=TOPIC[,TOPIC]
    no_depth: str | dict = DEFAULT_NO_DEPTH  # what a 0 pixel means (rigs.no_return): one mode, or {camera: mode}
    far_range_m: float | None = None  # m: the cameras' far range; None: the largest reading of each

    def no_depth_of(self, camera: str) -> str:
        if isinstance(self.no_depth, dict):
            return self.no_depth.get(camera, self.no_depth.get("*", DEFAULT_NO_DEPTH))  # "*": every other camera
        return self.no_depth

    @property
    def units_m(self) -> float:
        return MILLIMETRE if self.depth_scale is None else float(self.depth_scale)

    def check(self) -> None:
        if self.depth_scale is not None and not self.depth_scale > 0:
            raise InputError(f"{setting('depth_scale')} must be positive, got {self.depth_scale:g} m per unit.")
        if self.camera_poses not in POSE_SOURCES:
            raise InputError(f"{setting('camera_poses')} {self.camera_poses!r} is not one of {', '.join(POSE_SOURCES)}.")
        if self.pair_tolerance <= 0:
            raise InputError(f"{setting('pair_tolerance')} must be positive, got {self.pair_tolerance:g} s.")
        if self.depth_sigma_at_1m is not None and not self.depth_sigma_at_1m > 0:
            raise InputError(f"{setting('depth_sigma_at_1m')} must be positive, got {self.depth_sigma_at_1m:g}.")
        for mode in (self.no_depth.values() if isinstance(self.no_depth, dict) else [self.no_depth]):
            check_mode(mode, setting("no_depth"))
        if self.far_range_m is not None and not self.far_range_m > 0:
            raise InputError(f"{setting('far_range_m')} must be positive, got {self.far_range_m:g} m.")

    def check_cameras(self, names: list[str], where: str) -> None:
        """``--no-depth CAMERA=MODE`` names only cameras the recording has."""
        if isinstance(self.no_depth, dict):
            unknown = sorted(set(self.no_depth) - set(names) - {"*"})
            if unknown:
                raise InputError(f"{where}: {setting('no_depth')} {unknown[0]}=...: there is no camera {unknown[0]!r} "
                                 f"(the cameras are {', '.join(sorted(names))}).")


@dataclass
class ImportedCamera:
    """A camera as the session will record it."""

    name: str
    info: CameraInfo  # of the images as written (undistorted: no distortion)
    raw_info: CameraInfo  # as recorded
    base_T_camera: np.ndarray | None
    pose_source: str  # "/tf_static", "pose.yaml" or why there is none
    frame_id: str | None
    has_depth: bool
    has_colour: bool
    depth_sigma_at_1m: float | None = None
    noise_source: str | None = None
    origin: dict = field(default_factory=dict)  # where the images came from (topics, folder)
    counts: dict = field(default_factory=dict)  # frames kept and dropped, by reason
    no_depth: str = DEFAULT_NO_DEPTH  # what its zeros mean (rigs.no_return)
    far_range_m: float | None = None
    far_range_source: str | None = None
    zeros: "ZeroCounter | None" = None  # the share of its pixels with no reading, by kind

    def __post_init__(self) -> None:
        self._maps = None
        if np.any(self.raw_info.distortion):
            import cv2

            size = (self.raw_info.width, self.raw_info.height)
            self._maps = cv2.initUndistortRectifyMap(self.raw_info.K, self.raw_info.distortion, None, self.raw_info.K,
                                                     size, cv2.CV_32FC1)

    def undistort(self, image: np.ndarray, depth: bool) -> np.ndarray:
        if self._maps is None:
            return image
        import cv2

        return cv2.remap(image, *self._maps, cv2.INTER_NEAREST if depth else cv2.INTER_LINEAR)


# -- depth noise from still frames ----------------------------------------------------------------

class NoiseMeter:
    """Accumulates per-pixel sums over the frames of a stand; ``sigma_at_1m`` estimates c in c z^2."""

    def __init__(self, quantum_m: float):
        self.quantum = quantum_m
        self.stands: dict[int, list] = {}  # stand -> [count, sum, sum of squares, frames, edge mask]

    def add(self, stand: int, depth: np.ndarray) -> None:
        from rigs.depth_model import neighbourhood_range

        depth = depth.astype(np.float64)
        valid = depth > 0
        if stand not in self.stands:
            low, high = neighbourhood_range(depth)
            self.stands[stand] = [np.zeros(depth.shape), np.zeros(depth.shape), np.zeros(depth.shape), 0,
                                  (high - low) > EDGE_JUMP]
        entry = self.stands[stand]
        entry[0] += valid
        entry[1] += np.where(valid, depth, 0.0)
        entry[2] += np.where(valid, depth ** 2, 0.0)
        entry[3] += 1

    def sigma_at_1m(self) -> float | None:
        """Median over stands of the chi-square corrected median of var / z^4, square-rooted; None if too few."""
        from scipy.stats import chi2

        estimates = []
        for count, total, squares, frames, edge in self.stands.values():
            if frames < NOISE_MIN_FRAMES:
                continue
            full = (count == frames) & ~edge
            if full.sum() < 1000:
                continue
            mean = total[full] / frames
            variance = np.maximum((squares[full] - frames * mean ** 2) / (frames - 1) - self.quantum ** 2 / 12, 0.0)
            ratio = np.median(variance / mean ** 4)
            estimates.append(ratio * (frames - 1) / chi2.ppf(0.5, frames - 1))
        if not estimates:
            return None
        return float(np.sqrt(np.median(estimates)))


# -- pixels with no reading -----------------------------------------------------------------------

class ZeroCounter:
    """Per camera: the share of each depth image's pixels with no reading, split as rigs.no_return
    splits them, and the largest reading (m)."""

    def __init__(self):
        self.shares: list[dict[str, float]] = []
        self.largest = 0.0

    def add(self, depth: np.ndarray) -> None:
        depth = np.nan_to_num(np.asarray(depth, dtype=np.float64), nan=0.0)
        self.shares.append(no_return_regions(depth).shares())
        self.largest = max(self.largest, float(depth.max(initial=0.0)))

    def summary(self) -> dict:
        """Mean shares over the images (``no_reading``, ``border``, ``large``, ``hole``), the worst
        image's, and how many images read nothing over more than half their pixels."""
        if not self.shares:
            return {"images": 0}
        out = {key: round(float(np.mean([s[key] for s in self.shares])), 4) for key in self.shares[0]}
        out.update(images=len(self.shares), worst=round(max(s["no_reading"] for s in self.shares), 4),
                   mostly_empty_images=sum(1 for s in self.shares if s["no_reading"] > MOSTLY_EMPTY))
        return out


MEANINGS = {"auto": "free space up to the far range where they reach the image border or cover a large region, "
                    "unknown where they are small holes",
            "free": "free space up to the far range, every one",
            "unknown": "vouching for nothing: space no camera saw free becomes matter, so the self-model grows "
                       "shells beside the arm"}


def no_reading_warning(camera: ImportedCamera) -> str | None:
    """A sentence when most of the camera's images read nothing, naming what the session takes
    the zeros to mean and the option that says otherwise; None otherwise."""
    zeros = camera.zeros.summary() if camera.zeros is not None else {"images": 0}
    if not zeros["images"] or zeros["no_reading"] <= MOSTLY_EMPTY:
        return None
    far = (f" ({camera.far_range_m:.2f} m, {camera.far_range_source})"
           if camera.far_range_m and camera.no_depth != "unknown" else "")
    advice = ("if nothing stands behind the arm within the camera's range (a large hall, a clipping distance, depth "
              "masked to the arm), use --no-depth auto" if camera.no_depth == "unknown" else
              "if a surface close behind the arm reads nothing (a black backdrop), its zeros are holes: use "
              f"--no-depth {camera.name}=unknown")
    return (f"camera {camera.name!r}: {100 * zeros['no_reading']:.0f} % of each depth image reads nothing on average "
            f"({100 * zeros['border']:.1f} % no return connected to the image border, {100 * zeros['large']:.1f} % "
            f"large regions, {100 * zeros['hole']:.1f} % holes); the session takes them as {camera.no_depth}: "
            f"{MEANINGS[camera.no_depth]}{far}; {advice} (on import or on `selfcal selfmodel train`).")


def settle_no_depth(cameras: list[ImportedCamera], options: CameraOptions) -> None:
    """Each depth camera's no-depth mode and far range, once its images are counted."""
    for camera in cameras:
        if not camera.has_depth:
            continue
        camera.no_depth = options.no_depth_of(camera.name)
        if options.far_range_m is not None:
            camera.far_range_m, camera.far_range_source = float(options.far_range_m), "stated (--far-range)"
        elif camera.zeros is not None and camera.zeros.largest > 0:
            camera.far_range_m = round(float(camera.zeros.largest), 4)
            camera.far_range_source = "the largest reading in the recording"


# -- the session ----------------------------------------------------------------------------------

def camera_manifest_entry(camera: ImportedCamera) -> dict:
    return {"info": f"cameras/{camera.name}/camera_info.yaml",
            "base_T_camera": None if camera.base_T_camera is None else camera.base_T_camera.tolist(),
            "pose_source": camera.pose_source, "frame_id": camera.frame_id,
            "depth_scale": SESSION_DEPTH_SCALE,
            "depth_noise": None, "depth_sigma_at_1m": camera.depth_sigma_at_1m,
            "depth_noise_source": camera.noise_source,
            "no_depth": camera.no_depth if camera.has_depth else "unknown",
            "far_range_m": camera.far_range_m if camera.has_depth else None,
            "far_range_source": camera.far_range_source if camera.has_depth else None,
            "no_reading": camera.zeros.summary() if camera.zeros is not None else None,
            "undistorted_at_import": bool(np.any(camera.raw_info.distortion)),
            "recorded": camera.origin, "frames": camera.counts}


def write_camera_session(out: Path, robot: Robot, chain: ArmJoints, pose_ids: list[str], q: np.ndarray,
                         columns: dict[str, list[str]], payload_kg: np.ndarray | None, cameras: list[ImportedCamera],
                         images: Iterable[tuple[str, str, str, np.ndarray]], options: CameraOptions, source: dict,
                         force: bool = False, finish: Callable[[], None] | None = None,
                         progress: Callable[[int, int], None] | None = None, total_images: int = 0) -> Path:
    """Write poses and camera images as a session folder (all or nothing).

    ``images`` yields (camera, pose id, "depth" | "rgb", image) with depth in metres (0 = no
    reading) and colour (H, W, 3) uint8 RGB, as recorded (distorted); ``finish`` runs after the
    last image (it may fill in the cameras' noise) and before the manifest is written. ``columns``:
    extra joints.csv columns (time, effort_<joint>), text per pose; ``payload_kg`` (N,) or None.
    """
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "units": {"length": "m", "angle": "rad", "mass": "kg", "depth_png": f"{SESSION_DEPTH_SCALE} m per unit"},
        "robot": {"urdf": "robot.urdf", "base_link": robot.base_link, "tip_link": robot.tip_link,
                  "joint_names": chain.names, "payload_com": list(robot.payload_com or (0.0, 0.0, 0.0))},
        "sensors": {"tracker": None, "cameras": {}, "board": options.board},
        "scene": {"mount_plane_z": options.mount_plane_z},
        "source": {**source, "selfcal_version": VERSION},
    }
    by_name = {camera.name: camera for camera in cameras}
    known_poses = set(pose_ids)
    with output_folder(out, force) as folder:
        try:
            urdf_io.copy_self_contained(urdf_io.parse_urdf(robot.urdf), Path(robot.urdf).parent, folder,
                                        [Path(p) for p in robot.package_dirs])
        except InputError as error:
            raise InputError(f"{robot.urdf}: {error.marked}") from None
        writer = SessionWriter.create(folder, manifest, list(columns), with_payload=payload_kg is not None)
        for camera in cameras:
            camera.info.save(folder / "cameras" / camera.name / "camera_info.yaml")
        written = 0
        for name, pose, kind, image in images:
            camera = by_name[name]
            assert pose in known_poses, pose
            if kind == "depth":
                undistorted = camera.undistort(image, depth=True)
                if camera.zeros is None:
                    camera.zeros = ZeroCounter()
                camera.zeros.add(undistorted)
                writer.add_images(pose, name, None, undistorted, None, SESSION_DEPTH_SCALE)
            else:
                writer.add_images(pose, name, camera.undistort(image, depth=False), None, None, SESSION_DEPTH_SCALE)
            written += 1
            if progress is not None:
                progress(written, total_images)
        if finish is not None:
            finish()
        settle_no_depth(cameras, options)
        manifest["sensors"]["cameras"] = {camera.name: camera_manifest_entry(camera) for camera in cameras}
        atomic_write_json(folder / "session.json", manifest)
        for row, pose in enumerate(pose_ids):
            writer.add_pose(pose, q[row], 0.0 if payload_kg is None else float(payload_kg[row]),
                            {name: values[row] for name, values in columns.items()})
        load_session(folder)  # what we wrote must read back
    return Path(out)


# -- ROS 2 bags -----------------------------------------------------------------------------------

@dataclass
class BagFrames:
    """What the bag's frames became: per camera, the message numbers kept per pose and the counts."""

    pose_ids: list[str]
    q: np.ndarray
    times: np.ndarray
    kept: dict[str, dict[str, tuple[int | None, int | None]]]  # camera -> pose -> (depth msg, colour msg)
    noise: dict[str, dict[int, list[int]]]  # camera -> stand -> depth message numbers for the noise
    stand_pose: dict[int, str]
    counts: dict[str, dict]


def select_frames(cameras, log, options: CameraOptions) -> BagFrames:
    """Pair colour and depth, keep one still frame per camera and stand (module docstrings)."""
    from capture.importers.rosbag_cameras import pair_by_stamp

    order = np.argsort(log.times, kind="stable")
    times, q = log.times[order], log.q[order]
    stands, stand_of = find_stands(times, q, options.still, options.still_window, options.tolerance)
    per_camera = {}
    for camera in cameras:
        counts = {"frames": 0, "kept": 0, "dropped": {}}
        frames = []  # (time, depth number | None, colour number | None)
        if camera.depth is not None and camera.colour is not None:
            pairs = pair_by_stamp(camera.depth.stamps, camera.colour.stamps, options.pair_tolerance)
            paired_depth = {i for i, _ in pairs}
            paired_colour = {j for _, j in pairs}
            frames = [(camera.depth.stamps[i], i, j) for i, j in pairs]
            lost_colour = len(camera.depth.stamps) - len(paired_depth)
            lost_depth = len(camera.colour.stamps) - len(paired_colour)
            if lost_colour:
                counts["dropped"][NO_COLOUR] = lost_colour
            if lost_depth:
                counts["dropped"][NO_DEPTH] = lost_depth
            counts["frames"] = len(pairs) + lost_colour + lost_depth
        else:
            stream = camera.depth or camera.colour
            frames = [(t, i, None) if camera.depth is not None else (t, None, i) for i, t in enumerate(stream.stamps)]
            counts["frames"] = len(frames)
        frame_times = np.array([f[0] for f in frames])
        stand, reasons = assign_frames(frame_times, times, q, stand_of, options.still, options.still_window,
                                       options.tolerance) if frames else (np.zeros(0, int), [])
        for reason in REASONS:
            n = sum(1 for r in reasons if r == reason)
            if n:
                counts["dropped"][reason] = n
        per_camera[camera.name] = (frames, stand, counts)

    used = sorted({int(s) for _, stand, _ in per_camera.values() for s in stand if s >= 0})
    stand_pose = {s: pose_id(k) for k, s in enumerate(used)}
    kept, noise, counts_out = {}, {}, {}
    for camera in cameras:
        frames, stand, counts = per_camera[camera.name]
        kept[camera.name], noise[camera.name] = {}, {}
        by_stand: dict[int, list[int]] = {}
        for index, s in enumerate(stand):
            if s >= 0:
                by_stand.setdefault(int(s), []).append(index)
        surplus = 0
        for s, indices in by_stand.items():
            best = min(indices, key=lambda i: abs(frames[i][0] - stands.middle[s]))
            kept[camera.name][stand_pose[s]] = (frames[best][1], frames[best][2])
            surplus += len(indices) - 1
        if surplus:
            counts["dropped"][SURPLUS] = surplus
        counts["kept"] = len(by_stand)
        counts_out[camera.name] = counts
        if camera.depth is not None:
            rich = [s for s, indices in sorted(by_stand.items()) if len(indices) >= NOISE_MIN_FRAMES]
            if rich:
                chosen = [rich[int(i)] for i in np.unique(np.linspace(0, len(rich) - 1, NOISE_STANDS).round())]
                noise[camera.name] = {s: [frames[i][1] for i in by_stand[s]] for s in chosen}
    return BagFrames([stand_pose[s] for s in used], stands.q[used], stands.middle[used], kept, noise, stand_pose,
                     counts_out)


def _bag_camera_poses(reader, bag: Path, cameras, robot: Robot, options: CameraOptions) -> dict[str, tuple]:
    """camera -> (base_T_camera | None, source text)."""
    from capture.importers.tf_static import TF_STATIC, camera_pose, is_optical, read_static_transforms

    if options.camera_poses == "none":
        return {c.name: (None, "not read (--camera-poses none)") for c in cameras}
    transforms = read_static_transforms(reader, str(bag))
    poses = {}
    for camera in cameras:
        is_optical(camera.frame_id, options.frame_convention)  # checks the flag
        if transforms is None or not transforms.parent:
            if options.camera_poses == "tf":
                raise InputError(f"{bag}: the bag has no {TF_STATIC} transforms, so camera {camera.name!r} has no pose "
                                 f"({setting('camera_poses')} tf); use {setting('camera_poses')} auto to leave it to a "
                                 f"board calibration.")
            poses[camera.name] = (None, f"the bag has no {TF_STATIC}")
            continue
        frames = transforms.frames
        if camera.frame_id not in frames:
            raise InputError(f"{bag}: camera {camera.name!r}: frame {camera.frame_id!r} of {camera.streams[0].topic} is "
                             f"not in {TF_STATIC} (it has {', '.join(sorted(frames))}); fix the frame_id, or pass "
                             f"{setting('camera_poses')} none to leave the camera poses to a board calibration.")
        pose = camera_pose(transforms, robot.base_link, camera.frame_id, options.frame_convention)
        if pose is None:
            if options.camera_poses == "tf":
                raise InputError(f"{bag}: {TF_STATIC} does not link {robot.base_link!r} to {camera.frame_id!r} (camera "
                                 f"{camera.name!r}); use {setting('camera_poses')} auto to leave it to a board "
                                 f"calibration.")
            poses[camera.name] = (None, f"{TF_STATIC} does not link {robot.base_link} to {camera.frame_id}")
            continue
        convention = "optical" if is_optical(camera.frame_id, options.frame_convention) else "body (rotated to optical)"
        poses[camera.name] = (pose, f"{TF_STATIC}: {robot.base_link} -> {camera.frame_id}, {convention} frame")
    return poses


POSE_DEPTH_RATIO = (0.3, 3.0)  # median depth over the camera's distance from the base, for a camera that sees the arm


def check_depth_against_pose(camera, base_T_camera: np.ndarray | None, options: CameraOptions, bag: Path) -> None:
    """With a known pose, a camera that watches the arm reads depths like its distance from the base."""
    if base_T_camera is None or camera.depth is None or camera.depth.median_depth is None:
        return
    distance = float(np.linalg.norm(base_T_camera[:3, 3]))
    ratio = camera.depth.median_depth / distance
    low, high = POSE_DEPTH_RATIO
    if not low <= ratio <= high:
        guess = 10.0 ** round(np.log10(distance * options.units_m / camera.depth.median_depth))
        hint = (f"pass {setting('depth_scale')} {guess:g} if its values are in another unit"
                if camera.depth.kind.encoding != "32FC1" else "32FC1 depth must be in metres (REP 118)")
        raise InputError(f"{bag}: topic {camera.depth.topic} message 1: the median depth is "
                         f"{camera.depth.median_depth:.3g} m but /tf_static puts camera {camera.name!r} "
                         f"{distance:.3g} m from the base; {hint}.")


def import_rosbag_cameras(robot: Robot, bag: Path, topic: str, options: CameraOptions, out: Path,
                          payload_kg: float | None = None, force: bool = False,
                          progress: Callable[[int, int], None] | None = None) -> dict:
    """JointState and camera topics of a ROS 2 bag -> a camera session at ``out``; returns a summary."""
    import time as clock

    from capture.importers.rosbag import open_bag, read_joint_states
    from capture.importers.rosbag_cameras import decode_frames, scan_cameras
    from capture.importers.units import check_joint_values

    started = clock.perf_counter()
    options.check()
    if payload_kg is not None and payload_kg < 0:
        raise InputError(f"{setting('payload_kg')} must not be negative, got {payload_kg:g} kg.")
    chain = check_robot(robot)
    log = read_joint_states(bag, topic, chain)
    check_joint_values(log.q, log.q, chain.names, chain.types, chain.lower, chain.upper,
                       [f"message {n}" for n in log.lines], f"{bag} ({topic})", "rad")
    reader = open_bag(Path(bag))
    try:
        found = scan_cameras(reader, Path(bag), options.cameras, options.units_m)
        if not found:
            raise InputError(f"{bag}: no camera images to import (no sensor_msgs/Image or CompressedImage topics).")
        options.check_cameras([camera.name for camera in found], str(bag))
        frames = select_frames(found, log, options)
        if not frames.pose_ids:
            lines = "; ".join(f"{name}: " + ", ".join(f"{n} {reason}" for reason, n in c["dropped"].items())
                              for name, c in frames.counts.items())
            raise InputError(f"{bag}: no camera frame was taken while the arm stood still ({lines}); check "
                             f"{setting('still')} ({options.still:g} rad) and {setting('still_window')} "
                             f"({options.still_window:g} s).")
        poses = _bag_camera_poses(reader, Path(bag), found, robot, options)
        for camera in found:
            check_depth_against_pose(camera, poses[camera.name][0], options, Path(bag))
        cameras = []
        for camera in found:
            base_T_camera, pose_source = poses[camera.name]
            info = CameraInfo(camera.name, camera.info.width, camera.info.height, camera.info.K, np.zeros(5))
            cameras.append(ImportedCamera(
                camera.name, info, camera.info, base_T_camera, pose_source, camera.frame_id,
                camera.depth is not None, camera.colour is not None,
                origin={"depth_topic": None if camera.depth is None else camera.depth.topic,
                        "colour_topic": None if camera.colour is None else camera.colour.topic,
                        "encodings": {s.topic: s.kind.encoding + (f" ({s.kind.compressed})" if s.kind.compressed else "")
                                      for s in camera.streams}},
                counts=frames.counts[camera.name]))
        wanted: dict[tuple[str, str], set[int]] = {}
        targets: dict[tuple[str, str, int], list] = {}  # (camera, role, number) -> [("pose", id) | ("noise", stand)]
        for camera in found:
            for pose, (depth_number, colour_number) in frames.kept[camera.name].items():
                for role, number in (("depth", depth_number), ("colour", colour_number)):
                    if number is not None:
                        wanted.setdefault((camera.name, role), set()).add(number)
                        targets.setdefault((camera.name, role, number), []).append(("pose", pose))
            if options.depth_sigma_at_1m is None:
                for stand, numbers in frames.noise[camera.name].items():
                    for number in numbers:
                        wanted.setdefault((camera.name, "depth"), set()).add(number)
                        targets.setdefault((camera.name, "depth", number), []).append(("noise", stand))
        meters = {camera.name: NoiseMeter(options.units_m if camera.depth is not None and
                                          camera.depth.kind.encoding != "32FC1" else 0.0) for camera in found}
        total = sum(1 for uses in targets.values() if any(u[0] == "pose" for u in uses))

        def images() -> Iterator[tuple[str, str, str, np.ndarray]]:
            for name, role, number, image in decode_frames(reader, Path(bag), found, wanted, options.units_m):
                for use, value in targets[(name, role, number)]:
                    if use == "noise":
                        meters[name].add(value, image)
                    else:
                        yield name, value, "depth" if role == "depth" else "rgb", image

        def finish() -> None:
            for camera in cameras:
                if not camera.has_depth:
                    continue
                if options.depth_sigma_at_1m is not None:
                    camera.depth_sigma_at_1m, camera.noise_source = options.depth_sigma_at_1m, "stated (--depth-noise)"
                    continue
                estimate = meters[camera.name].sigma_at_1m()
                if estimate is not None:
                    stands = len(meters[camera.name].stands)
                    camera.depth_sigma_at_1m = estimate
                    camera.noise_source = f"measured from the still frames of {stands} stands"
                else:
                    camera.noise_source = "unknown (fewer than 3 frames a stand); the self-model assumes its default"

        source = {"kind": "import", "importer": "rosbag", "bag": str(bag), "topic": topic,
                  "still_rad": options.still, "still_window_s": options.still_window, "tolerance_s": options.tolerance,
                  "pair_tolerance_s": options.pair_tolerance, "camera_poses": options.camera_poses,
                  "frame_convention": options.frame_convention, "joint_states": len(log.pose_ids)}
        write_camera_session(out, robot, chain, frames.pose_ids, frames.q,
                             {"time": [repr(float(t)) for t in frames.times]},
                             None if payload_kg is None else np.full(len(frames.pose_ids), float(payload_kg)),
                             cameras, images(), options, source, force, finish, progress, total)
    finally:
        reader.close()
    return import_summary(out, cameras, clock.perf_counter() - started)


def import_summary(out: Path, cameras: list[ImportedCamera], seconds: float) -> dict:
    session = load_session(out)
    return {"session": str(out), "poses": len(session.pose_ids), "seconds": round(seconds, 2),
            "cameras": {camera.name: {"kept": camera.counts.get("kept", 0), "frames": camera.counts.get("frames", 0),
                                      "dropped": camera.counts.get("dropped", {}),
                                      "pose": "known" if camera.base_T_camera is not None else None,
                                      "pose_source": camera.pose_source,
                                      "depth_sigma_at_1m": camera.depth_sigma_at_1m,
                                      "depth_noise_source": camera.noise_source,
                                      "no_depth": camera.no_depth if camera.has_depth else None,
                                      "far_range_m": camera.far_range_m, "far_range_source": camera.far_range_source,
                                      "no_reading": camera.zeros.summary() if camera.zeros is not None else None}
                        for camera in cameras},
            "warnings": [w for w in (no_reading_warning(camera) for camera in cameras) if w]}
