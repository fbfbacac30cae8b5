"""A plant's fleet as one Ray job: six iiwa arms (one bent in a crash) and two broken rows are
calibrated in one run; each arm's folder is what `selfcal calibrate` writes, the broken rows fail
with their own sentences while the others finish, the bent arm is named by joint and link, no
intact arm is flagged, and --resume keeps exactly the results whose inputs did not change.

One local Ray instance serves the whole module (starting Ray costs seconds); the fleet commands
find it running and leave it so.
"""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from selfcal.cli import app

runner = CliRunner()
INTACT = 5
POSES = 12


# Fleets run on a local Ray instance, started once for the file's fleet runs; a fleet end to end is
# among the slow tests (the file's other tests need no Ray).
slow_fleet = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_instance():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="error")
    yield
    ray.shutdown()


def _capture(rig: str, arm_seed: int, poses: int, seed: int, out):
    from capture.simulate import capture_simulated
    from rigs import load_rig

    return capture_simulated(load_rig(rig), poses, seed, out, arm_seed=arm_seed)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, ray_instance):
    """FLEET.csv with five intact arms, arm6 crashed (link 3 bent 2 degrees), arm1 and arm6 with a held-out
    session, a row whose session is damaged and one whose options `selfcal calibrate` refuses."""
    root = tmp_path_factory.mktemp("fleet")
    rows = ["arm,sessions,validate,options"]
    for k in range(1, INTACT + 2):
        rig = "iiwa-tracker-crashed" if k == INTACT + 1 else "iiwa-tracker"
        _capture(rig, k, POSES, k, root / "sessions" / f"arm{k}")
        validate = ""
        if k in (1, INTACT + 1):
            _capture(rig, k, 6, 100 + k, root / "sessions" / f"arm{k}-check")
            validate = f"sessions/arm{k}-check"
        rows.append(f"arm{k},sessions/arm{k},{validate},--deflection none")
    damaged = root / "sessions" / "damaged"
    shutil.copytree(root / "sessions" / "arm2", damaged)
    lines = (damaged / "tracker.csv").read_text().splitlines()
    cells = lines[3].split(",")
    cells[-1] = "12,5 mm"  # a decimal comma and a unit, as a hand edit leaves it
    lines[3] = ",".join(f'"{c}"' if "," in c else c for c in cells)
    (damaged / "tracker.csv").write_text("\n".join(lines) + "\n")
    rows.append("broken,sessions/damaged,,--deflection none")
    rows.append("typo,sessions/arm3,,--deflection none --holdot 0.1")
    (root / "fleet.csv").write_text("\n".join(rows) + "\n")
    return root


@pytest.fixture(scope="module")
def first_run(fleet):
    result = runner.invoke(app, ["fleet", "calibrate", str(fleet / "fleet.csv"), "--out", str(fleet / "out"), "--json"])
    return result, json.loads(result.stdout)


@slow_fleet
def test_every_arm_gets_its_calibration_and_the_broken_rows_their_sentences(fleet, first_run):
    result, document = first_run
    assert result.exit_code == 1  # not every arm succeeded
    arms = document["arms"]
    assert sorted(arms) == sorted([f"arm{k}" for k in range(1, INTACT + 2)] + ["broken", "typo"])
    for k in range(1, INTACT + 2):
        record = arms[f"arm{k}"]
        assert record["status"] == "ok", record
        assert record["cpu_seconds"] > 0 and record["seconds"] > 0 and record["host"]
        for name in ("calibration.yaml", "robot.urdf", "report.html", "uncertainty.npz"):
            assert (fleet / "out" / f"arm{k}" / name).is_file()
    broken, typo = arms["broken"], arms["typo"]
    assert broken["status"] == typo["status"] == "failed"
    assert "tracker.csv" in broken["message"] and broken["message"].startswith("selfcal calibrate: ")
    assert "fleet.csv: line 9, options" in typo["message"] and "--holdot" in typo["message"]
    assert broken["exit_code"] == typo["exit_code"] == 2  # both refused as bad input, as the command refuses it
    assert all(arms[f"arm{k}"]["exit_code"] == 0 for k in range(1, INTACT + 2))
    assert not (fleet / "out" / "broken").exists() and not (fleet / "out" / "typo").exists()
    for record in arms.values():
        assert set(record) >= {"status", "message", "flagged", "flags"}
    assert document["summary"] == {"arms": INTACT + 3, "ok": INTACT + 1, "failed": 2, "flagged": 1, "reused": 0}
    assert (fleet / "out" / "index.html").is_file()
    assert json.loads((fleet / "out" / "fleet.json").read_text())["complete"] is True


