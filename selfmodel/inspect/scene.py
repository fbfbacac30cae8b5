"""A self-model as a 3D scene: the learned body beside the description, cameras and depth clouds.

A structured model's links are meshed once, in their own frames, from the baked logit grids
(``baked.npz``, the 0.5-occupancy level is logit 0) and posed at the slider's joint angles by the
model's learned kinematics, so dragging a slider moves transforms only. The description's meshes
stand beside it, shifted along y by the workspace's width, posed by the URDF's own kinematics.
Given a :class:`~selfmodel.inspect.check.DamageCheck`, each learned link is coloured by its largest
figure and the links beyond the threshold are red, with the distance in ``notes``. Cameras of the
training sessions show as frames with a frustum, and one depth image per camera (the first pose's)
as a point cloud in the base frame.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import trimesh

from capture.session import load_session
from rigs import urdf as urdf_io
from rigs.link_meshes import link_meshes
from rigs.scene import FLAGGED, LEARNED, NOMINAL, Frame, Joint, Lines, Mesh, Points, Scene
from rigs.transforms import transform_points
from selfmodel.inspect.meshing import decimated
from selfmodel.model.baked import load_baked
from selfmodel.model.chain import link_poses_numpy
from selfmodel.model.folder import training_session_paths

# Faces per link drawn: a 4 mm grid gives 10-25 thousand per xArm6 link, which a browser without a
# GPU draws at a frame a second; the shape reads the same at this many.
LINK_FACES = 6000
CLOUD_POINTS = 4000  # per camera: enough to read the shape, small enough for a report
FRUSTUM_DEPTH_M = 0.12
CAMERA_COLOURS = [(0.2, 0.45, 0.9), (0.15, 0.65, 0.35), (0.6, 0.3, 0.8), (0.85, 0.55, 0.1)]


def baked_link_meshes(model, folder: Path, max_faces: int = LINK_FACES) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Link -> (vertices (n, 3) m in the link frame, faces (m, 3)) of the 0.5 level of the baked grids,
    decimated to at most ``max_faces`` faces."""
    from skimage.measure import marching_cubes  # scikit-image adds 0.3 s to a start; only meshing needs it

    baked = load_baked(model, Path(folder))
    out = {}
    for link, origin, grid in zip(baked.link_names, baked.origins, baked.grids):
        values = np.pad(grid.astype(np.float32), 1, constant_values=-30.0)  # closes the surface at the grid's walls
        if not (values.min() < 0.0 < values.max()):
            continue
        vertices, faces, _, _ = marching_cubes(values, level=0.0, spacing=(baked.pitch,) * 3)
        mesh = decimated(trimesh.Trimesh(vertices + origin - baked.pitch, faces[:, ::-1], process=True), max_faces)
        out[link] = (np.asarray(mesh.vertices), np.asarray(mesh.faces))
    return out


def check_colours(check, threshold_mm: float) -> tuple[dict[str, tuple], list[str]]:
    """What a :class:`~selfmodel.inspect.check.DamageCheck` judged against ``threshold_mm`` (mm)
    paints: learned-link item name -> colour (red beyond the threshold, else grey to orange by the
    largest figure), and the sentence that says so."""
    rows = list(check.rows)
    figures = np.array([row.deviation_mm for row in rows])
    # From the learned body's orange (nothing found) towards red (the threshold): still the learned body.
    share = np.clip(figures / threshold_mm, 0.0, 1.0)[:, None]
    shades = np.array(LEARNED) + share * (np.array(FLAGGED) - np.array(LEARNED))
    colours = {f"learned/{row.link}": tuple(float(c) for c in shade) for row, shade in zip(rows, shades)}
    flagged = [row.link for row in rows if row.deviation_mm > threshold_mm]
    note = ("Learned links coloured by the check's largest figure against the description (orange small, red at the "
            f"threshold of {threshold_mm:.3g} mm and beyond): "
            + "; ".join(f"{row.link} {row.deviation_mm:.2f} mm ({row.kind})" for row in rows[:6]) + "."
            + (f" Flagged: {', '.join(flagged)}." if flagged else " No link flagged."))
    return colours, [note]


