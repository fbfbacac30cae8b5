"""A fleet as a 3D scene: every calibrated arm in a row, the flagged ones first, links coloured by
how far their joint geometry lies from the fleet median. Read from fleet.json and the arms' folders
(through calib's loader), here rather than in selfcal/fleet/, which depends on files only.

Each figure of ``fleet.json``'s comparison belongs to a joint (the angle, distance, offset and turn
of its axis to the previous one); its robust z-score is charged to the link that carries that
joint (the joint's parent), so a bent link shows red. Arms stand ``SPACING_M`` apart along y, all
posed at the sliders' joint angles by their own calibrated kinematics.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from calib.calibration import Calibration
from rigs import urdf as urdf_io
from rigs.errors import InputError
from rigs.files import read_json
from rigs.link_meshes import link_meshes
from rigs.scene import Frame, Joint, Mesh, Scene, heat

SPACING_M = 1.0
RECORD = "fleet.json"


def arm_link_z(document: dict, arm: str) -> dict[str, float]:
    """Joint -> the largest |z| of ``arm``'s figures on that joint in the fleet's comparison."""
    out: dict[str, float] = {}
    for figure in ((document.get("comparison") or {}).get("geometry") or {}).values():
        z = (figure.get("z") or {}).get(arm)
        joint = figure.get("joint")
        if z is not None and joint:
            out[joint] = max(out.get(joint, 0.0), abs(float(z)))
    return out


def fleet_scene(folder: Path) -> Scene:
    """The scene of the fleet run written into ``folder`` by ``selfcal fleet calibrate``."""
    folder = Path(folder)
    document = read_json(folder / RECORD, "fleet record")
    arms = {name: record for name, record in (document.get("arms") or {}).items()
            if isinstance(record, dict) and record.get("status") == "ok" and (folder / name / "calibration.yaml").is_file()}
    if not arms:
        raise InputError(f"{folder / RECORD}: names no calibrated arm with a folder here (a fleet of self-models "
                         "is shown one model at a time: selfcal view FOLDER/ARM).")
    threshold = float((document.get("comparison") or {}).get("threshold") or 8.0)
    order = sorted(arms, key=lambda arm: (not arms[arm].get("flagged"), -max(arm_link_z(document, arm).values(), default=0.0), arm))
    items, chains, notes = [], {}, []
    for row, arm in enumerate(order):
        calibration = Calibration.load(folder / arm)
        urdf = folder / arm / "robot.urdf"
        meshes = link_meshes(urdf)
        tree = urdf_io.parse_urdf(urdf)
        parent_of = {joint.name: joint.parent for joint in urdf_io.joints(tree, urdf).values()}
        link_z: dict[str, float] = {}
        for joint, z in arm_link_z(document, arm).items():
            link = parent_of.get(joint)
            if link is not None:
                link_z[link] = max(link_z.get(link, 0.0), z)
        for link, mesh in meshes.items():
            z = link_z.get(link, 0.0)
            colour = tuple(heat(np.array([z]), threshold)[0])
            items.append(Mesh(f"{arm}/{link}", np.asarray(mesh.vertices), np.asarray(mesh.faces), colour, 1.0,
                              parent=f"{arm}/{link}"))
        offset = np.eye(4)
        offset[1, 3] = row * SPACING_M
        items.append(Frame(f"{arm}/base", offset, 0.15))
        chains[arm] = (calibration.chain, offset, {link: calibration.chain.model.getFrameId(link) for link in meshes})
        worst = max(link_z, key=link_z.get) if link_z else None
        flags = "; ".join(arms[arm].get("flags") or [])
        notes.append(f"{row + 1}. {arm} (y = {row * SPACING_M:g} m): " + (flags if flags else
                     f"largest robust z {link_z[worst]:.1f} on {worst}" if worst else "no figure compared"))
    first = next(iter(chains.values()))[0]

    def poses(q: np.ndarray) -> dict[str, np.ndarray]:
        out = {}
        for arm, (chain, offset, frames) in chains.items():
            for link, pose in zip(frames, chain.base_T_frames(q, list(frames.values()))):
                out[f"{arm}/{link}"] = offset @ pose
        return out

    joints = [Joint(name, float(lo), float(hi), 0.0 if lo <= 0.0 <= hi else float((lo + hi) / 2))
              for name, lo, hi in zip(first.joint_names, first.lower, first.upper)]
    notes.insert(0, f"Arms in a row along y, flagged first; each link coloured by the largest robust z-score of the "
                    f"joint geometry it carries against the fleet median (grey 0, red at the threshold {threshold:g} "
                    f"and beyond).")
    return Scene("fleet", f"fleet: {folder.name} ({len(order)} arms)", items, joints, poses, notes=notes)
