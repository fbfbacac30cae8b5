"""Collision export: a known shape comes out covered, in files planners load.

The self-model here is a stand-in with analytic bodies (a box, a cylinder, a box) on a tiny
two-joint URDF, so every true surface point is known exactly.
"""

from __future__ import annotations

import csv
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import yaml

from rigs.errors import InputError
from selfmodel.model.models import SelfModel

DATA = Path(__file__).parent / "data" / "export_arm"
URDF = DATA / "robot.urdf"
JOINTS = ["joint1", "joint2"]

# Link-frame analytic bodies: (kind, centre, half extents) ; cylinders are along z: (radius, half length).
SHAPES = {
    "base": ("box", np.array([0.0, 0.0, 0.05]), np.array([0.1, 0.1, 0.05])),
    "link1": ("cylinder", np.array([0.0, 0.0, 0.15]), np.array([0.04, 0.15])),
    "link2": ("box", np.array([0.175, 0.0, 0.0]), np.array([0.175, 0.03, 0.025])),
}


def signed_distance(link: str, points: np.ndarray, grow: float = 0.0) -> np.ndarray:
    kind, centre, size = SHAPES[link]
    local = points - centre
    if kind == "box":
        q = np.abs(local) - (size + np.array([grow, 0.0, 0.0]))
        return np.linalg.norm(np.maximum(q, 0), axis=1) + np.minimum(q.max(axis=1), 0)
    radial = np.linalg.norm(local[:, :2], axis=1) - size[0]
    axial = np.abs(local[:, 2]) - size[1]
    q = np.stack([radial, axial], axis=1)
    return np.linalg.norm(np.maximum(q, 0), axis=1) + np.minimum(q.max(axis=1), 0)


def surface_samples(link: str, count: int, rng: np.random.Generator) -> np.ndarray:
    """Exact surface points of a link's shape (link frame)."""
    import trimesh

    kind, centre, size = SHAPES[link]
    mesh = (trimesh.creation.box(2 * size) if kind == "box"
            else trimesh.creation.cylinder(size[0], 2 * size[1], sections=256))
    mesh.apply_translation(centre)
    points = np.asarray(mesh.sample(count, seed=int(rng.integers(2**31))))
    if kind == "cylinder":  # snap onto the true round surface (the mesh is a 256-gon)
        local = points - centre
        side = np.abs(np.abs(local[:, 2]) - size[1]) > 1e-9
        radial = np.linalg.norm(local[side, :2], axis=1, keepdims=True)
        local[side, :2] *= size[0] / radial
        points = local + centre
    return points


WORKSPACE = (np.array([-0.5, -0.5, -0.2]), np.array([0.5, 0.5, 0.8]))  # m, base frame


class StandInModel(SelfModel):
    """The structured self-model contract, with analytic bodies instead of networks."""

    kind = "structured"

    def __init__(self, empty_link: str | None = None):
        super().__init__(JOINTS, *WORKSPACE, URDF, "base", "link2")
        self.link_names = list(SHAPES)
        self.empty_link = empty_link

    def link_bounds(self, link: str):
        kind, centre, size = SHAPES[link]
        half = size if kind == "box" else np.array([size[0], size[0], size[1]])
        return centre - half - 0.03, centre + half + 0.03

    def link_occupancy(self, link: str, points: np.ndarray) -> np.ndarray:
        if link == self.empty_link:
            return np.zeros(len(points))
        return 1.0 / (1.0 + np.exp(np.clip(signed_distance(link, np.asarray(points)) / 0.001, -50, 50)))


