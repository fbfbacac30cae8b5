"""A bag's frames over time, from ``/tf`` and ``/tf_static``: the pose of one frame in another at any stamp.

tf2's rules, read without ROS: every frame has one parent; a ``/tf_static`` transform holds at every
time, a ``/tf`` transform is known at its samples (each transform's own ``header.stamp``). The
pose of ``source`` in ``target`` at a stamp is the chain of transforms between them through their
nearest common ancestor, every moving transform on it interpolated between its two samples around
the stamp: the position on the straight line, the rotation along the shorter arc (slerp). Nothing is
extrapolated: a stamp before a transform's first sample (or after its last) takes that sample, and
every transform's nearest sample must lie within a stated tolerance of the stamp, else the lookup
says which transform and how far (:class:`Lookup`), and the caller refuses the stamp.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from capture.importers.tf_static import TF_STATIC, StaticTransforms, transform_messages
from rigs.errors import InputError
from rigs.transforms import interpolate_pose

TF = "/tf"


@dataclass
class MovingTransform:
    """One ``/tf`` transform: ``times`` (N,) s increasing, ``poses`` (N, 4, 4) parent_T_child."""

    parent: str
    child: str
    times: np.ndarray
    poses: np.ndarray

    def at(self, stamps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(n, 4, 4) parent_T_child at ``stamps`` (n,) s, and (n,) s from each stamp to the nearest sample."""
        stamps = np.asarray(stamps, dtype=float)
        after = np.clip(np.searchsorted(self.times, stamps, side="right"), 1, max(len(self.times) - 1, 1))
        before = after - 1
        if len(self.times) == 1:
            after = before = np.zeros(len(stamps), dtype=int)
        gap = np.minimum(np.abs(stamps - self.times[before]), np.abs(stamps - self.times[after]))
        span = self.times[after] - self.times[before]
        fraction = np.clip((stamps - self.times[before]) / np.where(span > 0, span, 1.0), 0.0, 1.0)
        # A stamp on a sample (or beyond the ends) takes the sample; only the others are interpolated.
        poses = np.where((fraction >= 1.0)[:, None, None], self.poses[after], self.poses[before])
        for i in np.flatnonzero((fraction > 0.0) & (fraction < 1.0)):
            poses[i] = interpolate_pose(self.poses[before[i]], self.poses[after[i]], float(fraction[i]))
        return poses, gap


@dataclass
class Lookup:
    """``target_T_source`` (n, 4, 4) at n stamps; per stamp the largest distance (s) from the stamp to
    the nearest sample of a moving transform on the chain, and that transform's child frame ("" when
    no transform on the chain moves)."""

    poses: np.ndarray
    gap: np.ndarray
    worst: list[str]


