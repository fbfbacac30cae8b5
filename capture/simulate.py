"""Recording a session from a simulated rig.

The simulator plays the rig's hidden true arm; this module decides where the arm goes (random
valid poses or a plan), measures each pose and appends it to the session. The recording is built
in ``<out>.partial`` and renamed to ``<out>`` when complete; ``resume`` continues an interrupted
one with the same seed, so the result has exactly the poses an uninterrupted run would have.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from rigs.version import VERSION
from capture.camera_info import CameraInfo
from capture.poses import Plan, random_poses
from capture.session import FORMAT, FORMAT_VERSION, SessionWriter, pose_id
from rigs import urdf as urdf_io
from rigs.errors import InputError, setting
from rigs.files import (TEMPORARY_TAG, atomic_write_json, current_umask, check_new_output, clean_leftovers, is_locked,
                        locked_folder, make_parents, remove_empty_folders, rename_no_replace)
from rigs.simulator import Simulator, true_tip_T_board
from rigs.spec import Rig
from rigs.transforms import exp6, invert, quat_xyzw, transform_points
from rigs.truth import TrueArm, draw_truth, fleet_arm, session_setup, true_urdf_tree

DEPTH_SCALE = 0.0001  # m per unit in depth PNGs: 0.1 mm steps up to 6.5 m


def partial_path(out: Path) -> Path:
    return Path(out).with_name(Path(out).name + ".partial")


def _manifest(rig: Rig, joint_names: list[str], seed: int, poses: int, payload_kg: float,
              arm_seed: int | None) -> dict:
    sensors = {"tracker": None, "cameras": {}, "board": None}
    if rig.tracker is not None and rig.tracker.kind == "6dof":
        sensors["tracker_poses"] = {"file": "tracker_poses.csv", "frame": "tracker",
                                    "probe": "6-DoF probe rigidly mounted on the tip link",
                                    "sigma_pos_m": rig.tracker.pose_noise[0], "sigma_rot_rad": rig.tracker.pose_noise[1]}
    if rig.tracker is not None and rig.targets:  # a 6-DoF tracker may measure reflectors as well
        sensors["tracker"] = {
            "targets": {t.name: t.xyz.tolist() for t in rig.targets},
            "distance_mpe_m": list(rig.tracker.distance_mpe),
            "transverse_mpe_m": list(rig.tracker.transverse_mpe),
        }
    for camera in rig.cameras:
        sensors["cameras"][camera.name] = {
            "info": f"cameras/{camera.name}/camera_info.yaml",
            "base_T_camera": camera.base_T_camera.tolist(),
            "depth_scale": DEPTH_SCALE,
            "depth_noise": camera.depth_noise if camera.depth_model.kind == "gaussian" else None,
            "depth_sigma_at_1m": camera.depth_model.sigma_at_1m(float(camera.K[0, 0])),
            "no_depth": camera.depth_model.no_depth,
            # Readings beyond the model's range read 0: a zero that means nothing in range means nothing this near.
            "far_range_m": float(camera.depth_model.max_range_m or camera.far),
            "depth_model": camera.depth_model.describe(float(camera.K[0, 0])),
        }
    if rig.board is not None:
        board = rig.board
        sensors["board"] = {"kind": "charuco", "squares": list(board.squares), "square_m": board.square,
                            "marker_m": board.marker, "dictionary": board.dictionary,
                            "tip_T_board_nominal": board.tip_T_board.tolist()}
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "units": {"length": "m", "angle": "rad", "mass": "kg", "depth_png": f"{DEPTH_SCALE} m per unit"},
        "robot": {"urdf": "robot.urdf", "base_link": rig.robot.base_link, "tip_link": rig.robot.tip_link,
                  "joint_names": joint_names, "payload_com": rig.robot.payload_com.tolist(),
                  **({"held_joints": dict(rig.robot.held_joints)} if rig.robot.held_joints else {})},
        "sensors": sensors,
        "source": {"kind": "simulated", "rig": rig.name, "seed": seed, "arm_seed": arm_seed, "poses": poses,
                   "payload_kg": payload_kg, "selfcal_version": VERSION},
    }
    if rig.scene is not None:
        manifest["scene"] = {"mount_plane_z": rig.scene.mount_plane_z,
                             "boxes": [box.name for box in rig.scene.boxes]}
    return manifest


def _lay_out(rig: Rig, arm: TrueArm, folder: Path, joint_names: list[str], seed: int, poses: int, payload_kg: float,
             extra_columns: list[str], segmentation_links: list[str], arm_seed: int | None) -> SessionWriter:
    """A new session folder: description, manifest, camera infos and the truth."""
    urdf_io.copy_self_contained(urdf_io.parse_urdf(rig.robot.urdf), rig.robot.urdf.parent, folder,
                                rig.robot.package_dirs)
    manifest = _manifest(rig, joint_names, seed, poses, payload_kg, arm_seed)
    writer = SessionWriter.create(folder, manifest, extra_columns, with_payload=True)
    for camera in rig.cameras:
        CameraInfo(camera.name, camera.width, camera.height, camera.K, np.zeros(5)).save(
            folder / "cameras" / camera.name / "camera_info.yaml")
    truth = folder / "truth"
    urdf_io.copy_self_contained(true_urdf_tree(rig, arm), rig.robot.urdf.parent, truth, rig.robot.package_dirs)
    parameters = arm.to_json()
    if rig.tracker is not None:
        parameters["tracker_T_base"] = invert(rig.tracker.base_T_tracker).tolist()
    if rig.tracker is not None and rig.tracker.kind == "6dof":
        parameters["tip_T_probe"] = true_tip_T_probe(rig).tolist()
    if rig.board is not None:
        parameters["tip_T_board"] = true_tip_T_board(rig).tolist()
    if rig.truth.torques is not None:
        sensing = rig.truth.torques
        parameters["torque_sensing"] = {
            "convention": "effort = sign * tau + offset + noise; tau = the true arm's inverse dynamics (Pinocchio's "
                          "sign: at rest the torque that holds the arm up) + viscous * v + coulomb * sign(v)",
            "sign": sensing.sign, "noise_nm": sensing.noise, "offsets_nm": arm.torque_offsets.tolist(),
            "viscous_nms_per_rad": None if sensing.viscous is None else sensing.viscous.tolist(),
            "coulomb_nm": None if sensing.coulomb is None else sensing.coulomb.tolist(),
            "payload_com": rig.robot.payload_com.tolist()}
    parameters["segmentation_links"] = segmentation_links
    parameters["segmentation"] = "cameras/<name>/<pose>_seg.png value v > 0 is link segmentation_links[v - 1]; 0 is nothing"
    atomic_write_json(truth / "parameters.json", parameters)
    bends = [d for d in arm.damage if d["kind"] == "bend"]
    if bends:
        atomic_write_json(truth / "damage.json", bends[0] if len(bends) == 1 else bends)
    return writer


EFFORT_PREFIX, VELOCITY_PREFIX, ACCELERATION_PREFIX = "effort_", "velocity_", "acceleration_"


def effort_columns(rig: Rig, joint_names: list[str]) -> list[str]:
    """The ``effort_<joint>`` columns of joints.csv when the simulated arm senses its joint torques."""
    return [EFFORT_PREFIX + name for name in joint_names] if rig.truth is not None and rig.truth.torques else []


def _plan_rates(extra: dict[str, str], joint_names: list[str], prefix: str) -> np.ndarray | None:
    """A plan row's ``velocity_<joint>`` / ``acceleration_<joint>`` cells (dof,), None when it has none."""
    if not any(prefix + name in extra for name in joint_names):
        return None
    return np.array([float(extra.get(prefix + name) or 0.0) for name in joint_names])


