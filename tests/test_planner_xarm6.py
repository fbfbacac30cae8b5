"""The export on real arms' geometry, judged by the planner that loads it and by the true meshes.

The xArm6 of pybullet_data stands in for a learned model: each link's body is the solid its visual
mesh encloses (rigs.solids), so the export's whole path (bodies, convex pieces, margin, spheres,
separation at recorded poses, SRDF, cuRobo configuration) runs on the shapes a real arm has: links
that nest at their joints, a forearm that folds back over the upper arm, a wrist close to its own
forearm. Recorded configurations are ones the simulator would record (the true meshes apart by
5 mm where two or more joints move between them). The written URDF and SRDF are then loaded into
Pinocchio/coal, the collision checking of the OMPL planner (selfmodel.evaluation.planning), and asked what a
planner asks. The Franka Panda, with its hand and closed fingers, goes the same way (slow: eleven
bodies).
"""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import yaml

from selfmodel.model.models import SelfModel

JOINTS = [f"joint{k}" for k in range(1, 7)]
RECORDED = 12

# The xArm6 trained, exported and planned on end to end (a minute of the machine): with the slow tests.
pytestmark = pytest.mark.slow


def xarm_urdf() -> Path:
    import pybullet_data

    return Path(pybullet_data.getDataPath()) / "xarm" / "xarm6_robot.urdf"


class TrueMeshModel(SelfModel):
    """The structured self-model contract answered by the true meshes: a link's occupancy is a steep
    sigmoid of the signed distance to the solid its mesh encloses (link frame, m)."""

    kind = "structured"

    def __init__(self, urdf: Path, base: str, tip: str, recorded: np.ndarray, held: dict[str, float] | None = None,
                 pitch: float = 0.002):
        from rigs.link_meshes import link_meshes
        from rigs.solids import solid_of
        from selfmodel.model.chain import ArmLinks

        spec = ArmLinks.from_urdf(urdf, base, tip, dict(held or {}))
        super().__init__(spec.joint_names, [-2.0, -2.0, -2.0], [2.0, 2.0, 2.0], urdf, base, tip, spec.held)
        self.spec = spec
        meshes = link_meshes(urdf, self.spec.link_names)
        self.link_names = [link for link in self.spec.link_names if link in meshes]
        self.solids = {link: solid_of(meshes[link], pitch) for link in self.link_names}
        self.training_q = np.asarray(recorded, dtype=float)
        self.training_pose_ids = [f"p{k:04d}" for k in range(len(self.training_q))]

    def link_bounds(self, link: str):
        lo, hi = self.solids[link].mesh.bounds
        return lo - 0.02, hi + 0.02

    def link_occupancy(self, link: str, points: np.ndarray) -> np.ndarray:
        distance = self.solids[link].signed_distance(np.asarray(points, dtype=float))
        return 1.0 / (1.0 + np.exp(np.clip(distance / 0.001, -50, 50)))


def true_world(obstacles=(), urdf: Path | None = None, joints: list[str] = JOINTS, base: str = "link_base",
               held: dict[str, float] | None = None):
    """The true arm as a planner's world: its visual meshes (triangle soups), pairs of links with
    two or more moving joints between them (a one-joint pair nests at its joint by design)."""
    from rigs.link_meshes import link_meshes
    from rigs.self_contact import MOVING
    from selfmodel.export.srdf import LinkTree
    from selfmodel.export.world import CollisionWorld

    urdf = urdf or xarm_urdf()
    tree = LinkTree(urdf)
    links = sorted(link_meshes(urdf, fold_fixed=False))
    apart = {tuple(sorted(pair)) for pair in itertools.combinations(links, 2)
             if sum(1 for joint in tree.path(*pair) if joint.type in MOVING and joint.name in joints) >= 2}
    return CollisionWorld(urdf, joints, base, convex=False, geometry="visual", pairs=apart, held=held,
                          obstacles=list(obstacles)), apart


def recorded_configurations(urdf: Path, joints: list[str], base: str, tip: str, count: int, seed: int,
                            held: dict[str, float] | None = None) -> np.ndarray:
    """(count, dof) configurations the simulator would record: the true meshes 5 mm apart wherever
    two or more joints move between two links, one-joint pairs no deeper than they always nest."""
    from rigs.self_contact import SelfContact
    from selfmodel.export.srdf import joint_limits
    from selfmodel.model.chain import ArmLinks, link_poses_numpy

    spec = ArmLinks.from_urdf(urdf, base, tip, held)
    rules = SelfContact(urdf, joints, held, clearance=0.005)
    lower, upper = joint_limits(urdf, joints)
    rng = np.random.default_rng(seed)
    recorded = []
    while len(recorded) < count:
        q = rng.uniform(lower, upper)
        poses = link_poses_numpy(spec, q[None])[0]
        if not rules.contacts({link: poses[spec.link_names.index(link)] for link in rules.links}):
            recorded.append(q)
    return np.array(recorded)


