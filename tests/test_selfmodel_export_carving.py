"""The export carves learned matter the cameras saw through, and keeps what no camera saw.

The two-joint box arm (tests/data/selfmodel) is captured by its three depth cameras; a stand-in
self-model answers with the arm's true boxes plus two ghosts a network could learn: a 25 mm slab on
the box's top face (in front of the surface the cameras measure, so their rays pass through it) and
a 40 mm slab under the base (against an empty background). The stand-in's folder is a real model
folder (trained a few steps) whose config.json names the captured session.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from capture.session import load_session
from capture.simulate import capture_simulated
from rigs import load_rig
from selfmodel.labels.depth import LabelSettings
from selfmodel.learn.trainer import SelfModelTrainer
from selfmodel.model.models import SelfModel


DATA = Path(__file__).parent / "data" / "selfmodel"

# Link frames, m: (centre, half extents) of the true boxes (two_joint_box.urdf) and of the ghosts.
TRUE = {"base": [((0, 0, 0.03), (0.06, 0.06, 0.03))],
        "upper": [((0, 0, 0.1), (0.03, 0.03, 0.1))],
        "box": [((0.1, 0, 0), (0.1, 0.04, 0.03))]}
GHOSTS = {"box": ((0.1, 0, 0.0425), (0.1, 0.04, 0.0125)), "base": ((0, 0, -0.02), (0.06, 0.06, 0.02))}


def _box_distance(points: np.ndarray, centre, half) -> np.ndarray:
    q = np.abs(points - np.asarray(centre)) - np.asarray(half)
    return np.linalg.norm(np.maximum(q, 0), axis=1) + np.minimum(q.max(axis=1), 0)


def _inside(points: np.ndarray, boxes) -> np.ndarray:
    return np.min([_box_distance(points, c, h) for c, h in boxes], axis=0) < 0


class GhostModel(SelfModel):
    """A structured self-model's contract with the true boxes and the ghosts as its bodies."""

    kind = "structured"

    def __init__(self, folder: Path, session: Path):
        loaded = load_session(session)
        super().__init__(loaded.joint_names, [-1.0, -1.0, -1.0], [1.0, 1.0, 1.0], folder / "robot.urdf", "base", "box")
        self.folder = folder
        self.link_names = ["base", "upper", "box"]
        self.training_q = loaded.q
        self.training_pose_ids = list(loaded.pose_ids)

    def shapes(self, link: str):
        return TRUE[link] + ([GHOSTS[link]] if link in GHOSTS else [])

    def link_bounds(self, link: str):
        corners = np.array([[np.asarray(c) - h, np.asarray(c) + h] for c, h in self.shapes(link)])
        return corners[:, 0].min(axis=0) - 0.02, corners[:, 1].max(axis=0) + 0.02

    def link_occupancy(self, link: str, points: np.ndarray) -> np.ndarray:
        distance = np.min([_box_distance(np.asarray(points), c, h) for c, h in self.shapes(link)], axis=0)
        return 1.0 / (1.0 + np.exp(np.clip(distance / 0.001, -50, 50)))


