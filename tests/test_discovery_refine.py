"""All axes refined at once over random poses: on a synthetic two-joint arm whose sweep estimates are
off, the fit over posed depth points brings them back, and its standard deviations are of the size
of what is left."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import trimesh

from selfmodel.discovery.chain_discovery import DiscoveredArm, DiscoveredJoint
from selfmodel.discovery.refine import AxisRefinement
from selfmodel.discovery.screws import line_distance, screw_motion

TRUE = [(np.array([0.0, 0.0, 1.0]), np.array([0.0, 0.0, 0.0])),
        (np.array([1.0, 0.0, 0.0]), np.array([0.0, 0.0, 0.5]))]


def _link_meshes():
    column = trimesh.creation.box((0.12, 0.08, 0.45))
    column.apply_translation([0.0, 0.0, 0.25])
    arm = trimesh.creation.box((0.06, 0.40, 0.07))  # a boom out along y, turned about x at the top
    arm.apply_translation([0.0, 0.2, 0.5])
    knob = trimesh.creation.box((0.10, 0.05, 0.05))  # something off the boom's symmetry
    knob.apply_translation([0.06, 0.35, 0.52])
    return [column, trimesh.util.concatenate([arm, knob])]


def _posed(meshes, delta, count, rng):
    motion, out = np.eye(4), []
    for (direction, point), mesh, value in zip(TRUE, meshes, delta):
        motion = motion @ screw_motion(direction, point, value)
        samples, _ = trimesh.sample.sample_surface(mesh, count, seed=int(rng.integers(1 << 30)))
        out.append(samples @ motion[:3, :3].T + motion[:3, 3])
    return np.concatenate(out)


@dataclass
class _Frame:
    points: np.ndarray
    valid: np.ndarray


class _Frames:
    """What DepthFrames gives the refinement: per pose one camera's points (n, 1, 3) in the base frame."""

    cameras = ["c"]

    def __init__(self, clouds):
        self.clouds = clouds

    def frame(self, row, camera):
        points = self.clouds[row][:, None, :]
        return _Frame(points, np.ones(points.shape[:2], bool))

    def forget(self, rows):
        pass


def test_the_random_poses_bring_back_an_axis_the_sweeps_placed_off():
    rng = np.random.default_rng(3)
    meshes = _link_meshes()
    noise = 0.001
    q = rng.uniform(-1.2, 1.2, (12, 2))
    clouds = [_posed(meshes, pose, 6000, rng) + rng.normal(0, noise, (12000, 3)) for pose in q]
    home_points = [_posed(meshes, [0.0, 0.0], 1500, rng)[k * 1500:(k + 1) * 1500] for k in range(2)]
    off = np.array([1.0, np.radians(1.5), 0.0])
    off /= np.linalg.norm(off)
    joints = [DiscoveredJoint("a", "revolute", [0.0, 0.0, 1.0], [0.0, 0.0, 0.0], 0, -2, 2, 1, 1, 1, 9, 100, 1),
              DiscoveredJoint("b", "revolute", off.tolist(), [0.0, 0.004, 0.506], 0, -2, 2, 1, 1, 1, 9, 100, 1)]
    chain = DiscoveredArm(joints, [0.0, 0.0], link_points={"a_link": home_points[0].tolist(),
                                                            "tip": home_points[1].tolist()})
    refined = AxisRefinement(voxel=0.004).fit(chain, _Frames(clouds), list(range(len(q))), noise, q)
    report = refined.report
    assert report["poses"] == 12
    assert report["residual_rms_mm_after"] < 0.8 * report["residual_rms_mm_before"], report  # measured 0.97 from 1.43
    assert chain.joints[1].direction == off.tolist()  # the chain it was given stays the sweeps' estimate
    found = refined.chain.joints[1]
    direction = np.array(found.direction)
    error_deg = np.degrees(np.arccos(min(1.0, abs(direction @ TRUE[1][0]))))
    error_mm = 1000 * line_distance(TRUE[1][1], np.array(found.point), direction)
    assert error_deg < 0.3 and error_mm < 1.0, (error_deg, error_mm)  # from 1.5 degrees and 7 mm off
    assert 0 < found.direction_sd_deg < 0.5 and 0 < found.position_sd_mm < 2.0, found
    # The sweeps' own estimate is the starting point the report measures the change from.
    assert report["joints"][1]["turned_deg"] > 1.0 and report["joints"][1]["moved_mm"] > 4.0, report


def test_a_discovered_chain_predicts_where_its_links_go():
    """predict(q) is the chain's forward kinematics: a turn of the first joint by 90 degrees about z
    carries a point 1 m out along x to 1 m out along y, and the second link turns with it."""
    joints = [DiscoveredJoint("a", "revolute", [0.0, 0.0, 1.0], [0.0, 0.0, 0.0], 0, -2, 2, 1, 1, 1, 9, 100, 1),
              DiscoveredJoint("b", "prismatic", [1.0, 0.0, 0.0], [0.0, 0.0, 0.0], 0, -2, 2, 1, 1, 1, 9, 100, 1)]
    chain = DiscoveredArm(joints, [0.0, 0.1])
    motions = chain.predict([[np.pi / 2, 0.3], [0.0, 0.1]])
    assert motions.shape == (2, 2, 4, 4)
    point = np.array([1.0, 0.0, 0.0, 1.0])
    assert np.allclose(motions[0, 0] @ point, [0.0, 1.0, 0.0, 1.0], atol=1e-12)
    # The slide moved 0.2 m from home along x, then the turn carried that to y.
    assert np.allclose(motions[0, 1] @ point, [0.0, 1.2, 0.0, 1.0], atol=1e-12)
    assert np.allclose(motions[1], np.eye(4))  # at home nothing moves
