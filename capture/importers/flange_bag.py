"""A hand-eye recording in a ROS 2 bag: photos of a ChArUco board with the flange pose of each, from
the bag's ``/tf`` or from a flange-pose file, in place of joint states and a URDF (docs/importing.md).

The photos are the cameras' colour images (topics grouped into cameras as
:mod:`capture.importers.rosbag_cameras` groups them; ``--camera`` chooses); depth is not read. The
session is the one ``import images --flange-poses`` writes (:mod:`capture.importers.flange_images`),
and ``selfcal calibrate`` fits it hand-eye.

From ``/tf`` (``--flange-frames PARENT,CHILD``): a photo's flange pose is CHILD's pose in PARENT at
the photo's stamp, composed through every frame between them with each moving transform
interpolated (:mod:`capture.importers.tf_tree`); a photo whose stamp has no sample of some moving
transform within ``tolerance`` seconds is refused. A photo is kept only while the flange stood
still, judged from /tf as :mod:`capture.importers.stills` judges joint states: the flange's position
(m) and rotation matrix entries (about rad) moved less than ``still`` over the /tf samples within
``still_window`` seconds of the stamp. Consecutive still samples are one stand and one pose
(``p0000``, ... in time order); each camera keeps its frame nearest the stand's middle, and the
pose's flange pose is the one at that frame's stamp (the first camera's, by name, when several see
the stand: they agree within ``still``).

From a file (``--flange-poses``, any form :mod:`capture.importers.flange_poses` reads): the bag holds
one colour image per camera per pose, as a triggered capture records it, and the k-th image of each
camera (in stamp order) is pose ``p{k:04d}``: the file names its poses so. Every image needs a pose;
a pose without an image is left out and counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from capture.camera_info import CameraInfo
from capture.importers.flange_images import flange_manifest, write_flange_session
from capture.importers.flange_poses import FlangePoses, check_flange_poses, read_flange_poses
from capture.importers.ros_images import MILLIMETRE
from capture.importers.rosbag import open_bag
from capture.importers.rosbag_cameras import BagCamera, decode_frames, scan_cameras
from capture.importers.stills import DEFAULT_STILL, DEFAULT_WINDOW, MOVING, NO_JOINTS, assign_frames, find_stands
from capture.importers.tf_static import TF_STATIC
from capture.importers.tf_tree import TF, TransformTree, read_transform_tree
from capture.session import pose_id
from rigs.errors import InputError, setting

NO_TF = "no /tf samples on both sides of the stamp"
FLANGE_MOVING = "the flange was moving"
SURPLUS = "another frame of the same stand was kept"
REASON_NAMES = {NO_JOINTS: NO_TF, MOVING: FLANGE_MOVING}  # stills' reasons, said of /tf


def parse_flange_frames(text: str) -> tuple[str, str]:
    """``--flange-frames PARENT,CHILD`` -> (parent, child) tf frame names (a leading ``/`` dropped)."""
    parts = [part.strip().lstrip("/") for part in str(text).split(",")]
    if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
        raise InputError(f"{setting('flange_frames')} {text!r}: expected PARENT,CHILD, two different tf frames: the "
                         f"robot's base and its flange (e.g. base_link,tool0).")
    return parts[0], parts[1]


@dataclass
class FlangeBagOptions:
    """Where the flange poses come from and how the photos are chosen (defaults in docs/importing.md)."""

    flange_frames: str | None = None  # "PARENT,CHILD": the flange pose from /tf
    flange_file: Path | None = None  # or from a flange-pose file
    length_unit: str = "m"  # of the flange-pose file
    setup: str = "eye-to-hand"
    cameras: list[str] | None = None  # --camera NAME=TOPIC
    depth_scale: float | None = None  # m per unit of 16-bit depth (only checked: depth is not imported)
    tolerance: float = 0.05  # s: largest gap from a photo's stamp to the nearest sample of each /tf transform
    still: float = DEFAULT_STILL  # m and rad the flange may move while standing still
    still_window: float = DEFAULT_WINDOW  # s either side of a photo's stamp

    def check(self) -> None:
        if (self.flange_frames is None) == (self.flange_file is None):
            raise InputError(f"give {setting('flange_frames')} PARENT,CHILD (the flange pose from the bag's /tf) or "
                             f"{setting('flange_file')} FILE (from the controller's file), one of them.")
        if not self.tolerance > 0:
            raise InputError(f"{setting('tolerance')} must be positive, got {self.tolerance:g} s.")
        if self.depth_scale is not None and not self.depth_scale > 0:
            raise InputError(f"{setting('depth_scale')} must be positive, got {self.depth_scale:g} m per unit.")


@dataclass
class PhotoPlan:
    """Which images become which poses: ``kept[camera][message number (0-based, bag order)]`` = pose."""

    pose_ids: list[str]
    base_T_flange: np.ndarray  # (N, 4, 4) m
    kept: dict[str, dict[int, str]]
    counts: dict[str, dict]  # camera -> frames, kept, dropped {reason: n}
    flange: dict  # where the flange poses came from, for the summary


def _where(camera: BagCamera, number: int) -> str:
    return f"topic {camera.colour.topic} message {number + 1}"


def _check_frames(tree: TransformTree, bag: Path, parent: str, child: str) -> None:
    """Both frames in the bag's tf tree, linked, and moved by /tf: else one sentence."""
    if not tree.moving and not tree.static.parent:
        raise InputError(f"{bag}: no {TF} or {TF_STATIC} transforms; {setting('flange_frames')} needs the robot's "
                         f"transforms (record {TF} and {TF_STATIC} with the images).")
    known = tree.frames
    for frame in (parent, child):
        if frame not in known:
            listing = ", ".join(sorted(known)[:12]) + (", ..." if len(known) > 12 else "")
            raise InputError(f"{bag}: frame {frame!r} of {setting('flange_frames')} {parent},{child} is in neither {TF} "
                             f"nor {TF_STATIC} (their frames: {listing}).")
    if not tree.linked(parent, child):
        raise InputError(f"{bag}: {TF} and {TF_STATIC} do not link {parent!r} to {child!r} (their trees' roots are "
                         f"{tree.ancestors(parent)[-1]!r} and {tree.ancestors(child)[-1]!r}); "
                         f"{setting('flange_frames')} names the robot's base and its flange.")
    if not tree.moving_on_chain(parent, child):
        raise InputError(f"{bag}: {TF_STATIC} alone links {parent!r} to {child!r}, so the flange never moves in this "
                         f"bag and hand-eye needs photos at many flange poses; {setting('flange_frames')} names the "
                         f"robot's base and its flange (a frame {TF} moves).")