def _efforts(sim: Simulator, writer: SessionWriter, pose: str, q_reached: np.ndarray, payload_kg: float,
             extra: dict[str, str], rng: np.random.Generator) -> dict[str, str]:
    """The pose's measured joint torques as joints.csv cells; the noise-free readings go to truth/."""
    names = sim.chain.joint_names
    velocity = _plan_rates(extra, names, VELOCITY_PREFIX)
    acceleration = _plan_rates(extra, names, ACCELERATION_PREFIX)
    clean, measured = sim.joint_torques(q_reached, payload_kg, rng, velocity, acceleration)
    writer.append_truth_rows("torques_clean.csv", ["pose", *names], [[pose, *clean]])
    return {EFFORT_PREFIX + name: writer._fmt(value) for name, value in zip(names, measured)}


def _visible_targets(sim: Simulator, rig: Rig, q: np.ndarray) -> bool:
    world_T_base = sim.world_T_link(sim.base_index)
    tracker_world = (world_T_base @ rig.tracker.base_T_tracker)[:3, 3]
    for position in sim.target_positions(q).values():
        if not sim.line_of_sight(tracker_world, transform_points(world_T_base, position[None])[0]):
            return False
    return True


def _tip_in_view(sim: Simulator, rig: Rig, q: np.ndarray, cameras_needed: int = 2) -> bool:
    sim.set_q(q)
    tip = sim.base_T_link(sim.tip_index)[:3, 3]
    seen = 0
    for camera in rig.cameras:
        point = transform_points(invert(camera.base_T_camera), tip[None])[0]
        if point[2] <= camera.near:
            continue
        u, v = (camera.K @ (point / point[2]))[:2]
        seen += int(0.1 * camera.width < u < 0.9 * camera.width and 0.1 * camera.height < v < 0.9 * camera.height)
    return seen >= cameras_needed