@dataclass
class TransformTree:
    """The frames of one bag: ``static`` (from /tf_static) and ``moving`` child -> its /tf samples."""

    static: StaticTransforms = field(default_factory=StaticTransforms)
    moving: dict[str, MovingTransform] = field(default_factory=dict)

    @property
    def frames(self) -> set[str]:
        return self.static.frames | set(self.moving) | {m.parent for m in self.moving.values()}

    def parent(self, frame: str) -> str | None:
        if frame in self.moving:
            return self.moving[frame].parent
        if frame in self.static.parent:
            return self.static.parent[frame][0]
        return None

    def ancestors(self, frame: str) -> list[str]:
        """``frame``, its parent, ..., its tree's root."""
        path = [frame]
        while (parent := self.parent(path[-1])) is not None:
            if parent in path:
                raise InputError(f"{TF}, {TF_STATIC}: the transforms from {frame!r} upwards form a loop through "
                                 f"{parent!r}.")
            path.append(parent)
        return path

    def linked(self, target: str, source: str) -> bool:
        return self.ancestors(target)[-1] == self.ancestors(source)[-1]

    def moving_on_chain(self, target: str, source: str) -> list[MovingTransform]:
        """The /tf transforms between the two frames (empty when /tf_static alone links them)."""
        up_target, up_source = self.ancestors(target), self.ancestors(source)
        common = next(f for f in up_source if f in up_target)
        chain = up_source[:up_source.index(common)] + up_target[:up_target.index(common)]
        return [self.moving[f] for f in chain if f in self.moving]

    def _up(self, frame: str, stop: str, stamps: np.ndarray, gap: np.ndarray, worst: list[str]) -> np.ndarray:
        """stop_T_frame (n, 4, 4) for an ancestor ``stop``; raises ``gap`` and ``worst`` in place."""
        poses = np.tile(np.eye(4), (len(stamps), 1, 1))
        while frame != stop:
            if frame in self.moving:
                transform = self.moving[frame]
                step, distance = transform.at(stamps)
                for i in np.flatnonzero(distance > gap):
                    gap[i], worst[i] = distance[i], frame
                parent = transform.parent
            else:
                parent, pose = self.static.parent[frame]
                step = np.broadcast_to(pose, poses.shape)
            poses = step @ poses
            frame = parent
        return poses

    def lookup(self, target: str, source: str, stamps) -> Lookup:
        """``target_T_source`` at ``stamps`` (s); the frames must be :meth:`linked`."""
        stamps = np.atleast_1d(np.asarray(stamps, dtype=float))
        up_target, up_source = self.ancestors(target), self.ancestors(source)
        common = next(f for f in up_source if f in up_target)
        gap, worst = np.zeros(len(stamps)), [""] * len(stamps)
        common_T_source = self._up(source, common, stamps, gap, worst)
        common_T_target = self._up(target, common, stamps, gap, worst)
        # target_T_source = inverse(common_T_target) @ common_T_source, for every stamp at once.
        rotation_T = np.transpose(common_T_target[:, :3, :3], (0, 2, 1))
        poses = np.tile(np.eye(4), (len(stamps), 1, 1))
        poses[:, :3, :3] = rotation_T @ common_T_source[:, :3, :3]
        poses[:, :3, 3] = np.einsum("nij,nj->ni", rotation_T, common_T_source[:, :3, 3] - common_T_target[:, :3, 3])
        return Lookup(poses, gap, worst)


def read_transform_tree(reader, bag_name: str) -> TransformTree:
    """Every transform on /tf and /tf_static; InputError when a frame has two parents."""
    tree = TransformTree()
    topics = {c.topic for c in reader.connections}
    if TF_STATIC in topics:
        for where, parent, child, pose, _ in transform_messages(reader, bag_name, TF_STATIC):
            tree.static.add(parent, child, pose, where)
    samples: dict[str, tuple[str, list, list]] = {}
    if TF in topics:
        for where, parent, child, pose, stamp in transform_messages(reader, bag_name, TF):
            known = samples.get(child, (parent, [], []))
            static_parent = tree.static.parent.get(child, (parent,))[0]
            if known[0] != parent or static_parent != parent:
                other = known[0] if known[0] != parent else static_parent
                raise InputError(f"{where}: frame {child!r} has two parents in {TF} and {TF_STATIC} ({other!r} and "
                                 f"{parent!r}); a tf tree gives each frame one parent.")
            known[1].append(stamp)
            known[2].append(pose)
            samples[child] = known
    for child, (parent, stamps, poses) in samples.items():
        stamps = np.array(stamps)
        order = np.argsort(stamps, kind="stable")
        stamps, poses = stamps[order], np.array(poses)[order]
        # A stamp published twice keeps its last sample (tf2 would overwrite it the same way).
        last = np.append(stamps[1:] != stamps[:-1], True)
        tree.moving[child] = MovingTransform(parent, child, stamps[last], poses[last])
        tree.static.parent.pop(child, None)  # a frame /tf moves is not static, whatever /tf_static says
    return tree
