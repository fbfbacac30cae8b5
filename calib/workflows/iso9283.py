"""ISO 9283 pose characteristics, as commonly applied (see FACTS.md).

Arrays in, numbers out, all in metres and radians; the report converts to mm and degrees.

- Pose accuracy ``AP = |mean(attained) - commanded|``; per orientation angle ``APa = mean(a) - a_c``.
- Pose repeatability ``RP = mean(l) + 3 S_l`` with ``l_j = |x_j - mean(x)|`` and ``S_l`` the sample
  standard deviation; per orientation angle ``RPa = 3 S_a``.
- Distance accuracy between two poses ``AD = mean(D_j) - D_c`` and repeatability ``RD = 3 S_D``, with
  ``D_j`` the attained distance in cycle j and ``D_c`` the commanded one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class PoseCharacteristics:
    accuracy: float  # AP, m
    accuracy_xyz: np.ndarray  # (3,) mean attained - commanded, m
    repeatability: float  # RP, m
    orientation_accuracy: np.ndarray | None  # (3,) APa, rad (roll, pitch, yaw about base axes)
    orientation_repeatability: np.ndarray | None  # (3,) RPa, rad


def pose_accuracy(attained: np.ndarray, commanded: np.ndarray) -> tuple[float, np.ndarray]:
    """attained: (n, 3) positions of n cycles; commanded: (3,). Returns (AP, per-axis offset)."""
    offset = np.asarray(attained, float).mean(axis=0) - np.asarray(commanded, float)
    return float(np.linalg.norm(offset)), offset


def pose_repeatability(attained: np.ndarray) -> float:
    """attained: (n, 3), n >= 2. RP = mean(l) + 3 S_l."""
    attained = np.asarray(attained, float)
    distances = np.linalg.norm(attained - attained.mean(axis=0), axis=1)
    return float(distances.mean() + 3.0 * distances.std(ddof=1))


def orientation_characteristics(attained_angles: np.ndarray, commanded_angles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """attained_angles: (n, 3) rad, commanded (3,). Returns (APa (3,), RPa (3,)); angles unwrapped about the command."""
    difference = np.angle(np.exp(1j * (np.asarray(attained_angles, float) - np.asarray(commanded_angles, float))))
    return difference.mean(axis=0), 3.0 * difference.std(axis=0, ddof=1)


def distance_characteristics(attained_a: np.ndarray, attained_b: np.ndarray, commanded_a: np.ndarray,
                             commanded_b: np.ndarray) -> tuple[float, float]:
    """Cycles (n, 3) at two poses and their commanded positions (3,). Returns (AD, RD) in m."""
    attained = np.linalg.norm(np.asarray(attained_a, float) - np.asarray(attained_b, float), axis=1)
    commanded = float(np.linalg.norm(np.asarray(commanded_a, float) - np.asarray(commanded_b, float)))
    return float(attained.mean() - commanded), float(3.0 * attained.std(ddof=1))


def characteristics(attained: np.ndarray, commanded: np.ndarray, attained_angles: np.ndarray | None = None,
                    commanded_angles: np.ndarray | None = None) -> PoseCharacteristics:
    accuracy, offset = pose_accuracy(attained, commanded)
    orientation = (None, None)
    if attained_angles is not None and commanded_angles is not None:
        orientation = orientation_characteristics(attained_angles, commanded_angles)
    return PoseCharacteristics(accuracy, offset, pose_repeatability(attained), *orientation)


def test_plane_points(center: np.ndarray, side: float, plane: int = 0) -> dict[str, np.ndarray]:
    """P1..P5 (3,) for a cube of ``side`` m centred at ``center``, on one of its diagonal planes.

    The plane holds two opposite edges of the cube; its rectangle's corners C1..C4 are
    (-,-,-), (+,+,-), (+,+,+), (-,-,+) in the cube axes for plane 0 (plane 1 mirrors y).
    P1 is the centre; P2..P5 lie on the rectangle's diagonals at 10 % of the diagonal from C1..C4.
    """
    center = np.asarray(center, float)
    sign = 1.0 if plane == 0 else -1.0
    half = side / 2.0
    corners = [np.array([-half, -sign * half, -half]), np.array([half, sign * half, -half]),
               np.array([half, sign * half, half]), np.array([-half, -sign * half, half])]
    points = {"P1": center.copy()}
    for index, corner in enumerate(corners):
        opposite = corners[(index + 2) % 4]
        points[f"P{index + 2}"] = center + corner + 0.1 * (opposite - corner)
    return points


CYCLE_ORDER = ["P1", "P5", "P4", "P3", "P2"]
