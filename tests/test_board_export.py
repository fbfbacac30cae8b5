"""A calibration board on the tip, kept or dropped by the export, as a planner loads the result.

The stand-in arm of test_export.py, with its recorded poses (test_planner_models.py), carries a
5 x 4 board of 20 mm squares 5.5 mm past the end of its tip, link2. With ``--board keep`` the
plate is one box of its exact size grown by the margin and one layer of spheres; with ``drop`` no
piece and no sphere lies on it and the tip keeps its own body.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest
import trimesh
import yaml
from test_export import JOINTS, URDF, signed_distance, surface_samples
from test_planner_models import RecordedStandIn

BOARD = {"squares": [5, 4], "square_m": 0.02,
         "tip_T_board_nominal": (trimesh.transformations.translation_matrix([0.359, 0, 0])
                                 @ trimesh.transformations.rotation_matrix(np.pi / 2, [0, 1, 0])).tolist()}


def _exporter(board: str, voxel: float = 0.003, iterations: int = 250):
    from selfmodel.export.exporter import CollisionExporter
    from selfmodel.export.settings import BodySettings, PieceSettings, SphereSettings

    return CollisionExporter(spheres=SphereSettings(max_spheres=24, iterations=iterations, polish=0), pieces=PieceSettings(max_pieces=4),
                             body=BodySettings(voxel=voxel, board=board), srdf_samples=1000, seed=0)


def _export(tmp_path_factory, board: str):
    model = RecordedStandIn()
    model.board = dict(BOARD)
    exporter = _exporter(board)
    fitted = exporter.fit(model)
    out = tmp_path_factory.mktemp(f"board-{board}") / "collision"
    return out, fitted.save(out, URDF, exporter.srdf_samples), fitted


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    return _export(tmp_path_factory, "keep")


@pytest.fixture(scope="module")
def dropped(tmp_path_factory):
    return _export(tmp_path_factory, "drop")


def _plate():
    from selfmodel.export.board import PlateBox
    from selfmodel.labels.description import board_mesh

    return PlateBox.of(board_mesh(BOARD))


def _plate_points(count: int, seed: int) -> np.ndarray:
    """Points inside the plate (tip frame) more than 10 mm from link2's own box: the board alone."""
    plate = _plate()
    local = np.random.default_rng(seed).uniform(-0.5, 0.5, (count * 4, 3)) * plate.extents
    points = local @ plate.tip_T_box[:3, :3].T + plate.tip_T_box[:3, 3]
    return points[signed_distance("link2", points) > 0.01][:count]


def _written_spheres(out) -> dict:
    return yaml.safe_load((out / "curobo_spheres.yml").read_text())["collision_spheres"]


def _written_pieces(out, link: str) -> list[trimesh.Trimesh]:
    root = ET.parse(out / "robot.urdf").getroot()
    element = next(e for e in root.findall("link") if e.get("name") == link)
    return [trimesh.load(out / c.find("geometry/mesh").get("filename"), force="mesh")
            for c in element.findall("collision") if c.find("geometry/mesh") is not None]


def _in_any(meshes: list[trimesh.Trimesh], points: np.ndarray, tolerance: float = 1e-6) -> np.ndarray:
    """(N,) bool: inside (or within ``tolerance`` m of) some convex piece, by its face planes."""
    inside = np.zeros(len(points), dtype=bool)
    for mesh in meshes:
        heights = (points[:, None] - mesh.triangles_center[None]) * mesh.face_normals[None]
        inside |= np.all(heights.sum(axis=2) <= tolerance, axis=1)
    return inside