class FreeStandIn(SelfModel):
    """The free contract: occupancy(points, q) in the base frame and workspace bounds only."""

    kind = "free"

    def __init__(self):
        from selfmodel.model.chain import ArmLinks

        super().__init__(JOINTS, *WORKSPACE, URDF, "base", "link2")
        self.spec = ArmLinks.from_urdf(URDF, "base", "link2")
        self.structured = StandInModel()

    def occupancy(self, points: np.ndarray, q: np.ndarray) -> np.ndarray:
        from selfmodel.model.chain import link_poses_numpy

        poses = link_poses_numpy(self.spec, np.atleast_2d(q)[:1])[0]
        result = np.zeros(len(points))
        for index, link in enumerate(self.spec.link_names):
            local = (points - poses[index, :3, 3]) @ poses[index, :3, :3]
            result = np.maximum(result, self.structured.link_occupancy(link, local))
        return result


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The stand-in exported once with the defaults (automatic margin), the kept spheres polished for
    30 steps, not the default's 1750 (minutes on this arm: a step's time is mostly torch's own)."""
    from selfmodel.export.exporter import CollisionExporter
    from selfmodel.export.settings import BodySettings, PieceSettings, SphereSettings

    exporter = CollisionExporter(spheres=SphereSettings(max_spheres=36, polish=30), pieces=PieceSettings(max_pieces=4),
                                 body=BodySettings(voxel=0.004), srdf_samples=10_000, seed=0)
    fitted = exporter.fit(StandInModel())
    out = tmp_path_factory.mktemp("export") / "collision"
    report = fitted.save(out, URDF, exporter.srdf_samples)
    return out, report, fitted


def test_a_hull_with_too_many_vertices_is_held_by_a_polytope_that_cuts_its_corners():
    """A disc 136 mm across and 29 mm thick (the xArm6 base's foot) with 400 rim points: the
    polytope of at most 64 vertices holds every point and stands out of the disc by under 2 mm (the
    planes along clustered face normals it replaces: 5.6 mm, 3.3 % more volume), and a kept plane
    stays a face."""
    from scipy.spatial import ConvexHull

    from selfmodel.export.bodies import conservative_hull

    angles = np.linspace(0.0, 2 * np.pi, 200, endpoint=False)
    rim = np.c_[0.068 * np.cos(angles), 0.068 * np.sin(angles)]
    points = np.vstack([np.c_[rim, np.zeros(200)], np.c_[rim, np.full(200, 0.029)]])
    piece = conservative_hull(points, 64)
    assert len(piece.vertices) <= 64
    assert np.all(points @ piece.normals.T <= piece.offsets + 1e-9)
    radial = np.linalg.norm(piece.vertices[:, :2], axis=1)
    assert radial.max() < 0.068 + 0.002
    assert piece.volume < 1.02 * ConvexHull(points).volume

    slant = np.array([0.6, 0.0, 0.8])
    cut = points[points @ slant <= 0.03]
    kept = conservative_hull(cut, 32, keep=slant[None])
    assert len(kept.vertices) <= 32 and np.all(cut @ kept.normals.T <= kept.offsets + 1e-9)
    assert np.any(kept.normals @ slant > 1 - 1e-9)


def test_pieces_contain_every_true_surface_point_and_spheres_all_but_a_sliver(exported):
    _, report, fitted = exported
    rng = np.random.default_rng(7)
    from selfmodel.export.bodies import pieces_contain

    for link in SHAPES:
        points = surface_samples(link, 20_000, rng)
        assert pieces_contain(fitted.links[link].pieces, points).all(), link
        # Spheres hold samples of the grown surface, not the surface itself: a corner may peek out.
        gaps = fitted.links[link].spheres.outside_distance(points)
        assert np.mean(gaps > 0) < 0.002 and gaps.max() < 0.002, (link, np.mean(gaps > 0), gaps.max())
    # The automatic margin is what the grid cut off (sub-voxel), not a blanket inflation.
    assert 0.0 < report["margin_mm"] < 4.0
    assert report["margin_mode"] == "auto"