@pytest.fixture(scope="module")
def rig(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("carving")
    session = capture_simulated(load_rig(DATA / "two_joint_box.toml"), 16, 3, root / "train")
    trainer = SelfModelTrainer(kind="structured", steps=3, seed=3, batch=256, prior_batch=64, threads=1,
                               labels=LabelSettings(hit_rays_per_image=100, miss_rays_per_image=20))
    folder = root / "model"
    trainer.fit([load_session(session)]).model.save(folder, [load_session(session)], {})
    return {"root": root, "session": session, "folder": folder}


def _variant(rig: dict, name: str, edit_session=None, session_name: str | None = None) -> GhostModel:
    """A copy of the model folder whose config names a copy of the session (edited), or a session
    that is not there."""
    root = rig["root"] / name
    session = root / (session_name or "train")
    if edit_session is not None:
        shutil.copytree(rig["session"], session)
        manifest = json.loads((session / "session.json").read_text())
        edit_session(manifest)
        (session / "session.json").write_text(json.dumps(manifest))
    folder = root / "model"
    shutil.copytree(rig["folder"], folder)
    config = json.loads((folder / "config.json").read_text())
    config["training"]["sessions"] = [f"../{session.name}"]
    (folder / "config.json").write_text(json.dumps(config))
    return GhostModel(folder, session if edit_session is not None else rig["session"])


def _cells(body) -> np.ndarray:
    return body.origin + body.voxel * np.argwhere(body.solid)


def _bodies(model, **options):
    from selfmodel.export.exporter import CollisionExporter
    from selfmodel.export.settings import BodySettings

    return CollisionExporter(body=BodySettings(voxel=0.004, **options)).bodies(model, "model")


def test_a_ghost_slab_the_cameras_saw_through_is_carved_and_the_true_box_kept(rig):
    staged = _bodies(GhostModel(rig["folder"], rig["session"]))
    plain = _bodies(GhostModel(rig["folder"], rig["session"]), carve_poses=0)
    assert staged.carving.status == "carved" and staged.carving.poses == 16, staged.carving.report()
    ghost = (GHOSTS["box"],)
    before, after = _cells(plain.bodies["box"]), _cells(staged.bodies["box"])
    ghost_before = _inside(before, ghost) & ~_inside(before, TRUE["box"])
    ghost_after = _inside(after, ghost) & ~_inside(after, TRUE["box"])
    # Most of the slab goes (what is left lies within the depth tolerance of the true top face).
    assert ghost_after.sum() < 0.35 * ghost_before.sum(), (ghost_before.sum(), ghost_after.sum())
    # The true box stays: its cells deeper than one cell inside are all kept.
    deep = np.min([_box_distance(before, c, h) for c, h in TRUE["box"]], axis=0) < -0.004
    kept = _inside(before[deep] + 0.0, TRUE["box"])
    assert kept.all()
    lost_deep = deep.sum() - (np.min([_box_distance(after, c, h) for c, h in TRUE["box"]], axis=0) < -0.004).sum()
    assert lost_deep <= 0.01 * deep.sum(), (lost_deep, deep.sum())
    assert staged.carving.cells_removed["box"] > 0.5 * ghost_before.sum()


def test_space_no_camera_saw_stays_when_the_cameras_zeros_vouch_for_nothing(rig):
    """With real cameras' zeros (a hole, nothing in range: unknown), the slab under the base, seen
    only against empty space, is kept; the slab on the box, in front of the surface the cameras
    measured, still goes."""
    def unknown_zeros(manifest):
        for camera in manifest["sensors"]["cameras"].values():
            camera["no_depth"] = "unknown"

    model = _variant(rig, "unknown-zeros", unknown_zeros)
    staged = _bodies(model)
    plain = _bodies(model, carve_poses=0)
    base_before, base_after = _cells(plain.bodies["base"]), _cells(staged.bodies["base"])
    under = (GHOSTS["base"],)
    assert _inside(base_after, under).sum() >= 0.9 * _inside(base_before, under).sum()
    # The report says so: the kept slab's faces (its 12 x 12 cm underside alone is 58 cm3 of 4 mm
    # cells) are unseen, more than where the zeros vouched for free space.
    seen_free = _bodies(GhostModel(rig["folder"], rig["session"])).carving.unseen_cm3["base"]
    assert staged.carving.unseen_cm3["base"] > max(50.0, seen_free + 30.0), (staged.carving.unseen_cm3, seen_free)
    box_before, box_after = _cells(plain.bodies["box"]), _cells(staged.bodies["box"])
    slab = (GHOSTS["box"],)
    assert _inside(box_after, slab).sum() < 0.5 * _inside(box_before, slab).sum()


def test_matter_below_the_mount_plane_the_session_states_is_carved(rig):
    """The same cameras (zeros unknown), and the session says the base stands on a plane at z = 0:
    the arm never reaches through it, so the slab under the base goes though no camera saw it."""
    def mounted(manifest):
        for camera in manifest["sensors"]["cameras"].values():
            camera["no_depth"] = "unknown"
        manifest["scene"] = {"mount_plane_z": 0.0}

    model = _variant(rig, "mounted", mounted)
    staged = _bodies(model)
    plain = _bodies(model, carve_poses=0)
    under = (GHOSTS["base"],)
    before, after = _cells(plain.bodies["base"]), _cells(staged.bodies["base"])
    assert _inside(after, under).sum() < 0.2 * _inside(before, under).sum()
    assert staged.carving.below_mount["base"] > 0
    # The true base above the plane stays (its cells a cell or more inside: a face cell is half out).
    def deep(cells):
        return (np.min([_box_distance(cells, c, h) for c, h in TRUE["base"]], axis=0) < -0.0039).sum()

    assert deep(after) == deep(before) > 0


def test_without_the_training_sessions_nothing_is_carved_and_the_report_warns(rig):
    model = _variant(rig, "sessions-gone", session_name="moved-away")
    staged = _bodies(model)
    plain = _bodies(model, carve_poses=0)
    assert staged.carving.status == "not carved"
    assert "no longer there" in staged.carving.warning and "moved-away" in staged.carving.warning
    for link in plain.bodies:
        assert staged.bodies[link].solid.sum() == plain.bodies[link].solid.sum()


@pytest.mark.slow  # a whole export loaded into the planner at every recorded pose
def test_carved_export_is_free_at_every_recorded_pose_in_the_planner(rig, tmp_path):
    from selfmodel.export.exporter import CollisionExporter
    from selfmodel.export.settings import BodySettings, MarginSettings, PieceSettings, SphereSettings

    model = GhostModel(rig["folder"], rig["session"])
    exporter = CollisionExporter(spheres=SphereSettings(max_spheres=12, iterations=30, polish=0), pieces=PieceSettings(max_pieces=2),
                                 body=BodySettings(voxel=0.004), margin=MarginSettings(samples=2000, climbs=50),
                                 srdf_samples=300)
    fitted = exporter.fit(model)
    report = fitted.save(tmp_path / "collision", model.urdf_path, exporter.srdf_samples)
    assert report["recorded_poses_in_collision"]["configurations"] == 16
    assert report["recorded_poses_in_collision"]["pieces"]["poses"] == 0
    assert report["carving"]["status"] == "carved" and report["carving"]["cells_removed"]["box"] > 0
    saved = json.loads((tmp_path / "collision" / "export_report.json").read_text())
    assert saved["carving"]["volume_removed_cm3"]["box"] > 100  # of the 400 cm3 slab
    # Each link's unseen volume is in the report and on its page.
    assert set(saved["carving"]["unseen_cm3"]) == {"base", "upper", "box"}
    assert "unseen cm3" in (tmp_path / "collision" / "report.html").read_text()


def test_the_declared_board_is_matter_of_the_tip_to_its_corners():
    """A network rounds a 3.5 mm plate's corners off; the export takes the board the session declares
    (at its nominal mount) as part of the tip's body, corners included, and grows the tip's bounds."""
    from rigs.simulator import board_plate
    from selfmodel.export.sources import with_board

    board = {"kind": "charuco", "squares": [7, 5], "square_m": 0.035, "marker_m": 0.026, "dictionary": "DICT_4X4_50",
             "tip_T_board_nominal": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0.012], [0, 0, 0, 1]]}
    occupancy, lo, hi = with_board(lambda points: np.zeros(len(points)), np.full(3, -0.02), np.full(3, 0.02), board)
    plate = board_plate((7, 5), 0.035)
    plate.apply_translation([0, 0, 0.012])
    corners = np.asarray(plate.vertices)
    inward = corners - 0.0004 * np.sign(corners - plate.bounds.mean(axis=0))
    outward = corners + 0.002 * np.sign(corners - plate.bounds.mean(axis=0))
    assert (occupancy(inward) > 0.5).all() and (occupancy(outward) < 0.5).all()
    assert np.all(lo <= plate.bounds[0]) and np.all(hi >= plate.bounds[1])
    # What the network learned stays where the plate is not.
    learned = with_board(lambda points: np.full(len(points), 0.9), lo, hi, board)[0]
    assert np.allclose(learned(np.array([[0.0, 0.0, -0.05]])), 0.9)
    # At the nominal mount, what the network learned beside the plate stays (it may hold a board
    # mounted a little off).
    assert learned(np.array([[0.0, 0.0, 0.015], [0.0, 0.1, 0.011]])).min() > 0.5