@slow_fleet
def test_an_arms_folder_is_exactly_what_selfcal_calibrate_writes(fleet, first_run, monkeypatch):
    import yaml

    monkeypatch.chdir(fleet)  # the table names sessions relative to its folder, as a user in it would
    result = runner.invoke(app, ["calibrate", "sessions/arm1", "--out", str(fleet / "direct"), "--deflection", "none"])
    assert result.exit_code == 0, result.output
    by_fleet = yaml.safe_load((fleet / "out" / "arm1" / "calibration.yaml").read_text())
    direct = yaml.safe_load((fleet / "direct" / "calibration.yaml").read_text())
    for document in (by_fleet, direct):
        document.pop("solve")
    assert by_fleet == direct
    assert sorted(p.name for p in (fleet / "out" / "arm1").iterdir()) == sorted(p.name for p in (fleet / "direct").iterdir())


@slow_fleet
def test_the_bent_arm_is_named_by_joint_and_link_and_no_intact_arm_is_flagged(fleet, first_run):
    _, document = first_run
    damage = json.loads((fleet / "sessions" / f"arm{INTACT + 1}" / "truth" / "damage.json").read_text())
    bent = document["arms"][f"arm{INTACT + 1}"]
    assert bent["flagged"] and len(bent["flags"]) == 1
    assert bent["flag_details"][0]["joint"] == damage["joint"] == "lbr_iiwa_joint_4"
    assert bent["flag_details"][0]["link"] == damage["link"] == "lbr_iiwa_link_3"
    assert "joint lbr_iiwa_joint_4 placement 2.0" in bent["flags"][0] and "a bent lbr_iiwa_link_3?" in bent["flags"][0]
    angle = document["comparison"]["geometry"]["lbr_iiwa_joint_4.angle"]
    assert angle["z"][f"arm{INTACT + 1}"] > 2 * document["comparison"]["threshold"]
    for k in range(1, INTACT + 1):
        assert document["arms"][f"arm{k}"]["flagged"] is False
        assert document["arms"][f"arm{k}"]["flags"] == []
    intact_z = [abs(z) for spread in document["comparison"]["geometry"].values()
                for arm, z in spread["z"].items() if arm != f"arm{INTACT + 1}"]
    # Six arms give a rough spread (intact arms reached |z| 5.5 over four other draws of this fleet); a
    # hundred give a tight one (BENCHMARKS.md).
    assert max(intact_z) < document["comparison"]["threshold"]
    arm1 = document["arms"]["arm1"]["figures"]["accuracy"]
    assert arm1["source"] == "validation session" and arm1["rms_mm"] < 0.1 < arm1["nominal_rms_mm"]


def _page_text(path) -> tuple[list[str], str, list[str]]:
    """(section headings, visible text, table header cells) of an HTML report, by Python's own parser."""
    from html.parser import HTMLParser

    class Reader(HTMLParser):
        def __init__(self):
            super().__init__()
            self.headings, self.text, self.header_cells, self.tag, self.images = [], [], [], None, 0

        def handle_starttag(self, tag, attrs):
            self.tag = tag
            self.images += tag == "img" and dict(attrs).get("src", "").startswith("data:image/png;base64,")

        def handle_endtag(self, tag):
            self.tag = None

        def handle_data(self, data):
            if self.tag == "h2":
                self.headings.append(data)
            if self.tag == "th":
                self.header_cells.append(data)
            if self.tag not in ("style", "script"):
                self.text.append(data)

    reader = Reader()
    reader.feed(path.read_text(encoding="utf-8"))
    assert reader.images >= 2  # the accuracy plot and the axis-geometry plot
    return reader.headings, " ".join(" ".join(reader.text).split()), reader.header_cells


