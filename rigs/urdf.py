"""Reading, editing and writing URDF files without losing what we do not touch.

URDFs may come from untrusted places (a colleague's session folder), so the XML is parsed with
entity declarations refused, and mesh paths must resolve inside the file's own folder unless the
caller names package folders it trusts.
"""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rigs.errors import InputError
from rigs.files import atomic_write_text
from rigs.transforms import make_transform, matrix_to_rpy


def parse_xml(path: Path) -> ET.ElementTree:
    """Parse an XML file, refusing entity declarations (no billion laughs, no external entities)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found.")
    data = path.read_bytes()
    if b"<!ENTITY" in data:
        raise InputError(f"{path}: declares XML entities, which selfcal refuses to expand.")
    try:
        return ET.ElementTree(ET.fromstring(data))
    except ET.ParseError as error:
        raise InputError(f"{path}: not a readable XML file ({error}).") from None


def parse_urdf(path: Path) -> ET.ElementTree:
    tree = parse_xml(path)
    if tree.getroot().tag != "robot":
        raise InputError(f"{path}: not a URDF (the root element is <{tree.getroot().tag}>, expected <robot>).")
    return tree


@dataclass(frozen=True)
class JointInfo:
    """One URDF joint: name, type, parent and child link, origin (4x4, parent link frame), axis (3,)."""

    name: str
    type: str
    parent: str
    child: str
    origin: np.ndarray
    axis: np.ndarray
    lower: float
    upper: float


def _floats(text: str | None, count: int, default: float, where: str) -> np.ndarray:
    if text is None:
        return np.full(count, default)
    try:
        values = np.array([float(v) for v in text.split()])
    except ValueError:
        raise InputError(f"{where}: expected {count} numbers, got {text!r}.") from None
    if values.shape != (count,):
        raise InputError(f"{where}: expected {count} numbers, got {text!r}.")
    return values


def joints(tree: ET.ElementTree, path: Path | str = "URDF") -> dict[str, JointInfo]:
    """All joints of a URDF by name."""
    result = {}
    for element in tree.getroot().findall("joint"):
        name = element.get("name")
        parent, child = element.find("parent"), element.find("child")
        if name is None or parent is None or child is None:
            raise InputError(f"{path}: a <joint> lacks a name, <parent> or <child>.")
        origin = element.find("origin")
        xyz = _floats(origin.get("xyz") if origin is not None else None, 3, 0.0, f"{path}: joint {name} origin xyz")
        rpy = _floats(origin.get("rpy") if origin is not None else None, 3, 0.0, f"{path}: joint {name} origin rpy")
        axis_element = element.find("axis")
        axis = _floats(axis_element.get("xyz") if axis_element is not None else None, 3, 0.0, f"{path}: joint {name} axis")
        if axis_element is None:
            axis = np.array([1.0, 0.0, 0.0])
        limit = element.find("limit")
        lower = float(limit.get("lower", "-3.14159265")) if limit is not None else -np.pi
        upper = float(limit.get("upper", "3.14159265")) if limit is not None else np.pi
        result[name] = JointInfo(name, element.get("type", ""), parent.get("link"), child.get("link"),
                                 make_transform(xyz, rpy), axis / max(np.linalg.norm(axis), 1e-12), lower, upper)
    return result


def link_names(tree: ET.ElementTree) -> list[str]:
    return [element.get("name") for element in tree.getroot().findall("link")]


def links_with_geometry(tree: ET.ElementTree) -> set[str]:
    """Names of the links that have any <visual> or <collision> geometry."""
    return {link.get("name") for link in tree.getroot().findall("link")
            if any(element.find("geometry") is not None and len(element.find("geometry"))
                   for element in link.findall("visual") + link.findall("collision"))}


def chain(tree: ET.ElementTree, base_link: str, tip_link: str, path: Path | str = "URDF") -> list[JointInfo]:
    """Joints from ``base_link`` to ``tip_link`` in order (fixed ones included)."""
    links = set(link_names(tree))
    for role, link in (("base_link", base_link), ("tip_link", tip_link)):
        if link not in links:
            raise InputError(f"{path}: {role} {link!r} is not a link of this URDF (links: {', '.join(sorted(links))}).")
    by_child = {joint.child: joint for joint in joints(tree, path).values()}
    ordered = []
    link = tip_link
    while link != base_link:
        if link not in by_child:
            raise InputError(f"{path}: tip_link {tip_link!r} does not descend from base_link {base_link!r}.")
        joint = by_child[link]
        ordered.append(joint)
        link = joint.parent
    return ordered[::-1]


def movable(chain_joints: list[JointInfo]) -> list[JointInfo]:
    return [joint for joint in chain_joints if joint.type in ("revolute", "continuous", "prismatic")]


def _format(values) -> str:
    return " ".join(repr(float(v)) for v in values)


def set_joint_origin(tree: ET.ElementTree, joint_name: str, origin: np.ndarray) -> None:
    """Rewrite ``<origin xyz rpy>`` of one joint (full double precision); the rest stays as it was."""
    for element in tree.getroot().findall("joint"):
        if element.get("name") == joint_name:
            origin_element = element.find("origin")
            if origin_element is None:
                origin_element = ET.SubElement(element, "origin")
            origin_element.set("xyz", _format(origin[:3, 3]))
            origin_element.set("rpy", _format(matrix_to_rpy(origin[:3, :3])))
            return
    raise KeyError(joint_name)


def set_element_origin(element: ET.Element, origin: np.ndarray) -> None:
    """Rewrite the ``<origin>`` of a <visual>, <collision> or <inertial> element."""
    origin_element = element.find("origin")
    if origin_element is None:
        origin_element = ET.Element("origin")
        element.insert(0, origin_element)
    origin_element.set("xyz", _format(origin[:3, 3]))
    origin_element.set("rpy", _format(matrix_to_rpy(origin[:3, :3])))


def element_origin(element: ET.Element) -> np.ndarray:
    origin = element.find("origin")
    if origin is None:
        return np.eye(4)
    return make_transform(_floats(origin.get("xyz"), 3, 0.0, "origin xyz"), _floats(origin.get("rpy"), 3, 0.0, "origin rpy"))


def write_urdf(tree: ET.ElementTree, path: Path) -> None:
    """Write a URDF atomically (temporary name, then rename)."""
    ET.indent(tree, space="  ")
    text = ET.tostring(tree.getroot(), encoding="unicode")
    atomic_write_text(Path(path), '<?xml version="1.0"?>\n' + text + "\n")


def resolve_mesh(filename: str, urdf_dir: Path, package_dirs: list[Path] = (), confine: bool = True) -> Path:
    """Where a mesh ``filename`` of a URDF in ``urdf_dir`` lives.

    ``package://pkg/rest`` is searched in ``package_dirs`` (each may hold ``pkg/`` or be ``pkg`` itself).
    With ``confine``, a plain path must stay inside ``urdf_dir`` (a session must not point elsewhere).
    """
    if filename.startswith("package://"):
        package, _, inside = filename[len("package://"):].partition("/")
        for folder in [Path(urdf_dir), *map(Path, package_dirs)]:
            for candidate in (folder / package / inside, folder / inside if folder.name == package else None):
                if candidate is not None and candidate.is_file():
                    return candidate.resolve()
        raise InputError(f"mesh {filename!r}: package {package!r} not found next to the URDF or in the package folders given.")
    if filename.startswith("file://"):
        filename = filename[len("file://"):]
    mesh = Path(filename)
    resolved = (urdf_dir / mesh).resolve() if not mesh.is_absolute() else mesh.resolve()
    if confine and not resolved.is_relative_to(Path(urdf_dir).resolve()):
        raise InputError(f"mesh {filename!r} lies outside the URDF's own folder {urdf_dir}; refusing to read it.")
    if not resolved.is_file():
        raise InputError(f"mesh {filename!r} of {urdf_dir} not found.")
    return resolved


def mesh_elements(tree: ET.ElementTree):
    """Every ``<mesh>`` element of the URDF."""
    return list(tree.getroot().iter("mesh"))


def check_meshes(urdf_path: Path) -> None:
    """Every mesh of a (session) URDF exists inside the URDF's folder; else InputError naming it."""
    urdf_path = Path(urdf_path)
    tree = parse_urdf(urdf_path)
    for mesh in mesh_elements(tree):
        try:
            resolve_mesh(mesh.get("filename", ""), urdf_path.parent, confine=True)
        except InputError as error:
            raise InputError(f"{urdf_path}: {error}") from None