def test_every_link_grows_by_its_own_measured_margin(exported):
    """Each piece grows by what the level-set samples nearest it need outside it (rounded up to 0.1
    mm, at least the floor); a link's margin is the largest of its pieces', the report's the largest
    of all."""
    from selfmodel.export.settings import MarginSettings

    _, report, fitted = exported
    floor_mm = 1000.0 * MarginSettings().floor
    for link, row in report["links"].items():
        expected = max(row["margin_needed_mm"], floor_mm)
        assert expected <= row["margin_mm"] <= expected + 0.1 + 1e-6, link
        assert fitted.margins[link] == pytest.approx(row["margin_mm"] / 1000.0), link
        grown = row["piece_margins_mm"]
        assert len(grown) == row["pieces"] and min(grown) >= floor_mm and max(grown) == pytest.approx(row["margin_mm"])

    assert report["margin_mm"] == pytest.approx(max(row["margin_mm"] for row in report["links"].values()))
    assert fitted.margin == pytest.approx(max(fitted.margins.values()))
    # The stand-in's boxes need more than its cylinder (the grid cuts their corners off), so this
    # is not the largest by another name.
    assert min(fitted.margins.values()) < 0.5 * max(fitted.margins.values())
    # A given margin grows every link by the same.
    from selfmodel.export.exporter import CollisionExporter
    from selfmodel.export.settings import BodySettings, MarginSettings, PieceSettings, SphereSettings

    given = CollisionExporter(spheres=SphereSettings(max_spheres=36, iterations=0), pieces=PieceSettings(max_pieces=4),
                              body=BodySettings(voxel=0.004), margin=MarginSettings(0.002), seed=0).fit(StandInModel())
    assert given.margin_mode == "given" and set(given.margins.values()) == {0.002}


def test_each_piece_grows_by_what_the_points_nearest_it_need():
    """Two boxes side by side, points standing 3 mm out of the first and 0.5 mm out of the second:
    the first needs 3 mm, the second 0.5, and each grown by its own need holds every point."""
    import trimesh

    from selfmodel.export.bodies import conservative_hull, piece_needs

    a = conservative_hull(trimesh.creation.box([0.1, 0.1, 0.1]).vertices)
    b = conservative_hull(trimesh.creation.box([0.1, 0.1, 0.1]).vertices + [0.1, 0.0, 0.0])
    rng = np.random.default_rng(0)
    top_a = np.column_stack([rng.uniform(-0.04, 0.04, 200), rng.uniform(-0.04, 0.04, 200), np.full(200, 0.053)])
    top_b = np.column_stack([rng.uniform(0.06, 0.14, 200), rng.uniform(-0.04, 0.04, 200), np.full(200, 0.0505)])
    points = np.vstack([top_a, top_b])
    needs = piece_needs([a, b], points)
    assert needs == pytest.approx([0.003, 0.0005], abs=1e-9)
    grown = [a.inflated(needs[0] + 1e-9), b.inflated(needs[1] + 1e-9)]
    assert np.all(grown[0].contains(points) | grown[1].contains(points))
    assert not np.all(grown[0].contains(points)) and not np.all(b.inflated(0.0).contains(top_b))
    assert piece_needs([a, b], np.zeros((0, 3))) == [0.0, 0.0]


def test_the_cover_stays_close_to_the_body(exported):
    _, report, fitted = exported
    rng = np.random.default_rng(3)
    from selfmodel.export.bodies import pieces_contain

    for link in SHAPES:
        lo, hi = StandInModel().link_bounds(link)
        points = rng.uniform(lo - 0.05, hi + 0.05, (200_000, 3))
        inside_true = signed_distance(link, points) <= 0
        pieces_ratio = pieces_contain(fitted.links[link].pieces, points).sum() / inside_true.sum()
        spheres_ratio = fitted.links[link].spheres.contains(points).sum() / inside_true.sum()
        assert 1.0 <= pieces_ratio < 1.35, (link, pieces_ratio)
        assert 1.0 <= spheres_ratio < 3.0, (link, spheres_ratio)
    for link, row in report["links"].items():
        assert 1 <= row["pieces"] <= 4 and 1 <= row["spheres"]
        assert max(row["vertices_per_piece"]) <= 64
    assert report["spheres_total"] <= 36
    # No board declared: every sphere is the arm's.
    assert report["spheres_arm"] == report["spheres_total"] and report["spheres_board"] == 0
    # The links stood next to each other at the recorded poses, so the fit was bounded and the start
    # it kept was polished (30 steps here), taken only where it holds as much and stands out no further.
    from selfmodel.export.spheres import UNCOVERED_TIE

    polish = report["sphere_starts"]["polish"]
    assert polish["steps"] == 30, polish
    if polish["taken"]:
        assert polish["after_uncovered"] <= polish["before_uncovered"] + UNCOVERED_TIE, polish