def test_at_a_fitted_mount_the_plate_is_exact_and_the_blur_beside_it_goes():
    """With the mount the board calibration fitted, the network's matter within 6 mm in front of the
    printed face and beyond the edges is depth blur and goes; behind the backing, inside the outline
    (where the plate is mounted), and farther out, it stays; the plate itself is matter throughout."""
    from rigs.simulator import board_plate
    from selfmodel.export.sources import BOARD_BLUR, with_board

    mount = np.eye(4)
    mount[:3, 3] = [0.001, -0.002, 0.012]
    fitted = np.eye(4)
    fitted[:3, 3] = [0.0, 0.0, 0.012]
    board = {"kind": "charuco", "squares": [7, 5], "square_m": 0.035, "marker_m": 0.026, "dictionary": "DICT_4X4_50",
             "tip_T_board_nominal": mount.tolist(), "tip_T_board_fitted": fitted.tolist()}
    occupancy = with_board(lambda points: np.full(len(points), 0.9), np.full(3, -0.02), np.full(3, 0.02), board)[0]
    plate = board_plate((7, 5), 0.035)
    half_x, half_y = plate.bounds[1][:2]
    face, backing = 0.012, 0.012 - 0.0035
    blurred = np.array([[0.0, 0.0, face + 0.002], [0.05, 0.03, face + 0.005],  # in front of the face
                        [half_x + 0.002, 0.0, face - 0.001], [0.0, -half_y - 0.004, face - 0.002],  # past the edges
                        [half_x + 0.003, half_y + 0.003, backing - 0.002]])  # past a corner, behind
    kept = np.array([[0.0, 0.0, backing - 0.004], [0.1, 0.06, backing - 0.001],  # the mount behind the backing
                     [0.0, 0.0, face + BOARD_BLUR + 0.002], [half_x + BOARD_BLUR + 0.002, 0.0, face]])  # farther out
    assert (occupancy(blurred) < 0.5).all()
    assert (occupancy(kept) > 0.5).all()
    # The plate where the fitted mount has it, corners included, not where the nominal one does.
    corners = np.asarray(plate.vertices) + fitted[:3, 3]
    inward = corners - 0.0004 * np.sign(corners - corners.mean(axis=0))
    assert (occupancy(inward) > 0.5).all()
    nothing = with_board(lambda points: np.zeros(len(points)), np.full(3, -0.02), np.full(3, 0.02), board)[0]
    shifted = np.array([[half_x + 0.0008, 0.0, face - 0.001]])  # inside the nominal plate, outside the fitted one
    assert nothing(shifted)[0] < 0.5