BOARD_MIN_FACING = 0.5  # cosine between the board normal and the line of sight (60 degrees)
BOARD_MIN_SQUARE_PX = 16.0  # a square's projected side; smaller ones rarely decode at 640x480


def _board_in_view(sim: Simulator, rig: Rig, q: np.ndarray, cameras_needed: int = 2) -> bool:
    """The board faces at least ``cameras_needed`` cameras, lies inside their images, large enough, unblocked."""
    sim.set_q(q)
    board = rig.board
    base_T_board = sim.base_T_link(sim.tip_index) @ sim.tip_T_board
    half_x, half_y = board.squares[0] * board.square / 2, board.squares[1] * board.square / 2
    corners_board = np.array([[-half_x, -half_y, 0], [half_x, -half_y, 0], [half_x, half_y, 0], [-half_x, half_y, 0]])
    corners_base = transform_points(base_T_board, corners_board)
    world_T_base = sim.world_T_link(sim.base_index)
    seen = 0
    for camera in rig.cameras:
        camera_T_board = invert(camera.base_T_camera) @ base_T_board
        centre = camera_T_board[:3, 3]
        distance = float(np.linalg.norm(centre))
        if centre[2] <= camera.near or -camera_T_board[:3, 2] @ centre / distance < BOARD_MIN_FACING:
            continue
        if camera.K[0, 0] * board.square / distance < BOARD_MIN_SQUARE_PX:
            continue
        points = transform_points(invert(camera.base_T_camera), corners_base)
        uv = (points @ camera.K.T)[:, :2] / points[:, 2:]
        inside = np.all((uv[:, 0] > 0.05 * camera.width) & (uv[:, 0] < 0.95 * camera.width)
                        & (uv[:, 1] > 0.05 * camera.height) & (uv[:, 1] < 0.95 * camera.height))
        if not inside:
            continue
        eye = transform_points(world_T_base, camera.base_T_camera[None, :3, 3])[0]
        targets = transform_points(world_T_base, np.vstack([corners_base, base_T_board[None, :3, 3]]))
        seen += int(all(sim.line_of_sight(eye, target) for target in targets))
    return seen >= cameras_needed


POSES_HEADER = ["pose", "x", "y", "z", "qx", "qy", "qz", "qw", "sigma_pos", "sigma_rot"]
PROBE_MIN_FACING = 0.17  # cosine between the probe's z axis and the line to the tracker (80 degrees)


def true_tip_T_probe(rig: Rig) -> np.ndarray:
    """The true probe frame (4, 4) on the tip: the nominal mount off by ``target_offset_mm`` per axis
    and the same length over 0.1 m as a tilt (a mount error, fixed by the truth seed)."""
    rng = np.random.default_rng([rig.truth.seed, 0x6D0F])
    scale = rig.truth.target_offset
    error = np.concatenate([rng.normal(0.0, scale, 3), rng.normal(0.0, scale / 0.1, 3)])
    return rig.tracker.tip_T_probe @ exp6(error)