def test_urdf_keeps_visuals_replaces_collisions_and_loads_in_pinocchio_and_pybullet(exported):
    out, _, fitted = exported
    root = ET.parse(out / "robot.urdf").getroot()
    for link in root.findall("link"):
        name = link.get("name")
        collisions = link.findall("collision")
        assert len(collisions) == (len(fitted.links[name].pieces) if name in fitted.links else 0)
        for collision in collisions:
            assert (out / collision.find("geometry/mesh").get("filename")).is_file()
    assert [v.find("geometry")[0].tag for v in root.iter("visual")] == ["box", "cylinder", "box"]

    import pinocchio as pin

    model = pin.buildModelFromUrdf(str(out / "robot.urdf"))
    geometry = pin.buildGeomFromUrdf(model, str(out / "robot.urdf"), pin.GeometryType.COLLISION, package_dirs=[str(out)])
    assert geometry.ngeoms == sum(len(link.pieces) for link in fitted.links.values())

    from rigs.quiet import c_output_silenced, import_pybullet

    p = import_pybullet()
    with c_output_silenced():
        client = p.connect(p.DIRECT)
    try:
        body = p.loadURDF(str(out / "robot.urdf"), useFixedBase=True, physicsClientId=client)
        shapes = p.getCollisionShapeData(body, 2, physicsClientId=client)  # link2
        assert len(shapes) == len(fitted.links["link2"].pieces)
    finally:
        p.disconnect(client)


def test_curobo_spheres_file_matches_the_cover(exported):
    out, report, fitted = exported
    data = yaml.safe_load((out / "curobo_spheres.yml").read_text())
    spheres = data["collision_spheres"]
    assert set(spheres) == set(SHAPES)
    for link, entries in spheres.items():
        assert len(entries) == report["links"][link]["spheres"]
        centres = np.array([entry["center"] for entry in entries])
        radii = np.array([entry["radius"] for entry in entries])
        np.testing.assert_allclose(radii, fitted.links[link].spheres.radii, atol=1e-6)
        np.testing.assert_allclose(centres, fitted.links[link].spheres.centres, atol=1e-6)


def test_srdf_disables_adjacent_links_and_keeps_the_pair_that_can_collide(exported):
    out, report, _ = exported
    root = ET.parse(out / "robot.srdf").getroot()
    disabled = {tuple(sorted((e.get("link1"), e.get("link2")))): e.get("reason") for e in root.findall("disable_collisions")}
    assert disabled == {("base", "link1"): "Adjacent", ("link1", "link2"): "Adjacent"}
    assert report["srdf"]["samples"] == 10_000


def test_a_pair_that_cannot_meet_is_disabled_as_never(tmp_path):
    """With joint2 held within +-0.3 rad, link2 cannot swing down onto the base."""
    from selfmodel.export.srdf import collision_matrix

    text = URDF.read_text().replace('lower="-2.8" upper="2.8"', 'lower="-0.3" upper="0.3"')
    (tmp_path / "robot.urdf").write_text(text)
    matrix = collision_matrix(tmp_path / "robot.urdf", JOINTS, "base", 10_000, np.random.default_rng(0))
    assert matrix.reasons[("base", "link2")] == "Never"
    matrix = collision_matrix(URDF, JOINTS, "base", 10_000, np.random.default_rng(0))
    assert matrix.reasons[("base", "link2")] is None and 0.0 < matrix.contact_fraction[("base", "link2")] < 0.5