@slow_fleet
def test_the_fleet_report_gives_the_verdict_then_flags_failures_every_arm_and_the_distributions(fleet, first_run):
    _, document = first_run
    headings, text, header = _page_text(fleet / "out" / "index.html")
    assert headings[0] == "Verdict" and headings[:4] == ["Verdict", "Arms far from their siblings", "Arms that failed",
                                                         "Every arm"]
    assert {"The joint axes across the fleet", "The fit's own parameters across the fleet"} <= set(headings)
    assert f"{INTACT + 3} arms: {INTACT + 1} calibrated, 2 failed, 1 flagged against their siblings." in text
    bent = document["arms"][f"arm{INTACT + 1}"]
    assert " ".join(bent["flags"][0].split()) in text
    assert " ".join(document["arms"]["broken"]["message"].split()) in text
    assert "Threshold |z| > 8" in text
    for column in ("held-out RMS (mm)", "nominal (mm)", "identifiable", "condition", "outliers"):
        assert column in header
    for column in ("median", "robust sigma", "5 %", "95 %"):
        assert column in header
    # Per parameter, the fleet's distribution: every arm that calibrated, one row per parameter.
    parameters = document["comparison"]["parameters"]
    assert parameters and all(spread["n"] == INTACT + 1 for spread in parameters.values())
    assert next(iter(parameters)) in text
    arm1 = document["arms"]["arm1"]["figures"]
    assert arm1["identifiability"]["identifiable"] <= arm1["identifiability"]["parameters"]
    assert arm1["outliers"] >= 0


@slow_fleet
def test_resume_keeps_verified_results_and_redoes_what_changed(fleet, first_run):
    out = fleet / "out"
    before = json.loads((out / "fleet.json").read_text())
    result = runner.invoke(app, ["fleet", "calibrate", str(fleet / "fleet.csv"), "--out", str(out), "--resume", "--json"])
    document = json.loads(result.stdout)
    assert result.exit_code == 1
    # Nothing that succeeded is recomputed; a failed arm runs again (its failure may have been the worker's).
    assert document["ran"] == ["broken"]
    assert document["summary"]["reused"] == INTACT + 1
    for k in range(1, INTACT + 2):
        assert document["arms"][f"arm{k}"]["result_hash"] == before["arms"][f"arm{k}"]["result_hash"]
    assert document["arms"][f"arm{INTACT + 1}"]["flagged"]

    # A changed option, a result folder someone edited, a fixed row: those three run, nothing else.
    table = (fleet / "fleet.csv").read_text()
    table = table.replace("arm2,sessions/arm2,,--deflection none", "arm2,sessions/arm2,,--deflection none --seed 4")
    table = table.replace("--holdot 0.1", "--holdout 0.1")
    (fleet / "fleet.csv").write_text(table)
    (out / "arm3" / "report.html").unlink()
    result = runner.invoke(app, ["fleet", "calibrate", str(fleet / "fleet.csv"), "--out", str(out), "--resume", "--json"])
    document = json.loads(result.stdout)
    assert sorted(document["ran"]) == ["arm2", "arm3", "broken", "typo"]
    assert document["arms"]["typo"]["status"] == "ok" and (out / "typo" / "calibration.yaml").is_file()
    assert (out / "arm3" / "report.html").is_file()
    assert document["arms"]["arm2"]["result_hash"] != before["arms"]["arm2"]["result_hash"]
    assert document["summary"]["failed"] == 1 and result.exit_code == 1  # the damaged session still fails


@slow_fleet
def test_an_interrupted_fleet_continues_where_it_stopped(fleet, tmp_path):
    """Ctrl-C after the first arm finishes: that arm's folder and record stay, the others are pending;
    --resume runs only the others."""
    from selfcal.fleet.compare import add_calibration_comparison
    from selfcal.fleet.engine import RaySettings
    from selfcal.fleet.run import CALIBRATE, run_fleet

    for k in (1, 2, 3):
        shutil.copytree(fleet / "sessions" / f"arm{k}", tmp_path / "sessions" / f"arm{k}")
    table = tmp_path / "fleet.csv"
    table.write_text("arm,sessions,options\n" + "".join(f"arm{k},sessions/arm{k},--deflection none\n" for k in (1, 2, 3)))

    def stop_after_first(done, running, failed, total):
        if done >= 1:
            raise KeyboardInterrupt

    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        run_fleet(CALIBRATE, table, out, RaySettings(cpus_per_arm=2), progress=stop_after_first)  # one arm at a time
    record = json.loads((out / "fleet.json").read_text())
    assert record["complete"] is False
    finished = [arm for arm, entry in record["arms"].items() if entry["status"] == "ok"]
    pending = [arm for arm, entry in record["arms"].items() if entry["status"] == "pending"]
    assert len(finished) == 1 and len(pending) == 2 and "--resume" in record["arms"][pending[0]]["message"]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == finished
    document = run_fleet(CALIBRATE, table, out, RaySettings(), resume=True, compare=add_calibration_comparison)
    assert sorted(document["ran"]) == sorted(pending) and document["summary"]["reused"] == 1
    assert document["complete"] and document["summary"]["ok"] == 3