@pytest.mark.slow
def test_kept_board_is_one_box_of_the_plates_size_and_a_thin_layer_of_spheres(kept):
    out, report, fitted = kept
    plate = _plate()
    margin = fitted.margins["link2"]  # the tip's, as its pieces grow
    root = ET.parse(out / "robot.urdf").getroot()
    tip = next(e for e in root.findall("link") if e.get("name") == "link2")
    boxes = [c for c in tip.findall("collision") if c.find("geometry/box") is not None]
    assert len(boxes) == 1 and boxes[0].get("name") == "link2_board"
    size = np.array([float(x) for x in boxes[0].find("geometry/box").get("size").split()])
    np.testing.assert_allclose(np.sort(size), np.sort(plate.extents + 2 * margin), atol=1e-6)
    # The export's view draws the box as the planner loads it.
    from selfmodel.export.scene import collision_pieces

    drawn = collision_pieces(out / "robot.urdf")["link2"]
    assert len(drawn) == len(fitted.links["link2"].pieces) + 1
    assert abs(drawn[-1].volume - np.prod(plate.extents + 2 * margin)) < 1e-9
    # The learned pieces no longer hold the board: none reaches the plate's far corners.
    corners = _plate_points(2000, seed=1)
    assert not np.any(_in_any(_written_pieces(out, "link2"), corners))
    # The layer: every sphere in the plate's mid-plane, all one radius, the plate grown by the margin held.
    board = report["board"]
    assert board["treatment"] == "keep" and board["spheres"] == report["spheres_board"] <= 256
    written = _written_spheres(out)["link2"][-report["spheres_board"]:]
    centres = np.array([s["center"] for s in written])
    radii = np.array([s["radius"] for s in written])
    thin = int(np.argmin(plate.extents))
    assert np.abs(plate.local(centres)[:, thin]).max() < 1e-6 and np.ptp(radii) < 1e-9
    grown = plate.grown(margin)
    local = np.random.default_rng(2).uniform(-0.5, 0.5, (20_000, 3)) * grown.extents
    points = local @ grown.tip_T_box[:3, :3].T + grown.tip_T_box[:3, 3]
    assert fitted.links["link2"].spheres.outside_distance(points).max() < 1e-6
    # Measured 3.8 times the plate's volume (255 spheres of 6.5 mm); the fitted board group it
    # replaces held this plate at 6.7 times with 64 spheres, at 8.7 with 30.
    assert board["spheres_union_volume_ratio"] < 4.5, board
    assert "cannot be thinner" in board["note"] and "--board drop" in board["note"]
    assert report["recorded_poses_in_collision"]["pieces"]["poses"] == 0
    assert report["recorded_poses_in_collision"]["spheres"]["poses"] == 0


@pytest.mark.slow
def test_dropped_board_leaves_no_piece_or_sphere_on_the_plate_and_the_tip_its_own_body(dropped):
    from selfmodel.export.spheres import SphereCover

    out, report, fitted = dropped
    assert report["board"]["treatment"] == "drop" and report["spheres_board"] == 0
    root = ET.parse(out / "robot.urdf").getroot()
    assert not list(root.iter("box")) or all(c.get("name") != "link2_board" for c in root.iter("collision"))
    on_plate = _plate_points(3000, seed=3)
    assert not np.any(_in_any(_written_pieces(out, "link2"), on_plate))
    written = _written_spheres(out)["link2"]
    spheres = SphereCover(np.array([s["center"] for s in written]), np.array([s["radius"] for s in written]))
    # No sphere is placed for the plate; what of it the tip's own spheres hold is their bulge past
    # the tip's end, where the kept layer holds all of it.
    assert not np.any(_plate().grown(0.006).contains(spheres.centres))
    assert np.mean(spheres.contains(on_plate)) < 0.1, np.mean(spheres.contains(on_plate))  # measured 1.6 %
    # The tip's own surface (its true box) is still held by its pieces and its spheres.
    own = surface_samples("link2", 5000, np.random.default_rng(4))
    inside = _in_any(_written_pieces(out, "link2"), own)
    assert inside.mean() > 0.999, inside.mean()
    assert np.mean(spheres.contains(own)) > 0.99
    assert 0 < report["board"]["tip_body_volume_cm3"] < report["board"]["tip_body_volume_with_board_cm3"]
    assert report["recorded_poses_in_collision"]["pieces"]["poses"] == 0


@pytest.mark.slow
def test_a_point_in_the_plate_collides_in_the_planners_world_only_when_the_board_is_kept(kept, dropped):
    from rigs.transforms import make_transform
    from selfmodel.export.world import Box, CollisionWorld

    q = np.array([0.4, 0.2])
    probe_tip = _plate_points(1, seed=5)[0]
    own_tip = np.array([0.2, 0.0, 0.0])  # inside link2's own box: the negative control for drop

    def hits(out, point_tip):
        world = CollisionWorld(out / "robot.urdf", JOINTS, "base", srdf=out / "robot.srdf")
        base_T_tip = world.link_pose("link2", q)
        probe = Box("probe", np.full(3, 0.001), make_transform(base_T_tip[:3, :3] @ point_tip + base_T_tip[:3, 3]))
        world = CollisionWorld(out / "robot.urdf", JOINTS, "base", srdf=out / "robot.srdf", obstacles=[probe])
        return ("link2", "obstacle:probe") in world.colliding_pairs(q)

    assert hits(kept[0], probe_tip)
    assert not hits(dropped[0], probe_tip)
    assert hits(dropped[0], own_tip) and hits(kept[0], own_tip)