def test_free_model_bodies_come_from_what_stays_put_in_each_link_frame():
    """A free model knows no links; cut by the URDF's frames, its export still covers the arm."""
    from selfmodel.export.bodies import pieces_contain
    from selfmodel.export.exporter import CollisionExporter
    from selfmodel.export.settings import BodySettings, MarginSettings, PieceSettings, SphereSettings
    from selfmodel.model.chain import link_poses_numpy

    fitted = CollisionExporter(spheres=SphereSettings(max_spheres=36, polish=0), pieces=PieceSettings(max_pieces=4),
                               body=BodySettings(voxel=0.007, free_configurations=8),
                               margin=MarginSettings(samples=2000, climbs=50), seed=1).fit(FreeStandIn())
    assert set(fitted.links) == set(SHAPES)
    assert fitted.margin < 0.0105  # within 1.5 cells of the 7 mm grid, not the neighbours' bodies (centimetres)
    # A free model's link bodies are what stays put across configurations: every link takes the
    # largest need (grown by its own, the base held 71 % of its true surface in the check below).
    assert set(fitted.margins.values()) == {fitted.margin}
    spec = FreeStandIn().spec
    rng = np.random.default_rng(5)
    for q in ([0.4, -1.0], [-2.2, 0.7], [1.0, 2.5]):
        poses = link_poses_numpy(spec, np.array([q]))[0]
        frames = {link: poses[spec.link_names.index(link)] for link in SHAPES}
        for link in SHAPES:
            points = surface_samples(link, 3000, rng) @ frames[link][:3, :3].T + frames[link][:3, 3]
            inside = np.zeros(len(points), dtype=bool)
            for other in SHAPES:
                local = (points - frames[other][:3, 3]) @ frames[other][:3, :3]
                inside |= pieces_contain(fitted.links[other].pieces, local)
            assert inside.mean() > 0.995, (q, link, inside.mean())
    # Not the swept volume of the other links: the bodies stay near the links' own sizes.
    total = sum(link.body.volume for link in fitted.links.values())
    true_total = sum(np.prod(2 * size) if kind == "box" else np.pi * size[0] ** 2 * 2 * size[1]
                     for kind, _, size in SHAPES.values())
    assert total < 1.8 * true_total, (total, true_total)


def test_empty_link_body_is_named():
    from selfmodel.export.exporter import CollisionExporter
    from selfmodel.export.settings import BodySettings

    with pytest.raises(InputError, match=r"link 'link1' has an empty body"):
        CollisionExporter(body=BodySettings(voxel=0.008)).fit(StandInModel(empty_link="link1"))


def test_a_held_link_whose_matter_its_rigid_neighbour_learned_has_no_geometry_of_its_own(tmp_path):
    """A finger held to the arm's last link moves with it at every pose, so which network learns
    their matter is not determined; a finger left with no body of its own is held by that
    neighbour: no pieces, no spheres, said in the report, and left out of cuRobo's files. An empty
    link a moving joint turns is still refused (test_empty_link_body_is_named)."""
    from selfmodel.export.exporter import CollisionExporter
    from selfmodel.export.settings import BodySettings, PieceSettings, SphereSettings

    urdf = tmp_path / "robot.urdf"
    urdf.write_text(URDF.read_text().replace("</robot>", """
  <joint name="finger_joint" type="prismatic">
    <parent link="link2"/><child link="finger"/><origin xyz="0.35 0 0"/><axis xyz="1 0 0"/>
    <limit lower="0" upper="0.04" effort="10" velocity="1"/>
  </joint>
  <link name="finger">
    <visual><origin xyz="0.02 0 0"/><geometry><box size="0.04 0.02 0.02"/></geometry></visual>
  </link>
</robot>"""))

    class HeldFinger(StandInModel):
        def __init__(self):
            SelfModel.__init__(self, JOINTS, *WORKSPACE, urdf, "base", "link2", {"finger_joint": 0.0})
            self.link_names = [*SHAPES, "finger"]
            self.empty_link = "finger"

        def link_bounds(self, link: str):
            if link == "finger":
                return np.array([-0.01, -0.03, -0.03]), np.array([0.06, 0.03, 0.03])
            return super().link_bounds(link)

    exporter = CollisionExporter(spheres=SphereSettings(max_spheres=36, polish=0), pieces=PieceSettings(max_pieces=4),
                                 body=BodySettings(voxel=0.004), srdf_samples=500, seed=0)
    fitted = exporter.fit(HeldFinger())
    finger = fitted.links["finger"]
    assert finger.pieces == [] and len(finger.spheres.radii) == 0 and not finger.body.solid.any()
    assert fitted.separation.held_by == {"finger": "link2"}
    assert all(link.pieces and len(link.spheres.radii) for name, link in fitted.links.items() if name != "finger")
    report = fitted.save(tmp_path / "out", urdf, exporter.srdf_samples)
    assert report["separation"]["held_by_rigid_neighbour"] == {"finger": "link2"}
    robot = yaml.safe_load((tmp_path / "out" / "curobo_robot.yml").read_text())["robot_cfg"]["kinematics"]
    assert "finger" not in robot["collision_link_names"] and "finger" not in robot["collision_spheres"]
    link = next(e for e in ET.parse(tmp_path / "out" / "robot.urdf").getroot().findall("link") if e.get("name") == "finger")
    assert link.find("collision") is None


