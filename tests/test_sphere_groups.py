"""The calibration board kept in the export: one layer of spheres, listed under the tip after the
arm's own, that holds the declared plate (the export's stand-in arm of tests/test_export.py)."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh


def test_a_board_budget_below_one_is_refused():
    from rigs.errors import InputError
    from selfmodel.export.settings import SphereSettings

    with pytest.raises(InputError, match="^board_spheres -1"):
        SphereSettings(board_spheres=-1)
    with pytest.raises(InputError, match="^polish -5: must be >= 0"):
        SphereSettings(polish=-5)


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
    exporter = CollisionExporter(spheres=SphereSettings(max_spheres=24, board_spheres=30, polish=0), pieces=PieceSettings(max_pieces=4),
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
