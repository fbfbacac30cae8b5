"""robot.urdf: the input URDF with each chain joint's ``<origin>`` replaced by
``origin @ exp6(delta) @ exp6(S * zero_offset)`` (the zero offset folded in as a rotation about the
joint axis, a shift along it for a prismatic joint); everything else is kept; meshes are copied
next to it. Its forward kinematics at the joint readings equal the calibrated model's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from calib.model.chain import BatchKinematics
from rigs import urdf as urdf_io
from rigs.errors import InputError
from rigs.transforms import exp6


def joint_origin(origin: np.ndarray, delta: np.ndarray, zero: float, subspace: np.ndarray) -> np.ndarray:
    """Calibrated URDF origin (4, 4) of a joint from its nominal origin, delta (6,) and zero offset."""
    return origin @ exp6(delta) @ exp6(subspace * zero)


def write_urdf(calibration, folder: Path) -> Path:
    """robot.urdf (+ meshes/) of ``calibration`` in ``folder``; returns its path."""
    if calibration.source_urdf is None:
        raise InputError("this calibration was loaded from files; its robot.urdf is already written.")
    source = Path(calibration.source_urdf)
    tree = urdf_io.parse_urdf(source)
    joints = urdf_io.joints(tree, source)
    subspace = BatchKinematics(calibration.chain).subspace
    for i, name in enumerate(calibration.joint_names):
        origin = joint_origin(joints[name].origin, calibration.deltas[i], calibration.zero_offsets[i], subspace[i])
        urdf_io.set_joint_origin(tree, name, origin)
    return urdf_io.copy_self_contained(tree, source.parent, Path(folder))