@pytest.fixture(scope="module")
def xarm(tmp_path_factory):
    from selfmodel.export.exporter import CollisionExporter
    from selfmodel.export.settings import BodySettings, MarginSettings, PieceSettings, SphereSettings
    from selfmodel.export.srdf import joint_limits

    urdf = xarm_urdf()
    model = TrueMeshModel(urdf, "link_base", "link6", recorded_configurations(urdf, JOINTS, "link_base", "link6", 12, 3))
    exporter = CollisionExporter(spheres=SphereSettings(max_spheres=28, polish=0), pieces=PieceSettings(max_pieces=3),
                                 body=BodySettings(voxel=0.006), margin=MarginSettings(samples=3000, climbs=40),
                                 srdf_samples=1500, seed=0)
    fitted = exporter.fit(model)
    out = tmp_path_factory.mktemp("xarm6") / "collision"
    report = fitted.save(out, urdf, exporter.srdf_samples)
    return out, report, fitted, model, joint_limits(urdf, JOINTS)


def test_exported_xarm6_is_free_where_it_stood_and_flags_every_self_contact_of_the_true_arm(xarm):
    from selfmodel.export.world import CollisionWorld

    out, report, _, model, (lower, upper) = xarm
    assert report["recorded_poses_in_collision"]["pieces"]["poses"] == 0
    assert report["recorded_poses_in_collision"]["spheres"]["poses"] == 0
    world = CollisionWorld(out / "robot.urdf", JOINTS, "link_base", srdf=out / "robot.srdf")
    for q in model.training_q:
        assert not world.colliding_pairs(q), q
    # Random configurations: wherever the true arm runs into itself, the export says so.
    truth, _ = true_world()
    contacts = 0
    for q in np.random.default_rng(8).uniform(lower, upper, (1500, 6)):
        if truth.collides(q):
            contacts += 1
            assert world.collides(q), q
    assert contacts >= 50  # the sample holds real self-contacts (about one configuration in ten)


def test_xarm6_srdf_disables_adjacent_pairs_and_no_pair_the_true_arm_can_bring_into_contact(xarm):
    out, report, _, _, (lower, upper) = xarm
    root = ET.parse(out / "robot.srdf").getroot()
    disabled = {tuple(sorted((e.get("link1"), e.get("link2")))): e.get("reason") for e in root.findall("disable_collisions")}
    adjacent = {("link_base", "link1"), ("link1", "link2"), ("link2", "link3"), ("link3", "link4"), ("link4", "link5"),
                ("link5", "link6")}
    assert {tuple(sorted(pair)) for pair in adjacent} == {pair for pair, reason in disabled.items() if reason == "Adjacent"}
    assert set(disabled.values()) <= {"Adjacent", "Never", "Always", "Default"}
    assert report["srdf"]["samples"] == 1500 and report["srdf"]["checked_pairs"] == 21
    # Independently of the export's samples: pairs of the true meshes seen touching stay enabled.
    truth, apart = true_world()
    touching = set()
    for q in np.random.default_rng(99).uniform(lower, upper, (20_000, 6)):
        touching |= truth.colliding_pairs(q)
    assert len(touching) >= 8  # the forearm and wrist reach the base, link1 and the upper arm
    assert not touching & set(disabled), touching & set(disabled)
    assert root.find("group/chain").get("tip_link") == "link6"
    assert root.find("virtual_joint").get("type") == "fixed"


def test_xarm6_folded_into_a_box_collides_and_a_planned_path_around_it_clears_the_true_arm(xarm):
    from rigs.transforms import make_transform
    from selfmodel.evaluation.planning import densify, plan, replay
    from selfmodel.export.world import Box, CollisionWorld

    out, _, _, model, (lower, upper) = xarm
    free = CollisionWorld(out / "robot.urdf", JOINTS, "link_base", srdf=out / "robot.srdf")
    # Two recorded poses, and a 10 cm box where the flange passes half way along the straight line
    # between them, clear of both ends.
    for start, goal in itertools.combinations(model.training_q, 2):
        middle = (start + goal) / 2
        box = Box("crate", np.array([0.1, 0.1, 0.1]), make_transform(free.link_pose("link6", middle)[:3, 3]))
        world = CollisionWorld(out / "robot.urdf", JOINTS, "link_base", srdf=out / "robot.srdf", obstacles=[box])
        if not (world.collides(start) or world.collides(goal) or free.collides(middle)):
            break
    else:
        pytest.fail("no pair of recorded poses clear of a box between them")
    truth, _ = true_world([box])
    # Folded into the box half way, the arm collides for the export and for the true arm alike.
    assert ("link6", "obstacle:crate") in world.colliding_pairs(middle) and truth.collides(middle)
    assert any(truth.collides(q) for q in densify(np.stack([start, goal]), np.radians(1.0)))
    result = plan(world, start, goal, lower, upper, seconds=10.0, seed=0)
    assert result.solved, result.reason
    assert np.allclose(result.path[0], start) and np.allclose(result.path[-1], goal)
    assert replay(world, result.path) is None and replay(truth, result.path) is None


