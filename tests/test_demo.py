"""The README's main command: the whole story, quick edition, as a new user would run it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest


class Sections(HTMLParser):
    """The page's sections: heading and the text of what follows it, tags apart."""

    def __init__(self):
        super().__init__()
        self.sections: list[list] = []
        self.in_heading = False
        self.in_pre = False
        self.hidden = False

    def handle_starttag(self, tag, attrs):
        self.hidden = tag in ("script", "style")  # a 3D view's data and client: not text a person reads
        if tag == "h2":
            self.in_heading = True
            self.sections.append(["", "", []])
        elif tag == "pre":
            self.in_pre = True
        elif self.sections and tag == "p":
            self.sections[-1][2].append(dict(attrs).get("class", ""))

    def handle_endtag(self, tag):
        self.in_heading = self.in_heading and tag != "h2"
        self.hidden = False

    def handle_data(self, data):
        if self.sections and not self.hidden:
            self.sections[-1][0 if self.in_heading else 1] += data


def assert_a_person_can_read(index: str) -> None:
    """No raw JSON on the page, and each job's section opens with its verdict."""
    parser = Sections()
    parser.feed(index)
    assert not parser.in_pre, "a <pre> block on the page"
    for heading, text, paragraphs in parser.sections:
        assert not re.search(r'[{\[]\s*"\w+"\s*:', text), f"raw JSON in section {heading!r}"
        assert "_mm" not in text and "_pct" not in text, f"a JSON key as a label in {heading!r}"
        if heading[:1].isdigit():  # a job's section
            assert paragraphs and "verdict" in paragraphs[0], f"section {heading!r} does not open with its verdict"
            assert re.match(r"\s*(PASS|FAIL|CANNOT TELL):", text), f"section {heading!r}: {text[:80]!r}"


@pytest.mark.slow  # the whole demo, every job end to end: five minutes on two cores
def test_quick_demo_runs_every_step_and_links_every_report(tmp_path):
    out = tmp_path / "demo"
    # The timeout only catches a hang: the quick demo takes about 3 minutes on an idle 2-core machine
    # and over 15 on a busy one, and a correct run must not fail for being slow.
    process = subprocess.run([sys.executable, "-m", "selfcal.cli", "demo", "--quick", "--out", str(out), "--json"],
                             capture_output=True, text=True, timeout=3600)
    assert process.returncode == 0, process.stderr[-3000:]
    figures = json.loads(process.stdout)
    index = (out / "index.html").read_text()
    # Every link on the index page points at a file the demo wrote.
    links = re.findall(r'href="([^"]+)"', index)
    assert len(links) >= 10
    for link in links:
        assert (out / link).is_file(), link
    assert index.count("<img") >= 1 and (out / "selfmodel-and-collision.png").stat().st_size > 10_000
    assert_a_person_can_read(index)
    assert {link for link in links if link.startswith("results/")} >= {
        f"results/{name}.json" for name in ("calibrate", "validate", "audit", "recalibrate", "eval", "check")}
    # The story's numbers: calibration beats the nominal URDF by far, the crash is found, the body is learned.
    validate = figures["validate"]
    assert validate["rms_mm"] < 0.1 < validate["nominal_rms_mm"]
    assert validate["verdict"]["result"] == "PASS" and figures["audit"]["verdict"]["result"] == "PASS"
    recalibration = figures["recalibrate"]
    assert recalibration["changed"][0]["joint"] == "lbr_iiwa_joint_4"
    assert "bent lbr_iiwa_link_3" in recalibration["summary"][0]
    audit = figures["audit"]["models"]
    assert max(p["AP_mm"] for p in audit["calibrated"]["poses"]) < max(p["AP_mm"] for p in audit["nominal"]["poses"])
    # The demo's xArm6 is the crashed rig (link3 bent 3 degrees): the damage check names it with its bend.
    check = figures["check"]
    assert check["verdict"]["result"] == "FAIL" and check["verdict"]["reason"].startswith("link3 is bent"), check["verdict"]
    assert abs(check["links"][0]["bend_deg"] - 3.0) < 0.6, check["links"][0]
    assert (out / "collision" / "robot.urdf").is_file() and (out / "collision" / "curobo_spheres.yml").is_file()
    assert not list(tmp_path.glob(".demo*"))  # no temporary folder left behind


