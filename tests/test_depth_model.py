"""The simulated stereo depth camera has the faults real ones have, each where physics puts it."""

from __future__ import annotations

import numpy as np
import pytest

from rigs import load_rig
from rigs.depth_model import DepthModel, stereo_shadow
from rigs.errors import InputError

K = np.array([[600.0, 0, 160], [0, 600.0, 120], [0, 0, 1]])
GREY = np.full((240, 320, 3), 160, np.uint8)
STEREO = DepthModel("stereo", baseline_m=0.05, subpixel_px=0.08, flying_fraction=0.5)


def measure(depth, rgb=GREY, model=STEREO, seed=0):
    return model.measure(depth, rgb, K, 0.1, 6.0, np.random.default_rng(seed))


def test_noise_grows_with_the_square_of_the_distance():
    sigmas = {}
    for z in (1.0, 2.0):
        reading = measure(np.full((240, 320), z))
        valid = reading > 0
        sigmas[z] = float(np.std(reading[valid] - z))
    expected = {z: z ** 2 * 0.08 / (600 * 0.05) for z in sigmas}  # sigma_z = z^2 s / (f b)
    for z in sigmas:
        assert sigmas[z] == pytest.approx(expected[z], rel=0.1)
    assert sigmas[2.0] / sigmas[1.0] == pytest.approx(4.0, rel=0.15)
    assert STEREO.sigma_at_1m(600.0) == pytest.approx(0.08 / 30.0)


def test_readings_come_in_millimetre_steps_and_within_range():
    reading = measure(np.full((240, 320), 1.2345))
    valid = reading[reading > 0]
    assert np.allclose(valid * 1000, np.round(valid * 1000), atol=1e-3)
    assert not measure(np.full((240, 320), 7.0)).any()  # beyond the far limit: no reading


def test_a_plane_seen_edge_on_has_holes_a_facing_one_has_none():
    v, u = np.mgrid[0:240, 0:320].astype(float)
    facing = np.full((240, 320), 1.5)
    # A plane z = 1.5 + tan(84 deg) X: its normal is 84 degrees from the optical axis, and the
    # angle to each pixel's line of sight varies across the image.
    x = (u - 160) / 600
    slope = np.tan(np.radians(84))
    tilted = 1.5 / (1 - slope * x)
    tilted = np.where((tilted > 0.3) & (tilted < 5.0), tilted, 0.0)
    normal = np.array([-slope, 0.0, 1.0]) / np.hypot(slope, 1.0)
    sight = np.stack([x, (v - 120) / 600, np.ones_like(x)], axis=-1)
    angle = np.degrees(np.arccos(np.abs(sight @ normal) / np.linalg.norm(sight, axis=-1)))
    assert (measure(facing) == 0).mean() < 0.01
    reading = measure(tilted)
    seen = tilted > 0
    assert (reading[seen & (angle > 81)] == 0).mean() > 0.9  # beyond grazing_deg (80) plus the blur of normals
    assert (reading[seen & (angle < 70)] == 0).mean() < 0.05  # below grazing_deg - 10: no grazing holes


def test_dark_surfaces_read_nothing_in_blobs():
    rgb = GREY.copy()
    rgb[:, :160] = 5  # black anodising on the left half
    reading = measure(np.full((240, 320), 1.0), rgb)
    dark_holes = (reading[:, :150] == 0).mean()
    assert 0.6 < dark_holes < 0.95
    assert (reading[:, 170:] == 0).mean() < 0.01
    # Blobs, not salt: a hole's neighbour is far more often a hole than the hole rate says.
    holes = reading[:, :150] == 0
    neighbour = holes[:, 1:] & holes[:, :-1]
    assert neighbour.mean() / holes[:, 1:].mean() > dark_holes + 0.05


def test_background_beside_a_foreground_edge_is_in_the_stereo_shadow():
    depth = np.full((240, 320), 2.0)
    depth[:, 200:260] = 1.0  # a post 1 m away in front of a wall 2 m away
    shadow = stereo_shadow(np.where(depth > 0, 600 * 0.05 / depth, 0.0))
    width = 600 * 0.05 * (1 / 1.0 - 1 / 2.0)  # 15 px: the second imager at +x cannot see there
    columns = np.flatnonzero(shadow[120])
    assert columns.min() >= 200 - width - 1 and columns.max() < 200
    assert len(columns) == pytest.approx(width, abs=2)
    assert not shadow[:, 260:].any()  # the other side of the post is seen by both imagers


def test_flying_pixels_lie_between_foreground_and_background_only_along_edges():
    depth = np.full((240, 320), 2.0)
    depth[:, 100:] = 1.0
    reading = measure(depth, model=DepthModel("stereo", baseline_m=0.05, subpixel_px=0.01, flying_fraction=1.0))
    between = (reading > 1.05) & (reading < 1.95)
    assert between[:, 100].mean() > 0.8  # the foreground's edge pixels mix in the background
    assert not between[:, :99].any() and not between[:, 101:].any()
    assert (reading[:, 88:100] == 0).all()  # the background's edge pixels are in the stereo shadow


def test_the_gaussian_model_is_the_ideal_camera_of_before():
    depth = np.full((10, 10), 1.0)
    depth[0, 0] = 0.0
    model = DepthModel("gaussian", relative_noise=0.01)
    reading = model.measure(depth, np.zeros((10, 10, 3), np.uint8), K, 0.1, 4.0, np.random.default_rng(1))
    expected = np.where(depth > 0, depth * (1 + 0.01 * np.random.default_rng(1).standard_normal(depth.shape)), 0)
    assert np.array_equal(reading, expected.astype(np.float32))
    assert model.no_depth == "free" and STEREO.no_depth == "unknown"


def test_a_builtin_rig_uses_the_stereo_model_on_a_table_in_a_room():
    rig = load_rig("xarm6-cameras-realsense")
    assert all(c.depth_model.kind == "stereo" for c in rig.cameras)
    assert rig.scene.mount_plane_z == 0.0 and {b.name for b in rig.scene.boxes} >= {"table", "floor"}


def test_bad_depth_model_keys_are_one_sentence(tmp_path):
    text = (load_rig("xarm6-cameras-realsense").source.read_text()
            .replace('subpixel_px = 0.08', 'subpixel_px = 0.08\nflying_fraction = 2.0', 1))
    path = tmp_path / "rig.toml"
    path.write_text(text)
    with pytest.raises(InputError, match=r"cameras\[0\]\.depth\.flying_fraction.*probability"):
        load_rig(path)
    path.write_text(text.replace('model = "stereo"', 'model = "tof"', 1).replace('\nflying_fraction = 2.0', ''))
    with pytest.raises(InputError, match="should be one of gaussian, stereo"):
        load_rig(path)
