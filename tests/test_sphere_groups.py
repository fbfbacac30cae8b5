"""The calibration board as its own sphere group: the tip's body split into arm and plate, each
with its own budget, written together under the tip.

A capsule (the tip link's own body) carries a 4 mm plate (the board), meshed from analytic
occupancy as a learned link is. Judged against the exact solids (analytic signed distance).
"""

from __future__ import annotations

import numpy as np
import pytest
import trimesh

CAPSULE = (0.04, 0.06)  # radius, half length of the axis segment (along z), m
PLATE = np.array([0.09, 0.07, 0.002])  # half extents, m, centred 0.115 m along z (past the capsule's end)
PLATE_Z = 0.115


def capsule_distance(points):
    radius, half = CAPSULE
    axis = np.clip(points[:, 2], -half, half)
    return np.linalg.norm(points - np.stack([np.zeros_like(axis), np.zeros_like(axis), axis], axis=1), axis=1) - radius


def plate_distance(points):
    q = np.abs(points - [0.0, 0.0, PLATE_Z]) - PLATE
    return np.linalg.norm(np.maximum(q, 0), axis=1) + np.minimum(q.max(axis=1), 0)


def stem_distance(points):  # the mount joining them: a 1 cm rod
    axis = np.clip(points[:, 2], 0.0, PLATE_Z)
    return np.linalg.norm(points - np.stack([np.zeros_like(axis), np.zeros_like(axis), axis], axis=1), axis=1) - 0.01


def tip_distance(points):
    return np.minimum(np.minimum(capsule_distance(points), plate_distance(points)), stem_distance(points))


def plate_mesh():
    return trimesh.creation.box(extents=2 * PLATE, transform=trimesh.transformations.translation_matrix([0, 0, PLATE_Z]))


def exact_surface(distance, lo, hi, rng, count=15_000):
    points = rng.uniform(lo, hi, (count * 200, 3))
    near = points[np.abs(distance(points)) < 0.0015][:count]
    step = 1e-5
    for _ in range(3):
        grad = np.stack([(distance(near + step * e) - distance(near - step * e)) / (2 * step) for e in np.eye(3)], axis=1)
        near = near - distance(near)[:, None] * grad / np.maximum(np.linalg.norm(grad, axis=1, keepdims=True) ** 2, 1e-12)
    return near


LO, HI = np.array([-0.11, -0.09, -0.11]), np.array([0.11, 0.09, 0.13])


@pytest.fixture(scope="module")
def tip_body():
    from selfmodel.export.bodies import link_body

    return link_body("tip", lambda p: 1.0 / (1.0 + np.exp(np.clip(tip_distance(p) / 0.0007, -50, 50))), LO, HI, 0.002)


@pytest.fixture(scope="module")
def split(tip_body):
    from selfmodel.export.sphere_groups import split_board

    return split_board(tip_body, plate_mesh(), 0.004)


def test_split_gives_the_plate_its_cells_and_the_arm_the_rest(tip_body, split):
    arm, board = split
    assert board is not None
    assert len(arm.inside) + len(board.inside) == len(tip_body.inside)
    # Every board cell lies in the plate's box grown by the 4 mm asked for; the arm keeps the capsule.
    assert np.all(np.abs(board.inside - [0, 0, PLATE_Z]) <= PLATE + 0.004 + 1e-9)
    assert np.all(board.inside[:, 2] > PLATE_Z - 0.0065)
    assert np.all(capsule_distance(arm.inside[arm.inside[:, 2] < 0.05]) < 0.002)
    assert 0.9 < board.mesh.volume / np.prod(2 * PLATE) < 2.0


def test_a_plate_far_from_the_body_is_no_group(tip_body):
    from selfmodel.export.sphere_groups import split_board

    far = trimesh.creation.box(extents=2 * PLATE, transform=trimesh.transformations.translation_matrix([1.0, 0, 0]))
    arm, board = split_board(tip_body, far, 0.004)
    assert board is None and arm is tip_body


@pytest.fixture(scope="module")
def grouped(tip_body, split):
    from selfmodel.export.sphere_fit import refine_covers
    from selfmodel.export.sphere_groups import BOARD, fit_groups, sphere_target
    from selfmodel.export.spheres import fit_sphere_covers

    arm, board = split
    rng = np.random.default_rng(0)
    targets = [sphere_target("tip", arm, 0.0, rng)]
    board_target = sphere_target("tip", board, 0.0, rng)
    board_target.group = BOARD
    covers, report = fit_groups(targets, 8, [board_target], 40, iterations=200, seed=0)
    # The same 8 spheres for the whole tip, board included, as one link: what the groups replace.
    whole = [sphere_target("tip", tip_body, 0.0, np.random.default_rng(0))]
    single, _ = refine_covers(whole, fit_sphere_covers(whole, 8, rng=np.random.default_rng(0)), iterations=200)
    return covers, report, single["tip"]


def _protrusion_p95(cover, distance, rng):
    shell = cover.surface_points(400, rng)
    return float(np.percentile(np.maximum(distance(shell), 0.0), 95))


def test_groups_are_counted_and_listed_under_the_tip(grouped):
    covers, report, _ = grouped
    cover, names = covers["tip"], report["groups"]["tip"]
    assert set(covers) == {"tip"} and len(names) == len(cover.radii)
    assert report["spheres"]["arm"] == names.count("arm") and 1 <= names.count("arm") <= 8
    assert report["spheres"]["board"] == names.count("board") and 1 <= names.count("board") <= 40
    assert names == sorted(names)  # the arm's spheres first, then the board's