def plan_from_tf(reader, bag: Path, cameras: list[BagCamera], options: FlangeBagOptions) -> PhotoPlan:
    """Photos and flange poses from /tf (module docstring)."""
    parent, child = parse_flange_frames(options.flange_frames)
    tree = read_transform_tree(reader, str(bag))
    _check_frames(tree, bag, parent, child)
    looked_up = {}
    for camera in cameras:
        stamps = camera.colour.stamps
        found = tree.lookup(parent, child, stamps)
        late = np.flatnonzero(found.gap > options.tolerance)
        if len(late):
            i = int(late[0])
            transform = tree.moving[found.worst[i]]
            raise InputError(f"{bag}: no {TF} for {parent} -> {child} at the stamp {stamps[i]:.6f} s of "
                             f"{_where(camera, i)}: the nearest sample of {transform.parent} -> "
                             f"{transform.child} is {found.gap[i]:.3g} s away, more than {setting('tolerance')} "
                             f"{options.tolerance:g} s ({TF} has it from {transform.times[0]:.6f} to "
                             f"{transform.times[-1]:.6f} s).")
        looked_up[camera.name] = found.poses

    # The flange's motion, sampled where /tf has every moving transform of the chain.
    moving = tree.moving_on_chain(parent, child)
    times = np.unique(np.concatenate([transform.times for transform in moving]))
    series = tree.lookup(parent, child, times)
    usable = series.gap <= options.tolerance
    times, poses = times[usable], series.poses[usable]
    motion = np.concatenate([poses[:, :3, 3], poses[:, :3, :3].reshape(-1, 9)], axis=1)
    stands, stand_of = find_stands(times, motion, options.still, options.still_window, options.tolerance)

    kept_stand: dict[str, dict[int, int]] = {}  # camera -> stand -> message number
    counts = {}
    for camera in cameras:
        stamps = camera.colour.stamps
        stand, reasons = assign_frames(stamps, times, motion, stand_of, options.still, options.still_window,
                                       options.tolerance)
        dropped: dict[str, int] = {}
        for reason in reasons:
            if reason is not None:
                dropped[REASON_NAMES[reason]] = dropped.get(REASON_NAMES[reason], 0) + 1
        by_stand: dict[int, list[int]] = {}
        for number, s in enumerate(stand):
            if s >= 0:
                by_stand.setdefault(int(s), []).append(number)
        kept_stand[camera.name] = {s: min(numbers, key=lambda n: abs(stamps[n] - stands.middle[s]))
                                   for s, numbers in by_stand.items()}
        surplus = sum(len(numbers) - 1 for numbers in by_stand.values())
        if surplus:
            dropped[SURPLUS] = surplus
        counts[camera.name] = {"frames": len(stamps), "kept": len(by_stand), "dropped": dropped}
    used = sorted({s for per_camera in kept_stand.values() for s in per_camera})
    if not used:
        lines = "; ".join(f"{name}: " + ", ".join(f"{n} {reason}" for reason, n in c["dropped"].items())
                          for name, c in counts.items())
        raise InputError(f"{bag}: no photo was taken while the flange stood still ({lines}); check {setting('still')} "
                         f"({options.still:g} m and rad) and {setting('still_window')} ({options.still_window:g} s).")
    pose_ids, base_T_flange, rows = [], [], []
    kept: dict[str, dict[int, str]] = {camera.name: {} for camera in cameras}
    for k, s in enumerate(used):
        pose = pose_id(k)
        pose_ids.append(pose)
        first = next(c for c in sorted(cameras, key=lambda c: c.name) if s in kept_stand[c.name])
        number = kept_stand[first.name][s]
        base_T_flange.append(looked_up[first.name][number])
        rows.append(_where(first, number))
        for camera in cameras:
            if s in kept_stand[camera.name]:
                kept[camera.name][kept_stand[camera.name][s]] = pose
    base_T_flange = np.array(base_T_flange)
    check_flange_poses(FlangePoses(pose_ids, base_T_flange, rows, f"{bag} ({TF} {parent} -> {child})"), "m",
                       from_tf=True)
    chain = [f"{t.parent} -> {t.child}" for t in moving]
    return PhotoPlan(pose_ids, base_T_flange, kept, counts,
                     {"frames": [parent, child], "moving_transforms": chain, "tf_samples": int(len(times)),
                      "stands": int(len(stands.middle)), "tolerance_s": options.tolerance,
                      "still": options.still, "still_window_s": options.still_window})