def test_without_a_declared_board_keep_and_drop_change_nothing():
    from selfcal.cli_export import board_lines

    # A coarse grid and the greedy cover as it is: the two fits only need to be compared.
    kept, dropped = (_exporter(board, voxel=0.006, iterations=0).fit(RecordedStandIn()) for board in ("keep", "drop"))
    assert kept.board is None and dropped.board is None
    for link in kept.links:
        np.testing.assert_array_equal(kept.links[link].spheres.radii, dropped.links[link].spheres.radii)
        assert [p.vertices.tolist() for p in kept.links[link].pieces] == [p.vertices.tolist() for p in dropped.links[link].pieces]
        assert kept.links[link].board_box is None
    assert board_lines(None, "drop") == ["no calibration board declared in the session: --board drop changed nothing"]


def test_a_bad_board_value_and_board_spheres_with_drop_are_refused_with_exit_2(tmp_path):
    from typer.testing import CliRunner

    from rigs.errors import InputError
    from selfcal.cli import app
    from selfmodel.export.settings import BodySettings

    with pytest.raises(InputError, match="^board 'off': keep"):
        BodySettings(board="off")
    runner = CliRunner()
    base = ["selfmodel", "export", str(tmp_path / "model"), "--out", str(tmp_path / "new")]
    result = runner.invoke(app, base + ["--board", "off"])
    assert result.exit_code == 2 and "--board 'off': keep" in result.output, result.output
    result = runner.invoke(app, base + ["--board", "drop", "--board-spheres", "30"])
    assert result.exit_code == 2 and "--board-spheres 30" in result.output and "--board drop" in result.output
    result = runner.invoke(app, base + ["--board-spheres", "0"])
    assert result.exit_code == 2 and "at least one sphere" in result.output
    assert not (tmp_path / "new").exists()


class _BoardOnLink1(RecordedStandIn):
    """The stand-in recorded with joint2 held at one angle, so link2 and its board stand still in
    link1's frame at every pose and link1's network learns them too (as a plate turning about the
    last joint looks still from the link before it): link1's occupancy is its cylinder, link2's box
    grown to reach the plate (a mount) and the plate, one body."""

    Q2 = 0.4

    def __init__(self):
        from selfmodel.model.chain import ArmLinks, link_poses_numpy

        super().__init__(recorded=[[a, self.Q2] for a in (-2.5, -1.0, 0.0, 1.2, 2.6)])
        chain = ArmLinks.from_urdf(URDF, "base", "link2")
        poses = link_poses_numpy(chain, np.array([[0.0, self.Q2]]))[0]
        names = chain.link_names
        self.link1_T_tip = np.linalg.inv(poses[names.index("link1")]) @ poses[names.index("link2")]
        corners = np.vstack([trimesh.creation.box(_plate().extents, _plate().tip_T_box).vertices,
                             np.vstack(super().link_bounds("link2"))])
        corners = corners @ self.link1_T_tip[:3, :3].T + self.link1_T_tip[:3, 3]
        lo, hi = super().link_bounds("link1")
        self.link1_bounds = np.minimum(lo, corners.min(axis=0) - 0.01), np.maximum(hi, corners.max(axis=0) + 0.01)

    def link_bounds(self, link: str):
        return self.link1_bounds if link == "link1" else super().link_bounds(link)

    def link_occupancy(self, link: str, points: np.ndarray) -> np.ndarray:
        own = super().link_occupancy(link, points)
        if link != "link1":
            return own
        tip_T_link1 = np.linalg.inv(self.link1_T_tip)
        in_tip = np.asarray(points) @ tip_T_link1[:3, :3].T + tip_T_link1[:3, 3]
        # link2's box reaching the plate (it stands 5.5 mm past the box), as a mount joins them
        mounted = signed_distance("link2", in_tip, grow=0.006)
        own = np.maximum(own, 1.0 / (1.0 + np.exp(np.clip(mounted / 0.001, -50, 50))))
        local = _plate().local(in_tip)
        outside = np.abs(local) - 0.5 * _plate().extents
        distance = np.linalg.norm(np.maximum(outside, 0), axis=1) + np.minimum(outside.max(axis=1), 0)
        return np.maximum(own, 1.0 / (1.0 + np.exp(np.clip(distance / 0.001, -50, 50))))