@slow_fleet
def test_a_crashed_worker_fails_only_its_arm(fleet, tmp_path):
    """A task whose worker dies outright (a segfault, the OOM killer) is that arm's failure."""
    import ray.cloudpickle

    from selfcal.fleet.engine import RaySettings, run_arms

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    outcomes = []
    jobs = [({"arm": name}, lambda: b"") for name in ("a", "dies", "b")]
    run_arms(iter(jobs), 3, RaySettings(cpus_per_arm=1), outcomes.append, task=_die_for_one)
    by_arm = {outcome["arm"]: outcome for outcome in outcomes}
    assert by_arm["a"]["status"] == by_arm["b"]["status"] == "ok"
    assert by_arm["dies"]["status"] == "failed" and "did not finish" in by_arm["dies"]["message"]
    assert "exit_code" not in by_arm["dies"] or by_arm["dies"]["exit_code"] is None


def _die_for_one(job: dict, blob: bytes) -> dict:
    import os

    if job["arm"] == "dies":
        os._exit(3)
    return {"arm": job["arm"], "status": "ok", "message": None, "outputs": {}, "result": None}


@slow_fleet
def test_sessions_travel_as_bytes_without_truth_and_the_task_needs_no_shared_disk(fleet, tmp_path):
    """A worker gets the sessions only as bytes: the arm calibrates with the original folders gone,
    and a fit's input never carries truth/ (a held-out session does: evaluation reads it)."""
    import io
    import tarfile

    from selfcal.fleet.records import shipped_folders
    from selfcal.fleet.run import CALIBRATE, _arm_jobs
    from selfcal.fleet.table import ArmRow
    from selfcal.fleet.tasks import run_arm

    copy = tmp_path / "copy"
    shutil.copytree(fleet / "sessions" / "arm1", copy / "sessions" / "arm1")
    shutil.copytree(fleet / "sessions" / "arm1-check", copy / "sessions" / "arm1-check")
    row = ArmRow("arm1", 2, ["sessions/arm1"], "sessions/arm1-check", ["--deflection", "none"])
    (job, make_blob), = _arm_jobs(CALIBRATE, [row], copy, 1, None)
    blob = make_blob()
    names = tarfile.open(fileobj=io.BytesIO(blob)).getnames()
    assert "sessions/arm1/joints.csv" in names and not any(n.startswith("sessions/arm1/truth") for n in names)
    assert "sessions/arm1-check/truth/tracker_clean.csv" in names
    shutil.rmtree(copy)
    outcome = run_arm(job, blob)
    assert outcome["status"] == "ok", outcome["message"]
    assert outcome["outputs"]["validate"]["floor_rms_mm"] is not None  # the held-out truth came along
    assert set(shipped_folders(row, fleet)[0]) == {"sessions/arm1"}


@slow_fleet
def test_a_command_that_crashes_is_its_arms_sentence(monkeypatch, fleet):
    from selfcal.fleet import commands, tasks
    from selfcal.fleet.archive import pack

    def crash(argv):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(commands, "run_selfcal", crash)
    job = {"kind": "calibrate", "arm": "arm1", "sessions": ["s"], "validate": None, "options": []}
    outcome = tasks.run_arm(job, pack({"s": fleet / "sessions" / "arm1"}))
    assert outcome["status"] == "failed"
    assert outcome["message"] == "selfcal calibrate crashed (ZeroDivisionError: float division by zero)."
    assert outcome["exit_code"] is None
    assert "Traceback" in outcome["traceback"]