def test_xarm6_curobo_config_names_only_links_and_files_of_the_export(xarm):
    out, report, fitted, model, _ = xarm
    text = (out / "curobo_robot.yml").read_text()
    assert "&id" not in text
    config = yaml.safe_load(text)["robot_cfg"]["kinematics"]
    urdf = Path(config["urdf_path"])
    assert urdf.resolve() == (out / "robot.urdf").resolve() and Path(config["asset_root_path"]).resolve() == out.resolve()
    tree = ET.parse(urdf).getroot()
    links = {link.get("name") for link in tree.findall("link")}
    assert set(config["collision_link_names"]) == set(model.link_names) <= links
    assert (config["base_link"], config["ee_link"]) == ("link_base", "link6")
    assert sum(len(spheres) for spheres in config["collision_spheres"].values()) == report["spheres_total"] <= 28
    disabled = {tuple(sorted(pair[:2])) for pair in report["srdf"]["disabled"]}
    ignored = {tuple(sorted((a, b))) for a, others in config["self_collision_ignore"].items() for b in others}
    assert ignored == disabled
    assert config["cspace"]["joint_names"] == JOINTS
    np.testing.assert_allclose(config["cspace"]["retract_config"], model.training_q[0])
    for mesh in tree.iter("mesh"):
        assert (out / mesh.get("filename")).is_file()
    spheres = yaml.safe_load((out / "curobo_spheres.yml").read_text())["collision_spheres"]
    assert spheres == config["collision_spheres"]


@pytest.mark.slow
def test_panda_with_closed_fingers_exports_the_whole_body_once_free_where_it_stood(tmp_path):
    """The second arm: the Panda's hand and both closed fingers are bodies of their own, link8 (no
    geometry, on a fixed joint) none; the recorded poses are free; the SRDF holds the fingers' pairs
    and disables none that the true meshes bring into contact."""
    import pybullet_data

    from selfmodel.export.exporter import CollisionExporter
    from selfmodel.export.settings import BodySettings, MarginSettings, PieceSettings, SphereSettings
    from selfmodel.export.srdf import joint_limits
    from selfmodel.export.world import CollisionWorld

    urdf = Path(pybullet_data.getDataPath()) / "franka_panda" / "panda.urdf"
    held = {"panda_finger_joint1": 0.0, "panda_finger_joint2": 0.0}
    joints = [f"panda_joint{k}" for k in range(1, 8)]
    recorded = recorded_configurations(urdf, joints, "panda_link0", "panda_hand", 10, 3, held)
    model = TrueMeshModel(urdf, "panda_link0", "panda_hand", recorded, held)
    assert "panda_link8" not in model.link_names
    assert model.link_names[-3:] == ["panda_hand", "panda_leftfinger", "panda_rightfinger"]
    exporter = CollisionExporter(spheres=SphereSettings(max_spheres=40, polish=0), pieces=PieceSettings(max_pieces=2),
                                 body=BodySettings(voxel=0.006), margin=MarginSettings(samples=3000, climbs=40),
                                 srdf_samples=1500, seed=0)
    out = tmp_path / "collision"
    report = exporter.fit(model).save(out, urdf, exporter.srdf_samples)
    assert report["held_joints"] == held and report["recorded_poses_in_collision"]["pieces"]["poses"] == 0
    tree = ET.parse(out / "robot.urdf").getroot()
    with_pieces = {link.get("name") for link in tree.findall("link") if link.findall("collision")}
    assert with_pieces == set(model.link_names)
    world = CollisionWorld(out / "robot.urdf", joints, "panda_link0", srdf=out / "robot.srdf", held=held)
    for q in recorded:
        assert not world.colliding_pairs(q), q
    root = ET.parse(out / "robot.srdf").getroot()
    disabled = {tuple(sorted((e.get("link1"), e.get("link2")))): e.get("reason") for e in root.findall("disable_collisions")}
    # The closed fingers touch each other and the hand they hang from, always: disabled, with MoveIt's reasons.
    assert disabled[("panda_leftfinger", "panda_rightfinger")] in ("Default", "Always")
    assert disabled[("panda_hand", "panda_leftfinger")] == disabled[("panda_hand", "panda_rightfinger")] == "Adjacent"
    assert disabled[("panda_hand", "panda_link7")] == "Adjacent"  # through link8, which has no geometry
    truth, _ = true_world(urdf=urdf, joints=joints, base="panda_link0", held=held)
    touching = set()
    lower, upper = joint_limits(urdf, joints)
    for q in np.random.default_rng(99).uniform(lower, upper, (20_000, 7)):
        touching |= truth.colliding_pairs(q)
    assert any("finger" in a + b for a, b in touching)  # the fingers do reach the arm ...
    assert not touching & set(disabled), touching & set(disabled)  # ... and those pairs are checked
    config = yaml.safe_load((out / "curobo_robot.yml").read_text())["robot_cfg"]["kinematics"]
    assert config["lock_joints"] == held and set(config["collision_link_names"]) == set(model.link_names)
