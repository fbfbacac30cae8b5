"""Depth labels claim matter only as far behind a reading as the noise needs.

The 2-joint box arm carries a 3 mm fin its URDF lacks, seen by cameras whose depth noise is about
5 mm at the arm: a reading says where a surface is, within the noise, and nothing about how thick the
body behind it is. Labels that call space occupied well behind a reading (main's band as wide as
the free clearance and a 12 mm shell behind it) make a thin part, a grazing ray's short chord or the
unseen side of a base centimetres too thick. Measured against the simulated truth (evaluation only).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from capture.session import load_session
from capture.simulate import capture_simulated
from rigs import load_rig
from selfmodel.depth_labels import LabelSettings, depth_training_data
from selfmodel.metrics import label_errors

DATA = Path(__file__).parent / "data" / "selfmodel"
# The labels before: the band labelled by side as wide as the free clearance, and an occupied shell.
MAIN = {"side_sigmas": 2.5, "shell_samples": 1}


@pytest.fixture(scope="module")
def fin_session(tmp_path_factory):
    root = tmp_path_factory.mktemp("fin")
    return load_session(capture_simulated(load_rig(DATA / "two_joint_box_fin.toml"), 30, 1, root / "train"))


def _errors(session, seed: int, **overrides) -> dict:
    settings = LabelSettings(hit_rays_per_image=300, miss_rays_per_image=100, **overrides)
    data = depth_training_data([session], settings, np.random.default_rng(seed))
    return label_errors(data, session, np.random.default_rng(seed), far=0.010, deep=0.010)


@pytest.mark.parametrize("seed", [0, 2])
def test_occupied_labels_stay_near_the_readings_and_free_ones_out_of_the_body(fin_session, seed):
    """Occupied labels more than 10 mm outside the true body: 0.9 % with the defaults against 2.2 %
    with main's labels (seeds 0-2, within 0.05 % of each other); free labels more than 10 mm inside
    it stay rare (0.06 %): the clearance in front of a reading is what it was."""
    new, main = _errors(fin_session, seed), _errors(fin_session, seed, **MAIN)
    assert new["occupied_labels_far_outside"] < 0.6 * main["occupied_labels_far_outside"], (new, main)
    assert new["occupied_labels_far_outside"] < 0.015, new
    assert new["free_labels_deep_inside"] < 0.002, new


def test_side_band_never_exceeds_the_clearance(fin_session):
    """A side band wider than the clearance would label free space inside the noise: it is clipped."""
    wide = _errors(fin_session, 0, side_sigmas=4.0, shell_samples=0)
    same = _errors(fin_session, 0, side_sigmas=2.5, shell_samples=0)
    assert wide["occupied_labels"] == same["occupied_labels"] and wide["free_labels"] == same["free_labels"]
    assert abs(wide["occupied_labels_far_outside"] - same["occupied_labels_far_outside"]) < 1e-9


def test_default_trainer_learns_the_thin_fin_thin(fin_session):
    """The fin is 3 mm thick; points 8-15 mm beside it are free. A default-trained model calls 2-4 %
    of them occupied (seeds 3, 5, 11: 4.4, 3.8, 2.3 %) and the fin's own plane occupied (99.9-100 %);
    main's trainer (wide band, shell, even weights) called 13.8, 5.8 and 12.0 % of the flanks occupied."""
    import torch

    from selfmodel.training import SelfModelTrainer

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)

    def beside(lo: float, hi: float, count: int = 4000) -> np.ndarray:  # box frame: the fin spans x 0.02-0.18, z 0.03-0.11
        y = rng.uniform(lo, hi, count) * rng.choice([-1, 1], count)
        return np.c_[rng.uniform(0.04, 0.16, count), y, rng.uniform(0.05, 0.10, count)]

    flank, core = beside(0.008, 0.015), beside(0.0, 0.001)
    model = SelfModelTrainer(steps=400, seed=3, batch=2048, prior_batch=512, threads=1, device="cpu",
                             labels=LabelSettings(hit_rays_per_image=300, miss_rays_per_image=100)).fit([fin_session]).model
    flank_occupied = np.mean(model.link_occupancy("box", flank) > 0.5)
    core_occupied = np.mean(model.link_occupancy("box", core) > 0.5)
    assert flank_occupied < 0.08 and core_occupied > 0.95, (flank_occupied, core_occupied)


def test_readings_at_the_mount_plane_are_the_plane_except_where_the_arm_can_be():
    """The base stands on the plane: the lowest centimetres of its sides read as high as the plane's
    noise band. Where the arm can be, such a reading is the arm's (an arm hit, its ray free only to
    its own band); elsewhere it is the plane, free down to it."""
    from types import SimpleNamespace

    from selfmodel.depth_labels import LabelSettings, pixel_rays, read_depth

    width, height = 64, 48
    K = np.array([[60.0, 0, width / 2], [0, 60.0, height / 2], [0, 0, 1]])
    # A camera 1 m out and 1 m up, looking down at the origin (optical z forward, y down).
    forward = -np.array([0.0, -1.0, 1.0]) / np.sqrt(2)
    right = np.array([1.0, 0.0, 0.0])
    down = np.cross(forward, right)
    pose = np.eye(4)
    pose[:3, :3], pose[:3, 3] = np.column_stack([right, down, forward]), [0.0, -1.0, 1.0]
    camera = SimpleNamespace(info=SimpleNamespace(K=K), base_T_camera=pose, depth_sigma=lambda d: 0.005 * np.asarray(d))
    v, u = np.mgrid[0:height, 0:width]
    rays = pixel_rays(K, u.ravel(), v.ravel()) @ pose[:3, :3].T
    # Every pixel reads a surface 4 mm above the plane z = 0 (inside the plane's noise band).
    depth = ((0.004 - pose[2, 3]) / rays[:, 2]).reshape(height, width)
    points = pose[:3, 3] + depth.reshape(-1, 1) * rays

    def arm(p):
        return np.all(np.abs(p[:, :2]) < 0.1, axis=1)

    plain = read_depth(depth, camera, LabelSettings(), 0.0)
    kept = ~plain.edge  # a coarse image of a slanted plane: steep rows read as edges
    assert kept.mean() > 0.5 and plain.table[kept].all()
    reading = read_depth(depth, camera, LabelSettings(), 0.0, arm)
    at_arm = arm(points).reshape(height, width) & kept
    elsewhere = ~arm(points).reshape(height, width) & kept
    assert at_arm.sum() > 20 and elsewhere.sum() > 20
    assert not reading.table[at_arm].any() and reading.table[elsewhere].all()
    # The arm's readings are free only to their own band, in front of the reading; the plane's to the plane.
    assert np.all(reading.free_end[at_arm] < depth[at_arm])
    np.testing.assert_allclose(reading.free_end[elsewhere], plain.free_end[elsewhere])
    assert np.all(plain.free_end[at_arm] > depth[at_arm])