def copy_self_contained(tree: ET.ElementTree, source_dir: Path, dest_dir: Path, package_dirs: list[Path] = (),
                        confine: bool = False, name: str = "robot.urdf") -> Path:
    """Write ``tree`` into ``dest_dir/name`` with every mesh copied under ``dest_dir/meshes/``.

    Mesh filenames are rewritten to relative paths, so the folder can be moved and loads in
    Pinocchio and pybullet alike. ``tree`` is modified in place.
    """
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    copied: dict[Path, str] = {}
    for mesh in mesh_elements(tree):
        source = resolve_mesh(mesh.get("filename", ""), Path(source_dir), list(package_dirs), confine=confine)
        if source not in copied:
            # The number keeps same-named meshes from different folders apart; drop an earlier copy's.
            relative = Path("meshes") / f"{len(copied):02d}_{re.sub(r'^[0-9]{2}_', '', source.name)}"
            (dest_dir / "meshes").mkdir(exist_ok=True)
            shutil.copyfile(source, dest_dir / relative)
            # An .obj may name a material library next to it; bring it along when present.
            if source.suffix.lower() == ".obj":
                for line in source.read_text(errors="ignore").splitlines():
                    if line.startswith("mtllib"):
                        library = source.parent / line.split(maxsplit=1)[1].strip()
                        if library.is_file() and library.resolve().is_relative_to(source.parent.resolve()):
                            shutil.copyfile(library, dest_dir / "meshes" / library.name)
            copied[source] = relative.as_posix()
        mesh.set("filename", copied[source])
    path = dest_dir / name
    write_urdf(tree, path)
    return path
