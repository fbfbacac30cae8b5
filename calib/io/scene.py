"""A calibration as a 3D scene: the nominal and the calibrated arm overlaid, the tracker's points.

The calibrated arm is robot.urdf of the calibration folder posed by the calibration's chain; the
nominal one is the robot.urdf of the first recorded session, when that folder is still there.
Tracker points are drawn in the arm's base frame (each session's ``tracker_T_base`` undone), with
an arrow from the calibration's prediction to the measured point, lengthened by a stated factor so
that sub-millimetre residuals show; points of poses the fit called outliers are red. Given the
calibration it replaced, each calibrated link is coloured by how far its placement on its parent
moved (the scale in ``notes``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from capture.session import load_session
from rigs.errors import InputError
from rigs.kinematics import ArmModel
from rigs.link_meshes import link_meshes
from rigs.scene import CALIBRATED, FLAGGED, NOMINAL, Frame, Joint, Lines, Mesh, Points, Scene, heat
from rigs.transforms import invert, transform_points

# Arrows are drawn this many times longer than the residual, rounded to a power of ten so that
# the largest shows at about this length (m).
ARROW_TARGET_M = 0.08
# A link's rotation on its parent counts as this lever (m) when ranking how far links moved.
LEVER_M = 0.1
MEASURED = (0.1, 0.45, 0.15)
OUTLIER = (0.85, 0.1, 0.1)


def calibration_scene(calibration, folder: Path, previous=None) -> Scene:
    """The scene of ``calibration`` (a :class:`calib.calibration.Calibration` saved in ``folder``);
    ``previous``: the calibration a recalibration replaced, or None."""
    folder = Path(folder)
    urdf = folder / "robot.urdf"
    if not urdf.is_file():
        raise InputError(f"{urdf}: the calibration's robot.urdf is missing.")
    calibrated_chain = calibration.chain
    meshes = link_meshes(urdf)
    notes: list[str] = []
    sessions = [Path(p) for p in calibration.summary.get("sessions") or []]
    # A session named relative to where calibrate ran: here, or beside the calibration folder.
    found = [next((c for c in (p, folder.parent / p) if (c / "session.json").is_file()), None) for p in sessions]
    readable = [p for p in found if p is not None]
    nominal_chain, nominal_meshes = None, {}
    if readable:
        session = load_session(readable[0])
        nominal_chain = ArmModel.from_urdf(session.urdf_path, session.base_link, session.tip_link)
        nominal_meshes = link_meshes(session.urdf_path)
    else:
        notes.append("Nominal arm and tracker points not shown: the recorded sessions "
                     f"({', '.join(map(str, sessions)) or 'none named'}) are not on this machine.")
    items: list = []
    moved = _link_moves(previous.chain, calibrated_chain, list(meshes)) if previous is not None else None
    colours = dict(zip(moved, heat(np.array(list(moved.values()))))) if moved else {}
    for name, mesh in nominal_meshes.items():
        items.append(Mesh(f"nominal/{name}", np.asarray(mesh.vertices), np.asarray(mesh.faces), NOMINAL, 0.35,
                          parent=f"nominal/{name}"))
    for name, mesh in meshes.items():
        # A recalibration colours every link by how far it moved (the tip link carries no next link: unmoved).
        colour = tuple(colours.get(name, NOMINAL)) if moved else CALIBRATED
        items.append(Mesh(f"calibrated/{name}", np.asarray(mesh.vertices), np.asarray(mesh.faces), colour,
                          0.85, parent=f"calibrated/{name}"))
    if moved:
        worst = max(moved, key=moved.get)
        notes.append(f"Links coloured by how far the next link's placement on them moved from the previous calibration "
                     f"(grey 0 to red {moved[worst] * 1e3:.3g} mm, {worst}; a rotation counts as its angle times "
                     f"{LEVER_M * 1e3:.0f} mm).")
    q_start = np.zeros(calibration.chain.dof)
    if readable:
        tracker_items, q_start, tracker_notes = _tracker(calibration, [load_session(p) for p in readable])
        items += tracker_items
        notes += tracker_notes
    for sensor, tracker_T_base in calibration.tracker_T_base.items():
        items.append(Frame(f"frames/tracker_{sensor}", invert(tracker_T_base), 0.15))
    for camera, base_T_camera in calibration.base_T_camera.items():
        items.append(Frame(f"frames/camera_{camera}", base_T_camera, 0.1))
    items.append(Frame("frames/base", np.eye(4), 0.2))
    chain_bodies = {"calibrated": (calibrated_chain, list(meshes)), "nominal": (nominal_chain, list(nominal_meshes))}
    frame_ids = {prefix: {name: chain.model.getFrameId(name) for name in links}
                 for prefix, (chain, links) in chain_bodies.items() if chain is not None}

    def poses(q: np.ndarray) -> dict[str, np.ndarray]:
        out = {}
        for prefix, (chain, _) in chain_bodies.items():
            if chain is None:
                continue
            posed = chain.base_T_frames(q, list(frame_ids[prefix].values()))
            out.update({f"{prefix}/{name}": pose for name, pose in zip(frame_ids[prefix], posed)})
        return out

    joints = [Joint(name, float(lo), float(hi), float(value)) for name, lo, hi, value in
              zip(calibration.joint_names, calibration.chain.lower, calibration.chain.upper, q_start)]
    kind = "recalibration" if previous is not None else "calibration"
    notes.insert(0, ("Coloured: the recalibrated arm" if moved else "Blue: the calibrated arm")
                 + "; grey, see-through: the nominal URDF.")
    return Scene("calibration", f"{kind}: {folder.name}", items, joints, poses, notes=notes)


def _link_moves(before: ArmModel, after: ArmModel, links: list[str]) -> dict[str, float]:
    """Link -> m the placement of the next link (in ``links``, base to tip) on it changed, at q = 0
    (the base: its own placement)."""
    q = np.zeros(after.dof)
    links = [name for name in links if before.model.existFrame(name) and after.model.existFrame(name)]
    olds = before.base_T_frames(q, [before.model.getFrameId(name) for name in links])
    news = after.base_T_frames(q, [after.model.getFrameId(name) for name in links])
    out, parents, carrier = {}, None, None
    for name, old, new in zip(links, olds, news):
        if parents is not None:
            change = invert(invert(parents[0]) @ old) @ (invert(parents[1]) @ new)
        else:
            change = invert(old) @ new
        angle = float(np.arccos(np.clip((np.trace(change[:3, :3]) - 1) / 2, -1.0, 1.0)))
        # A joint placed differently on its parent is that parent bent: the change is the parent's.
        out[carrier if parents is not None else name] = float(np.linalg.norm(change[:3, 3]) + LEVER_M * angle)
        parents, carrier = (old, new), name
    return out


def _tracker(calibration, sessions) -> tuple[list, np.ndarray, list[str]]:
    """Measured points, residual arrows and outliers in the base frame; the first pose's q."""
    outliers = {str(o.get("point", "")).rsplit("/", 1)[0] for o in calibration.summary.get("outliers") or []}
    items, notes = [], []
    measured_all, predicted_all, outlier_all = [], [], []
    for index, session in enumerate(sessions):
        sensor = f"s{index}"
        if session.tracker is None or sensor not in calibration.tracker_T_base:
            continue
        tracker = session.tracker
        q = session.q[tracker.pose_index]
        predicted = np.zeros_like(tracker.xyz)
        for target in sorted(set(tracker.targets)):
            if target not in calibration.targets:
                continue
            rows = np.array([t == target for t in tracker.targets])
            predicted[rows] = calibration.predict(q[rows], target, sensor)
        base_T_tracker = invert(calibration.tracker_T_base[sensor])
        measured_all.append(transform_points(base_T_tracker, tracker.xyz))
        predicted_all.append(transform_points(base_T_tracker, predicted))
        poses = [session.pose_ids[i] for i in tracker.pose_index]
        outlier_all.append(np.array([any(label.endswith(pose) for label in outliers) for pose in poses], bool))
    if not measured_all:
        return items, np.zeros(calibration.chain.dof), notes
    measured, predicted, outlier = (np.concatenate(a) for a in (measured_all, predicted_all, outlier_all))
    residual = measured - predicted
    largest = float(np.linalg.norm(residual, axis=1).max()) if len(residual) else 0.0
    scale = 10.0 ** np.floor(np.log10(ARROW_TARGET_M / largest)) if largest > 0 else 1.0
    colours = np.where(outlier[:, None], np.array(OUTLIER), np.array(MEASURED))
    items.append(Points("tracker/measured", measured, colours, 0.006))
    for name, rows, colour in (("tracker/residuals", ~outlier, MEASURED), ("tracker/outlier_residuals", outlier, FLAGGED)):
        if rows.any():
            segments = np.stack([predicted[rows], predicted[rows] + scale * residual[rows]], axis=1)
            items.append(Lines(name, segments, colour))
    notes.append(f"Residual arrows (prediction to measurement) drawn {scale:g} times their length; the largest is "
                 f"{largest * 1e3:.3g} mm. {int(outlier.sum())} of {len(outlier)} points belong to outlier poses (red).")
    return items, sessions[0].q[0].astype(float), notes
