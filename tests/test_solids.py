"""The solid a mesh encloses (rigs.solids): what every truth figure and the simulator's contact checks
are measured against."""
import numpy as np
import trimesh

from rigs.solids import solid_of


def test_faces_deep_inside_a_body_are_matter():
    # A 60 mm cube holding a 20 mm cube's shell (a mesh of several shells, as pybullet_data's xArm6
    # link2): the space around the inner shell is as much the body's as any other.
    outer = trimesh.creation.box((0.06, 0.06, 0.06))
    inner = trimesh.creation.box((0.02, 0.02, 0.02))
    solid = solid_of(trimesh.util.concatenate([outer, inner]), 0.002)
    alone = solid_of(outer, 0.002)
    assert abs(solid.volume - alone.volume) < 1e-9
    # Points beside the inner shell, on both sides, within a cell of it.
    rng = np.random.default_rng(0)
    points = rng.uniform(-0.012, 0.012, (4000, 3))
    near = np.abs(np.abs(points).max(axis=1) - 0.01) < 0.002
    assert near.sum() > 500
    assert solid.contains(points[near]).all()
    assert (solid.signed_distance(points[near]) < 0).all()
    # The outer skin is still read by its faces: just outside is outside, just inside is inside.
    assert not solid.contains(np.array([[0.0301, 0.0, 0.0], [0.0, -0.0305, 0.01]])).any()
    assert solid.contains(np.array([[0.0299, 0.0, 0.0], [0.0, -0.0295, 0.01]])).all()