def plan_from_file(bag: Path, cameras: list[BagCamera], flange: FlangePoses, options: FlangeBagOptions) -> PhotoPlan:
    """Photos and flange poses from a flange-pose file, read (module docstring)."""
    index = flange.index()
    kept: dict[str, dict[int, str]] = {}
    counts = {}
    for camera in cameras:
        stamps = camera.colour.stamps
        kept[camera.name] = {}
        for k, number in enumerate(np.argsort(stamps, kind="stable")):
            pose = pose_id(k)
            if pose not in index:
                raise InputError(f"{options.flange_file}: no flange pose for image {k + 1} of camera {camera.name!r} "
                                 f"in {bag} ({_where(camera, int(number))}, pose {pose!r}); the file gives "
                                 f"{len(flange.pose_ids)} poses for {len(stamps)} images, and the k-th image of each "
                                 f"camera is pose p0000, p0001, ... in stamp order.")
            kept[camera.name][int(number)] = pose
        counts[camera.name] = {"frames": len(stamps), "kept": len(stamps), "dropped": {}}
    used = sorted({pose for per_camera in kept.values() for pose in per_camera.values()}, key=lambda p: index[p])
    return PhotoPlan(used, flange.base_T_flange[[index[pose] for pose in used]], kept, counts,
                     {"file": str(options.flange_file), "given": len(flange.pose_ids),
                      "without_photo": len(flange.pose_ids) - len(used), "length_unit": options.length_unit})


