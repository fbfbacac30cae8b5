"""Matching measurements to poses: by the pose name they carry, or by time stamp.

By name, a measurement names its pose (see ``tracker_exports`` for how a point name encodes it).
By time, each measurement takes the joint sample nearest in time, which must lie within a
tolerance. A joint log of discrete poses (a joints CSV) gives each sample its own pose; a stream
(a JointState topic at 100 Hz) is cut into poses: consecutive measurements whose joint samples
agree within ``still`` radians (the arm stood still) form one pose, numbered in time order.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from capture.importers.joint_logs import JointLog
from capture.session import pose_id
from rigs.errors import InputError, setting


def split_pose_names(names: list[str], poses: list[str | None], targets: list[str], where: list[str],
                     pose_ids: list[str]) -> tuple[list[str], list[str]]:
    """Fill in the pose of single names ``<pose>_<target>``: the longest pose id that starts the name."""
    known = sorted(pose_ids, key=len, reverse=True)
    out_poses, out_targets = [], []
    for name, pose, target, place in zip(names, poses, targets, where):
        if pose is None:
            pose = next((p for p in known if target.startswith(p + "_") and len(target) > len(p) + 1), None)
            if pose is None:
                example = f"{pose_ids[0]}_smr1" if pose_ids else "p0000_smr1"
                raise InputError(f"{place}: point name {name!r} does not start with a pose id of the joints followed "
                                 f"by '_' (e.g. {example!r}), and the file gives no pose or Group column.")
            target = target[len(pose) + 1:]
        out_poses.append(pose)
        out_targets.append(target)
    return out_poses, out_targets


def assign_by_name(poses: list[str], where: list[str], log: JointLog) -> np.ndarray:
    """(M,) index into ``log`` of each measurement's named pose."""
    index = {p: i for i, p in enumerate(log.pose_ids)}
    result = np.empty(len(poses), dtype=int)
    for i, (pose, place) in enumerate(zip(poses, where)):
        if pose not in index:
            raise InputError(f"{place}: pose {pose!r} has no joint row in {log.source}.")
        result[i] = index[pose]
    return result


def assign_by_time(times: np.ndarray, keys: list[str], where: list[str], log: JointLog, tolerance: float,
                   still: float | None) -> tuple[JointLog, np.ndarray]:
    """Match measurements at ``times`` (M,) s to the log's samples.

    ``keys`` name what each measurement observes (a reflector; the 6-DoF probe): a pose never has
    two of the same. ``still`` None keeps the log's rows as poses; a number cuts a stream into
    poses (module docstring). Returns the log of poses and (M,) pose index per measurement.
    """
    if log.times is None:
        raise InputError(f"{log.source}: has no time stamps, so measurements cannot be matched by time "
                         f"(add a time column, or match by name).")
    if tolerance <= 0:
        raise InputError(f"{setting('tolerance')} must be positive, got {tolerance:g} s.")
    order = np.argsort(log.times, kind="stable")
    sorted_times = log.times[order]
    times = np.asarray(times, dtype=float)
    right = np.clip(np.searchsorted(sorted_times, times), 0, len(sorted_times) - 1)
    left = np.clip(right - 1, 0, len(sorted_times) - 1)
    pick = np.where(np.abs(sorted_times[left] - times) <= np.abs(sorted_times[right] - times), left, right)
    gap = np.abs(sorted_times[pick] - times)
    sample = order[pick]
    for i in np.flatnonzero(gap > tolerance)[:1]:
        raise InputError(f"{where[i]}: no joint sample within {tolerance:g} s of time {times[i]:.3f} "
                         f"(the nearest in {log.source} is {gap[i]:.3f} s away).")
    if still is None:
        seen: dict[tuple[int, str], int] = {}
        for i, (row, key) in enumerate(zip(sample, keys)):
            if (row, key) in seen:
                raise InputError(f"{where[i]}: {key} is measured twice at pose {log.pose_ids[row]!r} "
                                 f"(also {where[seen[row, key]]}).")
            seen[row, key] = i
        return log, sample
    return _cut_stream(times, keys, sample, log, still)


def _cut_stream(times: np.ndarray, keys: list[str], sample: np.ndarray, log: JointLog,
                still: float) -> tuple[JointLog, np.ndarray]:
    groups: list[list[int]] = []
    for i in np.argsort(times, kind="stable"):
        if groups:
            current = groups[-1]
            first = sample[current[0]]
            moved = np.abs(log.q[sample[i]] - log.q[first]).max() > still
            if not moved and keys[i] not in {keys[j] for j in current}:
                current.append(int(i))
                continue
        groups.append([int(i)])
    # A pose's joint values average every sample from its first to its last measurement that
    # agrees with them within ``still``: more samples than measurements, so less encoder noise.
    order = np.argsort(log.times, kind="stable")
    rank = np.empty(len(order), dtype=int)
    rank[order] = np.arange(len(order))
    pose_of = np.empty(len(times), dtype=int)
    rows = []
    for number, group in enumerate(groups):
        pose_of[group] = number
        first = sample[group[0]]
        span = order[min(rank[sample[group]]): max(rank[sample[group]]) + 1]
        rows.append([int(r) for r in span if np.abs(log.q[r] - log.q[first]).max() <= still])
    mean = lambda values: np.array([values[r].mean(axis=0) for r in rows])  # noqa: E731
    poses = replace(log, pose_ids=[pose_id(n) for n in range(len(groups))], lines=[log.lines[r[0]] for r in rows],
                    q=mean(log.q), times=mean(log.times),
                    payload_kg=None if log.payload_kg is None else mean(log.payload_kg),
                    efforts={name: mean(values) for name, values in log.efforts.items()},
                    extra={name: [values[r[0]] for r in rows] for name, values in log.extra.items()})
    return poses, pose_of
