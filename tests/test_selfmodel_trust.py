"""A self-model to trust: identifiable joint corrections, baked queries that agree with the network,
relearning from a previous model, devices and threads.

The 2-joint box arm (tests/data/selfmodel) has no placement errors at all, so every correction it
learns should be near zero; its bent twin has the upper link bent 3 degrees about x, which must
show up at the elbow (the joint the bent link carries).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from capture.session import load_session
from capture.simulate import capture_simulated
from rigs import load_rig
from rigs.errors import InputError
from selfcal.cli import app
from selfmodel.evaluation.metrics import true_corrections
from selfmodel.labels.depth import LabelSettings
from selfmodel.learn.trainer import SelfModelTrainer
from selfmodel.model.baked import agreement, bake, load_baked, save_baked
from selfmodel.model.chain import ArmLinks
from selfmodel.model.corrections import TOLERANCE
from selfmodel.model.models import SelfModel
from selfmodel.model.runtime import default_threads, resolve_device, set_threads

DATA = Path(__file__).parent / "data" / "selfmodel"
runner = CliRunner()


def trainer(steps: int, seed: int = 3) -> SelfModelTrainer:
    return SelfModelTrainer(steps=steps, seed=seed, batch=2048, prior_batch=512, threads=1, device="cpu",
                            labels=LabelSettings(hit_rays_per_image=300, miss_rays_per_image=100))


@pytest.fixture(scope="module")
def sessions(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("trust")
    return {"intact": capture_simulated(load_rig(DATA / "two_joint_box.toml"), 40, 1, root / "intact"),
            "bent": capture_simulated(load_rig(DATA / "two_joint_box_bent.toml"), 24, 4, root / "bent")}


@pytest.fixture(scope="module")
def intact(sessions, tmp_path_factory):
    """A model of the intact arm, saved (so it has baked grids) and loaded back."""
    session = load_session(sessions["intact"])
    result = trainer(300).fit([session])
    folder = tmp_path_factory.mktemp("model") / "intact"
    result.model.save(folder, [session], {"steps": 300})
    return result, SelfModel.load(folder)


def _truth(session_path: Path) -> np.ndarray:
    session = load_session(session_path)
    return true_corrections(session, ArmLinks.from_urdf(session.urdf_path, session.base_link, session.tip_link))


def test_an_arm_without_placement_errors_learns_near_zero_corrections(intact, sessions):
    result, _ = intact
    assert np.all(_truth(sessions["intact"]) == 0.0)
    fit = result.model.corrections
    # Measured at most 0.09 mm and 0.13 deg over label seeds 3, 5, 11, 17 (the largest a spin about
    # the shoulder's axis, which a box shows only through its corners): bounds three times that.
    assert np.abs(fit.deltas[:, :3]).max() < 0.5e-3
    assert np.degrees(np.abs(fit.deltas[:, 3:]).max()) < 0.4
    assert np.all(np.abs(fit.deltas)[fit.determined] <= np.tile(TOLERANCE, (len(fit.deltas), 1))[fit.determined])
    # The held corrections are the chain's: the networks did not move them.
    np.testing.assert_allclose(result.model.chain.deltas.detach().numpy(), fit.deltas, atol=1e-6)


@pytest.mark.parametrize("seed", [5, 11])
def test_near_zero_corrections_hold_for_other_seeds(sessions, seed):
    from selfmodel.labels.depth import depth_training_data
    from selfmodel.labels.description import described_meshes
    from selfmodel.learn.placement import PlacementSettings, fit_placements

    session = load_session(sessions["intact"])
    spec = ArmLinks.from_urdf(session.urdf_path, session.base_link, session.tip_link)
    data = depth_training_data([session], LabelSettings(hit_rays_per_image=300, miss_rays_per_image=10),
                               np.random.default_rng(seed))
    fit = fit_placements(spec, described_meshes(spec, session.urdf_path, session.tip_link, None), data.surface,
                         data.surface_config, data.q, settings=PlacementSettings(seed=seed))
    assert np.abs(fit.deltas[:, :3]).max() < 0.5e-3 and np.degrees(np.abs(fit.deltas[:, 3:]).max()) < 0.4


def test_relearning_from_the_intact_model_finds_the_bend_and_says_what_changed(intact, sessions, tmp_path):
    _, before = intact
    truth = _truth(sessions["bent"])
    result = runner.invoke(app, ["selfmodel", "train", str(sessions["bent"]), "--out", str(tmp_path / "after"),
                                 "--steps", "60", "--threads", "1", "--device", "cpu", "--previous", str(before.folder)])
    assert result.exit_code == 0, result.output
    assert "what changed" in result.output
    after = SelfModel.load(tmp_path / "after")
    elbow = after.joint_names.index("elbow")
    # The bend is 3 degrees about x; measured within 0.08 deg of it (label seeds 3, 5, 11, 17).
    assert abs(np.degrees(after.corrections.deltas[elbow, 3]) - np.degrees(truth[elbow, 3])) < 0.3
    assert after.corrections.determined[elbow, 3]
    import json

    changes = json.loads((tmp_path / "after" / "changes.json").read_text())
    first = changes["joints"][0]
    assert first["joint"] == "elbow" and first["moved"] and abs(first["rotation_deg"] - 3.0) < 0.3


def test_a_model_against_itself_changed_nothing_and_says_so_in_plain_json(intact):
    """Nothing moved is written as false (changes.json once failed on numpy's own booleans there)."""
    import json

    from selfmodel.inspect.changes import summary, what_changed

    _, before = intact
    changes = json.loads(json.dumps(what_changed(before, before)))
    assert not any(row["moved"] for row in changes["joints"]) and not any(row["changed"] for row in changes["links"])
    assert summary(changes) == ["what changed: nothing beyond retraining noise"]


# What `selfcal calibrate` writes beside robot.urdf, cut to the keys a calibration folder must have:
# the joints' placement deltas (zero: robot.urdf has them written in) and their standard deviations.
CALIBRATION = """format: selfcal-calibration
format_version: 1
robot: {urdf: robot.urdf, base_link: base, tip_link: box}
joints:
  shoulder: {delta_twist: [0, 0, 0, 0, 0, 0], delta_xyz_std: [1.0e-4, 2.0e-4, 3.0e-4],
             delta_rpy_std: [4.0e-4, 5.0e-4, 6.0e-4], zero_offset: 0.0, zero_offset_std: 8.0e-4}
  elbow: {delta_twist: [0, 0, 0, 0, 0, 0], delta_xyz_std: [1.0e-4, 1.0e-4, 1.0e-4],
          delta_rpy_std: [3.0e-4, 3.0e-4, 3.0e-4], zero_offset: 0.0, zero_offset_std: 4.0e-4}
tracker_T_base: null
targets: {}
"""


def _calibration_folder(session_path: Path, folder: Path, document: str = CALIBRATION) -> Path:
    """A folder laid out as `selfcal calibrate` writes one: robot.urdf beside calibration.yaml naming it."""
    import shutil

    folder.mkdir()
    shutil.copy(load_session(session_path).urdf_path, folder / "robot.urdf")
    (folder / "calibration.yaml").write_text(document)
    return folder / "robot.urdf"


def test_a_calibrations_urdf_keeps_its_placements_and_any_other_is_fitted(sessions, tmp_path):
    """On the bent twin a fit moves the elbow by the bend; a calibration's URDF is held as it is."""
    calibrated = _calibration_folder(sessions["bent"], tmp_path / "cal")
    plain = tmp_path / "plain.urdf"
    plain.write_text(calibrated.read_text())
    common = ["--steps", "2", "--threads", "1", "--device", "cpu", "--json"]
    runs = {"held": ["--urdf", str(calibrated)], "fitted": ["--urdf", str(plain)],
            "asked": ["--urdf", str(calibrated), "--placements", "fit"]}
    models = {}
    for name, extra in runs.items():
        result = runner.invoke(app, ["selfmodel", "train", str(sessions["bent"]), "--out", str(tmp_path / name), *common,
                                     *extra])
        assert result.exit_code == 0, result.output
        models[name] = SelfModel.load(tmp_path / name)
    held = models["held"].corrections
    assert held.held and np.all(held.deltas == 0.0)
    np.testing.assert_array_equal(models["held"].chain.deltas.detach().numpy(), 0.0)
    # They carry the calibration's standard deviations, its zero offset's about each joint's axis.
    axes = [joint.axis for joint in models["held"].spec.joints if joint.type != "fixed"]
    for j, (xyz, rpy, zero) in enumerate([((1e-4, 2e-4, 3e-4), (4e-4, 5e-4, 6e-4), 8e-4),
                                          ((1e-4,) * 3, (3e-4,) * 3, 4e-4)]):
        expected = np.concatenate([xyz, np.sqrt(np.square(rpy) + (zero * np.abs(axes[j])) ** 2)])
        np.testing.assert_allclose(held.std[j], expected, rtol=1e-9)
    elbow = models["fitted"].joint_names.index("elbow")
    for name in ("fitted", "asked"):
        fit = models[name].corrections
        assert not fit.held and abs(np.degrees(fit.deltas[elbow, 3])) > 1.5  # the 3 degree bend, fitted


def test_placements_are_fitted_when_relearning_and_a_foreign_calibration_file_is_named(sessions, tmp_path):
    from selfcal.cli_selfmodel import placements_held

    calibrated = _calibration_folder(sessions["intact"], tmp_path / "cal")
    assert placements_held("auto", calibrated, False, None)[0] and placements_held("auto", calibrated, False, None)[2]
    assert not placements_held("auto", calibrated, False, tmp_path / "previous")[0]
    assert not placements_held("auto", None, False, None)[0] and placements_held("hold", None, False, None)[0]
    assert placements_held("hold", calibrated, False, tmp_path / "previous")[2] == calibrated.parent
    other = tmp_path / "cal" / "other.urdf"  # beside the calibration, but not the URDF it wrote
    other.write_text(calibrated.read_text())
    assert not placements_held("auto", other, False, None)[0]
    with pytest.raises(InputError, match="--placements fit needs a description"):
        placements_held("fit", None, True, None)
    foreign = _calibration_folder(sessions["intact"], tmp_path / "foreign", "format: something-else\n")
    with pytest.raises(InputError, match="calibration.yaml: beside --urdf .* not a selfcal-calibration file"):
        placements_held("auto", foreign, False, None)
    assert placements_held("hold", foreign, False, None)[0] and not placements_held("fit", foreign, False, None)[0]


def test_a_relearned_model_starts_from_the_previous_weights(intact, sessions):
    _, before = intact
    after = trainer(1).fit([load_session(sessions["bent"])], previous=before).model
    old, new = before.state_dict(), after.state_dict()
    changed = [name for name in old if not name.startswith("chain.")
               and not torch.allclose(old[name], new[name], atol=5e-3)]
    assert not changed  # one Adam step moves a weight by at most the learning rate (2e-3)


def test_previous_model_of_another_kind_is_refused(intact, sessions):
    _, before = intact
    with pytest.raises(InputError, match="structured model cannot start a free training"):
        SelfModelTrainer(kind="free", steps=1, threads=1, device="cpu").fit([load_session(sessions["intact"])],
                                                                            previous=before)


def test_baked_grids_agree_with_the_network_and_answer_faster(intact, sessions):
    _, model = intact
    session = load_session(sessions["intact"])
    baked = load_baked(model, model.folder)
    fresh = bake(model)
    for mine, theirs in zip(baked.grids, fresh.grids):
        np.testing.assert_array_equal(mine, theirs)
    figures = agreement(model, baked, session.q[:4], np.random.default_rng(0))
    # Measured 0.03 % (workspace) and 0.15 % (box around the arm) at 300 steps, 0.6 % at 60.
    assert figures["baked_disagreement_workspace"] < 0.01
    assert figures["baked_disagreement_arm_box"] < 0.01
    points = np.random.default_rng(1).uniform(*model.bounds, (2000, 3))
    q = session.q[np.random.default_rng(2).integers(0, len(session.q), 2000)]
    both = np.mean((model.occupancy(points, q) > 0.5) == (baked.occupancy(points, q) > 0.5))
    assert both > 0.99  # per-point configurations take the grouped path


def test_baked_grids_survive_a_round_trip_through_their_file(intact, tmp_path):
    _, model = intact
    baked = bake(model, pitch=0.01)
    save_baked(baked, tmp_path)
    again = load_baked(model, tmp_path)
    assert again.pitch == baked.pitch
    points = np.random.default_rng(0).uniform(*model.bounds, (500, 3))
    np.testing.assert_array_equal(again.occupancy(points, np.zeros(2)), baked.occupancy(points, np.zeros(2)))


def test_eval_reports_the_network_and_the_baked_grids(intact, sessions):
    _, model = intact
    result = runner.invoke(app, ["selfmodel", "eval", str(model.folder), str(sessions["intact"]), "--poses", "1",
                                 "--voxel-mm", "10", "--device", "auto", "--json"])
    assert result.exit_code == 0, result.output
    import json

    figures = json.loads(result.output[result.output.index("{"):])
    assert figures["queries_per_s"] > 0 and figures["baked_queries_per_s"] > 0
    assert figures["baked_disagreement_workspace"] < 0.01


def test_device_auto_falls_back_to_the_cpu_and_cuda_without_a_gpu_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(InputError, match="no GPU"):
        resolve_device("cuda")
    with pytest.raises(InputError, match="^device must be one of"):
        resolve_device("gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")


def test_cuda_without_a_gpu_is_one_sentence_and_exit_2(intact, sessions, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    result = runner.invoke(app, ["selfmodel", "train", str(sessions["intact"]), "--out", str(tmp_path / "m"),
                                 "--steps", "2", "--device", "cuda"])
    assert result.exit_code == 2 and "no GPU" in result.output
    assert not (tmp_path / "m").exists() and not (tmp_path / "m.partial").exists()


def test_a_trainer_keeps_its_settings_as_given_and_reads_the_kinds_defaults_through_its_rates():
    free = SelfModelTrainer(kind="free", steps=5, device="cpu")
    assert free.learning_rate is None and free.final_learning_rate is None
    assert free.start_rate == 1e-4 and free.end_rate == pytest.approx(1e-4 / 40)
    given = SelfModelTrainer(steps=5, learning_rate=1e-3, device="cpu")
    assert given.learning_rate == 1e-3 and given.final_learning_rate is None
    assert given.start_rate == 1e-3 and given.end_rate == pytest.approx(1e-3 / 40)
    assert SelfModelTrainer(steps=5, device="cpu").start_rate == 2e-3


def test_thread_defaults_leave_a_core_free(monkeypatch):
    import selfmodel.model.runtime as runtime

    for cores, expected in ((1, 1), (2, 1), (3, 1), (16, 8)):
        monkeypatch.setattr(runtime, "usable_cores", lambda cores=cores: cores)
        assert default_threads() == expected
    before = torch.get_num_threads()
    try:
        assert set_threads(1) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_check_names_matter_the_description_lacks_beside_its_intact_control(intact, tmp_path):
    from selfmodel.inspect.check import check_against

    _, control = intact
    session_path = capture_simulated(load_rig(DATA / "two_joint_box_tool.toml"), 40, 1, tmp_path / "tool")
    session = load_session(session_path)
    folder = tmp_path / "tool-model"
    trainer(300).fit([session]).model.save(folder, [session], {"steps": 300})
    tooled = check_against(SelfModel.load(folder), session.urdf_path).rows
    intact_rows = {row.link: row for row in check_against(control, control.urdf_path).rows}
    assert tooled[0].link == "box" and tooled[0].kind == "added matter", tooled
    # The 4 x 4 x 8 cm tool stands up to 5 cm off the described box; the intact arm's own figure is the control.
    assert tooled[0].added_mm > 3 * max(intact_rows["box"].added_mm, 5.0), (tooled[0], intact_rows["box"])


def test_baked_answers_the_same_whichever_way_a_batch_is_laid_out(intact, sessions):
    """One configuration, runs of equal configurations (a planner's points x configurations), a
    configuration per point, one thread or two: the same answers, point by point."""
    _, model = intact
    session = load_session(sessions["intact"])
    rng = np.random.default_rng(4)
    points = rng.uniform(*model.bounds, (40_000, 3)).astype(np.float32)
    configs = session.q[rng.integers(0, len(session.q), 40_000)].astype(np.float32)
    one = load_baked(model, model.folder)
    one.threads = 1
    two = load_baked(model, model.folder)
    two.threads = 2
    each = np.concatenate([one.occupancy(points[k:k + 1], configs[k]) for k in range(0, 40_000, 97)])
    np.testing.assert_allclose(one.occupancy(points, configs)[::97], each, atol=1e-6)  # a configuration per point
    runs = np.repeat(configs[:200], 200, axis=0)  # 200 configurations x 200 points
    per_run = np.concatenate([one.occupancy(points[k * 200:(k + 1) * 200], runs[k * 200]) for k in range(200)])
    np.testing.assert_allclose(one.occupancy(points, runs), per_run, atol=1e-6)
    np.testing.assert_array_equal(two.occupancy(points, runs), one.occupancy(points, runs))
    np.testing.assert_array_equal(two.occupancy(points, configs[0]), one.occupancy(points, configs[0]))
    outside = points + np.asarray(model.bounds[1]) - np.asarray(model.bounds[0])
    assert not np.any(one.occupancy(outside, configs[0]))  # outside the workspace: free, as the network says


def test_placement_jacobian_matches_finite_differences_of_the_residuals():
    """The placement fit's analytic Jacobian against residuals moved by +-1e-6 on every component
    (at non-zero corrections, where adding to delta and composing on the right differ)."""
    from selfmodel.learn.placement import downstream_joints, surface_jacobian
    from selfmodel.model.chain import link_poses_numpy

    session = load_rig(DATA / "two_joint_box.toml")
    spec = ArmLinks.from_urdf(session.robot.urdf, session.robot.base_link, session.robot.tip_link)
    rng = np.random.default_rng(0)
    q = rng.uniform(-1.0, 1.0, (3, spec.dof))
    deltas = rng.normal(0.0, 0.03, (spec.dof, 6))
    poses = link_poses_numpy(spec, q, deltas)
    owner = rng.integers(1, len(spec.link_names), 40)
    configs = rng.integers(0, 3, 40)
    local = rng.normal(0.0, 0.1, (40, 3))
    normal = rng.normal(size=(40, 3))
    normal /= np.linalg.norm(normal, axis=1, keepdims=True)
    points = np.einsum("nij,nj->ni", poses[configs, owner, :3, :3], local) + poses[configs, owner, :3, 3]
    normal_base = np.einsum("nij,nj->ni", poses[configs, owner, :3, :3], normal)

    def residual(d):
        pose = link_poses_numpy(spec, q, d)[configs, owner]
        moved = np.einsum("nji,nj->ni", pose[:, :3, :3], points - pose[:, :3, 3])
        return np.sum(normal * moved, axis=1)

    analytic = surface_jacobian(spec, poses, deltas, downstream_joints(spec), points, normal_base, owner, configs)
    numeric = np.zeros_like(analytic)
    for index in range(deltas.size):
        step = np.zeros(deltas.size)
        step[index] = 1e-6
        numeric[:, index] = (residual(deltas + step.reshape(deltas.shape)) - residual(deltas - step.reshape(deltas.shape))) / 2e-6
    np.testing.assert_allclose(analytic, numeric, atol=1e-6)


def test_relearn_plan_chooses_poses_that_see_more_than_random_ones(intact, tmp_path):
    """`selfcal plan --optimal --self-model`: poses D-optimal for the placements the cameras see,
    a plan `selfcal capture --plan` records."""
    from calib.workflows.pose_selection import d_optimal, log_det
    from selfmodel.labels.description import described_meshes
    from selfmodel.learn.pose_planning import placement_blocks, placement_information

    _, model = intact
    rig = load_rig(DATA / "two_joint_box.toml")
    q = np.random.default_rng(1).uniform(-1.5, 1.5, (120, model.dof))
    meshes = described_meshes(model.spec, model.urdf_path, model.tip_link, None)
    blocks, rank = placement_blocks(model.spec, meshes, q, rig.cameras)
    assert rank == 6 * model.dof and blocks.shape == (120, rank, rank)
    chosen = d_optimal(blocks, 8)
    assert len(set(chosen.indices.tolist())) == 8
    rng = np.random.default_rng(0)
    random = np.median([log_det(blocks, rng.choice(120, 8, replace=False)) for _ in range(20)])
    # Measured 1.26-1.31x the information per combination of a random choice (candidate seeds 0-4, hidden points dropped).
    assert np.exp((chosen.log_det - random) / rank) > 1.1
    information = placement_information(model.spec, meshes, q[:4], rig.cameras)
    assert information.shape == (4, 6 * model.dof, 6 * model.dof)
    np.testing.assert_allclose(information, np.transpose(information, (0, 2, 1)))
    assert np.all(np.linalg.eigvalsh(information).min(axis=1) > -1e-9 * np.abs(information).max())

    plan = tmp_path / "plan.csv"
    result = runner.invoke(app, ["plan", "--rig", str(DATA / "two_joint_box.toml"), "--poses", "6", "--optimal",
                                 "--candidates", "60", "--self-model", str(model.folder), "--out", str(plan)])
    assert result.exit_code == 0, result.output
    assert "joint placement combinations the cameras see" in result.output
    recorded = runner.invoke(app, ["capture", "--rig", str(DATA / "two_joint_box.toml"), "--plan", str(plan),
                                   "--out", str(tmp_path / "session")])
    assert recorded.exit_code == 0, recorded.output
    assert len(load_session(tmp_path / "session").pose_ids) == 6


def test_relearn_plan_is_refused_without_optimal_or_for_a_model_without_placements(intact, tmp_path):
    _, model = intact
    result = runner.invoke(app, ["plan", "--rig", str(DATA / "two_joint_box.toml"), "--poses", "6",
                                 "--self-model", str(model.folder), "--out", str(tmp_path / "plan.csv")])
    assert result.exit_code == 2 and "--self-model plans a self-model relearn with --optimal" in result.output
    assert not (tmp_path / "plan.csv").exists()


def test_weighting_occupied_labels_moves_the_boundary_outwards(sessions):
    """occupied_weight trades free labels for occupied ones: from the same data, seed and steps, more
    of a fresh draw of occupied labels is called occupied, and less of the free ones free."""
    from selfmodel.labels.depth import depth_training_data

    session = load_session(sessions["intact"])
    settings = LabelSettings(hit_rays_per_image=300, miss_rays_per_image=100)
    labels = depth_training_data([session], settings, np.random.default_rng(99))
    occupied = labels.occupied > 0.5
    recall, specificity = {}, {}
    for weight in (1.0, 2.0):
        model = SelfModelTrainer(steps=120, seed=3, batch=2048, prior_batch=512, threads=1, device="cpu",
                                 occupied_weight=weight, labels=settings).fit([session]).model
        called = model.occupancy(labels.points, labels.q[labels.config]) > 0.5
        recall[weight], specificity[weight] = called[occupied].mean(), (~called[~occupied]).mean()
    # Measured over seeds 3, 5, 11, 17: recall +0.09 to +0.30, free labels called free -0.06 to -0.14.
    assert recall[2.0] > recall[1.0] + 0.04, recall
    assert specificity[2.0] < specificity[1.0] - 0.02, specificity
