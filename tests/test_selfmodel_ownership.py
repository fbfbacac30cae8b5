"""Who owns matter that the data cannot assign: links joined by fixed joints move as one body, so
the description decides (the Panda's closed fingers must not take its hand)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pybullet_data
import trimesh

from selfmodel.labels.depth import TrainingData
from selfmodel.labels.description import described_solids
from selfmodel.learn.trainer import described_owners
from selfmodel.model.chain import LinkJoint, ArmLinks

DATA = Path(pybullet_data.getDataPath())


def test_links_on_fixed_and_held_joints_form_one_rigid_group():
    panda = ArmLinks.from_urdf(DATA / "franka_panda" / "panda.urdf", "panda_link0", "panda_hand",
                                {"panda_finger_joint1": 0.0, "panda_finger_joint2": 0.0})
    assert [[panda.link_names[i] for i in group] for group in panda.rigid_groups()] == [
        ["panda_link7", "panda_hand", "panda_leftfinger", "panda_rightfinger"]]
    assert ArmLinks.from_urdf(DATA / "xarm" / "xarm6_robot.urdf", "link_base", "link6").rigid_groups() == []


def two_boxes(fixed: bool) -> tuple[ArmLinks, dict]:
    """base -(revolute)- arm -(fixed or revolute)- hand: the arm a 10 cm cube at its origin, the hand
    a 10 cm cube 30 cm along x (its own origin), the base a cube far below."""
    def joint(name, kind, parent, x):
        origin = np.eye(4)
        origin[:3, 3] = [x, 0.0, 0.0]
        return LinkJoint(name, kind, parent, origin, np.array([0.0, 0.0, 1.0]))

    joints = [joint("j1", "revolute", 0, 0.0), joint("j2", "fixed" if fixed else "revolute", 1, 0.3)]
    spec = ArmLinks(["base", "arm", "hand"], joints, ["j1"] if fixed else ["j1", "j2"])
    box = trimesh.creation.box([0.1, 0.1, 0.1])
    base = trimesh.creation.box([0.1, 0.1, 0.1], transform=trimesh.transformations.translation_matrix([0, 0, -1.0]))
    return spec, described_solids({"base": base, "arm": box, "hand": box})


def readings(spec: ArmLinks, points: np.ndarray) -> TrainingData:
    q = np.zeros((1, spec.dof))
    return TrainingData(q, points.astype(np.float32), np.ones(len(points), np.float32), np.zeros(len(points), np.int32),
                        np.zeros((0, 3), np.float32), np.zeros(0, np.int32), np.full(3, -2.0), np.full(3, 2.0))


def test_a_reading_outside_every_description_goes_to_the_nearest_of_links_that_move_as_one():
    # 1 cm beyond the hand's face, 1 cm beyond the arm's, inside the hand, and 1 cm beyond the base's.
    points = np.array([[0.36, 0.0, 0.0], [0.06, 0.0, 0.0], [0.3, 0.0, 0.0], [0.0, 0.0, -0.94]])
    spec, described = two_boxes(fixed=True)
    assert described_owners(spec, readings(spec, points), described).tolist() == [2, 1, 2, -1]
    # Joined by a moving joint, the data tells them apart: only what a description holds is assigned.
    spec, described = two_boxes(fixed=False)
    assert described_owners(spec, readings(spec, points), described).tolist() == [-1, -1, 2, -1]