def test_margin_that_would_swallow_the_arm_is_refused():
    from selfmodel.export.exporter import CollisionExporter
    from selfmodel.export.settings import BodySettings, MarginSettings

    with pytest.raises(InputError, match="would swallow the arm"):
        CollisionExporter(margin=MarginSettings(0.08), body=BodySettings(voxel=0.008)).fit(StandInModel())


def test_existing_output_folder_is_refused_without_force(exported, tmp_path):
    out, _, fitted = exported
    with pytest.raises(InputError, match="already exists"):
        fitted.save(out, URDF)
    assert (out / "robot.urdf").is_file()


# -- against a simulated truth ----------------------------------------------------------------------

def _tiny_session(folder: Path, truth_urdf_text: str, qs: np.ndarray) -> Path:
    """A minimal simulated session of the stand-in arm: description, joints, truth."""
    folder.mkdir(parents=True)
    shutil.copyfile(URDF, folder / "robot.urdf")
    (folder / "truth").mkdir()
    (folder / "truth" / "robot.urdf").write_text(truth_urdf_text)
    manifest = {"format": "selfcal-session", "format_version": 1,
                "robot": {"urdf": "robot.urdf", "base_link": "base", "tip_link": "link2", "joint_names": JOINTS},
                "sensors": {}, "source": {"kind": "simulated"}}
    (folder / "session.json").write_text(json.dumps(manifest))
    for name in ("joints.csv", "truth/joints_reached.csv"):
        with open(folder / name, "w", newline="") as stream:
            writer = csv.writer(stream)
            writer.writerow(["pose", *JOINTS])
            writer.writerows([[f"p{i:04d}", *(repr(float(v)) for v in q)] for i, q in enumerate(qs)])
    return folder