@slow_fleet
def test_progress_counts_done_running_and_failed(fleet, tmp_path):
    from selfcal.fleet.compare import add_calibration_comparison
    from selfcal.fleet.engine import RaySettings
    from selfcal.fleet.run import CALIBRATE, run_fleet

    table = tmp_path / "fleet.csv"
    shutil.copytree(fleet / "sessions" / "arm1", tmp_path / "sessions" / "arm1")
    table.write_text("arm,sessions,options\nok1,sessions/arm1,--deflection none\nmissing,sessions/none,\n")
    seen = []
    document = run_fleet(CALIBRATE, table, tmp_path / "out", RaySettings(), progress=lambda *state: seen.append(state),
                         compare=add_calibration_comparison)
    assert seen[0][0] >= 1 and seen[0][2] == 1  # the missing row counts as done and failed from the start
    assert seen[-1] == (2, 0, 1, 2)
    assert all(0 <= running <= 2 for _, running, _, _ in seen)
    assert document["comparison"]["types"][0]["compared"] is False  # one arm has no siblings to compare with


def test_capture_arm_seed_is_one_physical_arm_whatever_the_pose_seed(tmp_path):
    a = _capture("iiwa-tracker", 11, 3, 1, tmp_path / "a")
    again = _capture("iiwa-tracker", 11, 3, 2, tmp_path / "again")
    other = _capture("iiwa-tracker", 12, 3, 1, tmp_path / "other")
    crashed = _capture("iiwa-tracker-crashed", 11, 3, 3, tmp_path / "crashed")
    truth = {name: json.loads((tmp_path / name / "truth" / "parameters.json").read_text())
             for name in ("a", "again", "other", "crashed")}
    deltas = {name: np.array([j["placement_delta"] for j in t["joints"].values()]) for name, t in truth.items()}
    assert np.array_equal(deltas["a"], deltas["again"]) and np.array_equal(deltas["a"], deltas["crashed"])
    assert not np.allclose(deltas["a"], deltas["other"])
    assert truth["crashed"]["damage"] and not truth["a"]["damage"]
    assert json.loads((a / "session.json").read_text())["source"]["arm_seed"] == 11
    assert again.exists() and other.exists() and crashed.exists()


def test_capture_resume_refuses_another_arm(tmp_path):
    from capture.simulate import partial_path

    out = tmp_path / "s"
    result = runner.invoke(app, ["capture", "--rig", "iiwa-tracker", "--arm-seed", "5", "--poses", "3", "--out", str(out)])
    assert result.exit_code == 0, result.output
    out.rename(partial_path(out))  # as if interrupted after its last pose
    result = runner.invoke(app, ["capture", "--rig", "iiwa-tracker", "--arm-seed", "6", "--poses", "3", "--out", str(out),
                                 "--resume"])
    assert result.exit_code == 2 and "--arm-seed" in result.output and "arm 5" in result.output


# -- self-models ------------------------------------------------------------------------------------

BOX_RIG = __import__("pathlib").Path(__file__).parent / "data" / "selfmodel" / "two_joint_box.toml"


@slow_fleet
def test_a_fleet_of_self_models_trains_evaluates_and_checks_each_arm(tmp_path, ray_instance):
    """Two box arms train (3 steps), one is evaluated on a held-out session with truth, each is checked
    against its URDF; a row whose options the trainer refuses fails with the trainer's sentence."""
    for k in (1, 2):
        _capture(str(BOX_RIG), k, 3, k, tmp_path / "sessions" / f"box{k}")
    _capture(str(BOX_RIG), 1, 1, 50, tmp_path / "sessions" / "box1-check")
    (tmp_path / "fleet.csv").write_text("arm,sessions,validate,options\n"
                                        "box1,sessions/box1,sessions/box1-check,--steps 3\n"
                                        "box2,sessions/box2,,--steps 3\n"
                                        "odd,sessions/box2,,--steps 3 --kind blob\n")
    result = runner.invoke(app, ["fleet", "selfmodel", str(tmp_path / "fleet.csv"), "--out", str(tmp_path / "out"), "--json"])
    document = json.loads(result.stdout)
    assert result.exit_code == 1
    box1, box2, odd = (document["arms"][name] for name in ("box1", "box2", "odd"))
    assert box1["status"] == box2["status"] == "ok" and odd["status"] == "failed"
    # The trainer's parser lists --kind's values, so the row is refused by name before any training.
    assert "line 4, options" in odd["message"] and "'blob' is not one of" in odd["message"]
    assert box1["figures"]["chamfer_l1_mm"] > 0 and box2["figures"]["chamfer_l1_mm"] is None
    assert {"box", "upper"} <= set(box1["figures"]["links"]) and box1["figures"]["steps"] == 3
    assert "fewer than 5 arms" in box1["figures"]["damage"]
    assert document["ray"]["gpus_per_arm"] == 0 and "no GPU" in document["ray"]["gpus_why"]
    model = tmp_path / "out" / "box1"
    assert (model / "weights.pt").is_file() and (model / "config.json").is_file()
    # The model records its training session where it really is, as a training run into DIR/box1 would.
    from selfmodel.model.folder import training_session_paths

    assert training_session_paths(model) == [(tmp_path / "sessions" / "box1").resolve()]
    assert (tmp_path / "out" / "index.html").is_file()

    # Resume: the two models are verified and kept, the refused row is refused again, and an arm whose
    # options changed trains again.
    before = {arm: document["arms"][arm]["result_hash"] for arm in ("box1", "box2")}
    table = (tmp_path / "fleet.csv").read_text().replace("box2,sessions/box2,,--steps 3", "box2,sessions/box2,,--steps 4")
    (tmp_path / "fleet.csv").write_text(table)
    result = runner.invoke(app, ["fleet", "selfmodel", str(tmp_path / "fleet.csv"), "--out", str(tmp_path / "out"),
                                 "--resume", "--json"])
    document = json.loads(result.stdout)
    # The refused row is checked again (and refused again) before anything runs.
    assert result.exit_code == 1 and sorted(document["ran"]) == ["box2"]
    assert document["arms"]["odd"]["status"] == "failed" and "'blob'" in document["arms"]["odd"]["message"]
    assert document["arms"]["box1"]["reused"] and document["arms"]["box1"]["result_hash"] == before["box1"]
    assert document["arms"]["box2"]["figures"]["steps"] == 4 and document["arms"]["box2"]["result_hash"] != before["box2"]
    assert document["summary"] == {"arms": 3, "ok": 2, "failed": 1, "flagged": 0, "reused": 1}