def _probe_visible(sim: Simulator, rig: Rig, q: np.ndarray) -> bool:
    """The probe origin is in the tracker's line of sight and the probe faces the tracker."""
    sim.set_q(q)
    base_T_probe = sim.base_T_link(sim.tip_index) @ rig.tracker.tip_T_probe
    to_tracker = rig.tracker.base_T_tracker[:3, 3] - base_T_probe[:3, 3]
    if base_T_probe[:3, 2] @ to_tracker / np.linalg.norm(to_tracker) < PROBE_MIN_FACING:
        return False
    world_T_base = sim.world_T_link(sim.base_index)
    return sim.line_of_sight(transform_points(world_T_base, rig.tracker.base_T_tracker[None, :3, 3])[0],
                             transform_points(world_T_base, base_T_probe[None, :3, 3])[0])


def _probe_poses(sim: Simulator, rig: Rig, tracker_T_base: np.ndarray, tip_T_probe: np.ndarray, q_sagged: np.ndarray,
                 q_reached: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Noise-free (at the sagged pose, like tracker_clean.csv) and measured ``tracker_T_probe`` (4, 4):
    isotropic position noise in the tracker frame, rotation noise as a small rotation of the probe."""
    sim.set_q(q_sagged)
    clean = tracker_T_base @ sim.base_T_link(sim.tip_index) @ tip_T_probe
    sim.set_q(q_reached)
    measured = tracker_T_base @ sim.base_T_link(sim.tip_index) @ tip_T_probe
    sigma_pos, sigma_rot = rig.tracker.pose_noise
    noise = exp6(np.concatenate([np.zeros(3), rng.normal(0.0, sigma_rot, 3)]))
    measured = measured @ noise
    measured[:3, 3] += rng.normal(0.0, sigma_pos, 3)
    return clean, measured


def _pose_row(transform: np.ndarray) -> list[float]:
    return [*transform[:3, 3].tolist(), *quat_xyzw(transform[:3, :3]).tolist()]


def swept_limits(rig: Rig, joint_names: list[str], lower: np.ndarray, upper: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The range (dof,), (dof,) rad random poses are drawn from: the joints' limits, or for a rig that
    sweeps only some joints, its held joints within their jitter (the draw keeps 90 % of it)."""
    if rig.sweep is None:
        return lower, upper
    lower, upper = np.array(lower, float), np.array(upper, float)
    for i, name in enumerate(joint_names):
        if name in rig.sweep.held:
            lower[i] = rig.sweep.held[name] - rig.sweep.jitter / 0.9
            upper[i] = rig.sweep.held[name] + rig.sweep.jitter / 0.9
    return lower, upper


def pose_is_valid(sim: Simulator, rig: Rig, q: np.ndarray) -> bool:
    """Free of self-collision and floor contact, every reflector seen by the tracker, and the board
    (or, without a board, the tip) seen by 2 cameras. The sight lines are checked first: they are
    cheaper than the true meshes' self-contact, and most random poses fail them."""
    if rig.tracker is not None and not _visible_targets(sim, rig, q):
        return False
    if rig.tracker is not None and rig.tracker.kind == "6dof" and not _probe_visible(sim, rig, q):
        return False
    if rig.cameras and rig.board is not None and not _board_in_view(sim, rig, q):
        return False
    if rig.cameras and rig.board is None and not _tip_in_view(sim, rig, q):
        return False
    return not sim.in_collision(q)


def capture_simulated(rig: Rig, poses: int, seed: int, out: Path, payload_kg: float = 0.0, plan: Plan | None = None,
                      resume: bool = False, progress: Callable[[int, int], None] | None = None,
                      arm_seed: int | None = None) -> Path:
    """Record ``poses`` poses (or the plan's) of the simulated ``rig`` into the session folder ``out``.

    ``arm_seed`` picks arm K of a fleet of the rig's type (:func:`rigs.truth.fleet_arm`) instead of
    the one arm the rig file describes; the session's manifest records it.

    The recording goes to ``<out>.partial``, laid out complete under a temporary name first (so a
    run killed in its first milliseconds leaves nothing to resume, only a leftover the next run
    cleans), locked while recording (so a second run into it stops with a sentence), and renamed to
    ``out`` when every pose is in.
    """
    out = Path(out)
    partial = partial_path(out)
    if os.path.lexists(out):
        raise InputError(f"{out}: already exists; choose another {setting('out')}.")
    if plan is None and poses < 1:
        raise InputError(f"{setting('poses')} must be at least 1, got {poses}.")
    if payload_kg < 0:
        raise InputError(f"{setting('payload_kg')} must not be negative, got {payload_kg} kg.")
    busy = (f"{partial}: another capture is recording into it now; wait for it to finish or choose another "
            f"{setting('out')}.")
    if is_locked(partial):
        raise InputError(busy)
    if partial.exists() and not resume:
        raise InputError(f"{partial}: an interrupted capture is there; run the same command with {setting('resume')} to "
                         f"continue it, or remove {partial} to start over.")
    if resume and not partial.is_dir():
        raise InputError(f"{partial}: nothing to resume (no interrupted capture for {out}); run without "
                         f"{setting('resume')}.")
    clean_leftovers(partial)  # a layout a killed run left half done
    check_new_output(out)

    if arm_seed is not None:
        rig = fleet_arm(rig, arm_seed)
    rig, arm = session_setup(rig, draw_truth(rig), seed)
    total = len(plan.pose_ids) if plan is not None else poses
    if resume:
        with locked_folder(partial, busy):
            writer, done = SessionWriter.reopen(partial)
            _check_same_run(writer.manifest, partial, rig, seed, total, arm_seed)
            payload_kg = float(writer.manifest["source"].get("payload_kg", payload_kg))
            with Simulator(rig, arm, partial / "truth" / "robot.urdf") as sim:
                _record(sim, rig, writer, seed, total, payload_kg, plan, done, progress)
            _finish(partial, out)
        return out

    scratch = Path(tempfile.mkdtemp(prefix="selfcal-truth-"))
    layout = None
    recording = False
    created: list[Path] = []
    try:
        with contextlib.ExitStack() as stack:
            true_urdf = urdf_io.copy_self_contained(true_urdf_tree(rig, arm), rig.robot.urdf.parent, scratch,
                                                    rig.robot.package_dirs)
            sim = stack.enter_context(Simulator(rig, arm, true_urdf))
            joint_names = sim.chain.joint_names
            if plan is not None and len(plan.q[0]) != len(joint_names):
                raise InputError(f"the plan has {len(plan.q[0])} joints, rig {rig.name!r} has {len(joint_names)}.")
            check_new_output(partial)
            created = make_parents(partial.parent)
            layout = Path(tempfile.mkdtemp(dir=partial.parent, prefix=f".{partial.name}{TEMPORARY_TAG}", suffix=".tmp"))
            stack.enter_context(locked_folder(layout, busy))  # the lock moves with the folder's rename
            writer = _lay_out(rig, arm, layout, joint_names, seed, poses if plan is None else total, payload_kg,
                              (list(plan.extra) if plan is not None else []) + effort_columns(rig, joint_names),
                              sim.link_names, arm_seed)
            os.chmod(layout, 0o777 & ~current_umask())
            try:
                rename_no_replace(layout, partial)
            except FileExistsError:
                raise InputError(busy) from None
            layout, recording = None, True
            writer.path = partial
            _record(sim, rig, writer, seed, total, payload_kg, plan, [], progress)
            _finish(partial, out)
    except BaseException:
        if layout is not None:
            shutil.rmtree(layout, ignore_errors=True)
        if recording and partial.exists() and not _has_poses(partial):
            shutil.rmtree(partial, ignore_errors=True)  # nothing worth resuming
        if not partial.exists():
            remove_empty_folders(created)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out


def _check_same_run(manifest: dict, partial: Path, rig: Rig, seed: int, total: int, arm_seed: int | None) -> None:
    source = manifest.get("source") or {}
    if source.get("rig") != rig.name or source.get("seed") != seed:
        raise InputError(f"{partial}: was recorded from rig {source.get('rig')!r} with seed {source.get('seed')}; "
                         f"resume with the same {setting('rig')} and {setting('seed')}.")
    if source.get("arm_seed") != arm_seed:
        recorded = source.get("arm_seed")
        raise InputError(f"{partial}: was recorded from " + ("the rig's own arm" if recorded is None else
                                                             f"arm {recorded} ({setting('arm_seed')} {recorded})")
                         + f"; resume with the same {setting('arm_seed')} (another arm seed is another physical arm).")
    if source.get("poses") != total:
        raise InputError(f"{partial}: was started for {source.get('poses')} poses, this run asks for {total}; resume "
                         f"with the same {setting('poses')} (or {setting('plan')}).")


def _finish(partial: Path, out: Path) -> None:
    try:
        rename_no_replace(partial, out)
    except FileExistsError:
        raise InputError(f"{out}: appeared while this capture ran, so it was left as it is; the complete recording "
                         f"is in {partial}.") from None


def _has_poses(folder: Path) -> bool:
    joints = folder / "joints.csv"
    return joints.is_file() and len(joints.read_text().splitlines()) > 1


def _record(sim: Simulator, rig: Rig, writer: SessionWriter, seed: int, total: int, payload_kg: float,
            plan: Plan | None, done: list[str], progress) -> None:
    tracker_T_base = invert(rig.tracker.base_T_tracker) if rig.tracker is not None else None
    repeatability = rig.truth.repeatability
    if plan is None:
        lower, upper = swept_limits(rig, sim.chain.joint_names, sim.chain.lower, sim.chain.upper)
        stream = random_poses(lower, upper, seed, lambda q: pose_is_valid(sim, rig, q))
        jobs = ((pose_id(i), next(stream), {}) for i in range(total))
    else:
        jobs = ((plan.pose_ids[i], plan.q[i], {k: v[i] for k, v in plan.extra.items()}) for i in range(total))
    completed = set(done)
    six_dof = rig.tracker is not None and rig.tracker.kind == "6dof"
    if six_dof:
        tip_T_probe = true_tip_T_probe(rig)
        if not (writer.path / "tracker_poses.csv").is_file():
            writer._write_header("tracker_poses.csv", POSES_HEADER)
        for name in ("tracker_poses.csv", "truth/tracker_poses_clean.csv"):  # resumed: drop the pose in flight
            if (writer.path / name).is_file():
                writer._rewrite_rows(name, lambda row: row[0] in completed)
    for number, (pose, q_command, extra) in enumerate(jobs):
        if pose in completed:
            continue
        rng = np.random.default_rng([seed, number, 0x0BE5])
        q_sagged = sim.reached_q(q_command, payload_kg)
        # Repeatability: the tool lands within about `repeatability` m; as joint noise at ~1 m reach.
        q_reached = q_sagged + rng.normal(0.0, repeatability / np.sqrt(sim.chain.dof), sim.chain.dof)
        # What no kinematic model holds (gear errors, thermal drift): the tip displaced per pose, in
        # the base frame, its own stream so rigs without it record what they always did.
        unmodelled = np.random.default_rng([seed, number, 0x0D1F]).normal(0.0, rig.truth.unmodelled / np.sqrt(3), 3)
        if six_dof:
            clean, measured = _probe_poses(sim, rig, tracker_T_base,
                                           tip_T_probe, q_sagged, q_reached, rng)
            clean[:3, 3] += tracker_T_base[:3, :3] @ unmodelled
            measured[:3, 3] += tracker_T_base[:3, :3] @ unmodelled
            writer._append("tracker_poses.csv", [[pose, *(writer._fmt(v) for v in _pose_row(measured)),
                                                  writer._fmt(rig.tracker.pose_noise[0]),
                                                  writer._fmt(rig.tracker.pose_noise[1])]])
            writer.append_truth_rows("tracker_poses_clean.csv", POSES_HEADER[:8], [[pose, *_pose_row(clean)]])
        if tracker_T_base is not None and rig.targets:
            clean = {k: tracker_T_base[:3, :3] @ (v + unmodelled) + tracker_T_base[:3, 3]
                     for k, v in sim.target_positions(q_sagged).items()}
            reached = {k: tracker_T_base[:3, :3] @ (v + unmodelled) + tracker_T_base[:3, 3]
                       for k, v in sim.target_positions(q_reached).items()}
            measured = {k: v + sim.tracker_noise(v, rng) for k, v in reached.items()}
            writer.add_tracker_points(pose, measured)
            writer.append_truth_rows("tracker_clean.csv", ["pose", "target", "x", "y", "z"],
                                     [[pose, k, *v] for k, v in clean.items()])
        for camera in rig.cameras:
            rendering = sim.render(camera, q_reached, rng)
            writer.add_images(pose, camera.name, rendering.rgb, rendering.depth, rendering.segmentation, DEPTH_SCALE)
        writer.append_truth_rows("joints_reached.csv", ["pose", *sim.chain.joint_names], [[pose, *q_reached]])
        if rig.truth.torques is not None:
            extra = dict(extra, **_efforts(sim, writer, pose, q_reached, payload_kg, extra, rng))
        writer.add_pose(pose, q_command, payload_kg, extra)
        if progress is not None:
            progress(number + 1, total)