def test_truth_figures_find_a_link_longer_than_the_model_knows(exported, tmp_path):
    """Against its own shape the export covers everything; against a truth whose link2 is 3 cm
    longer, coverage drops and the largest gap is about those 3 cm."""
    from selfmodel.evaluation.export_truth import PosedExport, description_pieces, evaluate_export, load_truth

    out, _, fitted = exported
    qs = np.array([[0.3, -0.4], [-2.0, 1.2]])
    export = PosedExport(out / "robot.urdf", "base", fitted.pieces, fitted.spheres)

    same = load_truth(_tiny_session(tmp_path / "same", URDF.read_text(), qs))
    figures = evaluate_export(export, same, np.random.default_rng(0), surface_samples=4000, volume_samples=20_000)
    assert figures["pieces"]["surface_coverage"] == 1.0 and figures["pieces"]["largest_gap_mm"] == 0.0
    assert figures["spheres"]["surface_coverage"] > 0.998 and figures["spheres"]["largest_gap_mm"] < 2.0
    assert figures["pieces"]["coverage"] == 1.0 and figures["spheres"]["coverage"] > 0.999
    assert 1.0 < figures["pieces"]["volume_ratio"] < 1.3
    assert 1.0 < figures["spheres"]["volume_ratio"] < 3.0
    assert figures["spheres"]["summed_volume_ratio"] > figures["spheres"]["volume_ratio"]
    # cuRobo's protrusion: the outer surface outside the body (nearly all of a cover that holds it).
    assert figures["pieces"]["protrusion_share"] > 0.9 and 0.5 < figures["pieces"]["protrusion_mean_mm"] < 6.0
    assert figures["pieces"]["protrusion_p95_mm"] < 10.0

    longer = URDF.read_text().replace('<origin xyz="0.175 0 0"/><geometry><box size="0.35 0.06 0.05"/>',
                                      '<origin xyz="0.19 0 0"/><geometry><box size="0.38 0.06 0.05"/>')
    truth = load_truth(_tiny_session(tmp_path / "longer", longer, qs))
    figures = evaluate_export(export, truth, np.random.default_rng(0), surface_samples=4000, volume_samples=20_000)
    assert figures["pieces"]["surface_coverage"] < 0.99
    assert 25.0 < figures["pieces"]["largest_gap_mm"] < 30.5
    per_link = figures["per_link"]
    assert per_link["link2"]["pieces"]["surface_coverage"] < per_link["link1"]["pieces"]["surface_coverage"] == 1.0

    # The description's own collision boxes, as the baseline: exact on the same arm.
    baseline = PosedExport(URDF, "base", description_pieces(URDF, list(SHAPES)))
    figures = evaluate_export(baseline, same, np.random.default_rng(0), surface_samples=4000, volume_samples=20_000)
    assert figures["pieces"]["surface_coverage"] > 0.99 and abs(figures["pieces"]["volume_ratio"] - 1.0) < 0.05


def test_protrusion_is_read_over_the_outer_surface_and_over_every_sphere(tmp_path):
    """One sphere: both readings sample the same points. A smaller sphere nested in it, standing
    out of the link by at most 65 mm where the big one stands out by up to 165 mm: its surface is not
    on the union's outer surface, so only cuRobo's reading (every sphere's surface) takes it in, and
    reads lower (mean 94 against 105 mm here)."""
    from selfmodel.evaluation.export_truth import PosedExport, evaluate_export, load_truth
    from selfmodel.export.spheres import SphereCover

    truth = load_truth(_tiny_session(tmp_path / "same", URDF.read_text(), np.array([[0.3, -0.4], [-2.0, 1.2]])))
    big = SphereCover(np.array([[0.175, 0.0, 0.0]]), np.array([0.19]))
    nested = SphereCover(np.array([[0.175, 0.0, 0.0], [0.175, 0.0, 0.0]]), np.array([0.19, 0.09]))

    def spheres(cover):
        return evaluate_export(PosedExport(URDF, "base", {}, {"link2": cover}), truth, np.random.default_rng(0),
                               surface_samples=2000, volume_samples=5000, kinds=("spheres",))["spheres"]

    alone = spheres(big)
    assert alone["every_sphere_protrusion_share"] == alone["protrusion_share"]
    assert alone["every_sphere_protrusion_p95_mm"] == alone["protrusion_p95_mm"]
    both = spheres(nested)
    # The nested sphere holds about 18 % of the sampled area and lies within 65 mm of the link.
    assert both["every_sphere_protrusion_mean_mm"] < 0.93 * both["protrusion_mean_mm"]
    assert both["every_sphere_protrusion_p95_mm"] <= both["protrusion_p95_mm"]
    assert abs(both["protrusion_mean_mm"] - alone["protrusion_mean_mm"]) < 0.05 * alone["protrusion_mean_mm"]


def test_the_summary_line_states_the_margins_the_links_grew_by(exported):
    from selfcal.cli_export import margin_words

    _, report, _ = exported
    low = min(row["margin_mm"] for row in report["links"].values())
    assert margin_words(report) == f"margins {low:.1f}-{report['margin_mm']:.1f} mm (auto, each link its own)"
    same = {"margin_mm": 2.0, "margin_mode": "given", "links": {"a": {"margin_mm": 2.0}, "b": {"margin_mm": 2.0}}}
    assert margin_words(same) == "margin 2.0 mm (given)"


