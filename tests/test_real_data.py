"""Calibration data as plants record them: partial sweeps (only some joints move), measured joint
torques with their own sign convention, validation on another day with the tracker moved."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from selfcal.cli import app

runner = CliRunner()
HELD = np.array([0.0, 0.0, 0.3, -1.2, 0.2, 0.9, 0.4])  # joints 3-7 held here in a first recording


def two_joint_plan(seed: int, count: int, spread_all: float = 0.0):
    """Poses moving joints 1 and 2 only (the others held at HELD), or all of them by ``spread_all`` rad."""
    from capture.poses import Plan

    rng = np.random.default_rng(seed)
    q = np.tile(HELD, (count, 1))
    q[:, 0] = rng.uniform(-1.5, 1.5, count)
    q[:, 1] = rng.uniform(-0.9, 0.9, count)
    if spread_all:
        q[:, 2:] += rng.uniform(-spread_all, spread_all, (count, 5))
    return Plan([f"p{i:04d}" for i in range(count)], q, {})


@pytest.fixture(scope="module")
def partial(tmp_path_factory):
    from capture.simulate import capture_simulated
    from rigs import load_rig

    root = tmp_path_factory.mktemp("partial")
    rig = load_rig("iiwa-tracker")
    fit = capture_simulated(rig, 0, 1, root / "fit", plan=two_joint_plan(1, 50))
    check = capture_simulated(rig, 0, 2, root / "check", plan=two_joint_plan(2, 40))
    away = capture_simulated(rig, 0, 3, root / "away", plan=two_joint_plan(3, 20, spread_all=0.5))
    cal = root / "cal"
    result = runner.invoke(app, ["calibrate", str(fit), "--out", str(cal), "--deflection", "none"])
    assert result.exit_code == 0, result.output
    return {"fit": fit, "check": check, "away": away, "cal": cal, "output": result.output, "root": root}


def test_a_two_joint_sweep_fits_what_it_determines_and_says_what_keeps_nominal(partial):
    assert ("joints lbr_iiwa_joint_3 to lbr_iiwa_joint_7 did not move (readings span under 0.5 deg): their zero "
            "offsets and placements keep their nominal values") in partial["output"]
    document = yaml.safe_load((partial["cal"] / "calibration.yaml").read_text())
    validity = document["validity"]["joints"]
    assert [validity[f"lbr_iiwa_joint_{j}"]["moved"] for j in range(1, 8)] == [True, True] + [False] * 5
    assert validity["lbr_iiwa_joint_4"]["min"] == pytest.approx(-1.2, abs=1e-3)
    assert validity["lbr_iiwa_joint_1"]["max"] - validity["lbr_iiwa_joint_1"]["min"] > 2.5
    assert document["identifiability"]["full"] is False
    report = (partial["cal"] / "report.html").read_text()
    assert "Partial excitation: joints lbr_iiwa_joint_3 to lbr_iiwa_joint_7 did not move" in report
    assert "Validity envelope" in report
    for j in range(3, 8):  # the still joints keep the nominal URDF's values exactly
        joint = document["joints"][f"lbr_iiwa_joint_{j}"]
        assert joint["zero_offset"] == 0.0 and joint["delta_twist"] == [0.0] * 6


def test_inside_its_envelope_a_partial_calibration_validates_at_the_noise_floor(partial):
    result = runner.invoke(app, ["validate", str(partial["cal"]), str(partial["check"]), "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert figures["envelope_warning"] is None
    assert figures["rms_mm"] <= 1.2 * figures["floor_rms_mm"]
    assert figures["rms_mm"] < 0.6 * figures["nominal_rms_mm"]


def test_validate_and_predict_warn_outside_the_envelope(partial, tmp_path):
    result = runner.invoke(app, ["validate", str(partial["cal"]), str(partial["away"])])
    assert result.exit_code == 0, result.output
    assert "warning: " in result.output and "lie outside the calibration's validity envelope" in result.output
    joints = tmp_path / "q.csv"
    names = [f"lbr_iiwa_joint_{j}" for j in range(1, 8)]
    inside, outside = HELD.copy(), HELD.copy()
    outside[3] += 0.4
    joints.write_text("name," + ",".join(names) + "\n" + "\n".join(
        f"{label}," + ",".join(f"{v:.6f}" for v in q) for label, q in (("in", inside), ("out", outside))) + "\n")
    result = runner.invoke(app, ["predict", str(partial["cal"]), "--joints", str(joints)])
    assert result.exit_code == 0, result.output
    assert "1 of 2 poses of" in result.output and "worst: lbr_iiwa_joint_4" in result.output
    result = runner.invoke(app, ["predict", str(partial["cal"]), "--joints", str(joints), "--json"])
    assert "worst: lbr_iiwa_joint_4" in json.loads(result.stdout)["envelope_warning"]


def test_require_full_refuses_a_partial_sweep_in_one_sentence(partial):
    out = partial["root"] / "refused"
    result = runner.invoke(app, ["calibrate", str(partial["fit"]), "--out", str(out), "--require-full"])
    assert result.exit_code == 2, result.output
    assert ("--require-full: joints lbr_iiwa_joint_3 to lbr_iiwa_joint_7 did not move (readings span under 0.5 deg)"
            in result.output)
    assert "Traceback" not in result.output and not out.exists()


def test_a_broken_validity_entry_is_named(partial, tmp_path):
    import shutil

    from calib.calibration import Calibration
    from rigs.errors import InputError

    copy = tmp_path / "cal"
    shutil.copytree(partial["cal"], copy)
    document = yaml.safe_load((copy / "calibration.yaml").read_text())
    document["validity"]["joints"]["lbr_iiwa_joint_2"]["min"] = 5.0
    (copy / "calibration.yaml").write_text(yaml.safe_dump(document))
    with pytest.raises(InputError, match="validity.joints.lbr_iiwa_joint_2"):
        Calibration.load(copy)


# -- validation on another day: the tracker moved, a reflector the fit never saw -------------------
def moved_rig(tmp_path: Path, rig: str = "iiwa-tracker") -> Path:
    """A tracker rig with its tracker 10 mm away and turned about 2 degrees."""
    from rigs import load_rig

    text = Path(load_rig(rig).source).read_text()
    moved = (text.replace(f'name = "{rig}"', f'name = "{rig}-moved"')
             .replace("xyz = [2.6, 1.2, 0.7]", "xyz = [2.606, 1.208, 0.7]")
             .replace("look_at = [0.0, 0.0, 0.6]", "look_at = [0.0, 0.118, 0.6]"))
    assert moved.count("2.606") == 1 and "0.118" in moved
    path = tmp_path / f"{rig}-moved.toml"
    path.write_text(moved)
    return path


@pytest.fixture(scope="module")
def another_day(tmp_path_factory, capture_session):
    import csv

    from capture.simulate import capture_simulated
    from rigs import load_rig

    root = tmp_path_factory.mktemp("another-day")
    fit = capture_session("iiwa-tracker", 60, 1)
    before = capture_session("iiwa-tracker", 40, 7)
    after = capture_simulated(load_rig(moved_rig(root)), 40, 7, root / "after")
    # A calibration that never saw reflector smr3: the fit session without its rows.
    two = root / "two-reflectors"
    import shutil

    shutil.copytree(fit, two)
    with open(fit / "tracker.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    with open(two / "tracker.csv", "w", newline="") as handle:
        csv.writer(handle).writerows([rows[0]] + [r for r in rows[1:] if r[rows[0].index("target")] != "smr3"])
    cals = {}
    for name, session in (("cal", fit), ("cal2", two)):
        cals[name] = root / name
        result = runner.invoke(app, ["calibrate", str(session), "--out", str(cals[name]), "--deflection", "none"])
        assert result.exit_code == 0, result.output
    return {"before": before, "after": after, **cals, "root": root}


def _validate(*arguments) -> dict:
    result = runner.invoke(app, ["validate", *map(str, arguments), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_validate_register_gives_the_error_from_before_the_tracker_moved(another_day):
    before = _validate(another_day["cal"], another_day["before"])
    after = _validate(another_day["cal"], another_day["after"], "--register", "tracker")
    assert after["registration"]["tracker_moved_mm"] == pytest.approx(10.0, abs=0.5)
    assert after["registration"]["tracker_turned_deg"] == pytest.approx(2.0, abs=0.2)
    assert after["rms_mm"] == pytest.approx(before["rms_mm"], rel=0.05)
    assert after["unregistered"]["rms_mm"] > 50 * after["rms_mm"]  # the stored placement is 10 mm off
    # The nominal URDF is registered the same way: its figure does not move with the tracker either.
    assert after["nominal_rms_mm"] == pytest.approx(before["nominal_rms_mm"], rel=0.05)
    assert after["rms_mm"] < 0.1 * after["nominal_rms_mm"]


def test_validate_register_registers_a_six_dof_tracker_too(capture_session, tmp_path):
    from capture.simulate import capture_simulated
    from rigs import load_rig

    fit, before = capture_session("iiwa-tracker6d", 40, 1), capture_session("iiwa-tracker6d", 30, 8)
    after = capture_simulated(load_rig(moved_rig(tmp_path, "iiwa-tracker6d")), 30, 8, tmp_path / "after")
    cal = tmp_path / "cal"
    result = runner.invoke(app, ["calibrate", str(fit), "--out", str(cal), "--deflection", "none"])
    assert result.exit_code == 0, result.output
    plain = _validate(cal, before)
    registered = _validate(cal, after, "--register", "tracker")
    assert registered["registration"]["tracker_moved_mm"] == pytest.approx(10.0, abs=0.5)
    # Refitting 6 numbers on the evaluated poses can only match or beat the stored placement's
    # figure from before the move; both sit near the probe's noise floor.
    assert registered["rms_mm"] <= 1.05 * plain["rms_mm"] and registered["rms_mm"] < 1.3 * registered["floor_rms_mm"]
    assert registered["angle_rms_deg"] <= 1.05 * plain["angle_rms_deg"]
    assert registered["unregistered"]["rms_mm"] > 50 * registered["rms_mm"]
    assert registered["nominal_rms_mm"] == pytest.approx(plain["nominal_rms_mm"], rel=0.05)


def test_registration_poses_are_left_out_of_the_figures(another_day):
    names = [f"p{i:04d}" for i in range(5)]
    after = _validate(another_day["cal"], another_day["after"], "--register", "tracker", "--registration-poses", ",".join(names))
    assert after["registration"]["poses"] == names and after["registration"]["evaluated_poses"] == 35
    assert after["n"] == 35 * 3
    assert after["rms_mm"] < 1.3 * after["floor_rms_mm"]


def test_a_validation_only_reflector_is_located_on_the_registration_poses(another_day):
    truth = json.loads((another_day["after"] / "truth" / "parameters.json").read_text())["targets"]["smr3"]
    names = ",".join(f"p{i:04d}" for i in range(8))
    result = _validate(another_day["cal2"], another_day["after"], "--register", "tracker", "--registration-poses", names)
    # Its offset is in the calibration's tip frame (whose place along the last axis the reflectors
    # fix), so it agrees with the true offset to a millimetre, and predicts to the noise floor.
    assert np.linalg.norm(np.array(result["located"]["smr3"]) - np.array(truth)) < 1e-3
    assert result["n"] == 32 * 3 and result["rms_mm"] < 1.3 * result["floor_rms_mm"]
    assert result["rms_mm_by_reflector"]["smr3"] < 1.3 * result["floor_rms_mm"]


def test_a_validation_only_reflector_is_located_from_a_home_measurement(another_day):
    result = _validate(another_day["cal2"], another_day["after"], "--register", "tracker", "--locate-poses", "p0000")
    assert result["registration"]["locating_poses"] == ["p0000"] and result["n"] == 39 * 3
    assert result["rms_mm_by_reflector"]["smr3"] < 2.5 * result["floor_rms_mm"]  # one pose: its noise stays in
    assert result["rms_mm_by_reflector"]["smr1"] < 1.3 * result["floor_rms_mm"]


@pytest.mark.parametrize("extra, words", [
    (["--register", "tracker", "--registration-poses", "p0000,nope"], "--registration-poses: pose 'nope' is not a pose of"),
    (["--register", "tracker", "--registration-poses", "p0000,p0001"], "registering the tracker needs at least 3"),
    ([], "tracker target 'smr3' is not a reflector of the calibration; name the poses that locate it"),
    (["--register", "tracker", "--locate-poses", "p0000,p9999"], "--locate-poses: pose 'p9999' is not a pose of"),
])
def test_registration_refusals_are_one_sentence(another_day, extra, words):
    result = runner.invoke(app, ["validate", str(another_day["cal2"]), str(another_day["after"]), *extra])
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output


# -- measured joint torques drive deflection --------------------------------------------------------
def rig_variant(tmp_path: Path, name: str, **replacements) -> Path:
    from rigs import load_rig

    text = Path(load_rig("iiwa-tracker-torques").source).read_text().replace(
        'name = "iiwa-tracker-torques"', f'name = "{name}"')
    for old, new in replacements.items():
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def torque_sessions(capture_session):
    return {kg: capture_session("iiwa-tracker-torques", 50, seed, kg) for seed, kg in ((1, 0.0), (2, 2.5), (3, 5.0))}


def test_measured_torques_drive_compliance_when_the_urdf_masses_are_wrong(torque_sessions, tmp_path):
    from calib.calibration import Calibration
    from calib.calibrator import Calibrator
    from calib.workflows.validate import validate
    from capture.session import load_session

    fit = [torque_sessions[0.0], torque_sessions[2.5]]
    truth = json.loads((torque_sessions[0.0] / "truth" / "parameters.json").read_text())
    true_compliance = 1.0 / np.array(truth["stiffness_nm_per_rad"])
    measured = Calibrator(deflection="compliance", torques="measured").fit(fit)
    modelled = Calibrator(deflection="compliance", torques="model").fit(fit)
    assert measured.torque_model is not None and modelled.torque_model is None
    # Joint 2 holds the largest gravity torque: measured torques give its compliance to a few %;
    # joints 3 and 4 hold less, their compliance is within its reported uncertainty.
    assert measured.compliance[1] == pytest.approx(true_compliance[1], rel=0.03)
    assert np.all(np.abs(measured.compliance[2:4] - true_compliance[2:4]) < 4 * measured.compliance_std[2:4])
    assert measured.compliance[0] == 0.0  # the vertical first axis holds nothing above the sensor noise
    unseen = load_session(torque_sessions[5.0])  # a payload neither fit saw
    with_measured, with_model = validate(measured, unseen), validate(modelled, unseen)
    assert with_measured["rms_mm"] < with_model["rms_mm"]
    assert with_measured["rms_mm"] < 1.1 * with_measured["floor_rms_mm"]
    measured.save(tmp_path)
    document = yaml.safe_load((tmp_path / "calibration.yaml").read_text())
    assert document["deflection"]["torques"]["source"] == "measured"
    loaded = Calibration.load(tmp_path)
    q = unseen.q[:5]
    assert np.allclose(loaded.gravity_torques(q, 3.0), measured.gravity_torques(q, 3.0), atol=1e-9)
    assert validate(loaded, unseen)["rms_mm"] == pytest.approx(with_measured["rms_mm"], rel=1e-6)


def test_torques_of_the_opposite_sign_are_refused_until_flipped(tmp_path):
    from capture.simulate import capture_simulated
    from rigs import load_rig

    rig = load_rig(rig_variant(tmp_path, "iiwa-flipped", **{"sign = 1": "sign = -1"}))
    session = capture_simulated(rig, 30, 4, tmp_path / "flipped")
    out = tmp_path / "cal"
    result = runner.invoke(app, ["calibrate", str(session), "--out", str(out), "--deflection", "compliance"])
    assert result.exit_code == 2, result.output
    assert "the measured joint torques correlate negatively" in result.output
    assert "pass --flip-torque-sign to use them" in result.output and not out.exists()
    result = runner.invoke(app, ["calibrate", str(session), "--out", str(out), "--deflection", "compliance",
                                 "--flip-torque-sign"])
    assert result.exit_code == 0, result.output
    document = yaml.safe_load((out / "calibration.yaml").read_text())
    assert document["deflection"]["torques"] == dict(document["deflection"]["torques"], source="measured", sign=-1)


def test_compliance_without_inertials_or_measured_torques_is_refused(capture_session, tmp_path):
    import re
    import shutil

    session = tmp_path / "bare"
    shutil.copytree(capture_session("iiwa-tracker", 30, 5), session)
    urdf = (session / "robot.urdf").read_text()
    (session / "robot.urdf").write_text(re.sub(r"<inertial>.*?</inertial>", "", urdf, flags=re.S))
    out = tmp_path / "cal"
    result = runner.invoke(app, ["calibrate", str(session), "--out", str(out), "--deflection", "compliance"])
    assert result.exit_code == 2, result.output
    assert "has no link inertials, so the arm's gravity torques are zero and joint compliance cannot be fitted" \
        in result.output
    assert not out.exists()
    result = runner.invoke(app, ["calibrate", str(session), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    table = json.loads(result.stdout)["deflection_heldout_comparison"]
    assert "URDF has no link inertials" in table["compliance"]["note"]


# -- the arm's gravity parameters and payloads from torques ----------------------------------------
@pytest.fixture(scope="module")
def dynamics_dir(torque_sessions, tmp_path_factory):
    out = tmp_path_factory.mktemp("dynamics") / "dyn"
    result = runner.invoke(app, ["dynamics", "fit", str(torque_sessions[0.0]), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "The identified model explains the measured joint torques to" in result.output
    return out


def test_dynamics_fit_explains_the_torques_to_the_sensor_noise(dynamics_dir, torque_sessions):
    import pinocchio as pin

    from calib.dynamics.model import IdentifiedDynamics
    from capture.session import load_session

    # The folder stands alone: its robot.urdf loads in Pinocchio, the model predicts the torques.
    assert pin.buildModelFromUrdf(str(dynamics_dir / "robot.urdf")).nq == 7
    session = load_session(torque_sessions[0.0])
    predicted = IdentifiedDynamics.load(dynamics_dir).predict(session.q)
    assert np.sqrt(np.mean((predicted - session.joint_efforts) ** 2)) < 1.3 * 0.1
    document = yaml.safe_load((dynamics_dir / "dynamics.yaml").read_text())
    assert document["rms_nm"] < 1.3 * 0.1  # the rig's sensors: 0.1 N m noise
    assert document["urdf_rms_nm"] > 5 * document["rms_nm"]  # its URDF's masses are 40 % off
    assert document["sign"]["used"] == 1 and document["sign"]["correlation_with_urdf"]
    assert "rotational inertias keep the URDF's values" in document["identifiability"]["fixed"]
    assert (dynamics_dir / "report.html").read_text().count("<table>") >= 2


@pytest.mark.parametrize("kg", [2.5, 5.0])
def test_payload_mass_and_centre_of_mass_from_torques(dynamics_dir, torque_sessions, tmp_path, kg):
    out = tmp_path / "payload"
    result = runner.invoke(app, ["dynamics", "payload", str(torque_sessions[kg]), "--dynamics", str(dynamics_dir),
                                 "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["mass_kg"] == pytest.approx(kg, rel=0.02)
    assert np.linalg.norm(np.array(payload["com"]) - [0.0, 0.0, 0.08]) < 5e-3  # the rig's payload_com
    assert payload["mass_std_kg"] < 0.02 and max(payload["com_std"]) < 3e-3
    assert all(j["after_rms_nm"] < 0.2 for j in payload["per_joint"].values())
    assert yaml.safe_load((out / "payload.yaml").read_text())["mass_kg"] == payload["mass_kg"]


def test_an_identified_payload_saves_and_loads_back_the_same_and_no_payload_too(dynamics_dir, torque_sessions, tmp_path):
    from calib.dynamics.model import IdentifiedDynamics
    from calib.dynamics.payload import IdentifiedPayload, PayloadIdentifier
    from capture.session import load_session
    from rigs.errors import InputError

    dynamics = IdentifiedDynamics.load(dynamics_dir)
    for kg in (0.0, 2.5):
        identified = PayloadIdentifier().fit(load_session(torque_sessions[kg]), dynamics)
        assert (identified.com is None) == (kg == 0.0)
        folder = tmp_path / f"p{kg:g}"
        folder.mkdir()
        identified.save(folder, report=False)
        back = IdentifiedPayload.load(folder)
        assert back.document() == identified.document()
    # A stricter "no payload" setting is the identifier's and the result's: it says so, and keeps it.
    strict = PayloadIdentifier(no_payload_sigmas=1e6).fit(load_session(torque_sessions[2.5]), dynamics)
    assert strict.com is None and "within 1e+06 standard deviations" in strict.verdict()
    with pytest.raises(InputError, match="no_payload_sigmas should be a positive number"):
        PayloadIdentifier(no_payload_sigmas=0)
    text = (tmp_path / "p2.5" / "payload.yaml").read_text()
    (tmp_path / "p2.5" / "payload.yaml").write_text("\n".join(line for line in text.splitlines() if not line.startswith("poses:")))
    with pytest.raises(InputError, match=r"payload.yaml: key 'poses' is missing"):
        IdentifiedPayload.load(tmp_path / "p2.5")


def test_the_identified_payload_feeds_deflection(torque_sessions, dynamics_dir, tmp_path):
    calibration = tmp_path / "cal"
    result = runner.invoke(app, ["calibrate", str(torque_sessions[0.0]), str(torque_sessions[2.5]), "--out",
                                 str(calibration), "--deflection", "compliance"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["dynamics", "payload", str(torque_sessions[5.0]), "--dynamics", str(dynamics_dir),
                                 "--out", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    joints = tmp_path / "q.csv"
    names = [f"lbr_iiwa_joint_{j}" for j in range(1, 8)]
    joints.write_text("name," + ",".join(names) + "\nbent," + ",".join(["0.3", "0.8", "0", "-0.6", "0", "0.5", "0"]) + "\n")

    def tip(*extra):
        out = runner.invoke(app, ["predict", str(calibration), "--joints", str(joints), "--json", *extra])
        assert out.exit_code == 0, out.output
        return np.array([[r["x"], r["y"], r["z"]] for r in json.loads(out.stdout)["points"] if r["point"] == "tip"][0])

    identified, stated, empty = tip("--payload-file", str(tmp_path / "p" / "payload.yaml")), tip("--payload", "5"), tip()
    assert np.linalg.norm(identified - stated) < 5e-6  # the identified payload is the 5 kg one
    assert np.linalg.norm(identified - empty) > 5e-5  # and 5 kg sags the arm visibly
    targets = tmp_path / "targets.csv"
    targets.write_text(f"name,x,y,z\nt0,{identified[0]:.6f},{identified[1]:.6f},{identified[2]:.6f}\n")

    def corrected(*extra):
        out = runner.invoke(app, ["correct", str(calibration), "--targets", str(targets), "--json", *extra])
        assert out.exit_code == 0, out.output
        return np.array(json.loads(out.stdout)["rows"][0]["q"])

    assert np.allclose(corrected("--payload-file", str(tmp_path / "p" / "payload.yaml")), corrected("--payload", "5"),
                       atol=2e-5)
    result = runner.invoke(app, ["predict", str(calibration), "--joints", str(joints), "--payload", "1",
                                 "--payload-file", str(tmp_path / "p" / "payload.yaml")])
    assert result.exit_code == 2 and "give --payload or --payload-file, not both" in result.output


def test_dynamics_refusals_are_one_sentence(capture_session, dynamics_dir, tmp_path):
    plain = capture_session("iiwa-tracker", 30, 5)
    for argv, words in ((["dynamics", "fit", str(plain), "--out", str(tmp_path / "d")],
                         "has no measured joint torques (effort_<joint> columns, N m)"),
                        (["dynamics", "payload", str(plain), "--dynamics", str(dynamics_dir)],
                         "has no measured joint torques"),
                        (["dynamics", "payload", str(plain), "--dynamics", str(tmp_path)],
                         "not a dynamics folder, dynamics.yaml is missing")):
        result = runner.invoke(app, argv)
        assert result.exit_code == 2, result.output
        assert words in result.output and "Traceback" not in result.output
    assert not (tmp_path / "d").exists()


def test_moving_poses_identify_friction_per_joint(tmp_path):
    """Velocity and acceleration columns in a plan: the simulator adds the arm's inertia and joint
    friction to the torques it records, and the dynamics fit identifies viscous and Coulomb terms."""
    from calib.dynamics.identification import ArmDynamics
    from capture.poses import Plan
    from capture.simulate import capture_simulated
    from rigs import load_rig

    rig = load_rig("iiwa-tracker-torques")
    rng = np.random.default_rng(3)
    count, names = 120, [f"lbr_iiwa_joint_{j}" for j in range(1, 8)]
    q = rng.uniform(-1.2, 1.2, (count, 7))
    velocity = rng.uniform(-0.8, 0.8, (count, 7))
    acceleration = rng.uniform(-1.0, 1.0, (count, 7))
    extra = {f"velocity_{n}": [f"{v:.6f}" for v in velocity[:, j]] for j, n in enumerate(names)}
    extra.update({f"acceleration_{n}": [f"{a:.6f}" for a in acceleration[:, j]] for j, n in enumerate(names)})
    session = capture_simulated(rig, 0, 4, tmp_path / "moving", plan=Plan([f"p{i:04d}" for i in range(count)], q, extra))
    dynamics = ArmDynamics().fit([session])
    assert dynamics.friction
    viscous = np.array([dynamics.theta[dynamics.names.index(f"viscous.{n}")] for n in names])
    coulomb = np.array([dynamics.theta[dynamics.names.index(f"coulomb.{n}")] for n in names])
    assert np.allclose(viscous, rig.truth.torques.viscous, atol=0.15)
    assert np.allclose(coulomb, rig.truth.torques.coulomb, atol=0.1)
    assert dynamics.summary["rms_nm"] < 1.3 * rig.truth.torques.noise


@pytest.mark.parametrize("line, value, words", [
    ("sign = 1", "sign = 2", "key 'truth.torques.sign' should be 1 or -1, got 2"),
    ("noise_nm = 0.1", "noise_nm = -0.1", "key 'truth.torques.noise_nm' should not be negative"),
    ("mass_error = 0.4", "mass_error = 1.5", "key 'truth.mass_error' should be a fraction in [0, 1)"),
])
def test_a_bad_torque_sensing_spec_is_named(tmp_path, line, value, words):
    from rigs import load_rig
    from rigs.errors import InputError

    with pytest.raises(InputError, match=re.escape(words)):
        load_rig(rig_variant(tmp_path, "iiwa-bad", **{line: value}))
