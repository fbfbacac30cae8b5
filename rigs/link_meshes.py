"""A URDF's visual geometry as one trimesh per link, in the link frame (metres).

Used where a description's shape is needed: the true posed meshes of a simulated session
(evaluation), the description a learned body is checked against, and a prior on where each link's
network may put matter. Never by a fit as labels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import trimesh

from rigs import urdf as urdf_io
from rigs.errors import InputError


def _floats(text: str | None, default: list[float]) -> np.ndarray:
    return np.array([float(v) for v in text.split()]) if text else np.array(default, dtype=float)


def link_meshes(urdf_path: Path, links: list[str] | None = None, package_dirs: list[Path] = (),
                fold_fixed: bool = True) -> dict[str, trimesh.Trimesh]:
    """Link name -> visual geometry (trimesh, link frame). Links without geometry are left out.

    With ``fold_fixed``, links hanging from a listed link by fixed joints are folded into it, so a
    flange or tool plate counts as part of the link that carries it.
    """
    urdf_path = Path(urdf_path)
    tree = urdf_io.parse_urdf(urdf_path)
    parts: dict[str, list[trimesh.Trimesh]] = {}
    for element in tree.getroot().findall("link"):
        name = element.get("name")
        for visual in element.findall("visual"):
            geometry = visual.find("geometry")
            if geometry is None or len(geometry) == 0:
                continue
            shape = geometry[0]
            if shape.tag == "mesh":
                try:  # only meshes beside the URDF (or in package_dirs) are ever read
                    path = urdf_io.resolve_mesh(shape.get("filename", ""), urdf_path.parent, list(package_dirs))
                except InputError as error:
                    raise InputError(f"{urdf_path}: {error.marked}") from None
                try:
                    mesh = trimesh.load(str(path), force="mesh")
                except Exception as error:  # trimesh raises many kinds on a bad file
                    raise InputError(f"{path}: cannot read this mesh ({error}).") from None
                mesh = mesh.copy()
                mesh.apply_scale(1.0) if shape.get("scale") is None else mesh.apply_transform(
                    np.diag([*_floats(shape.get("scale"), [1, 1, 1]), 1.0]))
            elif shape.tag in ("box", "cylinder", "sphere"):
                try:
                    if shape.tag == "box":
                        mesh = trimesh.creation.box(_floats(shape.get("size"), [0, 0, 0]).reshape(3))
                    elif shape.tag == "cylinder":
                        mesh = trimesh.creation.cylinder(float(shape.get("radius")), float(shape.get("length")), sections=48)
                    else:
                        mesh = trimesh.creation.icosphere(subdivisions=3, radius=float(shape.get("radius")))
                except (TypeError, ValueError):
                    raise InputError(f"{urdf_path}: link {name}: a <{shape.tag}> lacks its size or has one that is not "
                                     f"a number.") from None
            else:
                continue
            mesh.apply_transform(urdf_io.element_origin(visual))
            parts.setdefault(name, []).append(mesh)
    meshes = {name: trimesh.util.concatenate(items) for name, items in parts.items()}
    if links is None or not fold_fixed:
        return {name: mesh for name, mesh in meshes.items() if links is None or name in links}
    joints = urdf_io.joints(tree, urdf_path)
    by_child = {joint.child: joint for joint in joints.values()}
    folded: dict[str, list[trimesh.Trimesh]] = {}
    for name, mesh in meshes.items():
        carrier, transform = name, np.eye(4)
        while carrier not in links and carrier in by_child and by_child[carrier].type == "fixed":
            joint = by_child[carrier]
            transform = joint.origin @ transform
            carrier = joint.parent
        if carrier in links:
            folded.setdefault(carrier, []).append(mesh.copy().apply_transform(transform))
    return {name: trimesh.util.concatenate(items) for name, items in folded.items()}


def posed_union(meshes: dict[str, trimesh.Trimesh], link_names: list[str], base_T_links: np.ndarray) -> trimesh.Trimesh:
    """One mesh of the arm in the base frame: ``base_T_links`` (L, 4, 4) in ``link_names`` order."""
    posed = [meshes[name].copy().apply_transform(base_T_links[i]) for i, name in enumerate(link_names) if name in meshes]
    return trimesh.util.concatenate(posed)