def test_command_line_refuses_bad_input_with_one_sentence(tmp_path):
    from typer.testing import CliRunner

    from selfcal.cli import app

    runner = CliRunner()
    existing = tmp_path / "collision"
    existing.mkdir()
    result = runner.invoke(app, ["selfmodel", "export", str(tmp_path / "model"), "--out", str(existing)])
    assert result.exit_code == 2 and "already exists" in result.output
    result = runner.invoke(app, ["selfmodel", "export", str(tmp_path / "model"), "--out", str(tmp_path / "new"),
                                 "--margin", "lots"])
    assert result.exit_code == 2 and "--margin 'lots'" in result.output
    result = runner.invoke(app, ["selfmodel", "export", str(tmp_path / "model"), "--out", str(tmp_path / "new"),
                                 "--spheres", "0"])
    assert result.exit_code == 2 and "at least one sphere" in result.output
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_trained_model_exports_from_the_command_line(tmp_path):
    """End to end on a real (tiny) learned model: capture, train, export, report against the truth."""
    from typer.testing import CliRunner

    from capture.simulate import capture_simulated
    from rigs import load_rig
    from selfcal.cli import app

    runner = CliRunner()
    rig = load_rig(Path(__file__).parent / "data" / "selfmodel" / "two_joint_box.toml")
    session = capture_simulated(rig, 30, 1, tmp_path / "train")
    model = tmp_path / "model"
    result = runner.invoke(app, ["selfmodel", "train", str(session), "--out", str(model), "--steps", "300",
                                 "--seed", "1", "--threads", "1"])
    assert result.exit_code == 0, result.output
    out = tmp_path / "collision"
    result = runner.invoke(app, ["selfmodel", "export", str(model), "--out", str(out), "--voxel", "6",
                                 "--srdf-samples", "2000", "--spheres", "10", "--pieces", "4", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report == json.loads((out / "export_report.json").read_text())
    assert {p.name for p in out.iterdir()} >= {"robot.urdf", "robot.srdf", "curobo_spheres.yml", "export_report.json", "meshes"}
    assert 0.0 <= report["margin_mm"] < 20.0 and report["margin_mode"] == "auto"
    assert all(row["spheres"] <= 10 and row["pieces"] <= 4 for row in report["links"].values())
    assert report["truth"]["pieces"]["surface_samples"] > 1000
    assert 0.0 <= report["truth"]["pieces"]["coverage"] <= 1.0
    assert report["measured_surface"]["pieces"]["samples"] > 100


def test_export_writes_package_uris_that_pinocchio_resolves_from_anywhere(exported, tmp_path, monkeypatch):
    """--ros-package: robot.urdf names its meshes inside a ROS package; Pinocchio finds them
    through package_dirs whatever the working directory, and the folder's own checks still ran."""
    import shutil

    import pinocchio as pin

    _, _, fitted = exported
    out = tmp_path / "collision"
    report = fitted.save(out, URDF, 2000, ros_package="box_description/collision")
    assert report["ros_package"] == "box_description/collision"
    assert report["recorded_poses_in_collision"]["pieces"]["poses"] == 0
    filenames = [mesh.get("filename") for mesh in ET.parse(out / "robot.urdf").getroot().iter("mesh")]
    assert filenames and all(name.startswith("package://box_description/collision/meshes/") for name in filenames)
    workspace = tmp_path / "ws" / "src"
    shutil.copytree(out, workspace / "box_description" / "collision")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    urdf = str(workspace / "box_description" / "collision" / "robot.urdf")
    model = pin.buildModelFromUrdf(urdf)
    geometry = pin.buildGeomFromUrdf(model, urdf, pin.GeometryType.COLLISION, package_dirs=[str(workspace)])
    assert geometry.ngeoms == sum(len(link.pieces) for link in fitted.links.values())