def test_the_terminal_bar_counts_done_running_and_failed(monkeypatch):
    import io

    from rich.console import Console

    from selfcal import cli_fleet

    screen = io.StringIO()
    monkeypatch.setattr(cli_fleet, "err_console", Console(file=screen, force_terminal=True, width=120))
    with cli_fleet.fleet_progress("fleet calibrate") as update:
        update(3, 2, 1, 10)
    shown = screen.getvalue()
    assert "fleet calibrate" in shown and "3/10" in shown and "done, 2 running, 1 failed" in shown

    monkeypatch.setattr(cli_fleet, "err_console", Console(file=io.StringIO(), force_terminal=False))
    with cli_fleet.fleet_progress("fleet calibrate") as update:
        assert update is None  # in logs: no bar, the summary alone


def test_a_link_far_above_its_siblings_deviation_is_flagged():
    from selfcal.fleet.selfmodels import add_selfmodel_comparison

    rng = np.random.default_rng(3)
    arms = {}
    for k in range(8):
        bent = k == 5
        check = [{"link": "link2", "deviation_mm": float(5 + rng.normal(0, 0.8)), "kind": "shape"},
                 {"link": "link3", "deviation_mm": float((40 if bent else 12) + rng.normal(0, 1.0)), "kind": "joint joint4"}]
        arms[f"x{k}"] = {"status": "ok", "outputs": {"train": {"steps": 10}, "check": check,
                                                     "eval": {"chamfer_l1_mm": 4.0 + rng.normal(0, 0.3)}}}
    document = {"arms": arms}
    add_selfmodel_comparison(document, None, None)
    flagged = {arm for arm, record in document["arms"].items() if record["flagged"]}
    assert flagged == {"x5"}
    assert "x5: link3 deviates" in document["arms"]["x5"]["flags"][0] and "a bent link3?" in document["arms"]["x5"]["flags"][0]
    assert document["arms"]["x5"]["figures"]["damage"].startswith("link3 far from its siblings")
    assert document["arms"]["x0"]["figures"]["damage"] == "no link far from its siblings"


def test_a_gpu_is_asked_for_only_where_the_cluster_has_one_and_the_trainer_can_use_it():
    from selfcal.fleet.commands import accepts_option
    from selfcal.fleet.selfmodels import gpu_plan

    assert gpu_plan(0, True)[0] == 0 and gpu_plan(4, False)[0] == 0 and gpu_plan(4, True)[0] == 1
    assert "no --device option" in gpu_plan(4, False)[1]
    assert accepts_option(["selfmodel", "train"], "--threads")
    assert not accepts_option(["calibrate"], "--threads")