def test_the_board_held_by_the_link_before_the_tip_leaves_that_links_body_too():
    """Where the board stands still in another link's frame at every recorded pose, that link's
    network may learn it; the export takes it out of that link as out of the tip, and the link keeps
    its own body. Without a declared board the same body keeps the plate (the negative control)."""
    model = _BoardOnLink1()
    plate_in_link1 = _plate_points(2000, seed=6) @ model.link1_T_tip[:3, :3].T + model.link1_T_tip[:3, 3]
    own = surface_samples("link1", 3000, np.random.default_rng(7))

    def held(fitted) -> tuple[float, float]:
        link = fitted.links["link1"]
        pieces = np.zeros(len(plate_in_link1), dtype=bool)
        for piece in link.pieces:
            pieces |= piece.contains(plate_in_link1)
        return float(np.mean(pieces)), float(np.mean(link.spheres.contains(plate_in_link1)))

    model.board = None
    plain = _exporter("drop", voxel=0.003, iterations=0).fit(model)
    assert min(held(plain)) > 0.6, held(plain)  # no board declared: link1 keeps what it learned (measured 0.71, 0.95)
    model.board = dict(BOARD)
    fitted = _exporter("drop", voxel=0.003, iterations=0).fit(model)
    assert max(held(fitted)) < 0.02, held(fitted)
    taken = fitted.board["held_by_other_links_cm3"]
    assert set(taken) == {"link1"} and taken["link1"] > 0.5 * 1e6 * _plate().volume, taken
    assert np.mean(fitted.links["link1"].spheres.contains(own)) > 0.99
    assert np.mean(fitted.links["link1"].body.contains(own, 1)) > 0.99


def test_a_kept_boards_box_grows_by_the_floor_at_a_fitted_mount_and_as_the_tip_at_the_nominal():
    """The plate is as declared: at a mount a board calibration fitted, its box needs only the
    placement error (the margin's floor); at the nominal mount it grows as the tip does; a given
    margin is every part's."""
    from selfmodel.export.exporter import CollisionExporter
    from selfmodel.export.settings import MarginSettings

    nominal, fitted = RecordedStandIn(), RecordedStandIn()
    nominal.board = dict(BOARD)
    fitted.board = {**BOARD, "tip_T_board_fitted": BOARD["tip_T_board_nominal"]}
    auto = _exporter("keep")
    assert auto._box_margin(fitted, 0.0032) == MarginSettings().floor == 0.001
    assert auto._box_margin(nominal, 0.0032) == 0.0032
    given = CollisionExporter(margin=MarginSettings(0.002))
    assert given._box_margin(fitted, 0.0032) == given._box_margin(nominal, 0.0032) == 0.002


def test_a_link_whose_learned_body_is_all_board_is_refused_with_a_sentence():
    """A link the board leaves empty learned the board, not itself: one sentence naming the link,
    not a fit of a link with no geometry."""
    from rigs.errors import InputError

    class AllBoard(_BoardOnLink1):
        def link_occupancy(self, link: str, points: np.ndarray) -> np.ndarray:
            if link != "link1":
                return super().link_occupancy(link, points)
            tip_T_link1 = np.linalg.inv(self.link1_T_tip)
            local = _plate().local(np.asarray(points) @ tip_T_link1[:3, :3].T + tip_T_link1[:3, 3])
            outside = np.abs(local) - 0.5 * _plate().extents - 0.002  # the plate as depth learns it, thicker
            distance = np.linalg.norm(np.maximum(outside, 0), axis=1) + np.minimum(outside.max(axis=1), 0)
            return 1.0 / (1.0 + np.exp(np.clip(distance / 0.001, -50, 50)))

    model = AllBoard()
    model.board = dict(BOARD)
    with pytest.raises(InputError, match="link 'link1': all its learned body lies in the declared board's plate"):
        _exporter("drop", voxel=0.003, iterations=0).fit(model)
