"""A collision export folder as a 3D scene: convex pieces, cuRobo spheres, SRDF pairs, self-contact.

Read from the folder's own files, as a planner would: robot.urdf's ``<collision>`` meshes (the
convex pieces, in each link's frame), ``curobo_spheres.yml`` (spheres, drawn with cuRobo's
``collision_sphere_buffer`` added to each radius when curobo_robot.yml states one) and robot.srdf's
``disable_collisions`` pairs. At each configuration of the sliders, pairs of spheres on links the
SRDF does not excuse that overlap are self-contact: a red line joins their centres, and the
disabled pairs are thin grey lines between their links' origins.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import trimesh
import yaml

from rigs import urdf as urdf_io
from rigs.errors import InputError
from rigs.files import read_yaml
from rigs.kinematics import ArmModel
from rigs.scene import FLAGGED, Frame, Joint, Lines, Mesh, Scene

PIECE = (0.35, 0.6, 0.9)
SPHERE = (0.95, 0.75, 0.2)
PAIR = (0.55, 0.55, 0.55)


def collision_pieces(urdf: Path) -> dict[str, list[trimesh.Trimesh]]:
    """Link -> its ``<collision>`` meshes (and boxes) in the link frame (m), read from beside ``urdf`` only."""
    tree = urdf_io.parse_urdf(urdf)
    out: dict[str, list[trimesh.Trimesh]] = {}
    for link in tree.getroot().findall("link"):
        for collision in link.findall("collision"):
            box, shape = collision.find("geometry/box"), collision.find("geometry/mesh")
            if box is not None:  # a kept calibration board's plate
                try:
                    size = [float(x) for x in box.get("size", "").split()]
                except ValueError:
                    size = []
                if len(size) != 3:
                    raise InputError(f"{urdf}: link {link.get('name')!r}: a box's size must be three numbers in m, got "
                                     f"{box.get('size')!r}.")
                mesh = trimesh.creation.box(extents=size)
                out.setdefault(link.get("name"), []).append(mesh.apply_transform(urdf_io.element_origin(collision)))
                continue
            if shape is None:
                continue
            path = urdf_io.resolve_mesh(shape.get("filename", ""), urdf.parent)
            try:
                mesh = trimesh.load(str(path), force="mesh")
            except Exception as error:  # trimesh raises many kinds on a bad file
                raise InputError(f"{path}: cannot read this mesh ({error}).") from None
            out.setdefault(link.get("name"), []).append(mesh.copy().apply_transform(urdf_io.element_origin(collision)))
    return out


def disabled_pairs(srdf: Path) -> list[tuple[str, str]]:
    """The (link1, link2) pairs robot.srdf excuses from collision checking."""
    if not srdf.is_file():
        return []
    root = urdf_io.parse_xml(srdf).getroot()
    return [(e.get("link1"), e.get("link2")) for e in root.findall("disable_collisions")]


def export_scene(folder: Path) -> Scene:
    """The scene of the collision export written into ``folder`` by ``selfcal selfmodel export``."""
    folder = Path(folder)
    urdf, spheres_file, robot_file = folder / "robot.urdf", folder / "curobo_spheres.yml", folder / "curobo_robot.yml"
    for path in (urdf, spheres_file, robot_file):
        if not path.is_file():
            raise InputError(f"{path}: missing, so {folder} is not a whole collision export.")
    kinematics = ((read_yaml(robot_file, "cuRobo robot configuration") or {}).get("robot_cfg") or {}).get("kinematics") or {}
    base, tip = kinematics.get("base_link"), kinematics.get("ee_link")
    if not base or not tip:
        raise InputError(f"{robot_file}: robot_cfg.kinematics needs base_link and ee_link.")
    buffer = float(kinematics.get("collision_sphere_buffer") or 0.0)
    chain = ArmModel.from_urdf(urdf, base, tip)
    try:
        spheres = (yaml.safe_load(spheres_file.read_text()) or {}).get("collision_spheres") or {}
    except yaml.YAMLError as error:
        raise InputError(f"{spheres_file}: not YAML ({error}).") from None
    pieces = collision_pieces(urdf)
    pairs = [pair for pair in disabled_pairs(folder / "robot.srdf") if None not in pair]
    items: list = []
    for link, meshes in pieces.items():
        for number, mesh in enumerate(meshes):
            items.append(Mesh(f"pieces/{link}_{number}", np.asarray(mesh.vertices), np.asarray(mesh.faces), PIECE, 1.0,
                              parent=f"links/{link}"))
    unit = trimesh.creation.icosphere(subdivisions=2)
    centres, radii, owners = [], [], []
    for link, entries in spheres.items():
        for number, entry in enumerate(entries or []):
            centre, radius = np.asarray(entry["center"], float), float(entry["radius"]) + buffer
            items.append(Mesh(f"spheres/{link}_{number}", unit.vertices * radius + centre, np.asarray(unit.faces),
                              SPHERE, 0.3, parent=f"links/{link}"))
            centres.append(centre), radii.append(radius), owners.append(link)
    items.append(Frame("frames/base", np.eye(4), 0.1))
    links = sorted(set(pieces) | set(owners) | {name for pair in pairs for name in pair})
    frames = {link: chain.model.getFrameId(link) for link in links if chain.model.existFrame(link)}
    centres, radii = np.array(centres).reshape(-1, 3), np.array(radii)
    excused = {frozenset(pair) for pair in pairs}
    checked = np.array([[a != b and frozenset((a, b)) not in excused for b in owners] for a in owners], bool).reshape(
        len(owners), len(owners))
    order = {link: i for i, link in enumerate(links)}

    def poses(q: np.ndarray) -> dict[str, np.ndarray]:
        return {f"links/{link}": pose for link, pose in zip(frames, chain.base_T_frames(q, list(frames.values())))}

    def live(q: np.ndarray) -> list:
        posed = poses(q)
        world = np.array([posed[f"links/{owner}"][:3, :3] @ c + posed[f"links/{owner}"][:3, 3]
                          for owner, c in zip(owners, centres)]).reshape(-1, 3)
        gap = np.linalg.norm(world[:, None] - world[None], axis=2) - (radii[:, None] + radii[None])
        touching = np.argwhere(np.triu(checked & (gap < 0.0), 1))
        out = []
        if len(touching):
            out.append(Lines("self_contact", np.stack([world[touching[:, 0]], world[touching[:, 1]]], axis=1), FLAGGED))
        segments = [np.stack([posed[f"links/{a}"][:3, 3], posed[f"links/{b}"][:3, 3]]) for a, b in pairs
                    if f"links/{a}" in posed and f"links/{b}" in posed and order.get(a) is not None]
        if segments:
            out.append(Lines("disabled_pairs", np.array(segments), PAIR))
        return out

    joints = [Joint(name, float(lo), float(hi), 0.0 if lo <= 0.0 <= hi else float((lo + hi) / 2))
              for name, lo, hi in zip(chain.joint_names, chain.lower, chain.upper)]
    notes = [f"Blue: {sum(len(m) for m in pieces.values())} convex pieces; yellow, see-through: "
             f"{len(owners)} cuRobo spheres (radius plus the buffer of {buffer * 1e3:.3g} mm). Grey lines: the "
             f"{len(pairs)} link pairs robot.srdf disables ({', '.join(f'{a}-{b}' for a, b in pairs[:8])}"
             f"{', ...' if len(pairs) > 8 else ''}). Red lines: spheres of links checked against each other that "
             "overlap at the sliders' configuration (self-contact)."]
    return Scene("collision export", f"collision export: {folder.name}", items, joints, poses, live, notes)