# -- the comparison, on figures made to order -------------------------------------------------------

def _axis_figures(rng, joints, twist: dict | None = None, rms_mm: float = 0.03) -> dict:
    """One arm's figures as :func:`selfcal.fleet.compare.arm_figures` returns them: every axis figure a
    little noise about the description, ``twist`` adding degrees to some joints' turns."""
    geometry = {}
    for i, joint in enumerate(joints):
        kinds = (["angle", "distance"] if i else []) + (["offset", "twist"] if 0 < i < len(joints) - 1 else [])
        for kind in kinds:
            unit = "deg" if kind in ("angle", "twist") else "mm"
            value = float(rng.normal(0, 0.001 if unit == "deg" else 0.004))
            if kind == "twist" and twist and joint in twist:
                value += twist[joint]
            geometry[f"{joint}.{kind}"] = {"joint": joint, "kind": kind, "value": value, "unit": unit}
    return {"accuracy": {"source": "validation session", "rms_mm": rms_mm * float(np.exp(rng.normal(0, 0.05))),
                         "nominal_rms_mm": 1.0},
            "identifiability": {"identifiable": 30, "parameters": 36, "condition_number": 50.0}, "outliers": 0,
            "geometry": geometry, "parameters": {}, "joints": list(joints),
            "parent_links": {joint: f"link{i}" for i, joint in enumerate(joints)}, "type": ["base", "tip", *joints]}


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_slipped_zero_and_a_poor_accuracy_are_named_and_nothing_else(seed):
    """A turn about joint j2's axis alone names j2's zero (whichever pair along the axis the noise makes
    larger); an arm twenty times less accurate than its siblings is flagged for its accuracy."""
    from selfcal.fleet.compare import THRESHOLD, compare_calibrations

    rng = np.random.default_rng(seed)
    joints = ["j0", "j1", "j2", "j3", "j4"]
    figures = {f"a{k}": _axis_figures(rng, joints) for k in range(10)}
    figures["zero"] = _axis_figures(rng, joints, twist={"j2": 0.5})
    figures["loose"] = _axis_figures(rng, joints, rms_mm=0.6)
    result = compare_calibrations(figures)
    flagged = {arm for arm, entry in result["arms"].items() if entry["flags"]}
    assert flagged == {"zero", "loose"}
    zero = result["arms"]["zero"]
    assert len(zero["flags"]) == 1 and zero["flag_details"][0]["joint"] == "j2"
    assert zero["flags"][0].startswith("zero: joint j2 zero 0.50 degrees") and "slipped encoder" in zero["flags"][0]
    # Either link along j2 bent about j2's axis looks like the slipped zero: both are named.
    assert zero["flag_details"][0]["links"] == ["link2", "link3"] and "link2 or link3 bent" in zero["flags"][0]
    loose = result["arms"]["loose"]
    assert [d["kind"] for d in loose["flag_details"]] == ["accuracy"]
    assert loose["flags"][0].startswith("loose: held-out RMS 0.") and "against the fleet median 0.0" in loose["flags"][0] and f"threshold {THRESHOLD:g}" in loose["flags"][0]
    assert result["accuracy"]["median_rms_mm"] == pytest.approx(0.03, rel=0.2)
    spread = result["geometry"]["j2.twist"]
    assert spread["n"] == 12 and abs(spread["median"]) < 0.01 and spread["max"] == pytest.approx(0.5, abs=0.01)


def test_arms_of_another_type_or_too_few_are_not_compared():
    from selfcal.fleet.compare import MIN_ARMS, compare_calibrations

    rng = np.random.default_rng(5)
    figures = {f"a{k}": _axis_figures(rng, ["j0", "j1", "j2", "j3"]) for k in range(6)}
    figures.update({f"b{k}": _axis_figures(rng, ["k0", "k1", "k2"], twist={"k1": 3.0} if k == 0 else None)
                    for k in range(MIN_ARMS - 1)})
    result = compare_calibrations(figures)
    compared = {tuple(t["arms"]): t["compared"] for t in result["types"]}
    assert compared == {tuple(f"a{k}" for k in range(6)): True, tuple(f"b{k}" for k in range(MIN_ARMS - 1)): False}
    assert not any(entry["flags"] for entry in result["arms"].values())  # b0's turn has no siblings to stand out from
    assert not any(name.startswith("k") for name in result["geometry"])
