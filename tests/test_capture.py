"""Recording sessions from the built-in simulated rigs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from capture import load_session
from capture.simulate import capture_simulated, partial_path
from rigs import InputError, builtin_rigs, load_rig
from selfcal.cli import app

runner = CliRunner()


def test_every_builtin_rig_loads_and_names_its_chain():
    assert set(builtin_rigs()) >= {"iiwa-tracker", "iiwa-tracker-compliant", "iiwa-tracker-crashed",
                                   "xarm6-cameras", "xarm6-cameras-crashed"}
    for name in builtin_rigs():
        rig = load_rig(name)
        assert rig.robot.urdf.is_file()
        assert rig.truth is not None


def test_captured_session_is_self_contained_and_complete(iiwa_session, tmp_path):
    session = load_session(iiwa_session)
    assert session.q.shape == (60, 7)
    assert len(set(session.pose_ids)) == 60
    assert len(session.tracker.targets) == 3 * 60  # every reflector seen at every pose
    # The folder can be moved: nothing in it points outside.
    moved = tmp_path / "moved"
    shutil.copytree(iiwa_session, moved)
    again = load_session(moved)
    np.testing.assert_array_equal(again.q, session.q)
    assert (moved / "truth" / "robot.urdf").is_file()
    # Joint angles stay inside the URDF limits.
    from rigs.kinematics import ArmModel

    chain = ArmModel.from_urdf(again.urdf_path, again.base_link, again.tip_link)
    assert np.all(session.q >= chain.lower) and np.all(session.q <= chain.upper)


def test_nominal_model_misses_by_millimetres_and_noise_is_at_tracker_level(iiwa_session):
    """The hidden errors make the problem real (1-3 mm), while the injected noise stays at tracker level."""
    session = load_session(iiwa_session)
    from rigs.kinematics import ArmModel

    chain = ArmModel.from_urdf(session.urdf_path, session.base_link, session.tip_link)
    predicted = []
    for index, target in zip(session.tracker.pose_index, session.tracker.targets):
        base_T_tip = chain.base_T_frame(session.q[index])
        predicted.append(base_T_tip[:3, :3] @ session.nominal_targets[target] + base_T_tip[:3, 3])
    predicted, measured = np.array(predicted), session.tracker.xyz
    # Best rigid registration of nominal predictions onto the measurements (Kabsch).
    pc, mc = predicted.mean(0), measured.mean(0)
    u, _, vt = np.linalg.svd((measured - mc).T @ (predicted - pc))
    rotation = u @ np.diag([1, 1, np.linalg.det(u @ vt)]) @ vt
    residual = (predicted - pc) @ rotation.T + mc - measured
    rms = np.sqrt((residual ** 2).sum(1).mean())
    assert 0.8e-3 < rms < 4e-3
    clean = np.loadtxt(iiwa_session / "truth" / "tracker_clean.csv", delimiter=",", skiprows=1, usecols=(2, 3, 4))
    noise = np.sqrt(((clean - measured) ** 2).sum(1).mean())
    assert 5e-6 < noise < 60e-6


def test_interrupted_capture_resumes_to_exactly_n_distinct_poses(tmp_path):
    rig = load_rig("iiwa-tracker")
    reference = capture_simulated(rig, 12, 7, tmp_path / "reference")

    def stop_after_five(done, total):
        if done == 5:
            raise KeyboardInterrupt

    out = tmp_path / "interrupted"
    with pytest.raises(KeyboardInterrupt):
        capture_simulated(rig, 12, 7, out, progress=stop_after_five)
    assert not out.exists() and partial_path(out).is_dir()
    assert len(load_partial_poses(partial_path(out))) == 5
    capture_simulated(rig, 12, 7, out, resume=True)
    resumed, expected = load_session(out), load_session(reference)
    assert resumed.pose_ids == expected.pose_ids
    assert len(set(resumed.pose_ids)) == 12
    np.testing.assert_array_equal(resumed.q, expected.q)
    np.testing.assert_array_equal(resumed.tracker.xyz, expected.tracker.xyz)


def load_partial_poses(folder: Path) -> list[str]:
    lines = (folder / "joints.csv").read_text().splitlines()[1:]
    return [line.split(",")[0] for line in lines]


def test_capture_follows_a_plan_and_keeps_its_extra_columns(tmp_path):
    rig = load_rig("iiwa-tracker")
    plan = tmp_path / "plan.csv"
    names = [f"lbr_iiwa_joint_{i}" for i in range(1, 8)]
    rows = ["iso_pose,pose," + ",".join(reversed(names))]
    for k, q in enumerate([[0.1, 0.5, 0.0, -1.0, 0.0, 0.6, 0.0], [0.3, 0.4, 0.1, -1.2, 0.2, 0.5, 0.1]]):
        rows.append(f"P{k + 1},a{k}," + ",".join(str(v) for v in reversed(q)))
    plan.write_text("\n".join(rows) + "\n")
    result = runner.invoke(app, ["capture", "--rig", "iiwa-tracker", "--plan", str(plan), "--out", str(tmp_path / "s"), "--json"])
    assert result.exit_code == 0, result.output
    session = load_session(tmp_path / "s")
    assert session.pose_ids == ["a0", "a1"]
    assert session.extra["iso_pose"] == ["P1", "P2"]
    np.testing.assert_allclose(session.q[1], [0.3, 0.4, 0.1, -1.2, 0.2, 0.5, 0.1])


def test_camera_rig_records_rgb_depth_and_segmentation(capture_session):
    session = load_session(capture_session("xarm6-cameras", 2, 3))
    assert sorted(session.cameras) == ["back", "front", "left", "right"]
    depth = session.image("front", session.pose_ids[0], "depth")
    rgb = session.image("front", session.pose_ids[0], "rgb")
    assert depth.shape == rgb.shape[:2] == (480, 640)
    seen = depth > 0
    assert 0.005 < seen.mean() < 0.5
    assert np.all((depth[seen] > 0.8) & (depth[seen] < 2.5))  # the arm is about 1.5 m away


def test_camera_rigs_state_the_surface_their_base_stands_on(capture_session):
    """No camera sees below the base, so a camera rig says where the surface it stands on is, at the
    lowest point of the description's base, and its sessions carry it (what the labels and the
    export's carving read)."""
    from rigs.link_meshes import link_meshes

    cameras = [name for name in builtin_rigs() if load_rig(name).cameras]
    assert {"xarm6-cameras", "xarm6-cameras-crashed", "panda-cameras", "xarm6-cameras-realsense"} <= set(cameras)
    for name in cameras:
        rig = load_rig(name)
        assert rig.scene is not None and rig.scene.mount_plane_z is not None, name
        base = link_meshes(rig.robot.urdf, [rig.robot.base_link], rig.robot.package_dirs, fold_fixed=False)
        lowest = float(base[rig.robot.base_link].vertices[:, 2].min())
        assert abs(lowest - rig.scene.mount_plane_z) < 1e-3, (name, lowest)
    session = load_session(capture_session("xarm6-cameras", 2, 3))
    assert session.mount_plane_z == 0.0