def import_flange_bag(bag: Path, options: FlangeBagOptions, board: dict | None, out: Path, force: bool = False,
                      progress: Callable[[int, int], None] | None = None,
                      count_corners: Callable[[np.ndarray], int] | None = None, board_name: str = "") -> dict:
    """A hand-eye recording in a bag (module docstring) -> a hand-eye session at ``out``; returns a summary.

    ``board``: the manifest's ``sensors.board`` entry (``--board``), required. ``count_corners``: RGB
    image -> board corners found, so that a board no photo shows is refused with nothing written.
    """
    import time as clock

    started = clock.perf_counter()
    bag = Path(bag)
    options.check()
    if options.flange_frames is not None:
        parent, child = parse_flange_frames(options.flange_frames)
        source = {"flange_frames": [parent, child], "tolerance_s": options.tolerance, "still": options.still,
                  "still_window_s": options.still_window}
    else:
        source = {"flange_poses": str(options.flange_file), "flange_length_unit": options.length_unit}
    manifest = flange_manifest(board, options.setup, {"importer": "rosbag", "bag": str(bag), **source})
    # A bad file is named before the bag is read.
    flange = read_flange_poses(options.flange_file, options.length_unit) if options.flange_file is not None else None
    units_m = MILLIMETRE if options.depth_scale is None else float(options.depth_scale)
    reader = open_bag(bag)
    try:
        found = scan_cameras(reader, bag, options.cameras, units_m)
        cameras = [BagCamera(camera.name, None, camera.colour) for camera in found if camera.colour is not None]
        if not cameras:
            raise InputError(f"{bag}: no colour image topics (sensor_msgs/Image or CompressedImage with a "
                             f"camera_info beside it); a hand-eye recording needs photos of the board.")
        plan = (plan_from_tf(reader, bag, cameras, options) if flange is None
                else plan_from_file(bag, cameras, flange, options))
        photographed = [camera for camera in cameras if plan.kept[camera.name]]
        entries = {}
        for camera in photographed:
            info = camera.colour.info
            entries[camera.name] = (CameraInfo(camera.name, info.width, info.height, info.K, info.distortion),
                                    {"recorded": {"bag": str(bag), "colour_topic": camera.colour.topic,
                                                  "encoding": camera.colour.kind.encoding
                                                  + (f" ({camera.colour.kind.compressed})"
                                                     if camera.colour.kind.compressed else "")},
                                     "frames": plan.counts[camera.name], "frame_id": camera.colour.frame_id})
        wanted = {(camera.name, "colour"): set(plan.kept[camera.name]) for camera in photographed}
        total = sum(len(numbers) for numbers in wanted.values())
        by_name = {camera.name: camera for camera in photographed}

        def photos() -> Iterator[tuple[str, str, str, np.ndarray]]:
            for name, _, number, image in decode_frames(reader, bag, photographed, wanted, units_m):
                yield name, plan.kept[name][number], f"{bag}: {_where(by_name[name], number)}", image

        corners = write_flange_session(out, manifest, plan.pose_ids, plan.base_T_flange, entries, photos(), total,
                                       force, progress, count_corners, board_name)
    finally:
        reader.close()
    return {"session": str(out), "poses": len(plan.pose_ids), "photos": total, "setup": options.setup,
            "corners": corners, "flange_poses": plan.flange,
            "cameras": {camera.name: {**plan.counts[camera.name], "topic": camera.colour.topic,
                                      "distortion": camera.colour.info.distortion.tolist()} for camera in cameras},
            "seconds": clock.perf_counter() - started}