def test_the_board_group_holds_the_plate_and_frees_the_arm(grouped):
    covers, report, single = grouped
    rng = np.random.default_rng(3)
    cover, names = covers["tip"], np.array(report["groups"]["tip"])
    surface = exact_surface(tip_distance, LO, HI, rng)
    gaps = cover.outside_distance(surface)
    # Every point of the exact surface held but for seams between spheres at the plate's rim.
    assert np.mean(gaps <= 1e-9) > 0.99 and gaps.max() < 0.003, (np.mean(gaps <= 1e-9), gaps.max())
    from selfmodel.export.spheres import SphereCover

    board = SphereCover(cover.centres[names == "board"], cover.radii[names == "board"])
    arm = SphereCover(cover.centres[names == "arm"], cover.radii[names == "arm"])
    board_p95 = _protrusion_p95(board, tip_distance, rng)
    arm_p95 = _protrusion_p95(arm, tip_distance, rng)
    single_p95 = _protrusion_p95(single, tip_distance, rng)
    # Measured: board 15.4 mm, arm 11.1 mm, against 41.0 mm for 8 spheres over capsule and plate
    # together (they stand far off the plate, and the capsule's spheres grow to reach it).
    assert board_p95 < 0.022, board_p95
    assert arm_p95 < 0.5 * single_p95, (arm_p95, single_p95)


def test_a_negative_board_budget_is_refused():
    from rigs.errors import InputError
    from selfmodel.export.settings import SphereSettings

    with pytest.raises(InputError, match="^board_spheres -1"):
        SphereSettings(board_spheres=-1)


@pytest.fixture(scope="module")
def board_export(tmp_path_factory):
    """The export's stand-in arm (tests/test_export.py) with a declared board on its tip, link2."""
    from test_export import URDF, StandInModel

    from selfmodel.export.exporter import CollisionExporter
    from selfmodel.export.settings import BodySettings, PieceSettings, SphereSettings

    model = StandInModel()
    # A 5 x 4 board of 20 mm squares facing along the tip's x axis, 5 mm past link2's end.
    rotation = trimesh.transformations.rotation_matrix(np.pi / 2, [0, 1, 0])
    model.board = {"squares": [5, 4], "square_m": 0.02,
                   "tip_T_board_nominal": (trimesh.transformations.translation_matrix([0.359, 0, 0]) @ rotation).tolist()}
    exporter = CollisionExporter(spheres=SphereSettings(max_spheres=24, board_spheres=30), pieces=PieceSettings(max_pieces=4),
                                 body=BodySettings(voxel=0.003), srdf_samples=2000, seed=0)
    fitted = exporter.fit(model)
    out = tmp_path_factory.mktemp("board") / "collision"
    report = fitted.save(out, URDF, exporter.srdf_samples)
    return out, report, fitted, model


def test_the_board_gets_its_own_spheres_listed_under_the_tip(board_export):
    import xml.etree.ElementTree as ET

    import yaml

    from selfmodel.export.spheres import SphereCover
    from selfmodel.labels.description import board_mesh

    out, report, fitted, model = board_export
    assert 1 <= report["spheres_board"] <= 30 and report["links"]["link2"]["spheres_board"] == report["spheres_board"]
    assert report["spheres_arm"] <= 24
    assert report["spheres_arm"] + report["spheres_board"] == report["spheres_total"]
    # A stated mount, not a calibration's; the board kept, as by default.
    assert {key: report["board"][key] for key in ("mount", "fitted_from", "treatment")} == {
        "mount": "nominal", "fitted_from": None, "treatment": "keep"}
    spheres = yaml.safe_load((out / "curobo_spheres.yml").read_text())["collision_spheres"]
    robot = yaml.safe_load((out / "curobo_robot.yml").read_text())["robot_cfg"]["kinematics"]
    links = {link.get("name") for link in ET.parse(out / "robot.urdf").getroot().iter("link")}
    assert set(spheres) <= links and set(robot["collision_link_names"]) <= links
    assert sum(len(items) for items in spheres.values()) == report["spheres_total"]
    assert robot["collision_spheres"] == spheres
    tip = spheres["link2"]
    board = SphereCover(np.array([s["center"] for s in tip[-report["spheres_board"]:]]),
                        np.array([s["radius"] for s in tip[-report["spheres_board"]:]]))
    # The whole tip's spheres hold the real plate; the board's own are small, as a thin plate needs.
    plate = board_mesh(model.board)
    points = np.asarray(plate.sample(5000, seed=2))
    gaps = fitted.links["link2"].spheres.outside_distance(points)
    assert np.mean(gaps <= 1e-9) > 0.99 and gaps.max() < 0.002, (np.mean(gaps <= 1e-9), gaps.max())
    # A single layer of 30 spheres over a 124 x 105 mm plate grown by the margin: 14 mm each.
    assert np.median(board.radii) < 0.016, board.radii
    from scipy.spatial import cKDTree

    distance, _ = cKDTree(np.asarray(plate.sample(40_000, seed=4))).query(board.centres)
    assert distance.max() < 0.012, distance.max()