def test_crashed_rig_records_its_damage(capture_session):
    folder = capture_session("iiwa-tracker-crashed", 3, 1)
    damage = json.loads((folder / "truth" / "damage.json").read_text())
    assert damage["link"] == "lbr_iiwa_link_3" and damage["joint"] == "lbr_iiwa_joint_4"
    assert damage["angle_deg"] == pytest.approx(2.0)


def test_bad_rig_file_names_file_and_key(tmp_path):
    text = (Path(load_rig("iiwa-tracker").source)).read_text().replace("base_link =", "base_lnk =")
    rig_file = tmp_path / "rig.toml"
    rig_file.write_text(text)
    result = runner.invoke(app, ["capture", "--rig", str(rig_file), "--poses", "2", "--out", str(tmp_path / "s")])
    assert result.exit_code == 2
    assert "rig.toml" in result.output and "robot.base_l" in result.output
    assert not (tmp_path / "s").exists() and not partial_path(tmp_path / "s").exists()


def test_unknown_link_and_existing_output_are_refused(tmp_path):
    text = load_rig("iiwa-tracker").source.read_text().replace('tip_link = "lbr_iiwa_link_7"', 'tip_link = "flange"')
    rig_file = tmp_path / "rig.toml"
    rig_file.write_text(text)
    with pytest.raises(InputError, match="flange"):
        capture_simulated(load_rig(rig_file), 2, 0, tmp_path / "s")
    assert not (tmp_path / "s").exists() and not partial_path(tmp_path / "s").exists()
    (tmp_path / "exists").mkdir()
    result = runner.invoke(app, ["capture", "--rig", "iiwa-tracker", "--poses", "2", "--out", str(tmp_path / "exists")])
    assert result.exit_code == 2 and "already exists" in result.output


def test_same_rig_is_the_same_arm_across_sessions(capture_session):
    a = json.loads((capture_session("iiwa-tracker", 3, 1) / "truth" / "parameters.json").read_text())
    b = json.loads((capture_session("iiwa-tracker", 3, 2) / "truth" / "parameters.json").read_text())
    assert a["joints"] == b["joints"] and a["targets"] == b["targets"]
