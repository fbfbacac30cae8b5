"""What the cameras saw at each pose, as points in the base frame, and which poses form sweeps.

A sweep is a run of consecutive poses in which one joint alone moves, each step small: between two
such frames everything the joint carries moved by one screw motion and nothing else moved. Sweeps
are found from the joint readings alone (the plan's ``phase`` column is not needed), so any
recording that moves joints one at a time will do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from capture.session import Session
from rigs.depth_model import neighbourhood_range
from rigs.errors import InputError

STILL = 1e-6  # rad or m: a joint whose reading changes less than this did not move


@dataclass(frozen=True)
class Sweep:
    """Poses (row indices into the session, in order) where only joint ``joint`` moves."""

    joint: int
    rows: list[int]


def find_sweeps(q: np.ndarray, max_step: float) -> list[Sweep]:
    """Longest runs of consecutive rows of ``q`` (N, dof) that differ in one joint only, by at most
    ``max_step`` (rad or m) per step; runs of fewer than 3 poses are dropped."""
    sweeps: list[Sweep] = []
    current: list[int] = []
    joint = -1
    for row in range(1, len(q)):
        moved = np.flatnonzero(np.abs(q[row] - q[row - 1]) > STILL)
        step_joint = int(moved[0]) if len(moved) == 1 and abs(q[row, moved[0]] - q[row - 1, moved[0]]) <= max_step else -1
        if step_joint >= 0 and step_joint == joint and current and current[-1] == row - 1:
            current.append(row)
            continue
        if len(current) >= 3:
            sweeps.append(Sweep(joint, current))
        current, joint = ([row - 1, row], step_joint) if step_joint >= 0 else ([], -1)
    if len(current) >= 3:
        sweeps.append(Sweep(joint, current))
    return sweeps


@dataclass
class CameraFrame:
    """One camera's depth at one pose: points (H, W, 3) m in the base frame, usable pixels (H, W)."""

    depth: np.ndarray
    points: np.ndarray
    valid: np.ndarray


class DepthFrames:
    """Depth images of a session read once each, as base-frame points with flying pixels removed.

    An image whose noise sigma at its median depth exceeds ``smooth_above`` m is median-filtered over
    ``smooth`` x ``smooth`` pixels first (only where all of them have a reading): depth noise is per
    pixel, and a step of a few millimetres must stand out of it (a quieter camera keeps its detail).
    A pixel whose 3x3 neighbourhood then spans more than ``edge_jump`` m (or 6 of its noise sigmas)
    sits on an edge where real cameras mix foreground and background, so it is not used.
    """

    SMOOTHING_GAIN = 1.25  # a median of n samples has about 1.25 sigma / sqrt(n)

    def __init__(self, session: Session, edge_jump: float = 0.02, smooth: int = 5, smooth_above: float = 0.003):
        self.session = session
        self.edge_jump = edge_jump
        self.smooth_size = smooth
        self.smooth_above = smooth_above
        self._smooth: dict[str, int] = {}
        self.cameras = sorted(name for name, camera in session.cameras.items() if camera.base_T_camera is not None)
        if not self.cameras:
            raise InputError(f"{session.path}: has no depth camera with a known pose; chain discovery needs depth "
                             f"images from cameras whose poses in the base frame are known.")
        self._rays = {}
        for name in self.cameras:
            info = session.cameras[name].info
            v, u = np.mgrid[0:info.height, 0:info.width]
            pixels = np.stack([u, v, np.ones_like(u)], axis=-1).astype(float)
            self._rays[name] = pixels @ np.linalg.inv(info.K).T  # (H, W, 3), z = 1
        self._cache: dict[tuple[int, str], CameraFrame] = {}

    def frame(self, row: int, camera: str) -> CameraFrame:
        key = (row, camera)
        if key not in self._cache:
            pose = self.session.pose_ids[row]
            if not self.session.has_image(camera, pose, "depth"):
                depth = np.zeros(self._rays[camera].shape[:2], dtype=np.float32)
            else:
                depth = self.session.image(camera, pose, "depth").astype(float)
            if camera not in self._smooth:
                typical = float(np.median(depth[depth > 0])) if (depth > 0).any() else 0.0
                noisy = self.session.cameras[camera].depth_sigma(typical) > self.smooth_above
                self._smooth[camera] = self.smooth_size if noisy else 1
            size = self._smooth[camera]
            complete = ndimage.minimum_filter(depth, size=size, mode="nearest") > 0
            if size > 1:
                depth = np.where(complete, ndimage.median_filter(depth, size=size, mode="nearest"), 0.0)
            low, high = neighbourhood_range(depth)
            jump = np.maximum(self.edge_jump, 6 * self.sigma(camera, depth))
            valid = complete & (high - low < jump)
            base_T_camera = self.session.cameras[camera].base_T_camera
            points = (self._rays[camera] * depth[..., None]) @ base_T_camera[:3, :3].T + base_T_camera[:3, 3]
            self._cache[key] = CameraFrame(depth, points, valid)
        return self._cache[key]

    def sigma(self, camera: str, depth: np.ndarray) -> np.ndarray:
        """Noise sigma (m) of a filtered reading of ``depth`` m."""
        size = self._smooth.get(camera, 1)
        gain = self.SMOOTHING_GAIN / size if size > 1 else 1.0
        return gain * self.session.cameras[camera].depth_sigma(depth)

    def forget(self, rows: set[int]) -> None:
        """Drop cached frames of ``rows`` (memory: a 640 x 480 camera is 7 MB a frame)."""
        for key in [k for k in self._cache if k[0] in rows]:
            del self._cache[key]