def selfmodel_scene(model, folder: Path, check=None, threshold_mm: float | None = None,
                    description: Path | None = None) -> Scene:
    """The scene of a structured ``model`` (:class:`selfmodel.model.models.SelfModel`) saved in
    ``folder``; ``check``: its DamageCheck against the description and the threshold (mm) it was
    judged by, or None (the live viewer runs the check after its first frame: ``Scene.later``);
    ``description``: the URDF drawn beside the learned body (default: the model's own)."""
    folder = Path(folder)
    notes = ["Orange: the learned body; grey, beside it: the description's meshes at the same joint angles."]
    items: list = []
    learned = baked_link_meshes(model, folder)
    colours: dict = {}
    if check is not None and threshold_mm is not None:
        colours, more = check_colours(check, threshold_mm)
        notes += more
    for link, (vertices, faces) in learned.items():
        items.append(Mesh(f"learned/{link}", vertices, faces, tuple(colours.get(f"learned/{link}", LEARNED)), 1.0,
                          parent=f"learned/{link}"))
    lo, hi = model.bounds
    beside = np.eye(4)
    beside[1, 3] = 1.2 * float(hi[1] - lo[1])
    urdf = Path(description) if description is not None else model.urdf_path
    described = {}
    if urdf is not None and Path(urdf).is_file():
        described = link_meshes(Path(urdf), links=list(model.link_names))
    for link, mesh in described.items():
        mesh = decimated(mesh, LINK_FACES)
        items.append(Mesh(f"description/{link}", np.asarray(mesh.vertices), np.asarray(mesh.faces), NOMINAL, 1.0,
                          parent=f"description/{link}"))
    sessions = [p for p in training_session_paths(folder) if (p / "session.json").is_file()]
    q_start = np.zeros(model.dof)
    if sessions:
        session = load_session(sessions[0])
        q_start = session.q[0].astype(float)
        items += _cameras(session)
        notes.append(f"Cameras of {session.path.name} with one depth image each (pose {session.pose_ids[0]}), "
                     "in the base frame.")
    else:
        notes.append("Cameras not shown: the training sessions named in config.json are not on this machine.")
    items.append(Frame("frames/base", np.eye(4), 0.1))
    deltas = model.chain.deltas.detach().double().cpu().numpy()
    index = {link: i for i, link in enumerate(model.link_names)}

    def poses(q: np.ndarray) -> dict[str, np.ndarray]:
        learned_poses = link_poses_numpy(model.spec, q[None], deltas)[0]
        nominal = link_poses_numpy(model.spec, q[None])[0]
        out = {f"learned/{link}": learned_poses[index[link]] for link in learned}
        out.update({f"description/{link}": beside @ nominal[index[link]] for link in described})
        return out

    joints = []
    for position, name in enumerate(model.joint_names):
        lower, upper = _joint_range(model, position)
        joints.append(Joint(name, lower, upper, float(np.clip(q_start[position], lower, upper))))
    return Scene("self-model", f"self-model: {folder.name}", items, joints, poses, notes=notes)


def _joint_range(model, position: int) -> tuple[float, float]:
    """The slider's range (rad): the description's limits where it states them, else a full turn."""
    name = model.joint_names[position]
    if model.urdf_path is not None and Path(model.urdf_path).is_file():
        info = urdf_io.joints(urdf_io.parse_urdf(Path(model.urdf_path)), model.urdf_path).get(name)
        if info is not None and np.isfinite([info.lower, info.upper]).all() and info.upper > info.lower:
            return float(info.lower), float(info.upper)
    return -np.pi, np.pi


def _cameras(session) -> list:
    """A frame, a frustum and one depth cloud per camera that has a pose."""
    items = []
    rng = np.random.default_rng(0)
    pose = session.pose_ids[0]
    for number, (name, camera) in enumerate(sorted(session.cameras.items())):
        if camera.base_T_camera is None:
            continue
        colour = CAMERA_COLOURS[number % len(CAMERA_COLOURS)]
        items.append(Frame(f"cameras/{name}", camera.base_T_camera, 0.06))
        info = camera.info
        corners_px = np.array([[0, 0], [info.width, 0], [info.width, info.height], [0, info.height]], float)
        rays = np.c_[(corners_px - info.K[:2, 2]) / np.diag(info.K)[:2], np.ones(4)] * FRUSTUM_DEPTH_M
        rays = transform_points(camera.base_T_camera, rays)
        apex = camera.base_T_camera[:3, 3]
        segments = [np.stack([apex, corner]) for corner in rays] + [np.stack([rays[i], rays[(i + 1) % 4]]) for i in range(4)]
        items.append(Lines(f"cameras/{name}_frustum", np.array(segments), colour))
        if session.has_image(name, pose, "depth"):
            depth = session.image(name, pose, "depth")
            rows, cols = np.nonzero(depth > 0)
            if len(rows) > CLOUD_POINTS:
                keep = rng.choice(len(rows), CLOUD_POINTS, replace=False)
                rows, cols = rows[keep], cols[keep]
            z = depth[rows, cols].astype(float)
            points = np.c_[(cols - info.K[0, 2]) / info.K[0, 0] * z, (rows - info.K[1, 2]) / info.K[1, 1] * z, z]
            items.append(Points(f"cameras/{name}_depth", transform_points(camera.base_T_camera, points), colour, 0.003))
    return items
