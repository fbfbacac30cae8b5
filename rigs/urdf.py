"""Reading, editing and writing URDF files without losing what we do not touch.

URDFs may come from untrusted places (a colleague's session folder), so the XML is parsed with
defusedxml and any document type declaration refused: no entity is ever expanded, whatever the
file's encoding (a UTF-16 file hides ``<!ENTITY`` from a byte search, not from the parser). Mesh
paths must resolve inside the file's own folder or a package folder the caller names; ``../``,
absolute paths, ``file://`` and symbolic links that lead elsewhere are refused.
"""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import defusedxml
import defusedxml.ElementTree as safe_xml
import numpy as np

from rigs.errors import InputError, setting
from rigs.files import atomic_write_text
from rigs.transforms import make_transform, matrix_to_rpy


def parse_xml(path: Path) -> ET.ElementTree:
    """Parse an XML file, refusing DOCTYPE and entity declarations (no billion laughs, no external entities)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found.")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise InputError(f"{path}: cannot read this file ({error.strerror}).") from None
    try:
        return ET.ElementTree(safe_xml.fromstring(data, forbid_dtd=True, forbid_entities=True, forbid_external=True))
    except (defusedxml.DTDForbidden, defusedxml.EntitiesForbidden, defusedxml.ExternalReferenceForbidden):
        raise InputError(f"{path}: declares a document type or XML entities, which selfcal refuses to expand.") from None
    except ET.ParseError as error:
        raise InputError(f"{path}: not a readable XML file ({error}).") from None
    except (ValueError, LookupError) as error:  # an unknown or impossible declared encoding
        raise InputError(f"{path}: not a readable XML file ({error}).") from None


def xml_text(tree: ET.ElementTree) -> str:
    """The parsed document as text: what other parsers (Pinocchio's) get, so they read what was checked."""
    return '<?xml version="1.0"?>\n' + ET.tostring(tree.getroot(), encoding="unicode")


# Number-valued attributes of URDF elements and how many numbers each holds. Pinocchio's parser
# prints a complaint about a bad one and goes on, so they are checked here, once, with the file named.
_NUMBERS = {"origin": {"xyz": 3, "rpy": 3}, "axis": {"xyz": 3}, "mass": {"value": 1},
            "inertia": {k: 1 for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")},
            "limit": {k: 1 for k in ("lower", "upper", "effort", "velocity")}, "dynamics": {"damping": 1, "friction": 1},
            "box": {"size": 3}, "cylinder": {"radius": 1, "length": 1}, "sphere": {"radius": 1}, "mesh": {"scale": 3}}


def parse_urdf(path: Path) -> ET.ElementTree:
    tree = parse_xml(path)
    if tree.getroot().tag != "robot":
        raise InputError(f"{path}: not a URDF (the root element is <{tree.getroot().tag}>, expected <robot>).")
    for tag, attributes in _NUMBERS.items():
        for element in tree.getroot().iter(tag):
            for attribute, count in attributes.items():
                text = element.get(attribute)
                if text is not None:
                    _floats(text, count, 0.0, f"{path}: <{tag} {attribute}=...>")
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
    if not np.all(np.isfinite(values)):
        raise InputError(f"{where}: expected finite numbers, got {text!r}.")
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
        lower = _floats(limit.get("lower") if limit is not None else None, 1, -np.pi, f"{path}: joint {name} limit lower")[0]
        upper = _floats(limit.get("upper") if limit is not None else None, 1, np.pi, f"{path}: joint {name} limit upper")[0]
        if not (np.isfinite(lower) and np.isfinite(upper)) or lower > upper:
            raise InputError(f"{path}: joint {name} has limits [{lower:g}, {upper:g}]; expected finite lower <= upper.")
        if parent.get("link") is None or child.get("link") is None:
            raise InputError(f"{path}: joint {name}: <parent> or <child> lacks its link attribute.")
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
        if any(other.name == joint.name for other in ordered):
            raise InputError(f"{path}: joint {joint.name!r} closes a loop; a URDF is a tree.")
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


def _inside(path: Path, folders: list[Path]) -> bool:
    """Whether ``path``, with every symbolic link followed, lies inside one of ``folders``."""
    resolved = path.resolve()
    return any(resolved.is_relative_to(Path(folder).resolve()) for folder in folders)


def resolve_mesh(filename: str, urdf_dir: Path, package_dirs: list[Path] = ()) -> Path:
    """Where a mesh ``filename`` of a URDF in ``urdf_dir`` lives, confined to trusted folders.

    ``package://pkg/rest`` is searched in ``urdf_dir`` and ``package_dirs`` (each may hold ``pkg/``
    or be ``pkg`` itself); a plain, absolute or ``file://`` path must resolve inside ``urdf_dir`` or
    a package folder. Whatever leads outside them (``../``, a symbolic link) is refused.
    """
    urdf_dir = Path(urdf_dir)
    folders = [urdf_dir, *map(Path, package_dirs)]
    if not filename.strip():
        raise InputError("a <mesh> has no filename.")
    if filename.startswith("package://"):
        package, _, inside = filename[len("package://"):].partition("/")
        outside = None
        for folder in folders:
            for root in (folder / package, folder if folder.name == package else None):
                if root is None:
                    continue
                candidate = root / inside
                if not candidate.is_file():
                    continue
                if not _inside(candidate, [root]):
                    outside = candidate
                    continue
                return candidate.resolve()
        if outside is not None:
            raise InputError(f"mesh {filename!r} leads outside its package folder (to {outside.resolve()}); "
                             f"refusing to read it.")
        raise InputError(f"mesh {filename!r}: package {package!r} not found next to the URDF or in the package "
                         f"folders given ({setting('package_dirs')}).")
    if filename.startswith("file://"):
        filename = filename[len("file://"):]
    mesh = Path(filename)
    candidate = mesh if mesh.is_absolute() else urdf_dir / mesh
    if not _inside(candidate, folders):
        allowed = "the URDF's own folder" + (" or the package folders given" if package_dirs else "")
        raise InputError(f"mesh {filename!r} lies outside {allowed} ({urdf_dir}); refusing to read it.")
    if not candidate.is_file():
        raise InputError(f"mesh {filename!r} of {urdf_dir} not found.")
    return candidate.resolve()


def mesh_elements(tree: ET.ElementTree):
    """Every ``<mesh>`` element of the URDF."""
    return list(tree.getroot().iter("mesh"))


def check_meshes(urdf_path: Path, package_dirs: list[Path] = ()) -> None:
    """Every mesh of a URDF exists inside its folder (or ``package_dirs``); else InputError naming it.

    Textures are refused: a folder selfcal wrote has none (it drops them when copying), so a
    texture path could only point outside the folder.
    """
    urdf_path = Path(urdf_path)
    tree = parse_urdf(urdf_path)
    for mesh in mesh_elements(tree):
        try:
            resolve_mesh(mesh.get("filename", ""), urdf_path.parent, list(package_dirs))
        except InputError as error:
            raise InputError(f"{urdf_path}: {error.marked}") from None
    for texture in tree.getroot().iter("texture"):
        if texture.get("filename"):
            raise InputError(f"{urdf_path}: <texture filename={texture.get('filename')!r}>: selfcal does not read "
                             f"textures; remove the element.")


def copy_self_contained(tree: ET.ElementTree, source_dir: Path, dest_dir: Path, package_dirs: list[Path] = (),
                        name: str = "robot.urdf") -> Path:
    """Write ``tree`` into ``dest_dir/name`` with every mesh copied under ``dest_dir/meshes/``.

    Mesh filenames are rewritten to paths relative to the folder, so it can be moved: pybullet and
    yourdfpy resolve them against the URDF's folder; Pinocchio resolves them against
    ``package_dirs``, so pass the folder (``package_dirs=[folder]``), or write ``package://`` URIs
    with :func:`use_package_uris`. Only meshes inside ``source_dir`` or ``package_dirs`` are copied
    (see :func:`resolve_mesh`); ``<texture>`` elements are dropped. ``tree`` is modified in place.
    """
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    # Textures matter to neither kinematics nor shape; left in, they would point out of the folder.
    for material in tree.getroot().iter("material"):
        for texture in material.findall("texture"):
            material.remove(texture)
    copied: dict[Path, str] = {}
    for mesh in mesh_elements(tree):
        source = resolve_mesh(mesh.get("filename", ""), Path(source_dir), list(package_dirs))
        if source not in copied:
            # The number keeps same-named meshes from different folders apart; drop an earlier copy's.
            relative = Path("meshes") / f"{len(copied):02d}_{re.sub(r'^[0-9]{2}_', '', source.name)}"
            (dest_dir / "meshes").mkdir(exist_ok=True)
            shutil.copyfile(source, dest_dir / relative)
            # An .obj may name a material library next to it; bring it along when present.
            if source.suffix.lower() == ".obj":
                for line in source.read_text(errors="ignore").splitlines():
                    if line.startswith("mtllib") and len(line.split(maxsplit=1)) == 2:
                        library = source.parent / line.split(maxsplit=1)[1].strip()
                        if library.is_file() and library.resolve().is_relative_to(source.parent.resolve()):
                            shutil.copyfile(library, dest_dir / "meshes" / library.name)
            copied[source] = relative.as_posix()
        mesh.set("filename", copied[source])
    path = dest_dir / name
    write_urdf(tree, path)
    return path


PACKAGE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(/[A-Za-z0-9_.-]+)*$")


def check_package_name(package: str) -> None:
    """InputError unless ``package`` is a ROS package name, optionally with a folder inside it."""
    if not PACKAGE_NAME.match(package) or ".." in package.split("/"):
        raise InputError(f"{setting('ros_package')} {package!r}: give a ROS package name (letters, digits, "
                         f"underscores), optionally with the folder inside it, e.g. my_robot_description/calibration.")


def use_package_uris(path: Path, package: str) -> None:
    """Rewrite the folder-relative mesh filenames of the URDF at ``path`` as
    ``package://PACKAGE/<relative>``: ``package`` is a ROS package name, optionally followed by
    the folder inside the package where this URDF's folder will sit (``my_robot/calibration``).
    ROS tools, and Pinocchio given the folder above the package in ``package_dirs``, then find
    the meshes wherever the package is installed."""
    check_package_name(package)
    tree = parse_urdf(path)
    for mesh in mesh_elements(tree):
        filename = mesh.get("filename", "")
        if "://" in filename or Path(filename).is_absolute():
            continue
        mesh.set("filename", f"package://{package.rstrip('/')}/{filename}")
    write_urdf(tree, path)
