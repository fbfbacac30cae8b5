"""Collision models a planner can use: judged by the planner that loads them.

The stand-in self-model of test_export.py (analytic bodies on a two-joint URDF) is exported with
recorded configurations; the URDF and SRDF are loaded into Pinocchio/coal (the collision checking
the OMPL planner uses) as they are written, and cuRobo's configuration is read back with a YAML
parser. The real arms' pieces are here too: the simulator's self-contact rules on the xArm6 and the
Panda, the Panda's fingers held where the rig holds them, and open meshes read as solids.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import trimesh
import yaml
from test_export import JOINTS, URDF, StandInModel

from rigs.errors import InputError

# Recorded configurations: link2 held high (joint2 within +-0.8 rad), where the real arm stood.
RECORDED = np.array([[a, b] for a in (-2.5, -1.0, 0.0, 1.2, 2.6) for b in (-0.8, -0.3, 0.0, 0.4, 0.8)])


class RecordedStandIn(StandInModel):
    def __init__(self, recorded=RECORDED, **kwargs):
        super().__init__(**kwargs)
        self.training_q = np.asarray(recorded, dtype=float)
        self.training_pose_ids = [f"p{k:04d}" for k in range(len(self.training_q))]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    from selfmodel.export.exporter import CollisionExporter
    from selfmodel.export.settings import BodySettings, PieceSettings, SphereSettings

    exporter = CollisionExporter(spheres=SphereSettings(max_spheres=36, polish=0), pieces=PieceSettings(max_pieces=4),
                                 body=BodySettings(voxel=0.004), srdf_samples=4000, seed=0)
    fitted = exporter.fit(RecordedStandIn())
    out = tmp_path_factory.mktemp("planner") / "collision"
    report = fitted.save(out, URDF, exporter.srdf_samples)
    return out, report, fitted


def test_planner_loads_urdf_and_srdf_recorded_poses_are_free_a_folded_pose_is_not(written):
    from rigs.transforms import make_transform
    from selfmodel.export.world import Box, CollisionWorld

    out, report, _ = written
    assert report["recorded_poses_in_collision"] == {
        "configurations": len(RECORDED), "pieces": {"poses": 0, "pairs": {}, "depth_mm": {}},
        "spheres": {"poses": 0, "pairs": {}, "depth_mm": {}}}
    box = Box("crate", np.array([0.08, 0.08, 0.08]), make_transform([0.24, 0.165, 0.40]))  # clear of every recorded pose
    world = CollisionWorld(out / "robot.urdf", JOINTS, "base", srdf=out / "robot.srdf", obstacles=[box])
    assert ("base", "link1") not in world.checked_pairs and ("base", "link2") in world.checked_pairs
    for q in RECORDED:
        assert not world.colliding_pairs(q), q
    # Turned towards the crate, link2 reaches into it ...
    assert world.colliding_pairs(np.array([0.6, 0.0])) == {("link2", "obstacle:crate")}
    # ... and folded down over the base, into the base itself.
    assert ("base", "link2") in world.colliding_pairs(np.array([0.0, 1.75]))


def test_an_export_in_collision_where_the_arm_stood_is_refused_with_depth_and_a_fix(written, tmp_path):
    """The last check before writing: a recorded pose where the written geometry overlaps is named
    with its pair and how deep, with what would help, and nothing is written."""
    import dataclasses

    from selfmodel.export.exporter import Recorded

    _, _, fitted = written
    folded = dataclasses.replace(fitted, recorded=Recorded(["p9999"], np.array([[0.0, 1.75]])))
    with pytest.raises(InputError, match=r"the exported pieces are in collision at 1 of 1 recorded poses \(base/link2 "
                                         r"at p9999, by up to \d+\.\d mm\), where the arm really stood; not written: "
                                         r"give a smaller margin \(mm\), or train longer"):
        folded.save(tmp_path / "folded", URDF, 500)
    assert not (tmp_path / "folded").exists()


def test_planned_path_around_an_obstacle_stays_clear_of_the_true_shapes(written):
    from rigs.transforms import make_transform
    from selfmodel.evaluation.planning import densify, plan, replay
    from selfmodel.export.world import Box, CollisionWorld

    out, _, _ = written
    wall = Box("wall", np.array([0.08, 0.5, 0.5]), make_transform([0.28, 0.0, 0.3]))
    world = CollisionWorld(out / "robot.urdf", JOINTS, "base", srdf=out / "robot.srdf", obstacles=[wall])
    truth = CollisionWorld(URDF, JOINTS, "base", srdf=out / "robot.srdf", obstacles=[wall])  # the analytic boxes
    start, goal = np.array([2.0, -0.6]), np.array([-2.0, -0.6])
    lower, upper = np.array([-3.1, -2.8]), np.array([3.1, 2.8])
    result = plan(world, start, goal, lower, upper, seconds=5.0, seed=0)
    assert result.solved, result.reason
    assert np.allclose(result.path[0], start) and np.allclose(result.path[-1], goal)
    assert replay(world, result.path) is None and replay(truth, result.path) is None
    # The straight line goes through the wall: the planner had to go round it.
    assert any(truth.collides(q) for q in densify(np.stack([start, goal]), 0.01))


def test_srdf_has_the_chain_group_a_fixed_virtual_joint_and_reasons_moveit_knows(written):
    out, report, _ = written
    root = ET.parse(out / "robot.srdf").getroot()
    chain = root.find("group/chain")
    assert root.find("group").get("name") == "arm" and (chain.get("base_link"), chain.get("tip_link")) == ("base", "link2")
    virtual = root.find("virtual_joint")
    assert virtual.get("type") == "fixed" and virtual.get("child_link") == "world"
    assert {e.get("reason") for e in root.findall("disable_collisions")} <= {"Adjacent", "Never", "Always", "Default"}
    state = {j.get("name"): float(j.get("value")) for j in root.findall("group_state/joint")}
    assert state == {"joint1": 0.0, "joint2": 0.0}
    assert report["srdf"]["adjacent"] == 2 and report["srdf"]["samples"] == 4000


def test_curobo_config_names_only_existing_links_and_files(written):
    out, report, fitted = written
    text = (out / "curobo_robot.yml").read_text()
    assert "&id" not in text  # no YAML aliases: every list written out where it belongs
    config = yaml.safe_load(text)["robot_cfg"]["kinematics"]
    urdf = Path(config["urdf_path"])
    assert urdf.is_file() and urdf.resolve() == (out / "robot.urdf").resolve()
    assert Path(config["asset_root_path"]).is_dir()
    tree = ET.parse(urdf).getroot()
    links = {link.get("name") for link in tree.findall("link")}
    joints = {joint.get("name") for joint in tree.findall("joint")}
    named = {config["base_link"], config["ee_link"], *config["collision_link_names"], *config["mesh_link_names"],
             *config["collision_spheres"], *config["self_collision_buffer"], *config["self_collision_ignore"],
             *(other for others in config["self_collision_ignore"].values() for other in others)}
    assert named <= links, named - links
    assert set(config["collision_spheres"]) == set(config["collision_link_names"]) == set(fitted.links)
    assert config["self_collision_ignore"] == {"base": ["link1"], "link1": ["link2"]}
    cspace = config["cspace"]
    assert set(cspace["joint_names"]) <= joints and len(cspace["retract_config"]) == len(cspace["joint_names"])
    for link, spheres in config["collision_spheres"].items():
        np.testing.assert_allclose([s["radius"] for s in spheres], fitted.links[link].spheres.radii, atol=1e-6)
    for mesh in tree.iter("mesh"):  # every file the URDF names is in the folder
        assert (out / mesh.get("filename")).is_file()


def test_bodies_that_overlap_where_the_arm_stood_are_refused_with_links_poses_and_depth(tmp_path):
    """A recorded pose with link2 swung down through the base cannot be real: say so, write nothing."""
    from selfmodel.export.exporter import CollisionExporter
    from selfmodel.export.settings import BodySettings, PieceSettings, SphereSettings

    recorded = np.vstack([RECORDED, [[0.0, 1.75]]])
    with pytest.raises(InputError, match=r"bodies of base and link2 overlap by up to \d+ mm at 1 of 26 recorded poses "
                                         r"\(p0025 \(\d+ mm\)\)"):
        fitted = CollisionExporter(spheres=SphereSettings(max_spheres=12, polish=0), pieces=PieceSettings(max_pieces=2),
                                   body=BodySettings(voxel=0.006)).fit(RecordedStandIn(recorded))
        fitted.save(tmp_path / "collision", URDF, 500)
    assert not (tmp_path / "collision").exists()


def test_pieces_whose_hulls_reach_into_a_neighbour_are_cut_at_recorded_poses(tmp_path):
    """link2 swung low (but clear of the base) where the arm stood: the inflated pieces of the two
    come within the margin of each other there, are cut apart, and the pose is free."""
    from selfmodel.export.exporter import CollisionExporter
    from selfmodel.export.settings import BodySettings, MarginSettings, PieceSettings, SphereSettings
    from selfmodel.export.world import CollisionWorld

    low = np.array([[0.0, 1.14], [np.pi / 2, 1.14]])  # link2 10 mm clear of the base's top edge
    fitted = CollisionExporter(spheres=SphereSettings(max_spheres=12, polish=0), pieces=PieceSettings(max_pieces=2),
                               body=BodySettings(voxel=0.006), margin=MarginSettings(0.008)).fit(RecordedStandIn(low))
    report = fitted.save(tmp_path / "collision", URDF, 500)
    assert report["separation"]["piece_cuts"] >= 1
    world = CollisionWorld(tmp_path / "collision" / "robot.urdf", JOINTS, "base", srdf=tmp_path / "collision" / "robot.srdf")
    assert not any(world.collides(q) for q in low)


def test_pieces_left_overlapping_when_the_cuts_run_out_are_named_with_poses_and_depth():
    """When the sweeps of cuts run out, the refusal names each pair, pose and depth still overlapping
    and what would help; pieces already apart pass untouched."""
    from selfmodel.export.bodies import polytope
    from selfmodel.export.separation import Separation, piece_overlaps, separate_pieces

    def cube(half: float):
        normals = np.vstack([np.eye(3), -np.eye(3)])
        return polytope(normals, np.full(6, half))

    pieces = {"link1": [cube(0.05)], "link2": [cube(0.05)]}
    shifted = [np.eye(4), np.eye(4), np.eye(4)]
    shifted[0][:3, 3] = [0.09, 0, 0]  # 10 mm into link1
    shifted[1][:3, 3] = [0.20, 0, 0]  # 100 mm clear
    shifted[2][:3, 3] = [0.0, 0.097, 0]  # 3 mm into link1
    poses = {"link1": np.stack([np.eye(4)] * 3), "link2": np.stack(shifted)}
    checked = [("link1", "link2")]
    left = piece_overlaps(pieces, poses, checked, ["p0", "p1", "p2"])
    assert [(a, b, pose) for _, a, b, pose in left] == [("link1", "link2", "p0"), ("link1", "link2", "p2")]
    assert left[0][0] == pytest.approx(0.010, abs=1e-4) and left[1][0] == pytest.approx(0.003, abs=1e-4)
    kinds = {("link1", "link2"): "checked"}
    with pytest.raises(InputError, match=r"model: after 0 sweeps of cuts the convex pieces still overlap at 2 recorded "
                                         r"pose\(s\), 1 pair\(s\) of links: link1 and link2 at p0 by 10\.0 mm; link1 "
                                         r"and link2 at p2 by 3\.0 mm\. .*train longer.*max_vertices"):
        separate_pieces(pieces, {}, poses, kinds, ["p0", "p1", "p2"], 2, 64, 0.006, "model", Separation(kinds), sweeps=0)
    apart = {"link1": np.stack([np.eye(4)]), "link2": np.stack([shifted[1]])}
    assert separate_pieces(pieces, {}, apart, kinds, ["p1"], 2, 64, 0.006, "model", Separation(kinds), sweeps=0) == pieces



def test_pieces_a_pose_cannot_part_are_named_with_their_depth_and_what_would_help(monkeypatch):
    """When the cuts at one recorded pose run out (here every cut leaves the pieces as they were),
    the refusal names the pair, the pose and how deep they overlap, and says what would help."""
    from selfmodel.export import separation
    from selfmodel.export.bodies import polytope

    cube = polytope(np.vstack([np.eye(3), -np.eye(3)]), np.full(6, 0.05))
    moved = np.eye(4)
    moved[:3, 3] = [0.09, 0, 0]  # 10 mm into link1
    poses = {"link1": np.stack([np.eye(4)]), "link2": np.stack([moved])}
    kinds = {("link1", "link2"): "checked"}
    monkeypatch.setattr(separation, "_cut", lambda *args: True)
    with pytest.raises(InputError, match=r"model: the convex pieces of link1 and link2 still overlap by 10\.0 mm at "
                                         r"recorded pose p0 after 3 cuts of them there: train longer .*max_pieces"):
        separation.separate_pieces({"link1": [cube], "link2": [cube]}, {}, poses, kinds, ["p0"], 2, 64, 0.006,
                                   "model", separation.Separation(kinds), attempts=3)

def test_a_neighbour_is_cut_back_from_a_kept_boards_box_and_the_box_never_moves():
    """A fixed piece (the kept board's box) takes part in the separation but is never cut: the
    neighbour's piece that reaches into it at a recorded pose is cut back to the box's face, still
    holds its body outside the box, and nothing overlaps after."""
    import trimesh

    from rigs.solids import solid_of
    from selfmodel.export.bodies import LinkBody, polytope
    from selfmodel.export.separation import Separation, piece_overlaps, separate_pieces

    voxel = 0.004
    solid = solid_of(trimesh.creation.box([0.1, 0.1, 0.1]), voxel)
    cells = solid.inside_cells | solid.surface_cells
    body = LinkBody("link1", solid.watertight_mesh(), solid.origin + voxel * np.argwhere(cells), voxel, False, 0.0,
                    0.0, cells, solid.origin)
    normals = np.vstack([np.eye(3), -np.eye(3)])
    piece = polytope(normals, np.full(6, 0.052))  # the body grown by a 2 mm margin
    plate = polytope(normals, np.array([0.002, 0.1, 0.1, 0.002, 0.1, 0.1]))  # 4 mm thick, 200 mm wide
    moved = np.eye(4)
    moved[:3, 3] = [0.05, 0, 0]  # the plate's near face 2 mm inside the body, 4 mm inside its piece
    poses = {"link1": np.stack([np.eye(4)]), "tip": np.stack([moved])}
    kinds = {("link1", "tip"): "checked"}
    separation = Separation(kinds)
    cut = separate_pieces({"link1": [piece]}, {"link1": body}, poses, kinds, ["p0"], 2, 64, 0.006, "model",
                          separation, fixed={"tip": [plate]})
    assert cut["tip"] == [] and separation.cuts >= 1
    assert piece_overlaps({"link1": cut["link1"], "tip": [plate]}, poses, [("link1", "tip")], ["p0"]) == []
    reach = max(float(np.max(part.vertices[:, 0])) for part in cut["link1"])
    assert reach == pytest.approx(0.048, abs=5e-4)  # cut at the plate's face, not halfway
    held = body.inside[body.inside[:, 0] < 0.048 - voxel]
    assert np.all(np.any([part.contains(held) for part in cut["link1"]], axis=0))


def test_a_kept_boards_layer_gives_way_first_where_spheres_meet_at_a_recorded_pose():
    """Spheres that overlap where the arm stood shrink apart; a board-layer sphere gives way first,
    down to the floor (the plate's half-thickness with the margin), and only what is left is shared
    by radius, so the arm sphere keeps its link's surface."""
    from selfmodel.export.separation import Separation, separate_spheres
    from selfmodel.export.spheres import SphereCover

    kinds = {("link4", "tip"): "checked"}

    def shrunk(gap: float):
        moved = np.eye(4)
        moved[:3, 3] = [0.03 + 0.012 - gap, 0, 0]  # the two spheres' surfaces ``gap`` m into each other
        covers = {"link4": SphereCover(np.zeros((1, 3)), np.array([0.03])),
                  "tip": SphereCover(np.zeros((1, 3)), np.array([0.012]))}
        poses = {"link4": np.stack([np.eye(4)]), "tip": np.stack([moved])}
        out = separate_spheres(covers, poses, kinds, Separation(kinds), first={"tip": np.array([True])}, floor=0.005)
        return out["link4"].radii[0], out["tip"].radii[0]

    arm, board = shrunk(0.003)
    assert arm == pytest.approx(0.03) and board == pytest.approx(0.012 - 0.003 - 1e-4, abs=1e-6)
    arm, board = shrunk(0.010)  # more than the layer sphere can give: it stops at the floor, the rest is shared
    assert board < 0.005 and arm < 0.03
    assert (0.03 - arm) / (0.005 - board) == pytest.approx(0.03 / 0.005, rel=1e-6)
    assert 0.03 + 0.012 - 0.010 >= arm + board  # apart after


# -- the real arms: the simulator's rules, the Panda's fingers, open meshes ---------------------------

def test_panda_chain_holds_its_fingers_and_folds_link8_into_its_carrier():
    import pybullet_data

    from selfmodel.model.chain import ArmLinks

    urdf = Path(pybullet_data.getDataPath()) / "franka_panda" / "panda.urdf"
    with pytest.raises(InputError, match=r"joint 'panda_finger_joint1' moves link 'panda_leftfinger'.*\(hold panda_finger_joint1=VALUE\)"):
        ArmLinks.from_urdf(urdf, "panda_link0", "panda_hand")
    spec = ArmLinks.from_urdf(urdf, "panda_link0", "panda_hand", {"panda_finger_joint1": 0.01, "panda_finger_joint2": 0.01})
    assert spec.link_names[-3:] == ["panda_hand", "panda_leftfinger", "panda_rightfinger"]
    assert "panda_link8" not in spec.link_names and len(spec.joint_names) == 7
    from selfmodel.model.chain import link_poses_numpy

    poses = link_poses_numpy(spec, np.zeros((1, 7)))[0]
    left, right = poses[spec.link_names.index("panda_leftfinger")], poses[spec.link_names.index("panda_rightfinger")]
    hand = poses[spec.link_names.index("panda_hand")]
    # Each finger 1 cm out from the hand's axis, 5.84 cm down it; the hand 10.7 cm beyond link7.
    assert np.allclose(np.linalg.inv(hand) @ left[:, 3], [0, 0.01, 0.0584, 1], atol=1e-9)
    assert np.allclose(np.linalg.inv(hand) @ right[:, 3], [0, -0.01, 0.0584, 1], atol=1e-9)
    assert np.isclose(np.linalg.norm(hand[:3, 3] - poses[spec.link_names.index("panda_link7")][:3, 3]), 0.107)
    with pytest.raises(InputError, match="held joint 'panda_joint3' is not a movable joint off the chain"):
        ArmLinks.from_urdf(urdf, "panda_link0", "panda_hand", {"panda_finger_joint1": 0, "panda_finger_joint2": 0,
                                                                 "panda_joint3": 0.0})


def test_rig_file_held_joints_are_checked_against_the_urdf(tmp_path):
    from rigs import load_rig
    from rigs.spec import BUILTIN_DIR

    rig = load_rig("panda-cameras")
    assert rig.robot.held_joints == {"panda_finger_joint1": 0.0, "panda_finger_joint2": 0.0}
    text = (BUILTIN_DIR / "panda-cameras.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("panda_finger_joint2 = 0.0", "panda_finger_joint2 = 0.07"))
    with pytest.raises(InputError, match=r"held_joints.panda_finger_joint2' = 0.07 is outside the joint's limits"):
        load_rig(bad)
    bad.write_text(text.replace("panda_finger_joint2 = 0.0", "panda_joint2 = 0.0"))
    with pytest.raises(InputError, match="'panda_joint2' is not a movable joint of .* off the chain"):
        load_rig(bad)


def test_simulator_refuses_a_pose_where_the_true_panda_passes_through_itself_and_records_only_real_ones(tmp_path):
    from capture.session import load_session
    from capture.simulate import capture_simulated
    from rigs import load_rig
    from rigs.self_contact import SelfContact
    from selfmodel.evaluation.metrics import true_arm

    rig = load_rig("panda-cameras")
    session = load_session(capture_simulated(rig, 4, 3, tmp_path / "panda"))
    assert session.held_joints == rig.robot.held_joints
    arm = true_arm(session)
    assert {"panda_leftfinger", "panda_rightfinger", "panda_hand"} <= set(arm.meshes)  # the whole body, once
    rules = SelfContact(session.path / "truth" / "robot.urdf", session.joint_names, session.held_joints, clearance=0.0)
    assert rules.pairs[("panda_leftfinger", "panda_rightfinger")] == "rigid"
    assert rules.pairs[("panda_hand", "panda_link6")] == "one joint"
    for p in range(len(arm.pose_ids)):
        poses = {link: arm.base_T_links[p, arm.link_names.index(link)] for link in rules.links}
        assert not rules.contacts(poses), arm.pose_ids[p]
    # Random configurations the true arm cannot take (about one in ten) are the ones the simulator refuses.
    from rigs.simulator import Simulator
    from rigs.truth import draw_truth

    with Simulator(rig, draw_truth(rig), session.path / "truth" / "robot.urdf") as sim:
        rules, generator, refused = sim.self_contact(), np.random.default_rng(5), 0
        for q in generator.uniform(sim.chain.lower, sim.chain.upper, (60, 7)):
            sim.set_q(q)
            impossible = bool(rules.contacts({link: sim.base_T_link(link) for link in rules.links}))
            refused += impossible
            assert not impossible or sim.in_collision(q)
        assert refused >= 2


def test_open_meshes_are_read_as_the_solid_they_enclose():
    """A closed box split into two open halves with a 0.4 mm crack between them: ray parity sees an
    open mesh; the solid is the box, and a point in front of the crack is outside."""
    from rigs.solids import solid_of

    box = trimesh.creation.box([0.1, 0.06, 0.04])
    halves = []
    for sign in (1.0, -1.0):  # each half loses its face at the crack
        half = trimesh.creation.box([0.1, 0.06, 0.0198], transform=trimesh.transformations.translation_matrix(
            [0.0, 0.0, sign * (0.0002 + 0.0099)]))
        half.update_faces(half.face_normals[:, 2] * sign > -0.5)
        halves.append(half)
    open_mesh = trimesh.util.concatenate(halves)
    assert not open_mesh.is_watertight
    solid = solid_of(open_mesh, 0.001)
    assert abs(solid.volume / box.volume - 1.0) < 0.05
    rng = np.random.default_rng(0)
    points = rng.uniform(-0.07, 0.07, (20_000, 3))
    truth = np.all(np.abs(points) <= [0.05, 0.03, 0.02], axis=1)
    assert np.mean(solid.contains(points) == truth) > 0.995
    assert not solid.contains(np.array([[0.06, 0.0, 0.0], [0.0, 0.0, 0.025]])).any()
    assert solid.contains(np.array([[0.0, 0.0, 0.0], [0.045, 0.025, 0.0]])).all()
    assert np.all(np.abs(solid.signed_distance(np.array([[0.0, 0.0, 0.0]])) + 0.02) < 0.0015)


def test_a_pair_the_real_arm_can_bring_into_contact_is_never_disabled(tmp_path):
    """The export's link2 came out 15 cm short: on its own geometry link2 never reaches the base, but
    the description's meshes (the real arm) do, so the pair stays enabled and the report says why."""
    from selfmodel.export.srdf import collision_matrix

    text = URDF.read_text().replace('lower="-2.8" upper="2.8"', 'lower="-1.7" upper="1.7"')
    (tmp_path / "description.urdf").write_text(text)
    short = text.replace('<collision><origin xyz="0.175 0 0"/><geometry><box size="0.35 0.06 0.05"/>',
                         '<collision><origin xyz="0.1 0 0"/><geometry><box size="0.2 0.06 0.05"/>')
    assert short != text
    (tmp_path / "short.urdf").write_text(short)
    alone = collision_matrix(tmp_path / "short.urdf", JOINTS, "base", 3000, np.random.default_rng(0))
    assert alone.reasons[("base", "link2")] == "Never"
    checked = collision_matrix(tmp_path / "short.urdf", JOINTS, "base", 3000, np.random.default_rng(0),
                               description=tmp_path / "description.urdf")
    assert checked.reasons[("base", "link2")] is None
    assert "description's meshes touch in" in checked.kept[("base", "link2")]


def test_a_world_standing_for_the_true_shapes_reads_mesh_files_as_the_shapes_they_hold():
    """Pinocchio's mesh loader reads pybullet_data's Panda link5 OBJ with sliver triangles joining
    corners of different parts; the truth's world reads the file with trimesh, so a box 8 mm clear
    of the link's surface is free, and the same box grown 20 mm a side touches it."""
    import pybullet_data

    from selfmodel.export.world import Box, CollisionWorld

    urdf = Path(pybullet_data.getDataPath()) / "franka_panda" / "panda.urdf"
    joints = [f"panda_joint{k}" for k in range(1, 8)]
    held = {"panda_finger_joint1": 0.0, "panda_finger_joint2": 0.0}
    link5_T_box = np.array([[-0.914721, -0.232696, 0.330361, -0.108482],
                            [0.253079, 0.307444, 0.917294, 0.002316],
                            [-0.315018, 0.922676, -0.222335, -0.129545],
                            [0.0, 0.0, 0.0, 1.0]])
    size = np.array([0.181355, 0.105691, 0.063644])
    q = np.zeros(7)
    probe = CollisionWorld(urdf, joints, "panda_link0", held=held, geometry="visual", convex=False,
                           read_meshes="trimesh")
    base_T_box = probe.link_pose("panda_link5", q) @ link5_T_box
    mesh = trimesh.load(Path(pybullet_data.getDataPath()) / "franka_panda" / "meshes" / "visual" / "link5.obj",
                        force="mesh")
    local = (np.asarray(mesh.sample(100_000, seed=0)) - link5_T_box[:3, 3]) @ link5_T_box[:3, :3]
    clearance = np.linalg.norm(np.maximum(np.abs(local) - size / 2, 0), axis=1).min()
    assert clearance > 0.005
    for grow, touches in ((0.0, False), (0.04, True)):
        world = CollisionWorld(urdf, joints, "panda_link0", held=held, geometry="visual", convex=False,
                               read_meshes="trimesh", obstacles=[Box("near", size + grow, base_T_box)])
        assert (("obstacle:near", "panda_link5") in world.colliding_pairs(q)) is touches


def test_a_descriptions_collision_obj_files_are_read_as_the_hulls_they_hold():
    """pybullet_data's Panda collision OBJs keep each corner apart per normal; read unmerged they
    split into single triangles. Read merged, each link's hull holds its visual surface."""
    import pybullet_data

    from selfmodel.evaluation.export_truth import description_pieces
    from selfmodel.export.bodies import pieces_outside_distance

    folder = Path(pybullet_data.getDataPath()) / "franka_panda"
    links = ["panda_link5", "panda_hand"]
    pieces = description_pieces(folder / "panda.urdf", links)
    for link, name in zip(links, ["link5", "hand"]):
        visual = trimesh.load(folder / "meshes" / "visual" / f"{name}.obj", force="mesh")
        outside = pieces_outside_distance(pieces[link], np.asarray(visual.sample(5000, seed=0)))
        assert len(pieces[link]) == 1 and np.mean(outside <= 0.002) > 0.95


def test_a_worlds_answer_does_not_depend_on_the_configurations_checked_before(written):
    """Pinocchio seeds each pair's GJK with where its last query ended; the world turns that off
    (on the crashed xArm6 it hid a link 8.6 mm deep in a box after 405 other configurations), so the
    same configurations checked in any order are flagged the same."""
    import warnings

    from rigs.transforms import make_transform
    from selfmodel.export.world import Box, CollisionWorld

    out, _, _ = written
    box = Box("crate", np.array([0.08, 0.08, 0.08]), make_transform([0.24, 0.165, 0.40]))
    world = CollisionWorld(out / "robot.urdf", JOINTS, "base", srdf=out / "robot.srdf", obstacles=[box])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert not any(r.enable_cached_gjk_guess for r in [*world.geometry_data.collisionRequests,
                                                            *world.geometry_data.distanceRequests])
    qs = np.random.default_rng(4).uniform(-np.pi, np.pi, (400, 2))
    forward = [world.collides(q) for q in qs]
    backward = [world.collides(q) for q in qs[::-1]][::-1]
    assert forward == backward and 0 < sum(forward) < len(qs)
