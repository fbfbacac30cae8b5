"""Recording a session from a simulated rig.

The simulator plays the rig's hidden true arm; this module decides where the arm goes (random
valid poses or a plan), measures each pose and appends it to the session. The recording is built
in ``<out>.partial`` and renamed to ``<out>`` when complete; ``resume`` continues an interrupted
one with the same seed, so the result has exactly the poses an uninterrupted run would have.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import numpy as np

from rigs.version import VERSION
from capture.camera_info import CameraInfo
from capture.poses import Plan, random_poses
from capture.session import FORMAT, FORMAT_VERSION, SessionWriter, pose_id
from rigs import urdf as urdf_io
from rigs.errors import InputError
from rigs.files import atomic_write_json
from rigs.simulator import Simulator
from rigs.spec import Rig
from rigs.transforms import invert, transform_points
from rigs.truth import TrueArm, draw_truth, true_urdf_tree

DEPTH_SCALE = 0.0001  # m per unit in depth PNGs: 0.1 mm steps up to 6.5 m


def partial_path(out: Path) -> Path:
    return Path(out).with_name(Path(out).name + ".partial")


def _manifest(rig: Rig, joint_names: list[str], seed: int, poses: int, payload_kg: float) -> dict:
    sensors = {"tracker": None, "cameras": {}, "board": None}
    if rig.tracker is not None:
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
            "depth_noise": camera.depth_noise,
        }
    if rig.board is not None:
        board = rig.board
        sensors["board"] = {"kind": "charuco", "squares": list(board.squares), "square_m": board.square,
                            "marker_m": board.marker, "dictionary": board.dictionary,
                            "tip_T_board_nominal": board.tip_T_board.tolist()}
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "units": {"length": "m", "angle": "rad", "mass": "kg", "depth_png": f"{DEPTH_SCALE} m per unit"},
        "robot": {"urdf": "robot.urdf", "base_link": rig.robot.base_link, "tip_link": rig.robot.tip_link,
                  "joint_names": joint_names, "payload_com": rig.robot.payload_com.tolist()},
        "sensors": sensors,
        "source": {"kind": "simulated", "rig": rig.name, "seed": seed, "poses": poses, "payload_kg": payload_kg,
                   "selfcal_version": VERSION},
    }


def _lay_out(rig: Rig, arm: TrueArm, folder: Path, joint_names: list[str], seed: int, poses: int, payload_kg: float,
             extra_columns: list[str], segmentation_links: list[str]) -> SessionWriter:
    """A new session folder: description, manifest, camera infos and the truth."""
    urdf_io.copy_self_contained(urdf_io.parse_urdf(rig.robot.urdf), rig.robot.urdf.parent, folder,
                                rig.robot.package_dirs)
    manifest = _manifest(rig, joint_names, seed, poses, payload_kg)
    writer = SessionWriter.create(folder, manifest, extra_columns, with_payload=True)
    for camera in rig.cameras:
        CameraInfo(camera.name, camera.width, camera.height, camera.K, np.zeros(5)).save(
            folder / "cameras" / camera.name / "camera_info.yaml")
    truth = folder / "truth"
    urdf_io.copy_self_contained(true_urdf_tree(rig, arm), rig.robot.urdf.parent, truth, rig.robot.package_dirs)
    parameters = arm.to_json()
    if rig.tracker is not None:
        parameters["tracker_T_base"] = invert(rig.tracker.base_T_tracker).tolist()
    parameters["segmentation_links"] = segmentation_links
    parameters["segmentation"] = "cameras/<name>/<pose>_seg.png value v > 0 is link segmentation_links[v - 1]; 0 is nothing"
    atomic_write_json(truth / "parameters.json", parameters)
    bends = [d for d in arm.damage if d["kind"] == "bend"]
    if bends:
        atomic_write_json(truth / "damage.json", bends[0] if len(bends) == 1 else bends)
    return writer


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


def pose_is_valid(sim: Simulator, rig: Rig, q: np.ndarray) -> bool:
    """Free of self-collision and floor contact, every reflector seen by the tracker, tip seen by 2 cameras."""
    if sim.in_collision(q):
        return False
    if rig.tracker is not None and not _visible_targets(sim, rig, q):
        return False
    if rig.cameras and not _tip_in_view(sim, rig, q):
        return False
    return True


def capture_simulated(rig: Rig, poses: int, seed: int, out: Path, payload_kg: float = 0.0, plan: Plan | None = None,
                      resume: bool = False, progress: Callable[[int, int], None] | None = None) -> Path:
    """Record ``poses`` poses (or the plan's) of the simulated ``rig`` into the session folder ``out``."""
    out = Path(out)
    partial = partial_path(out)
    if out.exists():
        raise InputError(f"{out}: already exists; choose another --out.")
    if partial.exists() and not resume:
        raise InputError(f"{partial}: an interrupted capture is there; pass --resume to continue it, or remove it.")
    if resume and not partial.is_dir():
        raise InputError(f"{partial}: nothing to resume (no interrupted capture for {out}).")
    if plan is None and poses < 1:
        raise InputError(f"--poses must be at least 1, got {poses}.")
    if payload_kg < 0:
        raise InputError(f"--payload must not be negative, got {payload_kg} kg.")

    arm = draw_truth(rig)
    if resume:
        writer, done = SessionWriter.reopen(partial)
        source = writer.manifest["source"]
        if source.get("rig") != rig.name or source.get("seed") != seed:
            raise InputError(f"{partial}: was recorded from rig {source.get('rig')!r} with seed {source.get('seed')}; "
                             f"resume with the same --rig and --seed.")
        payload_kg = float(source.get("payload_kg", payload_kg))
        true_urdf = partial / "truth" / "robot.urdf"
    else:
        true_urdf = None
        done = []
    total = len(plan.pose_ids) if plan is not None else poses

    scratch = None
    if true_urdf is None:
        import tempfile

        scratch = Path(tempfile.mkdtemp(prefix="selfcal-truth-"))
        true_urdf = urdf_io.copy_self_contained(true_urdf_tree(rig, arm), rig.robot.urdf.parent, scratch,
                                                rig.robot.package_dirs)
    try:
        with Simulator(rig, arm, true_urdf) as sim:
            joint_names = sim.chain.joint_names
            if plan is not None and len(plan.q[0]) != len(joint_names):
                raise InputError(f"the plan has {len(plan.q[0])} joints, rig {rig.name!r} has {len(joint_names)}.")
            if not resume:
                writer = _lay_out(rig, arm, partial, joint_names, seed, poses if plan is None else total, payload_kg,
                                  list(plan.extra) if plan is not None else [], sim.link_names)
            _record(sim, rig, writer, seed, total, payload_kg, plan, done, progress)
    except BaseException:
        if not resume and partial.exists() and not _has_poses(partial):
            shutil.rmtree(partial, ignore_errors=True)  # nothing worth resuming
        raise
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    partial.rename(out)
    return out


def _has_poses(folder: Path) -> bool:
    joints = folder / "joints.csv"
    return joints.is_file() and len(joints.read_text().splitlines()) > 1


def _record(sim: Simulator, rig: Rig, writer: SessionWriter, seed: int, total: int, payload_kg: float,
            plan: Plan | None, done: list[str], progress) -> None:
    tracker_T_base = invert(rig.tracker.base_T_tracker) if rig.tracker is not None else None
    repeatability = rig.truth.repeatability
    if plan is None:
        stream = random_poses(sim.chain.lower, sim.chain.upper, seed, lambda q: pose_is_valid(sim, rig, q))
        jobs = ((pose_id(i), next(stream), {}) for i in range(total))
    else:
        jobs = ((plan.pose_ids[i], plan.q[i], {k: v[i] for k, v in plan.extra.items()}) for i in range(total))
    completed = set(done)
    for number, (pose, q_command, extra) in enumerate(jobs):
        if pose in completed:
            continue
        rng = np.random.default_rng([seed, number, 0x0BE5])
        q_sagged = sim.reached_q(q_command, payload_kg)
        # Repeatability: the tool lands within about `repeatability` m; as joint noise at ~1 m reach.
        q_reached = q_sagged + rng.normal(0.0, repeatability / np.sqrt(sim.chain.dof), sim.chain.dof)
        if tracker_T_base is not None:
            clean = {k: tracker_T_base[:3, :3] @ v + tracker_T_base[:3, 3] for k, v in sim.target_positions(q_sagged).items()}
            reached = {k: tracker_T_base[:3, :3] @ v + tracker_T_base[:3, 3] for k, v in sim.target_positions(q_reached).items()}
            measured = {k: v + sim.tracker_noise(v, rng) for k, v in reached.items()}
            writer.add_tracker_points(pose, measured)
            writer.append_truth_rows("tracker_clean.csv", ["pose", "target", "x", "y", "z"],
                                     [[pose, k, *v] for k, v in clean.items()])
        for camera in rig.cameras:
            rendering = sim.render(camera, q_reached, rng)
            writer.add_images(pose, camera.name, rendering.rgb, rendering.depth, rendering.segmentation, DEPTH_SCALE)
        writer.append_truth_rows("joints_reached.csv", ["pose", *sim.chain.joint_names], [[pose, *q_reached]])
        writer.add_pose(pose, q_command, payload_kg, extra)
        if progress is not None:
            progress(number + 1, total)
