"""Camera poses from a bag's ``/tf_static`` (``tf2_msgs/msg/TFMessage``).

Static transforms form a forest of frames (parent -> child, the child's pose in the parent). A
camera's pose in the robot base is the chain of transforms between the base link and the image's
``header.frame_id``, through their common ancestor. ``/tf`` (the moving links) is not read here: a
camera whose frame hangs off a moving link (a wrist camera) is not a fixed camera and gets no pose.
(:mod:`capture.importers.tf_tree` reads ``/tf`` over time with :func:`transform_messages`, for the
flange pose of a hand-eye recording.)

Frame conventions (REP 103 and REP 104): an ``*_optical_frame`` has x right, y down, z forward,
the convention of the image; a camera's body frame (``camera_link``) has x forward, y left, z up.
Drivers stamp images with the optical frame; when an image carries a body frame instead, its
optical frame is ``body_T_optical`` = the rotation below.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from capture.importers.ros_images import message_time
from rigs.errors import InputError, setting
from rigs.transforms import invert, quat_xyzw_to_matrix

TF_MESSAGE = "tf2_msgs/msg/TFMessage"
TF_STATIC = "/tf_static"
CONVENTIONS = ("auto", "optical", "body")
# Columns: the optical frame's x (right), y (down), z (forward) in the body frame (x forward, y left, z up).
BODY_T_OPTICAL = np.array([[0.0, 0.0, 1.0, 0.0], [-1.0, 0.0, 0.0, 0.0], [0.0, -1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]])


@dataclass
class StaticTransforms:
    """child frame -> (parent frame, parent_T_child (4, 4)), from every /tf_static message."""

    parent: dict[str, tuple[str, np.ndarray]] = field(default_factory=dict)
    messages: int = 0

    @property
    def frames(self) -> set[str]:
        return set(self.parent) | {p for p, _ in self.parent.values()}

    def add(self, parent: str, child: str, parent_T_child: np.ndarray, where: str) -> None:
        parent, child = parent.lstrip("/"), child.lstrip("/")
        if child in self.parent and self.parent[child][0] != parent:
            raise InputError(f"{where}: frame {child!r} has two parents in /tf_static ({self.parent[child][0]!r} and "
                             f"{parent!r}).")
        self.parent[child] = (parent, parent_T_child)

    def root_pose(self, frame: str) -> tuple[str, np.ndarray]:
        """(root frame of ``frame``'s tree, root_T_frame (4, 4))."""
        pose, name, seen = np.eye(4), frame.lstrip("/"), set()
        while name in self.parent:
            if name in seen:
                raise InputError(f"/tf_static: the transforms from {frame!r} upwards form a loop through {name!r}.")
            seen.add(name)
            parent, parent_T_child = self.parent[name]
            pose = parent_T_child @ pose
            name = parent
        return name, pose

    def lookup(self, target: str, source: str) -> np.ndarray | None:
        """``target_T_source`` (4, 4), or None when no chain of static transforms links them."""
        target_root, root_T_target = self.root_pose(target)
        source_root, root_T_source = self.root_pose(source)
        if target_root != source_root:
            return None
        return invert(root_T_target) @ root_T_source


def transform_messages(reader, bag_name: str, topic: str) -> Iterator[tuple[str, str, str, np.ndarray, float]]:
    """Every transform on ``topic`` (/tf or /tf_static), checked, in bag order: (where, parent frame,
    child frame, parent_T_child (4, 4) m, stamp s: the transform's header stamp, or the bag's receive
    time when the stamp is zero). Frame names without a leading ``/``."""
    connections = [c for c in reader.connections if c.topic == topic]
    for number, (connection, bag_time, raw) in enumerate(reader.messages(connections=connections), start=1):
        where = f"{bag_name}: topic {topic} message {number}"
        if connection.msgtype != TF_MESSAGE:
            raise InputError(f"{bag_name}: topic {topic} carries {connection.msgtype}, expected {TF_MESSAGE}.")
        try:
            message = reader.deserialize(raw, connection.msgtype)
        except Exception as error:  # a corrupt message: any decoder error means bad input
            raise InputError(f"{where} cannot be decoded ({type(error).__name__}).") from None
        for item in message.transforms:
            translation, rotation = item.transform.translation, item.transform.rotation
            quaternion = np.array([rotation.x, rotation.y, rotation.z, rotation.w], dtype=float)
            values = np.array([translation.x, translation.y, translation.z], dtype=float)
            if not np.all(np.isfinite(quaternion)) or not np.all(np.isfinite(values)):
                raise InputError(f"{where}: transform {item.header.frame_id!r} -> {item.child_frame_id!r} has "
                                 f"non-finite values.")
            if abs(np.linalg.norm(quaternion) - 1.0) > 1e-3:
                raise InputError(f"{where}: transform {item.header.frame_id!r} -> {item.child_frame_id!r} has a "
                                 f"quaternion of length {np.linalg.norm(quaternion):.4g}, not a rotation.")
            pose = np.eye(4)
            pose[:3, :3] = quat_xyzw_to_matrix(quaternion)
            pose[:3, 3] = values
            yield (where, str(item.header.frame_id).lstrip("/"), str(item.child_frame_id).lstrip("/"), pose,
                   message_time(item, bag_time))


def read_static_transforms(reader, bag_name: str) -> StaticTransforms | None:
    """Every transform on /tf_static; None when the bag has no /tf_static topic."""
    if not any(c.topic == TF_STATIC for c in reader.connections):
        return None
    transforms = StaticTransforms()
    last = None
    for where, parent, child, pose, _ in transform_messages(reader, bag_name, TF_STATIC):
        if where != last:
            transforms.messages += 1
            last = where
        transforms.add(parent, child, pose, where)
    return transforms


def is_optical(frame_id: str, convention: str) -> bool:
    """Whether ``frame_id`` is an optical frame: by name (``auto``) or as the user says."""
    if convention not in CONVENTIONS:
        raise InputError(f"{setting('frame_convention')} {convention!r} is not one of {', '.join(CONVENTIONS)}.")
    if convention == "auto":
        return "optical" in frame_id.lower()
    return convention == "optical"


def camera_pose(transforms: StaticTransforms, base_link: str, frame_id: str, convention: str) -> np.ndarray | None:
    """``base_T_camera`` (4, 4) of the optical frame of an image stamped ``frame_id``; None when unlinked."""
    base_T_frame = transforms.lookup(base_link, frame_id)
    if base_T_frame is None:
        return None
    return base_T_frame if is_optical(frame_id, convention) else base_T_frame @ BODY_T_OPTICAL
