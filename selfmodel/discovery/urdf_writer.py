"""A URDF written from scratch for a discovered chain: no description went in, one comes out.

Link frames: each joint's frame sits on its axis (revolute: the discovered point; prismatic: the
previous joint's point), oriented like the base frame at the home pose, its axis the discovered
direction. A reading of zero is the URDF's zero, so a joint's origin includes the turn (or slide)
back from home: ``origin_j = M_{j-1}^-1 M_j motion(axis_j, -home_j)`` with ``M`` the frames at home.
Links get the convex hull of the points seen moving with them as visual and collision mesh, the base
link the hull of what stands still under the first link (joined to it, within its reach). No
inertial is written: depth shows shape, not mass.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import trimesh

from rigs.errors import InputError
from rigs.files import atomic_write_text
from rigs.transforms import matrix_to_rpy
from selfmodel.discovery.chain_discovery import ChainDiscovery, DiscoveredArm
from selfmodel.discovery.screws import screw_motion, slide_motion

MIN_HULL_POINTS = 20


def home_frames(chain: DiscoveredArm) -> list[np.ndarray]:
    """``M_k`` (4, 4): frame of link k in the base frame at home (k = 0 is the base)."""
    frames = [np.eye(4)]
    previous = np.zeros(3)
    for joint in chain.joints:
        frame = np.eye(4)
        frame[:3, 3] = np.array(joint.point) if joint.type == "revolute" else previous
        if joint.type == "revolute":
            previous = np.array(joint.point)
        frames.append(frame)
    return frames


def joint_origins(chain: DiscoveredArm) -> list[np.ndarray]:
    """Each joint's URDF origin (4, 4) in its parent link's frame."""
    frames = home_frames(chain)
    origins = []
    for k, joint in enumerate(chain.joints, start=1):
        direction = np.array(joint.direction)
        back = (screw_motion(direction, np.zeros(3), -joint.home) if joint.type == "revolute"
                else slide_motion(direction, -joint.home))
        origins.append(np.linalg.inv(frames[k - 1]) @ frames[k] @ back)
    return origins


def largest_cluster(points: np.ndarray, gap: float = 0.03, min_points: int = 5) -> np.ndarray:
    """The largest group of ``points`` (n, 3) m whose members lie within ``gap`` m of one another
    (DBSCAN): a link is one body, and what else its motion happened to explain (static patches of
    the scene a turn maps onto themselves) lies apart from it and would blow its hull up."""
    import open3d as o3d  # open3d adds 1.2 s to a start; only this step needs it

    if len(points) < MIN_HULL_POINTS:
        return points
    labels = np.asarray(o3d.geometry.PointCloud(o3d.utility.Vector3dVector(points)).cluster_dbscan(
        eps=gap, min_points=min_points))
    if (labels < 0).all():
        return points
    biggest = np.bincount(labels[labels >= 0]).argmax()
    return points[labels == biggest]


def _origin_element(parent: ET.Element, transform: np.ndarray) -> None:
    xyz = " ".join(f"{v:.9g}" for v in transform[:3, 3])
    rpy = " ".join(f"{v:.9g}" for v in matrix_to_rpy(transform[:3, :3]))
    ET.SubElement(parent, "origin", xyz=xyz, rpy=rpy)


def write_discovered_urdf(chain: DiscoveredArm, folder: Path, robot_name: str = "discovered") -> Path:
    """``folder``/robot.urdf (+ meshes/link_<k>.stl) for ``chain``; returns the URDF's path."""
    folder = Path(folder)
    (folder / "meshes").mkdir(parents=True, exist_ok=True)
    frames = home_frames(chain)
    robot = ET.Element("robot", name=robot_name)
    robot.append(ET.Comment(" Written by selfcal from depth and joint readings alone (chain discovery); "
                            "no inertial data: depth shows shape, not mass. "))
    link_names = [chain.base_link] + list(chain.link_points)
    if len(link_names) != len(chain.joints) + 1:
        raise InputError("a discovered chain needs one link per joint plus the base.")
    for k, name in enumerate(link_names):
        link = ET.SubElement(robot, "link", name=name)
        points = np.array(chain.base_points if k == 0 else chain.link_points.get(name, []), dtype=float).reshape(-1, 3)
        if len(points) < MIN_HULL_POINTS:
            continue
        points = largest_cluster(points)
        local = (points - frames[k][:3, 3]) @ frames[k][:3, :3]
        try:
            hull = trimesh.convex.convex_hull(local)
        except Exception as error:  # qhull refuses flat or degenerate point sets
            raise InputError(f"link {name!r}: its {len(points)} points span no volume ({error}).") from None
        mesh = f"meshes/link_{k}.stl"  # numbered: a joint's name from a readings file may hold any character
        hull.export(folder / mesh)
        for kind in ("visual", "collision"):
            element = ET.SubElement(link, kind)
            geometry = ET.SubElement(element, "geometry")
            ET.SubElement(geometry, "mesh", filename=mesh)
    for joint, origin, parent, child in zip(chain.joints, joint_origins(chain), link_names[:-1], link_names[1:]):
        element = ET.SubElement(robot, "joint", name=joint.name, type=joint.type)
        ET.SubElement(element, "parent", link=parent)
        ET.SubElement(element, "child", link=child)
        _origin_element(element, origin)
        ET.SubElement(element, "axis", xyz=" ".join(f"{v:.9g}" for v in joint.direction))
        ET.SubElement(element, "limit", lower=f"{joint.lower:.9g}", upper=f"{joint.upper:.9g}", effort="0",
                      velocity="0")
    ET.indent(robot)
    path = folder / "robot.urdf"
    atomic_write_text(path, '<?xml version="1.0"?>\n' + ET.tostring(robot, encoding="unicode") + "\n")
    return path


def discover_urdf(session, folder: Path, progress=None) -> tuple[DiscoveredArm, Path]:
    """Discover ``session``'s chain (no description read) and write its URDF into ``folder``: the
    one entry point the self-model's training uses for an arm nobody described."""
    chain = ChainDiscovery().fit(session, progress)
    return chain, write_discovered_urdf(chain, folder)
