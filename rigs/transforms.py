"""Rigid transforms as 4x4 numpy arrays.

Names read as poses: ``a_T_b`` is the pose of frame b in frame a, so
``a_T_c = a_T_b @ b_T_c`` and ``p_a = a_T_b @ p_b``. Lengths in metres, angles in radians.
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin


def rpy_to_matrix(rpy) -> np.ndarray:
    """URDF roll-pitch-yaw (fixed axes x, y, z) -> (3, 3) rotation: Rz(y) @ Ry(p) @ Rx(r)."""
    return pin.rpy.rpyToMatrix(*[float(a) for a in rpy])


def matrix_to_rpy(rotation: np.ndarray) -> np.ndarray:
    """(3, 3) rotation -> URDF roll-pitch-yaw (3,)."""
    return np.asarray(pin.rpy.matrixToRpy(np.asarray(rotation, dtype=float)))


def make_transform(xyz=(0.0, 0.0, 0.0), rpy=(0.0, 0.0, 0.0)) -> np.ndarray:
    """4x4 transform from a translation (3,) in metres and URDF rpy (3,) in radians."""
    transform = np.eye(4)
    transform[:3, :3] = rpy_to_matrix(rpy)
    transform[:3, 3] = np.asarray(xyz, dtype=float)
    return transform


def invert(transform: np.ndarray) -> np.ndarray:
    """Inverse of a rigid 4x4 transform."""
    inverse = np.eye(4)
    rotation = transform[:3, :3]
    inverse[:3, :3] = rotation.T
    inverse[:3, 3] = -rotation.T @ transform[:3, 3]
    return inverse


def axis_angle(axis, angle: float) -> np.ndarray:
    """(3, 3) rotation of ``angle`` radians about ``axis`` (normalised here)."""
    axis = np.asarray(axis, dtype=float)
    return pin.exp3(axis / np.linalg.norm(axis) * float(angle))


def exp6(twist) -> np.ndarray:
    """se(3) exponential: twist (6,) = (linear v, angular w) -> 4x4 transform (Pinocchio order)."""
    return pin.exp6(pin.Motion(np.asarray(twist, dtype=float))).homogeneous


def log6(transform: np.ndarray) -> np.ndarray:
    """SE(3) logarithm: 4x4 transform -> twist (6,) = (linear v, angular w)."""
    return np.asarray(pin.log6(pin.SE3(transform[:3, :3].copy(), transform[:3, 3].copy())).vector)


def interpolate_pose(a_T_b0: np.ndarray, a_T_b1: np.ndarray, fraction: float) -> np.ndarray:
    """The pose ``fraction`` (0 to 1) of the way from ``a_T_b0`` to ``a_T_b1`` (4x4 each): the
    position along the straight line, the rotation along the shorter arc at constant rate (slerp),
    as tf2 interpolates between two samples."""
    rotation0 = np.asarray(a_T_b0[:3, :3], dtype=float)
    relative = pin.log3(rotation0.T @ np.asarray(a_T_b1[:3, :3], dtype=float))
    pose = np.eye(4)
    pose[:3, :3] = rotation0 @ pin.exp3(float(fraction) * relative)
    pose[:3, 3] = (1.0 - fraction) * np.asarray(a_T_b0[:3, 3], float) + fraction * np.asarray(a_T_b1[:3, 3], float)
    return pose


def to_se3(transform: np.ndarray) -> pin.SE3:
    return pin.SE3(np.asarray(transform[:3, :3], dtype=float).copy(), np.asarray(transform[:3, 3], dtype=float).copy())


def quat_xyzw(rotation: np.ndarray) -> np.ndarray:
    """(3, 3) rotation -> unit quaternion (4,) as x, y, z, w with w >= 0."""
    quaternion = pin.Quaternion(np.asarray(rotation, dtype=float)).coeffs()  # x, y, z, w
    quaternion = np.asarray(quaternion, dtype=float)
    return quaternion if quaternion[3] >= 0 else -quaternion


def quat_xyzw_to_matrix(quaternion) -> np.ndarray:
    """Quaternion (4,) as x, y, z, w (normalised here) -> (3, 3) rotation."""
    x, y, z, w = np.asarray(quaternion, dtype=float) / np.linalg.norm(quaternion)
    return pin.Quaternion(w, x, y, z).toRotationMatrix()


def look_at(eye, target, up=(0.0, 0.0, 1.0)) -> np.ndarray:
    """Pose (4x4) of a camera optical frame (x right, y down, z forward) at ``eye`` looking at ``target``."""
    eye = np.asarray(eye, dtype=float)
    forward = np.asarray(target, dtype=float) - eye
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, np.asarray(up, dtype=float))
    if np.linalg.norm(right) < 1e-9:
        right = np.cross(forward, np.array([1.0, 0.0, 0.0]))
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    pose = np.eye(4)
    pose[:3, 0], pose[:3, 1], pose[:3, 2], pose[:3, 3] = right, down, forward, eye
    return pose


def transform_points(a_T_b: np.ndarray, points_b: np.ndarray) -> np.ndarray:
    """Points (N, 3) in frame b -> (N, 3) in frame a."""
    points_b = np.asarray(points_b, dtype=float)
    return points_b @ a_T_b[:3, :3].T + a_T_b[:3, 3]


def skew(v: np.ndarray) -> np.ndarray:
    """(..., 3) -> (..., 3, 3) cross-product matrices."""
    v = np.asarray(v, dtype=float)
    out = np.zeros(v.shape[:-1] + (3, 3))
    out[..., 0, 1], out[..., 0, 2] = -v[..., 2], v[..., 1]
    out[..., 1, 0], out[..., 1, 2] = v[..., 2], -v[..., 0]
    out[..., 2, 0], out[..., 2, 1] = -v[..., 1], v[..., 0]
    return out


def joint_motions(axes: np.ndarray, prismatic: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Joint motions: unit ``axes`` (J, 3) in the joint frames, ``prismatic`` (J,) bool, readings
    ``q`` (N, J) rad or m -> (N, J, 4, 4): a turn about the axis or a shift along it, the one
    numpy joint motion of every chain kept as URDF origins and axes."""
    axes = np.asarray(axes, float)
    prismatic = np.asarray(prismatic, bool)
    q = np.atleast_2d(np.asarray(q, float))
    out = np.zeros(q.shape + (4, 4))
    out[..., 3, 3] = 1.0
    slides = np.flatnonzero(prismatic)
    turns = np.flatnonzero(~prismatic) if len(slides) else slice(None)
    if len(slides):
        out[:, slides, :3, :3] = np.eye(3)
        translation = out[..., :3, 3]  # a view: one advanced index only, so the axes keep their order
        translation[:, slides] = axes[slides] * q[:, slides, None]
    k = skew(axes[turns])  # (R, 3, 3)
    angle = q[:, turns, None, None]
    # Rodrigues: R = I + sin(q) K + (1 - cos(q)) K^2 for a unit axis with cross-product matrix K.
    rotation = np.sin(angle) * k + (1.0 - np.cos(angle)) * (k @ k)
    rotation[..., [0, 1, 2], [0, 1, 2]] += 1.0
    out[:, turns, :3, :3] = rotation
    return out