def test_the_index_page_opens_each_job_with_its_verdict_and_shows_no_json(tmp_path):
    """The page from command outputs of the shape each command prints (fast; the demo above runs them for real)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rigs.verdicts import Tolerance, judge
    from selfcal.demo import Step, write_index

    def verdict(value, tolerance):
        return judge("RMS error", value, Tolerance(tolerance, "mm", "default: 2 x the tracker")).as_dict()

    poses = [{"pose": f"P{k}", "AP_mm": 0.01 * k, "RP_mm": 0.04, "RP_instrument_mm": 0.05} for k in range(1, 6)]
    figures = {
        "calibrate": {"verdict": verdict(0.025, 0.046)},
        "validate": {"verdict": verdict(0.023, 0.047), "rms_mm": 0.023, "nominal_rms_mm": 1.37, "floor_rms_mm": 0.022},
        "audit": {"verdict": verdict(0.05, 0.075), "tracker_uncertainty_mm": 0.03,
                  "models": {"nominal": {"poses": [dict(p, AP_mm=1.0) for p in poses]}, "calibrated": {"poses": poses}}},
        "recalibrate": {"verdict": verdict(0.5, 0.05), "summary": ["lbr_iiwa_joint_4's placement rotated: a bent link"],
                        "accuracy": {"before_rms_mm": 14.1, "after_holdout_rms_mm": 0.5}},
        "eval": {"verdict": {"result": "CANNOT TELL", "reason": "no figure", "tolerance": None}, "chamfer_l1_mm": 8.1,
                 "chamfer_pct_workspace": 0.6, "false_free_rate": 0.004},
        "export": {"margin_mm": 4.0, "links": {"link1": {"pieces": 3, "spheres": 12}}, "truth": {"pieces": {"coverage": 0.99}}},
        "check": {"verdict": verdict(13.6, 11.0), "links": [
            {"link": "link3", "deviation_mm": 13.6, "kind": "joint joint4", "where_link": [0, 0, 0.3], "bend_deg": 2.9},
            {"link": "link6", "deviation_mm": 9.0, "kind": "added matter", "where_link": [0, 0, 0]}]},
    }
    figure, axis = plt.subplots()
    axis.plot([0, 1])
    figure.savefig(tmp_path / "body.png")
    # A real export (of the tiny two-joint arm): section 4 shows it in 3D, the picture where scripting is off.
    shutil.copytree(Path(__file__).parent / "data" / "view" / "collision", tmp_path / "collision")
    write_index(tmp_path, [Step("calibrate the iiwa", ["calibrate", "sessions/iiwa"], seconds=1.0)], figures,
                {"body": "body.png"})
    index = (tmp_path / "index.html").read_text()
    assert_a_person_can_read(index)
    assert "chamfer" not in index.lower().replace("chamfer-l1", "")  # labelled in words, not by its key
    assert "RMS error on 3D points of fresh poses, calibrated" in index and "0.023 mm" in index
    assert 'href="results/validate.json"' in index and 'href="results/check.json"' in index
    assert "joint4 turned 2.90 deg" in index and "matter the URDF lacks" in index
    assert index.count("class='selfcal-scene'") == 1 and "<noscript><img" in index
    # A page that dumped JSON, or a section without a verdict, is caught.
    try:
        assert_a_person_can_read(index.replace("</h2>", '</h2><p>{"rms_mm": 0.02}</p>', 1))
    except AssertionError:
        pass
    else:
        raise AssertionError("raw JSON went unnoticed")
